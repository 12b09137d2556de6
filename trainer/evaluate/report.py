"""Human-facing renderings of results (Markdown for the KFP UI, tables for terminals)."""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping
from typing import Any

from trainer.data.bfcl import ANCHORS
from trainer.data.bfcl import CATEGORIES as BFCL_CATEGORIES
from trainer.chat.fc_check import CATEGORIES
from trainer.config.params import TRIAL_KEYS
from trainer.core import metrics as names
from trainer.evaluate.base import BfclResult, Evaluation


def _cell(text: Any) -> str:
    text = text if isinstance(text, str) else json.dumps(text)
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def _pct(value: float, rows: int) -> str:
    return f"{value:.1%}" if rows else "n/a"


def source_rows(
    base: Mapping[str, float], tuned: Mapping[str, float], counts: Mapping[str, float], sources: list[str]
) -> list[tuple[str, int, str, str, str, str]]:
    """A mixed dataset's scores by source (trainer.data.mix): (source, rows scored, AST accuracy base, tuned,
    text kept base, tuned), from `mix<k>_rows` and the `mix<k>_*` metrics; `sources` are the mix's sources in
    order (its record), a source without one shown by its index. A score the source's rows cannot measure
    (no tool-call rows, no rows wanting text) reads n/a."""

    def pct(scores: Mapping[str, float], key: str) -> str:
        return f"{scores[key]:.1%}" if key in scores else "n/a"

    out = []
    indices = {k: key for key in counts if (k := names.mix_rows_index(key)) is not None}
    for k in sorted(indices):
        name = f"[{k}] " + (sources[k] if k < len(sources) else f"source {k}")
        ast_base, ast_tuned, kept_base, kept_tuned = (
            pct(m, names.mix(k, metric)) for metric in (names.PRIMARY, names.TEXT_KEPT) for m in (base, tuned)
        )
        out.append((name, int(counts[indices[k]]), ast_base, ast_tuned, kept_base, kept_tuned))
    return out


def summary_lines(result: Evaluation) -> list[str]:
    """What the evaluate step prints: held-out counts and scores, and BFCL's per category, base -> tuned."""
    lines = []
    b, t = result["base"], result["tuned"]
    if "heldout" in result.get("suites", ("heldout",)):
        lines.append(
            f"held-out: {result['rows']} rows ({result['fc_rows']} tool-call, {result['text_rows']} text; "
            f"{result['skipped_long_rows']} skipped as longer than max_seq_len): "
            + (
                f"fc accuracy {b['fc_accuracy']:.1%} -> {t['fc_accuracy']:.1%}, "
                if result["fc_rows"]
                else "fc accuracy n/a (no tool-call rows), "
            )
            + f"eval loss {b['eval_loss']:.4f} -> {t['eval_loss']:.4f} (eval_engine={result['engine']})"
        )
    if "bfcl" in result:
        s = result["bfcl"]
        lines.append(f"BFCL {s['version']} ({_sampled(s)}, eval_engine={result['engine']}), base -> tuned:")
        for name, rows, base, tuned in bfcl_rows(s):
            lines.append(f"  {name:<28} {rows:>5}  {base:>6} -> {tuned}")
    return lines


def _sampled(suite: BfclResult) -> str:
    n = suite["rows_per_category"]
    return f"{n} rows per category, seed {suite['seed']}" if n else "every row"


def bfcl_rows(suite: BfclResult) -> list[tuple[str, str, str, str]]:
    """(category or aggregate, rows, base, tuned) in BFCL's order, aggregates first; rows too long to ask said."""
    b, t, counts = suite["base"], suite["tuned"], suite["counts"]
    out = []
    for agg, label in (
        ("non_live_ast", "non-live AST (mean of 4)"),
        ("live_ast", "live AST (rows pooled)"),
        ("hallucination", "irrelevance (mean of 2)"),
    ):
        if (key := names.accuracy("bfcl", agg)) in t:
            out.append((label, "", f"{b[key]:.1%}", f"{t[key]:.1%}"))
    for c in BFCL_CATEGORIES:
        if (key := names.accuracy("bfcl", c)) in t:
            long = int(counts.get(names.count("bfcl", c, "too_long"), 0))
            rows = f"{int(counts[names.count('bfcl', c, 'rows')])}" + (f" ({long} too long)" if long else "")
            out.append((c, rows, f"{b[key]:.1%}", f"{t[key]:.1%}"))
    return out


def _bfcl_markdown(suite: BfclResult) -> list[str]:
    models = list(ANCHORS)
    lines = [
        "",
        f"## BFCL {suite['version']} (Berkeley Function Calling Leaderboard): base vs tuned",
        "",
        f"Asked as BFCL asks an FC model, scored by its rules; {_sampled(suite)}. Leaderboard anchors (FC, "
        "the board of 2026-04-12 evaluated with bfcl-eval 2025.12.17, whole categories; its simple, the mean of "
        "three languages, is not shown beside simple_python) beside them.",
        "",
        "| category | rows | base | tuned | " + " | ".join(models) + " |",
        "|---|---|---|---|" + "---|" * len(models),
    ]
    keys = {"non-live AST (mean of 4)": "non_live_ast"}
    for name, rows, base, tuned in bfcl_rows(suite):
        anchors = [ANCHORS[m].get(keys.get(name, name)) for m in models]
        lines.append(
            f"| {name} | {rows} | {base} | {tuned} | "
            + " | ".join("" if a is None else f"{a:.1f}%" for a in anchors)
            + " |"
        )
    if suite.get("failures"):
        lines += [
            "",
            "### Where the tuned model failed on BFCL, by category",
            "",
            "| category | id | question | why | base output | tuned output |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {c} | {f['id']} | {_cell(f['prompt'])} | {_cell(f['why'])} | {_cell(f['base'])} | {_cell(f['tuned'])} |"
            for c, shown in suite["failures"].items()
            for f in shown
        ]
    return lines


def examples_markdown(result: Evaluation) -> str:
    """Base vs tuned metrics, warnings about them, and a few eval rows side by side; BFCL's table when scored."""
    lines = ["# Evaluation: base vs tuned", ""]
    lines += [f"> **Warning:** {w}" for w in result.get("warnings", [])]
    if "bfcl" in result:
        lines += _bfcl_markdown(result["bfcl"])
    if "heldout" not in result.get("suites", ("heldout",)):
        return "\n".join(lines) + "\n"
    b, t = result["base"], result["tuned"]
    fc_rows, text_rows = result.get("fc_rows", result["rows"]), result.get("text_rows", 0)
    lines += ["", "## Held-out rows", ""]
    lines += [
        "",
        f"Held-out rows: {result['rows']}; assistant turns asked: {result.get('turns', result['rows'])} "
        f"({fc_rows} expect a tool call, {text_rows} expect text; each turn asked after the gold turns before it)",
        "",
        "| metric | base | tuned |",
        "|---|---|---|",
        f"| eval loss | {b['eval_loss']:.4f} | {t['eval_loss']:.4f} |",
        f"| function-calling accuracy ({fc_rows} tool-call turns) | {_pct(b['fc_accuracy'], fc_rows)} | "
        f"{_pct(t['fc_accuracy'], fc_rows)} |",
    ]
    if text_rows:
        lines += [
            f"| text match ({text_rows} text turns) | {b['text_match']:.1%} | {t['text_match']:.1%} |",
            f"| eval loss, text rows | {b['text_eval_loss']:.4f} | {t['text_eval_loss']:.4f} |",
        ]
    counts = result.get("categories", {})
    rows_of, accuracy_of = (
        {c: names.count("heldout", c, "rows") for c in CATEGORIES},
        {c: names.accuracy("heldout", c) for c in CATEGORIES},
    )
    categories = {c: counts[rows_of[c]] for c in CATEGORIES if counts.get(rows_of[c]) and accuracy_of[c] in t}
    if categories:  # BFCL-style AST check by category (trainer.chat.fc_check); a category the split lacks is not shown
        lines += [
            "",
            "## Function calling by category (AST check)",
            "",
            "| category | turns | base | tuned |",
            "|---|---|---|---|",
            f"| all | {sum(categories.values())} | {b[names.PRIMARY]:.1%} | {t[names.PRIMARY]:.1%} |",
        ]
        lines += [f"| {c} | {n} | {b[accuracy_of[c]]:.1%} | {t[accuracy_of[c]]:.1%} |" for c, n in categories.items()]
    if by_source := source_rows(b, t, result.get("sources", {}), [m["source"] for m in result.get("mix", [])]):
        lines += [
            "",
            "## By source of the mix",
            "",
            "AST accuracy over each source's tool-call and irrelevance rows; "
            "text kept: its rows that want text answered without a call.",
            "",
            "| source | rows | AST base | AST tuned | text kept base | text kept tuned |",
            "|---|---|---|---|---|---|",
        ]
        lines += [f"| {_cell(name)} | {n} | " + " | ".join(scores) + " |" for name, n, *scores in by_source]
    if result.get("failures"):
        lines += [
            "",
            "## Where the tuned model failed, by category",
            "",
            "| category | last user request | expected | why | base output | tuned output |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {c} | {_cell(f['prompt'])} | {_cell(f['expected'])} | {_cell(f['why'])} | {_cell(f['base'])} | "
            f"{_cell(f['tuned'])} |"
            for c, shown in result["failures"].items()
            for f in shown
        ]
    lines += [
        "",
        "## Examples",
        "",
        "| last user request | turn | expected | base output | tuned output |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {_cell(e['prompt'])} | {_cell(e.get('turn', ''))} | {_cell(e['expected'])} | {_cell(e['base'])} | "
        f"{_cell(e['tuned'])} |"
        for e in result["examples"]
    ]
    return "\n".join(lines) + "\n"


def markdown_html(text: str, title: str) -> str:
    """A Markdown report as a self-contained HTML page (tables rendered), for a browser."""
    import markdown

    body = markdown.markdown(text, extensions=["tables"])
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 10px;vertical-align:top}} blockquote{{color:#8a5300}}</style></head>
<body>{body}</body></html>"""


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """A plain fixed-width text table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(
        [fmt.format(*header), fmt.format(*["-" * w for w in widths]), *(fmt.format(*map(str, r)) for r in rows)]
    )


def loss_curve_png(history: list[dict[str, float]]) -> bytes:
    """Train (and eval, where measured) loss against step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    train = [(h["step"], h["loss"]) for h in history if "loss" in h]
    evals = [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h]
    if train:
        ax.plot(*zip(*train), label="train loss", color="#1f77b4")
    if evals:
        ax.plot(*zip(*evals), "o-", label="eval loss", color="#d62728")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (assistant tokens)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def training_html(result: dict[str, Any], title: str = "Fine-tuning run") -> str:
    """A self-contained HTML page: loss curve (embedded PNG) and the run's numbers."""
    png = base64.b64encode(loss_curve_png(result["history"])).decode()
    cfg = result.get("config", {})
    keys = ("method", "lora_r", "lora_alpha", "learning_rate", "max_steps", "batch_size", "batch_tokens", "seed")
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v:.4g}</td></tr>"
        if isinstance(v, float)
        else f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
        for k, v in [*result["metrics"].items(), *((k, cfg[k]) for k in keys if k in cfg)]
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse}}
td{{border:1px solid #ccc;padding:3px 10px}} td:first-child{{color:#555}}</style></head><body>
<h2>{html.escape(title)}</h2>
<img alt="loss curve" src="data:image/png;base64,{png}">
<h3>Summary</h3><table>{rows}</table></body></html>"""


def sweep_markdown(picked: dict[str, Any], select_metric: str) -> str:
    """The sweep's trials side by side, the winner marked, and the deploy decision."""
    # one column order whatever order the trials' keys came in (KFP's JSON round trip sorts them)
    keys = sorted(
        (k for k in picked["rows"][0] if k not in ("trial", "base", "tuned", "gain")),
        key=lambda k: (list(TRIAL_KEYS).index(k) if k in TRIAL_KEYS else len(TRIAL_KEYS), k),
    )
    head = ["trial", *keys, f"base {select_metric}", f"tuned {select_metric}", "gain"]
    lines = ["# Sweep results", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    measured = picked.get("measured", True)  # else no trial is best: the metric measured nothing
    shown = lambda v: "not measured" if v is None else f"{v:.4g}"  # noqa: E731 - never a made-up 0
    for r in picked["rows"]:
        mark = " (best)" if measured and r["trial"] == picked["best"] else ""
        lines.append(
            "| "
            + " | ".join(
                [
                    f"{r['trial']}{mark}",
                    *(str(r[k]) for k in keys),
                    shown(r["base"]),
                    shown(r["tuned"]),
                    shown(r["gain"]),
                ]
            )
            + " |"
        )
    return "\n".join([*lines, "", f"**{picked['reason']}**", ""])
