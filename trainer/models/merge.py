"""Merge a LoRA adapter into its base model: a plain model directory any HF loader (or
vLLM) can serve without peft; at a scale s of the adapter's update (WiSE-FT's interpolation between base and tuned
weights: W + s * (alpha / r) * B @ A), which the evaluate step chooses by the promotion gate (`merge_scales`)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

ADAPTER_WEIGHTS = "adapter_model.safetensors"
# The factors of a LoRA update that scaling one scales the whole update: B of every layer (and of an embedding's)
SCALED_FACTORS = (".lora_B.", ".lora_embedding_B")


def scale_problem(adapter_dir: Path) -> str | None:
    """Why the update of the tuned output in `adapter_dir` cannot be scaled (None when it can): only a LoRA
    update is linear in its scale. A full fine-tune, DoRA (its magnitudes are no linear factor) and trained
    embeddings (modules_to_save: whole matrices, not an update) cannot."""
    config = Path(adapter_dir) / "adapter_config.json"
    if not config.is_file():
        return "a full fine-tune's model has no adapter whose update could be scaled: use method=lora"
    settings = json.loads(config.read_text())
    if settings.get("use_dora"):
        return "a DoRA adapter's update is not linear in a scale (its magnitudes are trained apart): use method=lora"
    if settings.get("modules_to_save"):
        return (
            "the adapter trains whole matrices beside its LoRA update (modules_to_save, lora_train_embeddings=true), "
            "which no scale applies to: set lora_train_embeddings=false"
        )
    if not (Path(adapter_dir) / ADAPTER_WEIGHTS).is_file():
        return f"the adapter has no {ADAPTER_WEIGHTS} to scale"
    return None


def scaled_adapter(adapter_dir: Path, scale: float, out_dir: Path) -> Path:
    """A copy of the LoRA adapter in `adapter_dir` whose update is `scale` times its own (every B factor scaled:
    the update is alpha / r * B @ A), in `out_dir`; scale 1 returns `adapter_dir` itself. Every engine reads it
    as any adapter (HF peft, vLLM beside its base, `merge`).

    Raises:
        ValueError: `scale_problem` says why the adapter cannot be scaled.
    """
    if scale == 1:
        return Path(adapter_dir)
    if problem := scale_problem(adapter_dir):
        raise ValueError(problem)
    from safetensors.torch import load_file, save_file

    out_dir = Path(out_dir)
    shutil.copytree(adapter_dir, out_dir, dirs_exist_ok=True, ignore=shutil.ignore_patterns("_manifest.json"))
    tensors = load_file(Path(adapter_dir) / ADAPTER_WEIGHTS)
    factors = {k for k in tensors if any(f in k for f in SCALED_FACTORS)}
    if not factors:
        raise ValueError(f"{adapter_dir} holds no LoRA B factor ({', '.join(SCALED_FACTORS)}) to scale")
    scaled = {k: (v * scale).to(v.dtype) if k in factors else v for k, v in tensors.items()}
    save_file(scaled, out_dir / ADAPTER_WEIGHTS, metadata={"format": "pt", "llm_finetune_scale": repr(scale)})
    return out_dir


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


def merge(model_dir: Path, adapter_dir: Path, out_dir: Path, scale: float = 1.0) -> Path:
    """Write base+adapter merged into `out_dir`, the adapter's update at `scale` (`scaled_adapter`). A full
    fine-tune's output is already a complete model and is copied as is (at scale 1 only). Each stage says how long
    it took (loading and writing a multi-GB model takes minutes); the merge itself shows a per-layer bar."""
    import tempfile

    from transformers import AutoTokenizer

    from trainer.models.model import load_base

    out_dir = Path(out_dir)
    if scale != 1:
        with tempfile.TemporaryDirectory(prefix="scaled-adapter-") as tmp:
            scaled = scaled_adapter(adapter_dir, scale, Path(tmp) / "adapter")
            print(f"merge: the adapter's update at scale {scale:g}", flush=True)
            return merge(model_dir, scaled, out_dir)
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
