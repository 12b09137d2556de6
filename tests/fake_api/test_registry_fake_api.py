"""Model Registry registration with the real `model-registry` client against a fake registry at
the HTTP boundary (tests/registry_fake_api.py, following the v1alpha3 OpenAPI document)."""

import pytest
from kfp import dsl

from components.register import register as register_component
from tests.fakes.registry_fake_api import FakeRegistry
from trainer.core.errors import UserError
from trainer.store.registry import Registration, lineage, plan, register

TRAIN = {"train_loss": 0.42, "eval_loss": 0.61, "tokens_per_s": 1234.5, "bad": float("nan")}
EVAL = {"tuned_fc_accuracy": 0.9, "base_fc_accuracy": 0.1, "fc_accuracy_gain": 0.8}


@pytest.fixture
def registry():
    with FakeRegistry() as fake:
        yield fake


def registration(url, run_id="run-id-0001", version="nightly-7", model="s3://b/models/sha256-merged", **kw):
    meta = lineage("Qwen/Qwen2.5-1.5B-Instruct", "abc123", "s3://b/datasets/sha256-data", TRAIN, EVAL, run_id)
    return Registration(
        address=url,
        name="support-bot",
        version=version,
        model_uri=model,
        run_id=run_id,
        adapter_uri="s3://b/models/sha256-adapter",
        metadata=meta,
        **kw,
    )


def test_registers_version_artifacts_and_lineage_fake_api(registry):
    out = register(registration(registry.url))
    assert out["action"] == "registered" and out["version"] == "nightly-7"
    [rm] = registry.state.models.values()
    assert rm["name"] == "support-bot"
    [mv] = registry.state.versions.values()
    assert mv["name"] == "nightly-7" and mv["registeredModelId"] == rm["id"] and mv["author"]
    props = {k: next(x for key, x in v.items() if key != "metadataType") for k, v in mv["customProperties"].items()}
    assert props["base_model_source"] == "Qwen/Qwen2.5-1.5B-Instruct" and props["base_model_revision"] == "abc123"
    assert props["dataset_uri"] == "s3://b/datasets/sha256-data" and props["kfp_run_id"] == "run-id-0001"
    assert props["train_train_loss"] == 0.42 and props["eval_fc_accuracy_gain"] == 0.8
    assert "train_bad" not in props  # NaN is not a comparable metric
    merged, adapter = (registry.state.artifacts[i] for i in registry.state.version_artifacts[mv["id"]])
    assert merged["uri"] == "s3://b/models/sha256-merged" and merged["modelFormatName"] == "huggingface"
    assert (merged["modelSourceKind"], merged["modelSourceClass"], merged["modelSourceId"]) == (
        "kfp",
        "pipelinerun",
        "run-id-0001",
    )
    assert adapter["name"] == "support-bot-adapter" and adapter["uri"] == "s3://b/models/sha256-adapter"


def test_registering_the_same_run_again_changes_nothing_fake_api(registry):
    register(registration(registry.url))
    before = (len(registry.state.models), len(registry.state.versions), len(registry.state.artifacts))
    again = register(registration(registry.url))  # a retried KFP task
    assert again["action"] == "already registered" and again["version"] == "nightly-7"
    assert (len(registry.state.models), len(registry.state.versions), len(registry.state.artifacts)) == before
    assert not registry.state.calls("POST", r"/model_versions$")[1:]  # one version ever created


def test_another_run_with_the_same_name_gets_its_own_version_fake_api(registry):
    register(registration(registry.url))
    out = register(registration(registry.url, run_id="other-run-99", model="s3://b/models/sha256-other"))
    assert out["version"] == "nightly-7-other-ru"
    assert sorted(v["name"] for v in registry.state.versions.values()) == ["nightly-7", "nightly-7-other-ru"]


def test_a_second_version_of_the_same_model_fake_api(registry):
    """The next run (another run name) adds a version under the one registered model; artifact names
    repeat across versions (they are unique within a version only)."""
    register(registration(registry.url))
    out = register(
        registration(registry.url, run_id="run-id-0002", version="nightly-8", model="s3://b/models/sha256-merged-8")
    )
    assert out["action"] == "registered" and out["version"] == "nightly-8"
    assert len(registry.state.models) == 1 and len(registry.state.versions) == 2
    assert not registry.state.calls("POST", r"/registered_models$")[1:]  # the model is found, not created again
    for vid, uri in zip(registry.state.versions, ("s3://b/models/sha256-merged", "s3://b/models/sha256-merged-8")):
        names = [registry.state.artifacts[i]["name"] for i in registry.state.version_artifacts[vid]]
        assert names == ["support-bot", "support-bot-adapter"]
        assert registry.state.artifacts[registry.state.version_artifacts[vid][0]]["uri"] == uri


def test_the_same_run_with_another_adapter_is_refused_fake_api(registry):
    register(registration(registry.url))
    changed = registration(registry.url)
    changed.adapter_uri = "s3://b/models/sha256-other-adapter"
    with pytest.raises(UserError, match="already holds adapter s3://b/models/sha256-adapter"):
        register(changed)


def test_token_is_sent_as_bearer_fake_api(registry, monkeypatch):
    monkeypatch.setenv("REGISTRY_TOKEN", "tok-123")
    register(registration(registry.url))
    assert set(registry.state.tokens) == {"Bearer tok-123"}


def test_bad_address_and_unreachable_registry_are_user_errors():
    with pytest.raises(UserError, match="must be an http:// or https:// URL"):
        register(registration("model-registry:8080"))
    with pytest.raises(UserError, match=r"must be an http:// or https:// URL \(the port is not a number"):
        register(registration("http://model-registry:port"))  # was "answered ... with something other than JSON"
    with pytest.raises(UserError, match="cannot use the model registry at http://127.0.0.1:9"):
        register(registration("http://127.0.0.1:9"))


def test_plan_lists_the_calls_without_contacting_anything():
    lines = plan(registration("http://model-registry.kubeflow:8080"))
    text = "\n".join(lines)
    assert "find or create registered model 'support-bot'" in text and "create version 'nightly-7'" in text
    assert "uri=s3://b/models/sha256-merged" in text and "kfp/pipelinerun/run-id-0001" in text
    assert "support-bot-adapter" in text


def artifact(kind, name, uri, **meta):
    a = kind(name=name, uri=f"/tmp/{name}", metadata={"uri": uri, **meta})
    return a


def test_component_registers_with_lineage_from_its_inputs_fake_api(registry):
    train = dsl.Metrics(name="train", uri="/tmp/train", metadata=dict(TRAIN))
    scores = dsl.Metrics(name="eval", uri="/tmp/eval", metadata=dict(EVAL))
    out = register_component.python_func(
        merged=artifact(dsl.Model, "merged", "s3://b/models/sha256-merged"),
        adapter=artifact(dsl.Model, "adapter", "s3://b/models/sha256-adapter", method="lora"),
        base_model=artifact(dsl.Model, "base", "s3://b/models/sha256-base", source="builtin:tiny-llama"),
        dataset=artifact(dsl.Dataset, "data", "s3://b/datasets/sha256-data"),
        train_metrics=train,
        eval_metrics=scores,
        registry_address=registry.url,
        model_name="tiny",
        run_name="demo-run",
        run_id="0123456789",
    )
    assert out.version == "demo-run"
    [mv] = registry.state.versions.values()
    props = {k: next(x for key, x in v.items() if key != "metadataType") for k, v in mv["customProperties"].items()}
    assert props["base_model_source"] == "builtin:tiny-llama" and props["method"] == "lora"
    assert props["eval_tuned_fc_accuracy"] == 0.9 and props["kfp_run_id"] == "0123456789"


def test_the_registry_is_probed_at_validation_before_any_training_fake_api(registry, monkeypatch, capsys):
    """An unreachable registry was found only after training (the register step, the run's last):
    validate-params asks it for its model list first, with a short limit."""
    import socket
    import threading

    from components.validate_params import validate_params
    from trainer.store import registry as registry_mod

    validate_params.python_func(registry_address=registry.url)  # a registry that answers: accepted
    assert registry.state.calls("GET", "registered_models")
    monkeypatch.setattr(registry_mod, "PROBE_TIMEOUT_S", 0.5)
    silent = socket.socket()  # accepts connections and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    closed = socket.socket()  # nothing listens there
    closed.bind(("127.0.0.1", 0))
    port_closed = closed.getsockname()[1]
    closed.close()
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class NotARegistry(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *_):
            pass

    other = ThreadingHTTPServer(("127.0.0.1", 0), NotARegistry)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        for address, expected in [
            (f"http://127.0.0.1:{silent.getsockname()[1]}", "cannot reach the model registry at http://127.0.0.1:"),
            (f"http://127.0.0.1:{port_closed}", "Connection refused"),
            (f"http://127.0.0.1:{other.server_port}", "answered 404 Not Found to GET /api/model_registry/"),
        ]:
            with pytest.raises(SystemExit) as exit_:
                validate_params.python_func(registry_address=address)
            err = capsys.readouterr().err
            assert exit_.value.code == 2 and expected in err and "Traceback" not in err, err
            assert "leave it empty to skip registration" in err
    finally:
        silent.close()
        other.shutdown()
    # A registry that wants a token it was not given still answered: the register step brings the token.
    assert registry_mod.reach_problem(registry.url, token="") is None
