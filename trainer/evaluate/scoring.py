"""A model's answers against the rows: exact calls and text (fc_accuracy, text_match), and the
BFCL-style AST check by category (trainer.chat.fc_check), from generated text or an app's reply."""

from __future__ import annotations

from typing import Any

from trainer.chat import fc_check
from trainer.chat.fc_check import normalize_text
from trainer.data import mix
from trainer.chat.parsers import Parsed, parse, parse_tool_call
from trainer.chat.turns import expected_call, expected_text, last_user_request
from trainer.chat.types import Prediction, Row, Verdict
from trainer.core import metrics as names


def row_counts(rows: list[Row]) -> dict[str, int]:
    fc = sum(expected_call(r) is not None for r in rows)
    return {"fc_rows": fc, "text_rows": len(rows) - fc}


def parsed_outputs(outputs: list[str], parser: str) -> list[Prediction]:
    """Generated texts read as the server reads them: `parser` is the vLLM tool-call parser the
    model is served with (trainer.chat.parsers.parse, the project's reading of it); a parser it does
    not know falls back to parse_tool_call. Each: {"calls": [...], "content": str | None, "raw"}."""
    out = []
    for text in outputs:
        parsed = parse(parser, text)
        if parsed is None:
            call = parse_tool_call(text)
            parsed = Parsed([call] if call else [], None if call else text)
        out.append(Prediction(calls=parsed.calls, content=parsed.content, raw=text))
    return out


def score_predictions(
    rows: list[Row], predictions: list[Prediction], special_tokens: tuple[str, ...] = ()
) -> dict[str, float]:
    """Every accuracy for one model from its predictions ({"calls", "content"} per row, as an app
    reads message.tool_calls / message.content): fc_accuracy (exact calls, over rows that expect a
    call), text_match (no call and the text equal, normalised, over rows that expect text), and the
    BFCL-style AST check by category (trainer.chat.fc_check: fc_ast_accuracy, fc_exact_accuracy,
    fc_<category>_accuracy). A kind with no rows scores 0 here; logged_metrics leaves it out."""
    fc, text = [], []
    for row, p in zip(rows, predictions):
        if expected_call(row) is not None:
            fc.append(fc_check.exact(row, p["calls"], p["content"]))
        else:
            content = p["content"] or ""
            for t in special_tokens:
                content = content.replace(t, "")
            text.append(not p["calls"] and normalize_text(content) == normalize_text(expected_text(row)))
    scores = [fc_check.score(r, p["calls"], p["content"]) for r, p in zip(rows, predictions)]
    ast = {k: v for k, v in fc_check.metrics(fc_check.summarize(scores)).items() if not k.endswith("_rows")}
    return {
        "fc_accuracy": sum(fc) / max(len(fc), 1),
        "text_match": sum(text) / max(len(text), 1),
        **ast,
        **_per_source(rows, scores),
    }


def _per_source(rows: list[Row], scores: list[Verdict]) -> dict[str, float]:
    """A mixed dataset's rows by source (trainer.data.mix): `mix<k>_fc_ast_accuracy` over its function-calling rows
    and `mix<k>_text_kept`, its rows answered in text where text is wanted (BFCL's irrelevance: no call made)."""
    out = {}
    for k in mix.sources_of(rows):
        mine = [s for r, s in zip(rows, scores) if r.get(mix.TAG) == k]
        summary = fc_check.summarize(mine)
        if summary["fc_ast_accuracy"] is not None:
            out[names.mix(k, names.PRIMARY)] = summary["fc_ast_accuracy"]
        if (kept := summary["categories"]["irrelevance"]["accuracy"]) is not None:
            out[names.mix(k, names.TEXT_KEPT)] = kept
    return out


def source_rows(rows: list[Row]) -> dict[str, int]:
    """Rows scored per source of a mixed dataset (`mix<k>_rows`, trainer.data.mix); {} for one source."""
    return {names.mix(k, names.ROWS): sum(1 for r in rows if r.get(mix.TAG) == k) for k in mix.sources_of(rows)}


def failures(
    rows: list[Row], outputs: dict[str, list[Prediction]], per_category: int = 3
) -> dict[str, list[dict[str, Any]]]:
    """A few rows per function-calling category that the tuned model got wrong by the AST check,
    with why (trainer.chat.fc_check) and both models' raw output: what the report shows under its table."""
    out: dict[str, list[dict[str, Any]]] = {}
    for i, row in enumerate(rows):
        tuned = outputs["tuned"][i]
        verdict = fc_check.score(row, tuned["calls"], tuned["content"])
        if verdict["category"] == fc_check.CHAT or verdict["ok"]:
            continue
        shown = out.setdefault(verdict["category"], [])
        if len(shown) < per_category:
            shown.append(
                {
                    "prompt": last_user_request(row),
                    "expected": expected_call(row) or expected_text(row),
                    "why": verdict["reason"],
                    "base": outputs["base"][i]["raw"],
                    "tuned": tuned["raw"],
                }
            )
    return out


def category_rows(rows: list[Row]) -> dict[str, int]:
    """Rows per function-calling category (trainer.chat.fc_check), the same for base and tuned."""
    summary = fc_check.summarize(
        [Verdict(category=fc_check.category(r), ok=False, exact=False, reason="") for r in rows]
    )
    return {names.count("heldout", cat, "rows"): c["rows"] for cat, c in summary["categories"].items()}
