"""launcher=trainjob: the training job as a Kubeflow Trainer v2 TrainJob
(`trainer.kubeflow.org/v1alpha1`, validated against the v2.3.0 CRD).

  python -m trainer launch-k8s --launcher trainjob --dry-run --nodes 2 --procs-per-node 8 [train args...]

The TrainJob names a training runtime (`training_runtime`, default the ClusterTrainingRuntime
`torch-distributed` that Trainer installs) and overrides what the run decides: `numNodes`,
`numProcPerNode` and `resourcesPerNode` (the accelerator resource, count = processes per
node), the project image and the same `python -m trainer.recipe.torchrun -m trainer train ...` command
as every other launcher (Trainer's torch plugin injects the same PET_* variables), credentials by secretKeyRef.
Pod-level settings that the Trainer API has no field for (node selector, tolerations, /dev/shm,
the cache emptyDir, restricted Pod Security, the termination grace period) go in one
`runtimePatches` entry owned by manager `llm-finetune`; the Kueue queue is the TrainJob's label.

The objects are built with the `kubeflow-trainer-api` models (kubeflow SDK 0.5.0) and sent with
the Kubernetes CustomObjectsApi. The SDK's TrainerClient is not used to create or watch: it
names jobs itself (a retried KFP task must find its own job by the run id), hides the API
status of a failed create (409 means "attach"), and reads the cluster-scoped runtime on every
status poll, which the pipeline's namespaced Role cannot (pipelines.manifests grants no
cluster-wide access).

Failures: the JobSet restarts the job up to the runtime's failurePolicy.maxRestarts; a retried
job resumes from the last checkpoint under the same output prefix, as with a PyTorchJob.
The runtime `llm-finetune-torch` that pipelines.manifests ships adds what a TrainJob cannot set
itself: a podFailurePolicy under which exit code 2 (bad input) fails the job at once while
kills (137, 143) are retried.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.core import settings
from trainer.core.errors import collect
from trainer.k8s.lifecycle import (
    JobFailed,
    Stopped,
    api_client,
    create_or_attach,
    default_namespace,
    failure_report,
    follow_job,
    to_dict,
)
from trainer.k8s.podspec import (
    ClusterSpec,
    accelerators,
    container_security,
    labels,
    pod_security,
    queue_labels,
    secret_env,
    tolerations,
    tracking_env,
    train_command,
    volume_shm,
)
from trainer.launch.base import Launcher

GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
NODE = "node"  # the torch runtimes' replicated job and container name
MANAGER = "llm-finetune"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"


def build_trainjob(name: str, train_args: list[str], spec: ClusterSpec, run_labels: dict[str, str] | None = None):
    """The TrainJob (a kubeflow_trainer_api model), not yet sent anywhere."""
    from kubeflow_trainer_api import models as m
    from kubernetes.client import V1EmptyDirVolumeSource, V1EnvVar, V1Volume, V1VolumeMount

    collect(spec.problems(), what="invalid cluster settings")
    gpus = accelerators(spec, spec.procs_per_node)
    env = [
        *secret_env(),
        *tracking_env(),
        V1EnvVar(name="FINETUNE_CACHE_DIR", value="/cache"),
        V1EnvVar(name="PYTHONUNBUFFERED", value="1"),
    ]
    pod = {
        "nodeSelector": spec.node_selector or None,
        "tolerations": tolerations(spec) or None,
        "securityContext": to_dict(pod_security()),
        "serviceAccountName": spec.service_account or None,
        "terminationGracePeriodSeconds": spec.termination_grace_s,
        "volumes": [
            to_dict(volume_shm(spec)),
            to_dict(V1Volume(name="cache", empty_dir=V1EmptyDirVolumeSource(size_limit=spec.cache_size))),
        ],
        "containers": [
            {
                "name": NODE,
                "securityContext": to_dict(container_security()),
                "volumeMounts": [
                    to_dict(V1VolumeMount(name="dshm", mount_path="/dev/shm")),
                    to_dict(V1VolumeMount(name="cache", mount_path="/cache")),
                ],
            }
        ],
    }
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": spec.namespace or None,
            "labels": {**labels("trainer"), **(run_labels or {}), **queue_labels(spec)},
        },
        "spec": {
            "runtimeRef": {"apiGroup": GROUP, "kind": "ClusterTrainingRuntime", "name": spec.training_runtime},
            # The cluster enforces wait_timeout_s too, should the pipeline pod that waits be gone.
            "activeDeadlineSeconds": spec.wait_timeout_s or None,
            "trainer": {
                "image": spec.image or settings.image(),
                "command": train_command(train_args),
                "env": [to_dict(e) for e in env],
                "numNodes": spec.nodes,
                "numProcPerNode": spec.procs_per_node,
                "resourcesPerNode": {
                    "requests": {"cpu": spec.cpu, "memory": spec.memory, **gpus},
                    "limits": {"memory": spec.memory, **gpus},
                },
            },
            "runtimePatches": [
                {
                    "manager": MANAGER,
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": NODE,
                                        "template": {
                                            "spec": {
                                                "template": {
                                                    # Istio sidecars keep pods Running after training ends; the job would never finish.
                                                    "metadata": {
                                                        "labels": labels("trainer"),
                                                        "annotations": {"sidecar.istio.io/inject": "false"},
                                                    },
                                                    "spec": {k: v for k, v in pod.items() if v is not None},
                                                }
                                            }
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }
    return m.TrainerV1alpha1TrainJob.from_dict(_drop_none(body))


def _drop_none(obj):
    if isinstance(obj, dict):
        return {k: _drop_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_drop_none(v) for v in obj]
    return obj


@dataclass
class TrainJobLauncher(Launcher):
    spec: ClusterSpec
    client_configuration: Any = None  # kubernetes.client.Configuration; None: in-cluster / kubeconfig

    def build(self, train_args: list[str], name: str) -> list:
        return [build_trainjob(name, train_args, self.spec)]

    def run(self, train_args: list[str], name: str) -> None:
        """Create (or attach to) the TrainJob, stream node 0's log, wait, report, clean up."""
        from kubernetes import client as k
        from kubernetes.client.exceptions import ApiException

        api = api_client(self.client_configuration)
        custom, core = k.CustomObjectsApi(api), k.CoreV1Api(api)
        namespace = self.spec.namespace or default_namespace()
        job = to_dict(build_trainjob(name, train_args, self.spec))
        job["metadata"]["namespace"] = namespace

        def create() -> None:
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
            print(
                f"created TrainJob {namespace}/{name} on runtime {self.spec.training_runtime}: "
                f"{self.spec.nodes} node(s) x {self.spec.procs_per_node} process(es)",
                flush=True,
            )

        def gone() -> bool:
            try:
                custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            except ApiException as err:
                if err.status == 404:
                    return True
                raise
            return False

        create_or_attach(
            "TrainJob",
            f"{namespace}/{name}",
            create,
            lambda err: isinstance(err, ApiException) and err.status == 409,
            lambda: _status(custom, namespace, name),
            lambda: custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
            gone,
            poll_s=self.spec.poll_interval_s,
        )
        succeeded = deleted = False
        pods = f"{JOBSET_LABEL}={name}"
        try:
            follow_job(
                lambda: _status(custom, namespace, name),
                core,
                namespace,
                f"{pods},jobset.sigs.k8s.io/replicatedjob-name={NODE},batch.kubernetes.io/job-completion-index=0",
                NODE,
                self.spec,
            )
            succeeded = True
        except Stopped as why:
            report = failure_report(core, namespace, name, pods, _is_node0, NODE)
            if str(why) != "failed":  # stalled or timed out: nobody waits for it, and a restart would stall again
                custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
                deleted, report = True, f"{report}\nthe job was deleted to free its accelerators"
            raise JobFailed(f"TrainJob {namespace}/{name} {why}.\n{report}") from None
        finally:
            if not deleted and (self.spec.cleanup == "always" or (succeeded and self.spec.cleanup == "on-success")):
                custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
                print(f"deleted TrainJob {namespace}/{name} (cleanup={self.spec.cleanup})", flush=True)


def _status(custom, namespace: str, name: str) -> str:
    from kubeflow_trainer_api import models as m

    job = m.TrainerV1alpha1TrainJob.from_dict(
        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    )
    true = {c.type for c in ((job.status.conditions or []) if job.status else []) if c.status == "True"}
    return "succeeded" if "Complete" in true else "failed" if "Failed" in true else "running"


def _is_node0(pod) -> bool:
    lab = pod.metadata.labels or {}
    return (
        lab.get("jobset.sigs.k8s.io/replicatedjob-name") == NODE
        and lab.get("batch.kubernetes.io/job-completion-index") == "0"
    )
