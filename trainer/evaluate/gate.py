"""The promotion gate: whether the tuned model is deployed and registered."""

from __future__ import annotations

from trainer.selection import gate_drops, meets


def promotion(metrics: dict[str, float], min_fc_accuracy: float = 0.0, min_gain: float = 0.0,
              max_category_drop: float = 1.0, gate_significance: float = 0.0) -> tuple[bool, str]:
    """The promotion gate on the evaluate step's logged metrics: the tuned model's BFCL-style
    accuracy (fc_ast_accuracy, every function-calling category) at least `min_fc_accuracy`, and
    at least `min_gain` above the base's (fractions: 0.05 is 5 points), and no category of any suite
    more than `max_category_drop` below the base's (a fraction too: 0.1 is 10 points; `category_drops`; 1: off). Each
    category's line gives its rows and McNemar's exact p on the rows lost and won; `gate_significance`
    > 0 refuses only the drops with p below it (0: every drop past max_category_drop, significant or
    not), and the promoted line names those let pass. Returns (promoted, the line that says why); an
    accuracy the split cannot measure passes only a gate that asks nothing."""
    promoted, said = _accuracy_gate(metrics, min_fc_accuracy, min_gain)
    gated = max_category_drop < 1
    drops, passed = gate_drops(metrics, max_category_drop, gate_significance) if gated else ([], [])
    if not drops:
        if promoted and passed:
            return True, f"{said}; within chance, so let pass: {'; '.join(passed)}"
        return promoted, said
    fix = ("fine-tuning took away what the base model could do: train on rows of that kind too (e.g. text answers "
           "where no offered tool fits), or raise max_category_drop")
    if not promoted:  # both: one line, the accuracy's reason first (its fix follows "Nothing is deployed...")
        return False, f"{said.rstrip('.')}; and {'; '.join(drops)}: {fix}"
    return False, f"not promoted: {'; '.join(drops)}. Nothing is deployed or registered: {fix}"


def _accuracy_gate(metrics: dict[str, float], min_fc_accuracy: float, min_gain: float) -> tuple[bool, str]:
    tuned, base = metrics.get("fc_ast_accuracy"), metrics.get("base_fc_ast_accuracy")
    if tuned is None or base is None:
        if min_fc_accuracy > 0 or min_gain > 0:
            return False, ("not promoted: the eval split has no function-calling rows, so fc_ast_accuracy measures "
                           f"nothing and cannot pass min_fc_accuracy={min_fc_accuracy:g} / min_gain={min_gain:g}: set "
                           "both to 0 for chat-only data")
        return True, "promoted: no function-calling rows to gate on (min_fc_accuracy=0, min_gain=0)"
    gain = tuned - base
    failed = [f"fc_ast_accuracy {tuned:.1%} < min_fc_accuracy {min_fc_accuracy:.1%}"
              if not meets(tuned, min_fc_accuracy) else "",
              f"gain {gain * 100:+.1f} points < min_gain {min_gain * 100:.1f}" if not meets(gain, min_gain) else ""]
    failed = [f for f in failed if f]
    said = f"fc_ast_accuracy {base:.1%} -> {tuned:.1%} ({gain * 100:+.1f} points)"
    if failed:
        return False, (f"not promoted: {said}; {'; '.join(failed)}. Nothing is deployed or registered: train longer "
                       "(max_steps), or lower the gate")
    return True, f"promoted: {said}, min_fc_accuracy {min_fc_accuracy:.1%}, min_gain {min_gain * 100:.1f} points"
