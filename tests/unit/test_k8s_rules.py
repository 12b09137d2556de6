"""The API server's name and value rules (trainer/k8s/rules.py): what it refuses, we refuse first."""

import pytest

from trainer.k8s import rules


@pytest.mark.parametrize(
    "value,ok",
    [
        ("llm-finetune", True),
        ("a", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("LLM_Finetune", False),
        ("-a", False),
        ("a-", False),
        ("", False),
        ("a.b", False),
        (3, False),
    ],
)
def test_dns1123_label(value, ok):
    assert (rules.dns1123_label(value, "namespace") == []) is ok


@pytest.mark.parametrize(
    "value,ok",
    [("my-model", True), ("m1", True), ("1model", False), ("My_Model", False), ("a" * 64, False), ("", False)],
)
def test_dns1035_label(value, ok):
    assert (rules.dns1035_label(value, "served_model_name") == []) is ok


def test_messages_name_the_fix():
    [msg] = rules.dns1123_label("LLM_Finetune", "namespace")
    assert "'llm-finetune'" in msg and "namespace" in msg
    [msg] = rules.dns1035_label("a" * 70, "served_model_name")
    assert "70 characters" in msg and "63" in msg
    [msg] = rules.node_selector({"pool": 1})
    assert "quote it" in msg


@pytest.mark.parametrize(
    "value,ok", [("kueue.team-a", True), ("bad queue!", False), ("a" * 253, True), ("a" * 254, False), (".a", False)]
)
def test_dns1123_subdomain(value, ok):
    assert (rules.dns1123_subdomain(value, "kueue_queue") == []) is ok


def test_node_selector_and_labels():
    assert rules.node_selector({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": ""}) == []
    assert rules.node_selector({"pool": 1})
    assert rules.node_selector({"bad key": "x"})
    assert rules.node_selector({"pool": "has space"})
    assert rules.node_selector({"pool": "a" * 64})
    assert rules.node_selector(["pool"])
    assert rules.node_selector({"Bad_Prefix/pool": "x"})


@pytest.mark.parametrize(
    "tol,ok",
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        (
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute", "tolerationSeconds": 60},
            True,
        ),
        ({"operator": "Exists"}, True),
        ({"key": "a", "operator": "Sometimes"}, False),
        ({"key": "a", "effect": "Never"}, False),
        ({"key": "a", "operator": "Exists", "value": "x"}, False),
        ({"value": "x"}, False),
        ({"key": "a", "tolerationSeconds": 5, "effect": "NoSchedule"}, False),
        ({"key": "a", "colour": "red"}, False),
        ("nvidia.com/gpu", False),
    ],
)
def test_tolerations(tol, ok):
    assert (rules.tolerations([tol]) == []) is ok


@pytest.mark.parametrize(
    "value,integer,ok",
    [
        ("8", False, True),
        ("500m", False, True),
        ("64Gi", False, True),
        ("1e3", False, True),
        (2, True, True),
        ("-1", False, False),
        (-3, True, False),
        ("1.5", True, False),
        ("500m", True, False),
        ("1k", True, True),
        ("abc", False, False),
        (" 8", False, False),
        (True, True, False),
        (float("inf"), False, False),
        ("1E", False, True),
        ("2Ei", False, True),
        ("1e", False, False),
    ],
)
def test_quantity(value, integer, ok):
    assert (rules.quantity(value, "q", integer=integer) == []) is ok


@pytest.mark.parametrize("value,ok", [(0, True), (4, True), (-1, False), (True, False), (1.0, False), ("2", False)])
def test_non_negative_int(value, ok):
    assert (rules.non_negative_int(value, "serve_gpus") == []) is ok


@pytest.mark.parametrize(
    "value,ok",
    [
        ("kubeflow:pipeline-runner", True),
        ("kubeflow:", False),
        (":runner", False),
        ("runner", False),
        ("Kube_Flow:runner", False),
    ],
)
def test_service_account_ref(value, ok):
    assert (rules.service_account_ref(value, "--pipeline-sa") == []) is ok


@pytest.mark.parametrize(
    "expr,ok",
    [
        ("0 0 3 * * *", True),
        ("0 0 9 ? * MON-FRI", True),
        ("0 */15 * * * *", True),
        ("@daily", True),
        ("@every 1h30m", True),
        ("@every soon", False),
        ("not a cron at all x", False),
        ("0 9 * * 1", False),
        ("0 0 9 * * 1 2026", False),
        ("0 60 * * * *", False),
        ("0 0 25 * * *", False),
        ("0 0 3 L * *", False),
        ("", False),
        (5, False),
        ("@every 1s", True),
        ("@every 0s", False),
        ("@every 500ms", False),
        ("@every 0h0m", False),
        ("@every6h", False),
        ("@every  6h", False),
        (" @daily ", True),
    ],
)
def test_cron(expr, ok):
    assert (rules.cron(expr) == []) is ok


def test_cron_messages_give_the_format():
    [msg] = rules.cron("0 9 * * 1")
    assert "6-field cron" in msg and "'0 0 9 * * 1'" in msg
    [msg] = rules.cron("0 0 9 * * 1 2026")
    assert "7 field(s)" in msg and "second minute hour" in msg


def test_cluster_spec_problems_cover_every_setting():
    from types import SimpleNamespace

    good = dict(
        namespace="",
        accelerator_resource="nvidia.com/gpu",
        cpu="8",
        memory="64Gi",
        shm_size="16Gi",
        node_selector={},
        tolerations=[],
        queue="",
        service_account="",
        nodes=1,
        procs_per_node=8,
        backoff_limit=3,
        wait_timeout_s=0,
        poll_interval_s=15.0,
    )
    assert rules.cluster_spec_problems(SimpleNamespace(**good)) == []
    bad = dict(
        namespace="LLM_Finetune",
        accelerator_resource="gpu",
        memory="lots",
        node_selector={"pool": 1},
        tolerations=[{"key": "a", "operator": "Sometimes"}],
        queue="bad queue!",
        service_account="Runner",
        nodes="2",
        poll_interval_s=float("nan"),
    )
    problems = rules.cluster_spec_problems(SimpleNamespace(**{**good, **bad}))
    assert len(problems) == len(bad), problems
    for name in (
        "namespace",
        "accelerator_resource",
        "memory",
        "node_selector",
        "tolerations",
        "kueue_queue",
        "service_account",
        "nodes",
        "poll_interval_s",
    ):
        assert any(p.startswith(name) for p in problems), name


# --- names a cluster deploy derives from served_model_name ---------------------------------------


@pytest.mark.parametrize(
    "name, backend, namespace, side_by_side, ok",
    [
        ("a" * 63, "kubernetes", "", False, True),
        ("a" * 58, "kubernetes", "", True, True),  # 'aaa...-base': 63
        ("a" * 59, "kubernetes", "", True, False),  # 64: the base model's Service cannot be created
        ("a" * 40, "kserve", "team-ml-prod", False, True),  # 'a...-predictor-team-ml-prod': 63
        ("a" * 41, "kserve", "team-ml-prod", False, False),  # 64: accepted, then never Ready (kserve#4807)
        ("a" * 35, "kserve", "team-ml-prod", True, True),  # 'a...-base-predictor-team-ml-prod': 63
        ("a" * 36, "kserve", "team-ml-prod", True, False),
        ("a" * 63, "kserve", "", False, True),  # namespace not known yet: checked again at deploy
        ("1b-llama", "kubernetes", "", False, False),  # a Service name starts with a letter
    ],
)
def test_deploy_name(name, backend, namespace, side_by_side, ok):
    assert (rules.deploy_name(name, backend, namespace, side_by_side) == []) is ok


def test_pipeline_refuses_names_its_deploy_cannot_create_before_training():
    """Before: served_model_name passed validation when only `<name>-base` or KServe's predictor
    host was too long, and the run failed at deploy, after training."""
    from trainer.validate import pipeline_problems

    def problems(**params):
        return [p for p in pipeline_problems({"launcher": "trainjob", **params}) if "served_model_name" in p]

    [msg] = problems(served_model_name="a" * 40, deploy_backend="kserve", namespace="team-machine-learning-prod")
    assert "predictor's host name" in msg and "at most 26 characters" in msg
    [msg] = problems(
        served_model_name="m" * 60,
        deploy_backend="kubernetes",
        serve_adapters=True,
        method="lora",
        lora_train_embeddings=False,
    )
    assert "-base" in msg and "at most 58" in msg
    assert problems(served_model_name="a" * 40, deploy_backend="kserve", namespace="ml") == []
    assert problems(served_model_name="a" * 60, deploy_backend="kubernetes") == []


def test_kserve_build_checks_the_host_name_in_its_namespace():
    from trainer.core.errors import UserError
    from trainer.deploy import kserve
    from trainer.k8s.podspec import ClusterSpec
    from trainer.deploy.base import ServeSpec

    spec = ServeSpec(name="a" * 40, model_uri="s3://b/m", cluster=ClusterSpec(namespace="team-machine-learning-prod"))
    with pytest.raises(UserError, match="predictor's host name"):
        kserve.build(spec)
    spec.cluster.namespace = "ml"
    assert len(kserve.build(spec)) == 2


def test_sweep_adapter_names_need_no_service_name_limit():
    """deploy_all_trials serves `<name>-trial-<i>` beside `<name>-base`: only the latter names a
    Service, so a served_model_name that validation passed (58 characters) deploys any trial count."""
    from trainer.deploy.base import ServeSpec, trial_adapters

    name = "m" * 58
    spec = ServeSpec(
        name=f"{name}-base", model_uri="s3://b/base", adapters=trial_adapters(name, [f"s3://b/a{i}" for i in range(12)])
    )
    assert spec.problems() == []
    assert rules.deploy_name(name, "kubernetes", side_by_side=True) == []
    spec.adapters = {"bad;name": "s3://b/x"}  # still the letters a shell and a path take safely
    assert any("adapter name='bad;name'" in p for p in spec.problems())


@pytest.mark.parametrize(
    "parser, ok",
    [
        ("hermes", True),
        ("llama3_json", True),
        ("granite-20b-fc", True),
        ("pythonic", True),
        ("-hermes", False),
        ("hermes; rm", False),
        ("", False),
    ],
)
def test_vllm_tool_call_parser_names_with_hyphens_are_accepted(parser, ok):
    """vLLM registers parsers such as granite-20b-fc; a name not starting with a letter could be a flag."""
    from trainer.deploy.base import ServeSpec

    spec = ServeSpec(name="m", model_uri="s3://b/m", tool_call_parser=parser)
    assert (not any("tool_call_parser" in p for p in spec.problems())) is ok


def test_the_base_models_name_is_spelled_out_when_it_is_too_long():
    name = "m" * 60
    [msg] = rules.deploy_name(name, "kubernetes", side_by_side=True)
    assert (
        f"the base model is '{name}-base', a Service name of at most 63" in msg and "served_model_name-base" not in msg
    )


def test_the_validate_step_checks_kserves_host_in_its_own_namespace_before_training(tmp_path, monkeypatch, capsys):
    """namespace="" deploys into the run's namespace, which only its pods know: the first step
    reads it where Kubernetes mounts it, so a too-long predictor host fails before training."""
    from components.validate_params import validate_params

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setattr(rules, "POD_NAMESPACE_FILE", str(tmp_path / "namespace"))
    params = {"launcher": "trainjob", "deploy_backend": "kserve", "served_model_name": "a" * 40}
    validate_params.python_func(**params)  # no mounted namespace (not in a pod): checked again at deploy
    assert "parameters OK" in capsys.readouterr().out
    (tmp_path / "namespace").write_text("team-machine-learning-prod\n")
    assert rules.pod_namespace() == "team-machine-learning-prod"
    with pytest.raises(SystemExit) as exit_info:
        validate_params.python_func(**params)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert "predictor's host name" in err and "in namespace 'team-machine-learning-prod'" in err
    assert "at most 26 characters" in err
    with pytest.raises(SystemExit):  # beside adapters the InferenceService is '<name>-base': 5 fewer
        validate_params.python_func(
            **{
                **params,
                "served_model_name": "a" * 25,
                "serve_adapters": True,
                "method": "lora",
                "lora_train_embeddings": False,
            }
        )
    assert "at most 21 characters" in capsys.readouterr().err
    validate_params.python_func(**{**params, "served_model_name": "a" * 26})
    validate_params.python_func(**{**params, "namespace": "ml"})  # a namespace given: checked as before
    validate_params.python_func(**{**params, "deploy_backend": "kubernetes"})  # a Service: no host name
    (tmp_path / "namespace").write_text("ml")
    validate_params.python_func(**params)
    assert capsys.readouterr().out.count("parameters OK") == 4


def test_a_label_value_that_is_no_string_is_shown_as_typed_and_quoted_as_labels_are():
    """node_selector={"gpu": true} suggested "True" (Python's spelling), where labels are "true"."""
    from trainer.k8s.rules import label_value

    [problem] = label_value(True, "node_selector['gpu']")
    assert "got true (bool)" in problem and '{"pool": "true"}' in problem and "True" not in problem
    assert '{"pool": "1"}' in label_value(1, "x")[0]


@pytest.mark.parametrize(
    "image, said",
    [
        ("x:v0.1 --trust-remote-code", "it holds white space"),
        ("vllm/vllm-openai:v0.32.0\n--port 1", "it holds white space"),
        ("vllm/vllm-openai@sha256:abc", "is not an image reference"),
        ("vllm/vllm-openai@sha256:" + "a" * 40, "a sha256 digest has 64 hex digits, this one 40"),
        ("vllm//vllm:v1", "is not an image reference"),
    ],
)
def test_an_image_reference_is_checked_by_the_registrys_grammar_before_it_renders(image, said):
    """vllm_image values that rendered into the Deployment and would fail at pull, after training."""
    from trainer.validate import pipeline_problems

    problems = [p for p in pipeline_problems({"vllm_image": image}) if "vllm_image" in p]
    assert len(problems) == 1 and said in problems[0], problems


@pytest.mark.parametrize(
    "image",
    [
        "vllm/vllm-openai:v0.32.0",
        "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0",
        "localhost:5000/team/vllm@sha256:" + "0" * 64,
        "rocm/vllm:rocm6.4.1_vllm_0.10.1",
    ],
)
def test_real_image_references_pass(image):
    from trainer.k8s.rules import image_reference

    assert image_reference(image, "vllm_image") == []
