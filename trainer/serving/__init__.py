"""Serving a model with vLLM, the pieces every backend shares: `args` (the server's arguments and what
is read off the model for them), `client` (readiness polling, requests, the smoke test) and `local`
(the local backend: vLLM on loopback, run_local's). The choice of backend and the one `deploy()` for
all of them are trainer.deploy's (one module per backend), above this package and trainer.k8s: nothing
here imports a backend.
"""
