"""The adapter's strength chosen by the gate (issue 56 item 3; trainer.evaluate.scales, trainer.models.merge): a
LoRA update scaled is WiSE-FT's interpolation of base and tuned weights, the strongest scale that passes the gate is
chosen, every scale is logged, and merge_scales is refused where no scale applies."""

import json

import pytest
import torch

from trainer.core.errors import UserError
from trainer.evaluate import scales as sc
from trainer.models import merge as merge_mod


@pytest.fixture(scope="module")
def lora(tmp_path_factory):
    """A tiny Llama and a LoRA adapter on it with random (non-zero) B factors: (base dir, adapter dir)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.models import builtin_model

    root = tmp_path_factory.mktemp("lora")
    torch.manual_seed(0)
    tokenizer = builtin_model.build_tokenizer(vocab_size=256)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    base = LlamaForCausalLM(config)
    base.save_pretrained(root / "base")
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    model.save_pretrained(root / "adapter")
    tokenizer.save_pretrained(root / "adapter")
    return root / "base", root / "adapter"


def _weights(path):
    from safetensors.torch import load_file

    return load_file(path / "model.safetensors")


def test_a_scaled_merge_is_the_interpolation_of_base_and_tuned_weights(lora, tmp_path):
    """W + s * dW for every weight: what WiSE-FT interpolates, for a LoRA update; s=1 is the merge as before."""
    base_dir, adapter = lora
    full = _weights(merge_mod.merge(base_dir, adapter, tmp_path / "s1"))
    half = _weights(merge_mod.merge(base_dir, adapter, tmp_path / "s05", scale=0.5))
    base = _weights(base_dir)
    changed = 0
    for k, w in base.items():
        assert torch.allclose(half[k], w + 0.5 * (full[k] - w), atol=1e-6), k
        changed += not torch.equal(full[k], w)
    assert changed == 2 * 3  # q, v and down of two layers: the update is there, and halved


def test_a_scaled_adapter_scales_its_b_factors_only(lora, tmp_path):
    from safetensors.torch import load_file

    _, adapter = lora
    assert merge_mod.scaled_adapter(adapter, 1.0, tmp_path / "same") == adapter  # nothing written
    out = merge_mod.scaled_adapter(adapter, 0.25, tmp_path / "quarter")
    before, after = load_file(adapter / "adapter_model.safetensors"), load_file(out / "adapter_model.safetensors")
    assert before.keys() == after.keys()
    for k in before:
        assert torch.allclose(after[k], before[k] * (0.25 if ".lora_B." in k else 1.0)), k
    assert json.loads((out / "adapter_config.json").read_text()) == json.loads(
        (adapter / "adapter_config.json").read_text()
    )


def test_an_output_whose_update_does_not_scale_is_refused(lora, tmp_path):
    import shutil

    _, adapter = lora
    assert merge_mod.scale_problem(adapter) is None
    full = tmp_path / "full"
    full.mkdir()
    (full / "config.json").write_text("{}")
    assert "full fine-tune" in merge_mod.scale_problem(full)
    for key, said in (("use_dora", "DoRA"), ("modules_to_save", "lora_train_embeddings=false")):
        other = tmp_path / key
        shutil.copytree(adapter, other)
        config = json.loads((other / "adapter_config.json").read_text())
        (other / "adapter_config.json").write_text(
            json.dumps({**config, key: True if key == "use_dora" else ["embed_tokens"]})
        )
        assert said in merge_mod.scale_problem(other)
        with pytest.raises(UserError) as err:
            sc.evaluate_scales(lambda *a, **k: {}, tmp_path, other, (1.0, 0.5))
        assert str(err.value).startswith("merge_scales=1,0.5: ") and "or merge_scales=1" in str(err.value)
    # scale 1 alone asks nothing of the output
    assert sc.evaluate_scales(lambda m, t, **k: {"tuned": str(t)}, tmp_path, full, (1.0,)) == [{"tuned": str(full)}]


def test_each_scale_is_evaluated_on_its_own_scaled_adapter(lora, tmp_path):
    from safetensors.torch import load_file

    _, adapter = lora
    seen = []

    def fake(model_dir, tuned_dir, **kwargs):
        b = next(v for k, v in load_file(tuned_dir / "adapter_model.safetensors").items() if ".lora_B." in k)
        seen.append((kwargs["rows"], b.abs().sum().item()))
        return _result(0.5)

    assert sc.evaluate_scales(fake, tmp_path, adapter, (1.0, 0.5, 0.25), rows=3) == [_result(0.5)] * 3
    assert [r for r, _ in seen] == [3, 3, 3]
    assert seen[1][1] == pytest.approx(seen[0][1] / 2) and seen[2][1] == pytest.approx(seen[0][1] / 4)


@pytest.mark.parametrize(
    "text, want", [("", (1.0,)), ("1.0", (1.0,)), ("1.0, 0.75,0.5", (1.0, 0.75, 0.5)), ("0.5,1", (0.5, 1.0))]
)
def test_merge_scales_parse(text, want):
    assert sc.parse_scales(text) == want


@pytest.mark.parametrize(
    "text, said",
    [
        ("1.5", "'1.5' is no scale in (0, 1]"),
        ("0", "'0' is no scale in (0, 1]"),
        ("nan", "'nan' is no scale in (0, 1]"),
        ("half", "'half' is no scale in (0, 1]"),
        ("1,1.0", "1.0 is given twice"),
        ("1,0.9,0.8,0.7,0.6,0.5", "6 scales, at most 5"),
    ],
)
def test_bad_merge_scales_are_one_problem_at_validate(text, said):
    from trainer.validate import pipeline_problems

    [problem] = [p for p in pipeline_problems({"merge_scales": text}) if "merge_scales" in p]
    assert (
        problem.startswith(f"merge_scales={text!r}: ")
        and said in problem
        and "e.g. merge_scales=1.0,0.75,0.5" in problem
    )


@pytest.mark.parametrize(
    "params, said",
    [
        ({"method": "full"}, "method='full' makes none"),
        ({"method": "dora"}, "method='dora' trains the weights' magnitudes apart"),
        ({"lora_train_embeddings": True}, "set lora_train_embeddings=false, or merge_scales=1.0"),
        (
            {"lora_train_embeddings": False, "serve_adapters": True},
            "set serve_adapters=false to serve the merged model",
        ),
    ],
)
def test_merge_scales_where_no_scale_applies_is_refused_before_training(params, said):
    from trainer.validate import pipeline_problems

    found = [
        p for p in pipeline_problems({"merge_scales": "1.0,0.5", **params}) if p.startswith("merge_scales=1.0,0.5")
    ]
    assert len(found) == 1 and said in found[0], found
    assert not [
        p for p in pipeline_problems({"merge_scales": "1.0", **params}) if p.startswith("merge_scales")
    ]  # 1.0 alone: as before


def _logged(primary, irrelevance):
    return {
        "base_fc_ast_accuracy": 0.3,
        "tuned_fc_ast_accuracy": primary,
        "base_bfcl_irrelevance_accuracy": 1.0,
        "tuned_bfcl_irrelevance_accuracy": irrelevance,
        "bfcl_irrelevance_rows": 100.0,
        "bfcl_irrelevance_lost": round((1 - irrelevance) * 100),
        "bfcl_irrelevance_won": 0.0,
    }


def test_the_strongest_scale_that_passes_the_gate_is_chosen():
    gate = sc.promotion_at(max_category_drop=0.1)
    scales = (1.0, 0.75, 0.5)
    # 1.0 calls best but declines worst; 0.75 passes with more than 0.5
    logged = [_logged(0.9, 0.7), _logged(0.8, 0.95), _logged(0.6, 1.0)]
    chosen = sc.choose(scales, logged, gate)
    assert (chosen.index, chosen.scale, chosen.promoted) == (1, 0.75, True)
    assert chosen.reason.startswith(
        "promoted at merge scale 0.75 (of 1, 0.75, 0.5; 1: fails at 90.0%, 0.5: passes at 60.0%): "
    )
    assert [v[1] for v in chosen.verdicts] == [False, True, True]
    # none passes: the highest primary metric, not promoted, its own reason
    chosen = sc.choose(scales, [_logged(0.9, 0.7), _logged(0.8, 0.8), _logged(0.6, 0.85)], gate)
    assert (chosen.scale, chosen.promoted) == (1.0, False) and "bfcl_irrelevance fell" in chosen.reason
    # a tie: the larger scale, closer to what was trained
    chosen = sc.choose((0.5, 1.0), [_logged(0.8, 1.0), _logged(0.8, 1.0)], gate)
    assert chosen.scale == 1.0
    # one scale: the gate's own line, as before
    one = sc.choose((1.0,), [_logged(0.8, 1.0)], gate)
    assert one.reason == gate(_logged(0.8, 1.0))[1]


def test_every_scale_is_logged_beside_the_chosen_one():
    logged = [_logged(0.9, 0.7), _logged(0.8, 0.95)]
    out = sc.scale_metrics((1.0, 0.75), logged, 0.75)
    assert out["merge_scale"] == 0.75
    assert out["scale100_fc_ast_accuracy"] == 0.9 and out["scale75_bfcl_irrelevance_accuracy"] == 0.95
    assert "scale75_bfcl_irrelevance_rows" not in out  # accuracies only: the rows are the same at every scale
    assert sc.scale_metrics((1.0,), logged[:1], 1.0) == {"merge_scale": 1.0}


def test_the_sweeps_pick_passes_on_the_winners_scale(tmp_path):
    """The sweep merges its winner at the scale that trial's evaluate chose (its `merge_scale` metric)."""
    from kfp.dsl import Markdown, Metrics, Model

    from components.pick_best import pick_best
    from tests.unit.test_serve_openai import art

    trials = [
        {"lora_r": 4, "lora_alpha": 8, "learning_rate": 0.001},
        {"lora_r": 8, "lora_alpha": 16, "learning_rate": 0.001},
    ]
    metrics = []
    for i, (acc, scale) in enumerate(((0.5, 1.0), (0.9, 0.75))):
        m = art(Metrics, tmp_path, f"m{i}")
        m.metadata.update(
            {"base_fc_ast_accuracy": 0.1, "tuned_fc_ast_accuracy": acc, "fc_ast_accuracy": acc, "merge_scale": scale}
        )
        metrics.append(m)
    adapters = [art(Model, tmp_path, f"a{i}") for i in range(2)]
    for a in adapters:
        a.metadata["uri"] = f"s3://b/models/{a.name}"
    out = pick_best.python_func(
        trials=trials,
        trial_metrics=metrics,
        adapters=adapters,
        best_adapter=art(Model, tmp_path, "best"),
        best_metrics=art(Metrics, tmp_path, "best-metrics"),
        summary=art(Markdown, tmp_path, "summary"),
        min_gain=0.1,
    )
    assert (out.best_trial, out.best_scale, out.deploy) == (1, 0.75, True)


def _result(tuned_ast):
    """An evaluate() result of the held-out suite alone, as the step prints and logs it."""
    metrics = {"fc_accuracy": 0.0, "text_match": 0.0, "eval_loss": 1.0, "fc_ast_accuracy": 0.3}
    return {
        "base": metrics,
        "tuned": {**metrics, "fc_accuracy": tuned_ast, "eval_loss": 0.5, "fc_ast_accuracy": tuned_ast},
        "rows": 10,
        "turns": 10,
        "fc_rows": 10,
        "text_rows": 0,
        "skipped_long_rows": 0,
        "engine": "hf",
        "suites": ["heldout"],
    }


def test_each_scales_outcome_is_said_as_soon_as_it_is_scored(lora, tmp_path, capsys):
    """With several scales, each one's scores and verdict are printed when it is scored, before the next is asked (a
    scale costs minutes on a laptop); with one scale nothing more is said."""
    _, adapter = lora
    verdict = sc.promotion_at(min_fc_accuracy=0.5)
    said = []

    def fake(model_dir, tuned_dir, **kwargs):
        said.append(capsys.readouterr().out)  # what was printed before this scale was asked
        return _result(0.9 if len(said) == 1 else 0.4)

    sc.evaluate_scales(fake, tmp_path, adapter, (1.0, 0.5), verdict=verdict)
    said.append(capsys.readouterr().out)
    assert "merge scale 1 scored:" not in said[0]
    assert "merge scale 1 scored:" in said[1] and "  gate: promoted" in said[1]
    assert "merge scale 0.5 scored:" in said[2] and "  gate: not promoted" in said[2]
    sc.evaluate_scales(fake, tmp_path, adapter, (1.0,), verdict=verdict)
    assert "scored:" not in capsys.readouterr().out


def test_scale_lines_give_the_scores_and_the_gates_verdict_at_that_scale():
    verdict = sc.promotion_at(min_fc_accuracy=0.5)
    passing, failing = sc.scale_lines(0.75, _result(0.9), verdict), sc.scale_lines(0.5, _result(0.4), verdict)
    assert passing[0] == "merge scale 0.75 scored:" and failing[0] == "merge scale 0.5 scored:"
    assert "fc accuracy 0.0% -> 90.0%" in passing[1] and "fc accuracy 0.0% -> 40.0%" in failing[1]
    assert passing[-1].startswith("  gate: promoted") and failing[-1].startswith("  gate: not promoted")
    assert sc.scale_lines(0.5, _result(0.4)) == failing[:-1]  # no gate given: the scores alone
