"""What every backend does with the API server once its objects are rendered (trainer.k8s.podspec):
the client and its configuration errors, create / replace, readiness waits, following a job with its
main pod's log streamed into ours, and the failure report.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator

from trainer.core.errors import UserError, brief
from trainer.k8s.podspec import ClusterSpec
from trainer.core.watchdog import Watchdog


def to_dict(obj) -> dict[str, Any]:
    """A kubernetes / kubeflow model object as the JSON the API server receives."""
    if isinstance(obj, dict):
        return obj
    if hasattr(obj, "to_dict") and type(obj).__module__.startswith("kubeflow_trainer_api"):
        return obj.to_dict()  # pydantic models: aliases (camelCase), unset fields left out
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(obj)


def replace(read: Callable[[], Any], put: Callable[[dict], Any], obj: Any, ref: str) -> None:
    """Make an existing object exactly `obj`: a PUT, not a patch. A patch (strategic merge for
    built-in kinds, JSON merge for custom resources) merges maps key by key and keeps every key
    the new render no longer has: the previous deploy's node selector keys, tolerations, env vars,
    accelerator resource or queue label would stay, and the pods go to the wrong nodes or none.

    The PUT carries the resourceVersion just read, so the API server refuses (409) to overwrite a
    write that came in between (a controller, another deploy); then read and replace once more.
    Finalizers that controllers added are kept: dropping one would skip its cleanup.
    """
    from kubernetes.client.exceptions import ApiException

    body = to_dict(obj)
    for _ in range(2):
        meta = to_dict(read())["metadata"]
        body = {
            **body,
            "metadata": {
                **body["metadata"],
                "resourceVersion": meta["resourceVersion"],
                **({"finalizers": meta["finalizers"]} if meta.get("finalizers") else {}),
            },
        }
        try:
            put(body)
            return
        except ApiException as err:
            if err.status != 409:
                raise
    raise UserError(
        f"{ref} changed while being replaced, twice (is another deploy of the same name running?); "
        "deploy again when it has finished"
    )


def wait_until(
    check: Callable[[], tuple[Any, Any]],
    timeout_s: float,
    poll_s: float,
    progress_every_s: float,
    waiting: Callable[[float, Any], str],
    failed: Callable[[Any], str],
) -> Any:
    """Every backend's readiness wait: `check()` -> (a value once ready, else None; the state seen)
    every `poll_s`; the line `waiting(seconds so far, state)` every `progress_every_s` (pulling a vLLM
    image and loading weights take minutes); UserError(`failed(state)`) after `timeout_s`."""
    start = time.monotonic()
    said = start
    while True:
        value, state = check()
        if value is not None:
            return value
        if time.monotonic() - said >= progress_every_s:
            said = time.monotonic()
            print(waiting(said - start, state), flush=True)
        if time.monotonic() > start + timeout_s:
            raise UserError(failed(state))
        time.sleep(poll_s)


def ready_condition(obj: dict) -> tuple[bool, list[str]]:
    """(the newest generation is Ready, every condition in words) of a KServe custom object."""
    st = obj.get("status") or {}
    conditions = st.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    why = [
        f"{c.get('type')}={c.get('status')} {c.get('reason', '')} {c.get('message', '')}".strip() for c in conditions
    ]
    return ready and st.get("observedGeneration", 0) >= obj["metadata"].get("generation", 0), why


def ready_pod(core, namespace: str, selector: str, what: str, role: str) -> str:
    """The newest ready pod matching `selector`: one that serves `what` (e.g. `InferenceService
    ml/tuned`), whose pods are its `role` pods (predictor, workload), as the error names them."""
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    ready = [
        p
        for p in pods
        if p.status
        and p.status.phase == "Running"
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]
    if not ready:
        raise UserError(
            f"{what} is Ready but none of its {role} pods is; see `kubectl -n {namespace} get pods -l {selector}`"
        )
    return max(
        ready, key=lambda p: p.metadata.creation_timestamp.timestamp() if p.metadata.creation_timestamp else 0
    ).metadata.name


def default_namespace() -> str:
    """The namespace this pod runs in, else the kubeconfig context's, else `default`."""
    from kubeflow.training.utils import utils

    with kube_config_errors():
        return utils.get_default_target_namespace()


def api_client(client_configuration: Any = None):
    """A kubernetes ApiClient: the given configuration, else in-cluster, else kubeconfig."""
    from kubernetes import client as k

    if client_configuration is None:
        with kube_config_errors():
            _load_config()
    return k.ApiClient(client_configuration)


def _load_config(configuration: Any = None) -> None:
    """In-cluster settings in a pod, else the kubeconfig, into `configuration` (None: the client's default)."""
    from kubeflow.training.utils import utils
    from kubernetes import config

    load = config.load_incluster_config if utils.is_running_in_k8s() else config.load_kube_config
    load(client_configuration=configuration)


def _config_failure(err: BaseException) -> tuple[str, str]:
    """(why the settings did not load, what to do)."""
    import yaml
    from kubeflow.training.utils import utils

    why = brief(" ".join(str(err).split())) or type(err).__name__  # YAML's errors take several lines
    why = f"the kubeconfig is not valid YAML: {why}" if isinstance(err, yaml.YAMLError) else why
    fix = (
        "this pod's service account token must be mounted (in a pod the in-cluster settings are used, whatever "
        "KUBECONFIG says)"
        if utils.is_running_in_k8s()
        else "point KUBECONFIG (or ~/.kube/config) at the cluster, e.g. check `kubectl get nodes`"
    )
    return why, fix


def _config_errors() -> tuple[type[BaseException], ...]:
    """What loading the settings raises for the user's settings: none or a broken one (ConfigException), one
    that is not YAML, a folder or an unreadable file, or YAML of the wrong shape."""
    import yaml
    from kubernetes.config.config_exception import ConfigException

    return ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, AttributeError


def kube_config_problem(what: str) -> str | None:
    """Why a run with `what` (e.g. "launcher=trainjob") cannot reach a cluster from here, else None: the
    settings are loaded as api_client loads them (into a throwaway Configuration; the API server is not
    contacted), so that a local run which sends a step to a cluster is refused before it delivers and
    trains, not in that step."""
    from kubernetes import client as k

    try:
        _load_config(k.Configuration())
    except _config_errors() as err:
        why, fix = _config_failure(err)
        return (
            f"with {what} a step runs on a Kubernetes cluster, but no usable Kubernetes configuration is here "
            f"({why}): {fix}; or use launcher=local and deploy_backend=local to run every step on this machine"
        )
    return None


@contextlib.contextmanager
def kube_config_errors() -> Iterator[None]:
    """No kubeconfig (or a broken one) is the user's to fix: one line, not a traceback."""
    errors = _config_errors()
    try:
        yield
    except errors as err:
        why, fix = _config_failure(err)
        raise UserError(
            f"no usable Kubernetes configuration ({why}): {fix}; or add --dry-run to print the objects instead"
        ) from None


class JobFailed(UserError):
    """The training job ended without success; the message carries the diagnosis."""


def failure_report(
    core, namespace: str, name: str, pod_selector: str, main_pod: Any, container: str, tail: int = 30
) -> str:
    """Pod phases and container states, recent events, and the main pod's last log lines.

    `main_pod(pod) -> bool` picks the pod whose log tells the story (master / node 0).
    """
    from kubernetes.client.exceptions import ApiException

    lines = []
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=pod_selector).items
    except ApiException as err:
        return f"(could not list pods: {err.status} {err.reason})"
    lines.append("pods:")
    for pod in pods:
        states = []
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            st = cs.state
            if st and st.terminated:
                states.append(f"{cs.name} terminated {st.terminated.reason} exit={st.terminated.exit_code}")
            elif st and st.waiting:
                states.append(f"{cs.name} waiting {st.waiting.reason}")
            if cs.restart_count:
                states.append(f"restarts={cs.restart_count}")
        phase = pod.status.phase if pod.status else "?"
        lines.append(f"  {pod.metadata.name}: {phase} {'; '.join(states)}".rstrip())
    lines.append("events:")
    for obj in [name, *[p.metadata.name for p in pods]]:
        try:
            events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={obj}").items
        except ApiException:
            events = []
        lines += [f"  {obj}: {e.type} {e.reason}: {e.message}" for e in events[-5:]]
    for pod in [p for p in pods if main_pod(p)][:1]:
        try:
            log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container=container, tail_lines=tail)
            lines.append(f"last {tail} log lines of {pod.metadata.name}:")
            lines += [f"  {line}" for line in (log or "").splitlines()[-tail:]]
        except ApiException as err:
            lines.append(f"(no log for {pod.metadata.name}: {err.status} {err.reason})")
    return "\n".join(lines)


def create_or_attach(
    kind: str,
    ref: str,
    create: Callable[[], None],
    exists: Callable[[Exception], bool],
    status: Callable[[], str],
    delete: Callable[[], None],
    gone: Callable[[], bool],
    timeout_s: float = 300.0,
    poll_s: float = 2.0,
) -> None:
    """Create the job; a job of the same name (a retried KFP task: same run id) is followed,
    unless it already failed: then it is deleted and created again, so that a Retry after a
    failure trains (resuming from the run's last checkpoint) instead of re-reporting the old
    failure forever."""
    try:
        create()
        return
    except Exception as err:  # noqa: BLE001 - the client's own error types differ; re-raised unless a 409
        if not exists(err):
            raise
    if status() != "failed":
        print(f"{kind} {ref} already exists; following it", flush=True)
        return
    print(
        f"{kind} {ref} exists from an earlier attempt that failed; deleting it and starting again "
        f"(it resumes from the run's last checkpoint)",
        flush=True,
    )
    delete()
    deadline = time.monotonic() + timeout_s
    while not gone():
        if time.monotonic() > deadline:
            raise JobFailed(
                f"{kind} {ref} from the earlier failed attempt was not deleted within {timeout_s:.0f} s; "
                f"delete it (kubectl delete {kind.lower()} -n {ref.replace('/', ' ')}) and retry"
            )
        time.sleep(poll_s)
    create()


class Stopped(Exception):
    """follow_job's verdict when the job did not succeed: 'failed', 'timed out' or a stall message."""


def follow_job(
    status: Callable[[], str],
    core,
    namespace: str,
    pod_selector: str,
    container: str,
    spec: ClusterSpec,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Stream the main pod's log into ours while polling the job until it succeeds.

    `status()` returns 'succeeded', 'failed' or anything else (still going). Every log line
    feeds the progress watchdog (trainer.core.watchdog, `spec.stall_timeout_s`, 0 = off), so a job
    whose step counter stops moving ends with a message naming the stuck stage, as does one
    that outlives `spec.wait_timeout_s` (0 = no limit). Raises Stopped with the reason.
    `clock` (the watchdog's and the time limit's) and `sleep` (between status polls) are
    for tests that script time instead of waiting it out.
    """
    # The watchdog starts with the main pod's first log line: time spent queued (Kueue), pulling
    # images or waiting for nodes is not a stall.
    dogs: list[Watchdog] = []
    lock, done, drained = threading.Lock(), threading.Event(), threading.Event()

    def feed(line: str) -> None:
        print(line, flush=True)
        with lock:
            if not dogs:
                dogs.append(Watchdog(spec.stall_timeout_s, clock=clock))
            dogs[0].feed(line)

    def idle() -> None:
        # No pod running (a restarted pod pending, queued, pulling): as before the first start, not
        # a stall; the watchdog starts again with the next pod's first line.
        with lock:
            dogs.clear()

    reader = threading.Thread(
        target=_stream_logs,
        args=(core, namespace, pod_selector, container, feed, done, drained, spec.poll_interval_s, idle),
        daemon=True,
    )
    reader.start()
    deadline = clock() + spec.wait_timeout_s if spec.wait_timeout_s else None
    try:
        while True:
            state = status()
            if state == "succeeded":
                drained.wait(timeout=30)  # the log's last lines
                return
            if state == "failed":
                raise Stopped("failed")
            with lock:
                stalled = dogs[0].check() if dogs else None
            if stalled:
                raise Stopped(f"stalled: {stalled}")
            if deadline is not None and clock() > deadline:
                raise Stopped(f"timed out after wait_timeout_s={spec.wait_timeout_s}")
            sleep(spec.poll_interval_s)
    finally:
        done.set()


def _stream_logs(
    core,
    namespace: str,
    selector: str,
    container: str,
    on_line: Callable[[str], None],
    done: threading.Event,
    drained: threading.Event,
    poll_s: float,
    on_idle: Callable[[], None] = lambda: None,
) -> None:
    """Follow the log of the pod matching `selector` (again after a restart) until `done`;
    `on_idle()` whenever none of them is running."""
    from kubernetes.client.exceptions import ApiException

    # (pod uid, container restart count) -> (complete lines shown, the start of the next line shown
    # as an ended container's last one): a reconnect re-reads the same log from its start, while a
    # restarted container writes a new one, and so does a pod the operator recreated under the same
    # name (ExitCode restarts), which the uid tells apart. Only complete lines count: the API server
    # ends a stream cleanly when its upstream breaks, possibly mid-line, and the reconnect reads that
    # line whole. An unterminated last line is complete only when its container has ended.
    seen: dict[tuple[str, int], tuple[int, str]] = {}

    def show(resp, key: tuple[str, int], ended: bool) -> bool:
        """Stream `resp` from where `key`'s log was left; False when `done` interrupted it."""
        for i, (line, complete) in enumerate(_lines(resp)):
            count, partial = seen.get(key, (0, ""))
            if i >= count and (complete or ended):
                # A line whose start was shown as an ended container's last line: only its rest.
                rest = line[len(partial) :] if partial and line.startswith(partial) else line
                if rest or not partial:
                    on_line(rest)
                seen[key] = (i + 1, "") if complete else (count, line)
            if done.is_set():
                return False
        return True

    while not done.is_set():
        try:
            pods = [
                p
                for p in core.list_namespaced_pod(namespace, label_selector=selector).items
                if p.status and p.status.phase in ("Running", "Succeeded", "Failed")
            ]
            # A running pod first, else the newest: a failed pod that its Job replaced under a new
            # name may still be listed, and its log has nothing more to say.
            pods.sort(
                key=lambda p: (
                    p.status.phase != "Running",
                    -(p.metadata.creation_timestamp.timestamp() if p.metadata.creation_timestamp else 0),
                )
            )
            if not pods or pods[0].status.phase != "Running":
                on_idle()
            for pod in pods[:1]:
                name = pod.metadata.name
                statuses = [cs for cs in pod.status.container_statuses or [] if cs.name == container]
                restarts = max([cs.restart_count or 0 for cs in statuses] or [0])
                uid = pod.metadata.uid or name
                key = (uid, restarts)
                before = (uid, restarts - 1)
                if key not in seen and before in seen:
                    # Restarted in place (same pod) since the last read: the container that ended
                    # may have left lines unread, its last one perhaps without a newline. The
                    # kubelet keeps that log as the container's `previous` one.
                    try:
                        prev = core.read_namespaced_pod_log(
                            name, namespace, container=container, previous=True, _preload_content=False
                        )
                    except ApiException:  # gone (the runtime removed the old container): move on
                        prev = None
                    if prev is not None and not show(prev, before, ended=True):
                        return
                if key not in seen:
                    print(
                        f"--- log of pod {namespace}/{name}" + (f" (restart {restarts})" if restarts else "") + " ---",
                        flush=True,
                    )
                    seen[key] = (0, "")
                resp = core.read_namespaced_pod_log(
                    name, namespace, container=container, follow=True, _preload_content=False
                )
                # Ended: the pod is over, or this container exited (a restart in place comes next).
                finished = pod.status.phase in ("Succeeded", "Failed")
                ended = finished or any(cs.state and cs.state.terminated for cs in statuses)
                if not show(resp, key, ended):
                    return
                if finished:
                    drained.set()  # a finished pod's log was read to its end
        except ApiException as err:
            if err.status not in (400, 404):  # 400: container not started yet
                print(f"(log streaming: {err.status} {err.reason}; retrying)", flush=True)
        except Exception as err:  # noqa: BLE001 - logs are best effort; the status poll decides
            print(f"(log streaming stopped: {type(err).__name__}: {err})", flush=True)
        done.wait(poll_s)


def _lines(resp) -> Iterator[tuple[str, bool]]:
    """(line, complete) of a streamed HTTP response (urllib3), as they arrive; the last one is
    incomplete (no newline yet) when the stream ended mid-line."""
    buf = b""
    for chunk in resp.stream(amt=4096, decode_content=True):
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace"), True
    if buf:
        yield buf.decode("utf-8", "replace"), False
