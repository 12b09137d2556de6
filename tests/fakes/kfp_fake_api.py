"""A fake Kubeflow Pipelines v2beta1 REST API on loopback, for the real `kfp.Client`.

Keeps pipelines, versions, experiments, runs and recurring runs in memory and records
every request; runs advance PENDING -> RUNNING -> `final_state` over successive reads.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.fake_http import LoopbackServer, RoutedHandler, calls

API = "/apis/v2beta1"


@dataclass
class KfpState:
    pipelines: dict[str, dict] = field(default_factory=dict)
    versions: dict[str, list[dict]] = field(default_factory=dict)  # pipeline id -> versions
    uploads: dict[str, bytes] = field(default_factory=dict)  # version id -> uploaded package
    experiments: dict[str, dict] = field(default_factory=dict)
    runs: dict[str, dict] = field(default_factory=dict)
    recurring: dict[str, dict] = field(default_factory=dict)
    run_reads: dict[str, int] = field(default_factory=dict)
    final_state: str = "SUCCEEDED"
    healthz_status: int = 200  # 401: an endpoint that wants a token
    multi_user: bool = False  # Kubeflow with profiles: experiments carry a namespace
    login_page: bool = False  # a gateway (Dex, oauth2-proxy) answering with its login page
    requests: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def calls(self, method: str, pattern: str):
        return calls(self, method, pattern)


def _display_name_filter(query: dict) -> str | None:
    preds = json.loads(query.get("filter") or "{}").get("predicates", [])
    return next(
        (p.get("string_value") or p.get("stringValue") for p in preds if p.get("key") in ("display_name", "name")), None
    )


# The filter keys KFP's API server takes for recurring runs (backend/src/apiserver/model/job.go,
# jobAPIToModelFieldMap): any other key is HTTP 400, which would fail every --recurring submit.
RECURRING_RUN_FILTER_KEYS = {
    "id",
    "recurring_run_id",
    "name",
    "display_name",
    "created_at",
    "updated_at",
    "description",
}


class KfpHandler(RoutedHandler):
    state: KfpState
    routes = [
        ("healthz", rf"^{API}/healthz$"),
        ("upload", rf"^{API}/pipelines/upload$"),
        ("upload_version", rf"^{API}/pipelines/upload_version$"),
        ("versions", rf"^{API}/pipelines/([^/]+)/versions$"),
        ("pipelines", rf"^{API}/pipelines$"),
        ("experiments", rf"^{API}/experiments$"),
        ("runs", rf"^{API}/runs(?:/([^/:]+))?$"),
        ("recurring_runs", rf"^{API}/recurringruns$"),
    ]

    def healthz(self, method, *, query, body):
        if self.state.login_page:
            return 200, "<html><body>Log in to Kubeflow</body></html>"
        return self.state.healthz_status, {"multi_user": self.state.multi_user}

    def _new_version(self, pipeline_id: str, name: str, body: Any) -> dict:
        version = {
            "pipeline_id": pipeline_id,
            "pipeline_version_id": str(uuid.uuid4()),
            "display_name": name,
            "created_at": "2026-11-22T00:00:00Z",
        }
        self.state.versions.setdefault(pipeline_id, []).insert(0, version)  # newest first, as KFP lists them
        self.state.uploads[version["pipeline_version_id"]] = body if isinstance(body, bytes) else b""
        return version

    def upload(self, method, *, query, body):
        name = query["name"]
        if any(p["display_name"] == name for p in self.state.pipelines.values()):
            return 409, {"code": 6, "message": f"pipeline {name} already exists"}
        pipeline = {"pipeline_id": str(uuid.uuid4()), "display_name": name, "description": query.get("description", "")}
        self.state.pipelines[pipeline["pipeline_id"]] = pipeline
        self._new_version(pipeline["pipeline_id"], name, body)
        return 200, pipeline

    def upload_version(self, method, *, query, body):
        pid = query["pipelineid"]
        if any(v["display_name"] == query["name"] for v in self.state.versions.get(pid, [])):
            return 409, {"code": 6, "message": "version name already exists"}
        return 200, self._new_version(pid, query["name"], body)

    def versions(self, method, pipeline_id, *, query, body):
        name = _display_name_filter(query)
        items = [v for v in self.state.versions.get(pipeline_id, []) if name is None or v["display_name"] == name]
        size = int(query.get("page_size") or 20)  # one page, as KFP answers
        return 200, {
            "pipeline_versions": items[:size],
            "total_size": len(items),
            **({"next_page_token": "more"} if len(items) > size else {}),
        }

    def pipelines(self, method, *, query, body):
        name = _display_name_filter(query)
        items = [p for p in self.state.pipelines.values() if name is None or p["display_name"] == name]
        return 200, {"pipelines": items, "total_size": len(items)}

    def experiments(self, method, *, query, body):
        namespace = (body or {}).get("namespace") if method == "POST" else query.get("namespace")
        if self.state.multi_user and not namespace:  # what KFP's multi-user mode answers
            return 400, {
                "code": 3,
                "message": "Invalid input error: In multi-user mode, experiment must have a namespace",
            }
        if method == "POST":
            exp = {**body, "experiment_id": str(uuid.uuid4())}
            self.state.experiments[exp["experiment_id"]] = exp
            return 200, exp
        name = _display_name_filter(query)
        items = [
            e
            for e in self.state.experiments.values()
            if (name is None or e["display_name"] == name)
            and (not self.state.multi_user or e.get("namespace") == namespace)
        ]
        return 200, {"experiments": items, "total_size": len(items)}

    def runs(self, method, run_id, *, query, body):
        if method == "POST":
            run = {**body, "run_id": str(uuid.uuid4()), "state": "PENDING"}
            self.state.runs[run["run_id"]] = run
            return 200, run
        run = self.state.runs.get(run_id)
        if run is None:
            return 404, {"code": 5, "message": "run not found"}
        reads = self.state.run_reads[run_id] = self.state.run_reads.get(run_id, 0) + 1
        run["state"] = ["PENDING", "RUNNING", self.state.final_state][min(reads, 2)]
        return 200, run

    def recurring_runs(self, method, *, query, body):
        if method == "GET":  # by experiment and display name, as kfp.Client.list_recurring_runs asks
            keys = {p.get("key") for p in json.loads(query.get("filter") or "{}").get("predicates", [])}
            if keys - RECURRING_RUN_FILTER_KEYS:
                return 400, {
                    "code": 3,
                    "message": f"Invalid input error: invalid filter key(s) {sorted(keys - RECURRING_RUN_FILTER_KEYS)}",
                }
            name = _display_name_filter(query)
            items = [
                j
                for j in self.state.recurring.values()
                if (name is None or j["display_name"] == name)
                and (not query.get("experiment_id") or j.get("experiment_id") == query["experiment_id"])
            ]
            return 200, {"recurringRuns": items, "total_size": len(items)}
        job = {**body, "recurring_run_id": str(uuid.uuid4()), "status": "ENABLED"}
        self.state.recurring[job["recurring_run_id"]] = job
        return 200, job


class FakeKfpAPI:
    def __enter__(self) -> "FakeKfpAPI":
        self.state = KfpState()
        self.server = LoopbackServer(KfpHandler, self.state)
        self.url = self.server.url
        return self

    def __exit__(self, *exc) -> None:
        self.server.close()
