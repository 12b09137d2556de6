"""Resilience: a training process killed mid-run (SIGKILL) or asked to stop (SIGTERM) under
the local launcher; the job restarts, resumes from the last checkpoint, and ends exactly
where an uninterrupted run ends, with the same data order.

The fast checks; the ones that train, serve or run the pipeline are tests/integration/test_resilience.py (the integration tier)."""



from trainer.checkpoint import Checkpointer
from trainer.train import batches



def test_data_position_is_exact_after_a_skip():
    examples = list(range(50))
    full = batches(examples, 4, 1, 2, seed=7)
    expected = [next(full) for _ in range(9)][5:]  # crosses an epoch boundary (6 batches/epoch)
    resumed = batches(examples, 4, 1, 2, seed=7, start=5)
    assert [next(resumed) for _ in range(4)] == expected


def test_incomplete_checkpoint_is_ignored(store):
    import io

    ckpt = Checkpointer(store, "runs/partial", keep=2)
    store.ensure_bucket()
    store.client.put_object(store.bucket, "runs/partial/checkpoints/step-00000030/trainable.pt", io.BytesIO(b"x"), 1)
    assert ckpt.latest() is None  # files without a manifest: an interrupted upload
    store.put_json("runs/partial/checkpoints/step-00000010/_manifest.json", {"files": []})
    assert ckpt.latest() == 10


# --- exit statuses under `restartPolicy: ExitCode` (trainer.exitcodes) --------------------------


