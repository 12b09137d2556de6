"""A gate that knows how many rows it stands on (issue 44, item 4): the rows tuning lost and won per category
(trainer.evaluate.paired), McNemar's exact test on them (trainer.evaluate.gate.mcnemar_p), and the promotion gate and
the sweep's pick refusing a category's drop only when it is also significant, once gate_significance asks."""

import math

import pytest

from trainer.data import builtin_data
from trainer.chat import fc_check
from trainer.chat.turns import expected_calls
from trainer.evaluate import bfcl
from trainer.evaluate.gate import promotion
from trainer.evaluate.paired import heldout_counts, paired_counts
from trainer.evaluate.gate import category_drops, mcnemar_p, pick
from trainer.validate import type_problems


@pytest.mark.parametrize(
    "lost, won, p",
    [
        (10, 0, 0.001953125),  # 2 / 2**10
        (0, 10, 0.001953125),  # two-sided: the same either way
        (3, 1, 0.625),  # 2 * (1 + 4) / 16
        (0, 0, 1.0),  # no row changed verdict
        (5, 5, 1.0),  # twice the tail is over 1
        (2, 0, 0.5),
        (20, 5, 2 * sum(math.comb(25, i) for i in range(6)) / 2**25),  # 0.00408
    ],
)
def test_mcnemar_exact_p_is_the_binomial_tail_on_the_discordant_rows(lost, won, p):
    assert mcnemar_p(lost, won) == pytest.approx(p, rel=1e-12)


def test_mcnemar_is_exact_for_thousands_of_rows():
    assert mcnemar_p(1800, 1700) == mcnemar_p(1700, 1800)
    assert 0 < mcnemar_p(1800, 1700) < 0.1 and mcnemar_p(1750, 1750) == 1.0


def v(category, ok):
    return {"category": category, "ok": ok}


def test_lost_and_won_per_category_from_both_models_verdicts():
    base = [
        v("simple", True),
        v("simple", True),
        v("simple", False),
        v("irrelevance", True),
        v("chat", True),
        v("parallel", False),
    ]
    tuned = [
        v("simple", False),
        v("simple", True),
        v("simple", True),
        v("irrelevance", True),
        v("chat", False),
        v("parallel", False),
    ]
    assert paired_counts(base, tuned, "heldout", fc_check.CATEGORIES) == {
        "fc_simple_lost": 1,
        "fc_simple_won": 1,
        "fc_irrelevance_lost": 0,
        "fc_irrelevance_won": 0,
        "fc_parallel_lost": 0,
        "fc_parallel_won": 0,
    }  # a category measured logs its 0s; chat is no category
    assert paired_counts(base, tuned, "bfcl")["bfcl_chat_lost"] == 1  # no list given: every category seen
    with pytest.raises(ValueError, match="not of the same rows"):
        paired_counts(base, tuned[:-1], "heldout")
    with pytest.raises(ValueError, match="not of the same rows"):
        paired_counts(base, list(reversed(tuned)), "heldout")


def test_heldout_counts_from_both_models_predictions():
    """The base answers every row in text, the tuned one with the expected calls: every call row won, no row lost
    (text rows, irrelevance and multi_turn, right for both)."""
    rows = builtin_data.generate(n_train=0, n_eval=80, seed=3)["eval"]
    tuned = [{"calls": expected_calls(r), "content": None if expected_calls(r) else "The answer."} for r in rows]
    base = [{"calls": [], "content": "The answer."} for _ in rows]
    counts = heldout_counts(rows, {"base": base, "tuned": tuned})
    calls = {}
    for r in rows:
        if (c := fc_check.category(r)) != fc_check.CHAT:
            calls[c] = calls.get(c, 0) + bool(expected_calls(r))
    assert {k for k in counts if k.endswith("_won")} == {f"fc_{c}_won" for c in calls}
    assert all(counts[f"fc_{c}_lost"] == 0 and counts[f"fc_{c}_won"] == n for c, n in calls.items())
    assert counts["fc_multiple_won"] > 0


def test_bfcl_counts_carry_lost_and_won_when_both_models_answers_are_given():
    asked = [{"category": "simple_python"}] * 3 + [{"category": "irrelevance"}] * 2
    fake = {"base": [None, None, None, None, None], "tuned": [None, None, None, None, None]}
    counts = bfcl.counts(asked, [True] * 5, fake)  # not asked: wrong for both, so nothing changed
    assert counts["bfcl_simple_python_rows"] == 3 and counts["bfcl_simple_python_too_long"] == 3
    assert counts["bfcl_simple_python_lost"] == counts["bfcl_irrelevance_won"] == 0
    assert "bfcl_simple_python_lost" not in bfcl.counts(asked, [True] * 5)  # without answers, as before


def _metrics(base, tuned, rows=None, lost=None, won=None, name="fc_irrelevance"):
    m = {
        "fc_ast_accuracy": 0.9,
        "base_fc_ast_accuracy": 0.1,
        f"base_{name}_accuracy": base,
        f"tuned_{name}_accuracy": tuned,
    }
    m.update({f"{name}_{k}": float(x) for k, x in (("rows", rows), ("lost", lost), ("won", won)) if x is not None})
    return m


def test_the_gate_line_gives_rows_and_mcnemar_beside_the_drop():
    ok, why = promotion(_metrics(1.0, 0.6, 25, 10, 0), max_category_drop=0.1)
    assert (
        not ok
        and (
            "fc_irrelevance fell 100.0% -> 60.0% (-40.0 points on 25 rows; 10 lost, 0 won, McNemar "
            "p=0.00195; max_category_drop 0.1)"
        )
        in why
    )


def test_a_big_significant_drop_is_refused_with_or_without_gate_significance():
    metrics = _metrics(1.0, 0.6, 25, 10, 0, name="bfcl_irrelevance")
    assert not promotion(metrics, max_category_drop=0.1)[0]
    ok, why = promotion(metrics, max_category_drop=0.1, gate_significance=0.05)
    assert not ok and "McNemar p=0.00195; max_category_drop 0.1, gate_significance 0.05)" in why


def test_a_big_drop_within_chance_passes_only_when_gate_significance_asks():
    """25 rows, 1.0 -> 0.92: 8 points past max_category_drop 0.05, but 2 lost and none won is p=0.5."""
    metrics = _metrics(1.0, 0.92, 25, 2, 0)
    ok, why = promotion(metrics, max_category_drop=0.05)  # gate_significance 0, the default: refused as before
    assert not ok and "2 lost, 0 won, McNemar p=0.5; max_category_drop 0.05)" in why
    ok, why = promotion(metrics, max_category_drop=0.05, gate_significance=0.05)
    assert ok and why.startswith("promoted: ") and "within chance, so let pass: fc_irrelevance fell" in why
    assert category_drops(metrics, 0.05, 0.05) == [] and len(category_drops(metrics, 0.05)) == 1
    assert not promotion(metrics, max_category_drop=0.05, gate_significance=0.6)[0]  # p 0.5 < 0.6: refused


def test_a_drop_without_logged_counts_is_taken_as_significant():
    ok, why = promotion(_metrics(1.0, 0.6), max_category_drop=0.1, gate_significance=0.05)
    assert not ok and "(-40.0 points; lost/won not logged (an older run): taken as significant;" in why


def test_the_default_gate_is_unchanged():
    """gate_significance left out: every drop past max_category_drop refuses, whatever its p; none within it does."""
    for counts in ((25, 2, 0), (25, 0, 0), (None, None, None)):
        assert not promotion(_metrics(1.0, 0.92, *counts), max_category_drop=0.05)[0]
        assert promotion(_metrics(1.0, 0.92, *counts), max_category_drop=0.1)[0]
    assert promotion(_metrics(1.0, 0.0, 25, 25, 0), max_category_drop=1.0)[0]  # 1.0: off


TRIALS = [
    {"lora_r": 4, "lora_alpha": 8, "learning_rate": 0.003},
    {"lora_r": 8, "lora_alpha": 16, "learning_rate": 0.001},
]


def test_the_sweeps_pick_reads_gate_significance_as_the_gate_does():
    def trial(acc, tuned_irrelevance, lost):
        return {
            "base_fc_ast_accuracy": 0.0,
            "tuned_fc_ast_accuracy": acc,
            "fc_ast_accuracy": acc,
            **_metrics(1.0, tuned_irrelevance, 25, lost, 0),
        }

    chance, harm = trial(0.9, 0.92, 2), trial(0.6, 0.6, 10)
    assert pick(TRIALS, [chance, harm], "fc_ast_accuracy", min_gain=0.1, max_category_drop=0.05)["deploy"] is False
    picked = pick(
        TRIALS, [chance, harm], "fc_ast_accuracy", min_gain=0.1, max_category_drop=0.05, gate_significance=0.05
    )
    assert picked["best"] == 0 and picked["deploy"], picked["reason"]
    none = pick(TRIALS, [harm, harm], "fc_ast_accuracy", min_gain=0.1, max_category_drop=0.05, gate_significance=0.05)
    assert not none["deploy"] and "10 lost, 0 won, McNemar p=0.00195" in none["reason"]


@pytest.mark.parametrize(
    "value, problem",
    [
        (
            1.0,
            "gate_significance=1 is a p-value threshold, from 0 (off: every drop past max_category_drop is refused) "
            "up to, not including, 1: e.g. 0.05",
        ),
        (-0.05, "gate_significance=-0.05 is a p-value threshold"),
        (float("nan"), "gate_significance must be a finite number"),
        (True, "gate_significance must be a number, got true (a boolean)"),
    ],
)
def test_gate_significance_out_of_range_is_one_problem(value, problem):
    problems, bad = type_problems({"gate_significance": value})
    assert len(problems) == 1 and problem in problems[0] and bad == {"gate_significance"}


@pytest.mark.parametrize("value", [0.0, 0, 0.05, 0.999])
def test_gate_significance_in_range_passes(value):
    assert type_problems({"gate_significance": value}) == ([], set())


def test_max_category_drop_is_a_fraction_like_the_other_thresholds():
    """min_gain and min_fc_accuracy are fractions; max_category_drop was points, so 0.1 passed validate and refused
    every drop over a tenth of a point. Now 0.1 is 10 points: a 10-point fall passes (float error included), 12 do
    not; validate refuses a value in points, naming the fraction."""
    from trainer.config import params
    from trainer.validate import pipeline_problems

    assert params.BY_NAME["max_category_drop"].default == 0.1
    assert (
        promotion(_metrics(1.0, 0.9), max_category_drop=0.1)[0]
        and promotion(_metrics(0.7, 0.6), max_category_drop=0.1)[0]
    )
    assert not promotion(_metrics(1.0, 0.88), max_category_drop=0.1)[0]
    [points] = [p for p in pipeline_problems({"max_category_drop": 10.0}) if "max_category_drop" in p]
    assert points.endswith("a fraction: 0.1 is 10 points, so give max_category_drop=0.1")
    assert not [p for p in pipeline_problems({"max_category_drop": 0.1}) if "max_category_drop" in p]


def test_logged_metrics_read_back_as_typed_scores():
    """trainer.core.metrics.read: the names the evaluate step logs, read where they are made, into what the gate
    decides on; a category one model did not measure is left out, counts an older run did not log are None."""
    from trainer.core import metrics as names

    logged = {
        names.base(names.PRIMARY): 0.3,
        names.PRIMARY: 0.9,  # the tuned model's under its plain name
        names.base(names.accuracy("heldout", "multiple")): 0.0,
        names.tuned(names.accuracy("heldout", "multiple")): 0.99,
        names.count("heldout", "multiple", "rows"): 122.0,
        names.count("heldout", "multiple", "lost"): 0.0,
        names.count("heldout", "multiple", "won"): 121.0,
        names.base(names.accuracy("bfcl", "irrelevance")): 1.0,
        names.accuracy("bfcl", "irrelevance"): 0.76,
        names.base(names.accuracy("heldout", "parallel")): 0.5,  # tuned not logged: not a result
    }
    scores = names.read(logged, {"heldout": fc_check.CATEGORIES, "bfcl": ("irrelevance",)})
    assert (scores.base, scores.tuned) == (0.3, 0.9)
    assert [(c.name, c.base, c.tuned, c.rows, c.lost, c.won) for c in scores.categories] == [
        ("fc_multiple", 0.0, 0.99, 122, 0, 121),
        ("bfcl_irrelevance", 1.0, 0.76, None, None, None),
    ]
    assert names.read({}, {"heldout": fc_check.CATEGORIES}) == names.Scores(None, None, ())


def _two(irrelevance, multiple):
    """Metrics of two categories: (base, tuned, rows, lost, won) each."""
    return {
        "base_fc_ast_accuracy": 0.3,
        "tuned_fc_ast_accuracy": 0.9,
        **_metrics(*irrelevance, name="bfcl_irrelevance"),
        **_metrics(*multiple, name="fc_multiple"),
    }


def test_a_category_named_in_max_drop_by_category_has_its_own_limit():
    """Issue 56: allow bfcl_irrelevance 20 points, keep 10 elsewhere."""
    from trainer.evaluate.gate import parse_drops

    metrics = _two((1.0, 0.84, 25, 4, 0), (0.5, 0.45, 120, 6, 0))
    ok, why = promotion(metrics, max_category_drop=0.1)
    assert not ok and "bfcl_irrelevance fell 100.0% -> 84.0%" in why  # the default: one limit for all
    limits = parse_drops("bfcl_irrelevance=0.2")
    ok, why = promotion(metrics, max_category_drop=0.1, by_category=limits)
    assert ok, why
    # the other categories keep max_category_drop
    worse = _two((1.0, 0.84, 25, 4, 0), (0.5, 0.3, 120, 24, 0))
    ok, why = promotion(worse, max_category_drop=0.1, by_category=limits)
    assert not ok and "fc_multiple fell 50.0% -> 30.0%" in why and "bfcl_irrelevance fell" not in why
    # a drop past the category's own limit names it
    ok, why = promotion(_two((1.0, 0.72, 25, 7, 0), (0.5, 0.5, 120, 0, 0)), max_category_drop=0.1, by_category=limits)
    assert not ok and "McNemar p=0.0156; max_drop_by_category bfcl_irrelevance=0.2)" in why
    # 1 turns that category off, with max_category_drop off for the others too the gate reads nothing
    assert promotion(_two((1.0, 0.0, 25, 25, 0), (0.5, 0.5, 120, 0, 0)), 0, 0, 0.1, 0, {"bfcl_irrelevance": 1.0})[0]
    assert not promotion(_two((1.0, 0.5, 25, 12, 0), (0.5, 0.5, 120, 0, 0)), 0, 0, 1.0, 0, {"bfcl_irrelevance": 0.2})[0]
    # the sweep's pick reads it as the gate does
    picked = pick(TRIALS, [metrics, worse], "fc_ast_accuracy", min_gain=0.1, max_category_drop=0.1, by_category=limits)
    assert picked["best"] == 0 and picked["deploy"], picked["reason"]


@pytest.mark.parametrize(
    "text, said",
    [
        ("bfcl_irrelevanc=0.2", "'bfcl_irrelevanc' is no category the gate reads; one of fc_simple, fc_multiple"),
        ("fc_multiple=2", "fc_multiple='2' is no fraction from 0 to 1"),
        ("fc_multiple=nan", "fc_multiple='nan' is no fraction from 0 to 1"),
        ("fc_multiple", "'fc_multiple' has no '=': write category=fraction"),
        ("fc_simple=0.1,fc_simple=0.2", "fc_simple is given twice (0.1 and 0.2): keep one"),
    ],
)
def test_a_bad_max_drop_by_category_is_one_problem_at_validate(text, said):
    from trainer.validate import pipeline_problems

    [problem] = [p for p in pipeline_problems({"max_drop_by_category": text}) if "max_drop_by_category" in p]
    assert problem.startswith(f"max_drop_by_category={text!r}: ") and said in problem


def test_every_problem_of_max_drop_by_category_is_said_at_once():
    from trainer.core.errors import UserError
    from trainer.evaluate.gate import parse_drops

    err = str(pytest.raises(UserError, parse_drops, "x, fc_multiple=2, bfcl_irrelevance=0.2").value)
    assert "'x' has no '='" in err and "fc_multiple='2'" in err and "bfcl_irrelevance='0.2'" not in err
    assert parse_drops("") == {} and parse_drops(" bfcl_irrelevance = 0.2 , ") == {"bfcl_irrelevance": 0.2}


def test_a_category_too_small_to_show_a_drop_of_its_limit_is_said_inconclusive():
    """Issue 56: 25 rows cannot show a 10-point drop: a drop past it needs 3 rows lost, and 3 lost, 0 won is McNemar
    p=0.25; the smallest count below 0.05 is 6 lost, which 50 rows need (floor(0.1 * 50) + 1 = 6). The verdict says
    so; the default gate still decides by the points."""
    from trainer.evaluate.gate import inconclusive

    small, large = (1.0, 1.0, 25, 0, 0), (0.5, 0.5, 50, 0, 0)
    assert inconclusive(_two(small, large), 0.1) == ["bfcl_irrelevance (25 rows; 50 would show a 10-point drop)"]
    assert inconclusive(_two((1.0, 1.0, 50, 0, 0), large), 0.1) == []
    assert inconclusive(_two((1.0, 1.0, 49, 0, 0), large), 0.1) == [
        "bfcl_irrelevance (49 rows; 50 would show a 10-point drop)"
    ]
    # its own limit counts: 20 points on 25 rows needs 6 lost, p=0.031
    assert inconclusive(_two(small, large), 0.1, by_category={"bfcl_irrelevance": 0.2}) == []
    # at gate_significance 0.01 (8 lost: p=0.0078) 25 rows show 30 points, not 20
    assert inconclusive(_two(small, large), 0.3, 0.01) == []
    assert inconclusive(_two(small, large), 0.2, 0.01)[0].startswith("bfcl_irrelevance (25 rows; 35 would show")
    # a base with too few right rows cannot fall past the limit at all: nothing to say
    assert inconclusive(_two((0.08, 0.08, 25, 0, 0), large), 0.1) == []
    ok, why = promotion(_two(small, large), max_category_drop=0.1)
    assert ok and why.endswith(
        "inconclusive at p<0.05 (exact binomial bound: with every changed row lost, McNemar's p stays above it), so "
        "these categories' verdicts rest on the points alone: bfcl_irrelevance (25 rows; 50 would show a 10-point drop)"
    )
    ok, why = promotion(_two((1.0, 0.8, 25, 5, 0), large), max_category_drop=0.1)
    assert not ok and "bfcl_irrelevance fell" in why and why.endswith("50 would show a 10-point drop)")
    assert promotion(_two(small, large), max_category_drop=1.0) == promotion(_two(small, large))  # off: no line
