"""The Kubeflow-native path end to end without a cluster: `pipelines.submit --dry-run` with
launcher=trainjob, deploy_backend=kserve and a registry prints a TrainJob, a ServingRuntime and
an InferenceService that pass their CRDs strictly and restricted Pod Security, plus the registry
calls it would make; the compiled pipeline gates registration and places evaluate/merge on GPUs
from pipeline parameters."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.schemas import assert_restricted, pod_specs, validate

ROOT = Path(__file__).resolve().parents[2]
NATIVE = [
    "--param",
    "launcher=trainjob",
    "--param",
    "deploy_backend=kserve",
    "--param",
    "registry_address=http://model-registry-service.kubeflow.svc.cluster.local:8080",
    "--param",
    "model_source=meta-llama/Llama-3.2-1B-Instruct",
    "--param",
    "lora_train_embeddings=false",
    "--param",
    "learning_rate=0.0002",
    "--param",
    "nodes=2",
    "--param",
    "procs_per_node=8",
    "--param",
    "kueue_queue=team-a",
    "--param",
    "serve_gpus=2",
]


def submit_dry_run(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.submit", "--dry-run", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
            "REGISTRY_TOKEN": "registry-token-value",
            "HOME": "/tmp",
        },
    )
    return proc


def test_dry_run_prints_trainjob_kserve_and_registry_calls():
    proc = submit_dry_run(*NATIVE)
    assert proc.returncode == 0, proc.stderr
    assert "s3cr3t-value" not in proc.stdout and "registry-token-value" not in proc.stdout
    objs = list(yaml.safe_load_all(proc.stdout))
    assert [o["kind"] for o in objs] == ["TrainJob", "ServingRuntime", "InferenceService"]
    for obj in objs:
        validate(obj)
        assert_restricted(obj)
    tj, _, isvc = objs
    assert tj["spec"]["trainer"]["numNodes"] == 2 and tj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert isvc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert isvc["spec"]["predictor"]["model"]["args"] == ["--tool-call-parser", "hermes", "--tensor-parallel-size", "2"]
    calls = [line for line in proc.stdout.splitlines() if line.startswith("# ")]
    assert "find or create registered model 'llm-finetune'" in calls[0]
    assert any("kfp/pipelinerun" in c for c in calls) and any("llm-finetune-adapter" in c for c in calls)


def test_bad_kubeflow_native_values_exit_2_before_anything():
    # registry_address is replaced below, not repeated: a key given twice is refused
    native = [a for p in NATIVE[1::2] if not p.startswith("registry_address=") for a in ("--param", p)]
    proc = submit_dry_run(
        *native,
        "--param",
        "training_runtime=Torch_Runtime",
        "--param",
        "eval_gpus=-1",
        "--param",
        "registry_address=model-registry:8080",
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "training_runtime='Torch_Runtime' is not a valid Kubernetes name" in proc.stderr
    assert "eval_gpus must be >= 0" in proc.stderr and "must be an http:// or https:// URL" in proc.stderr
    assert not proc.stdout


def compiled():
    from kfp import compiler

    from pipelines.dag.finetune import finetune_pipeline

    out = ROOT / ".runs" / "test-kubeflow-native.yaml"
    out.parent.mkdir(exist_ok=True)
    compiler.Compiler().compile(finetune_pipeline, str(out))
    return list(yaml.safe_load_all(out.read_text()))


def test_register_is_gated_and_eval_merge_take_gpu_parameters():
    spec, platform = compiled()
    # register: inside the promotion gate's branch, and only when registry_address is set
    [gate] = [
        t for name, t in spec["components"]["comp-condition-3"]["dag"]["tasks"].items() if name.startswith("condition")
    ]
    assert "registry_address" in gate["triggerPolicy"]["condition"]
    assert "register" in spec["components"][gate["componentRef"]["name"]]["dag"]["tasks"]
    executors = spec["deploymentSpec"]["executors"]
    for name in ("exec-evaluate", "exec-merge-lora"):
        acc = executors[name]["container"]["resources"]["accelerator"]
        assert "eval_accelerator_type" in acc["resourceType"] and "eval_gpus" in acc["resourceCount"]
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for name in ("exec-evaluate", "exec-merge-lora"):
        assert "eval_node_selector" in str(k8s[name]["nodeSelector"]) and "eval_tolerations" in str(k8s[name])
    register = k8s["exec-register"]["secretAsEnv"]
    assert register[0]["keyToEnv"] == [{"envVar": "REGISTRY_TOKEN", "secretKey": "token"}]
    assert register[0]["optional"] is True


def test_every_pipeline_pod_runs_restricted():
    """Both pipelines: every task's pod non-root as the image's user (KFP's compiler adds the rest
    of restricted Pod Security)."""
    from kfp import compiler

    from pipelines.dag.sweep import sweep_pipeline

    out = ROOT / ".runs" / "test-kubeflow-native-sweep.yaml"
    compiler.Compiler().compile(sweep_pipeline, str(out))
    for spec, platform in (compiled(), list(yaml.safe_load_all(out.read_text()))):
        k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
        assert set(k8s) == set(spec["deploymentSpec"]["executors"])
        for name, executor in k8s.items():
            assert executor["securityContext"] == {"runAsUser": "1000", "runAsGroup": "1000", "runAsNonRoot": True}, (
                name
            )


# --- every object the project creates, with hostile-but-legal inputs ----------------------------

# What a user types into the KFP UI: a toleration with tolerationSeconds (KFP hands JSON numbers in
# list parameters over as floats: 300 arrives as 300.0), a GKE accelerator node selector, a queue.
UI_PLACEMENT = dict(
    namespace="team-ml",
    queue="team-a",
    node_selector={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb", "pool": "gpu_pool.v2"},
    tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoExecute", "tolerationSeconds": 300.0},
    ],
)


def rendered_objects(accelerator: str, gpus: int, name: str = "llama32-1b-fc") -> list[dict]:
    """Every Kubernetes object the project renders for one placement, as the JSON sent to the API server."""
    import json

    from trainer.deploy import deployment, kserve
    from trainer.deploy.base import ServeSpec
    from trainer.launch import pytorchjob, trainjob
    from trainer.k8s.lifecycle import to_dict
    from trainer.k8s.podspec import ClusterSpec, job_name

    cluster = ClusterSpec(nodes=2, procs_per_node=max(gpus, 1), accelerator_resource=accelerator, **UI_PLACEMENT)
    job = job_name("Run_ÜBER.long-" * 6)
    serve = ServeSpec(
        name=name,
        model_uri="s3://llm-finetune/models/sha256-a",
        gpus=gpus,
        cluster=cluster,
        adapters={f"{name}-trial-0": "s3://llm-finetune/models/sha256-b"},
    )
    objs = [
        pytorchjob.build_pytorchjob(job, ["--max-steps", "5"], cluster),
        trainjob.build_trainjob(job, ["--max-steps", "5"], cluster),
        *deployment.build(serve),
        *kserve.build(serve),
    ]
    return [json.loads(json.dumps(to_dict(o))) for o in objs]


@pytest.mark.parametrize(
    "accelerator, gpus", [("nvidia.com/gpu", 8), ("amd.com/gpu", 2), ("nvidia.com/gpu", 0), ("", 0)]
)
def test_every_object_with_ui_typed_placement_is_valid(accelerator, gpus):
    objs = rendered_objects(accelerator, gpus)
    assert [o["kind"] for o in objs] == [
        "PyTorchJob",
        "TrainJob",
        "Deployment",
        "Service",
        "ServingRuntime",
        "InferenceService",
    ]
    for obj in objs:
        validate(obj)  # core kinds: kubernetes-validate strict; custom resources: their CRDs, strict
        if obj["kind"] != "Service":
            assert_restricted(obj)
        pods = [json.dumps(p) for p in pod_specs(obj)]
        if obj["kind"] not in ("Service", "ServingRuntime"):
            # The API server decodes tolerationSeconds into an int64: 300.0 would be refused.
            assert any('"tolerationSeconds": 300,' in p or '"tolerationSeconds": 300}' in p for p in pods), obj["kind"]
            assert not any("300.0" in p for p in pods)
        gpu_requests = [
            c.get("resources", {}).get("requests", {}).get(accelerator)
            for p in pod_specs(obj)
            for c in p["containers"]
            if "resources" in c
        ]
        if accelerator and gpus and obj["kind"] in ("Deployment", "InferenceService"):
            assert gpu_requests == [str(gpus)]
        elif not gpus and obj["kind"] in ("Deployment", "InferenceService"):
            assert not any(gpu_requests)  # zero GPUs: no accelerator request at all, not "0"


@pytest.mark.parametrize(
    "accelerator, gpus, image",
    [
        ("nvidia.com/gpu", 1, "VLLM_IMAGE"),
        ("amd.com/gpu", 2, "VLLM_ROCM_IMAGE"),
        ("nvidia.com/gpu", 0, "VLLM_CPU_IMAGE"),
        ("", 1, "VLLM_CPU_IMAGE"),
    ],
)
def test_the_vllm_image_fits_the_accelerator_and_kserve_sets_it_per_service(accelerator, gpus, image):
    """vLLM's CUDA image exits at start-up on a pod without a GPU (the docstring's "0 serves on
    CPU" needs its CPU build); the shared ServingRuntime keeps one image, each InferenceService
    names its own, so a CPU or ROCm deploy does not change the image of the others."""
    from trainer.core import settings

    objs = {o["kind"]: o for o in rendered_objects(accelerator, gpus)}
    [vllm] = [c for c in objs["Deployment"]["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
    assert vllm["image"] == settings.get(image)
    assert objs["InferenceService"]["spec"]["predictor"]["model"]["image"] == settings.get(image)
    assert objs["ServingRuntime"]["spec"]["containers"][0]["image"] == settings.get("VLLM_IMAGE")
