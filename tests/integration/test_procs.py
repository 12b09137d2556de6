"""Nothing we start outlives us (trainer.core.procs): the guard around vLLM, what run_local started, and
the whole process tree and /tmp after SIGTERM / SIGINT to run_local (the process alone and its group)
in each stage, after SIGKILL of `trainer serve` while vLLM loads, and after SIGKILL of `trainer serve`, its
guard and vLLM's API server while a request runs.

Processes are found by a marker in their environment (every process the commands start inherits it),
wherever they were re-parented to. The end-to-end cases in make test are the faults seen (SIGTERM to the
group during deploy, SIGINT to the process during finetune, SIGKILL of trainer serve); the whole matrix
of stages x signals is the `signals` tier (make test-signals)."""

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from trainer.core import procs
from tests.unit.test_procs import ROOT, TAG, cmdline, survivors, tagged, wait_for


# (stage as the console announces it, a process that shows the stage is under way, the marker in its command line)
STAGES = {
    "deliver-model": "",
    "finetune": "trainer train",
    "evaluate": "",
    "merge-lora": "",
    "deploy": "trainer.serving.vllm_server",
}


HOW = {
    "SIGTERM to the process": (signal.SIGTERM, False),
    "SIGTERM to the group": (signal.SIGTERM, True),
    "SIGINT to the process": (signal.SIGINT, False),
    "SIGINT to the group": (signal.SIGINT, True),
}


IN_MAKE_TEST = {("deploy", "SIGTERM to the group"), ("finetune", "SIGINT to the process")}


def matrix():
    for stage in STAGES:
        for how in HOW:
            marks = [] if (stage, how) in IN_MAKE_TEST else [pytest.mark.signals]
            yield pytest.param(stage, how, marks=marks, id=f"{stage}-{how}")


@pytest.mark.parametrize("stage, how", matrix())
def test_an_interrupted_run_local_leaves_no_process_and_no_temporary_folder(tmp_path, s3_env, stage, how):
    tag, tmp = uuid.uuid4().hex, tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "console.txt"
    with open(out, "w") as console:
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipelines.run_local",
                "--pipeline-root",
                str(tmp_path / "root"),
                "--output-dir",
                str(tmp_path / "out"),
                "--runs-dir",
                str(tmp_path / "runs"),
                "--s3-endpoint",
                s3_env["S3_ENDPOINT"],
                "--param",
                "max_steps=3",
                "--param",
                "eval_max_rows=5",
                "--param",
                "nodes=1",
            ],
            cwd=ROOT,
            env={**os.environ, TAG: tag, "TMPDIR": str(tmp)},
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # a group of its own, as a shell's job: the group can be signalled
    sig, group = HOW[how]
    try:
        wait_for(lambda: f"▶ {stage}" in out.read_text(), 600, run, f"stage {stage}")
        if STAGES[stage]:
            wait_for(lambda: any(STAGES[stage] in cmdline(p) for p in tagged(tag)), 120, run, STAGES[stage])
        else:
            time.sleep(1)  # inside the stage's component
        (os.killpg if group else os.kill)(run.pid, sig)
        status = run.wait(timeout=120)
        text = out.read_text()
        assert status == (130 if sig == signal.SIGINT else 143), text[-3000:]
        assert survivors(tag) == [], text[-3000:]
        assert list(tmp.iterdir()) == [], text[-3000:]  # the run's temporary folder, not re-created after
        assert "Traceback" not in text and f"interrupted ({'Ctrl-C' if sig == signal.SIGINT else 'SIGTERM'})" in text
    finally:
        if run.poll() is None:
            run.kill()
        procs.stop(tagged(tag), grace=0)


def test_sigkill_of_trainer_serve_while_vllm_loads_leaves_nothing(tmp_path, tiny_model_dir):
    """SIGKILL runs no handler of ours: the guard sees its parent gone and takes vLLM down."""
    tag = uuid.uuid4().hex
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer",
            "serve",
            str(tiny_model_dir),
            "--port",
            "0",
            "--log",
            str(tmp_path / "vllm.log"),
        ],
        cwd=ROOT,
        env={**os.environ, TAG: tag},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # vLLM's api_server started and still loading (its EngineCore may not be there yet)
        wait_for(
            lambda: any("trainer.serving.vllm_server" in cmdline(p) for p in tagged(tag)), 120, cli, "vLLM starting"
        )
        time.sleep(3)
        cli.kill()
        cli.wait()
        assert survivors(tag, within=20) == []
    finally:
        procs.stop(tagged(tag), grace=0)


def test_sigkill_of_trainer_serve_its_guard_and_vllms_api_server_mid_request_leaves_no_engine(tmp_path, tiny_model_dir):
    """`kill -9` of each process a user sees (what looks hung) while a request runs: no handler of ours runs, the
    guard's included, and vLLM's EngineCore, a child of the API server, was left under init spinning at ~130% CPU.
    Each of vLLM's processes dies with its parent now (trainer.serving.vllm_server). The EngineCore is followed by
    pid: its process title overwrites the environment the marker is read from."""
    import json
    import urllib.request

    import psutil

    from trainer.serving import client, local

    tag, port, log = uuid.uuid4().hex, local.free_port(), tmp_path / "vllm.log"
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer",
            "serve",
            str(tiny_model_dir),
            "--served-model-name",
            "tiny",
            "--port",
            str(port),
            "--log",
            str(log),
        ],
        cwd=ROOT,
        env={**os.environ, TAG: tag},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    engine: list[psutil.Process] = []
    try:
        client.wait_ready(f"http://127.0.0.1:{port}", timeout=300)
        # Eight answers of 480 tokens each, streamed (about 10 s on 2 cores): running once its first chunk is read.
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 480,
            "ignore_eos": True,
            "n": 8,
            "stream": True,
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as stream:
            assert stream.readline().startswith(b"data: {")
            [guard] = psutil.Process(cli.pid).children()
            [api] = [p for p in guard.children() if "trainer.serving.vllm_server" in " ".join(p.cmdline())]
            engine = api.children()  # the EngineCore, and multiprocessing's resource tracker
            assert "VLLM::EngineCore" in [p.name() for p in engine]
            for proc in (cli, guard, api):
                proc.kill()
        cli.wait()
        deadline = time.monotonic() + 30  # gone in 0.2 s on 2 cores (the API server's own exit); a loaded machine
        while any(procs.alive(p.pid) for p in engine) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [f"{p.pid}: {p.name()}" for p in engine if procs.alive(p.pid)] == []
        assert survivors(tag) == []
    finally:
        for proc in engine:  # psutil checks the pid is still that process's
            with contextlib.suppress(psutil.Error):
                proc.kill()
        procs.stop(tagged(tag), grace=0)
