"""Merge a LoRA adapter into its base model: a plain model directory any HF loader (or
vLLM) can serve without peft."""

from __future__ import annotations

import shutil
import time
from pathlib import Path


def input_problems(model_dir: Path | None, adapter_dir: Path, model_name: str, adapter_name: str) -> list[str]:
    """What `merge` cannot use, named as the user gave them: the two swapped (an adapter as the base model
    "merged" into a copy of the base, and exited 0), a tree that is neither (a dataset: a traceback). `model_dir`
    None checks the adapter alone."""
    adapter_dir = Path(adapter_dir)
    problems = []
    if not ((adapter_dir / "adapter_config.json").exists() or (adapter_dir / "config.json").exists()):
        problems.append(
            f"{adapter_name} is neither an adapter (adapter_config.json) nor a full fine-tune's model "
            "(config.json): give what train wrote (its result's output_uri)"
        )
    if model_dir is not None and (Path(model_dir) / "adapter_config.json").exists():
        swapped = (adapter_dir / "config.json").exists() and not (adapter_dir / "adapter_config.json").exists()
        problems.append(
            f"{model_name} is an adapter (adapter_config.json), not a base model: "
            + ("the two look swapped: " if swapped else "")
            + "give the base model as --model-uri and the adapter as --adapter-uri"
        )
    elif model_dir is not None and not (Path(model_dir) / "config.json").exists():
        problems.append(f"{model_name} is not a model (no config.json): give the base model deliver-model wrote")
    return problems


def merge(model_dir: Path, adapter_dir: Path, out_dir: Path) -> Path:
    """Write base+adapter merged into `out_dir`. A full fine-tune's output is already a
    complete model and is copied as is. Each stage says how long it took (loading and
    writing a multi-GB model takes minutes); the merge itself shows a per-layer bar."""
    from transformers import AutoTokenizer

    from trainer.models.model import load_base

    out_dir = Path(out_dir)
    if not (Path(adapter_dir) / "adapter_config.json").exists():
        shutil.copytree(adapter_dir, out_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("_manifest.json"))
        print("full fine-tune: nothing to merge, model copied", flush=True)
        return out_dir
    from peft import PeftModel

    start = time.perf_counter()
    base = load_base(model_dir, adapter_dir)  # a QLoRA adapter's base: the de-quantized 4-bit one
    model = PeftModel.from_pretrained(base, adapter_dir)
    print(f"merge: base + adapter loaded in {time.perf_counter() - start:.1f}s", flush=True)
    merged = model.merge_and_unload(progressbar=True)
    start = time.perf_counter()
    merged.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(adapter_dir).save_pretrained(out_dir)
    if (Path(model_dir) / "generation_config.json").exists():
        shutil.copy(Path(model_dir) / "generation_config.json", out_dir / "generation_config.json")
    print(f"merge: merged model written in {time.perf_counter() - start:.1f}s", flush=True)
    return out_dir
