"""The sweep: picking the winner, and the deploy gate in both directions, under kfp.local.

The fast checks; the ones that train, serve or run the pipeline are tests/integration/test_sweep.py (the integration tier)."""

import json

import pytest

from trainer.evaluate.gate import pick

TRIALS = [
    {"lora_r": 4, "lora_alpha": 8, "learning_rate": 0.003},
    {"lora_r": 8, "lora_alpha": 16, "learning_rate": 0.001},
]


def m(acc, loss, base=0.0):
    """A trial's evaluate metrics as logged: the primary accuracy as base_, tuned_ and plain (the tuned model's)."""
    return {
        "base_fc_ast_accuracy": base,
        "tuned_fc_ast_accuracy": acc,
        "fc_ast_accuracy": acc,
        "base_eval_loss": 7.0,
        "tuned_eval_loss": loss,
    }


def test_pick_by_accuracy_and_gate():
    picked = pick(TRIALS, [m(0.3, 1.0), m(0.6, 2.0)], "fc_ast_accuracy", min_gain=0.5)
    assert picked["best"] == 1 and picked["deploy"]
    assert picked["reason"] == (
        "deploying trial 1 (lora_r=8, lora_alpha=16, learning_rate=0.001): fc_ast_accuracy "
        "0.0% -> 60.0% (+60.0 points), min_fc_accuracy 0.0%, min_gain 50.0 points"
    )
    blocked = pick(TRIALS, [m(0.3, 1.0), m(0.6, 2.0)], "fc_ast_accuracy", min_gain=0.7)
    assert blocked["best"] == 1 and not blocked["deploy"] and blocked["reason"].startswith("not deployed:")


def test_a_trial_that_lost_a_category_is_not_picked_while_another_passes():
    """max_category_drop in the pick: the trial with the larger gain lost irrelevance (1.0 -> 0.5) and is passed
    over; where every trial lost it, nothing is deployed and the message names the category and both numbers."""
    lost = {**m(0.9, 1.0), "base_fc_irrelevance_accuracy": 1.0, "tuned_fc_irrelevance_accuracy": 0.5}
    kept = {**m(0.6, 2.0), "base_fc_irrelevance_accuracy": 1.0, "tuned_fc_irrelevance_accuracy": 0.95}
    picked = pick(TRIALS, [lost, kept], "fc_ast_accuracy", min_gain=0.1, max_category_drop=0.1)
    assert picked["best"] == 1 and picked["deploy"], picked["reason"]
    assert pick(TRIALS, [lost, kept], "fc_ast_accuracy", min_gain=0.1)["best"] == 0  # 1.0, the default here: off
    none = pick(TRIALS, [lost, lost], "fc_ast_accuracy", min_gain=0.1, max_category_drop=0.1)
    assert not none["deploy"] and none["best"] == 0
    assert (
        "fc_irrelevance fell 100.0% -> 50.0% (-50.0 points; lost/won not logged (an older run): taken as "
        "significant; max_category_drop 0.1)"
    ) in none["reason"]


def test_a_trial_that_meets_min_gain_exactly_is_deployed():
    """0.6 -> 0.7 against the default min_gain 0.1: deployed (floating point makes the gain 0.09999999999999998)."""
    exact = [m(0.7, 1.0, base=0.6)]
    picked = pick(TRIALS[:1], exact, "fc_ast_accuracy", min_gain=0.1, min_fc_accuracy=0.7)
    assert picked["deploy"], picked["reason"]
    short = [m(0.69, 1.0, base=0.6)]
    assert not pick(TRIALS[:1], short, "fc_ast_accuracy", min_gain=0.1)["deploy"]


def test_pick_by_eval_loss_prefers_lower_and_ties_go_to_the_first():
    assert pick(TRIALS, [m(0.3, 1.0), m(0.6, 2.0)], "eval_loss", min_gain=1.0)["best"] == 0
    assert pick(TRIALS, [m(0.5, 1.0), m(0.5, 1.0)], "fc_ast_accuracy", min_gain=0.0)["best"] == 0
    # a trial whose eval loss is not a number is never the best of others (max() over a NaN key picked it)
    nan = float("nan")
    assert pick(TRIALS, [m(0.3, nan), m(0.6, 3.0)], "eval_loss", min_gain=1.0)["best"] == 1
    assert pick(TRIALS, [m(0.3, 3.0), m(0.6, float("inf"))], "eval_loss", min_gain=1.0)["best"] == 0
    alone = pick(TRIALS[:1], [m(0.3, nan)], "eval_loss", min_gain=0.0)
    assert alone["best"] == 0 and not alone["deploy"]
    with pytest.raises(ValueError, match="select_metric"):
        pick(TRIALS, [m(0.3, 1.0), m(0.6, 2.0)], "bleu", 0.0)
    with pytest.raises(ValueError, match="2 trials but 1"):
        pick(TRIALS, [m(0.3, 1.0)], "fc_ast_accuracy", 0.0)


def test_pick_by_accuracy_without_tool_call_rows_deploys_nothing_and_names_eval_loss():
    # A text-only eval split: every trial's accuracy is 0 -> 0, so "the best" would be a tie.
    text_only = [
        {"base_eval_loss": 7.0, "tuned_eval_loss": loss, "fc_rows": 0.0, "text_rows": 4.0} for loss in (1.0, 0.5)
    ]
    picked = pick(TRIALS, text_only, "fc_ast_accuracy", min_gain=-1.0)
    assert not picked["deploy"] and "no tool-call rows (4 text rows)" in picked["reason"]
    assert "select_metric=eval_loss" in picked["reason"]
    assert pick(TRIALS, text_only, "eval_loss", min_gain=0.1)["best"] == 1
    # README: a metric is never shown as a measured-looking 0; and no trial is "best" on a tie of nothing
    from trainer.evaluate.report import sweep_markdown

    table = sweep_markdown(picked, "fc_ast_accuracy")
    assert "| 0 | 4 | 8 | 0.003 | not measured | not measured | not measured |" in table
    assert "(best)" not in table


@pytest.mark.parametrize(
    "base, tuned, irrelevance, floor, gain, drop, significance",
    [
        (0.3, 0.9, 1.0, 0.0, 0.1, 0.1, 0.0),  # promoted
        (0.3, 0.35, 1.0, 0.0, 0.1, 0.1, 0.0),  # gain short of min_gain
        (0.3, 0.8, 1.0, 0.9, 0.1, 0.1, 0.0),  # under min_fc_accuracy
        (0.3, 0.9, 0.5, 0.0, 0.1, 0.1, 0.0),  # irrelevance fell 50 points
        (0.3, 0.9, 0.85, 0.0, 0.1, 0.1, 0.05),  # fell 15 points on rows within chance, let pass
        (0.3, 0.9, 0.85, 0.0, 0.1, 1.0, 0.0),  # the category gate off
    ],
)
def test_the_sweep_deploys_its_winner_exactly_when_the_finetune_gate_would_promote_it(
    base, tuned, irrelevance, floor, gain, drop, significance
):
    """One promotion rule (trainer.evaluate.gate): the same metrics, thresholds and verdict for a lone trial."""
    from trainer.evaluate.gate import promotion

    metrics = {
        **m(tuned, 1.0, base=base),
        "base_fc_irrelevance_accuracy": 1.0,
        "tuned_fc_irrelevance_accuracy": irrelevance,
        "fc_irrelevance_rows": 20.0,
        "fc_irrelevance_lost": round((1 - irrelevance) * 20),
        "fc_irrelevance_won": 0.0,
    }
    promoted, said = promotion(metrics, floor, gain, drop, significance)
    picked = pick(TRIALS[:1], [metrics], "fc_ast_accuracy", gain, floor, drop, significance)
    assert picked["deploy"] is promoted
    assert said.split(": ", 1)[1].split(". Nothing is deployed")[0] in picked["reason"]  # the gate's own words


def test_select_metric_fc_accuracy_names_the_metric_it_became():
    """The sweep's former exact-match metric: refused with the one the finetune gate reads, before any trial."""
    from trainer.validate.sweep import sweep_problems

    problems = sweep_problems({"select_metric": "fc_accuracy"})
    assert (
        "select_metric=fc_accuracy is no longer a choice: the sweep now picks and gates on the finetune "
        "pipeline's metric, fc_ast_accuracy"
    ) in " ".join(problems)
    assert any(p.endswith("set select_metric=fc_ast_accuracy") for p in problems)
    with pytest.raises(ValueError, match="set select_metric=fc_ast_accuracy"):
        pick(TRIALS, [m(0.3, 1.0), m(0.6, 2.0)], "fc_accuracy", 0.0)


def test_a_sweep_on_text_only_data_by_fc_ast_accuracy_is_refused_before_any_trial(tmp_path):
    """Every trial trained, then scored 0 -> 0 and nothing deployed. The rows are read by
    validation anyway (a local file): refuse up front, naming select_metric=eval_loss."""
    from trainer.validate import sweep_problems

    path = tmp_path / "chat.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"messages": [{"role": "user", "content": f"hello {i}"}, {"role": "assistant", "content": f"hi {i}"}]}
            )
            + "\n"
            for i in range(40)
        )
    )
    params = {"trials": TRIALS, "dataset_source": str(path)}
    problems = sweep_problems(params)
    assert len(problems) == 1, problems
    assert "select_metric=fc_ast_accuracy measures tool calls, but the eval split of dataset_source" in problems[0]
    assert "has none (4 text rows)" in problems[0] and problems[0].endswith("set select_metric=eval_loss")
    assert sweep_problems({**params, "select_metric": "eval_loss"}) == []
    assert sweep_problems({"trials": TRIALS}) == []  # the built-in data has tool-call rows


def test_a_sweep_whose_scored_eval_rows_hold_no_tool_call_is_refused_naming_eval_max_rows(tmp_path):
    """evaluate scores the split's first eval_max_rows rows: 20 text rows first, 40 tool-call rows after passed the
    check on the whole split, then every trial trained and "the eval split has no tool-call rows" (it had 40)."""
    from tests.unit.test_bad_inputs import _eval_led_by
    from trainer.validate import sweep_problems

    params = {"trials": TRIALS, "dataset_source": _eval_led_by(tmp_path, "text").split("=", 1)[1]}
    [problem] = sweep_problems({**params, "eval_max_rows": 20})
    assert "the 20 eval rows evaluate scores (the first eval_max_rows=20)" in problem
    assert "raise eval_max_rows (the split's 60 rows hold 40 tool-call rows), or set select_metric=eval_loss" in problem
    assert sweep_problems({**params, "eval_max_rows": 21}) == []
    assert (
        "min_fc_accuracy=0.5 gates"
        in sweep_problems({**params, "eval_max_rows": 20, "select_metric": "eval_loss", "min_fc_accuracy": 0.5})[0]
    )
    assert sweep_problems({**params, "eval_max_rows": 20, "select_metric": "eval_loss"}) == []  # min_gain: eval loss


def _task_wiring(pipeline, tmp_path, task_prefix):
    """{component input: pipeline parameter it is wired to} for each task named task_prefix*."""
    import yaml
    from kfp import compiler

    path = tmp_path / f"{pipeline.name}.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    spec = next(yaml.safe_load_all(path.read_text()))
    dags = [spec["root"]["dag"], *(c["dag"] for c in spec["components"].values() if "dag" in c)]
    out = {}
    for dag in dags:
        for name, task in dag["tasks"].items():
            if name == task_prefix or name.startswith(f"{task_prefix}-"):
                out[name] = {
                    k: v.get("componentInputParameter", "").removeprefix("pipelinechannel--")
                    for k, v in task["inputs"].get("parameters", {}).items()
                }
    return out, spec


def test_the_sweep_wires_the_cluster_settings_to_its_tasks_as_the_finetune_pipeline_does(tmp_path):
    """A sweep on a cluster needs the same placement, queueing, watchdog and serving settings as
    one run: every setting both pipelines take reaches the same component input in both."""
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.cli_params import pipeline_defaults
    from pipelines.dag.sweep import sweep_pipeline

    sweep_params = set(pipeline_defaults(sweep_pipeline))
    for name in (
        "kueue_queue",
        "training_runtime",
        "serve_gpus",
        "vllm_image",
        "eval_gpus",
        "eval_accelerator_type",
        "eval_node_selector",
        "eval_tolerations",
        "wait_timeout_s",
        "stall_timeout_s",
        "compile",
        "checkpoint_every",
        "cleanup",
        "gradient_checkpointing",
    ):
        assert name in sweep_params, name
    for task in ("finetune", "deploy"):
        single = _task_wiring(finetune_pipeline, tmp_path, task)[0][task]
        sweep_tasks, spec = _task_wiring(sweep_pipeline, tmp_path, task)
        wired = sweep_tasks[task]
        shared = {k: v for k, v in single.items() if v in sweep_params}
        assert len(shared) >= (20 if task == "finetune" else 8), shared
        assert {k: wired.get(k) for k in shared} == shared, task
    executors = spec["deploymentSpec"]["executors"]
    for name in ("exec-evaluate", "exec-merge-lora"):  # placed on GPUs by the same parameters as in finetune
        acc = executors[name]["container"]["resources"]["accelerator"]
        assert "eval_accelerator_type" in acc["resourceType"] and "eval_gpus" in acc["resourceCount"]
    # ... which must reach the loop's and the condition's sub-DAGs (KFP 2.17 does not pass them by itself:
    # the run failed with "Parent pipeline input argument 'pipelinechannel--eval_accelerator_type' not found")
    for name, component in spec["components"].items():
        if name.startswith(("comp-for-loop", "comp-condition")) and "dag" in component:
            tasks = {t["componentRef"]["name"] for t in component["dag"]["tasks"].values()}
            if tasks & {"comp-evaluate", "comp-merge-lora"}:
                inputs = component["inputDefinitions"]["parameters"]
                assert {"pipelinechannel--eval_gpus", "pipelinechannel--eval_accelerator_type"} <= set(inputs), name


def test_the_sweeps_pick_applies_the_promotion_gates_accuracy():
    metrics = [{**m(0.3, 1.0), "fc_ast_accuracy": 0.3}, {**m(0.6, 2.0), "fc_ast_accuracy": 0.6}]
    assert pick(TRIALS, metrics, "fc_ast_accuracy", min_gain=0.5, min_fc_accuracy=0.6)["deploy"]
    blocked = pick(TRIALS, metrics, "fc_ast_accuracy", min_gain=0.5, min_fc_accuracy=0.7)
    assert not blocked["deploy"] and "fc_ast_accuracy 60.0% < min_fc_accuracy 70.0%" in blocked["reason"]
    text_only = [{"base_eval_loss": 7.0, "tuned_eval_loss": loss} for loss in (1.0, 2.0)]
    unmeasured = pick(TRIALS, text_only, "eval_loss", min_gain=0.0, min_fc_accuracy=0.5)
    assert not unmeasured["deploy"] and unmeasured["reason"] == (
        "not deployed: trial 0 (lora_r=4, lora_alpha=8, learning_rate=0.003): the eval split has no function-calling "
        "rows, so fc_ast_accuracy measures nothing and cannot pass min_fc_accuracy=0.5: set it to 0 for chat-only data"
    )
    # by eval loss a fall in the accuracy is not asked about, only its floor
    fell = [m(0.2, 1.0, base=0.5)]
    assert pick(TRIALS[:1], fell, "eval_loss", min_gain=1.0, min_fc_accuracy=0.1)["deploy"]
