"""Cluster mode against the real kubernetes / kubeflow-training clients, with a fake only at
the HTTP boundary (tests/k8s_fake_api.py), plus schema validation of every object we create."""

import functools
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.k8s_fake_api import FakeKubeAPI, JobScript
from tests.schemas import assert_restricted, validate
from trainer.core.errors import UserError
from trainer.deploy import deployment as cluster_serve
from trainer.deploy.base import ServeSpec
from trainer.deploy.server import image as serve_image
from trainer.k8s import lifecycle, podspec
from trainer.k8s.lifecycle import JobFailed, to_dict
from trainer.k8s.podspec import ClusterSpec
from trainer.launch.pytorchjob import PyTorchJobLauncher, build_pytorchjob

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--model-uri=s3://b/models/m", "--dataset-uri=s3://b/datasets/d", "--output-prefix=runs/r1"]


def job(spec: ClusterSpec, name="ft-run1") -> dict:
    obj = to_dict(build_pytorchjob(name, ARGS, spec))
    validate(obj)
    assert_restricted(obj)
    return obj


def test_one_node_is_master_only():
    obj = job(ClusterSpec(nodes=1, procs_per_node=1))
    assert set(obj["spec"]["pytorchReplicaSpecs"]) == {"Master"}
    assert obj["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1


def test_n_nodes_are_one_master_and_n_minus_one_workers():
    obj = job(ClusterSpec(nodes=4, procs_per_node=8))
    rs = obj["spec"]["pytorchReplicaSpecs"]
    assert rs["Master"]["replicas"] == 1 and rs["Worker"]["replicas"] == 3
    assert obj["spec"]["nprocPerNode"] == "8"
    # ExitCode: 1-127 (2 = bad input) are permanent, 128-255 (137 OOM-kill, 143 SIGTERM) restart the pod
    assert obj["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"  # a failed job's running pods free their GPUs
    for role in rs.values():
        assert role["restartPolicy"] == "ExitCode"
        [c] = role["template"]["spec"]["containers"]
        assert c["name"] == "pytorch"  # required by the operator
        assert c["command"][:6] == ["python", "-m", "trainer.recipe.torchrun", "-m", "trainer", "train"]
        assert c["command"][6:] == ARGS
    assert obj["spec"]["runPolicy"]["backoffLimit"] == 3


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi"])
def test_accelerator_resource_name(resource):
    c = job(ClusterSpec(nodes=2, procs_per_node=4, accelerator_resource=resource))["spec"]["pytorchReplicaSpecs"][
        "Worker"
    ]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"][resource] == "4" and c["resources"]["requests"][resource] == "4"


def test_cpu_only_requests_no_accelerator():
    c = job(ClusterSpec(accelerator_resource=""))["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
        "containers"
    ][0]
    assert set(c["resources"]["limits"]) == {"memory"}


def test_credentials_are_secret_references_only():
    c = job(ClusterSpec())["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "llm-finetune-s3", "key": "accesskey"}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "secretkey"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert all("value" not in env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN"))


def test_scheduling_shm_queue_and_name():
    obj = job(
        ClusterSpec(
            node_selector={"pool": "h100"},
            queue="team-a",
            shm_size="32Gi",
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        )
    )
    pod = obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "h100"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}} in pod["volumes"]
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert podspec.job_name("8F3C2A10-1111-2222-3333-444455556666") == "ft-8f3c2a10-1111-2222-3333-444455556666"
    assert len(podspec.job_name("x" * 100)) <= 45


def test_bad_cluster_settings_are_all_reported():
    with pytest.raises(UserError) as err:
        build_pytorchjob(
            "ft-x",
            ARGS,
            ClusterSpec(nodes=0, cleanup="sometimes", accelerator_resource="GPU!", tolerations=[{"colour": "red"}]),
        )
    msg = str(err.value)
    assert "cleanup must be one of" in msg and "nodes must be >= 1" in msg
    assert "accelerator_resource='GPU!'" in msg and "unknown field(s) ['colour']" in msg


def test_launcher_creates_streams_waits_and_cleans_up_fake_api(capsys):
    with FakeKubeAPI() as api:
        PyTorchJobLauncher(ClusterSpec(namespace="ml", nodes=2, poll_interval_s=0.01), api.configuration).run(
            ARGS, "ft-ok"
        )
        [(_, path, body)] = api.state.calls("POST", "pytorchjobs")
        assert path.endswith("/namespaces/ml/pytorchjobs") and body["metadata"]["name"] == "ft-ok"
        validate(body)
        assert api.state.calls("DELETE", "pytorchjobs/ft-ok")  # cleanup=on-success
    out = capsys.readouterr().out
    assert "log of pod ml/ft-ok-master-0" in out and "step 2 loss 1.0" in out  # master log streamed into ours
    assert out.count("step 1 loss 2.0") == 1  # re-reading the log after a reconnect repeats nothing


def test_failure_report_has_phases_events_and_last_logs_fake_api():
    script = JobScript(
        conditions=["Created", "Running", "Failed"],
        pod_phase="Failed",
        terminated_reason="OOMKilled",
        exit_code=137,
        master_log="loading\nstep 9\nCUDA out of memory\n",
        events=[("Warning", "BackOff", "Back-off restarting failed container")],
    )
    with FakeKubeAPI(script) as api:
        launcher = PyTorchJobLauncher(
            ClusterSpec(namespace="ml", nodes=2, poll_interval_s=0.01, cleanup="never"), api.configuration
        )
        with pytest.raises(JobFailed) as err:
            launcher.run(ARGS, "ft-bad")
        assert not api.state.calls("DELETE", "pytorchjobs")  # cleanup=never keeps it for inspection
    msg = str(err.value)
    assert "PyTorchJob ml/ft-bad failed" in msg and isinstance(launcher, PyTorchJobLauncher)
    assert "ft-bad-master-0: Failed pytorch terminated OOMKilled exit=137" in msg
    assert "ft-bad-worker-0: Failed" in msg
    assert "Warning BackOff: Back-off restarting failed container" in msg
    assert "CUDA out of memory" in msg


def test_failed_job_is_deleted_with_cleanup_always_fake_api():
    with FakeKubeAPI(JobScript(conditions=["Created", "Failed"])) as api:
        with pytest.raises(JobFailed):
            PyTorchJobLauncher(
                ClusterSpec(namespace="ml", poll_interval_s=0.01, cleanup="always"), api.configuration
            ).run(ARGS, "ft-gone")
        assert api.state.calls("DELETE", "pytorchjobs/ft-gone")


def test_retried_task_attaches_to_existing_job_fake_api(capsys):
    with FakeKubeAPI() as api:
        spec = ClusterSpec(namespace="ml", poll_interval_s=0.01, cleanup="never")
        PyTorchJobLauncher(spec, api.configuration).run(ARGS, "ft-same")
        api.state.job_reads.clear()
        PyTorchJobLauncher(spec, api.configuration).run(ARGS, "ft-same")  # 409 -> follow it
        assert len(api.state.calls("POST", "pytorchjobs")) == 2
    assert "already exists; following it" in capsys.readouterr().out


def test_retry_after_a_failed_job_starts_it_again_fake_api(capsys):
    """KFP's Retry keeps the run id, so the job name: a kept Failed job must not be re-reported forever."""
    with FakeKubeAPI(JobScript(conditions=["Created", "Failed"])) as api:
        spec = ClusterSpec(namespace="ml", poll_interval_s=0.01, cleanup="on-success")
        with pytest.raises(JobFailed):
            PyTorchJobLauncher(spec, api.configuration).run(ARGS, "ft-retry")
        assert not api.state.calls("DELETE", "pytorchjobs")  # kept for inspection
        capsys.readouterr()
        with pytest.raises(JobFailed):  # the new job runs its own (scripted, failing) lifecycle
            PyTorchJobLauncher(spec, api.configuration).run(ARGS, "ft-retry")
        assert len(api.state.calls("POST", "pytorchjobs")) == 3  # first, the 409, the new job
        assert len(api.state.calls("DELETE", "pytorchjobs/ft-retry")) == 1
    out = capsys.readouterr().out
    assert "earlier attempt that failed; deleting it and starting again" in out
    assert out.index("deleting it and starting again") < out.index("created PyTorchJob ml/ft-retry")


def test_wait_timeout_is_a_parameter_fake_api():
    with FakeKubeAPI(JobScript(conditions=["Created"] * 100)) as api:
        with pytest.raises(JobFailed, match="timed out after wait_timeout_s=1") as err:
            PyTorchJobLauncher(
                ClusterSpec(namespace="ml", poll_interval_s=0.1, wait_timeout_s=1, cleanup="never"), api.configuration
            ).run(ARGS, "ft-slow")
        [(_, _, body)] = api.state.calls("POST", "pytorchjobs")
        assert body["spec"]["runPolicy"]["activeDeadlineSeconds"] == 1  # enforced by the cluster as well
        assert api.state.calls("DELETE", "pytorchjobs/ft-slow")  # nobody waits for it: its GPUs are freed
    assert "deleted to free its accelerators" in str(err.value)


def serve_spec(**kw):
    return ServeSpec(name="tuned", model_uri="s3://b/models/sha256-abc", cluster=ClusterSpec(namespace="ml", **kw))


def test_vllm_objects_are_valid_and_probe_readiness_on_models():
    deployment, service = (to_dict(o) for o in cluster_serve.build(serve_spec(node_selector={"pool": "gpu"})))
    validate(deployment)
    validate(service)
    pod = deployment["spec"]["template"]["spec"]
    [server] = pod["containers"]
    assert server["image"].startswith("vllm/vllm-openai:") and not server["image"].endswith(":latest")
    assert server["readinessProbe"]["httpGet"]["path"] == "/v1/models"
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "--served-model-name" in server["command"] and "tuned" in server["command"]
    [fetch] = pod["initContainers"]
    assert fetch["command"][-2:] == ["s3://b/models/sha256-abc", "/models/model"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_redeploy_replaces_instead_of_failing_fake_api():
    from kubernetes import client as k

    with FakeKubeAPI() as api:
        c = k.ApiClient(api.configuration)
        apps, core = k.AppsV1Api(c), k.CoreV1Api(c)
        d, s = cluster_serve.build(serve_spec())
        assert cluster_serve.apply(apps, core, d, s, "ml") == "created"
        d2, s2 = cluster_serve.build(
            ServeSpec(name="tuned", model_uri="s3://b/models/sha256-new", cluster=ClusterSpec(namespace="ml"))
        )
        assert cluster_serve.apply(apps, core, d2, s2, "ml") == "replaced"
        stored = api.state.objects[("Deployment", "ml", "tuned")]
        assert stored["metadata"]["generation"] == 2
        assert stored["spec"]["template"]["metadata"]["annotations"]["llm-finetune/model-uri"].endswith("sha256-new")
        cluster_serve.wait_rollout(apps, "tuned", "ml", timeout_s=10, poll_s=0)
        assert len(api.state.calls("GET", "deployments/tuned/status")) >= 2  # waited for the new generation


def test_rollout_timeout_says_what_to_check_fake_api(capsys):
    from kubernetes import client as k

    with FakeKubeAPI() as api:
        api.state.rollout_after_reads = 10**6
        c = k.ApiClient(api.configuration)
        d, s = cluster_serve.build(serve_spec())
        cluster_serve.apply(k.AppsV1Api(c), k.CoreV1Api(c), d, s, "ml")
        with pytest.raises(UserError, match="kubectl -n ml describe deploy/tuned"):
            cluster_serve.wait_rollout(k.AppsV1Api(c), "tuned", "ml", timeout_s=0.3, poll_s=0.05, progress_every_s=0.1)
    assert "rollout of ml/tuned: 0/1 available after 0 s (limit 0 s)" in capsys.readouterr().out  # progress


def dry_run(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
            "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
            "HF_TOKEN": "hf_secret_token",
        },
    )
    assert proc.returncode == 0, proc.stderr
    for secret in ("s3cr3t-value", "AKIAEXAMPLE", "hf_secret_token"):
        assert secret not in proc.stdout
    import yaml

    return list(yaml.safe_load_all(proc.stdout))


def test_dry_run_2_nodes_x_8_gpus_is_valid_and_secret_free():
    tol = json.dumps([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    [pj] = dry_run(
        "launch-k8s",
        "--dry-run",
        "--nodes",
        "2",
        "--procs-per-node",
        "8",
        "--namespace",
        "ml",
        "--tolerations",
        tol,
        "--queue",
        "gpu-queue",
        "--run-id",
        "run-42",
        *ARGS,
    )
    validate(pj)
    assert pj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1 and pj["spec"]["nprocPerNode"] == "8"
    objs = dry_run("deploy-k8s", "--dry-run", "--name", "tuned", "--model-uri", "s3://b/models/m", "--namespace", "ml")
    assert [o["kind"] for o in objs] == ["Deployment", "Service"]
    for o in objs:
        validate(o)


# --- Kubeflow Trainer v2: TrainJob -------------------------------------------------------


def trainjob(spec: ClusterSpec, name="ft-run1") -> dict:
    from trainer.launch.trainjob import build_trainjob

    obj = to_dict(build_trainjob(name, ARGS, spec))
    validate(obj)  # the v2.3.0 CRD, strict
    assert_restricted(obj)
    return obj


def test_trainjob_shape_runtime_resources_and_placement():
    obj = trainjob(
        ClusterSpec(
            nodes=2,
            procs_per_node=8,
            accelerator_resource="amd.com/gpu",
            queue="team-a",
            node_selector={"pool": "mi300"},
            training_runtime="llm-finetune-torch",
            tolerations=[{"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        )
    )
    assert obj["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "llm-finetune-torch",
    }
    t = obj["spec"]["trainer"]
    assert t["numNodes"] == 2 and t["numProcPerNode"] == 8
    assert t["resourcesPerNode"]["limits"]["amd.com/gpu"] == "8"
    assert t["command"][:6] == ["python", "-m", "trainer.recipe.torchrun", "-m", "trainer", "train"]
    assert t["command"][6:] == ARGS  # the same command as every other launcher
    env = {e["name"]: e for e in t["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "llm-finetune-s3", "key": "secretkey"}
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    [patch] = obj["spec"]["runtimePatches"]
    [node] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    assert node["name"] == "node" and pod["containers"][0]["name"] == "node"
    assert pod["nodeSelector"] == {"pool": "mi300"} and pod["tolerations"][0]["key"] == "amd.com/gpu"
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]


def test_trainjob_runtime_exists_in_shipped_or_upstream_manifests():
    """The runtime the TrainJob names by default is Trainer's own torch-distributed, and its
    replicated job and container are named `node`, which the runtime patch addresses."""
    import yaml

    from tests.schemas import schema_file

    runtime = yaml.safe_load(schema_file("runtime-torch-distributed.yaml").read_text())
    validate(runtime)
    assert runtime["metadata"]["name"] == ClusterSpec().training_runtime
    [rj] = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert rj["name"] == "node" and rj["template"]["spec"]["template"]["spec"]["containers"][0]["name"] == "node"


def test_trainjob_launcher_creates_streams_waits_and_cleans_up_fake_api(capsys):
    from trainer.launch.trainjob import TrainJobLauncher

    with FakeKubeAPI() as api:
        TrainJobLauncher(ClusterSpec(namespace="ml", nodes=2, poll_interval_s=0.01), api.configuration).run(
            ARGS, "ft-tj"
        )
        [(_, path, body)] = api.state.calls("POST", "trainjobs")
        assert path == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs"
        validate(body)
        assert api.state.calls("DELETE", "trainjobs/ft-tj")
    out = capsys.readouterr().out
    assert "created TrainJob ml/ft-tj on runtime torch-distributed" in out
    assert "log of pod ml/ft-tj-node-0-0" in out and "step 2 loss 1.0" in out


def test_trainjob_failure_report_and_retry_attaches_fake_api(capsys):
    from trainer.launch.trainjob import TrainJobLauncher

    script = JobScript(
        conditions=["Created", "Failed"],
        pod_phase="Failed",
        terminated_reason="Error",
        exit_code=2,
        master_log="error: dataset_source 'x' not found\n",
        events=[("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit")],
    )
    with FakeKubeAPI(script) as api:
        spec = ClusterSpec(namespace="ml", nodes=2, poll_interval_s=0.01, cleanup="never")
        api.state.objects[("TrainJob", "ml", "ft-tj")] = {
            "metadata": {"name": "ft-tj", "namespace": "ml", "generation": 1},
            "spec": to_dict(__import__("trainer.launch.trainjob", fromlist=["x"]).build_trainjob("ft-tj", ARGS, spec))[
                "spec"
            ],
        }
        with pytest.raises(JobFailed) as err:
            TrainJobLauncher(spec, api.configuration).run(ARGS, "ft-tj")
        assert not api.state.calls("DELETE", "trainjobs")  # still running when found: followed, not replaced
    assert "already exists; following it" in capsys.readouterr().out  # a retried task attaches
    msg = str(err.value)
    assert "TrainJob ml/ft-tj failed" in msg
    assert "ft-tj-node-0-0: Failed node terminated Error exit=2" in msg and "ft-tj-node-0-1: Failed" in msg
    assert "Warning BackoffLimitExceeded" in msg and "dataset_source 'x' not found" in msg


def test_stalled_job_is_stopped_with_the_stuck_stage_fake_api():
    """The watchdog reads the trainer's progress lines from the streamed log; when the step stops
    moving the job is deleted (its GPUs freed) and the error names the stage."""
    from trainer.core.watchdog import progress_line

    script = JobScript(
        conditions=["Created", "Running"] + ["Running"] * 10**4,
        master_log=f"{progress_line('loading model', 0)}\n{progress_line('training', 3)}\n",
    )
    with FakeKubeAPI(script) as api:
        spec = ClusterSpec(namespace="ml", poll_interval_s=0.05, stall_timeout_s=1, cleanup="never")
        with pytest.raises(JobFailed, match=r"stalled: no progress for \d+ s in stage 'training' at step 3"):
            PyTorchJobLauncher(spec, api.configuration).run(ARGS, "ft-stuck")
        assert api.state.calls("DELETE", "pytorchjobs/ft-stuck")  # stopped, not left holding GPUs


def test_launcher_names():
    """trainer.launch.launcher, the one chooser: each name its backend, with the spec's topology and the watchdog's
    stall limit; an unknown name one message."""
    from trainer.core.errors import UserError
    from trainer.launch.trainjob import TrainJobLauncher
    from trainer.launch import LocalLauncher, launcher

    spec = ClusterSpec(nodes=2, procs_per_node=3, backoff_limit=4)
    for name in ("pytorchjob", "kubernetes"):
        chosen = launcher(name, spec, stall_timeout_s=60)
        assert type(chosen) is PyTorchJobLauncher and chosen.spec.stall_timeout_s == 60
    assert type(launcher("trainjob", spec)) is TrainJobLauncher
    local = launcher("local", spec, stall_timeout_s=9)
    assert type(local) is LocalLauncher
    assert (local.nnodes, local.nproc_per_node, local.max_restarts, local.stall_timeout_s) == (2, 3, 4, 9)
    with pytest.raises(UserError, match="launcher must be one of .*got 'slurm'"):
        launcher("slurm", spec)


def test_dry_run_trainjob_cli_is_valid():
    [tj] = dry_run(
        "launch-k8s",
        "--dry-run",
        "--launcher",
        "trainjob",
        "--nodes",
        "2",
        "--procs-per-node",
        "4",
        "--namespace",
        "ml",
        "--run-id",
        "run-42",
        *ARGS,
    )
    validate(tj)
    assert tj["kind"] == "TrainJob" and tj["metadata"]["name"] == "ft-run-42"


@pytest.mark.parametrize(
    "args, fix",
    [
        (["--namespace", "Bad_NS"], "namespace='Bad_NS' is not a valid Kubernetes name"),
        (["--tolerations", '[{"key": "k", "operator": "Sometimes"}]'], "operator='Sometimes' is not allowed"),
        (["--node-selector", '{"pool": 1}'], "must be a string"),
    ],
)
def test_cli_refuses_bad_cluster_values(args, fix):
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "launch-k8s", "--dry-run", *args, *ARGS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and fix in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_deploy_cli_refuses_bad_name_and_gpus():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "deploy-k8s",
            "--dry-run",
            "--name",
            "My_Model",
            "--gpus",
            "-3",
            "--model-uri",
            "s3://b/m",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "served_model_name='My_Model'" in proc.stderr and "serve_gpus must be >= 0" in proc.stderr


# --- vLLM: tensor parallelism, adapters side by side, images per accelerator ---------------


def test_multi_lora_deployment_serves_base_and_adapters_by_name():
    spec = ServeSpec(
        name="base",
        model_uri="s3://b/models/base",
        gpus=2,
        max_lora_rank=64,
        adapters={"trial-a": "s3://b/models/a", "trial-b": "s3://b/models/b"},
        cluster=ClusterSpec(namespace="ml", queue="serve-q"),
    )
    deployment, service = (to_dict(o) for o in cluster_serve.build(spec))
    validate(deployment)
    assert_restricted(deployment)
    pod = deployment["spec"]["template"]["spec"]
    cmd = pod["containers"][0]["command"]
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
    assert "--enable-lora" in cmd and cmd[cmd.index("--max-lora-rank") + 1] == "64"
    i = cmd.index("--lora-modules")
    assert cmd[i + 1 : i + 3] == ["trial-a=/models/adapters/trial-a", "trial-b=/models/adapters/trial-b"]
    fetch = " ".join(pod["initContainers"][0]["command"])
    assert "download s3://b/models/a /models/adapters/trial-a" in fetch and "s3://b/models/base /models/model" in fetch
    assert deployment["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "serve-q"
    assert pod["initContainers"][0]["resources"]["limits"]["memory"]


def test_vllm_image_follows_the_accelerator():
    amd = ServeSpec(name="m", model_uri="s3://b/m", cluster=ClusterSpec(accelerator_resource="amd.com/gpu"))
    nv = ServeSpec(name="m", model_uri="s3://b/m")
    assert "rocm" in serve_image(amd) and "rocm" not in serve_image(nv)
    assert serve_image(ServeSpec(name="m", model_uri="s3://b/m", vllm_image="my/vllm:1")) == "my/vllm:1"


def test_local_and_cluster_vllm_flags_are_the_same_function():
    from trainer.serving.args import vllm_args

    d, _ = cluster_serve.build(serve_spec())
    cmd = to_dict(d)["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[2:] == vllm_args("/models/model", "tuned", host="0.0.0.0", port=8000)


# --- KServe ---------------------------------------------------------------------------------


def kserve_spec(**kw):
    return ServeSpec(name="tuned", model_uri="s3://b/models/sha256-abc", cluster=ClusterSpec(namespace="ml"), **kw)


def test_kserve_objects_are_valid_and_share_vllm_flags():
    from trainer.deploy import kserve

    runtime, isvc = kserve.build(kserve_spec(gpus=4))
    for obj in (runtime, isvc):
        validate(obj)  # KServe v0.20.0 CRDs, strict
        assert_restricted(obj)
    args = runtime["spec"]["containers"][0]["args"]
    assert "--enable-auto-tool-choice" in args and args[args.index("--served-model-name") + 1] == "{{.Name}}"
    model = isvc["spec"]["predictor"]["model"]
    assert model["storageUri"] == "s3://b/models/sha256-abc" and model["runtime"] == runtime["metadata"]["name"]
    assert (
        model["args"] == ["--tool-call-parser", "hermes", "--tensor-parallel-size", "4"]
        and model["resources"]["limits"]["nvidia.com/gpu"] == "4"
    )
    assert isvc["spec"]["predictor"]["serviceAccountName"] == kserve.SERVICE_ACCOUNT


def test_the_schema_check_refuses_what_the_api_server_would_prune_or_reject():
    """tests/schemas.validate, whose CRD validators are built once and reused: an unknown field
    (pruned in silence by the API server) or a wrong type fails on every call, not only the first."""
    import copy

    import jsonschema

    from trainer.deploy import kserve

    _, isvc = kserve.build(kserve_spec())
    job_obj = job(ClusterSpec())
    for _ in range(2):
        validate(isvc)
        validate(job_obj)
        unknown = copy.deepcopy(isvc)
        unknown["spec"]["predictor"]["model"]["storageUrl"] = "s3://b/typo"
        with pytest.raises(jsonschema.ValidationError, match="'storageUrl' was unexpected"):
            validate(unknown)
        wrong_type = copy.deepcopy(job_obj)
        wrong_type["spec"]["runPolicy"]["backoffLimit"] = "3"
        with pytest.raises(jsonschema.ValidationError, match="'3' is not of type 'integer'"):
            validate(wrong_type)


def test_kserve_create_ready_smoke_and_replace_on_redeploy_fake_api(monkeypatch):
    from kubernetes import client as k

    from trainer.deploy import kserve

    seen = []
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")  # in a pod of this (fake) cluster: DNS resolves
    monkeypatch.setattr("trainer.serving.client.wait_ready", lambda url, timeout: seen.append(("ready", url)) or 1.0)
    monkeypatch.setattr(
        "trainer.serving.client.smoke_test",
        lambda url, model, messages, tools=None, require_tool_call=True: (
            seen.append(("chat", url, model, require_tool_call))
            or {"ok": True, "reason": "", "verdict": "ok", "latency_s": 0.1, "reply": "get_weather {}", "model": model}
        ),
    )
    with FakeKubeAPI() as api:
        out = kserve.KServe().deploy(
            kserve_spec(), [{"role": "user", "content": "hi"}], client_configuration=api.configuration, poll_s=0.01
        )
        assert out.extra["action"] == "created" and out.endpoint == "http://tuned-predictor.ml.svc.cluster.local/v1"
        assert out.smoke_ok and out.names == ["tuned"]
        assert seen == [
            ("ready", "http://tuned-predictor.ml.svc.cluster.local"),
            ("chat", "http://tuned-predictor.ml.svc.cluster.local", "tuned", True),
        ]
        [(_, _, body)] = api.state.calls("POST", "inferenceservices")
        validate(body)
        custom = k.CustomObjectsApi(k.ApiClient(api.configuration))
        again = kserve.apply(
            custom,
            kserve.build(
                ServeSpec(name="tuned", model_uri="s3://b/models/sha256-new", cluster=ClusterSpec(namespace="ml"))
            ),
            "ml",
        )
        assert again == "replaced" and api.state.calls("PUT", "inferenceservices/tuned")
        stored = api.state.objects[("InferenceService", "ml", "tuned")]
        assert stored["metadata"]["generation"] == 2
        assert stored["spec"]["predictor"]["model"]["storageUri"].endswith("sha256-new")
        kserve.wait_ready(custom, "tuned", "ml", timeout_s=5, poll_s=0)  # waits for the new generation


def test_kserve_not_ready_says_what_to_check_fake_api(capsys):
    from kubernetes import client as k

    from trainer.deploy import kserve

    with FakeKubeAPI() as api:
        api.state.isvc_ready_after_reads = 10**6
        custom = k.CustomObjectsApi(k.ApiClient(api.configuration))
        kserve.apply(custom, kserve.build(kserve_spec()), "ml")
        with pytest.raises(UserError, match="storage-initializer"):
            kserve.wait_ready(custom, "tuned", "ml", timeout_s=0.3, poll_s=0.02, progress_every_s=0.1)
    assert "InferenceService ml/tuned not Ready after 0 s (limit 0 s): Ready=False" in capsys.readouterr().out


def test_sweep_trials_side_by_side_on_the_cluster_fake_api(store, tmp_path, monkeypatch):
    """deploy_trials' library call: every trial's adapter beside the base, --max-lora-rank from the
    largest adapter's config, --tool-call-parser from the base model's chat template (a Llama 3
    here), each name smoke-tested through the Service."""
    import json as json_

    from tests.unit.test_serve_openai import LLAMA3_TEMPLATE, LLAMA3_TOKENS, _write_tree
    from trainer import deploy as deploying
    from trainer.deploy.base import ServeSpec, trial_adapters

    base_uri, _ = store.put_tree(_write_tree(tmp_path / "base", LLAMA3_TEMPLATE, LLAMA3_TOKENS), "models")
    uris = []
    for r in (8, 64):
        d = tmp_path / f"adapter-r{r}"
        d.mkdir()
        (d / "adapter_config.json").write_text(json_.dumps({"r": r, "peft_type": "LORA"}))
        uris.append(store.put_tree(d, "models")[0])
    asked = []
    monkeypatch.setattr("trainer.serving.client.wait_ready", lambda url, timeout: 1.0)
    monkeypatch.setattr(
        "trainer.serving.client.smoke_test",
        lambda url, model, messages, tools=None, require_tool_call=True: (
            asked.append((model, require_tool_call))
            or {"ok": True, "reason": "", "verdict": "ok", "latency_s": 0.2, "reply": "x", "model": model}
        ),
    )
    spec = ServeSpec(
        name="sweep-base",
        model_uri=base_uri,
        adapters=trial_adapters("sweep", uris),
        cluster=ClusterSpec(namespace="ml"),
    )
    with FakeKubeAPI() as api:
        out = deploying.deploy(
            "kubernetes",
            spec,
            store,
            [{"role": "user", "content": "hi"}],
            client_configuration=api.configuration,
            poll_s=0.01,
        )
        [(_, _, body)] = api.state.calls("POST", "deployments")
    cmd = body["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[cmd.index("--max-lora-rank") + 1] == "64"
    assert cmd[cmd.index("--tool-call-parser") + 1] == "llama3_json"
    assert cmd[cmd.index("--chat-template") + 1] == "/models/model/chat_template.jinja"  # the tree's, as trained
    assert out.names == ["sweep-base", "sweep-trial-0", "sweep-trial-1"] and out.smoke_ok
    assert asked == [("sweep-base", False), ("sweep-trial-0", True), ("sweep-trial-1", True)]


def test_deploy_trials_component_does_nothing_unless_enabled(capsys):
    from components.deploy_trials import deploy_trials

    out = deploy_trials.python_func(base_model=None, adapters=[], dataset=None, smoke=None, enabled=False)
    assert out.endpoint == "" and out.models == [] and "only the winner" in capsys.readouterr().out


def test_a_queued_job_is_not_a_stalled_one_fake_api():
    """No log yet (pods pending, e.g. queued by Kueue): the watchdog has not started, so only
    wait_timeout_s ends the wait."""
    script = JobScript(conditions=["Created"] * 10**4, pod_phase="Pending")
    with FakeKubeAPI(script) as api:
        spec = ClusterSpec(namespace="ml", poll_interval_s=0.05, stall_timeout_s=0.2, wait_timeout_s=1, cleanup="never")
        with pytest.raises(JobFailed, match="timed out after wait_timeout_s=1") as err:
            PyTorchJobLauncher(spec, api.configuration).run(ARGS, "ft-queued")
        assert "stalled" not in str(err.value)


def test_a_master_pod_recreated_under_the_same_name_is_streamed_from_its_start_fake_api(capsys):
    """The Training Operator replaces a pod that exited with a retryable code (ExitCode policy) by
    a new pod of the same name and restart count 0: its log is new, none of it was shown yet."""
    script = JobScript(
        conditions=["Created"] + ["Running"] * 40 + ["Succeeded"],
        master_log="step 1\nstep 2\nSIGTERM: exiting\n",
        recreated_log="resuming\nstep 3\nfinal\n",
    )
    with FakeKubeAPI(script) as api:
        PyTorchJobLauncher(ClusterSpec(namespace="ml", poll_interval_s=0.01), api.configuration).run(ARGS, "ft-re")
    out = capsys.readouterr().out
    assert "SIGTERM: exiting" in out and "resuming" in out and "final" in out
    assert out.count("step 1") == 1


@pytest.mark.parametrize(
    "first,then",
    [({}, {"adapters": {"a": "s3://b/adapters/a"}}), ({"adapters": {"a": "s3://b/adapters/a"}}, {})],
    ids=["merged-then-adapters", "adapters-then-merged"],
)
def test_kserve_redeploy_in_the_other_mode_leaves_one_storage_field_fake_api(first, then):
    """A JSON merge patch would keep keys the new render does not mention: the previous deploy's
    storageUri / storageUris must be gone, or KServe gets both."""
    from kubernetes import client as k

    from trainer.deploy import kserve

    with FakeKubeAPI() as api:
        custom = k.CustomObjectsApi(k.ApiClient(api.configuration))
        kserve.apply(custom, kserve.build(kserve_spec(**first)), "ml")
        assert kserve.apply(custom, kserve.build(kserve_spec(**then)), "ml") == "replaced"
        predictor = api.state.objects[("InferenceService", "ml", "tuned")]["spec"]["predictor"]
        assert ("storageUris" in predictor) == bool(then) and ("storageUri" in predictor["model"]) == (not then)
        validate(api.state.objects[("InferenceService", "ml", "tuned")])


def test_a_restarted_pod_waiting_for_a_node_is_not_a_stall_fake_api(monkeypatch):
    """After a restart (preemption: the pod is recreated), time Pending for a node or an image is
    not a stall, as before the first start: the watchdog restarts with the new pod's first line.

    Time is scripted, not waited out: a second passes each time the log reader lists the pods,
    and each status poll waits for the next listing. So the job runs on well past the Pending
    spell (10 s against stall_timeout_s=5), and a watchdog left running through it would fire,
    however fast or loaded this machine is."""
    from trainer.launch import pytorchjob

    script = JobScript(
        conditions=["Created"] + ["Running"] * 20 + ["Succeeded"],
        pod_phases=["Running"] * 2 + ["Pending"] * 10 + ["Running"],
        master_log="progress: step=3 stage=train\n",
    )
    with FakeKubeAPI(script) as api:

        def next_listing(_seconds: float) -> None:
            seen, limit = api.state.pod_listings, time.monotonic() + 30
            while api.state.pod_listings == seen and time.monotonic() < limit:
                time.sleep(0.001)

        monkeypatch.setattr(
            pytorchjob,
            "follow_job",
            functools.partial(lifecycle.follow_job, clock=lambda: float(api.state.pod_listings), sleep=next_listing),
        )
        spec = ClusterSpec(namespace="ml", poll_interval_s=0.005, stall_timeout_s=5, cleanup="never")
        PyTorchJobLauncher(spec, api.configuration).run(ARGS, "ft-preempted")
        assert api.state.pod_listings >= 20  # the job outlived the Pending spell by more than the stall timeout


def test_trainjob_retry_after_failure_starts_it_again_fake_api(capsys):
    from trainer.launch.trainjob import TrainJobLauncher

    with FakeKubeAPI(JobScript(conditions=["Created", "Failed"])) as api:
        spec = ClusterSpec(namespace="ml", poll_interval_s=0.01, cleanup="on-success")
        for _ in range(2):
            with pytest.raises(JobFailed):
                TrainJobLauncher(spec, api.configuration).run(ARGS, "ft-tj-retry")
        assert len(api.state.calls("POST", "trainjobs")) == 3
        assert len(api.state.calls("DELETE", "trainjobs/ft-tj-retry")) == 1
    assert "TrainJob ml/ft-tj-retry exists from an earlier attempt that failed" in capsys.readouterr().out


def test_redeploy_leaves_the_deployment_exactly_as_rendered_fake_api():
    """A patch (the client sends a strategic merge patch) keeps what the new render no longer has:
    the old node selector key, toleration and accelerator resource would send the re-deployed
    server to the old nodes, or nowhere. The stored Deployment must be the new render."""
    from kubernetes import client as k

    with FakeKubeAPI() as api:
        c = k.ApiClient(api.configuration)
        apps, core = k.AppsV1Api(c), k.CoreV1Api(c)
        first = serve_spec(
            node_selector={"a": "x", "b": "y"},
            tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        )
        assert cluster_serve.apply(apps, core, *cluster_serve.build(first), "ml") == "created"
        d, s = cluster_serve.build(serve_spec(node_selector={"a": "z"}, accelerator_resource="amd.com/gpu"))
        assert cluster_serve.apply(apps, core, d, s, "ml") == "replaced"
        stored = api.state.objects[("Deployment", "ml", "tuned")]
        pod = stored["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"a": "z"} and "tolerations" not in pod
        assert set(pod["containers"][0]["resources"]["limits"]) == {"memory", "amd.com/gpu"}
        assert stored["spec"] == to_dict(d)["spec"] and stored["metadata"]["generation"] == 2
        assert api.state.objects[("Service", "ml", "tuned")]["spec"]["clusterIP"] == "10.96.0.42"  # kept
        cluster_serve.apply(apps, core, d, s, "ml")  # the same render again: no new rollout
        assert api.state.objects[("Deployment", "ml", "tuned")]["metadata"]["generation"] == 2


def test_redeploy_reads_again_once_when_the_deployment_changed_under_it_fake_api():
    """The replace carries the resourceVersion it read: a write in between (the deployment controller,
    another deploy) gives 409, and one more read-and-replace follows; a second conflict is reported."""
    from kubernetes import client as k

    with FakeKubeAPI() as api:
        c = k.ApiClient(api.configuration)
        apps, core = k.AppsV1Api(c), k.CoreV1Api(c)
        cluster_serve.apply(apps, core, *cluster_serve.build(serve_spec()), "ml")
        api.state.writes_after_read = 1
        d, s = cluster_serve.build(serve_spec(node_selector={"pool": "a100"}))
        assert cluster_serve.apply(apps, core, d, s, "ml") == "replaced"
        assert len(api.state.calls("PUT", "deployments/tuned")) == 2  # 409, then the replace on a fresh read
        assert api.state.objects[("Deployment", "ml", "tuned")]["spec"]["template"]["spec"]["nodeSelector"] == {
            "pool": "a100"
        }
        api.state.writes_after_read = 2
        with pytest.raises(UserError, match="changed while being replaced.*deploy again"):
            cluster_serve.apply(apps, core, *cluster_serve.build(serve_spec()), "ml")


def test_the_service_depends_on_the_name_only_so_a_patch_keeps_it_exact():
    """The Service is patched, not replaced (a PUT would have to carry the allocated clusterIP, and
    would drop what others add to it, e.g. a mesh's annotations): exact only because no setting
    but the name and namespace changes its render, which this pins."""
    other = ServeSpec(
        name="tuned",
        model_uri="s3://b/models/other",
        gpus=2,
        replicas=3,
        adapters={"a": "s3://b/adapters/a"},
        cluster=ClusterSpec(namespace="ml", node_selector={"a": "b"}, queue="q", accelerator_resource="amd.com/gpu"),
    )
    assert to_dict(cluster_serve.build(other)[1]) == to_dict(cluster_serve.build(serve_spec())[1])


def test_kserve_redeploy_leaves_the_inference_service_exactly_as_rendered_fake_api():
    """KServe's objects go through a JSON merge patch, which merges maps key by key: the old node
    selector key and accelerator resource would survive a re-deploy just as in a Deployment."""
    from kubernetes import client as k

    from trainer.deploy import kserve

    def spec(**kw):
        return ServeSpec(name="tuned", model_uri="s3://b/models/sha256-abc", cluster=ClusterSpec(namespace="ml", **kw))

    with FakeKubeAPI() as api:
        custom = k.CustomObjectsApi(k.ApiClient(api.configuration))
        kserve.apply(custom, kserve.build(spec(node_selector={"a": "x", "b": "y"}, queue="q")), "ml")
        objects = kserve.build(spec(node_selector={"a": "z"}, accelerator_resource="amd.com/gpu"))
        assert kserve.apply(custom, objects, "ml") == "replaced"
        stored = api.state.objects[("InferenceService", "ml", "tuned")]
        assert stored["spec"] == objects[1]["spec"] and stored["metadata"]["labels"] == objects[1]["metadata"]["labels"]
        assert api.state.objects[("ServingRuntime", "ml", kserve.RUNTIME_NAME)]["spec"] == objects[0]["spec"]
        validate(stored)


def test_a_log_stream_cut_mid_line_loses_and_repeats_nothing_fake_api(capsys):
    """The API server ends a log stream cleanly when its upstream breaks, possibly mid-line; the
    reconnect reads the log from its start. Only complete lines count as shown."""
    script = JobScript(
        conditions=["Created"] + ["Running"] * 40 + ["Succeeded"],
        master_log="step 1\nstep 2 loss 1.0\nstep 3\n",
        first_read_cut_at=len("step 1\nstep 2 lo"),
    )
    with FakeKubeAPI(script) as api:
        PyTorchJobLauncher(ClusterSpec(namespace="ml", poll_interval_s=0.01), api.configuration).run(ARGS, "ft-cut")
        assert api.state.master_log_reads >= 2
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step")]
    assert shown == ["step 1", "step 2 loss 1.0", "step 3"]


def test_a_finished_pods_unterminated_last_line_is_shown_once_fake_api(capsys):
    """A last line without a newline is complete only when the pod has finished: shown then, once."""
    script = JobScript(
        conditions=["Created"] + ["Running"] * 40 + ["Succeeded"], master_log="step 1\nsaved to s3://b/runs/r1"
    )
    with FakeKubeAPI(script) as api:
        PyTorchJobLauncher(ClusterSpec(namespace="ml", poll_interval_s=0.01), api.configuration).run(ARGS, "ft-eof")
        assert api.state.master_log_reads >= 3  # re-read while running, then finished, then again
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith(("step", "saved"))] == ["step 1", "saved to s3://b/runs/r1"]


def test_a_finished_pods_log_cut_mid_line_shows_the_rest_after_the_reconnect_fake_api(capsys):
    """A finished pod's log that ends mid-line was shown to that point as its last line; when a
    later read has more, the rest follows: nothing twice, nothing lost."""
    script = JobScript(
        conditions=["Created"] + ["Running"] * 40 + ["Succeeded"],
        pod_phase="Succeeded",
        master_log="step 1\nstep 2 loss 1.0\nstep 3\n",
        first_read_cut_at=len("step 1\nstep 2 lo"),
    )
    with FakeKubeAPI(script) as api:
        PyTorchJobLauncher(ClusterSpec(namespace="ml", poll_interval_s=0.01), api.configuration).run(ARGS, "ft-cut2")
    out = capsys.readouterr().out.splitlines()
    start = out.index("step 1")
    assert out[start : start + 4] == ["step 1", "step 2 lo", "ss 1.0", "step 3"]


def test_a_container_restarted_in_place_shows_its_unterminated_last_line_fake_api(capsys):
    """The kubelet restarts a container in place (same pod, restart count + 1): the container that
    ended may have written its last line without a newline, which was not complete while it ran.
    It is read from the ended container's log (`previous`) once the restart is seen: shown once."""
    script = JobScript(
        conditions=["Created"] + ["Running"] * 40 + ["Succeeded"],
        master_log="step 1\nstep 2\nRuntimeError: NCCL timeout",
        restarted_log="resuming\nstep 3\n",
    )
    with FakeKubeAPI(script) as api:
        PyTorchJobLauncher(ClusterSpec(namespace="ml", poll_interval_s=0.01), api.configuration).run(ARGS, "ft-inplace")
        assert api.state.calls("GET", r"/pods/ft-inplace-master-0/log\?.*previous=")
    out = capsys.readouterr().out.splitlines()
    shown = [line for line in out if line.startswith(("step", "RuntimeError", "resuming", "---"))]
    assert shown == [
        "--- log of pod ml/ft-inplace-master-0 ---",
        "step 1",
        "step 2",
        "RuntimeError: NCCL timeout",
        "--- log of pod ml/ft-inplace-master-0 (restart 1) ---",
        "resuming",
        "step 3",
    ]


def test_a_restarted_containers_log_streams_when_the_ended_ones_is_gone_fake_api(capsys):
    """The ended container's log can no longer be read (`previous` answers 400): the log of the
    container running now is still streamed, not retried behind that read forever."""
    script = JobScript(
        conditions=["Created"] + ["Running"] * 40 + ["Succeeded"],
        master_log="step 1\nstep 2\n",
        restarted_log="resuming\nstep 3\n",
        previous_log_gone=True,
    )
    with FakeKubeAPI(script) as api:
        PyTorchJobLauncher(ClusterSpec(namespace="ml", poll_interval_s=0.01), api.configuration).run(ARGS, "ft-gone")
        assert len(api.state.calls("GET", r"/pods/ft-gone-master-0/log\?.*previous=")) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith(("step", "resuming"))] == ["step 1", "step 2", "resuming", "step 3"]


WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.mark.parametrize("backend", ["kubernetes", "kserve"])
def test_deploy_from_outside_the_cluster_smoke_tests_through_the_api_server_fake_api(monkeypatch, capsys, backend):
    """From a laptop (a kubeconfig, no KUBERNETES_SERVICE_HOST) `*.svc.cluster.local` does not
    resolve: the smoke test goes through the API server's proxy with the kubeconfig's credentials,
    the real HTTP smoke test unchanged, and the user is told how to reach the endpoint."""
    from trainer.deploy import kserve

    if backend == "kserve":  # a pod whose kubeconfig names another cluster than its own (10.96.0.1)
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    else:  # a laptop
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    spec = ServeSpec(
        name="tuned",
        model_uri="s3://b/models/base",
        adapters={"tuned-a": "s3://b/a"},
        cluster=ClusterSpec(namespace="ml"),
    )
    with FakeKubeAPI() as api:
        api.configuration.api_key = {"authorization": "Bearer kubeconfig-token"}
        deploy = kserve.KServe().deploy if backend == "kserve" else cluster_serve.Deployment().deploy
        out = deploy(spec, ASK, WEATHER, client_configuration=api.configuration, poll_s=0.01, ready_timeout_s=3)
        via = (
            "/pods/tuned-predictor-00001-deployment-7d9f:8080/proxy"
            if backend == "kserve"
            else "/services/tuned:8000/proxy"
        )
        assert api.state.calls("GET", f"/api/v1/namespaces/ml{via}/v1/models")
        chats = api.state.calls("POST", f"/api/v1/namespaces/ml{via}/v1/chat/completions")
        # each name asked twice: once whole, once streamed (through the relay, SSE and all)
        assert sorted((body["model"], bool(body.get("stream"))) for _, _, body in chats) == [
            ("tuned", False),
            ("tuned", True),
            ("tuned-a", False),
            ("tuned-a", True),
        ]
        assert chats[0][2]["tools"] == WEATHER  # the request arrives as sent
        assert set(api.state.proxy_auth) == {"Bearer kubeconfig-token"}
    assert out.smoke_ok, out.reason
    assert out.names == ["tuned", "tuned-a"]
    assert out.results["tuned-a"]["reply"] == 'get_weather {"city": "Paris"}'
    printed = capsys.readouterr().out
    if backend == "kserve":
        assert out.endpoint == "http://tuned-predictor.ml.svc.cluster.local/v1"  # what in-cluster clients use
        assert out.access.startswith(
            "kubectl -n ml port-forward $(kubectl -n ml get pod -l "
            "serving.kserve.io/inferenceservice=tuned -o name | head -n 1) 8080:8080"
        )
    else:
        assert out.endpoint == "http://tuned.ml.svc.cluster.local:8000/v1"
        assert out.access == "kubectl -n ml port-forward svc/tuned 8000:8000  (then http://127.0.0.1:8000/v1)"
    assert f"from your machine: {out.access}" in printed
    # what deploy-k8s prints: the backend's result, keys in its order, the objects' action last
    printed_keys = ["endpoint", "names", "ready_s", "smoke_ok", "reason", "latency_s", "results", "pgid", "access"]
    assert list(out.as_dict()) == [*printed_keys, "action"] and out.as_dict()["action"] == "created"


def test_deploy_k8s_deploys_through_serving_and_prints_the_result_fake_api(monkeypatch, capsys, tmp_path):
    """`python -m trainer deploy-k8s` without --dry-run: the backend chosen in trainer.serving, as for
    the pipeline's deploy step, with the flags' settings (no store to read them off), the result as JSON."""
    import json

    from trainer import deploy as deploying
    from trainer.__main__ import main

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr("trainer.__main__.reach_cluster", lambda: None)  # the fake serves no /version
    calls = []
    deploy = deploying.deploy
    monkeypatch.setattr(
        deploying,
        "deploy",
        lambda backend, spec, store, *a, **kw: (
            calls.append((backend, spec.max_lora_rank, spec.tool_call_parser, store))
            or deploy(backend, spec, store, *a, **{**kw, "poll_s": 0.01})
        ),
    )  # the fake is Ready at the first poll
    with FakeKubeAPI() as api:
        config = tmp_path / "kubeconfig"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "c",
                    "clusters": [{"name": "c", "cluster": {"server": api.configuration.host}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                }
            )
        )
        monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(config))
        main(
            [
                "deploy-k8s",
                "--backend",
                "kserve",
                "--name",
                "tuned",
                "--model-uri",
                "s3://b/models/m",
                "--namespace",
                "ml",
                "--max-lora-rank",
                "32",
                "--tool-call-parser",
                "llama3_json",
            ]
        )
        [(_, _, body)] = api.state.calls("POST", "inferenceservices")
    assert calls == [("kserve", 32, "llama3_json", None)]
    args = body["spec"]["predictor"]["model"]["args"]
    assert args[args.index("--tool-call-parser") + 1] == "llama3_json"
    printed = capsys.readouterr().out
    out = json.loads(printed[printed.index("{\n") :])
    assert list(out) == [
        "endpoint",
        "names",
        "ready_s",
        "smoke_ok",
        "reason",
        "latency_s",
        "results",
        "pgid",
        "access",
        "action",
    ]
    assert out["smoke_ok"] and out["action"] == "created"
    assert out["endpoint"] == "http://tuned-predictor.ml.svc.cluster.local/v1"


def test_deploy_inside_the_cluster_uses_the_service_dns_name_fake_api(monkeypatch):
    """In a pod of the cluster it deploys to (the pipeline's deploy step), the Service's DNS name
    resolves: no proxy, which the pipeline's service account may not be allowed to use."""
    seen = []
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")  # the fake API server's address
    monkeypatch.setattr("trainer.serving.client.wait_ready", lambda url, timeout: seen.append(url) or 1.0)
    monkeypatch.setattr(
        "trainer.serving.client.smoke_test",
        lambda url, model, messages, tools=None, require_tool_call=True: (
            seen.append(url)
            or {"ok": True, "reason": "", "verdict": "ok", "latency_s": 0.1, "reply": "get_weather {}", "model": model}
        ),
    )
    with FakeKubeAPI() as api:
        out = cluster_serve.Deployment().deploy(
            serve_spec(), ASK, WEATHER, client_configuration=api.configuration, poll_s=0.01
        )
        assert not api.state.calls("GET", "/proxy/")
    assert seen == ["http://tuned.ml.svc.cluster.local:8000"] * 2 and out.smoke_ok


def test_a_service_without_endpoints_fails_the_smoke_test_within_its_limit_fake_api(monkeypatch):
    """The API server answers 503 for a Service with no ready pod: readiness keeps being asked
    until ready_timeout_s, then one message, not a wait without end."""
    from trainer.k8s import reach

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    from kubernetes import client as k

    with FakeKubeAPI() as api:
        with pytest.raises(UserError, match="not ready after 1s") as err:
            with reach.service(k.ApiClient(api.configuration), "ml", "nothing", 8000) as url:
                __import__("trainer.serving.client", fromlist=["x"]).wait_ready(url, timeout=1)
        assert len(api.state.calls("GET", "/services/nothing:8000/proxy/v1/models")) >= 2
    # The message names the way it went and the API server's answer, not a loopback relay's address.
    assert f"{api.server.url}/api/v1/namespaces/ml/services/nothing:8000/proxy not ready" in str(err.value)
    assert "the API server's proxy last answered 503" in str(err.value) and "no endpoints available" in str(err.value)
