"""HF generate on loaded weights, an evaluation engine (`HfEngine`): which eval rows fit, how many new tokens each may
take, the greedy answers, and the model (base, or base + adapter) loaded for it."""

from __future__ import annotations

import json
from pathlib import Path

from trainer import data
from trainer.chat.parsers import tool_call_parser
from trainer.chat.types import Prediction, Row
from trainer.chat.turns import expected_call, expected_text, target_index
from trainer.core.progress import bar
from trainer.evaluate import losses
from trainer.evaluate.base import Answers, Asked, Engine
from trainer.evaluate.scoring import parsed_outputs


def answer_budget(tokenizer, rows: list[Row]) -> int:
    """New tokens to generate for a batch: the longest expected answer plus slack, so that a
    long text answer is not cut short (and marked wrong) by a fixed limit."""
    lengths = [
        len(
            tokenizer(json.dumps(expected_call(r)) if expected_call(r) else expected_text(r), add_special_tokens=False)[
                "input_ids"
            ]
        )
        for r in rows
    ]
    return min(max(96, max(lengths) + 32), 1024)


def prompt_ids(tokenizer, messages: list, tools: list | None) -> list[int]:
    """A prompt's tokens as the chat template renders it for generation, with its tools: what HF generate is given
    and what a server's prompt is measured by."""
    return tokenizer.apply_chat_template(
        messages, tools=tools or None, add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]


def prompt_lengths(tokenizer, rows: list[Row]) -> list[int]:
    """Each row's prompt in tokens: the conversation before its scored turn, with its tools (`prompt_ids`)."""
    return [len(prompt_ids(tokenizer, r["messages"][: target_index(r)], r.get("tools"))) for r in rows]


def context_length(config) -> int | None:
    """Positions the model was built for (`max_position_embeddings`; GPT-2's `n_positions` maps
    to it), or None when its config does not say."""
    value = getattr(config, "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def fitting_rows(
    rows: list[Row], tokenizer, max_seq_len: int, context: int | None = None
) -> tuple[list[int], list[dict[str, list[int]]]]:
    """Indices of the rows short enough to score, and their encodings (for the eval loss).

    A row is scored when its whole conversation, prompt and expected answer, fits in
    max_seq_len tokens (and in the model's context): the rule training skips rows by, so the
    eval loss, both accuracies and training's `skipped_long_rows` all mean the same rows.
    Generating a longer row would pad every row of its batch to its length (minutes for one
    10k-token row on CPU), and past the context it crashes models with learned positions
    (GPT-2: IndexError) and runs rotary ones where they were never trained.
    """
    limit = min(max_seq_len, context) if context else max_seq_len
    encoded = data.encode_rows(rows, tokenizer, limit, what="the eval rows")  # refusals: one UserError
    kept = [i for i, e in enumerate(encoded) if e is not None]
    return kept, [e for e in encoded if e is not None]


def length_limit(max_seq_len: int, context: int | None) -> str:
    if context and context < max_seq_len:
        return f"the model's context ({context} tokens; max_seq_len={max_seq_len} is above it)"
    return f"max_seq_len={max_seq_len} tokens (prompt and expected answer)"


def fix_for_length(max_seq_len: int, context: int | None) -> str:
    if context and context <= max_seq_len:
        return "use a model with a longer context"  # raising max_seq_len cannot help
    return f"raise max_seq_len (at most the model's context, {context})" if context else "raise max_seq_len"


def long_rows_problem(n_rows: int, max_seq_len: int, context: int | None) -> str:
    """Why nothing can be scored, and the fix, when every eval row is too long."""
    return (
        f"all {n_rows} eval rows are longer than {length_limit(max_seq_len, context)}, so none can be scored: "
        f"{fix_for_length(max_seq_len, context)}, or add shorter rows to the eval split"
    )


def generate(
    model, tokenizer, rows: list[Row], batch_size: int = 32, desc: str = "generate", budgets: list[int] | None = None
) -> list[str]:
    """Greedy completions for each row's prompt (the conversation before its scored turn).

    Each row may generate its expected answer's length plus slack (`answer_budget`; or `budgets`), clamped
    to what the model's context leaves after its prompt; rows that must be skipped for length
    are skipped by the caller (`fitting_rows`), so every prompt here leaves room for its answer.
    Rows run in order of prompt length, so a batch pads its prompts to similar lengths, and a
    batch takes a row only while its longest prompt plus its largest budget fits the context:
    every row of a batch is run for the batch's new tokens, whatever its own budget.
    """
    import torch

    device = next(model.parameters()).device
    context = context_length(model.config)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts = [prompt_ids(tokenizer, r["messages"][: target_index(r)], r.get("tools")) for r in rows]
    budgets = list(budgets) if budgets is not None else [answer_budget(tokenizer, [r]) for r in rows]
    if context:
        budgets = [min(b, context - len(p)) for b, p in zip(budgets, prompts)]
    too_long = [i for i, b in enumerate(budgets) if b < 1]
    if too_long:
        raise ValueError(
            f"rows {too_long} leave no room to generate in the model's context ({context} tokens); "
            "select rows with fitting_rows first"
        )
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in sorted(range(len(rows)), key=lambda i: len(prompts[i])):
        fits = not context or len(prompts[i]) + max(budgets[j] for j in [*batch, i]) <= context
        if batch and (len(batch) == batch_size or not fits):
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    outputs: list[str] = [""] * len(rows)
    with bar(len(rows), desc, unit="row") as progress:
        for batch in batches:
            # Left padding: a decoder-only model continues each prompt from its last token.
            width = max(len(prompts[i]) for i in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for k, i in enumerate(batch):
                ids[k, width - len(prompts[i]) :] = torch.tensor(prompts[i])
                mask[k, width - len(prompts[i]) :] = 1
            with torch.no_grad():
                out = model.generate(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    max_new_tokens=max(budgets[i] for i in batch),
                    do_sample=False,
                    pad_token_id=pad_id,
                )
            # Keep special tokens: some templates mark tool calls with them (<tool_call>).
            for i, text in zip(batch, tokenizer.batch_decode(out[:, width:], skip_special_tokens=False)):
                outputs[i] = text
            progress.update(len(batch))
    # Nothing after the end of the answer counts; padding is not part of it.
    cleaned = []
    for o in outputs:
        if tokenizer.eos_token:
            o = o.split(tokenizer.eos_token)[0]
        cleaned.append((o.replace(tokenizer.pad_token, "") if tokenizer.pad_token else o).strip())
    return cleaned


def load(model_dir: Path, adapter_dir: Path | None = None):
    """Base model, or base + adapter (an output without adapter_config.json is a full model)."""
    import torch

    from trainer.models.model import load_base  # imports torch: here, so that importing the evaluation stays light

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if adapter_dir is not None and not (Path(adapter_dir) / "adapter_config.json").exists():
        model_dir, adapter_dir = adapter_dir, None
    model = load_base(model_dir, adapter_dir, device)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir)
    return model.eval()


class HfEngine(Engine):
    """HF generate on weights loaded here, one model at a time (the base, then base + adapter), each suite's rows
    greedy with its budgets, the texts read with the serving parser (the one vLLM would use for this chat template),
    and the eval losses with transformers."""

    name = "hf"
    description = "HF generate"

    def answer(
        self, model_dir: Path, tuned_dir: Path | None, models: tuple[str, ...], asked: dict[str, Asked]
    ) -> dict[str, dict[str, Answers]]:
        out = {}
        for name in models:
            model = load(model_dir, tuned_dir if name == "tuned" else None)
            out[name] = {suite: self._answers(model, a, name) for suite, a in asked.items() if a.rows}
            del model
        return out

    def _answers(self, model, asked: Asked, name: str) -> Answers:
        tokenizer = self.tokenizer
        keep = asked.asked()
        parser = tool_call_parser(tokenizer.chat_template, list(tokenizer.get_added_vocab()))
        texts = generate(
            model,
            tokenizer,
            [asked.rows[i] for i in keep],
            desc=f"{asked.label} {name}",
            budgets=[asked.budgets[i] for i in keep],
        )
        predictions: list[Prediction | None] = [None] * len(asked.rows)
        for i, p in zip(keep, parsed_outputs(texts, parser)):
            predictions[i] = p
        return Answers(predictions, losses.example_losses(model, asked.examples, tokenizer.pad_token_id))
