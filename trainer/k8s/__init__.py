"""Kubernetes control plane: one module per backend (PyTorchJob, TrainJob, vLLM Deployment,
KServe, Model Registry) on what they share: the pieces of their pods (`podspec.py`), the API
calls around their objects (`lifecycle.py`: client, create or replace, readiness, logs, failure
report) and the API server's own rules (`rules.py`), the last shared by every caller.

The in-pod recipe (train, data, checkpoint, evaluate, merge) lives one level up and never
imports this package.
"""


def launcher_for(name: str):
    """The launcher class for a cluster launcher name (each backend imported only when used)."""
    if name in ("pytorchjob", "kubernetes"):
        from trainer.k8s.pytorchjob import PyTorchJobLauncher

        return PyTorchJobLauncher
    if name == "trainjob":
        from trainer.k8s.trainjob import TrainJobLauncher

        return TrainJobLauncher
    raise ValueError(f"no cluster launcher named {name!r}")
