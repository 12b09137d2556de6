"""Unit tests of micro-batch planning and collation (trainer/data/batching.py)."""

import itertools

import pytest

from trainer.data.batching import batches, bucket, collate_packed, real_tokens
from trainer.core.errors import UserError


def rows(*lengths):
    return [{"input_ids": [i] * n, "labels": [i] * n} for i, n in enumerate(lengths)]


@pytest.mark.parametrize("flatten", [False, True])
def test_a_shard_that_fits_one_budget_still_yields_batches(flatten):
    """Issue 9 item 1: 36 short rows over 2 ranks fit one 1024-token budget per rank; the
    partly filled batch used to be dropped, so the stream never yielded and training hung."""
    examples = rows(*[12] * 36)
    streams = [batches(examples, 16, r, 2, seed=0, batch_tokens=1024, flatten=flatten) for r in range(2)]
    firsts = [list(itertools.islice(s, 5)) for s in streams]  # 5 epochs, one batch each
    for got in firsts:
        assert [len(b) for b in got] == [18] * 5
    assert not {id(e) for e in firsts[0][0]} & {id(e) for e in firsts[1][0]}  # disjoint shards


def test_every_row_is_used_once_per_epoch_with_token_budgets():
    examples = rows(*[10, 30, 50, 70, 90] * 7)
    stream = batches(examples, 0, 0, 1, seed=3, batch_tokens=100, flatten=True)
    epoch, seen = [], 0
    while seen < len(examples):  # an epoch ends exactly when every row was seen
        epoch.append(next(stream))
        seen += len(epoch[-1])
    assert seen == len(examples) and sorted(e["input_ids"][0] for b in epoch for e in b) == list(range(35))


@pytest.mark.parametrize(
    "kwargs, fix",
    [
        ({"batch_size": 4, "world": 2}, "lower batch_size"),
        ({"batch_size": 16, "world": 3, "batch_tokens": 512}, "fewer processes"),
    ],
)
def test_too_few_rows_for_the_processes_is_refused_up_front(kwargs, fix):
    world = kwargs.pop("world")
    with pytest.raises(UserError, match=fix):
        batches(rows(5, 5), rank=0, world=world, seed=0, **kwargs)  # raises on the call, not on next()


def test_one_row_per_rank_is_enough_with_a_token_budget():
    examples = rows(5, 6)
    for r in range(2):
        assert [len(b) for b in itertools.islice(batches(examples, 16, r, 2, 0, batch_tokens=64), 3)] == [1, 1, 1]


def test_bucket_sizes_are_few_and_padding_is_bounded():
    sizes = {bucket(n) for n in range(1, 4097)}
    assert sorted(sizes) == [64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096]
    assert all(n <= bucket(n) < 1.5 * n + 64 for n in range(1, 4097))


def test_packed_batch_fills_to_a_fixed_total_without_new_labels():
    b = collate_packed(rows(3, 2), total=8, pad_id=9)
    assert b["input_ids"].tolist() == [[0, 0, 0, 1, 1, 9, 9, 9]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2]]
    assert b["labels"].tolist() == [[-100, 0, 0, -100, 1, -100, -100, -100]]
    assert real_tokens(rows(3, 2)) == 5
