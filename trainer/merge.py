"""Merge a LoRA adapter into its base model: a plain model directory any HF loader (or
vLLM) can serve without peft."""

from __future__ import annotations

import shutil
from pathlib import Path


def merge(model_dir: Path, adapter_dir: Path, out_dir: Path) -> Path:
    """Write base+adapter merged into `out_dir`. A full fine-tune's output is already a
    complete model and is copied as is."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out_dir = Path(out_dir)
    if not (Path(adapter_dir) / "adapter_config.json").exists():
        shutil.copytree(adapter_dir, out_dir, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("_manifest.json"))
        return out_dir
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto")
    merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
    merged.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(adapter_dir).save_pretrained(out_dir)
    if (Path(model_dir) / "generation_config.json").exists():
        shutil.copy(Path(model_dir) / "generation_config.json", out_dir / "generation_config.json")
    return out_dir
