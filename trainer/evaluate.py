"""Evaluation of the base and the tuned model on the held-out split.

Each eval row is scored on its last assistant turn (the conversation before it is the
prompt), by what that turn is:
- a tool call: function-calling accuracy, exact match. The model's first tool call must
  have the expected function name and JSON-equal arguments (key order and whitespace do
  not matter). Only these rows count (`fc_rows`).
- text: text match, the model's answer equal to the expected text after normalisation
  (case, punctuation, whitespace); a tool call where text was expected is wrong. Only
  these rows count (`text_rows`), and their eval loss is reported on its own.
So a model that never calls a tool scores 0% function-calling accuracy, whatever the mix.
Rows longer than max_seq_len (prompt and expected answer) are skipped before anything is
generated, as training skips them, and counted (`skipped_long_rows`): the row counts and
accuracies are over the rows scored.
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any, Callable

from trainer import data, fc_check
from trainer.chat.messages import openai_messages
from trainer.chat.parsers import Parsed, parse, parse_tool_call, tool_call_parser
from trainer.chat.turns import expected_call, expected_text, last_user_request, target_index
from trainer.errors import UserError

# Below this many rows one row moves accuracy by more than 2 points: say so.
MIN_RELIABLE_ROWS = 50
ENGINES = ("auto", "vllm", "hf")
# eval_engine=auto serves through vLLM from this many parameters up: below it HF generate on the
# demo's 0.9M-parameter model takes seconds, less than a vLLM server's start (~35 s on 2 cores).
VLLM_FROM_PARAMS = 20_000_000
CONCURRENCY = 8  # requests in flight to the server: vLLM batches them


def is_correct(predicted: dict[str, Any] | None, expected: dict[str, Any] | None) -> bool:
    """Exact tool-call match; only meaningful for rows that expect a call."""
    return expected is not None and predicted is not None and predicted["name"] == expected["name"] \
        and predicted["arguments"] == expected["arguments"]


def normalize_text(text: str) -> str:
    """Lowercase, punctuation dropped, whitespace collapsed (SQuAD-style, without article removal)."""
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    return " ".join(text.split())


def text_matches(output: str, expected: str, special_tokens: tuple[str, ...] = ()) -> bool:
    """A text answer is right when it is no tool call and equals the expected text, normalised
    (the tokenizer's special tokens, e.g. an end-of-turn marker, removed first)."""
    if parse_tool_call(output) is not None:
        return False
    for t in special_tokens:
        output = output.replace(t, "")
    return normalize_text(output) == normalize_text(expected)


def row_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    fc = sum(expected_call(r) is not None for r in rows)
    return {"fc_rows": fc, "text_rows": len(rows) - fc}


def score_outputs(rows: list[dict[str, Any]], outputs: list[str],
                  special_tokens: tuple[str, ...] = ()) -> dict[str, float]:
    """Accuracy per kind of row from the model's outputs (one per row, same order); a kind
    with no rows scores 0 (its count, from `row_counts`, says so)."""
    fc = [(o, r) for o, r in zip(outputs, rows) if expected_call(r) is not None]
    text = [(o, r) for o, r in zip(outputs, rows) if expected_call(r) is None]
    return {
        "fc_accuracy": sum(is_correct(parse_tool_call(o), expected_call(r)) for o, r in fc) / max(len(fc), 1),
        "text_match": sum(text_matches(o, expected_text(r), special_tokens) for o, r in text) / max(len(text), 1),
    }


LOGITS_BUDGET = 1 << 30  # bytes of float32 logits per eval batch


def eval_loss(model, examples: list[dict[str, list[int]]], pad_id: int, batch_size: int = 32,
              desc: str = "") -> float:
    """Mean loss per assistant token over all examples (token-weighted, not batch-weighted); with `desc`, a
    progress bar of the rows done (stderr)."""
    import torch
    from tqdm import tqdm

    if not examples:
        return 0.0
    device = next(model.parameters()).device
    total, count = 0.0, 0
    # Full float32 logits are rows x length x vocab: with a 128k vocabulary 32 rows of 512 tokens
    # would take 8 GB next to training's memory, so rows per batch follow LOGITS_BUDGET.
    vocab = model.get_output_embeddings().weight.shape[0]
    longest = max(len(e["input_ids"]) for e in examples)
    batch_size = max(1, min(batch_size, LOGITS_BUDGET // (4 * longest * vocab)))
    with torch.no_grad(), tqdm(total=len(examples), desc=desc, unit="row", disable=not desc, mininterval=2) as bar:
        for i in range(0, len(examples), batch_size):
            batch = {k: v.to(device) for k, v in data.collate(examples[i:i + batch_size], pad_id).items()}
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           use_cache=False).logits.float()
            labels = batch["labels"][:, 1:]
            losses = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100,
                reduction="sum")
            total += losses.item()
            count += int((labels != -100).sum())
            bar.update(len(batch["input_ids"]))
    return total / max(count, 1)


def served_nll(url: str, model: str, example: dict[str, list[int]], timeout: float = 600.0) -> tuple[float, int]:
    """The summed loss of one example's scored tokens (labels other than -100) and their count,
    from the served model's log-probabilities of the example's own tokens: what `eval_loss`
    computes with transformers, by the weights and the kernels that serve. The prompt is every
    token but the last, read back with vLLM's prompt_logprobs; the last token's log-probability
    is asked for at the one generated position (logprob_token_ids), so that an example as long
    as the server's context still fits (vLLM wants room for one generated token)."""
    ids, labels = example["input_ids"], example["labels"]
    if len(ids) < 2 or all(t == -100 for t in labels[1:]):
        return 0.0, 0  # nothing scored: no request
    from trainer.serving.client import completion

    body = {"model": model, "prompt": ids[:-1], "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
    last = labels[-1] != -100
    if last:
        body.update(logprobs=0, logprob_token_ids=[labels[-1]], return_tokens_as_token_ids=True)
    choice = completion(url, body, timeout=timeout)["choices"][0]
    if not choice.get("prompt_logprobs") or (last and not (choice.get("logprobs") or {}).get("top_logprobs")):
        raise UserError(f"the vLLM server at {url} returned no prompt log-probabilities for {model!r}: the eval loss "
                        "reads them (prompt_logprobs, logprob_token_ids: vLLM 0.32, the release of VLLM_IMAGE); "
                        "use that vLLM, or eval_engine=hf")
    # prompt_logprobs[i]: {str(token id): {"logprob": ...}} for the prompt's token i (None for the
    # first, which nothing predicts); with prompt_logprobs=0 the token itself is the one key.
    prompt = choice["prompt_logprobs"]
    scored = [(pos, t) for pos, t in enumerate(labels[:-1]) if pos and t != -100]
    total = -sum(prompt[pos][str(t)]["logprob"] for pos, t in scored)
    if last:
        total -= choice["logprobs"]["top_logprobs"][0][f"token_id:{labels[-1]}"]
    return total, len(scored) + last


def _each(request: Callable[[Any], Any], items: list[Any], desc: str, concurrency: int = CONCURRENCY) -> list[Any]:
    """`request(item)` for every item, `concurrency` in flight to the server (vLLM batches them),
    with a progress bar; the results in the items' order."""
    from concurrent.futures import ThreadPoolExecutor

    from trainer.progress import bar

    out = []
    with bar(len(items), desc, unit="row") as progress, ThreadPoolExecutor(concurrency) as pool:
        for result in pool.map(request, items):
            out.append(result)
            progress.update(1)
    return out


def served_losses(url: str, model: str, examples: list[dict[str, list[int]]], desc: str,
                  concurrency: int = CONCURRENCY) -> list[tuple[float, int]]:
    """`served_nll` of every example, `concurrency` requests at a time, with a progress bar."""
    return _each(lambda e: served_nll(url, model, e), examples, desc, concurrency)


def mean_loss(parts: list[tuple[float, int]]) -> float:
    """Mean loss per scored token over (summed loss, tokens) parts: token-weighted, as `eval_loss`."""
    return sum(t for t, _ in parts) / max(sum(n for _, n in parts), 1)


def _answer_budget(tokenizer, rows: list[dict[str, Any]]) -> int:
    """New tokens to generate for a batch: the longest expected answer plus slack, so that a
    long text answer is not cut short (and marked wrong) by a fixed limit."""
    lengths = [len(tokenizer(json.dumps(expected_call(r)) if expected_call(r) else expected_text(r),
                             add_special_tokens=False)["input_ids"]) for r in rows]
    return min(max(96, max(lengths) + 32), 1024)


def context_length(config) -> int | None:
    """Positions the model was built for (`max_position_embeddings`; GPT-2's `n_positions` maps
    to it), or None when its config does not say."""
    value = getattr(config, "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def fitting_rows(rows: list[dict[str, Any]], tokenizer, max_seq_len: int,
                 context: int | None = None) -> tuple[list[int], list[dict[str, list[int]]]]:
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
    return kept, [encoded[i] for i in kept]


def _too_long(max_seq_len: int, context: int | None) -> str:
    if context and context < max_seq_len:
        return f"the model's context ({context} tokens; max_seq_len={max_seq_len} is above it)"
    return f"max_seq_len={max_seq_len} tokens (prompt and expected answer)"


def _fix(max_seq_len: int, context: int | None) -> str:
    if context and context <= max_seq_len:
        return "use a model with a longer context"  # raising max_seq_len cannot help
    return f"raise max_seq_len (at most the model's context, {context})" if context else "raise max_seq_len"


def long_rows_problem(n_rows: int, max_seq_len: int, context: int | None) -> str:
    """Why nothing can be scored, and the fix, when every eval row is too long."""
    return (f"all {n_rows} eval rows are longer than {_too_long(max_seq_len, context)}, so none can be scored: "
            f"{_fix(max_seq_len, context)}, or add shorter rows to the eval split")


def generate(model, tokenizer, rows: list[dict[str, Any]], batch_size: int = 32, desc: str = "generate") -> list[str]:
    """Greedy completions for each row's prompt (the conversation before its scored turn).

    Each row may generate its expected answer's length plus slack (`_answer_budget`), clamped
    to what the model's context leaves after its prompt; rows that must be skipped for length
    are skipped by the caller (`fitting_rows`), so every prompt here leaves room for its answer.
    Rows run in order of prompt length, so a batch pads its prompts to similar lengths, and a
    batch takes a row only while its longest prompt plus its largest budget fits the context:
    every row of a batch is run for the batch's new tokens, whatever its own budget.
    """
    import torch

    from trainer.progress import bar

    device = next(model.parameters()).device
    context = context_length(model.config)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts = [tokenizer(tokenizer.apply_chat_template(r["messages"][:target_index(r)], tools=r.get("tools") or None,
                                                       add_generation_prompt=True, tokenize=False),
                         add_special_tokens=False)["input_ids"] for r in rows]
    budgets = [_answer_budget(tokenizer, [r]) for r in rows]
    if context:
        budgets = [min(b, context - len(p)) for b, p in zip(budgets, prompts)]
    too_long = [i for i, b in enumerate(budgets) if b < 1]
    if too_long:
        raise ValueError(f"rows {too_long} leave no room to generate in the model's context ({context} tokens); "
                         "select rows with fitting_rows first")
    batches, batch = [], []
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
                ids[k, width - len(prompts[i]):] = torch.tensor(prompts[i])
                mask[k, width - len(prompts[i]):] = 1
            with torch.no_grad():
                out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                     max_new_tokens=max(budgets[i] for i in batch), do_sample=False,
                                     pad_token_id=pad_id)
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


def parsed_outputs(outputs: list[str], parser: str) -> list[dict[str, Any]]:
    """Generated texts read as the server reads them: `parser` is the vLLM tool-call parser the
    model is served with (trainer.chat.parsers.parse, the project's reading of it); a parser it does
    not know falls back to parse_tool_call. Each: {"calls": [...], "content": str | None, "raw"}."""
    out = []
    for text in outputs:
        parsed = parse(parser, text)
        if parsed is None:
            call = parse_tool_call(text)
            parsed = Parsed([call] if call else [], None if call else text)
        out.append({"calls": parsed.calls, "content": parsed.content, "raw": text})
    return out


def score_predictions(rows: list[dict[str, Any]], predictions: list[dict[str, Any]],
                      special_tokens: tuple[str, ...] = ()) -> dict[str, float]:
    """Every accuracy for one model from its predictions ({"calls", "content"} per row, as an app
    reads message.tool_calls / message.content): fc_accuracy (exact calls, over rows that expect a
    call), text_match (no call and the text equal, normalised, over rows that expect text), and the
    BFCL-style AST check by category (trainer.fc_check: fc_ast_accuracy, fc_exact_accuracy,
    fc_<category>_accuracy). A kind with no rows scores 0 here; logged_metrics leaves it out."""
    fc, text = [], []
    for row, p in zip(rows, predictions):
        if expected_call(row) is not None:
            fc.append(fc_check.exact(row, p["calls"], p["content"]))
        else:
            content = p["content"] or ""
            for t in special_tokens:
                content = content.replace(t, "")
            text.append(not p["calls"] and normalize_text(content) == normalize_text(expected_text(row)))
    summary = fc_check.summarize([fc_check.score(r, p["calls"], p["content"]) for r, p in zip(rows, predictions)])
    ast = {k: v for k, v in fc_check.metrics(summary).items() if not k.endswith("_rows")}
    return {"fc_accuracy": sum(fc) / max(len(fc), 1), "text_match": sum(text) / max(len(text), 1), **ast}


def failures(rows: list[dict[str, Any]], outputs: dict[str, list[dict[str, Any]]], per_category: int = 3
             ) -> dict[str, list[dict[str, Any]]]:
    """A few rows per function-calling category that the tuned model got wrong by the AST check,
    with why (trainer.fc_check) and both models' raw output: what the report shows under its table."""
    out: dict[str, list[dict[str, Any]]] = {}
    for i, row in enumerate(rows):
        tuned = outputs["tuned"][i]
        verdict = fc_check.score(row, tuned["calls"], tuned["content"])
        if verdict["category"] == fc_check.CHAT or verdict["ok"]:
            continue
        shown = out.setdefault(verdict["category"], [])
        if len(shown) < per_category:
            shown.append({"prompt": last_user_request(row), "expected": expected_call(row) or expected_text(row),
                          "why": verdict["reason"], "base": outputs["base"][i]["raw"], "tuned": tuned["raw"]})
    return out


def category_rows(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Rows per function-calling category (trainer.fc_check), the same for base and tuned."""
    summary = fc_check.summarize([{"category": fc_check.category(r), "ok": False, "exact": False} for r in rows])
    return {f"fc_{cat}_rows": c["rows"] for cat, c in summary["categories"].items()}


def score(model, tokenizer, rows: list[dict[str, Any]], examples: list[dict[str, list[int]]],
          desc: str = "evaluate", predictions: list[dict[str, Any]] | None = None,
          losses: list[tuple[float, int]] | None = None) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """All metrics for one model on `rows` and their encodings `examples` (the rows that fit:
    `fitting_rows`), and its predictions ({"calls", "content", "raw"} per row). `predictions` and
    `losses` (per example, `served_nll`) from the served model (eval_engine=vllm; `model` is then
    not used); None generates here (HF generate, the texts read with the serving parser) and
    computes the losses with transformers."""

    text = [expected_call(r) is None for r in rows]
    if predictions is None:
        parser = tool_call_parser(tokenizer.chat_template, list(tokenizer.get_added_vocab()))
        predictions = parsed_outputs(generate(model, tokenizer, rows, desc=desc), parser)
    if losses is None:
        losses_of = {"eval_loss": eval_loss(model, examples, tokenizer.pad_token_id),
                     "text_eval_loss": eval_loss(model, [e for e, t in zip(examples, text) if t],
                                                 tokenizer.pad_token_id)}
    else:
        losses_of = {"eval_loss": mean_loss(losses), "text_eval_loss": mean_loss([p for p, t in zip(losses, text) if t])}
    return {**losses_of, **score_predictions(rows, predictions, tuple(tokenizer.all_special_tokens))}, predictions


def vllm_cpu_build() -> bool:
    """The installed vLLM is its CPU build (vllm-cpu: run_local's)."""
    import importlib.metadata

    try:
        importlib.metadata.distribution("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def vllm_runs_here() -> bool:
    """vLLM is installed and can start here: its CPU build, or the CUDA build (the evaluate
    image, docker/Dockerfile.eval) with a GPU."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    if vllm_cpu_build():
        return True
    import torch

    return torch.cuda.is_available()


def choose_engine(engine: str, model_dir: Path) -> str:
    """`auto` -> vllm where vLLM can run (`vllm_runs_here`) and the model is not tiny, else hf."""
    if engine != "auto":
        return engine
    if not vllm_runs_here():
        return "hf"
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    hidden, layers = getattr(config, "hidden_size", 0) or 0, getattr(config, "num_hidden_layers", 0) or 0
    vocab = getattr(config, "vocab_size", 0) or 0
    approx = 12 * layers * hidden * hidden + vocab * hidden  # decoder blocks + embedding
    return "vllm" if approx >= VLLM_FROM_PARAMS else "hf"


def _served_lora(tuned_dir: Path) -> bool:
    """vLLM loads this output as a LoRA adapter beside its base (not a full model, no trained
    embeddings: vLLM refuses modules_to_save; not DoRA, which vLLM refuses; not QLoRA, whose base
    is the de-quantized one, not the base vLLM would load)."""
    from trainer.model import BASE_QUANTIZATION

    config = Path(tuned_dir) / "adapter_config.json"
    if not config.is_file() or (Path(tuned_dir) / BASE_QUANTIZATION).is_file():
        return False
    settings = json.loads(config.read_text())
    return not settings.get("modules_to_save") and not settings.get("use_dora")


def server_plans(model_dir: Path, tuned_dir: Path) -> list[tuple[Path, dict[str, str], tuple[str, ...]]]:
    """The vLLM servers that answer for base and tuned, one after the other: (model directory,
    {served name: adapter directory}, the names it answers for). One server with the adapter
    beside the base where vLLM can load it; else, and on vLLM's CPU build, the base alone, then
    the tuned model merged. The CPU build's LoRA path reads prompt log-probabilities (the eval
    loss) one request at a time -- a batch of them kills its engine (bgmv_shrink sizes by
    requests, not tokens; vLLM 0.32) -- and at ~4 s a 520-token row against ~1 s for the base
    (SmolLM2-135M, 2 cores): a second server start and a merge cost less."""
    if _served_lora(tuned_dir) and not vllm_cpu_build():
        return [(model_dir, {"tuned": str(tuned_dir)}, ("base", "tuned"))]
    return [(model_dir, {}, ("base",)), (tuned_dir, {}, ("tuned",))]


def _reply(resp: dict[str, Any]) -> dict[str, Any]:
    message = (resp.get("choices") or [{}])[0].get("message") or {}
    calls = []
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except json.JSONDecodeError:
            pass  # kept as text: no expected call equals it
        calls.append({"name": fn.get("name"), "arguments": args})
    content = message.get("content")
    raw = "".join(f"<tool_call>{json.dumps(c, ensure_ascii=False)}</tool_call>" for c in calls) or (content or "")
    return {"calls": calls, "content": content, "raw": raw}


def ask(url: str, model: str, rows: list[dict[str, Any]], budgets: list[int], desc: str) -> list[dict[str, Any]]:
    """Each row's prompt (the conversation before its scored turn) with its tools through the
    OpenAI API, CONCURRENCY at a time; the reply as an app reads it."""
    from trainer.serving.client import chat

    def one(i: int) -> dict[str, Any]:
        row = rows[i]
        return _reply(chat(url, model, openai_messages(row["messages"][:target_index(row)]), row.get("tools") or None,
                           max_tokens=budgets[i], timeout=600))

    return _each(one, list(range(len(rows))), desc)


def served_predictions(model_dir: Path, tuned_dir: Path | None, rows: list[dict[str, Any]],
                       examples: list[dict[str, list[int]]], tokenizer, max_seq_len: int,
                       context: int | None = None, names: tuple[str, ...] = ("base", "tuned")
                       ) -> dict[str, dict[str, list]]:
    """The answers of `names` (base, tuned) through vLLM's OpenAI server, started as deploy starts
    it (the same argument builder, the delivered chat template, the tool-call parser read off it),
    on the servers of `server_plans`; a server that would answer for none of `names` is not
    started (tuned_dir None: the base alone). Every server is stopped before this returns.

    Returns {"base"/"tuned": {"predictions": per row, "losses": `served_nll` per example}}: the
    losses of `examples` (the rows' encodings) from the same server, so no model is loaded here."""
    import tempfile

    from trainer.serving import client, local

    budgets = [_answer_budget(tokenizer, [r]) for r in rows]
    # the KV cache for the longest prompt plus its answer (a row fits max_seq_len), within the context
    max_model_len = min(max_seq_len + max(budgets), context) if context else max_seq_len + max(budgets)
    prompts = [len(tokenizer.apply_chat_template(r["messages"][:target_index(r)], tools=r.get("tools") or None,
                                                 add_generation_prompt=True, tokenize=True, return_dict=True)
                   ["input_ids"]) for r in rows]
    budgets = [max(1, min(b, max_model_len - p)) for b, p in zip(budgets, prompts)]  # vLLM refuses more
    answers: dict[str, dict[str, list]] = {}
    with tempfile.TemporaryDirectory(prefix="eval-merged-") as tmp:
        plans = server_plans(model_dir, tuned_dir) if tuned_dir is not None else [(model_dir, {}, ("base",))]
        for served_dir, loras, serves in plans:
            if not set(serves) & set(names):
                continue
            if serves == ("tuned",) and (Path(served_dir) / "adapter_config.json").is_file():
                from trainer.merge import merge

                served_dir = merge(model_dir, tuned_dir, Path(tmp) / "merged")
            server = local.start(served_dir, serves[0], lora_modules=loras, max_model_len=max_model_len,
                                 log_path=Path(tmp) / f"vllm-{serves[0]}.log")
            try:
                client.wait_ready(server.url, server, timeout=900)
                for name in (n for n in serves if n in names):
                    answers[name] = {"predictions": ask(server.url, name, rows, budgets, desc=f"evaluate {name} (vLLM)"),
                                     # Beside an adapter on the CPU build, one at a time: its
                                     # LoRA logits path (punica_cpu) sizes a batch by requests,
                                     # not tokens (server_plans); the GPU's maps tokens.
                                     "losses": served_losses(server.url, name, examples,
                                                             desc=f"eval loss {name} (vLLM)",
                                                             concurrency=1 if loras and vllm_cpu_build()
                                                             else CONCURRENCY)}
            finally:
                server.stop()
    return answers


def load(model_dir: Path, adapter_dir: Path | None = None):
    """Base model, or base + adapter (an output without adapter_config.json is a full model)."""
    import torch

    from trainer.model import load_base

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if adapter_dir is not None and not (Path(adapter_dir) / "adapter_config.json").exists():
        model_dir, adapter_dir = adapter_dir, None
    model = load_base(model_dir, adapter_dir, device)
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter_dir)
    return model.eval()


def warnings_for(rows: list[dict[str, Any]], skipped: int = 0, max_seq_len: int = 512,
                 context: int | None = None, split_rows: int = 0) -> list[str]:
    """What makes these numbers weak, in words for the log and the report (`rows`: those scored; `split_rows`: the
    eval split's, when max_rows took fewer)."""
    out = []
    if skipped:
        out.append(f"{skipped} of {len(rows) + skipped} eval rows are longer than {_too_long(max_seq_len, context)} "
                   f"and were not scored (no loss, no accuracy): {_fix(max_seq_len, context)}, or shorten them")
    if len(rows) < MIN_RELIABLE_ROWS and split_rows > len(rows) + skipped:  # eval_max_rows took these few
        out.append(f"only {len(rows)} eval rows scored (< {MIN_RELIABLE_ROWS}; the split has {split_rows}): one row "
                   f"moves accuracy by {1 / max(len(rows), 1):.0%}; raise eval_max_rows")
    elif len(rows) < MIN_RELIABLE_ROWS:
        out.append(f"the eval split has only {len(rows)} rows (< {MIN_RELIABLE_ROWS}): one row moves accuracy by "
                   f"{1 / max(len(rows), 1):.0%}; raise eval_fraction or add eval rows")
    return out


def logged_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The numbers the evaluate step logs from `evaluate()`'s result, under names that are the
    same in every run (KFP's Compare view lines runs up by name): base_* and tuned_* of each
    metric, fc_accuracy_gain, and the row counts. A kind of row the split lacks scores 0 in
    `score_outputs`; logged, that 0 would read as a measurement next to other runs, so such
    metrics are left out (blank in Compare) and the count of 0 rows says why."""
    unmeasured = set()
    if not result["fc_rows"]:
        unmeasured |= {"fc_accuracy"}
    if not result["text_rows"]:
        unmeasured |= {"text_match", "text_eval_loss"}
    out = {f"{name}_{k}": float(v) for name in ("base", "tuned") for k, v in result[name].items()
           if k not in unmeasured}
    # The BFCL-style accuracies of the tuned model also under their plain names (fc_ast_accuracy,
    # fc_<category>_accuracy: what KFP Compare lines up), with each category's row count; an
    # accuracy a split cannot measure is absent (fc_check), never 0.
    out.update({k: float(v) for k, v in result["tuned"].items() if k.startswith(("fc_ast", "fc_exact", "fc_simple",
                "fc_multiple", "fc_parallel", "fc_irrelevance", "fc_multi_turn"))})
    out.update({k: float(v) for k, v in result.get("categories", {}).items()})
    if result["fc_rows"]:
        out["fc_accuracy_gain"] = result["tuned"]["fc_accuracy"] - result["base"]["fc_accuracy"]
    if "fc_ast_accuracy" in result["tuned"] and "fc_ast_accuracy" in result["base"]:
        out["fc_ast_accuracy_gain"] = result["tuned"]["fc_ast_accuracy"] - result["base"]["fc_ast_accuracy"]
    out.update({k: float(result[src]) for k, src in (("eval_rows", "rows"), ("fc_rows", "fc_rows"),
                                                     ("text_rows", "text_rows"),
                                                     ("skipped_long_rows", "skipped_long_rows"))})
    return out


def _prepared(model_dir: Path, eval_path: Path, max_rows: int, max_seq_len: int, engine: str) -> dict[str, Any]:
    """What scoring any model on the eval split starts from: the rows scored (the first `max_rows`
    that fit `max_seq_len`), their encodings, the warnings (printed), the engine chosen."""
    from transformers import AutoConfig, AutoTokenizer

    split = data.read_jsonl(eval_path)
    rows = split[:max_rows]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    context = context_length(AutoConfig.from_pretrained(model_dir))
    kept, examples = fitting_rows(rows, tokenizer, max_seq_len, context)
    if not kept:
        raise UserError(long_rows_problem(len(rows), max_seq_len, context))
    scored = [rows[i] for i in kept]
    warnings = warnings_for(scored, len(rows) - len(scored), max_seq_len, context, len(split))
    for w in warnings:
        print(f"WARNING: {w}", flush=True)
    engine = choose_engine(engine, model_dir)
    print(f"evaluating {len(scored)} rows with {'the vLLM server' if engine == 'vllm' else 'HF generate'} "
          f"(eval_engine={engine})", flush=True)
    return {"rows": rows, "scored": scored, "examples": examples, "tokenizer": tokenizer, "context": context,
            "warnings": warnings, "engine": engine}


def _scored_key(prep: dict[str, Any], max_seq_len: int) -> dict[str, Any]:
    """What base scores are valid for: the same rows scored (their content), the same length limit
    and engine. The base's answers are greedy, so on these they are the same in every trial."""
    import hashlib

    digest = hashlib.sha256(json.dumps(prep["scored"], sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return {"rows_sha256": digest, "rows": len(prep["scored"]), "max_seq_len": max_seq_len, "engine": prep["engine"]}


def _score_models(model_dir: Path, tuned_dir: Path | None, prep: dict[str, Any], max_seq_len: int,
                  names: tuple[str, ...]) -> tuple[dict[str, dict[str, float]], dict[str, list[dict[str, Any]]]]:
    """Metrics and per-row predictions of `names` (base: `model_dir`; tuned: `tuned_dir` on it)."""
    scored, examples, tokenizer = prep["scored"], prep["examples"], prep["tokenizer"]
    served = served_predictions(model_dir, tuned_dir, scored, examples, tokenizer, max_seq_len, prep["context"],
                                names=names) if prep["engine"] == "vllm" else {}
    results, outputs = {}, {}
    for name in names:
        # Served: answers and losses came from the server, no weights load here.
        model = None if name in served else load(model_dir, tuned_dir if name == "tuned" else None)
        results[name], outputs[name] = score(model, tokenizer, scored, examples, desc=f"evaluate {name}",
                                             predictions=served.get(name, {}).get("predictions"),
                                             losses=served.get(name, {}).get("losses"))
        del model
    return results, outputs


def score_base(model_dir: Path, eval_path: Path, max_rows: int = 200, max_seq_len: int = 512,
               engine: str = "auto") -> dict[str, Any]:
    """The base model's scores on the rows `evaluate` scores with the same arguments, for its
    `base`: a sweep scores its base once for all its trials instead of once in each. Returns
    {"key": what they are valid for (`_scored_key`), "metrics", "predictions" (per row)}: JSON."""
    prep = _prepared(model_dir, eval_path, max_rows, max_seq_len, engine)
    results, outputs = _score_models(model_dir, None, prep, max_seq_len, ("base",))
    return {"key": _scored_key(prep, max_seq_len), "metrics": results["base"], "predictions": outputs["base"]}


def evaluate(model_dir: Path, tuned_dir: Path, eval_path: Path, max_rows: int = 200,
             max_seq_len: int = 512, n_examples: int = 5, engine: str = "auto",
             base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Metrics for base and tuned, plus a few side-by-side examples for the report.

    Returns {"base": metrics, "tuned": metrics, "rows", "fc_rows", "text_rows",
    "skipped_long_rows", "warnings", "examples", "categories", "failures" (a few wrong rows per
    category, `failures`)}: the counts are of the rows scored (the
    accuracies' denominators), rows too long for max_seq_len are counted apart and score
    nothing; metric names are the same in every run (a kind with no rows scores 0).
    Progress (rows generated) goes to stderr. `engine` (ENGINES): vllm answers through the served
    model and reads the eval loss off the same server's prompt log-probabilities
    (`served_predictions`; no model is loaded here), hf generates here, reads the texts with the
    serving parser and computes the loss with transformers; auto picks by `choose_engine`.
    `base`: `score_base`'s result for the same arguments, used instead of scoring the base again;
    made for other rows, another max_seq_len or engine, it is set aside, said, and the base scored here.

    Raises:
        UserError: every row is too long, found before any model loads.
    """
    prep = _prepared(model_dir, eval_path, max_rows, max_seq_len, engine)
    scored = prep["scored"]
    key = _scored_key(prep, max_seq_len)
    if base is not None and base.get("key") != key:
        given = base.get("key") or {}
        differ = [f"{k} {given.get(k)} instead of {v}" for k, v in key.items()
                  if given.get(k) != v and k != "rows_sha256"]
        print(f"WARNING: the base scores given are not of these rows and settings "
              f"({', '.join(differ) or 'other rows'}): scoring the base model here", flush=True)
        base = None
    results, outputs = _score_models(model_dir, tuned_dir, prep, max_seq_len,
                                     ("tuned",) if base is not None else ("base", "tuned"))
    if base is not None:
        results["base"], outputs["base"] = base["metrics"], base["predictions"]
    examples = [{"prompt": last_user_request(r), "expected": expected_call(r) or expected_text(r),
                 "base": outputs["base"][i]["raw"], "tuned": outputs["tuned"][i]["raw"]}
                for i, r in enumerate(scored[:n_examples])]
    return {"base": results["base"], "tuned": results["tuned"], "rows": len(scored), **row_counts(scored),
            "categories": category_rows(scored), "failures": failures(scored, outputs), "engine": prep["engine"],
            "skipped_long_rows": len(prep["rows"]) - len(scored), "warnings": prep["warnings"], "examples": examples}


def promotion(metrics: dict[str, float], min_fc_accuracy: float = 0.0, min_gain: float = 0.0) -> tuple[bool, str]:
    """The promotion gate on the evaluate step's logged metrics: the tuned model's BFCL-style
    accuracy (fc_ast_accuracy, every function-calling category) at least `min_fc_accuracy`, and
    at least `min_gain` above the base's (fractions: 0.05 is 5 points). Returns (promoted, the
    line that says why); an accuracy the split cannot measure passes only a gate that asks nothing."""
    tuned, base = metrics.get("fc_ast_accuracy"), metrics.get("base_fc_ast_accuracy")
    if tuned is None or base is None:
        if min_fc_accuracy > 0 or min_gain > 0:
            return False, ("not promoted: the eval split has no function-calling rows, so fc_ast_accuracy measures "
                           f"nothing and cannot pass min_fc_accuracy={min_fc_accuracy:g} / min_gain={min_gain:g}: set "
                           "both to 0 for chat-only data")
        return True, "promoted: no function-calling rows to gate on (min_fc_accuracy=0, min_gain=0)"
    from trainer.sweep import meets

    gain = tuned - base
    failed = [f"fc_ast_accuracy {tuned:.1%} < min_fc_accuracy {min_fc_accuracy:.1%}"
              if not meets(tuned, min_fc_accuracy) else "",
              f"gain {gain * 100:+.1f} points < min_gain {min_gain * 100:.1f}" if not meets(gain, min_gain) else ""]
    failed = [f for f in failed if f]
    said = f"fc_ast_accuracy {base:.1%} -> {tuned:.1%} ({gain * 100:+.1f} points)"
    if failed:
        return False, (f"not promoted: {said}; {'; '.join(failed)}. Nothing is deployed or registered: train longer "
                       "(max_steps), or lower the gate")
    return True, f"promoted: {said}, min_fc_accuracy {min_fc_accuracy:.1%}, min_gain {min_gain * 100:.1f} points"
