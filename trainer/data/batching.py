"""Micro-batches for the training loop: which rows go together, and how they become tensors.

`batches()` plans each rank's endless stream of micro-batches (seeded, resumable, sharded);
`collate()` pads rows to the batch's longest row, `collate_packed()` flattens them into one
padding-free sequence. `bucket()` rounds a length up to one of a few sizes, so that a
compiled model sees few distinct shapes.
"""

from __future__ import annotations

import random
from typing import Any, Iterator

from trainer.core.errors import UserError


def batches(
    examples: list,
    batch_size: int,
    rank: int,
    world: int,
    seed: int,
    start: int = 0,
    batch_tokens: int = 0,
    flatten: bool = False,
) -> Iterator[list]:
    """Endless micro-batches of this rank's shard.

    Each epoch is a seeded permutation of all rows; rank r takes every world-th row, so ranks
    never see the same row in an epoch and the order depends only on (seed, epoch). Without
    `batch_tokens`, batches hold `batch_size` rows and a short last batch is dropped. With it,
    a batch holds as many rows as fit the token budget: counting real tokens when rows are
    flattened (packed), or rows x the longest row when they are padded, in which case rows are
    first sorted by length within windows of 256 so that a batch's rows are about equally long
    and little padding remains. The last, partly filled batch is kept: when a rank's whole shard
    fits one budget it is the epoch's only batch (dropping it made the stream yield nothing,
    forever). Batches are then shuffled (seeded). `start` skips that many batches, so a
    resumed run continues at the exact data position.

    Ranks may get different numbers of batches per epoch; that is harmless, because every rank
    takes the same number of micro-batches per step from its endless stream, so collectives
    stay aligned. Every epoch yields at least one batch, or this raises UserError when called
    (before the first batch is asked for).
    """
    check_rows(len(examples), batch_size, world, batch_tokens)
    return _stream(examples, batch_size, rank, world, seed, start, batch_tokens, flatten)


def check_rows(rows: int, batch_size: int, world: int, batch_tokens: int = 0, skipped: int = 0) -> None:
    """Raise UserError when `rows` cannot give every rank one micro-batch per epoch; `skipped`
    rows (longer than max_seq_len) are named, since they are usually why."""
    if rows < (world if batch_tokens else batch_size * world):
        raise UserError(
            f"only {rows} training row{'' if rows == 1 else 's'}"
            + (
                f" ({skipped} more were longer than max_seq_len and skipped: raise max_seq_len or shorten them)"
                if skipped
                else ""
            )
            + ", fewer than "
            + (
                f"the {world} processes (every process needs one row at least); add rows or use fewer processes"
                if batch_tokens
                else f"batch_size x processes = {batch_size} x {world}; lower batch_size, use fewer "
                f"processes, or add rows"
            )
        )


def _stream(examples, batch_size, rank, world, seed, start, batch_tokens, flatten) -> Iterator[list]:
    def epoch_batches(epoch: int) -> list[list[int]]:
        rng = random.Random(seed + epoch)
        order = list(range(len(examples)))
        rng.shuffle(order)
        shard = order[rank::world]
        if not batch_tokens:
            return [shard[i : i + batch_size] for i in range(0, len(shard) - batch_size + 1, batch_size)]
        length = lambda j: len(examples[j]["input_ids"])  # noqa: E731
        if not flatten:
            shard = [j for w in range(0, len(shard), 256) for j in sorted(shard[w : w + 256], key=length)]
        out: list[list[int]] = []
        cur: list[int] = []
        longest, total = 0, 0
        for j in shard:
            n = length(j)
            cost = (total + n) if flatten else (len(cur) + 1) * max(longest, n)
            if cur and cost > batch_tokens:
                out.append(cur)
                cur, longest, total = [], 0, 0
            cur.append(j)
            longest, total = max(longest, n), total + n
        if cur:
            out.append(cur)
        rng.shuffle(out)
        return out

    epoch, skip = 0, start
    while True:
        plan = epoch_batches(epoch)
        for b in plan[skip:]:
            yield [examples[j] for j in b]
        skip, epoch = max(0, skip - len(plan)), epoch + 1


def bucket(n: int, multiple: int = 64) -> int:
    """`n` rounded up to the next of the sizes m x (1, 2, 3, 4, 6, 8, 12, 16, 24, ...): powers of
    two and 1.5 x powers of two. A compiled model then meets only a logarithmic number of
    shapes, and the padding added stays under a third of the batch."""
    k = 1
    while multiple * k < n:
        k = k + 1 if k < 2 else (k * 3 // 2 if k & (k - 1) == 0 else k * 4 // 3)
    return multiple * k


def collate(
    examples: list[dict[str, list[int]]], pad_id: int, padding_side: str = "right", width: int = 0
) -> dict[str, Any]:
    """Pad a batch to its longest row (or to `width`, when bucketing shapes for compile).

    `pad_id` None (tokenizers without a pad token, e.g. Llama 3's) pads with 0: pad positions
    are masked out of attention and loss, so their id never matters.
    """
    import torch

    pad_id = 0 if pad_id is None else pad_id
    width = max(width, max(len(e["input_ids"]) for e in examples))
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    attn = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        sl = slice(0, n) if padding_side == "right" else slice(width - n, width)
        ids[i, sl] = torch.tensor(e["input_ids"])
        labels[i, sl] = torch.tensor(e["labels"])
        attn[i, sl] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": attn}


def collate_packed(examples: list[dict[str, list[int]]], total: int = 0, pad_id: int = 0) -> dict[str, Any]:
    """Padding-free batch: rows concatenated into one sequence of shape [1, total tokens].

    `position_ids` restart at 0 for each row; transformers turns that into a block-diagonal
    attention mask (flash-attention varlen on CUDA, a document block mask with flex attention),
    so no row attends to another. The first label of each row is masked, so no row is trained
    to predict its first token from the previous row's last one. With `total`, one more
    "row" of padding (no labels) fills the sequence to exactly that length, so a compiled
    model sees a single shape. The model must run with use_cache=False (with a KV cache
    transformers does not look for packed rows).
    """
    import torch

    ids = [t for e in examples for t in e["input_ids"]]
    pos = [i for e in examples for i in range(len(e["input_ids"]))]
    labels = [t for e in examples for t in [-100, *e["labels"][1:]]]
    fill = max(0, total - len(ids))
    pad_id = 0 if pad_id is None else pad_id  # no pad token: fill positions carry no label
    ids, pos, labels = ids + [pad_id] * fill, pos + list(range(fill)), labels + [-100] * fill
    return {"input_ids": torch.tensor([ids]), "position_ids": torch.tensor([pos]), "labels": torch.tensor([labels])}


def real_tokens(batch: list[dict[str, list[int]]] | dict[str, Any]) -> int:
    """Non-pad tokens of a batch: of its rows (no tensor, no device sync), or of a collated
    batch from either collator."""
    if isinstance(batch, list):
        return sum(len(e["input_ids"]) for e in batch)
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else int(batch["input_ids"].numel())
