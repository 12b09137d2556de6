"""python -m pipelines.compile [--out-dir compiled]

Compile the pipelines (finetune, sweep) to the YAML that is committed and uploaded to KFP. A test compiles
again and fails when the committed file is stale: run this after changing a pipeline or
component.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kfp import compiler

from pipelines.finetune import finetune_pipeline
from pipelines.sweep import sweep_pipeline

ROOT = Path(__file__).resolve().parent.parent
PIPELINES = {"finetune": finetune_pipeline, "sweep": sweep_pipeline}


def compile_all(out_dir: Path = ROOT / "compiled") -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, fn in PIPELINES.items():
        path = out_dir / f"{name}.yaml"
        compiler.Compiler().compile(fn, str(path))
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "compiled")
    for path in compile_all(parser.parse_args().out_dir):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
