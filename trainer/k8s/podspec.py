"""What a pod of any backend is made of: where it runs (ClusterSpec), run-unique names and labels,
credentials by reference, scheduling, restricted Pod Security and accelerators. Renders only: nothing
here talks to the API server (trainer.k8s.lifecycle does).

No secret value ever passes through this package: credentials reach pods as secretKeyRef.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trainer.core import settings, tracking
from trainer.core.errors import UserError
from trainer.k8s import rules
from trainer.recipe import torchrun

KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CLEANUP = ("never", "on-success", "always")
APP_LABELS = {"app.kubernetes.io/name": "llm-finetune"}
# The project image runs as this user (docker/Dockerfile `USER 1000`); vLLM's images run as
# root by default, so their pods name the user explicitly to pass restricted Pod Security.
RUN_AS_USER = 1000


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
    cache_size: str = "200Gi"  # emptyDir for downloaded weights and data (a node's disk, bounded)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    queue: str = ""  # Kueue LocalQueue name; empty: no queueing
    service_account: str = ""
    backoff_limit: int = 3  # pod restarts before the job fails (the pipeline's max_restarts)
    # Kubernetes waits this long after SIGTERM before SIGKILL; above the trainer's
    # shutdown_grace_s so the final checkpoint can finish uploading.
    termination_grace_s: int = 120
    ttl_seconds_after_finished: int = 7 * 24 * 3600
    cleanup: str = "on-success"  # delete the job after it ends: never | on-success | always
    wait_timeout_s: int = 0  # 0: wait as long as the job runs
    stall_timeout_s: float = 0  # fail when the trainer's progress line does not change this long; 0: off
    poll_interval_s: float = 15.0
    training_runtime: str = "torch-distributed"  # launcher=trainjob: the ClusterTrainingRuntime

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
        """Settings that only the Kubernetes launchers and deploy backends use."""
        p = []
        if self.cleanup not in CLEANUP:
            p.append(f"cleanup must be one of {CLEANUP}, got {self.cleanup!r}")
        if self.poll_interval_s <= 0:
            p.append(f"poll_interval_s must be > 0, got {self.poll_interval_s}")
        if self.wait_timeout_s < 0:
            p.append(f"wait_timeout_s must be >= 0 (0 waits forever), got {self.wait_timeout_s}")
        if self.training_runtime:
            p += rules.dns1123_subdomain(self.training_runtime, "training_runtime")
        # The API server's own rules: names, label values, quantities, selectors, tolerations.
        return p + rules.cluster_spec_problems(self)


def job_name(run_id: str, prefix: str = "ft") -> str:
    """A DNS-1035 name from the KFP run id, short enough for `<name>-worker-NNN` pod names."""
    slug = re.sub(r"[^a-z0-9-]+", "-", run_id.lower()).strip("-")
    name = f"{prefix}-{slug}"[:45].rstrip("-")
    if not slug:
        raise UserError(f"cannot derive a job name from run id {run_id!r}")
    return name


def labels(component: str, **extra: str) -> dict[str, str]:
    return {**APP_LABELS, "app.kubernetes.io/component": component, **extra}


def queue_labels(spec: ClusterSpec) -> dict[str, str]:
    """Kueue admits (and counts quota for) objects carrying this label."""
    return {KUEUE_LABEL: spec.queue} if spec.queue else {}


def secret_env() -> list:
    """S3 settings as values, credentials as references to the Secrets named in settings."""
    from kubernetes.client import V1EnvVar, V1EnvVarSource, V1SecretKeySelector

    def ref(env: str, secret: str, key: str, optional: bool = False) -> V1EnvVar:
        return V1EnvVar(
            name=env,
            value_from=V1EnvVarSource(
                secret_key_ref=V1SecretKeySelector(name=secret, key=key, optional=optional or None)
            ),
        )

    return [
        V1EnvVar(name="S3_ENDPOINT", value=settings.get("S3_ENDPOINT")),
        V1EnvVar(name="S3_BUCKET", value=settings.get("S3_BUCKET")),
        V1EnvVar(name="S3_REGION", value=settings.get("S3_REGION")),
        ref("AWS_ACCESS_KEY_ID", settings.get("S3_SECRET_NAME"), "accesskey"),
        ref("AWS_SECRET_ACCESS_KEY", settings.get("S3_SECRET_NAME"), "secretkey"),
        ref("HF_TOKEN", settings.get("HF_SECRET_NAME"), "token", optional=True),
    ]


def tracking_env() -> list:
    """The MLflow settings of this step (KFP's plugin sets them on its pod) for the training pods, whose rank 0 logs
    to the same run; none when tracking is off. Credentials are not copied (trainer.core.tracking.FORWARDED)."""
    from kubernetes.client import V1EnvVar

    return [V1EnvVar(name=k, value=v) for k, v in tracking.forwarded_env().items()]


def tolerations(spec: ClusterSpec) -> list[dict[str, Any]]:
    """spec.tolerations as the API server decodes them: `tolerationSeconds` a JSON integer. KFP
    hands JSON numbers inside list parameters over as floats (300 arrives as 300.0), which the API
    server's int64 field refuses and the Trainer SDK's models reject; rules.tolerations has already
    refused a fractional one."""
    return [
        {**t, "tolerationSeconds": int(t["tolerationSeconds"])} if isinstance(t.get("tolerationSeconds"), float) else t
        for t in spec.tolerations
    ]


def scheduling(spec: ClusterSpec) -> dict[str, Any]:
    """Pod-spec fields shared by training and serving pods."""
    from kubernetes.client import V1Toleration

    return {
        "node_selector": spec.node_selector or None,
        "tolerations": [
            V1Toleration(**{re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): v for k, v in t.items()})
            for t in tolerations(spec)
        ]
        or None,
    }


def pod_security(run_as_user: int | None = None):
    """Pod-level half of restricted Pod Security (runAsNonRoot, RuntimeDefault seccomp).
    fsGroup makes emptyDirs writable for the non-root user."""
    from kubernetes.client import V1PodSecurityContext, V1SeccompProfile

    return V1PodSecurityContext(
        run_as_non_root=True,
        run_as_user=run_as_user,
        run_as_group=run_as_user,
        fs_group=run_as_user or RUN_AS_USER,
        seccomp_profile=V1SeccompProfile(type="RuntimeDefault"),
    )


def container_security():
    """Container-level half of restricted Pod Security."""
    from kubernetes.client import V1Capabilities, V1SecurityContext, V1SeccompProfile

    return V1SecurityContext(
        allow_privilege_escalation=False,
        run_as_non_root=True,
        capabilities=V1Capabilities(drop=["ALL"]),
        seccomp_profile=V1SeccompProfile(type="RuntimeDefault"),
    )


def accelerators(spec: ClusterSpec, count: int) -> dict[str, str]:
    return {spec.accelerator_resource: str(count)} if spec.accelerator_resource and count else {}


def train_command(train_args: list[str]) -> list[str]:
    """The training pod's command: the local launcher's, with the image's python."""
    return torchrun.train_command(train_args, python="python")


def volume_shm(spec: ClusterSpec):
    from kubernetes.client import V1EmptyDirVolumeSource, V1Volume

    return V1Volume(name="dshm", empty_dir=V1EmptyDirVolumeSource(medium="Memory", size_limit=spec.shm_size))
