"""python -m pipelines.compile [--out-dir compiled]

Compile the pipelines (finetune, sweep) to the YAML that is committed and uploaded to KFP. A test compiles
again and fails when the committed file is stale: run this after changing a pipeline or
component.

The output is byte-identical across runs and PYTHONHASHSEED values: the KFP compiler writes
the YAML body with sorted keys, but its header comment prints dict defaults (the sweep's
`trials`) in protobuf map order, which varies from one process to the next. compile_pipeline
rewrites those header lines from the sorted body. submit names pipeline versions by the
file's hash, so this also keeps an unchanged pipeline on the same version.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from kfp import compiler

from pipelines.dag.finetune import finetune_pipeline
from pipelines.dag.sweep import sweep_pipeline

ROOT = Path(__file__).resolve().parent.parent
PIPELINES = {"finetune": finetune_pipeline, "sweep": sweep_pipeline}
_DEFAULT_LINE = re.compile(r"^(#    (\w+): \w+) \[Default: .*\]$")


def compile_pipeline(pipeline, path: Path) -> Path:
    """Compile `pipeline` to `path` with a deterministic header comment."""
    import yaml

    compiler.Compiler().compile(pipeline, str(path))
    text = path.read_text()
    cut = next((i for i, line in enumerate(text.splitlines(keepends=True)) if not line.startswith("#")), 0)
    lines = text.splitlines(keepends=True)
    header, body = lines[:cut], "".join(lines[cut:])
    params = next(yaml.safe_load_all(body))["root"].get("inputDefinitions", {}).get("parameters", {})
    for i, line in enumerate(header):
        m = _DEFAULT_LINE.match(line.rstrip("\n"))
        if m and "defaultValue" in params.get(m.group(2), {}):
            value = params[m.group(2)]["defaultValue"]  # safe_load keeps the body's sorted key order
            shown = f"'{value}'" if isinstance(value, str) else str(value)  # as KFP writes it
            header[i] = f"{m.group(1)} [Default: {shown}]\n"
    path.write_text("".join(header) + body)
    return path


def compile_all(out_dir: Path = ROOT / "compiled") -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return [compile_pipeline(fn, out_dir / f"{name}.yaml") for name, fn in PIPELINES.items()]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.compile", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=ROOT / "compiled",
        help="where the YAML files go (default: compiled/, which a test compares)",
    )
    out_dir = parser.parse_args().out_dir
    from trainer.core.errors import UserError, exit_on_user_error

    with exit_on_user_error():
        try:
            for path in compile_all(out_dir):
                print(f"wrote {path}")
        except OSError as err:  # a directory that cannot be created or written: the user's to fix
            raise UserError(
                f"cannot write to --out-dir {out_dir}: {err.strerror or err}; pass a writable directory"
            ) from None


if __name__ == "__main__":
    main()
