"""launcher=pytorchjob (old name `kubernetes`): the training job as a Kubeflow PyTorchJob
(Training Operator v1, frozen at release-1.9).

  python -m trainer launch-k8s --dry-run --nodes 2 --procs-per-node 8 [train args...]

One Master + (nodes-1) Workers, each a pod whose container `pytorch` runs the same
`python -m trainer.recipe.torchrun -m trainer train ...` as the local launcher; the operator injects PET_NNODES,
PET_NODE_RANK, PET_NPROC_PER_NODE, PET_MASTER_ADDR and PET_MASTER_PORT, which torchrun
reads. Credentials come from Kubernetes Secrets by reference (secretKeyRef).

Failures: `restartPolicy: ExitCode` restarts a pod only for exit codes 128-255 (137
OOM-killed / SIGKILL, 143 SIGTERM on eviction or preemption, 203 a transient S3 or network
failure); 1-127 (2 = bad input, 3 = a non-finite loss, 1 = a crash) are permanent, so a certain
failure is never retried (trainer.core.exitcodes has the table). `cleanPodPolicy: Running` stops the pods
still running when the job fails (their GPUs are freed) and keeps the failed ones, whose
exit codes and logs make the failure report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.core import settings
from trainer.core.errors import collect
from trainer.core.exitcodes import PERMANENT
from trainer.k8s.lifecycle import (
    JobFailed,
    Stopped,
    create_or_attach,
    default_namespace,
    failure_report,
    follow_job,
    kube_config_errors,
)
from trainer.k8s.podspec import (
    ClusterSpec,
    accelerators,
    container_security,
    labels,
    pod_security,
    queue_labels,
    scheduling,
    secret_env,
    tracking_env,
    train_command,
    volume_shm,
)
from trainer.launch.base import Launcher

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
CONTAINER = "pytorch"  # the operator requires this name


# Statuses no restart can cure (trainer.core.exitcodes): the user's input (2), a non-finite loss (3).
PERMANENT_EXIT_CODES = tuple(PERMANENT)


def pod_template(spec: ClusterSpec, train_args: list[str], container_name: str, extra_labels: dict | None = None):
    """The training pod: project image, torchrun command, secrets by reference, /dev/shm and a
    bounded cache, restricted Pod Security. Shared by the PyTorchJob and (in parts) the TrainJob."""
    from kubernetes.client import (
        V1Container,
        V1EmptyDirVolumeSource,
        V1EnvVar,
        V1ObjectMeta,
        V1PodSpec,
        V1PodTemplateSpec,
        V1ResourceRequirements,
        V1Volume,
        V1VolumeMount,
    )

    gpus = accelerators(spec, spec.procs_per_node)
    container = V1Container(
        name=container_name,
        image=spec.image or settings.image(),
        command=train_command(train_args),
        env=[
            *secret_env(),
            *tracking_env(),
            V1EnvVar(name="FINETUNE_CACHE_DIR", value="/cache"),
            V1EnvVar(name="PYTHONUNBUFFERED", value="1"),
        ],
        resources=V1ResourceRequirements(
            requests={"cpu": spec.cpu, "memory": spec.memory, **gpus}, limits={"memory": spec.memory, **gpus}
        ),
        volume_mounts=[
            V1VolumeMount(name="dshm", mount_path="/dev/shm"),
            V1VolumeMount(name="cache", mount_path="/cache"),
        ],
        security_context=container_security(),
    )
    return V1PodTemplateSpec(
        # Istio sidecars keep pods Running after training ends; the job would never finish.
        metadata=V1ObjectMeta(
            labels={**labels("trainer"), **(extra_labels or {})}, annotations={"sidecar.istio.io/inject": "false"}
        ),
        spec=V1PodSpec(
            containers=[container],
            service_account_name=spec.service_account or None,
            termination_grace_period_seconds=spec.termination_grace_s,
            security_context=pod_security(),
            volumes=[
                volume_shm(spec),
                V1Volume(name="cache", empty_dir=V1EmptyDirVolumeSource(size_limit=spec.cache_size)),
            ],
            **scheduling(spec),
        ),
    )


def build_pytorchjob(name: str, train_args: list[str], spec: ClusterSpec, run_labels: dict[str, str] | None = None):
    """The PyTorchJob object (kubeflow-training SDK models), not yet sent anywhere."""
    from kubeflow.training import models as m
    from kubernetes.client import V1ObjectMeta

    collect(spec.problems(), what="invalid cluster settings")
    template = pod_template(spec, train_args, CONTAINER, run_labels)
    replicas = {"Master": m.KubeflowOrgV1ReplicaSpec(replicas=1, restart_policy="ExitCode", template=template)}
    if spec.nodes > 1:
        replicas["Worker"] = m.KubeflowOrgV1ReplicaSpec(
            replicas=spec.nodes - 1, restart_policy="ExitCode", template=template
        )
    return m.KubeflowOrgV1PyTorchJob(
        api_version="kubeflow.org/v1",
        kind="PyTorchJob",
        metadata=V1ObjectMeta(
            name=name,
            namespace=spec.namespace or None,
            labels={**labels("trainer"), **(run_labels or {}), **queue_labels(spec)},
        ),
        spec=m.KubeflowOrgV1PyTorchJobSpec(
            nproc_per_node=str(spec.procs_per_node),
            pytorch_replica_specs=replicas,
            run_policy=m.KubeflowOrgV1RunPolicy(
                backoff_limit=spec.backoff_limit,
                clean_pod_policy="Running",
                ttl_seconds_after_finished=spec.ttl_seconds_after_finished,
                # The cluster enforces wait_timeout_s too, should the pipeline pod that waits be gone.
                active_deadline_seconds=spec.wait_timeout_s or None,
            ),
        ),
    )


@dataclass
class PyTorchJobLauncher(Launcher):
    spec: ClusterSpec
    client_configuration: Any = None  # kubernetes.client.Configuration; None: in-cluster / kubeconfig

    def build(self, train_args: list[str], name: str) -> list:
        return [build_pytorchjob(name, train_args, self.spec)]

    def _client(self):
        from kubeflow.training import TrainingClient

        with kube_config_errors():
            namespace = self.spec.namespace or default_namespace()
            return TrainingClient(
                client_configuration=self.client_configuration, namespace=namespace, job_kind="PyTorchJob"
            ), namespace

    def run(self, train_args: list[str], name: str) -> None:
        """Create (or attach to) the job, stream the master's log, wait, report, clean up."""
        tc, namespace = self._client()
        job = build_pytorchjob(name, train_args, self.spec)
        job.metadata.namespace = namespace

        def create() -> None:
            tc.create_job(job=job, namespace=namespace)
            print(
                f"created PyTorchJob {namespace}/{name}: {self.spec.nodes} node(s) x "
                f"{self.spec.procs_per_node} process(es)",
                flush=True,
            )

        def gone() -> bool:
            try:
                tc.get_job(name, namespace=namespace)
            except RuntimeError as err:  # TrainingClient wraps the ApiException
                if getattr(err.__cause__, "status", None) == 404:
                    return True
                raise
            return False

        create_or_attach(
            "PyTorchJob",
            f"{namespace}/{name}",
            create,
            lambda err: isinstance(err, RuntimeError) and ("Conflict" in str(err) or "409" in str(err)),
            lambda: _status(tc, name, namespace),
            lambda: tc.delete_job(name, namespace=namespace),
            gone,
            poll_s=self.spec.poll_interval_s,
        )
        succeeded = deleted = False
        try:
            follow_job(
                lambda: _status(tc, name, namespace),
                tc.core_api,
                namespace,
                f"{JOB_NAME_LABEL}={name},training.kubeflow.org/job-role=master",
                CONTAINER,
                self.spec,
            )
            succeeded = True
        except Stopped as why:
            report = failure_report(tc.core_api, namespace, name, f"{JOB_NAME_LABEL}={name}", _is_master, CONTAINER)
            if str(why) != "failed":  # stalled or timed out: nobody waits for it, and a restart would stall again
                tc.delete_job(name, namespace=namespace)
                deleted, report = True, f"{report}\nthe job was deleted to free its accelerators"
            raise JobFailed(f"PyTorchJob {namespace}/{name} {why}.\n{report}") from None
        finally:
            if not deleted and (self.spec.cleanup == "always" or (succeeded and self.spec.cleanup == "on-success")):
                tc.delete_job(name, namespace=namespace)
                print(f"deleted PyTorchJob {namespace}/{name} (cleanup={self.spec.cleanup})", flush=True)


def _status(tc, name: str, namespace: str) -> str:
    conditions = {c.type for c in tc.get_job_conditions(name, namespace=namespace) if c.status == "True"}
    return "succeeded" if "Succeeded" in conditions else "failed" if "Failed" in conditions else "running"


def _is_master(pod) -> bool:
    return (pod.metadata.labels or {}).get("training.kubeflow.org/job-role") == "master"
