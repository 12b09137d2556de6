"""Eval losses: with transformers on loaded weights (`eval_loss`), or read off a running vLLM
server's prompt log-probabilities (`served_losses`), token-weighted either way."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from trainer import data
from trainer.core.errors import UserError
from trainer.core.progress import bar
from trainer.evaluate.base import CONCURRENCY
from trainer.serving import client


LOGITS_BUDGET = 1 << 30  # bytes of float32 logits per eval batch


def eval_loss(model, examples: list[dict[str, list[int]]], pad_id: int, batch_size: int = 32, desc: str = "") -> float:
    """Mean loss per assistant token over all examples (token-weighted, not batch-weighted); with `desc`, a
    progress bar of the rows done (stderr)."""
    return mean_loss(example_losses(model, examples, pad_id, batch_size, desc))


def example_losses(
    model, examples: list[dict[str, list[int]]], pad_id: int, batch_size: int = 32, desc: str = ""
) -> list[tuple[float, int]]:
    """Each example's summed loss over its assistant tokens and their count, with transformers on loaded weights:
    what `served_nll` reads off a server, so that any subset's loss is `mean_loss` of its parts (the held-out
    suite's eval loss and its text rows' from one pass)."""
    import torch
    from tqdm import tqdm

    if not examples:
        return []
    device = next(model.parameters()).device
    out: list[tuple[float, int]] = []
    # Full float32 logits are rows x length x vocab: with a 128k vocabulary 32 rows of 512 tokens
    # would take 8 GB next to training's memory, so rows per batch follow LOGITS_BUDGET.
    vocab = model.get_output_embeddings().weight.shape[0]
    longest = max(len(e["input_ids"]) for e in examples)
    batch_size = max(1, min(batch_size, LOGITS_BUDGET // (4 * longest * vocab)))
    with torch.no_grad(), tqdm(total=len(examples), desc=desc, unit="row", disable=not desc, mininterval=2) as bar:
        for i in range(0, len(examples), batch_size):
            batch = {k: v.to(device) for k, v in data.collate(examples[i : i + batch_size], pad_id).items()}
            logits = model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
            ).logits.float()
            labels = batch["labels"][:, 1:]
            losses = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="none"
            ).view(labels.shape)
            for row_loss, row_labels in zip(losses.sum(dim=1).tolist(), (labels != -100).sum(dim=1).tolist()):
                out.append((row_loss, int(row_labels)))
            bar.update(len(batch["input_ids"]))
    return out


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
    body = {"model": model, "prompt": ids[:-1], "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
    last = labels[-1] != -100
    if last:
        body.update(logprobs=0, logprob_token_ids=[labels[-1]], return_tokens_as_token_ids=True)
    choice = client.completion(url, body, timeout=timeout)["choices"][0]
    if not choice.get("prompt_logprobs") or (last and not (choice.get("logprobs") or {}).get("top_logprobs")):
        raise UserError(
            f"the vLLM server at {url} returned no prompt log-probabilities for {model!r}: the eval loss "
            "reads them (prompt_logprobs, logprob_token_ids: vLLM 0.32, the release of VLLM_IMAGE); "
            "use that vLLM, or eval_engine=hf"
        )
    # prompt_logprobs[i]: {str(token id): {"logprob": ...}} for the prompt's token i (None for the
    # first, which nothing predicts); with prompt_logprobs=0 the token itself is the one key.
    prompt = choice["prompt_logprobs"]
    scored = [(pos, t) for pos, t in enumerate(labels[:-1]) if pos and t != -100]
    total = -sum(prompt[pos][str(t)]["logprob"] for pos, t in scored)
    if last:
        total -= choice["logprobs"]["top_logprobs"][0][f"token_id:{labels[-1]}"]
    return total, len(scored) + last


def each_batch(request: Callable[[Any], Any], items: list[Any], desc: str, concurrency: int = CONCURRENCY) -> list[Any]:
    """`request(item)` for every item, `concurrency` in flight to the server (vLLM batches them),
    with a progress bar; the results in the items' order."""
    out = []
    with bar(len(items), desc, unit="row") as progress, ThreadPoolExecutor(concurrency) as pool:
        for result in pool.map(request, items):
            out.append(result)
            progress.update(1)
    return out


def served_losses(
    url: str, model: str, examples: list[dict[str, list[int]]], desc: str, concurrency: int = CONCURRENCY
) -> list[tuple[float, int]]:
    """`served_nll` of every example, `concurrency` requests at a time, with a progress bar."""
    return each_batch(lambda e: served_nll(url, model, e), examples, desc, concurrency)


def mean_loss(parts: list[tuple[float, int]]) -> float:
    """Mean loss per scored token over (summed loss, tokens) parts: token-weighted, as `eval_loss`."""
    return sum(t for t, _ in parts) / max(sum(n for _, n in parts), 1)
