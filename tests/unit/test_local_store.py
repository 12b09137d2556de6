"""The throwaway S3's reusable contents kept between run_local runs (pipelines.local_store): a run's delivered trees
and the base's kept scores copied to disk whole or not at all, put into the next run's fresh server, nothing else
kept (the run's own outputs), and cleared by `python -m pipelines.runs clear-store`."""

import json

import pytest

from pipelines import local_store
from trainer.core.storage import MANIFEST, Store


def _executor_output(root, task, uri):
    path = root / task / "executor_output.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"artifacts": {"out": {"artifacts": [{"metadata": {"uri": uri}}]}}}))


def test_a_runs_deliveries_and_kept_scores_go_to_disk_and_into_the_next_server(s3_env, tmp_path, monkeypatch):
    monkeypatch.setenv("S3_BUCKET", "local-store-test")  # a bucket of its own: other tests keep objects in theirs
    store = Store.from_env()
    src = tmp_path / "src"
    src.mkdir()
    (src / "weights.bin").write_bytes(b"w" * 1000)
    model_uri, _ = store.put_tree(src, "models")
    (src / "weights.bin").write_bytes(b"x" * 10)
    output_uri, _ = store.put_tree(src, "models")  # a merged model: the run's output, not kept
    store.put_json("base_scores/sha256-abc.json", {"digest": "abc"})
    store.put_json("runs/r1/checkpoints/step-1.json", {"x": 1})  # a run's own: not kept
    kfp_run = tmp_path / "kfp-run"
    _executor_output(kfp_run, "deliver-model", model_uri)
    _executor_output(kfp_run, "merge-lora", output_uri)
    root = tmp_path / "store"

    said = local_store.keep(store, root, kfp_run)
    assert said == f"local store {root}: 2 objects added (0 MB) for later runs"
    folder = root / store.bucket
    kept = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    prefix = model_uri.split(f"{store.bucket}/", 1)[1]
    assert kept == ["base_scores/sha256-abc.json", f"{prefix}/{MANIFEST}", f"{prefix}/weights.bin"]
    assert local_store.keep(store, root, kfp_run) == ""  # all there already: nothing copied twice
    assert not list(folder.rglob(".partial*"))

    # the next run: a fresh server (emptied here: moto's servers in one process share their state), filled before
    # anything runs
    _empty(store)
    line = local_store.restore(store, root)
    assert line.startswith(f"local store {root}: 1 delivered trees and 1 kept objects (0 MB) restored in ")
    assert line.endswith("`python -m pipelines.runs clear-store` empties it")
    assert (store.get_tree(model_uri, tmp_path / "got") / "weights.bin").read_bytes() == b"w" * 1000
    assert store.get_json("base_scores/sha256-abc.json") == {"digest": "abc"}
    assert not store.exists(output_uri.split(f"{store.bucket}/", 1)[1] + f"/{MANIFEST}")
    assert not store.exists("runs/r1/checkpoints/step-1.json")
    # a tree whose copy was cut short (no manifest) is not put back: a reader would take it as complete
    (folder / "models" / "sha256-cut").mkdir()
    (folder / "models" / "sha256-cut" / "weights.bin").write_bytes(b"half")
    local_store.restore(store, root)
    assert not store.exists("models/sha256-cut/weights.bin")


def _empty(store):
    from minio.deleteobjects import DeleteObject

    names = [o.object_name for o in store.client.list_objects(store.bucket, recursive=True)]
    assert not list(store.client.remove_objects(store.bucket, [DeleteObject(n) for n in names]))


def test_an_empty_store_says_so_and_clear_store_empties_it(s3_env, tmp_path, capsys):
    from pipelines.runs import main

    root = tmp_path / "runs" / "store"
    assert local_store.restore(Store.from_env(), root) == f"local store {root}: empty (the first run fills it)"
    (root / "b" / "base_scores").mkdir(parents=True)
    (root / "b" / "base_scores" / "sha256-x.json").write_text("{}")
    assert main(["clear-store", "--runs-dir", str(tmp_path / "runs")]) == 0
    assert capsys.readouterr().out == f"local store {root}: 1 files (0 MB) removed\n" and not root.exists()
    assert main(["clear-store", "--runs-dir", str(tmp_path / "runs")]) == 0
    assert capsys.readouterr().out == f"local store {root}: already empty\n"
    with pytest.raises(SystemExit) as exit_:
        main(["clear-store", "20261201-221855-finetune", "--runs-dir", str(tmp_path / "runs")])
    assert exit_.value.code == 2 and "clear-store empties the whole local store" in capsys.readouterr().err
