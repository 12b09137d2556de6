"""The served endpoint as an OpenAI application sees it: the official `openai` client against
vLLM serving the merged model the demo deploys (started once, through `python -m trainer serve`),
the same flag checks on the cluster Deployment's arguments (--dry-run), base + adapter side by
side through the deploy component, and SIGTERM taking the whole server down.

The fast checks; the ones that train, serve or run the pipeline are tests/integration/test_serve_openai.py (the integration tier)."""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path

import pytest

from trainer.serving import args as serve_args, client as serve_client, local as serve_local

TUNED = "tiny-tuned"


def art(cls, tmp_path, name):
    return cls(name=name, uri=str(tmp_path / name), metadata={})


# --- the smoke test's checks (no server) ------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def completion(message: dict, model: str = TUNED, finish_reason: str = "") -> dict:
    finish_reason = finish_reason or ("tool_calls" if message.get("tool_calls") else "stop")
    return {
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "finish_reason": finish_reason, "message": {"role": "assistant", **message}}],
    }


def call(name: str, arguments: str) -> dict:
    return {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}


@pytest.mark.parametrize(
    "message, reason",
    [
        (call("get_weather", '{"city": "Paris"}'), ""),
        ({"content": '{"name": "get_weather", "arguments": {"city": "Paris"}}'}, "no message.tool_calls"),
        (call("get_weather", '{"name": "arguments": 1'), "arguments is not JSON"),
        (call("get_weather", '["Paris"]'), "not a JSON object"),
        (call("get_time", "{}"), "is not one of the offered tools"),
    ],
)
def test_smoke_check_accepts_only_a_well_formed_tool_call(message, reason):
    got = serve_client.check_response(completion(message), TUNED, TOOLS)
    assert (reason in got.reason and got.verdict != "ok") if reason else got == serve_client.OK


def test_an_unusable_reply_warns_and_a_broken_server_fails_the_deploy():
    """A 20-step model that stops at once: the endpoint works, the reply does not. The run says
    so plainly (undertrained: more max_steps) and goes on; a protocol break fails the step."""

    def result(resp, tools=TOOLS):
        checked = serve_client.check_response(resp, TUNED, tools)
        return {"ok": checked == serve_client.OK, "reason": checked.reason, "verdict": checked.verdict}

    empty = result(completion({"content": ""}), tools=None)
    assert empty["reason"] == "empty reply" and empty["verdict"] == "unusable_reply"
    no_call = result(completion({"content": "sunny"}))
    wrong_name = result(completion({}, model="other"))
    good = result(completion(call("get_weather", "{}")))
    assert good["verdict"] == "ok" and wrong_name["verdict"] == "server_error"
    assert no_call["verdict"] == "unusable_reply"

    weak = serve_client.smoke_outcome({TUNED: empty, f"{TUNED}-base": good})
    assert not weak["smoke_ok"] and weak["server_ok"] and not weak["error"]
    assert weak["warning"].startswith("WARNING: the endpoint works, but the model's reply is unusable")
    assert "undertrained: more max_steps" in weak["warning"] and f"{TUNED}: empty reply" in weak["warning"]
    broken = serve_client.smoke_outcome({TUNED: no_call, "other": wrong_name})
    assert not broken["smoke_ok"] and not broken["server_ok"]
    assert "answered as model 'other'" in broken["error"] and "no message.tool_calls" in broken["warning"]
    assert serve_client.smoke_outcome({TUNED: good}) == {
        "smoke_ok": True,
        "server_ok": True,
        "warning": "",
        "error": "",
    }
    from pipelines.run_local import endpoint_line

    line = endpoint_line("http://127.0.0.1:1/v1", {"smoke_ok": 0.0, "smoke_server_ok": 1.0}, keep_serving=False)
    assert "the server works, but the model's smoke-test reply was unusable: undertrained: more max_steps" in line


def test_smoke_check_demands_what_an_openai_tool_loop_reads():
    """The usual application loop: `if choice.finish_reason == "tool_calls"`, run each call, answer
    it with a tool message carrying the call's `id`."""
    ok = call("get_weather", '{"city": "Paris"}')
    assert (
        "finish_reason is 'stop'"
        in serve_client.check_response(completion(ok, finish_reason="stop"), TUNED, TOOLS).reason
    )
    assert (
        "finish_reason is 'length'"
        in serve_client.check_response(completion(ok, finish_reason="length"), TUNED, TOOLS).reason
    )
    no_id = {"tool_calls": [{**ok["tool_calls"][0], "id": ""}]}
    assert "no id" in serve_client.check_response(completion(no_id), TUNED, TOOLS).reason
    not_function = {"tool_calls": [{**ok["tool_calls"][0], "type": "code"}]}
    assert "type is 'code'" in serve_client.check_response(completion(not_function), TUNED, TOOLS).reason
    # a base model beside an adapter may answer in text, but a call it does make is held to the same rules
    assert (
        "finish_reason is 'stop'"
        in serve_client.check_response(
            completion(ok, finish_reason="stop"), TUNED, TOOLS, require_tool_call=False
        ).reason
    )


@pytest.mark.parametrize("ending", ["refused", "vllm-exits", "sigterm"])
def test_serve_forever_puts_back_the_signal_handlers_it_found(monkeypatch, tiny_model_dir, ending):
    """`trainer serve` turns SIGTERM / SIGHUP into an exit that takes vLLM down; in a process that
    goes on afterwards (this one), the handlers that were there before are back however it ends."""
    from types import SimpleNamespace

    from trainer.core.errors import UserError

    def wait():
        if ending == "sigterm":
            signal.raise_signal(signal.SIGTERM)  # runs serve_forever's handler here, synchronously
        return 0

    stopped = []
    fake = SimpleNamespace(
        url="http://127.0.0.1:8123",
        names=[TUNED],
        log_path="server.log",
        proc=SimpleNamespace(wait=wait),
        log_tail=lambda: "",
        stop=lambda: stopped.append(1),
    )
    if ending != "refused":  # refused: the real start(), which refuses port 70000 before starting anything
        monkeypatch.setattr(serve_local, "start", lambda *args, **kwargs: fake)
        monkeypatch.setattr(serve_local, "wait_ready", lambda *args, **kwargs: 1.0)  # as serve_forever looks it up
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.getsignal(sig) for sig in sigs}
    try:
        if ending == "refused":
            with pytest.raises(UserError, match="port 70000 is not a TCP port"):
                serve_local.serve_forever(tiny_model_dir, TUNED, port=70000)
        elif ending == "sigterm":
            with pytest.raises(SystemExit) as exit_info:
                serve_local.serve_forever(tiny_model_dir, TUNED)
            assert exit_info.value.code == 128 + signal.SIGTERM and stopped == [1]
        else:
            assert serve_local.serve_forever(tiny_model_dir, TUNED) == 1 and stopped == [1]  # status 0: still a failure
        assert {sig: signal.getsignal(sig) for sig in sigs} == before
    finally:  # a failure above must not leave pytest with serve_forever's handlers
        for sig, handler in before.items():
            signal.signal(sig, handler)


# `python -m trainer serve` with a stand-in for vLLM (tests/fakes/fake_vllm.py), which is slow to stop as vLLM is.
FAKE_SERVE = (
    "import runpy, sys; from trainer.serving import local; local.SERVER_MODULE = 'tests.fakes.fake_vllm'; "
    "sys.argv[0] = 'trainer'; runpy.run_module('trainer', run_name='__main__', alter_sys=True)"
)


def test_a_second_ctrl_c_while_trainer_serve_stops_is_one_line_not_a_traceback(tmp_path, tiny_model_dir):
    """Ctrl-C stops the server, which takes a while; a second one (or SIGTERM) then printed a traceback and cut the
    stop short. Now it is said in a line and the stop goes on: exit 130, nothing left."""
    import os
    import subprocess
    import sys

    from tests.unit.test_procs import ROOT, TAG, survivors, tagged, wait_for
    from trainer.core import procs

    tag, release, log, console = uuid.uuid4().hex, tmp_path / "release", tmp_path / "vllm.log", tmp_path / "out.txt"
    with open(console, "w") as out:
        cli = subprocess.Popen(
            [sys.executable, "-c", FAKE_SERVE, "serve", str(tiny_model_dir), "--port", "0", "--log", str(log)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, TAG: tag, "FAKE_VLLM_RELEASE": str(release)},
            # a shell's background job (CI's `make test &`) ignores SIGINT, and a child inherits
            # that: Python then never raises KeyboardInterrupt, as a user's terminal would
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        wait_for(lambda: "Ctrl-C stops" in console.read_text(), 120, cli, "the server ready")
        cli.send_signal(signal.SIGINT)
        wait_for(lambda: "fake vLLM: SIGTERM" in log.read_text(), 60, cli, "the server told to stop")
        for n, sig in enumerate((signal.SIGINT, signal.SIGINT, signal.SIGTERM), 1):  # impatient, then a kill
            cli.send_signal(sig)  # one at a time: two pending signals of a kind are one
            wait_for(lambda: console.read_text().count("already stopping") == n, 60, cli, f"note {n}")
        release.touch()  # the server stops now
        assert cli.wait(timeout=60) == 130
        text = console.read_text()
        assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
        assert "interrupted (Ctrl-C); stopping the server" in text, text
        assert survivors(tag) == [], text
    finally:
        release.touch()
        if cli.poll() is None:
            cli.kill()
        procs.stop(tagged(tag), grace=0)


def sse(*chunks) -> list[bytes]:
    """A streamed completion as the server sends it, line by line."""
    lines = [
        f"data: {json.dumps({'object': 'chat.completion.chunk', 'model': TUNED, 'choices': [c]})}\n".encode()
        for c in chunks
    ]
    return [line for pair in zip(lines, [b"\n"] * len(lines)) for line in pair] + [b"data: [DONE]\n", b"\n"]


def test_a_streamed_tool_call_is_assembled_as_openai_clients_do():
    delta = lambda d, finish=None: {"index": 0, "delta": d, "finish_reason": finish}  # noqa: E731
    head = delta({"role": "assistant", "content": ""})
    name = delta(
        {
            "tool_calls": [
                {"index": 0, "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
            ]
        }
    )
    args = [delta({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}) for part in ('{"city"', ': "Oslo"}')]
    resp = serve_client._assemble_stream(sse(head, name, *args, delta({}, "tool_calls")))
    assert serve_client.check_response(resp, TUNED, TOOLS).reason == ""
    assert resp["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    # the call's text left unparsed in the stream (a parser that only works on whole answers)
    text = serve_client._assemble_stream(
        sse(head, delta({"content": '<tool_call>{"name": "get_weather"}'}), delta({}, "stop"))
    )
    assert "no message.tool_calls" in serve_client.check_response(text, TUNED, TOOLS).reason
    # arguments cut off mid-stream: the joined JSON does not parse
    cut = serve_client._assemble_stream(sse(head, name, args[0], delta({}, "tool_calls")))
    assert "arguments is not JSON" in serve_client.check_response(cut, TUNED, TOOLS).reason


def test_smoke_check_rejects_other_shapes():
    assert "not an OpenAI chat completion" in serve_client.check_response({"detail": "boom"}, TUNED, TOOLS).reason
    assert (
        "answered as model"
        in serve_client.check_response(completion(call("get_weather", "{}"), "other"), TUNED, TOOLS).reason
    )
    # A base model beside an adapter may answer in text, but only as text.
    assert (
        serve_client.check_response(completion({"content": "sunny"}), TUNED, TOOLS, require_tool_call=False).reason
        == ""
    )
    assert (
        "not text"
        in serve_client.check_response(completion({"content": None}), TUNED, TOOLS, require_tool_call=False).reason
    )


def test_smoke_request_picks_a_row_that_expects_a_tool_call():
    text_row = {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "tools": TOOLS,
    }
    tool_row = {
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "", **call("get_weather", '{"city": "Oslo"}')},
        ],
        "tools": TOOLS,
    }
    assert serve_client.smoke_request([text_row, tool_row]) == ([{"role": "user", "content": "weather?"}], TOOLS)
    # no row expects a call: a text answer is checked, so no tools are offered (with tools every check demands one)
    assert serve_client.smoke_request([text_row]) == ([{"role": "user", "content": "hi"}], None)


def test_server_args_carry_names_parser_and_adapters():
    args = serve_args.vllm_args(
        "/m", "base", lora_modules={"a": "/ad/a", "b": "/ad/b"}, max_lora_rank=12, tensor_parallel_size=2
    )
    assert_openai_flags(args, "base", {"a", "b"})
    assert args[args.index("--max-lora-rank") + 1] == "16"  # rounded up to a rank vLLM accepts
    assert args[args.index("--tensor-parallel-size") + 1] == "2"


def test_trainer_serve_reports_every_bad_input_at_once(tmp_path, capsys, monkeypatch):
    """A folder as --log was a traceback, after vLLM's temporary folder was made (and left): now one of the problems,
    said before anything is made."""
    from trainer.__main__ import main

    def made(*args, **kwargs):
        raise AssertionError("a temporary folder made before the problems were said")

    monkeypatch.setattr(serve_local.tempfile, "mkdtemp", made)
    with __import__("socket").socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(SystemExit) as exit_:
            main(
                [
                    "serve",
                    str(tmp_path / "missing"),
                    "--port",
                    str(busy.getsockname()[1]),
                    "--lora",
                    "no-equals",
                    "--lora",
                    f"a={tmp_path}",
                    "--log",
                    str(tmp_path),
                ]
            )
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "cannot serve (5 problems)" in err and "Traceback" not in err
    for what in (
        "NAME=ADAPTER_DIR, got 'no-equals'",
        "no config.json",
        "no adapter_config.json",
        "is in use",
        f"the server's log {tmp_path} is a directory: give a file in it, e.g. --log {tmp_path}/vllm.log",
    ):
        assert what in err


def test_an_adapter_name_given_twice_or_the_bases_own_is_refused_from_the_arguments(tmp_path, capsys, monkeypatch):
    """`--lora a=A --lora a=B` served only B; `--served-model-name x --lora x=A` started vLLM for 42 s and ended in
    its traceback. Both are refused before anything starts."""
    from trainer.__main__ import main
    from trainer.serving import local as serve_local

    monkeypatch.setattr(serve_local.subprocess, "Popen", lambda *a, **kw: pytest.fail("vLLM started"))
    for argv, said in (
        (
            ["--lora", f"a={tmp_path}/A", "--lora", f"a={tmp_path}/B"],
            f"--lora a= is given twice ({tmp_path}/A and {tmp_path}/B): vLLM would serve only the last",
        ),
        (["--served-model-name", "x", "--lora", f"x={tmp_path}/A"], "'x' is the base model's served name too"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["serve", str(tmp_path), *argv])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and said in err and "Traceback" not in err, err


def test_a_port_whose_last_connection_is_in_time_wait_is_free_to_serve_on():
    """A server just stopped leaves its port's connections in TIME_WAIT: vLLM (uvicorn, SO_REUSEADDR) binds it, so
    the check must too; it said "port ... is in use (another server?)" with nothing listening."""
    import socket

    from trainer.serving.local import bind_problem

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's listening socket
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            conn, _ = server.accept()
            conn.close()  # the server's side closes first: its end of the connection waits in TIME_WAIT
    with socket.socket() as plain:  # what the check did: refused
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    assert bind_problem("127.0.0.1", port) is None


def test_smoke_request_sends_earlier_tool_calls_in_openai_wire_format():
    """A multi-turn row (call, tool result, call): the earlier call's arguments go out as a JSON
    string with an id, and the tool result names it; vLLM answered 400 to the loaded dicts."""

    def call(city):
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}],
        }

    row = {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Paris, then Rome?"},
            call("Paris"),
            {"role": "tool", "content": "sunny"},
            call("Rome"),
        ],
    }
    messages, tools = serve_client.smoke_request([row])
    assert tools == TOOLS and [m["role"] for m in messages] == ["user", "assistant", "tool"]
    sent = messages[1]["tool_calls"][0]
    assert sent["function"]["arguments"] == '{"city": "Paris"}' and sent["id"] and sent["type"] == "function"
    assert messages[2]["tool_call_id"] == sent["id"]
    assert row["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}  # the row is untouched
    answered = {**row, "messages": [*row["messages"][:3], {"role": "assistant", "content": "Sunny in Paris."}]}
    messages, tools = serve_client.smoke_request([answered])  # a text answer is expected: no tools, so no call demanded
    assert tools is None and messages[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'


# --- the tool-call parser follows the model's chat template ------------------------------------

# How Llama 3.x's own chat template writes an assistant's tool call (the branch of
# meta-llama/Llama-3.2-1B-Instruct's template that custom tools take, verbatim), which a Llama
# fine-tuned on tool-call rows learns to emit: a bare JSON object, no <tool_call> tags.
LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- if tools is not none %}{{- '<|start_header_id|>system<|end_header_id|>\n\n"
    "Environment: ipython\n<|eot_id|>' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}"
    "{%- elif 'tool_calls' in message %}"
    "{%- if not message.tool_calls|length == 1 %}"
    "{{- raise_exception(\"This model only supports single tool-calls at once!\") }}{%- endif %}"
    "{%- set tool_call = message.tool_calls[0].function %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}"
    "{{- '{\"name\": \"' + tool_call.name + '\", ' }}{{- '\"parameters\": ' }}{{- tool_call.arguments | tojson }}"
    "{{- \"}\" }}{{- \"<|eot_id|>\" }}"
    "{%- else %}{{- \"<|start_header_id|>ipython<|end_header_id|>\n\n\" + message.content + \"<|eot_id|>\" }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}"
)
LLAMA3_TOKENS = ["<|begin_of_text|>", "<|eot_id|>", "<|python_tag|>", "<|start_header_id|>", "<|end_header_id|>"]


def _write_tree(root, template: str | None = None, tokens=(), config_template=None):
    root.mkdir(parents=True, exist_ok=True)
    if template is not None:
        (root / "chat_template.jinja").write_text(template)
    (root / "tokenizer.json").write_text(
        json.dumps({"added_tokens": [{"id": i, "content": t, "special": True} for i, t in enumerate(tokens)]})
    )
    (root / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": config_template} if config_template else {})
    )
    return root


def test_tool_call_parser_follows_the_chat_template(tmp_path, tiny_model_dir):
    """hermes only for templates that write <tool_call>: a Llama 3 model served with hermes answers
    every tool request with the call as plain `content`, and the smoke test fails after training."""
    from transformers.utils.chat_template_utils import render_jinja_template  # noqa: F401 - what the probe uses

    assert serve_args.model_tool_call_parser(tiny_model_dir) == "hermes"  # <tool_call>{...}</tool_call>
    assert (
        serve_args.model_tool_call_parser(_write_tree(tmp_path / "llama", LLAMA3_TEMPLATE, LLAMA3_TOKENS))
        == "llama3_json"
    )
    # vLLM's llama3_json parser will not start without <|python_tag|> in the vocabulary: not chosen then
    assert (
        serve_args.model_tool_call_parser(_write_tree(tmp_path / "no-tag", LLAMA3_TEMPLATE, ["<|eot_id|>"])) == "hermes"
    )
    mistral = (
        "{%- for m in messages %}{%- if m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | map(attribute='function') "
        "| list | tojson }}{%- else %}[INST]{{ m.content }}[/INST]{%- endif %}{%- endfor %}"
    )
    assert serve_args.tool_call_parser(mistral, ["[TOOL_CALLS]"]) == "mistral"
    # vLLM's mistral parser will not start without the [TOOL_CALLS] token either: not chosen then
    assert serve_args.tool_call_parser(mistral) == "hermes"
    # a tree keeping its added tokens outside tokenizer.json (a SentencePiece tokenizer.model beside
    # tokenizer_config.json's added_tokens_decoder, or added_tokens.json): read there too, as training reads them
    sentencepiece = tmp_path / "sentencepiece"
    sentencepiece.mkdir()
    (sentencepiece / "chat_template.jinja").write_text(mistral)
    (sentencepiece / "tokenizer_config.json").write_text(
        json.dumps({"added_tokens_decoder": {"9": {"content": "[TOOL_CALLS]", "special": True}}})
    )
    assert serve_args.model_tool_call_parser(sentencepiece) == "mistral"
    (sentencepiece / "tokenizer_config.json").write_text("{}")
    assert serve_args.model_tool_call_parser(sentencepiece) == "hermes"
    (sentencepiece / "added_tokens.json").write_text(json.dumps({"[TOOL_CALLS]": 9}))
    assert serve_args.model_tool_call_parser(sentencepiece) == "mistral"
    # tokenizer_config.json's named templates (Hermes / Qwen style): the tool_use one decides
    named = [
        {"name": "default", "template": "{% for m in messages %}{{ m.content }}{% endfor %}"},
        {"name": "tool_use", "template": LLAMA3_TEMPLATE},
    ]
    assert (
        serve_args.model_tool_call_parser(_write_tree(tmp_path / "named", None, LLAMA3_TOKENS, named)) == "llama3_json"
    )
    # no template, one that drops tool calls, one that cannot render them: hermes, as before
    assert serve_args.model_tool_call_parser(_write_tree(tmp_path / "none", None)) == "hermes"
    assert serve_args.tool_call_parser("{% for m in messages %}{{ m.content }}{% endfor %}") == "hermes"
    assert serve_args.tool_call_parser("{{ raise_exception('no tools here') }}") == "hermes"
    args = serve_local.local_args(_write_tree(tmp_path / "llama", LLAMA3_TEMPLATE, LLAMA3_TOKENS), "m")
    assert args[args.index("--tool-call-parser") + 1] == "llama3_json"
    # the delivered template file (the one training used) is what vLLM renders with; none: the tokenizer's
    assert args[args.index("--chat-template") + 1] == str(tmp_path / "llama" / "chat_template.jinja")
    assert "--chat-template" not in serve_local.local_args(
        _write_tree(tmp_path / "named2", None, LLAMA3_TOKENS, named), "m"
    )


def test_stored_model_parser_reads_only_the_tokenizer_files(store, tmp_path):
    """A cluster deploy decides --tool-call-parser from the model tree in S3 without its weights."""
    tree = _write_tree(tmp_path / "llama", LLAMA3_TEMPLATE, LLAMA3_TOKENS)
    (tree / "model.safetensors").write_bytes(b"\0" * 1024)
    uri, _ = store.put_tree(tree, "models")
    fetched = []
    real_get = store.client.get_object
    store.client.get_object = lambda bucket, key, *a, **kw: (
        fetched.append(key.rsplit("/", 1)[1]) or real_get(bucket, key, *a, **kw)
    )
    assert serve_args.stored_tool_call_parser(store, uri) == "llama3_json"
    assert "model.safetensors" not in fetched and "chat_template.jinja" in fetched


def test_cluster_servers_get_the_models_parser_and_kserve_runtime_stays_model_free():
    """The parser is per model: on the Deployment's command line, and on the InferenceService (not
    the ServingRuntime, which one Llama and one Qwen deploy in a namespace share)."""
    from trainer.deploy import deployment as vllm_deployment, kserve
    from trainer.deploy.base import ServeSpec

    spec = ServeSpec(name="llama-fc", model_uri="s3://b/models/sha256-a", tool_call_parser="llama3_json")
    deployment, _ = vllm_deployment.build(spec)
    command = deployment.spec.template.spec.containers[0].command
    assert command[command.index("--tool-call-parser") + 1] == "llama3_json"
    runtime, isvc = kserve.build(spec)
    assert "--tool-call-parser" not in runtime["spec"]["containers"][0]["args"]
    assert isvc["spec"]["predictor"]["model"]["args"][:2] == ["--tool-call-parser", "llama3_json"]
    assert "--enable-auto-tool-choice" in runtime["spec"]["containers"][0]["args"]


def test_deploy_k8s_refuses_a_parser_name_vllm_would_read_as_a_flag(capsys):
    from trainer.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["deploy-k8s", "--dry-run", "--name", "m", "--model-uri", "s3://b/m", "--tool-call-parser=--hermes"])
    assert (
        exit_.value.code == 2
        and "tool_call_parser='--hermes' is not a vLLM tool-call parser" in capsys.readouterr().err
    )


@pytest.mark.parametrize("name", ["", "   ", "-tuned", "my model", "tab\tname", "--served"])
def test_one_served_name_rule_for_the_pipeline_and_the_server(name):
    """served_model_name in run_local / submit / the validate-params step and the server's own
    check (serve, deploy) give the same message, from one rule."""
    from trainer.core.errors import UserError
    from trainer.validate import pipeline_problems

    [expected] = serve_args.served_name_problems(name)
    for backend in ("local", "kubernetes"):  # on a cluster the Service name rule is not piled on top
        found = [
            p
            for p in pipeline_problems({"served_model_name": name, "deploy_backend": backend})
            if "served_model_name" in p
        ]
        assert found == [expected]
    with pytest.raises(UserError) as err:
        serve_local.start("/nonexistent", name, port=70000)
    assert expected in str(err.value)


def test_default_served_name_is_a_valid_name(tmp_path):
    assert serve_args.default_served_name(tmp_path / "my merged model") == "my-merged-model"
    assert serve_args.served_name_problems(serve_args.default_served_name(tmp_path / "-x")) == []


@pytest.mark.parametrize(
    "host, expected",
    [
        ("nonsense.invalid", "--host 'nonsense.invalid' does not resolve; use 127.0.0.1"),
        ("192.0.2.1", "--host '192.0.2.1' is not an address of this machine"),  # TEST-NET-1: never ours
    ],
)
def test_trainer_serve_names_a_host_it_cannot_listen_on(tmp_path, capsys, host, expected):
    """Not "port in use": the host is what is wrong."""
    from trainer.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["serve", str(tmp_path / "missing"), "--host", host, "--port", "8123"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and expected in err and "in use" not in err and "Traceback" not in err


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_trainer_serve_refuses_a_port_out_of_range(tmp_path, capsys, port):
    from trainer.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["serve", str(tmp_path / "missing"), "--port", port])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"port {port} is not a TCP port" in err and "no config.json" in err and "Traceback" not in err


def test_adapter_vllm_cannot_load_is_refused_before_starting(tmp_path):
    from trainer.core.errors import UserError

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text(
        json.dumps({"r": 16, "modules_to_save": ["embed_tokens"]})
    )
    with pytest.raises(UserError, match=r"trains \['embed_tokens'\] in full.*lora_train_embeddings=false"):
        serve_local.start(tmp_path / "model", "m", lora_modules={"a": str(tmp_path / "adapter")})
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps({"r": 16, "use_dora": True}))
    with pytest.raises(UserError, match=r"a DoRA adapter, which vLLM cannot load; serve the merged model"):
        serve_local.start(tmp_path / "model", "m", lora_modules={"a": str(tmp_path / "adapter")})


def test_an_adapter_of_another_model_or_trained_on_another_template_is_refused_before_starting(
    tiny_model_dir, tmp_path
):
    """vLLM loaded an adapter of another base for half a minute, then failed with "The size of tensor a (128) must
    match ... (576)"; an adapter trained with another chat template was served under the base's and answered '' to
    tool requests, without a word. Both are refused up front (and merge refuses the first: trainer.models.weights)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from tests.unit.test_eval_served import _adapter
    from trainer.core.errors import UserError
    from trainer.models.weights import adapter_fit_problems

    adapter = _adapter(tiny_model_dir, tmp_path / "adapter")
    assert adapter_fit_problems(tiny_model_dir, adapter, "a") == []  # its own base: fits
    other = Path(shutil.copytree(adapter, tmp_path / "other"))
    weights = load_file(other / "adapter_model.safetensors")
    key = next(k for k in weights if k.endswith("q_proj.lora_A.weight"))
    # modules the base stores under other names (its own prefix, a tied lm_head) are not judged: not a refusal
    weights["base_model.model.model.vision_tower.proj.lora_B.weight"] = weights[key][:4, :8].clone()
    save_file(weights, other / "adapter_model.safetensors")
    assert adapter_fit_problems(tiny_model_dir, other, "--lora x") == []
    weights[key] = weights[key].new_zeros((weights[key].shape[0], weights[key].shape[1] * 2))  # a wider model's
    save_file(weights, other / "adapter_model.safetensors")
    [problem] = adapter_fit_problems(tiny_model_dir, other, "--lora x")
    hidden = weights[key].shape[1] // 2
    assert problem.startswith("--lora x was not trained on this base model (")
    assert (
        f"{key.removeprefix('base_model.model.').removesuffix('.lora_A.weight')} has {hidden} inputs in the base, "
        f"{hidden * 2} in the adapter)" in problem
    )  # once per module
    # fan_in_fan_out (GPT-2's Conv1D stores [in, out]): the base's weight is read the other way round
    import torch

    mlp = tmp_path / "mlp"
    mlp.mkdir()
    save_file(
        {
            "base_model.model.model.layers.0.mlp.up_proj.lora_A.weight": torch.zeros(8, 128),  # up_proj: 128 -> 256
            "base_model.model.model.layers.0.mlp.up_proj.lora_B.weight": torch.zeros(256, 8),
        },
        mlp / "adapter_model.safetensors",
    )
    for flag, found in (
        (False, []),
        (True, ["model.layers.0.mlp.up_proj has 256 inputs in the base, 128 in the adapter"]),
    ):
        (mlp / "adapter_config.json").write_text(json.dumps({"r": 8, "fan_in_fan_out": flag}))
        assert [p.split(" (", 1)[1].split(")")[0] for p in adapter_fit_problems(tiny_model_dir, mlp, "m")] == found
    retemplated = Path(shutil.copytree(adapter, tmp_path / "retemplated"))
    (retemplated / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(UserError) as err:
        serve_local.start(tiny_model_dir, "m", lora_modules={"x": str(other), "y": str(retemplated)})
    assert "(2 problems)" in str(err.value) and "--lora x=" in str(err.value)
    assert (
        f"--lora y={retemplated} was trained with another chat template than {tiny_model_dir}'s (its default "
        "template differs)" in str(err.value)
    )
    # a base that keeps the older format (named templates in tokenizer_config.json) and its adapter as transformers 5
    # saves it (default in chat_template.jinja, the others under additional_chat_templates/): the same templates
    from trainer.serving.local import _named_templates

    listed = Path(shutil.copytree(tiny_model_dir, tmp_path / "listed"))
    default = (listed / "chat_template.jinja").read_text()
    (listed / "chat_template.jinja").unlink()
    config = json.loads((listed / "tokenizer_config.json").read_text())
    (listed / "tokenizer_config.json").write_text(
        json.dumps(
            {
                **config,
                "chat_template": [
                    {"name": "default", "template": default},
                    {"name": "tool_use", "template": default + "{# tools #}"},
                ],
            }
        )
    )
    saved = Path(shutil.copytree(adapter, tmp_path / "saved"))
    (saved / "additional_chat_templates").mkdir()
    (saved / "additional_chat_templates" / "tool_use.jinja").write_text(default + "{# tools #}\n")
    assert _named_templates(listed) == _named_templates(saved) and len(_named_templates(saved)) == 2
    serve_local._check_dirs(listed, {"z": str(saved)})  # not refused


def test_vllms_sockets_go_where_their_paths_fit_a_unix_socket(tmp_path, monkeypatch):
    """vLLM names its IPC sockets <VLLM_RPC_BASE_PATH>/<uuid4>; under a deep TMPDIR (run_local's inside
    a test's) the path passes 107 characters and vLLM fails to start (ZMQError)."""
    import tempfile

    from trainer.core.errors import UserError

    with tempfile.TemporaryDirectory(dir="/tmp") as short:  # a short TMPDIR is used as it is
        monkeypatch.setattr(tempfile, "tempdir", short)
        assert serve_local._socket_base() == short
    deep = tmp_path / ("d" * 80)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    base = serve_local._socket_base()
    assert base == "/tmp" and len(f"{base}/vllm-rpc-XXXXXXXX/{uuid.uuid4()}") <= 107
    monkeypatch.setattr(serve_local.os, "access", lambda path, mode: False)  # nowhere short to write
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    with pytest.raises(
        UserError, match=f"TMPDIR {deep} is too long for vLLM's Unix sockets .* set TMPDIR to a shorter directory"
    ) as err:
        serve_local.start(tmp_path / "model", "m")
    assert "no config.json" in str(err.value)  # with the other problems, before anything starts


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"serve_adapters": True, "lora_train_embeddings": True}, "set lora_train_embeddings=false"),
        ({"serve_adapters": True, "method": "full", "lora_train_embeddings": False}, "makes no adapter"),
        ({"serve_adapters": True, "lora_train_embeddings": False}, None),
    ],
)
def test_serve_adapters_needs_an_adapter_vllm_can_load(params, expected):
    from trainer.validate import pipeline_problems

    problems = [p for p in pipeline_problems(params) if "serve_adapters" in p]
    assert (expected in problems[0] and len(problems) == 1) if expected else problems == []


def assert_openai_flags(args: list[str], name: str, adapters: set[str] = frozenset()) -> None:
    """What makes an endpoint behave the same everywhere: the name clients use, tool calls parsed
    into `tool_calls`, and each adapter answering under its own name."""
    assert args[args.index("--served-model-name") + 1] == name
    assert "--enable-auto-tool-choice" in args and args[args.index("--tool-call-parser") + 1] == "hermes"
    if adapters:
        assert "--enable-lora" in args
        i = args.index("--lora-modules") + 1
        mods = []
        while i < len(args) and not args[i].startswith("--"):
            mods.append(args[i].split("=", 1)[0])
            i += 1
        assert set(mods) == adapters
    else:
        assert "--enable-lora" not in args


@pytest.mark.parametrize(
    "text, said",
    [
        ('{"r": 16, "lora_alpha"', "cannot be read (Expecting"),
        ("[16]", "holds no JSON object"),
        ('{"r": "16"}', "gives the rank r='16'"),
    ],
)
def test_serve_with_a_damaged_adapter_config_is_one_line_naming_the_file(tmp_path, capsys, text, said):
    """A damaged adapter_config.json was a JSONDecodeError traceback."""
    from trainer.__main__ import main

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "adapter").mkdir()
    cfg = tmp_path / "adapter" / "adapter_config.json"
    cfg.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        main(["serve", str(tmp_path / "model"), "--lora", f"q={tmp_path / 'adapter'}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--lora q={tmp_path / 'adapter'}: {cfg} {said}" in err and "Traceback" not in err
    assert "copy the adapter directory again from its run's output, or pass another adapter" in err


@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_serve_with_an_adapter_config_that_is_no_regular_file_is_refused_without_reading_it(tmp_path, capsys, kind):
    """Issue 57 F3: an adapter_config.json linked to /dev/zero was read into memory (the kernel stopped the process at
    21 GB), a FIFO waited for a writer forever; `runs` already refused such files."""
    import os

    from trainer.__main__ import main

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "adapter").mkdir()
    cfg = tmp_path / "adapter" / "adapter_config.json"
    if kind == "fifo":
        os.mkfifo(cfg)
    else:
        cfg.symlink_to("/dev/zero")
    with pytest.raises(SystemExit) as exit_:
        main(["serve", str(tmp_path / "model"), "--lora", f"q={tmp_path / 'adapter'}"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert (
        f"--lora q={tmp_path / 'adapter'}: {cfg} is not a regular file (a FIFO, a device or a socket): give the file "
        "itself; copy the adapter directory again from its run's output" in err
    ), err


def test_a_config_file_larger_than_any_config_is_refused(tmp_path, monkeypatch):
    from trainer.core import jsontext

    monkeypatch.setattr(jsontext, "CONFIG_MAX_BYTES", 10)
    (tmp_path / "c.json").write_text('{"r": 16, "x": 1}')
    with pytest.raises(OSError, match="is 17 bytes, more than a config file holds"):
        jsontext.config_text(tmp_path / "c.json")
    (tmp_path / "s.json").write_text("{}")
    assert jsontext.config_text(tmp_path / "s.json") == "{}"


def test_a_request_the_server_does_not_answer_in_time_is_one_message_not_a_traceback():
    """A vLLM server on cores another heavy process shares took over 600 s on one BFCL request: the evaluate step
    died with a socket's TimeoutError traceback. Now one line names the request, the limit and what to do."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts, never answers
    port = listener.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    try:
        with pytest.raises(serve_client.UserError) as err:
            serve_client.post(f"http://127.0.0.1:{port}/v1/chat/completions", {"model": "m"}, 0.5, "chat for 'm'")
        assert str(err.value) == (
            f"chat for 'm' got no answer from http://127.0.0.1:{port}/v1/chat/completions within 0.5 s: the server is "
            "overloaded or stuck; run nothing heavy beside it, or ask fewer rows (eval_max_rows, bfcl_rows)"
        )
    finally:
        for conn, _ in accepted:
            conn.close()
        listener.close()


def test_the_smoke_check_says_whose_fault_as_a_value():
    """Checked.verdict is decided where the reason is found (no matching of message prefixes afterwards): what the
    model said is an unusable reply, a broken protocol is the server's."""
    ok = call("get_weather", '{"city": "Paris"}')
    server = [
        completion(ok, finish_reason="stop"),
        completion({"tool_calls": [{**ok["tool_calls"][0], "id": ""}]}),
        completion(ok, "other"),
        {"detail": "boom"},
    ]
    model = [
        completion({"content": "sunny"}),
        completion(call("get_time", "{}")),
        completion(call("get_weather", "{city: Paris")),
        completion(call("get_weather", '["Paris"]')),
    ]
    assert {serve_client.check_response(r, TUNED, TOOLS).verdict for r in server} == {"server_error"}
    assert {serve_client.check_response(r, TUNED, TOOLS).verdict for r in model} == {"unusable_reply"}
    assert serve_client.check_response(completion(ok), TUNED, TOOLS) == serve_client.OK


def test_deploy_serves_with_any_backend_and_chooses_by_name_in_one_place():
    """trainer.deploy.base.ServeBackend is the contract: deploy hands the spec, request and tools to whatever backend it
    is given (here a fake that answers like a server with one unusable reply) and turns its answer into Deployed;
    `backend` maps each name to its backend and refuses others."""
    from trainer import deploy as deploying
    from trainer.core.errors import UserError
    from trainer.deploy import deployment, kserve, llmisvc
    from trainer.deploy.base import Deployed, ServeSpec

    class Fake:
        asked: list = []

        def build(self, spec):
            return []

        def deploy(self, spec, messages, tools=None, client_configuration=None, poll_s=5.0):
            self.asked.append((spec.name, messages, tools, poll_s))
            results = {
                spec.name: {"ok": False, "reason": "empty reply", "verdict": "unusable_reply", "latency_s": 0.4},
                "base": {"ok": True, "reason": "", "verdict": "ok", "latency_s": 0.2},
            }
            return Deployed("http://svc/v1", [spec.name, "base"], results, 0.4)

    spec = ServeSpec(name=TUNED, model_uri="s3://b/models/sha256-x")
    messages = [{"role": "user", "content": "weather?"}]
    fake = Fake()
    out = deploying.deploy(fake, spec, None, messages, TOOLS, poll_s=0.5)
    assert fake.asked == [(TUNED, messages, TOOLS, 0.5)]
    assert out.endpoint == "http://svc/v1" and out.names == [TUNED, "base"] and not out.smoke_ok
    outcome = serve_client.smoke_outcome(out.results)
    assert outcome["server_ok"] and "empty reply" in outcome["warning"]

    chosen = [deploying.backend(n) for n in ("kubernetes", "kserve", "llmisvc")]
    assert [type(b) for b in chosen] == [deployment.Deployment, kserve.KServe, llmisvc.LLMInferenceService]
    assert deploying.CLUSTER_BACKENDS == ("kubernetes", "kserve", "llmisvc")
    assert isinstance(deploying.backend("local", store=object(), keep_serving=True), deploying.LocalBackend)
    with pytest.raises(ValueError, match="needs the store"):
        deploying.backend("local")
    with pytest.raises(UserError, match="deploy backend must be one of local, kubernetes, kserve, llmisvc, got 'ray'"):
        deploying.deploy("ray", spec, None, messages)


def test_a_cpu_server_sizes_its_kv_cache_from_the_pod_not_the_node():
    """vLLM's CPU backend reserves 0.92 of the node's memory unless told a size: in a pod that is OOM-killed on a
    large node and refused on a busy one (it was, in the CPU container of tests/images)."""
    from trainer.deploy import deployment, server
    from trainer.deploy.base import ServeSpec
    from trainer.k8s.podspec import ClusterSpec

    def rendered(**cluster) -> list[str]:
        spec = ServeSpec(name="m", model_uri="s3://b/models/sha256-x", gpus=cluster.pop("gpus", 0),
                         cluster=ClusterSpec(**cluster))  # fmt: skip
        return server.server_args(spec, "m", deployment.MODEL_DIR, deployment.PORT)

    small = rendered(memory="8Gi", accelerator_resource="")
    assert small[small.index("--kv-cache-memory-bytes") + 1] == str(2 << 30)  # a quarter of the limit
    large = rendered(memory="256Gi", accelerator_resource="")
    assert large[large.index("--kv-cache-memory-bytes") + 1] == str(4 << 30)  # at most 4 GiB
    assert "--kv-cache-memory-bytes" not in rendered(memory="64Gi", gpus=1)  # a GPU keeps vLLM's own fraction


@pytest.mark.parametrize("kept", [False, True])
def test_the_local_backend_says_whether_its_server_stopped_with_the_deploy(monkeypatch, kept):
    """A local server not kept stops after its smoke test: the deploy steps then say "served at (now stopped)" and
    give no endpoint (Deployed.stopped); one kept (its pgid given) and every cluster backend's stays up."""
    from trainer.deploy import local as local_backend
    from trainer.deploy.base import Deployed, ServeSpec

    class Store:
        def get_tree(self, uri):
            return Path("/models") / uri.rsplit("/", 1)[-1]

    answered = {"endpoint": "http://127.0.0.1:9/v1", "names": ["m"], "results": {}, "latency_s": 0.1}
    monkeypatch.setattr(
        local_backend.local, "deploy_local", lambda *a, **kw: {**answered, "pgid": 77 if kw["keep_serving"] else None}
    )
    out = local_backend.LocalBackend(store=Store(), keep_serving=kept).deploy(ServeSpec("m", "s3://b/models/x"), [])
    assert out.stopped is not kept and out.pgid == (77 if kept else None)
    assert "stopped" not in out.as_dict()  # what deploy-k8s prints is unchanged
    assert Deployed("u", [], {}, 0.0).stopped is False  # a cluster backend's result: the server stays
