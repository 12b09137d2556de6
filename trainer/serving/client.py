"""The OpenAI client side of a served model: readiness polling, requests, the smoke test and its verdicts.

Every backend (the local vLLM process, trainer.serving.local; the cluster ones, trainer.k8s) waits on
`wait_ready` and checks every served name with `smoke_test`, judged the same way (`verdict`,
`smoke_outcome`); the evaluate step asks its questions through `chat` and `completion`. Plain HTTP
(urllib): the cluster image has no `openai` client.

A module of its own because it only talks to an endpoint, wherever the server runs: a cluster
backend imports it without the local process code, and the local backend imports it too.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from trainer.chat.types import Message, Row, Tool
from trainer.chat.messages import openai_messages
from trainer.chat.turns import expected_call, target_index
from trainer.core.errors import UserError


class Running(Protocol):
    """What wait_ready reads of a local server (trainer.serving.local.Server) it waits for: its process
    and its log."""

    proc: subprocess.Popen
    log_path: Path

    def log_tail(self, lines: int = ...) -> str: ...


def wait_ready(url: str, server: Running | None = None, timeout: float = 300.0, progress_every: float = 10.0) -> float:
    """Poll /v1/models (readiness, not just liveness) until it answers 200; returns seconds waited.

    Prints elapsed seconds and the server's last log line every `progress_every` seconds. Raises
    UserError (with the log's last lines) when the server exits or `timeout` passes.
    """
    t0 = time.monotonic()
    last_print = t0
    while True:
        elapsed = time.monotonic() - t0
        if server is not None and server.proc.poll() is not None:
            raise UserError(
                f"vLLM exited with status {server.proc.returncode} before becoming ready; "
                f"its log {server.log_path} ends with:\n{server.log_tail()}"
            )
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


def smoke_request(rows: Sequence[Row]) -> tuple[list[Message], list[Tool] | None]:
    """(messages, tools) for the smoke test: the first row that expects a tool call, cut before
    its answer; else the first row, sent without its tools (a text answer is what is checked:
    with tools offered, every caller's check demands a call, which that row does not expect)."""
    if not rows:
        raise UserError("the eval split is empty: nothing to smoke-test the endpoint with")
    row = next((r for r in rows if r.get("tools") and expected_call(r)), None)
    chosen = row or rows[0]
    return openai_messages(chosen["messages"][: target_index(chosen)]), (row.get("tools") if row else None)


def chat(
    url: str,
    model: str,
    messages: list[Message],
    tools: list | None = None,
    max_tokens: int = 64,
    timeout: float = 120.0,
    stream: bool = False,
) -> dict[str, Any]:
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
    resp = post(
        f"{url}/v1/chat/completions",
        body,
        timeout,
        f"chat completion for {model!r}",
        _assemble_stream if stream else None,
    )
    resp["latency_s"] = time.perf_counter() - start_t
    return resp


def completion(url: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    """One OpenAI (legacy) completion over plain HTTP: `body` as vLLM takes it, vLLM's own fields
    (prompt_logprobs, logprob_token_ids) included; the response JSON."""
    return post(f"{url}/v1/completions", body, timeout, f"completion for {body.get('model')!r}")


def post(
    url: str, body: dict[str, Any], timeout: float, what: str, read: Callable[[Any], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """POST `body` as JSON; the answer read by `read` (JSON by default). An HTTP error raises
    UserError naming `what` with the server's own words."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return read(r) if read else json.loads(r.read())
    except urllib.error.HTTPError as err:
        raise UserError(f"{what} failed: HTTP {err.code}: {err.read()[:500]!r}") from None
    except (TimeoutError, urllib.error.URLError) as err:
        if not isinstance(getattr(err, "reason", err), TimeoutError):
            raise
        # A server that takes this long on one request is overloaded (other heavy work on its cores, or a model that
        # writes up to max_tokens on every row) or stuck: one line, not a socket's traceback.
        raise UserError(
            f"{what} got no answer from {url} within {timeout:g} s: the server is overloaded or stuck; run nothing "
            "heavy beside it, or ask fewer rows (eval_max_rows, bfcl_rows)"
        ) from None


def _assemble_stream(lines) -> dict[str, Any]:
    """`data: {chunk}` lines up to `data: [DONE]` -> one chat.completion-shaped dict."""
    model, role, finish, content = None, None, None, ""
    calls: dict[int, dict[str, Any]] = {}  # by the chunk's call index
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        model = chunk.get("model", model)
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            role = delta.get("role") or role
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(
                    tc.get("index", 0), {"id": "", "type": "", "function": {"name": "", "arguments": ""}}
                )
                slot["id"] = tc.get("id") or slot["id"]
                slot["type"] = tc.get("type") or slot["type"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message = {
        "role": role,
        "content": content if content or not calls else None,
        **({"tool_calls": [calls[i] for i in sorted(calls)]} if calls else {}),
    }
    return {
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
    }


class Checked(NamedTuple):
    """A smoke answer's verdict, decided where the reason is found: "ok"; "unusable_reply", the model's answer (the
    endpoint kept to the protocol; an undertrained model stopping at once: the run goes on with a warning); or
    "server_error", the server breaking the OpenAI protocol (the deploy step fails). `reason`: why not ok."""

    verdict: str
    reason: str = ""


OK = Checked("ok")


def _server(reason: str) -> Checked:
    return Checked("server_error", reason)


def _unusable(reason: str) -> Checked:
    return Checked("unusable_reply", reason)


def check_response(resp: dict[str, Any], model: str, tools: list | None, require_tool_call: bool = True) -> Checked:
    """Why `resp` is not a well-formed OpenAI chat completion for this request, and whose fault (`Checked`).

    With tools and `require_tool_call`, the answer must be a tool call as an OpenAI application's
    tool loop reads it: finish_reason "tool_calls", `message.tool_calls[0]` of type "function" with
    an id, `function.name` one of the offered tools and `arguments` a JSON object. Without, a text answer (a string) passes too, but any
    tool call given must still be well-formed.
    """
    if resp.get("object") != "chat.completion" or not resp.get("choices"):
        return _server(f"not an OpenAI chat completion: {json.dumps(resp)[:300]}")
    if resp.get("model") != model:
        return _server(f"answered as model {resp.get('model')!r}, asked for {model!r}")
    message = resp["choices"][0].get("message") or {}
    if message.get("role") != "assistant":
        return _server(f"message role is {message.get('role')!r}, not 'assistant'")
    calls = message.get("tool_calls") or []
    if not tools or (not calls and not require_tool_call):
        if not isinstance(message.get("content"), str):
            return _server(f"message.content is {message.get('content')!r}, not text")
        return OK if message["content"].strip() or not require_tool_call else _unusable("empty reply")
    if not calls:
        return _unusable(f"no message.tool_calls (content: {str(message.get('content'))[:200]!r})")
    # What an application's tool loop reads: finish_reason says "run the calls", the id is what the
    # tool message answering a call names.
    finish = resp["choices"][0].get("finish_reason")
    if finish != "tool_calls":
        return _server(f"finish_reason is {finish!r} with a tool call, not 'tool_calls'")
    if not calls[0].get("id"):
        return _server("tool_calls[0] has no id (a tool result must name it as tool_call_id)")
    if calls[0].get("type") != "function":
        return _server(f"tool_calls[0].type is {calls[0].get('type')!r}, not 'function'")
    fn = calls[0].get("function") or {}
    offered = {t["function"]["name"] for t in tools if t.get("type") == "function"}
    if fn.get("name") not in offered:
        return _unusable(
            f"tool_calls[0].function.name {fn.get('name')!r} is not one of the offered tools {sorted(offered)}"
        )
    try:
        args = json.loads(fn.get("arguments") or "")
    except (TypeError, ValueError):
        return _unusable(f"tool_calls[0].function.arguments is not JSON: {fn.get('arguments')!r}")
    return (
        OK if isinstance(args, dict) else _unusable(f"tool_calls[0].function.arguments is not a JSON object: {args!r}")
    )


def smoke_test(
    url: str, model: str, messages: list[Message], tools: list | None = None, require_tool_call: bool = True
) -> dict[str, Any]:
    """One chat completion checked by `check_response`, then the same request streamed, checked
    the same way (what a chat UI or an agent framework with streaming on receives).

    Returns ok (bool), reason (why not ok), verdict (`Checked`), latency_s, reply (tool call
    or text) and model. A server that cannot answer at all (HTTP error) raises UserError instead.
    """
    resp = chat(url, model, messages, tools)
    checked = check_response(resp, model, tools, require_tool_call)
    if checked == OK:
        streamed = check_response(chat(url, model, messages, tools, stream=True), model, tools, require_tool_call)
        # an answer that breaks only when streamed is the server's streaming path: always the server's fault
        checked = OK if streamed == OK else _server(f"streamed: {streamed.reason}")
    message = ((resp.get("choices") or [{}])[0].get("message")) or {}
    calls = message.get("tool_calls") or []
    reply = (
        f"{calls[0]['function'].get('name')} {calls[0]['function'].get('arguments')}"
        if calls
        else str(message.get("content") or "")
    )
    return {
        "ok": checked == OK,
        "reason": checked.reason,
        "verdict": checked.verdict,
        "latency_s": resp["latency_s"],
        "reply": reply,
        "model": model,
    }


def smoke_outcome(results: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The deploy step's verdict from every served name's `smoke_test` result.

    Returns smoke_ok (every name answered usably), server_ok (every answer kept to the OpenAI
    protocol), warning (names whose model answered unusably: the endpoint works, the model is
    most likely undertrained; the run goes on and says so) and error (names the server failed:
    the step fails). Each is '' when there is nothing to say.
    """
    kinds = {n: r["verdict"] for n, r in results.items()}
    bad = lambda kind: "; ".join(f"{n}: {results[n]['reason']}" for n, k in kinds.items() if k == kind)  # noqa: E731
    unusable, broken = bad("unusable_reply"), bad("server_error")
    warning = (
        f"WARNING: the endpoint works, but the model's reply is unusable ({unusable}): undertrained: more "
        "max_steps (or a higher learning_rate), then check the evaluate step's accuracy"
        if unusable
        else ""
    )
    error = (
        f"the server broke the OpenAI protocol ({broken}): clients would fail on it; see the server log"
        if broken
        else ""
    )
    return {"smoke_ok": not unusable and not broken, "server_ok": not broken, "warning": warning, "error": error}
