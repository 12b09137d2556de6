"""`make demo`'s own run (every default, its own throwaway S3) against the figures the README and docs/performance.md
show for it: the base-vs-tuned table as printed, and the README's "from X% to Y%" of AST accuracy.

  make test-demo     # ~3-4 min alone on 2 cores; CI runs it after make test (.ci/run)

A figure that drifts (a change to the data, the scoring or the defaults) fails here until the docs say what the demo
prints today; the fix is to paste this test's printed table into both. The rows' names and turn counts must match
exactly; the figures within TURNS_OFF turns of each row's count (and the loss within LOSS_OFF of itself): training on
another CPU sums floats in another order, which can flip a turn or two and moves the loss in its last digits.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AST = re.compile(r"function-calling AST accuracy \((\d+) turns\)\s+([\d.]+)%\s+([\d.]+)%")
TURNS_OFF, LOSS_OFF = 2, 0.02


def figures(table: list[str]) -> list[tuple[str, float, float]]:
    """(row name, base, tuned) of each metric row under the table's two header lines."""
    out = []
    for line in table[2:]:
        name, base, tuned = re.fullmatch(r"(.+?)\s{2,}(\S+)\s+(\S+)", line.rstrip()).groups()
        out.append((name.rstrip(), float(base.rstrip("%")), float(tuned.rstrip("%"))))
    return out


def close(shown: float, printed: float, turns: int | None) -> bool:
    """Within TURNS_OFF turns of `turns` (a percentage, rounded to 0.1), or LOSS_OFF of a loss (turns None)."""
    if turns is None:
        return abs(shown - printed) <= LOSS_OFF * abs(printed)
    return abs(shown - printed) <= 100 * TURNS_OFF / turns + 0.05


def turns_of(name: str) -> int | None:
    found = re.search(r"\((\d+) turns\)", name)
    return int(found.group(1)) if found else None


def printed_table(out: str) -> list[str]:
    """The metric rows of run_local's `== base vs tuned ==` table, trailing blanks dropped."""
    block = out.split("== base vs tuned ==\n", 1)[1].split("\n\n", 1)[0]
    return [line.rstrip() for line in block.splitlines()]


def test_printed_table_reads_the_rows_and_stops_at_the_blank_line():
    out = "noise\n== base vs tuned ==\nmetric  base  tuned \n------\neval loss  1.0  0.5 \n\ntraining: 800 steps\n"
    assert printed_table(out) == ["metric  base  tuned", "------", "eval loss  1.0  0.5"]
    rows = ["m  b  t", "--", "eval loss   7.8429  0.0746", "  multiple (175 turns)   0.0%    98.3%"]
    assert figures(rows) == [("eval loss", 7.8429, 0.0746), ("  multiple (175 turns)", 0.0, 98.3)]
    assert close(92.8, 93.7, 208) and not close(92.8, 93.9, 208)  # 2 turns of 208: 0.96 points
    assert close(37.5, 12.5, 8) and not close(37.5, 0.0, 8)
    assert close(0.0746, 0.0760, None) and not close(0.0746, 0.0770, None)
    assert turns_of("  multiple (175 turns)") == 175 and turns_of("eval loss") is None
    assert AST.search("function-calling AST accuracy (208 turns)  3.8%    92.8% ").groups() == ("208", "3.8", "92.8")


@pytest.mark.demo
def test_make_demo_prints_the_figures_the_readme_shows(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.run_local",  # what `make demo` runs, with every default
            "--runs-dir",
            str(tmp_path / "runs"),
            "--output-dir",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    table = printed_table(proc.stdout)
    print("\n".join(["== base vs tuned ==", *table]))  # what to paste where a figure drifted
    turns, base, tuned = AST.search(proc.stdout).groups()

    readme = (ROOT / "README.md").read_text()
    said = re.search(
        r"lifts\s+function-calling\s+AST\s+accuracy\s+from\s+([\d.]+)%\s+to\s+([\d.]+)%\s+over\s+(\d+)\s+assistant\s+turns",
        readme,
    )
    assert said, "the README's demo paragraph no longer gives its AST figure in the form this test reads"
    wrong = f"README: {said.group(0)!r}; the demo printed {base}% -> {tuned}% over {turns} turns"
    assert said.group(3) == turns and close(float(said.group(1)), float(base), int(turns)), wrong
    assert close(float(said.group(2)), float(tuned), int(turns)), wrong

    quoted = (ROOT / "docs" / "performance.md").read_text()
    block = quoted.split("```\n== base vs tuned ==\n", 1)[1].split("\n\n", 1)[0]
    shown, printed = figures(block.splitlines()), figures(table)
    assert [s[0] for s in shown] == [p[0] for p in printed], "docs/performance.md quotes other rows (or turn counts)"
    for (name, *was), (_, *now) in zip(shown, printed):
        assert all(close(w, n, turns_of(name)) for w, n in zip(was, now)), (
            f"docs/performance.md: {name} {was}; now {now}"
        )
