"""Kubernetes control plane: one module per backend (PyTorchJob, TrainJob, vLLM Deployment,
KServe, Model Registry) plus the API server's own rules (`rules.py`) shared by every caller.

The in-pod recipe (train, data, checkpoint, evaluate, merge) lives one level up and never
imports this package.
"""
