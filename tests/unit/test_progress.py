"""Progress on long steps: byte bars on transfers (quiet for tiny trees), and the console filter
that run_local puts between kfp.local and the terminal."""

from trainer.core import progress


def test_transfers_show_bytes_rate_and_eta_only_for_large_trees(store, tmp_path, capfd, monkeypatch):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.bin").write_bytes(b"x" * 300_000)
    (tree / "b.bin").write_bytes(b"y" * 200_000)
    store.put_tree(tree, "models")
    assert "upload" not in capfd.readouterr().err  # below the threshold: quiet

    monkeypatch.setattr(progress, "QUIET_BELOW_BYTES", 0)
    (tree / "c.bin").write_bytes(b"z" * 100_000)
    uri, _ = store.put_tree(tree, "models")
    err = capfd.readouterr().err
    assert "hash 3 files" in err
    up = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("upload models/sha256-")]
    assert up and "100%" in up[-1] and "586k/586k" in up[-1] and "B/s" in up[-1], up
    store.get_tree(uri, tmp_path / "copy")
    down = [line for line in capfd.readouterr().err.replace("\r", "\n").splitlines() if line.startswith("download")]
    assert down and "100%" in down[-1] and "586k/586k" in down[-1], down
