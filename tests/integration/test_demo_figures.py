"""`make demo`'s own run (every default, its own throwaway S3) against the figures the README and docs/performance.md
show for it: the base-vs-tuned table as printed, and the README's "from X% to Y%" of AST accuracy.

  make test-demo     # ~3-4 min alone on 2 cores; CI runs it after make test (.ci/run)

A figure that drifts (a change to the data, the scoring or the defaults) fails here until the docs say what the demo
prints today; the fix is to paste this test's printed table into both.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AST = re.compile(r"function-calling AST accuracy \((\d+) turns\)\s+([\d.]+)%\s+([\d.]+)%")


def printed_table(out: str) -> list[str]:
    """The metric rows of run_local's `== base vs tuned ==` table, trailing blanks dropped."""
    block = out.split("== base vs tuned ==\n", 1)[1].split("\n\n", 1)[0]
    return [line.rstrip() for line in block.splitlines()]


def test_printed_table_reads_the_rows_and_stops_at_the_blank_line():
    out = "noise\n== base vs tuned ==\nmetric  base  tuned \n------\neval loss  1.0  0.5 \n\ntraining: 800 steps\n"
    assert printed_table(out) == ["metric  base  tuned", "------", "eval loss  1.0  0.5"]
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
        r"lifts function-calling AST accuracy from ([\d.]+)% to ([\d.]+)% over (\d+) assistant turns", readme
    )
    assert said, "the README's demo paragraph no longer gives its AST figure in the form this test reads"
    assert said.groups() == (base, tuned, turns), f"README: {said.group(0)!r}; the demo printed {base}% -> {tuned}%"

    quoted = (ROOT / "docs" / "performance.md").read_text()
    block = quoted.split("```\n== base vs tuned ==\n", 1)[1].split("\n\n", 1)[0]
    assert [line.rstrip() for line in block.splitlines()] == table, "docs/performance.md quotes another demo table"
