"""The committed pipeline YAML: fresh, a valid PipelineSpec, no secrets, pinned image."""

import re
from pathlib import Path

import pytest
import yaml

from pipelines import compile as compile_mod

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """Both pipelines compiled twice, in fresh interpreters with different hash seeds and default
    settings (component images are read at import time)."""
    import os
    import subprocess
    import sys

    from trainer.core import settings

    outs = []
    for seed in ("1", "2"):
        out = tmp_path_factory.mktemp(f"compiled-seed{seed}")
        env = {**{k: v for k, v in os.environ.items() if k not in settings.SETTING_DEFAULTS}, "PYTHONHASHSEED": seed}
        subprocess.run(
            [sys.executable, "-m", "pipelines.compile", "--out-dir", str(out)],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        outs.append(out)
    return outs


def test_compile_is_byte_identical_across_hash_seeds(fresh):
    for name in compile_mod.PIPELINES:
        a, b = ((d / f"{name}.yaml").read_bytes() for d in fresh)
        assert a == b, f"{name}.yaml differs between PYTHONHASHSEED=1 and 2"


def test_committed_yaml_is_up_to_date(fresh):
    for name in compile_mod.PIPELINES:
        committed = ROOT / "compiled" / f"{name}.yaml"
        assert committed.read_bytes() == (fresh[0] / f"{name}.yaml").read_bytes(), (
            f"{committed} is stale: run `python -m pipelines.compile` and commit the result"
        )


@pytest.mark.parametrize("name", sorted(compile_mod.PIPELINES))
def test_every_parameter_has_a_description_for_the_ui(fresh, name):
    """KFP shows the pipeline docstring's Args entries as parameter descriptions in the UI."""
    spec = next(yaml.safe_load_all((fresh[0] / f"{name}.yaml").read_text()))
    params = spec["root"]["inputDefinitions"]["parameters"]
    missing = sorted(p for p, body in params.items() if len(body.get("description", "").strip()) < 20)
    assert not missing, f"add these to the Args section of the {name} pipeline's docstring: {missing}"


@pytest.mark.parametrize("name", sorted(compile_mod.PIPELINES))
def test_validate_params_step_gets_every_parameter_first(fresh, name):
    """The UI path equals the CLI path: the first step receives every pipeline parameter."""
    spec = next(yaml.safe_load_all((fresh[0] / f"{name}.yaml").read_text()))
    params = set(spec["root"]["inputDefinitions"]["parameters"])
    step = spec["root"]["dag"]["tasks"]["validate-params"]["inputs"]["parameters"]
    passed = {v["componentInputParameter"] for v in step.values() if "componentInputParameter" in v}
    assert passed == params, f"not passed to validate-params: {sorted(params - passed)}"
    for first in ("deliver-model", "deliver-dataset"):
        assert spec["root"]["dag"]["tasks"][first]["dependentTasks"] == ["validate-params"]


def docs(name="finetune.yaml"):
    return list(yaml.safe_load_all((ROOT / "compiled" / name).read_text()))


def test_yaml_parses_into_pipeline_spec():
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = json_format.ParseDict(docs()[0], pipeline_spec_pb2.PipelineSpec())
    tasks = set(spec.root.dag.tasks)
    assert tasks == {
        "validate-params",
        "deliver-model",
        "deliver-dataset",
        "deliver-bfcl",
        "finetune",
        "evaluate",
        "merge-lora",
        "condition-branches-1",
    }
    # BFCL's data (and the check that no training row asks its questions) before training
    assert "deliver-bfcl" in spec.root.dag.tasks["finetune"].dependent_tasks
    # the promotion gate: deploy (and register, when registry_address is set) only when evaluate promoted the
    # model; otherwise "not deployed" says why, and the pipeline's endpoint comes from whichever branch ran
    branches = spec.components["comp-condition-branches-1"].dag.tasks
    promoted, other = branches["condition-3"], branches["condition-4"]
    assert promoted.trigger_policy.condition == "inputs.parameter_values['pipelinechannel--evaluate-promoted'] == true"
    assert other.trigger_policy.condition == f"!({promoted.trigger_policy.condition})"
    assert set(spec.components["comp-condition-3"].dag.tasks) == {"deploy", "condition-2"}
    assert set(spec.components["comp-condition-4"].dag.tasks) == {"not-deployed"}
    assert set(spec.components["comp-condition-2"].dag.tasks) == {"register"}
    assert "registry_address" in spec.components["comp-condition-3"].dag.tasks["condition-2"].trigger_policy.condition
    endpoint = spec.root.dag.outputs.parameters["endpoint"].value_from_parameter
    assert endpoint.producer_subtask == "condition-branches-1"
    assert (
        spec.components["comp-condition-branches-1"]
        .dag.outputs.parameters[endpoint.output_parameter_key]
        .WhichOneof("kind")
        == "value_from_oneof"
    )
    assert list(spec.root.dag.tasks["deliver-model"].dependent_tasks) == ["validate-params"]
    assert (
        list(spec.root.dag.tasks["evaluate"].dependent_tasks)
        or spec.root.dag.tasks["evaluate"].inputs.artifacts["tuned_model"].task_output_artifact.producer_task
        == "finetune"
    )
    assert (
        spec.root.dag.tasks["finetune"].inputs.parameters["run_id"].runtime_value.constant.string_value
        == "{{$.pipeline_job_uuid}}"
    )  # run-unique at run time, not baked in at compile time


def test_credentials_come_from_secrets_not_parameters():
    text = (ROOT / "compiled" / "finetune.yaml").read_text()
    params = docs()[0]["root"]["inputDefinitions"]["parameters"]
    assert not [p for p in params if re.search(r"(^|_)token$|secret|password|access_key|api_key", p, re.I)]
    platform = docs()[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    # every S3-using task (validate-params too: it looks the s3:// values up in the run's bucket); not-deployed needs
    # no credentials (only the restricted security context), register only the registry token
    assert set(platform) == {
        f"exec-{t}"
        for t in (
            "deliver-model",
            "deliver-dataset",
            "deliver-bfcl",
            "finetune",
            "evaluate",
            "merge-lora",
            "deploy",
            "register",
            "validate-params",
            "not-deployed",
        )
    }
    [registry] = platform["exec-register"]["secretAsEnv"]
    assert registry["optional"] is True and [e["envVar"] for e in registry["keyToEnv"]] == ["REGISTRY_TOKEN"]
    for name, executor in platform.items():
        if name in ("exec-register", "exec-not-deployed"):
            assert "configMapAsEnv" not in executor
            continue
        envs = {e["envVar"] for s in executor["secretAsEnv"] for e in s["keyToEnv"]}
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= envs
        [config] = executor["configMapAsEnv"]
        assert config["configMapName"] == "llm-finetune-config" and config["optional"] is True
    assert "AKIA" not in text and "testsecret" not in text


def test_sweep_yaml_has_parallel_trials_a_collected_pick_and_a_gate():
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = json_format.ParseDict(docs("sweep.yaml")[0], pipeline_spec_pb2.PipelineSpec())
    root = spec.root.dag.tasks
    loop = next(t for name, t in root.items() if name.startswith("for-loop"))
    assert loop.iterator_policy.parallelism_limit == 2
    assert root["pick-best"].inputs.artifacts["trial_metrics"].task_output_artifact.producer_task.startswith("for-loop")
    branches = spec.components["comp-condition-branches-2"].dag.tasks
    conditions = sorted(t.trigger_policy.condition for t in branches.values())
    assert len(conditions) == 2 and "deploy" in conditions[0]  # deploy if it beats the base, else say why not
    assert set(spec.components["comp-condition-3"].dag.tasks) == {"merge-lora", "deploy"}
    assert set(spec.components["comp-condition-4"].dag.tasks) == {"not-deployed"}
    finetune = spec.components["comp-for-loop-1"].dag.tasks["finetune"]
    # the base is scored once, outside the loop, and every trial's evaluate reads those scores
    trial_eval = spec.components["comp-for-loop-1"].dag.tasks["evaluate"]
    scores = trial_eval.inputs.artifacts["base_scores"].component_input_artifact
    assert root["for-loop-1"].inputs.artifacts[scores].task_output_artifact.producer_task == "evaluate-base"
    assert finetune.inputs.parameters["run_id"].runtime_value.constant.string_value == "{{$.pipeline_task_uuid}}"
    # trials and the server land where the user places them (GPU nodes, taints, namespace)
    placement = ("namespace", "accelerator_resource", "node_selector", "tolerations")
    for task in (finetune, spec.components["comp-condition-3"].dag.tasks["deploy"], root["deploy-trials"]):
        for name in placement:
            assert task.inputs.parameters[name].component_input_parameter.endswith(name), (task, name)


def test_the_project_images_pinned_the_evaluate_step_on_the_vllm_one():
    from trainer.core import settings

    for name in ("finetune", "sweep"):
        text = (ROOT / "compiled" / f"{name}.yaml").read_text()
        images = set(re.findall(r"^\s+image: (\S+)", text, re.M))
        assert images == {settings.image(), settings.get("EVAL_IMAGE")}, name
        assert all(":" in image and not image.endswith(":latest") for image in images)
        for step in ("evaluate", "deploy") if name == "finetune" else ("evaluate", "deploy", "deploy-trials"):
            # deploy too: deploy_backend=local serves with the eval image's vLLM inside the step's container
            found = re.search(rf"^    exec-{step}:\n(.*?)(?=^    exec-|^pipelineInfo)", text, re.M | re.S).group(1)
            assert f"image: {settings.get('EVAL_IMAGE')}" in found, (name, step)
