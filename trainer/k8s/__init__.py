"""Kubernetes plumbing that the cluster backends share (they live one level up, a module each: trainer.launch's
pytorchjob and trainjob, trainer.deploy's deployment, kserve and llmisvc): the pieces of their pods
(`podspec.py`), the API calls around their objects (`lifecycle.py`: client, create or replace, readiness, logs,
failure report), reaching a pod or Service from here (`reach.py`) and the API server's own rules (`rules.py`), the
last shared by every caller.

The in-pod recipe (train, data, checkpoint, evaluate, merge) lives below and never imports this package.
"""
