"""Kubernetes launcher: the training job as a Kubeflow PyTorchJob (Training Operator v1).

  python -m trainer launch-k8s --dry-run --nodes 2 --procs-per-node 8 [train args...]

One Master + (nodes-1) Workers, each a pod whose container `pytorch` runs the same
`torchrun -m trainer train ...` as the local launcher; the operator injects PET_NNODES,
PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR and PET_MASTER_PORT, which torchrun
reads. Credentials come from Kubernetes Secrets by reference (secretKeyRef); no secret
value ever passes through this module.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from trainer import settings
from trainer.errors import UserError, collect

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CLEANUP = ("never", "on-success", "always")


@dataclass
class ClusterSpec:
    """Where and how the job's pods run. Defaults suit one GPU node."""

    namespace: str = ""  # empty: the namespace this pod runs in (or "default")
    image: str = ""  # empty: the project image from settings
    nodes: int = 1
    procs_per_node: int = 1  # = GPUs per node when accelerator_resource is set
    accelerator_resource: str = "nvidia.com/gpu"  # amd.com/gpu, habana.ai/gaudi, or "" for CPU only
    cpu: str = "8"
    memory: str = "64Gi"
    shm_size: str = "16Gi"  # /dev/shm for NCCL and dataloader workers
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    queue: str = ""  # Kueue LocalQueue name; empty: no queueing
    service_account: str = ""
    backoff_limit: int = 3  # pod restarts before the job fails (the pipeline's max_restarts)
    # Kubernetes waits this long after SIGTERM before SIGKILL; above the trainer's
    # shutdown_grace_s so the final checkpoint can finish uploading.
    termination_grace_s: int = 120
    ttl_seconds_after_finished: int = 7 * 24 * 3600
    cleanup: str = "on-success"  # delete the PyTorchJob after it ends: never | on-success | always
    wait_timeout_s: int = 0  # 0: wait as long as the job runs
    poll_interval_s: float = 15.0

    def problems(self) -> list[str]:
        return self.topology_problems() + self.kubernetes_problems()

    def topology_problems(self) -> list[str]:
        """What every launcher needs: processes to run and a restart budget."""
        p = []
        if self.nodes < 1:
            p.append(f"nodes must be >= 1, got {self.nodes}")
        if self.procs_per_node < 1:
            p.append(f"procs_per_node must be >= 1, got {self.procs_per_node}")
        if self.backoff_limit < 0:
            p.append(f"max_restarts must be >= 0, got {self.backoff_limit}")
        return p

    def kubernetes_problems(self) -> list[str]:
        """Settings that only the Kubernetes launcher and deploy backend use."""
        p = []
        if self.cleanup not in CLEANUP:
            p.append(f"cleanup must be one of {CLEANUP}, got {self.cleanup!r}")
        if self.accelerator_resource and not re.fullmatch(r"[a-z0-9.-]+/[a-z0-9._-]+", self.accelerator_resource):
            p.append(f"accelerator_resource must look like vendor/resource (nvidia.com/gpu), "
                     f"got {self.accelerator_resource!r}")
        for t in self.tolerations:
            if not isinstance(t, dict) or not set(t) <= {"key", "operator", "value", "effect", "tolerationSeconds"}:
                p.append(f"toleration {t!r} must be an object with key/operator/value/effect")
        if self.poll_interval_s <= 0:
            p.append(f"poll_interval_s must be > 0, got {self.poll_interval_s}")
        if self.wait_timeout_s < 0:
            p.append(f"wait_timeout_s must be >= 0 (0 waits forever), got {self.wait_timeout_s}")
        return p


def job_name(run_id: str, prefix: str = "ft") -> str:
    """A DNS-1035 name from the KFP run id, short enough for `<name>-worker-NNN` pod names."""
    slug = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")
    name = f"{prefix}-{slug}"[:45].rstrip("-")
    if not slug:
        raise UserError(f"cannot derive a job name from run id {run_id!r}")
    return name


def secret_env() -> list:
    """S3 settings as values, credentials as references to the Secrets named in settings."""
    from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

    def ref(env: str, secret: str, key: str, optional: bool = False) -> V1EnvVar:
        return V1EnvVar(name=env, value_from=V1EnvVarSource(
            secret_key_ref=V1SecretKeySelector(name=secret, key=key, optional=optional or None)))

    return [
        V1EnvVar(name="S3_ENDPOINT", value=settings.get("S3_ENDPOINT")),
        V1EnvVar(name="S3_BUCKET", value=settings.get("S3_BUCKET")),
        V1EnvVar(name="S3_REGION", value=settings.get("S3_REGION")),
        ref("AWS_ACCESS_KEY_ID", settings.get("S3_SECRET_NAME"), "accesskey"),
        ref("AWS_SECRET_ACCESS_KEY", settings.get("S3_SECRET_NAME"), "secretkey"),
        ref("HF_TOKEN", settings.get("HF_SECRET_NAME"), "token", optional=True),
    ]


def scheduling(spec: ClusterSpec) -> dict[str, Any]:
    """Pod-spec fields shared by training and serving pods."""
    from kubernetes.client import V1Toleration

    return {"node_selector": spec.node_selector or None,
            "tolerations": [V1Toleration(**{re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): v for k, v in t.items()})
                            for t in spec.tolerations] or None}


def build_pytorchjob(name: str, train_args: list[str], spec: ClusterSpec, run_labels: dict[str, str] | None = None):
    """The PyTorchJob object (kubeflow-training SDK models), not yet sent anywhere."""
    from kubeflow.training import models as m
    from kubernetes.client import (V1Container, V1EmptyDirVolumeSource, V1EnvVar, V1ObjectMeta, V1PodSpec,
                                   V1PodTemplateSpec, V1ResourceRequirements, V1Volume, V1VolumeMount)

    collect(spec.problems(), what="invalid cluster settings")
    gpus = {spec.accelerator_resource: str(spec.procs_per_node)} if spec.accelerator_resource else {}
    labels = {"app.kubernetes.io/name": "llm-finetune", "app.kubernetes.io/component": "trainer",
              **(run_labels or {})}
    container = V1Container(
        name="pytorch",  # the operator requires this name
        image=spec.image or settings.image(),
        command=["python", "-m", "torch.distributed.run", "-m", "trainer", "train", *train_args],
        env=[*secret_env(), V1EnvVar(name="FINETUNE_CACHE_DIR", value="/cache"),
             V1EnvVar(name="PYTHONUNBUFFERED", value="1")],
        resources=V1ResourceRequirements(requests={"cpu": spec.cpu, "memory": spec.memory, **gpus},
                                         limits={"memory": spec.memory, **gpus}),
        volume_mounts=[V1VolumeMount(name="dshm", mount_path="/dev/shm"),
                       V1VolumeMount(name="cache", mount_path="/cache")],
    )
    template = V1PodTemplateSpec(
        # Istio sidecars keep pods Running after training ends; the job would never finish.
        metadata=V1ObjectMeta(labels=labels, annotations={"sidecar.istio.io/inject": "false"}),
        spec=V1PodSpec(
            containers=[container], service_account_name=spec.service_account or None,
            termination_grace_period_seconds=spec.termination_grace_s,
            volumes=[V1Volume(name="dshm", empty_dir=V1EmptyDirVolumeSource(medium="Memory", size_limit=spec.shm_size)),
                     V1Volume(name="cache", empty_dir=V1EmptyDirVolumeSource())],
            **scheduling(spec)),
    )
    replicas = {"Master": m.KubeflowOrgV1ReplicaSpec(replicas=1, restart_policy="OnFailure", template=template)}
    if spec.nodes > 1:
        replicas["Worker"] = m.KubeflowOrgV1ReplicaSpec(replicas=spec.nodes - 1, restart_policy="OnFailure",
                                                        template=template)
    job_labels = dict(labels)
    if spec.queue:
        job_labels[KUEUE_LABEL] = spec.queue
    return m.KubeflowOrgV1PyTorchJob(
        api_version="kubeflow.org/v1", kind="PyTorchJob",
        metadata=V1ObjectMeta(name=name, namespace=spec.namespace or None, labels=job_labels),
        spec=m.KubeflowOrgV1PyTorchJobSpec(
            nproc_per_node=str(spec.procs_per_node),
            pytorch_replica_specs=replicas,
            run_policy=m.KubeflowOrgV1RunPolicy(
                backoff_limit=spec.backoff_limit, clean_pod_policy="None",  # keep pods for failure reports
                ttl_seconds_after_finished=spec.ttl_seconds_after_finished),
        ),
    )


def to_dict(obj) -> dict[str, Any]:
    """A kubernetes / kubeflow model object as the JSON the API server receives."""
    from kubernetes.client import ApiClient

    return ApiClient().sanitize_for_serialization(obj)


class JobFailed(UserError):
    """The training job ended without success; the message carries the diagnosis."""


@dataclass
class KubernetesLauncher:
    spec: ClusterSpec
    client_configuration: Any = None  # kubernetes.client.Configuration; None: in-cluster / kubeconfig

    def _client(self):
        from kubeflow.training import TrainingClient
        from kubeflow.training.utils import utils

        namespace = self.spec.namespace or utils.get_default_target_namespace()
        return TrainingClient(client_configuration=self.client_configuration, namespace=namespace,
                              job_kind="PyTorchJob"), namespace

    def run(self, train_args: list[str], name: str) -> None:
        """Create (or attach to) the job, stream the master's log, wait, report, clean up."""
        tc, namespace = self._client()
        job = build_pytorchjob(name, train_args, self.spec)
        job.metadata.namespace = namespace
        try:
            tc.create_job(job=job, namespace=namespace)
            print(f"created PyTorchJob {namespace}/{name}: {self.spec.nodes} node(s) x "
                  f"{self.spec.procs_per_node} process(es)", flush=True)
        except RuntimeError as err:
            if "Conflict" not in str(err) and "409" not in str(err):
                raise
            # A retried KFP task (same run id) attaches to its job instead of starting another.
            print(f"PyTorchJob {namespace}/{name} already exists; following it", flush=True)
        deadline = time.monotonic() + (self.spec.wait_timeout_s or 10**9)
        poll = self.spec.poll_interval_s
        succeeded = False
        try:
            tc.wait_for_job_conditions(name, expected_conditions={"Running", "Succeeded"},
                                       wait_timeout=max(deadline - time.monotonic(), poll), polling_interval=poll)
            self._stream_master_log(tc, name)
            tc.wait_for_job_conditions(name, expected_conditions={"Succeeded"},
                                       wait_timeout=max(deadline - time.monotonic(), poll), polling_interval=poll)
            succeeded = True
        except (RuntimeError, TimeoutError) as err:
            reason = "timed out" if isinstance(err, TimeoutError) else "failed"
            raise JobFailed(f"PyTorchJob {namespace}/{name} {reason}.\n{failure_report(tc, name, namespace)}") \
                from None
        finally:
            if self.spec.cleanup == "always" or (succeeded and self.spec.cleanup == "on-success"):
                tc.delete_job(name, namespace=namespace)
                print(f"deleted PyTorchJob {namespace}/{name} (cleanup={self.spec.cleanup})", flush=True)

    @staticmethod
    def _stream_master_log(tc, name: str) -> None:
        """Copy the master pod's log into this component's log while it runs."""
        done = threading.Event()

        def follow():
            try:
                tc.get_job_logs(name, is_master=True, follow=True)
            except Exception as err:  # noqa: BLE001 - logs are best effort; the wait below decides
                print(f"(log streaming stopped: {type(err).__name__}: {err})", flush=True)
            finally:
                done.set()

        threading.Thread(target=follow, daemon=True).start()
        done.wait()


def failure_report(tc, name: str, namespace: str, tail: int = 30) -> str:
    """Pod phases and container states, recent events, and the master's last log lines."""
    from kubernetes.client.exceptions import ApiException

    core = tc.core_api
    lines = []
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={name}").items
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
    masters = [p for p in pods if (p.metadata.labels or {}).get("training.kubeflow.org/job-role") == "master"]
    for pod in masters[:1]:
        try:
            log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="pytorch", tail_lines=tail)
            lines.append(f"last {tail} log lines of {pod.metadata.name}:")
            lines += [f"  {line}" for line in (log or "").splitlines()[-tail:]]
        except ApiException as err:
            lines.append(f"(no log for {pod.metadata.name}: {err.status} {err.reason})")
    return "\n".join(lines)
