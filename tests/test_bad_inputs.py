"""Table of bad inputs through `python -m pipelines.run_local` (in process): each must exit
with status 2 and one message naming the problem, print no traceback, and leave nothing
behind: no pipeline root, no S3 server started, so no artifact can look complete."""

import json

import pytest

from pipelines import run_local

GOOD_ROW = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def jsonl(tmp_path, *lines, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


CASES = [  # (id, params (callable of tmp_path -> list), expected message)
    ("unknown-builtin-model", lambda t: ["model_source=builtin:gpt-9"], "unknown built-in model 'builtin:gpt-9'"),
    ("unknown-model-scheme", lambda t: ["model_source=ftp://x"], "unknown model source 'ftp://x'"),
    ("missing-model-dir", lambda t: [f"model_source={t}/nope/"], "model path not found"),
    ("missing-dataset-file", lambda t: [f"dataset_source={t}/train.jsonl"], "dataset path not found"),
    ("malformed-jsonl", lambda t: [f"dataset_source={jsonl(t, GOOD_ROW, '{oops')}"], "data.jsonl:2: not valid JSON"),
    ("row-without-messages", lambda t: [f"dataset_source={jsonl(t, GOOD_ROW, {'text': 'x'})}"],
     "data.jsonl:2: row has no 'messages' field"),
    ("unknown-role", lambda t: [f"dataset_source={jsonl(t, {'messages': [{'role': 'robot', 'content': 'x'}, {'role': 'assistant', 'content': 'y'}]})}"],
     "unknown role 'robot'"),
    ("tool-args-not-json", lambda t: [f"dataset_source={jsonl(t, {'messages': [{'role': 'user', 'content': 'x'}, {'role': 'assistant', 'content': '', 'tool_calls': [{'function': {'name': 'f', 'arguments': '{bad'}}]}]})}"],
     "arguments is not valid JSON"),
    ("empty-file", lambda t: [f"dataset_source={jsonl(t)}"], "file has no rows"),
    ("empty-train-split", lambda t: [f"dataset_source={jsonl(t, GOOD_ROW)}"], "empty train split"),
    ("lora-rank-zero", lambda t: ["lora_r=0"], "lora_r must be > 0"),
    ("negative-lr", lambda t: ["learning_rate=-0.1"], "learning_rate must be > 0"),
    ("zero-nodes", lambda t: ["nodes=0"], "nodes must be >= 1"),
    ("zero-batch", lambda t: ["batch_size=0"], "batch_size must be > 0"),
    ("seq-len-over-model", lambda t: ["max_seq_len=4096"], "exceeds the model's context length 512"),
    ("unknown-method", lambda t: ["method=qlora"], "method must be 'lora' or 'full'"),
    ("eval-fraction", lambda t: ["eval_fraction=1.5"], "eval_fraction must be between 0 and 1"),
    ("unknown-launcher", lambda t: ["launcher=slurm"], "launcher must be one of"),
    ("cluster-cleanup", lambda t: ["launcher=kubernetes", "cleanup=sometimes"], "cleanup must be one of"),
    ("tolerations-not-list", lambda t: ['tolerations={"key": "gpu"}'], "is not a valid list"),
    ("unknown-parameter", lambda t: ["max_stepz=3"], "unknown parameter 'max_stepz'"),
    ("wrong-type", lambda t: ["max_steps=many"], "max_steps='many' is not a valid int"),
    ("negative-restarts", lambda t: ["max_restarts=-1"], "max_restarts must be >= 0"),
]


@pytest.mark.parametrize("params, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_fails_fast_and_cleanly(tmp_path, capsys, monkeypatch, params, expected):
    started = []
    monkeypatch.setattr(run_local, "start_s3", lambda *a: started.append(1))
    root = tmp_path / "root"
    argv = ["--pipeline-root", str(root), "--output-dir", str(tmp_path / "out")]
    for p in params(tmp_path):
        argv += ["--param", p]
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert expected in err, err
    assert err.startswith("error: ") and "Traceback" not in err
    assert not started and not root.exists() and not (tmp_path / "out").exists()


def test_several_problems_are_reported_together(tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_local.main(["--pipeline-root", str(tmp_path / "r"), "--param", "lora_r=0", "--param", "nodes=0",
                        "--param", "model_source=builtin:nope", "--param", "learning_rate=0"])
    err = capsys.readouterr().err
    assert "4 problems" in err and err.count("\n  - ") == 4
