"""Human-facing renderings of results (Markdown for the KFP UI, tables for terminals)."""

from __future__ import annotations

import json
from typing import Any


def _cell(text: Any) -> str:
    text = text if isinstance(text, str) else json.dumps(text)
    return text.replace("|", "\\|").replace("\n", " ")[:200]


def examples_markdown(result: dict[str, Any]) -> str:
    """Base vs tuned metrics and a few eval rows side by side."""
    b, t = result["base"], result["tuned"]
    lines = [
        "# Evaluation: base vs tuned", "",
        f"Held-out rows: {result['rows']}", "",
        "| metric | base | tuned |", "|---|---|---|",
        f"| eval loss | {b['eval_loss']:.4f} | {t['eval_loss']:.4f} |",
        f"| function-calling accuracy | {b['fc_accuracy']:.1%} | {t['fc_accuracy']:.1%} |", "",
        "## Examples", "",
        "| prompt | expected tool call | base output | tuned output |", "|---|---|---|---|",
    ]
    lines += [f"| {_cell(e['prompt'])} | {_cell(e['expected'])} | {_cell(e['base'])} | {_cell(e['tuned'])} |"
              for e in result["examples"]]
    return "\n".join(lines) + "\n"


def table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    """A plain fixed-width text table."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*header), fmt.format(*["-" * w for w in widths]),
                      *(fmt.format(*map(str, r)) for r in rows)])
