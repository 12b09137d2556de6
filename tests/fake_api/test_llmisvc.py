"""deploy_backend=llmisvc: KServe's LLMInferenceService (v1alpha2, the v0.20.0 CRD, strict) rendered,
created / replaced / awaited / smoke-tested against the real kubernetes client and a fake API server,
and printed by `pipelines.submit --dry-run` as issue 22 asks."""

import shlex

import pytest
import yaml
from kubernetes import client as k

from tests.fakes.k8s_fake_api import FakeKubeAPI
from tests.schemas import assert_restricted, validate
from tests.unit.test_kubeflow_native import submit_dry_run
from trainer.core.errors import UserError
from trainer.deploy import llmisvc
from trainer.k8s.podspec import ClusterSpec
from trainer.deploy.base import ServeSpec

ADAPTER = "s3://llm-finetune/models/sha256-adapter"


def spec(**kw):
    return ServeSpec(
        **{
            "name": "tuned-base",
            "model_uri": "s3://llm-finetune/models/sha256-base",
            "adapters": {"tuned": ADAPTER},
            "max_lora_rank": 64,
            "chat_template": True,
            "tool_call_parser": "llama3_json",
            "cluster": ClusterSpec(
                namespace="ml",
                node_selector={"pool": "h100"},
                queue="team-a",
                tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            ),
            **kw,
        }
    )


def test_base_and_adapter_from_the_bucket_valid_against_the_crd_and_restricted():
    [obj] = llmisvc.build(spec(gpus=2))
    validate(obj)  # the v0.20.0 CRD, unknown fields refused
    assert_restricted(obj)
    assert obj["apiVersion"] == "serving.kserve.io/v1alpha2" and obj["kind"] == "LLMInferenceService"
    model = obj["spec"]["model"]
    assert model["uri"] == "s3://llm-finetune/models/sha256-base" and model["name"] == "tuned-base"
    assert model["lora"] == {"adapters": [{"name": "tuned", "uri": ADAPTER}], "maxRank": 64, "maxAdapters": 1}
    assert (
        obj["spec"]["parallelism"] == {"tensor": 2}
        and obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    )
    assert obj["spec"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}  # what KServe copies onto the pods
    # KServe hands maxRank to vLLM as it is: rounded up to a rank vLLM accepts, as the one builder does
    [odd] = llmisvc.build(spec(max_lora_rank=24))
    assert odd["spec"]["model"]["lora"]["maxRank"] == 32
    template = obj["spec"]["template"]
    assert template["serviceAccountName"] == "llm-finetune-kserve"  # its Secret: KServe's S3 annotations
    assert template["nodeSelector"] == {"pool": "h100"} and template["tolerations"][0]["key"] == "nvidia.com/gpu"
    [main] = template["containers"]
    assert main["name"] == "main" and main["resources"]["limits"]["nvidia.com/gpu"] == "2"
    [extra] = [e["value"] for e in main["env"] if e["name"] == "VLLM_ADDITIONAL_ARGS"]
    args = shlex.split(extra)
    # the one argument builder's flags, less what KServe sets from the object (model, name, port, LoRA, TP)
    assert args[args.index("--tool-call-parser") + 1] == "llama3_json" and "--enable-auto-tool-choice" in args
    assert args[args.index("--chat-template") + 1] == "/mnt/models/chat_template.jinja"  # the template trained with
    assert not {
        "--model",
        "--served-model-name",
        "--port",
        "--lora-modules",
        "--enable-lora",
        "--max-lora-rank",
        "--tensor-parallel-size",
    } & set(args)


def test_a_merged_model_has_no_lora_section_and_a_misspelled_adapter_is_caught():
    import copy

    import jsonschema

    [obj] = llmisvc.build(spec(name="t" * 63, adapters={}, model_uri="s3://llm-finetune/models/sha256-merged"))
    validate(obj)  # 63 characters: KServe shortens the names it derives (knative's ChildName)
    assert "lora" not in obj["spec"]["model"] and "parallelism" not in obj["spec"]
    [with_adapter] = llmisvc.build(spec())
    typo = copy.deepcopy(with_adapter)
    typo["spec"]["model"]["lora"]["adapters"][0] = {"name": "tuned", "url": ADAPTER}  # the CRD itself lets it through
    with pytest.raises(jsonschema.ValidationError):
        validate(typo)


def test_create_ready_smoke_and_replace_on_redeploy_fake_api(monkeypatch):
    seen = []
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")  # in a pod of this (fake) cluster
    monkeypatch.setattr("trainer.serving.client.wait_ready", lambda url, timeout: seen.append(("ready", url)) or 1.0)
    monkeypatch.setattr(
        "trainer.serving.client.smoke_test",
        lambda url, model, messages, tools=None, require_tool_call=True: (
            seen.append(("chat", model, require_tool_call))
            or {"ok": True, "reason": "", "verdict": "ok", "latency_s": 0.1, "reply": "get_weather {}", "model": model}
        ),
    )
    with FakeKubeAPI() as api:
        out = llmisvc.LLMInferenceService().deploy(
            spec(), [{"role": "user", "content": "hi"}], client_configuration=api.configuration, poll_s=0.01
        )
        # KServe without spec.router publishes the workload Service without its port: vLLM's is added
        url = "http://tuned-base-kserve-workload-svc.ml.svc.cluster.local:8000"
        assert out.extra["action"] == "created" and out.endpoint == f"{url}/v1"
        assert out.smoke_ok and out.names == ["tuned-base", "tuned"]
        # the base only has to answer; the adapter must call the tool
        assert seen == [("ready", url), ("chat", "tuned-base", False), ("chat", "tuned", True)]
        [(_, _, body)] = api.state.calls("POST", "llminferenceservices")
        validate(body)
        custom = k.CustomObjectsApi(k.ApiClient(api.configuration))
        [merged] = llmisvc.build(spec(adapters={}, model_uri="s3://llm-finetune/models/sha256-merged"))
        assert llmisvc.apply(custom, merged, "ml") == "replaced" and api.state.calls("PUT", "llminferenceservices/")
        stored = api.state.objects[("LLMInferenceService", "ml", "tuned-base")]
        assert stored["metadata"]["generation"] == 2 and "lora" not in stored["spec"]["model"]  # exactly the new render
        assert llmisvc.wait_ready(custom, "tuned-base", "ml", timeout_s=5, poll_s=0)  # the new generation's


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_from_outside_the_cluster_the_smoke_test_goes_through_the_api_servers_pod_proxy_fake_api(scheme):
    """The workload Service resolves only in the cluster, and over KServe's TLS (when the cluster turns it
    on) its certificate is KServe's own: the API server's proxy to a workload pod, with the pod's scheme."""
    import json

    with FakeKubeAPI() as api:
        api.state.llmisvc_scheme = scheme
        out = llmisvc.LLMInferenceService().deploy(
            spec(),
            [{"role": "user", "content": "What is the weather in Paris?"}],
            [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                    },
                }
            ],
            client_configuration=api.configuration,
            poll_s=0.01,
        )
        proxied = [path for method, path, _ in api.state.requests if "/proxy/" in path]
    assert out.smoke_ok, json.dumps(out.as_dict())[:500]
    target = "tuned-base-kserve-7c9d8f:8000" if scheme == "http" else "https:tuned-base-kserve-7c9d8f:8000"
    assert proxied and all(f"/pods/{target}/proxy/" in p for p in proxied), proxied
    assert out.endpoint == f"{scheme}://tuned-base-kserve-workload-svc.ml.svc.cluster.local:8000/v1"


def test_not_ready_names_the_condition_and_what_to_check_fake_api(capsys):
    with FakeKubeAPI() as api:
        api.state.llmisvc_not_ready = "0/1 replicas available: Insufficient nvidia.com/gpu"
        custom = k.CustomObjectsApi(k.ApiClient(api.configuration))
        llmisvc.apply(custom, llmisvc.build(spec())[0], "ml")
        with pytest.raises(
            UserError,
            match=r"not Ready after 0s \(Ready=False MinimumReplicasUnavailable 0/1 "
            r"replicas available: Insufficient nvidia.com/gpu\); see `kubectl -n ml "
            r"describe llminferenceservice/tuned-base`",
        ):
            llmisvc.wait_ready(custom, "tuned-base", "ml", timeout_s=0.3, poll_s=0.02, progress_every_s=0.1)
    assert "LLMInferenceService ml/tuned-base not Ready after 0 s (limit 0 s): Ready=False" in capsys.readouterr().out


def test_submit_dry_run_prints_the_llminferenceservice_with_the_adapters_s3_uri():
    """Issue 22's command, as given."""
    proc = submit_dry_run(
        "--param",
        "deploy_backend=llmisvc",
        "--param",
        "serve_adapters=true",
        "--param",
        "lora_train_embeddings=false",
        "--param",
        "launcher=trainjob",
    )
    assert proc.returncode == 0, proc.stderr
    objs = list(yaml.safe_load_all(proc.stdout))
    [obj] = [o for o in objs if o and o["kind"] == "LLMInferenceService"]
    validate(obj)
    assert_restricted(obj)
    [adapter] = obj["spec"]["model"]["lora"]["adapters"]
    assert adapter == {"name": "llm-finetune", "uri": "s3://<bucket>/models/<from finetune>"}
    assert obj["spec"]["model"] == {
        **obj["spec"]["model"],
        "name": "llm-finetune-base",
        "uri": "s3://<bucket>/models/<from deliver-model>",
    }


def test_the_pipeline_role_may_manage_llminferenceservices():
    from pipelines import manifests

    rules = [r for o in manifests.render("llm-finetune", "pipeline-runner") if o["kind"] == "Role" for r in o["rules"]]
    assert any(
        "llminferenceservices" in r["resources"] and {"create", "get", "update", "delete"} <= set(r["verbs"])
        for r in rules
    )
