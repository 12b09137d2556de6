"""`builtin:tiny-llama`: a small random-init Llama with a tokenizer trained on our data.

It is saved as an ordinary Hugging Face model directory (config, safetensors weights,
tokenizer with a chat template), so every later stage treats it exactly like a model
from the Hub. It exists so that the whole pipeline runs offline in about a minute.

Delivery takes it from the local cache (`cached`: FINETUNE_CACHE_DIR/builtin/), built there once:
building imports transformers and trains the tokenizer, ~3 s of every run's deliver-model step.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from trainer.chat.types import Row
from trainer.data import builtin_data
from trainer.core import settings

MAX_POSITIONS = 512
HIDDEN_SIZE = 128
SPECIAL_TOKENS = [
    "<|pad|>",
    "<|bos|>",
    "<|end|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<tool_call>",
    "</tool_call>",
]

# Tools are listed compactly (name and argument names) to keep prompts short for a tiny
# model; the assistant answers with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
# `{% generation %}` marks assistant tokens, so `apply_chat_template(...,
# return_assistant_tokens_mask=True)` gives the loss mask without any custom code.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if tools %}<|system|>Tools:"
    "{%- for t in tools %} {{ t.function.name }}({{ t.function.parameters.properties | list | join(', ') }})"
    "{%- endfor %}<|end|>{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}<|assistant|>{% generation %}"
    "{%- if m.tool_calls %}{%- for tc in m.tool_calls %}<tool_call>"
    "{{ {'name': tc.function.name, 'arguments': tc.function.arguments} | tojson }}</tool_call>"
    "{%- endfor %}{%- else %}{{ m.content }}{%- endif %}<|end|>{% endgeneration %}"
    "{%- else %}<|{{ m.role }}|>{{ m.content }}<|end|>{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{%- endif %}"
)


def _corpus(rows: list[Row]) -> list[str]:
    texts = []
    for row in rows:
        for m in row["messages"]:
            texts.append(m.get("content") or "")
            for tc in m.get("tool_calls") or []:
                texts.append(json.dumps({"name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}))
    texts.append(
        " ".join(
            t["function"]["name"] + "(" + ", ".join(t["function"]["parameters"]["properties"]) + ")"
            for t in builtin_data.TOOLS
        )
    )
    return texts


def build_tokenizer(vocab_size: int = 1024):
    """Train a byte-level BPE tokenizer on the built-in dataset and wrap it for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(
        _corpus(builtin_data.generate(n_train=2000, n_eval=0, seed=1234, categories=True)["train"]), trainer=trainer
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|end|>",
        pad_token="<|pad|>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITIONS,
    )


def build(
    out_dir: str | Path, *, hidden_size: int = HIDDEN_SIZE, layers: int = 4, heads: int = 4, seed: int = 0
) -> Path:
    """Write the tiny model and its tokenizer to `out_dir` (created if missing)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    # Output layer scale: after the final RMSNorm the hidden state has norm ~sqrt(hidden);
    # with the usual std 0.02 the logits stay within about +-0.2, so a frozen head could
    # never put confident mass on a token and LoRA could not lower the loss. std 0.1 gives
    # logit ranges like a pretrained model's. The input embedding keeps std 0.02 (see
    # lora_train_embeddings in trainer/config/training.py for why it is trained in the demo).
    with torch.no_grad():
        model.get_output_embeddings().weight.normal_(0.0, 0.1)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
        max_new_tokens=64,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# What a built directory is made of: the builder's code (this file and the rows its tokenizer is trained
# on) and the libraries that write the files. A change to any of them builds again.
_KEYED_BY = ("torch", "transformers", "tokenizers", "safetensors")
_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)


def cache_key() -> str:
    from importlib.metadata import version

    h = hashlib.sha256()
    for path in (Path(__file__), Path(builtin_data.__file__)):
        h.update(path.read_bytes())
    for name in _KEYED_BY:
        h.update(f"{name}=={version(name)};".encode())
    return h.hexdigest()[:16]


def cached(fallback_dir: str | Path, cache_dir: str | Path | None = None) -> Path:
    """The built model in `cache_dir` (default FINETUNE_CACHE_DIR)/builtin/tiny-llama-<cache_key>, built
    there on first use; the same files `build` writes (it is deterministic), so the delivered tree and its
    hash do not depend on the cache. Built beside its final name and renamed into place, so a process that
    reads it never sees half a model, and two that build at once keep one. Where the cache cannot be
    written it is built into `fallback_dir`. Treat the directory as read-only."""
    final = Path(cache_dir or settings.get("FINETUNE_CACHE_DIR")) / "builtin" / f"tiny-llama-{cache_key()}"

    def complete() -> bool:
        return all((final / name).is_file() for name in _FILES)

    if complete():
        return final
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".tiny-llama-", dir=final.parent))
    except OSError:
        return build(fallback_dir)
    try:
        build(work)
        if complete():  # another process renamed its build into place meanwhile: the same files, kept
            return final
        if final.exists():  # damaged (a file of it removed): replaced by this build
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(work, final)
        except OSError:  # another process's build went into place between the two lines above
            if not complete():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final
