"""Kubernetes control plane: one module per backend (PyTorchJob, TrainJob, vLLM Deployment,
KServe, Model Registry) on what they share: the pieces of their pods (`podspec.py`), the API
calls around their objects (`lifecycle.py`: client, create or replace, readiness, logs, failure
report) and the API server's own rules (`rules.py`), the last shared by every caller.

The in-pod recipe (train, data, checkpoint, evaluate, merge) lives one level up and never
imports this package. Which backend runs a job or serves a model is chosen above it: trainer.launch.launcher,
trainer.deploy.backend.
"""
