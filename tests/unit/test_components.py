"""Component tier: each component's Python function with real temp-path artifacts and S3.

The fast checks; the ones that train, evaluate and merge are in tests/integration/test_serve_openai.py (the
integration tier), on the chain that serves."""

import json

import pytest
from kfp.dsl import HTML, Dataset, Metrics, Model

from components.deliver_dataset import deliver_dataset
from components.deliver_model import deliver_model
from components.finetune import finetune


def art(cls, tmp_path, name):
    return cls(name=name, uri=str(tmp_path / name), metadata={})


@pytest.fixture(scope="module")
def delivered(s3_env, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("art")
    model, data = art(Model, tmp, "model"), art(Dataset, tmp, "dataset")
    deliver_model.python_func(source="builtin:tiny-llama", revision="", model=model)
    deliver_dataset.python_func(source="builtin:function-calling", revision="", eval_fraction=0.1, seed=0, dataset=data)
    return model, data


def test_deliver_records_pointer_and_checksums(delivered):
    model, data = delivered
    assert model.metadata["uri"].startswith("s3://test-bucket/models/sha256-")
    assert model.metadata["source"] == "builtin:tiny-llama" and model.metadata["total_bytes"] > 1_000_000
    pointer = json.loads(open(model.path).read())
    assert pointer["uri"] == model.metadata["uri"]
    assert {f["path"] for f in pointer["files"]} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert all(len(f["sha256"]) == 64 for f in pointer["files"])
    # 3,000 / 200 one-call rows and 5% of each per other function-calling category (trainer.data.builtin_data)
    assert data.metadata["rows"] == {"train": 3600, "eval": 240}
    assert data.metadata["irrelevance_share"] == 0.0 and data.metadata["irrelevance_rows"] == {"train": 0, "eval": 0}


def test_delivery_is_idempotent(delivered, tmp_path):
    again = art(Model, tmp_path, "again")
    deliver_model.python_func(source="builtin:tiny-llama", revision="", model=again)
    assert again.metadata["uri"] == delivered[0].metadata["uri"] and again.metadata["uploaded_bytes"] == 0


def test_bad_source_exits_with_one_message(s3_env, tmp_path, capsys):
    out = art(Model, tmp_path, "m")
    with pytest.raises(SystemExit) as exit_info:
        deliver_model.python_func(source="builtin:nope", revision="", model=out)
    assert exit_info.value.code == 2
    assert "unknown built-in model" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()  # no artifact written for a failed delivery


def test_validate_params_component(capsys):
    from components.validate_params import validate_params

    good = dict(
        model_source="builtin:tiny-llama",
        dataset_source="builtin:function-calling",
        eval_fraction=0.1,
        launcher="local",
        nodes=2,
        procs_per_node=1,
        method="lora",
        lora_r=16,
        lora_alpha=32,
        lora_dropout=0.0,
        lora_train_embeddings=True,
        learning_rate=3e-3,
        max_steps=10,
        batch_size=8,
        batch_tokens=1024,
        max_seq_len=512,
        seed=0,
        checkpoint_every=100,
        max_restarts=2,
        eval_max_rows=10,
        deploy_backend="local",
        accelerator_resource="nvidia.com/gpu",
        tolerations=[],
        cleanup="on-success",
        wait_timeout_s=0,
    )
    validate_params.python_func(**good)
    assert "parameters OK" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        validate_params.python_func(
            **{**good, "lora_r": 0, "nodes": 0, "launcher": "kubernetes", "cleanup": "sometimes"}
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "3 problems" in err and "cleanup must be one of" in err


def test_a_local_finetune_marks_its_tensorboard_prefix_before_training(delivered, tmp_path, monkeypatch, store):
    """run_local finds a failed run's TensorBoard events by this mark (runs/<id>/local-run/<run name>), not by time."""
    from trainer.core.errors import UserError

    model, data = delivered

    def fails(*_, **__):
        raise UserError("training failed on node 0 (exit status 3)")

    monkeypatch.setattr("trainer.launch.run_training", fails)
    monkeypatch.setenv("FINETUNE_LOCAL_RUN", "20261124-101500-finetune")
    with pytest.raises(SystemExit):
        finetune.python_func(
            base_model=model,
            dataset=data,
            run_id="marked-run",
            adapter=art(Model, tmp_path, "a"),
            metrics=art(Metrics, tmp_path, "m"),
            report=art(HTML, tmp_path, "r"),
            nodes=1,
        )
    assert store.exists("runs/marked-run/local-run/20261124-101500-finetune")


@pytest.mark.parametrize("keep", [True, False])
def test_deploy_trials_keeps_its_server_up_only_with_keep_serving(delivered, tmp_path, monkeypatch, capsys, keep):
    """deploy_all_trials is there to compare the trials through one endpoint by model name: it always stopped its
    server, even with --keep-serving, so the endpoint it printed was dead when the run ended. Now it keeps it as the
    deploy step keeps its own, says how to stop it, and returns an endpoint only while it serves (the server start
    is faked: tests/fake_api has its cluster backends)."""
    from components.deploy_trials import deploy_trials
    from trainer import deploy as deploying

    model, data = delivered
    asked = {}

    def deploy(backend, spec, store, messages, tools, keep_serving=False, **kw):
        asked.update(backend=backend, keep_serving=keep_serving, names=[spec.name, *spec.adapters])
        return deploying.Deployed(
            endpoint="http://127.0.0.1:9/v1",
            names=asked["names"],
            results={
                n: {"ok": True, "reason": "", "verdict": "ok", "reply": "x", "latency_s": 0.1} for n in asked["names"]
            },
            latency_s=0.1,
            log="/tmp/vllm.log",
            pgid=4242 if keep_serving else None,
            stopped=not keep_serving,  # as the local backend says of a server it did not keep
        )

    monkeypatch.setattr(deploying, "deploy", deploy)
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = deploy_trials.python_func(
        base_model=model,
        adapters=[model, model],
        dataset=data,
        smoke=art(Metrics, tmp_path, "smoke"),
        enabled=True,
        keep_serving=keep,
    )
    said = capsys.readouterr().out
    assert asked == {
        "backend": "local",
        "keep_serving": keep,
        "names": ["llm-finetune-base", "llm-finetune-trial-0", "llm-finetune-trial-1"],
    }
    assert out.models == asked["names"] and out.endpoint == ("http://127.0.0.1:9/v1" if keep else "")
    assert ("still serving; stop with: kill -- -4242" in said) == keep
    assert ("served at (now stopped) http://127.0.0.1:9/v1" in said) != keep
    # on a GPU the kept server would hold the memory the winner's merge and server need next: stopped, and said so
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    out = deploy_trials.python_func(
        base_model=model,
        adapters=[model],
        dataset=data,
        smoke=art(Metrics, tmp_path, "smoke2"),
        enabled=True,
        keep_serving=keep,
    )
    assert not asked["keep_serving"] and out.endpoint == ""
    assert ("is stopped after its smoke test all the same" in capsys.readouterr().out) == keep


def test_run_training_runs_any_launcher(builtin_uris, store):
    """trainer.launch.base.Launcher is the contract: run_training validates, checks the delivered template, hands the
    job to whatever launcher it is given (here a fake, no torchrun), named after the run, and reads back the
    result rank 0 wrote; a launcher's UserError is the run's."""
    from trainer.config.training import TrainConfig
    from trainer.core.errors import UserError
    from trainer.k8s.podspec import ClusterSpec, job_name
    from trainer.launch import run_training

    model_uri, dataset_uri = builtin_uris
    cfg = TrainConfig(model_uri=model_uri, dataset_uri=dataset_uri, output_prefix="runs/fake-launch", max_steps=3)

    class Finishes:
        ran: list = []

        def run(self, train_args: list[str], name: str) -> None:
            self.ran.append((train_args, name))
            store.put_json("runs/fake-launch/result.json", {"metrics": {"train_loss": 0.25}})

    class Fails:
        def run(self, train_args: list[str], name: str) -> None:
            raise UserError("training failed on node 1 (exit status 3)")

    done = Finishes()
    assert run_training(cfg, done, ClusterSpec(nodes=1), store, run_id="fake-run") == {"metrics": {"train_loss": 0.25}}
    [(args, name)] = done.ran
    assert name == job_name("fake-run") and args == cfg.to_args()
    with pytest.raises(UserError, match="node 1"):
        run_training(cfg, Fails(), ClusterSpec(nodes=1), store, run_id="fake-run")
    with pytest.raises(UserError, match="launcher must be one of"):
        run_training(cfg, "slurm", ClusterSpec(nodes=1), store)
