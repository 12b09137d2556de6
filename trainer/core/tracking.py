"""MLflow tracking of a fine-tune and an evaluation; on when MLFLOW_TRACKING_URI is set, off (a no-op that never
imports mlflow: the training image need not have it) when it is not.

Turned on by the environment alone, as KFP 2.17's MLflow plugin sets it on a cluster (MLFLOW_TRACKING_URI, and
MLFLOW_RUN_ID: the task's nested run), or by hand:
  MLFLOW_TRACKING_URI=http://127.0.0.1:5000 python -m pipelines.run_local
The run is MLFLOW_RUN_ID's when set (left running: its owner ends it), else a new one in MLFLOW_EXPERIMENT_NAME's
experiment (created if missing; the server's default experiment without it), ended by `close()`.

What is logged (docs/mlflow.md): the fine-tune's settings as params and its per-step losses (rank 0,
trainer/recipe/train.py); the evaluation's metrics, the gate's verdict as tags and its reports as artifacts
(components/evaluate.py). Tracking never fails or stalls the work it watches: every call is bounded by MLflow's
own HTTP limits (BOUNDS, unless already set), and the first failure prints one warning and turns tracking off
for the rest of the process.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from trainer.core.errors import brief

URI = "MLFLOW_TRACKING_URI"
RUN_ID = "MLFLOW_RUN_ID"
EXPERIMENT = "MLFLOW_EXPERIMENT_NAME"
# MLflow's defaults wait 120 s per request and retry 7 times with exponential backoff: minutes per call against
# a server that does not answer. These bound a call to about 10-25 s; a value the user set is kept.
BOUNDS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
}
# What a training pod gets from the step that starts it (trainer.k8s): where to log and the limits, no
# credentials (MLFLOW_TRACKING_TOKEN / _PASSWORD would sit in plain text in the job's spec).
FORWARDED = (URI, RUN_ID, EXPERIMENT, *BOUNDS)
# Params named like credentials are never logged (the training config holds none today: S3 keys and tokens come
# from the environment), nor the user:password part of a URL.
_SECRET_NAME = re.compile(r"secret|token|password|passwd|credential|access_key|api_key", re.IGNORECASE)
# A URL's user info: everything from :// to its last '@' before a query or fragment (a password may hold '@' and
# '/', which end the host early for a stricter pattern and left half of it printed)
_USERINFO = re.compile(r"(?<=://)[^\s?#]*@")
# A query parameter named like a credential (?token=..., &api_key=...): its value
_SECRET_QUERY = re.compile(
    r"([?&][^=&#\s]*(?:token|password|passwd|secret|credential|key|sig|signature)[^=&#\s]*=)[^&#\s]*", re.IGNORECASE
)
# What MLflow tracks to (mlflow.tracking._tracking_service.utils and its store registry): a tracking server, a local
# folder or a database; "databricks" alone is a profile
SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")
# MLflow's own basic-auth settings: a URL's user and password go there instead of into every URL MLflow prints
USERNAME, PASSWORD = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"


def redacted(text: str) -> str:
    """`text` without the user:password of any URL in it, nor the value of a query parameter named like a
    credential (?token=...)."""
    return _SECRET_QUERY.sub(r"\1***", _USERINFO.sub("", text))


def uri_problem(uri: str) -> str:
    """Why MLflow cannot track to `uri` (MLFLOW_TRACKING_URI), with the fix; '' when it can (or it is unset).
    Checked at validate and before every tracker starts: a URI without a scheme (localhost:5000), with one MLflow
    has no store for (ftp:, a typo) or an empty file: path made MLflow raise inside the finetune step."""
    uri = uri.strip()
    if not uri or uri == "databricks":
        return ""
    from trainer.core.settings import url_problem

    shown = f"{URI}={redacted(uri)!r}"
    scheme, sep, rest = uri.partition(":")
    base = scheme.split("+", 1)[0].lower()
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme) or (base not in SCHEMES and rest.isdigit()):
        host = redacted(uri).split("/", 1)[0]
        return (
            f"{shown} has no scheme MLflow tracks to: give the server's URL, e.g. http://{host}, or "
            "file:///an/absolute/folder for a local store; or unset it to turn tracking off"
        )
    if base not in SCHEMES:
        return (
            f"{shown}: MLflow has no tracking store for scheme {scheme!r}; give http(s):// (a tracking server), "
            f"file:///an/absolute/folder, or a database URI ({', '.join(s for s in SCHEMES[3:] if s != 'databricks')}); "
            "or unset it to turn tracking off"
        )
    if base in ("http", "https") and (bad := url_problem(_USERINFO.sub("", uri))):
        return f"{shown} is no server URL ({bad}): e.g. http://127.0.0.1:5000"
    if base == "file" and not rest.lstrip("/"):
        return f"{shown} names no folder: give file:///an/absolute/folder"
    return ""


def _split_credentials(uri: str) -> tuple[str, str, str]:
    """(the URI without user info, user, password): MLflow takes them from USERNAME / PASSWORD."""
    found = re.match(r"([A-Za-z][A-Za-z0-9+.-]*://)([^\s?#]*)@(.*)", uri, re.S)
    if not found:
        return uri, "", ""
    user, _, password = found.group(2).partition(":")
    return found.group(1) + found.group(3), user, password


def forwarded_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The tracking settings a process this one starts elsewhere (a training pod) needs: empty when tracking is off.
    The URI without its user info: a pod spec is plain text, credentials come from a Secret (USERNAME, PASSWORD)."""
    if not environ.get(URI):
        return {}
    out = {name: environ[name] for name in FORWARDED if environ.get(name)}
    out[URI] = _split_credentials(out[URI])[0]
    return out


class Tracker:
    """One MLflow run to log to, or nothing (`Tracker()`: every method a no-op). Make it with `from_env`."""

    def __init__(self, client: Any = None, run_id: str = "", uri: str = "", owns_run: bool = False):
        self.client, self.run_id, self.uri, self.owns_run = client, run_id, uri, owns_run

    @property
    def on(self) -> bool:
        return self.client is not None

    @classmethod
    def from_env(cls, run_name: str = "") -> Tracker:
        """The run the environment names (module docstring); off when MLFLOW_TRACKING_URI is unset, when mlflow is
        not installed or when the server does not answer (one warning line each)."""
        uri = os.environ.get(URI, "").strip()
        if not uri:
            return cls()
        for name, value in BOUNDS.items():
            os.environ.setdefault(name, value)  # MLflow reads them at each request
        # user:password@ moved to MLflow's own settings, so that no URL MLflow prints ("View run ... at") holds them
        uri, user, password = _split_credentials(uri)
        if user and not os.environ.get(USERNAME):
            os.environ[USERNAME] = user
        if password and not os.environ.get(PASSWORD):
            os.environ[PASSWORD] = password
        os.environ[URI] = uri  # what this process's children (torchrun's) read
        tracker = cls(uri=uri)
        if problem := uri_problem(uri):
            tracker._warn(problem, "fix MLFLOW_TRACKING_URI as it says, or unset it")
            return tracker
        try:
            # Imported here, not at the top: only a process that tracks needs mlflow (the training image may lack it).
            from mlflow import MlflowClient
        except ImportError:
            tracker._warn("mlflow is not installed here", "pip install mlflow-skinny, or unset MLFLOW_TRACKING_URI")
            return tracker
        try:
            tracker.client = MlflowClient(tracking_uri=uri)
        except Exception as err:  # noqa: BLE001 - MLflow's store registry refusing the URI: never the run's end
            tracker._warn(f"{type(err).__name__}: {brief(err, 160)}", "check MLFLOW_TRACKING_URI, or unset it")
            return tracker
        run_id = os.environ.get(RUN_ID, "")
        tracker._call(
            tracker._open,
            run_id,
            os.environ.get(EXPERIMENT, ""),
            run_name,
            fix=f"and that MLFLOW_RUN_ID={run_id} names a run there" if run_id else "",
        )
        return tracker

    def _open(self, run_id: str, experiment: str, run_name: str) -> None:
        if run_id:
            self.run_id = self.client.get_run(run_id).info.run_id  # also the check that the server answers
            return
        experiment_id = "0"  # the server's Default experiment
        if experiment:
            found = self.client.get_experiment_by_name(experiment)
            experiment_id = found.experiment_id if found else self._create_experiment(experiment)
        self.run_id = self.client.create_run(experiment_id, run_name=run_name or None).info.run_id
        self.owns_run = True

    def _create_experiment(self, name: str) -> str:
        from mlflow.exceptions import MlflowException  # mlflow is imported by now (from_env)

        try:
            return self.client.create_experiment(name)
        except MlflowException:  # a parallel step (a sweep's trials) created it first
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def share(self) -> None:
        """Processes this one starts (torchrun's, a job's pods: `forwarded_env`) log to this run; where tracking
        failed here, they do not try the same server again."""
        if self.on:
            os.environ[RUN_ID] = self.run_id
        elif self.uri:
            os.environ.pop(URI, None)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """`params` as the run's params (values as text), without any that look like credentials."""
        if self.on:
            from mlflow.entities import Param

            kept = [Param(k, redacted(str(v))) for k, v in params.items() if not _SECRET_NAME.search(k)]
            self._call(self.client.log_batch, self.run_id, params=kept)

    def log_metrics(self, metrics: Mapping[str, float], step: int = 0) -> None:
        """Numbers at `step` (a fine-tune's optimizer step; 0 for a step's final figures)."""
        if self.on and metrics:
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            self._call(
                self.client.log_batch, self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()]
            )

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        if self.on and tags:
            from mlflow.entities import RunTag

            self._call(self.client.log_batch, self.run_id, tags=[RunTag(k, redacted(str(v))) for k, v in tags.items()])

    def log_artifact(self, path: str, artifact_path: str | None = None) -> None:
        """A file (a report) into the run's artifacts, under `artifact_path`."""
        if self.on:
            self._call(self.client.log_artifact, self.run_id, path, artifact_path)

    def close(self, failed: bool = False) -> None:
        """Ends the run if this tracker started it (MLFLOW_RUN_ID's belongs to its owner); then off. Idempotent."""
        if self.on and self.owns_run:
            self._call(self.client.set_terminated, self.run_id, "FAILED" if failed else "FINISHED")
        self.client = None

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, kind, *_) -> None:
        self.close(failed=kind is not None)

    def _call(self, fn, *args, fix: str = "", **kwargs) -> None:
        """`fn` against the server; its first failure turns tracking off for the rest of this process (`fix`: what
        else to check)."""
        try:
            fn(*args, **kwargs)
        # Any error of the client, the network or the server (MlflowException, requests' and urllib3's, OSError):
        # tracking is an observer and must not end the training or evaluation it watches. Said once, below.
        except Exception as err:  # noqa: BLE001
            self.client = None
            self._warn(
                f"{type(err).__name__}: {brief(err, 160)}",
                "check that the server is up and reachable from "
                f"here (curl $MLFLOW_TRACKING_URI/health){f' {fix}' if fix else ''}, or unset "
                "MLFLOW_TRACKING_URI to turn tracking off",
            )

    def _warn(self, problem: str, fix: str) -> None:
        self.client = None
        print(
            f"WARNING: MLflow tracking at {redacted(self.uri)} is off for the rest of this process "
            f"({redacted(problem)}): {fix}",
            file=sys.stderr,
            flush=True,
        )
