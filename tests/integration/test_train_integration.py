"""Integration: real training through torchrun (2 emulated nodes) and in-process, then merge.

Marked `integration`; `make test` runs them too (about a minute on 2 cores).
"""

import pytest
import torch

from trainer.store import delivery
from trainer.config.training import TrainConfig
from trainer.k8s.podspec import ClusterSpec
from trainer.launch import run_training


@pytest.fixture(scope="module")
def delivered(builtin_uris):
    return builtin_uris


def test_shards_are_disjoint_and_cover_each_epoch():
    from trainer.recipe.train import batches

    examples = list(range(40))
    r0, r1 = batches(examples, 5, 0, 2, seed=1), batches(examples, 5, 1, 2, seed=1)
    seen0 = [x for _ in range(4) for x in next(r0)]
    seen1 = [x for _ in range(4) for x in next(r1)]
    assert not set(seen0) & set(seen1) and sorted(seen0 + seen1) == examples
    again = batches(examples, 5, 0, 2, seed=1)
    assert seen0 == [x for _ in range(4) for x in next(again)]  # order depends only on the seed


@pytest.mark.parametrize(
    "method, train_embeddings", [("lora", False), ("lora", True), ("dora", False), ("qlora", False)]
)
def test_merged_model_matches_adapter(delivered, store, tmp_path, method, train_embeddings):
    """The merged model is the trained one: for DoRA peft merges the magnitudes too; for QLoRA the
    adapter is merged onto the de-quantized 4-bit base, and compared with the adapter over the 4-bit
    base as training ran it (bitsandbytes on CPU)."""
    import json

    from transformers import AutoModelForCausalLM

    from trainer.evaluate.generation import load
    from trainer.evaluate.served import _served_lora
    from trainer.models.merge import merge
    from trainer.models.model import BASE_QUANTIZATION, load_base, qlora_config
    from trainer.recipe.train import train

    model_uri, data_uri = delivered
    result = train(
        TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            method=method,
            max_steps=5,
            batch_size=4,
            output_prefix=f"runs/merge-{method}-{train_embeddings}",
            lora_train_embeddings=train_embeddings,
        ),
        store,
    )
    base_dir, adapter_dir = store.get_tree(model_uri), store.get_tree(result["output_uri"])
    assert json.loads((adapter_dir / "adapter_config.json").read_text())["use_dora"] == (method == "dora")
    assert (adapter_dir / BASE_QUANTIZATION).is_file() == (method == "qlora")
    assert _served_lora(adapter_dir) == (method == "lora" and not train_embeddings)  # else evaluated merged
    merged = AutoModelForCausalLM.from_pretrained(merge(base_dir, adapter_dir, tmp_path / "merged")).eval()
    if method == "qlora":
        # The base the adapter is merged onto holds exactly the weights the 4-bit layers trained with
        # (their de-quantization; bitsandbytes' no-grad CPU kernel multiplies in bf16, so logits are not compared).
        from bitsandbytes.functional import dequantize_4bit

        quantized = AutoModelForCausalLM.from_pretrained(
            base_dir, dtype=torch.float32, device_map={"": "cpu"}, quantization_config=qlora_config(torch.float32)
        )
        dequantized = load_base(base_dir, adapter_dir)
        layers = [(n, m) for n, m in quantized.named_modules() if type(m).__name__ == "Linear4bit"]
        assert len(layers) == 28  # 4 decoder layers x 7 projections; the embeddings and head stay as they are
        for name, layer in layers:
            torch.testing.assert_close(
                dequantized.get_submodule(name).weight,
                dequantize_4bit(layer.weight.data, layer.weight.quant_state),
                atol=0,
                rtol=0,
            )
    peft_model = load(base_dir, adapter_dir)  # QLoRA: the adapter over that de-quantized base
    ids = torch.tensor([[1, 50, 60, 70, 80]])
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, peft_model(ids).logits, atol=1e-4, rtol=1e-4)
        base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
        assert not torch.allclose(base(ids).logits, merged(ids).logits, atol=1e-4)  # training changed it


def test_full_finetune_outputs_a_complete_model(delivered, store, tmp_path):
    from trainer.models.merge import merge
    from trainer.recipe.train import train

    model_uri, data_uri = delivered
    result = train(
        TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            output_prefix="runs/full",
            method="full",
            max_steps=3,
            batch_size=4,
            learning_rate=1e-4,
        ),
        store,
    )
    out = store.get_tree(result["output_uri"])
    assert (out / "config.json").exists() and not (out / "adapter_config.json").exists()
    assert (merge(store.get_tree(model_uri), out, tmp_path / "m") / "model.safetensors").exists()


def test_tiny_dataset_of_short_rows_trains_on_two_processes(store, tmp_path):
    """Issue 9 item 1: 40 short rows, 2 processes, token budgets: each rank's shard fits one
    micro-batch. This hung forever (no batch was ever yielded); now it finishes."""
    import json

    path = tmp_path / "small.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"messages": [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": "hello"}]}
            )
            + "\n"
            for i in range(40)
        )
    )
    model_uri, _ = delivery.deliver_model("builtin:tiny-llama", "", store)
    data_uri, meta = delivery.deliver_dataset(str(path), "", store)
    assert meta["rows"]["train"] == 36
    cfg = TrainConfig(
        model_uri=model_uri,
        dataset_uri=data_uri,
        output_prefix="runs/small",
        max_steps=5,
        batch_tokens=1024,
        log_every=1,
        stall_timeout_s=60,
    )
    result = run_training(cfg, "local", ClusterSpec(nodes=2, procs_per_node=1, backoff_limit=0), store)
    assert result["metrics"]["train_steps"] == 5
    from transformers import AutoTokenizer

    from trainer import data

    tokenizer = AutoTokenizer.from_pretrained(store.get_tree(model_uri))
    train_rows = data.read_jsonl(store.get_tree(data_uri) / "train.jsonl")
    every_row = sum(len(e["input_ids"]) for e in data.encode_all(train_rows, tokenizer, 512)[0])
    assert result["metrics"]["train_tokens"] == 5 * every_row  # each step: one batch per rank, all rows


def test_profile_steps_write_a_trace_next_to_the_run(delivered, store, capfd):
    from trainer.recipe.train import train

    model_uri, data_uri = delivered
    train(
        TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            output_prefix="runs/profiled",
            max_steps=4,
            batch_size=2,
            profile_steps=2,
        ),
        store,
    )
    trace = store.get_json("runs/profiled/profile/trace.json")  # chrome trace format (Perfetto opens it)
    assert any(e.get("name", "").startswith("aten::") for e in trace["traceEvents"])
    assert "Self CPU time total" in capfd.readouterr().out  # the top-operators table in the log


def test_the_loop_reads_values_back_only_at_log_and_checkpoint_steps(delivered, store, monkeypatch):
    """No host sync per micro-batch (issue 11): the recipe reads tensors back (.item(), .tolist(),
    bool/float/int of a tensor, each a device sync on CUDA) a fixed number of times per log
    step, however many micro-batches run."""
    import sys
    from pathlib import Path

    from trainer.recipe.train import train

    ours = {
        str(Path(__file__).parents[2] / "trainer" / f)
        for f in ("recipe/train.py", "models/model.py", "data/batching.py")
    }
    reads = []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            if sys._getframe(1).f_code.co_filename in ours:
                reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    model_uri, data_uri = delivered
    result = train(
        TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            output_prefix="runs/syncs",
            max_steps=6,
            batch_size=2,
            batch_tokens=0,
            tokens_per_step=600,
            log_every=3,
            eval_every=100,
            checkpoint_every=100,
        ),
        store,
    )
    micro_batches = int(result["metrics"]["grad_accum"]) * 6
    assert micro_batches >= 18
    # per log step (3, 6): the flags and the mean loss; at the end: the final checkpoint's
    # window and token count, and the token total
    assert 4 <= len(reads) <= 2 * 2 + 3, reads  # at least the log steps: the counting works


def test_a_run_resumed_at_its_last_step_traces_nothing_and_reaches_cleanup():
    """profile_steps with no step left to run (a crash while writing the result resumes
    straight to cleanup): no profiler, so nothing asks an unstarted one for its table."""
    from trainer.recipe.runtime import start_profiler

    cpu = torch.device("cpu")
    assert start_profiler(2, cpu, steps_left=0) is None  # resumed at its last step
    assert start_profiler(0, cpu, steps_left=3) is None  # profile_steps=0
    prof = start_profiler(2, cpu, steps_left=3)
    assert prof is not None
    prof.stop()


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA flatten gets flash or flex attention: no message")
def test_flatten_packing_on_cpu_says_it_is_the_slower_choice(delivered, store, capsys):
    from trainer.recipe.train import train

    model_uri, data_uri = delivered
    train(
        TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            output_prefix="runs/flatten-cpu",
            max_steps=2,
            batch_tokens=512,
            packing="flatten",
        ),
        store,
    )
    out = capsys.readouterr().out
    assert "packing=flatten here attends over the whole packed sequence" in out and "use packing=auto" in out
    train(
        TrainConfig(
            model_uri=model_uri, dataset_uri=data_uri, output_prefix="runs/auto-cpu", max_steps=2, batch_tokens=512
        ),
        store,
    )
    assert "packing=flatten here" not in capsys.readouterr().out


def test_rows_over_max_seq_len_are_skipped_and_said_never_truncated(delivered, store, capsys):
    """A row cut at max_seq_len could lose every token it is trained on (the answer comes last):
    such rows are skipped, counted in the metrics, and said in the log."""
    from trainer.recipe.train import train

    model_uri, data_uri = delivered
    result = train(
        TrainConfig(
            model_uri=model_uri, dataset_uri=data_uri, output_prefix="runs/long-rows", max_steps=2, max_seq_len=103
        ),
        store,
    )
    skipped = int(result["metrics"]["skipped_long_rows"])
    assert 0 < skipped < 3000  # the built-in rows are 93-109 tokens long
    assert f"{skipped} training rows longer than max_seq_len=103 tokens skipped" in capsys.readouterr().out


def test_two_ranks_learn_exactly_what_one_rank_learns_from_the_same_rows(delivered, store):
    """DDP's gradient averaging and the token-weighted loss (trainer/recipe/train.py `_step`): 2 ranks
    of batch_size 4 take, each step, the same 8 rows that 1 rank of batch_size 8 takes (rank r
    reads every 2nd row of the seeded order), so the loss curves match, although each rank
    holds a different number of labelled tokens and pads to its own longest row. The one rank
    trains in this process (the recipe without torchrun: world size 1), the two under torchrun."""
    from trainer.recipe.train import train

    model_uri, data_uri = delivered

    def cfg(prefix, batch_size):
        return TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            output_prefix=prefix,
            max_steps=12,
            batch_size=batch_size,
            batch_tokens=0,
            log_every=2,
            eval_every=6,
            learning_rate=1e-3,
        )

    one = train(cfg("runs/eq-1rank", 8), store)
    two = run_training(cfg("runs/eq-2rank", 4), "local", ClusterSpec(nodes=2, procs_per_node=1, backoff_limit=0), store)
    assert two["metrics"]["world_size"] == 2 and one["metrics"]["world_size"] == 1
    assert two["metrics"]["train_tokens"] == one["metrics"]["train_tokens"]  # the same rows, all counted
    points = lambda r: [(h["step"], h.get("loss", h.get("eval_loss"))) for h in r["history"]]  # noqa: E731
    a, b = points(one), points(two)
    assert [s for s, _ in a] == [s for s, _ in b] and len(a) == 8  # 6 log lines, 2 evals
    assert all(abs(x - y) < 1e-4 * max(1.0, abs(x)) for (_, x), (_, y) in zip(a, b)), (a, b)
    assert a[-1][1] < a[0][1]  # and it learned


def test_emulated_nodes_get_gpus_of_their_own_or_run_on_cpu(capsys, monkeypatch):
    """The local launcher on a GPU machine: each node's torchrun numbers its workers from
    LOCAL_RANK 0, so each node must see its own GPUs (NCCL refuses two ranks on one device)."""
    from trainer.launch.local import node_devices, visible_gpus

    assert node_devices(2, 1, []) is None  # no GPU: the environment is left alone
    assert node_devices(2, 1, ["0", "1"]) == ["0", "1"]
    assert node_devices(2, 2, ["4", "5", "6", "7", "0"]) == ["4,5", "6,7"]  # a slice of what is visible
    assert capsys.readouterr().out == ""
    assert node_devices(2, 1, ["0"]) == ["", ""]  # fewer GPUs than processes: CPU (gloo), said once
    assert "2 local training processes but 1 GPU(s)" in capsys.readouterr().out
    if not torch.cuda.is_available():
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,2")
        assert visible_gpus() == []  # what CUDA cannot open is not handed out


def test_a_prefix_resumed_with_other_settings_is_refused_before_its_weights_load(delivered, store, monkeypatch):
    """A run resumed under its output prefix with another lora_r failed loading the checkpoint with torch's
    size-mismatch traceback; with another learning_rate it resumed and returned the old result, the new rate
    silently ignored. Now the settings the checkpoint recorded are compared first; how often it logs or
    checkpoints may change."""
    from trainer.recipe import checkpoint
    from trainer.core.errors import UserError
    from trainer.recipe.train import train

    model_uri, data_uri = delivered

    def cfg(**kw):
        return TrainConfig(
            **{
                "model_uri": model_uri,
                "dataset_uri": data_uri,
                "output_prefix": "runs/resume-settings",
                "max_steps": 2,
                "batch_size": 2,
                "checkpoint_every": 2,
                "lora_r": 4,
                "lora_alpha": 8,
                **kw,
            }
        )

    first = train(cfg(), store)
    loaded = []
    monkeypatch.setattr(checkpoint.Checkpointer, "load", lambda *a: loaded.append(a) or pytest.fail("loaded"))
    with pytest.raises(UserError) as err:
        train(cfg(learning_rate=0.01, lora_r=8), store)
    message = str(err.value)
    assert "runs/resume-settings holds a checkpoint of a run with other settings" in message
    assert "lora_r 4 (now 8)" in message and "learning_rate 0.001 (now 0.01)" in message
    assert "new output_prefix" in message and not loaded
    monkeypatch.undo()
    again = train(cfg(log_every=1, checkpoint_every=1), store)  # the same run, logged and checkpointed otherwise
    assert again["output_uri"] == first["output_uri"]


def test_the_progress_bars_last_line_shows_the_last_logged_loss(delivered, store, capfd, monkeypatch):
    """The bar at 100% showed the loss of the log line before the last (its update drew before the last step's
    log set the loss); run_local's console keeps a bar's first 100% line, not the repeat tqdm draws as it closes,
    so that stale loss read as the run's final one. Every update is drawn here (a slow step's is, in a run)."""
    import re

    from tqdm import tqdm

    from trainer.recipe.train import train

    drawn = tqdm.__init__
    monkeypatch.setattr(tqdm, "__init__", lambda self, *a, **kw: drawn(self, *a, **{**kw, "mininterval": 0}))
    model_uri, data_uri = delivered
    result = train(
        TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            output_prefix="runs/bar-loss",
            max_steps=4,
            batch_size=2,
            log_every=2,
            learning_rate=0.01,
        ),
        store,
    )
    err = capfd.readouterr().err
    last = next(part for part in re.split(r"[\r\n]", err) if "4/4" in part)  # the first: what the console keeps
    losses = [h["loss"] for h in result["history"] if "loss" in h]
    assert len(losses) == 2 and f"{losses[0]:.3f}" != f"{losses[1]:.3f}"  # the two logged windows differ
    assert f"loss={losses[1]:.3f}" in last, last


def test_eval_loss_during_training_shows_a_bar_and_is_not_counted_as_training_time(
    delivered, store, capfd, monkeypatch
):
    """The eval loss of 64 held-out rows took ~2.5 min on SmolLM2 after the last step without a line, and its
    time counted as training: tokens_per_second read 8.5 against a steady 20.9. Each measurement here is made to
    take 1000 s of a shifted clock (not real time: no test decides by the machine's speed)."""
    import time as time_

    from trainer import evaluate
    from trainer.recipe.train import train

    shift = [0.0]
    real_clock, real_eval = time_.perf_counter, evaluate.eval_loss
    monkeypatch.setattr(time_, "perf_counter", lambda: real_clock() + shift[0])

    def slow_eval(*a, **kw):
        shift[0] += 1000.0
        return real_eval(*a, **kw)

    monkeypatch.setattr(evaluate.losses, "eval_loss", slow_eval)
    model_uri, data_uri = delivered
    result = train(
        TrainConfig(
            model_uri=model_uri,
            dataset_uri=data_uri,
            output_prefix="runs/eval-time",
            max_steps=2,
            batch_size=2,
            eval_every=1,
        ),
        store,
    )
    assert shift[0] == 2000.0 and sum("eval_loss" in h for h in result["history"]) == 2
    assert result["metrics"]["train_seconds"] < 1000, result["metrics"]  # two measurements took 2000 "s"
    assert "eval loss at step 2: 100%" in capfd.readouterr().err
