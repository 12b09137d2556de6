"""evaluate: base vs tuned on the held-out split (function-calling accuracy over tool-call rows,
text match over text rows, eval loss), plus example outputs."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Metrics, Model, Output

from trainer.core import settings


# The project on vLLM's image (docker/Dockerfile.eval): eval_engine=vllm serves in this pod.
@dsl.component(base_image=settings.get("EVAL_IMAGE"), install_kfp_package=False)
def evaluate(
    base_model: Input[Model],
    tuned_model: Input[Model],
    dataset: Input[Dataset],
    metrics: Output[Metrics],
    examples: Output[Markdown],
    bfcl_answers: Output[Dataset],
    max_rows: int = 200,
    max_seq_len: int = 512,
    eval_engine: str = "auto",
    min_fc_accuracy: float = 0.0,
    min_gain: float = 0.0,
    gate: bool = True,
    base_scores: Input[Artifact] = None,
    eval_suites: str = "heldout",
    bfcl: Input[Dataset] = None,
    bfcl_rows: int = 25,
    seed: int = 0,
    max_category_drop: float = 0.1,
    gate_significance: float = 0.0,
    max_drop_by_category: str = "",
    merge_scales: str = "1.0",
) -> NamedTuple("Outputs", promoted=bool, reason=str, merge_scale=float):
    """Score base and tuned on the held-out split; metric names are the same in every run
    (see trainer.evaluate for what each measures). `promoted`: the tuned model passes the gate
    (trainer.evaluate.promotion); the pipeline deploys and registers only then. `gate=False`: a
    sweep's trial, which its pick_best step gates (on select_metric): no promotion line or metric,
    which would read "promoted" against a gate nobody set. `base_scores`: the evaluate_base step's
    (a sweep scores its base once for every trial); none scores the base here too. `eval_suites`
    with bfcl: `bfcl_rows` rows per BFCL category (drawn with `seed`) from the deliver_bfcl step's
    `bfcl`, on the same servers (trainer.evaluate.bfcl); `max_category_drop`: the gate's per-category
    floor, `max_drop_by_category` other floors for the categories it names, `gate_significance`: McNemar's p a drop
    must be under to refuse (0: off) (trainer.evaluate.promotion). `merge_scales`: the adapter's update scored at each
    of these scales, the base once; the strongest that passes the gate is chosen (trainer.evaluate.scales), its
    metrics logged under the plain names (every scale's accuracies as scale<pct>_*), and `merge_scale` says which,
    for the merge step. A sweep's trial (gate=False) chooses by the gate's categories and min_fc_accuracy.
    The base's scores are kept in the bucket by what decides them (trainer.evaluate.kept_base): a later run
    with the same base tree, template, rows and settings reuses them and does not ask the base.
    Where MLFLOW_TRACKING_URI is set, the metrics, the verdict and the report go to MLflow too (trainer.core.tracking)."""
    import json
    from collections import namedtuple

    from components.artifacts import log_metrics, read_uri
    from trainer.data.bfcl import parse_suites
    from trainer.core.errors import UserError, exit_on_user_error
    from trainer.evaluate import evaluate as run_eval
    from trainer.evaluate import logged_metrics
    from trainer.evaluate.gate import parse_drops
    from trainer.evaluate.scales import choose, evaluate_scales, parse_scales, promotion_at, scale_metrics
    from trainer.evaluate.kept_base import KeptBase
    from trainer.models.model import skip_bitsandbytes
    from trainer.evaluate.report import examples_markdown, summary_lines
    from trainer.core.storage import Store
    from trainer.core.tracking import Tracker

    with exit_on_user_error():
        store = Store.from_env()
        tuned = store.get_tree(read_uri(tuned_model))
        skip_bitsandbytes(adapter_dir=tuned)  # unless the adapter's base is 4-bit: 1.4 s less
        base = json.loads(open(base_scores.path).read()) if base_scores is not None else None
        suites = parse_suites(eval_suites)
        by_category = parse_drops(max_drop_by_category)  # before any model loads
        scales = parse_scales(merge_scales)
        bfcl_uri = read_uri(bfcl) if bfcl is not None and "bfcl" in suites else ""
        if "bfcl" in suites and not bfcl_uri:
            raise UserError(
                "eval_suites scores bfcl, but no BFCL data was delivered to this step (its bfcl input "
                "points nowhere): run the deliver_bfcl step with the same eval_suites"
            )
        kept = KeptBase(store, read_uri(base_model), run=metrics.uri.rsplit("/", 1)[0])  # this run's outputs
        # a sweep's trial: the gate's categories and floor choose its scale; its pick asks the gain of the winner
        verdict = promotion_at(
            by_category,
            min_fc_accuracy=min_fc_accuracy,
            min_gain=min_gain if gate else None,
            max_category_drop=max_category_drop,
            gate_significance=gate_significance,
        )
        results = evaluate_scales(
            run_eval,
            store.get_tree(read_uri(base_model)),
            tuned,
            scales,
            verdict=verdict,
            eval_path=store.get_tree(read_uri(dataset)) / "eval.jsonl",
            max_rows=max_rows,
            max_seq_len=max_seq_len,
            engine=eval_engine,
            base=base,
            suites=suites,
            bfcl_dir=store.get_tree(bfcl_uri) if bfcl_uri else None,
            bfcl_rows=bfcl_rows,
            seed=seed,
            kept=kept,
        )
    every = [logged_metrics(r) for r in results]  # a kind of row the split lacks logs no accuracy, not 0
    chosen = choose(scales, every, verdict)
    result, logged = results[chosen.index], every[chosen.index]
    result["mix"] = dataset.metadata.get("mix") or []  # the sources' names for the report's by-source table
    promoted, reason = (chosen.promoted, chosen.reason) if gate else (True, "")
    if len(scales) > 1:  # each scale's verdict was printed as it was scored (evaluate_scales)
        print(f"merge scale {chosen.scale:g} chosen of {', '.join(f'{s:g}' for s in scales)}", flush=True)
    values = {**logged, **scale_metrics(scales, every, chosen.scale), **({"promoted": float(promoted)} if gate else {})}
    log_metrics(metrics, values)
    with open(examples.path, "w") as f:
        f.write(examples_markdown(result))
    with open(bfcl_answers.path, "w") as f:  # every BFCL row's answers and verdicts (empty without the suite)
        f.writelines(json.dumps(a, ensure_ascii=False) + "\n" for a in result.get("bfcl", {}).get("answers", []))
    for line in summary_lines(result):
        print(line, flush=True)
    if gate:
        print(reason if promoted else f"WARNING: {reason}", flush=True)
    with Tracker.from_env(run_name="evaluate") as tracker:
        tracker.log_metrics(values)
        tracker.set_tags({"promoted": str(promoted).lower(), "gate_reason": reason} if gate else {})
        tracker.log_artifact(examples.path, "reports")
    return namedtuple("Outputs", ["promoted", "reason", "merge_scale"])(promoted, reason, chosen.scale)
