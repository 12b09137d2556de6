"""The served endpoint as an OpenAI application sees it: the official `openai` client against
vLLM serving the merged model the demo deploys (started once, through `python -m trainer serve`),
the same flag checks on the cluster Deployment's arguments (--dry-run), base + adapter side by
side through the deploy component, and SIGTERM taking the whole server down.

The model is the built-in tiny one, fine-tuned briefly (LoRA, 150 steps) through the pipeline's
component functions (their outputs checked here too, evaluate's included) so that it answers a tool
request with `<tool_call>{...}</tool_call>`, which vLLM's hermes parser turns into `message.tool_calls`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from kfp.dsl import HTML, Dataset, Markdown, Metrics, Model

from trainer.serving import args as serve_args, client as serve_client, local as serve_local
from tests.unit.test_serve_openai import LLAMA3_TEMPLATE, LLAMA3_TOKENS, TOOLS, TUNED, art, assert_openai_flags


# --- the real server --------------------------------------------------------------------------

STEPS = 400


@pytest.fixture(scope="module")
def tuned(s3_env, tmp_path_factory):
    """The demo's chain on a budget: deliver, fine-tune (LoRA, no embedding training, so vLLM can
    also load the adapter), merge. Returns the artifacts."""
    from components.deliver_dataset import deliver_dataset
    from components.deliver_model import deliver_model
    from components.finetune import finetune
    from components.merge_lora import merge_lora

    tmp = tmp_path_factory.mktemp("served")
    a = {n: art(Model, tmp, n) for n in ("model", "adapter", "merged")}
    a.update(dataset=art(Dataset, tmp, "dataset"), train_metrics=art(Metrics, tmp, "m"), report=art(HTML, tmp, "r"))
    deliver_model.python_func(source="builtin:tiny-llama", revision="", model=a["model"])
    deliver_dataset.python_func(
        source="builtin:function-calling", revision="", eval_fraction=0.1, seed=0, dataset=a["dataset"]
    )
    finetune.python_func(
        base_model=a["model"],
        dataset=a["dataset"],
        run_id="serve-test",
        adapter=a["adapter"],
        metrics=a["train_metrics"],
        report=a["report"],
        nodes=1,
        max_steps=STEPS,
        batch_tokens=1024,
        lora_train_embeddings=False,
        lora_r=16,
        lora_alpha=32,
        learning_rate=1.5e-3,
    )  # what STEPS was chosen with
    merge_lora.python_func(base_model=a["model"], adapter=a["adapter"], merged=a["merged"])
    return a


def test_the_finetune_evaluate_and_merge_components_record_their_outputs(tuned, tmp_path, capsys):
    """Each component's Python function on real temp-path artifacts and S3 (the chain above), evaluate
    included."""
    from components.evaluate import evaluate

    model, adapter, merged = tuned["model"], tuned["adapter"], tuned["merged"]
    page = open(tuned["report"].path).read()
    assert page.startswith("<!doctype html>") and "data:image/png;base64," in page and "train_loss" in page
    assert adapter.metadata["uri"] != model.metadata["uri"] and adapter.metadata["method"] == "lora"
    assert tuned["train_metrics"].metadata["train_steps"] == STEPS
    assert tuned["train_metrics"].metadata["world_size"] == 1

    scores, examples = art(Metrics, tmp_path, "scores"), art(Markdown, tmp_path, "examples")
    answers = art(Dataset, tmp_path, "bfcl-answers")
    evaluate.python_func(
        base_model=model,
        tuned_model=adapter,
        dataset=tuned["dataset"],
        metrics=scores,
        examples=examples,
        bfcl_answers=answers,
        max_rows=8,
    )
    assert open(answers.path).read() == ""  # eval_suites=heldout: no BFCL rows asked
    # no text rows in these 8: no text_match / text_eval_loss (a logged 0 would read as measured)
    # and of the BFCL categories only `multiple` (3-4 tools offered, one call) and `simple` (one tool): the others
    # are not measured
    ast = {"fc_ast_accuracy", "fc_exact_accuracy", "fc_multiple_accuracy", "fc_simple_accuracy"}
    names = {f"{m}_{k}" for m in ("base", "tuned") for k in ("eval_loss", "fc_accuracy", *ast)}
    # eval_turns: the assistant turns asked; fc_<category>_lost / _won: the gate's McNemar counts, for the
    # categories the rows have
    assert set(scores.metadata) == names | ast | {
        "fc_accuracy_gain",
        "fc_ast_accuracy_gain",
        "eval_rows",
        "fc_rows",
        "text_rows",
        "skipped_long_rows",
        "promoted",
        "eval_turns",
        "merge_scale",
    } | {f"fc_{c}_rows" for c in ("simple", "multiple", "parallel", "irrelevance", "multi_turn")} | {
        f"fc_{c}_{k}" for c in ("simple", "multiple") for k in ("lost", "won")
    }
    assert scores.metadata["fc_multiple_rows"] == 7 and scores.metadata["fc_simple_rows"] == 1
    assert scores.metadata["fc_irrelevance_rows"] == 0
    assert scores.metadata["fc_ast_accuracy"] == scores.metadata["tuned_fc_ast_accuracy"]
    assert scores.metadata["skipped_long_rows"] == 0
    assert scores.metadata["eval_rows"] == 8 and scores.metadata["fc_rows"] == 8 and scores.metadata["text_rows"] == 0
    assert scores.metadata["tuned_eval_loss"] < scores.metadata["base_eval_loss"]
    assert "| function-calling accuracy (8 tool-call turns) |" in open(examples.path).read()
    # a sweep's trial: pick_best gates it, so no "promoted" against the gate of 0 nobody set
    capsys.readouterr()
    trial = art(Metrics, tmp_path, "trial")
    evaluate.python_func(
        base_model=model,
        tuned_model=adapter,
        dataset=tuned["dataset"],
        metrics=trial,
        examples=art(Markdown, tmp_path, "trial-examples"),
        bfcl_answers=art(Dataset, tmp_path, "trial-answers"),
        max_rows=4,
        gate=False,
    )
    assert "promoted" not in trial.metadata and trial.metadata["eval_rows"] == 4
    assert "promoted" not in capsys.readouterr().out

    assert merged.metadata["uri"] not in (model.metadata["uri"], adapter.metadata["uri"])


def test_evaluate_scores_each_merge_scale_and_the_merge_step_merges_at_the_chosen_one(tuned, tmp_path, capsys):
    """Issue 56 item 3: the tuned model scored at each merge scale on the same rows, the base once (kept by the
    first scale, reused by the next), every scale's accuracies logged, the chosen one's under the plain names; the
    merge step merges at the scale it is given."""
    from components.evaluate import evaluate
    from components.merge_lora import merge_lora

    scores = art(Metrics, tmp_path, "scores")
    promoted, reason, scale = evaluate.python_func(
        base_model=tuned["model"],
        tuned_model=tuned["adapter"],
        dataset=tuned["dataset"],
        metrics=scores,
        examples=art(Markdown, tmp_path, "examples"),
        bfcl_answers=art(Dataset, tmp_path, "answers"),
        max_rows=6,
        eval_engine="hf",
        merge_scales="1.0,0.5",
    )
    out = capsys.readouterr().out
    m = scores.metadata
    assert scale in (1.0, 0.5) and m["merge_scale"] == scale
    assert {"scale100_fc_ast_accuracy", "scale50_fc_ast_accuracy"} <= set(m)
    assert m["fc_ast_accuracy"] == m[f"scale{round(scale * 100)}_fc_ast_accuracy"]
    assert f"merge scale {scale:g} chosen of 1, 0.5" in out and "base scores reused from" in out
    # each scale's scores and verdict as soon as it is scored: scale 1's before scale 0.5 is asked
    assert out.index("merge scale 1 scored:") < out.index("evaluate: the tuned model at merge scale 0.5")
    assert out.count("  gate: ") == 2 and "merge scale 0.5 scored:" in out
    assert f" at merge scale {scale:g} (of 1, 0.5; {0.5 if scale == 1 else 1:g}: " in reason
    half = art(Model, tmp_path, "half")
    merge_lora.python_func(base_model=tuned["model"], adapter=tuned["adapter"], merged=half, scale=0.5)
    assert half.metadata["merge_scale"] == 0.5 and half.metadata["uri"] != tuned["merged"].metadata["uri"]


@pytest.fixture(scope="module")
def tree(tuned):
    from components.artifacts import read_uri
    from trainer.core.storage import Store

    store = Store.from_env()
    return lambda name: store.get_tree(read_uri(tuned[name]))


@pytest.mark.parametrize("template", ["builtin", "llama3"])
def test_the_chosen_vllm_parser_reads_what_the_template_writes(template, tiny_model_dir):
    """What a model fine-tuned with its template emits (the template's own rendering of a call),
    read by the vLLM parser chosen for that template, gives OpenAI tool_calls."""
    from transformers import AutoTokenizer
    from transformers.utils.chat_template_utils import render_jinja_template
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    chat_template = tokenizer.chat_template
    if template == "llama3":
        tokenizer.add_special_tokens({"additional_special_tokens": LLAMA3_TOKENS})
        chat_template = LLAMA3_TEMPLATE
    parser_name = serve_args.tool_call_parser(
        chat_template, [t.content for t in tokenizer.added_tokens_decoder.values()]
    )
    assert parser_name == {"builtin": "hermes", "llama3": "llama3_json"}[template]
    user = [{"role": "user", "content": "Weather in Oslo?"}]
    answer = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
    }
    prompt, full = (
        render_jinja_template(
            conversations=[conv],
            tools=TOOLS,
            chat_template=chat_template,
            add_generation_prompt=gen,
            bos_token="",
            eos_token="",
        )[0][0]
        for conv, gen in ((user, True), ([*user, answer], False))
    )
    emitted = full[len(prompt) :]
    for end in ("<|eot_id|>", "<|end|>"):  # generation stops at the end-of-turn token: not in the text
        emitted = emitted.removesuffix(end)
    request = ChatCompletionRequest(model=TUNED, messages=user, tools=TOOLS)
    parsed = ToolParserManager.get_tool_parser(parser_name)(tokenizer).extract_tool_calls(emitted, request)
    assert parsed.tools_called, emitted
    [tool_call] = parsed.tool_calls
    assert tool_call.function.name == "get_weather" and json.loads(tool_call.function.arguments) == {"city": "Oslo"}


@pytest.fixture(scope="module")
def rows(tree):
    with open(tree("dataset") / "eval.jsonl") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def server(tree, tmp_path_factory):
    """`python -m trainer serve` on the merged model, as a user starts it."""
    log = tmp_path_factory.mktemp("log") / "vllm.log"
    port = serve_local.free_port()
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer",
            "serve",
            str(tree("merged")),
            "--served-model-name",
            TUNED,
            "--port",
            str(port),
            "--log",
            str(log),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        serve_client.wait_ready(url, timeout=300)
    except BaseException:
        cli.kill()
        raise AssertionError(
            f"trainer serve did not become ready:\n{cli.stdout.read() if cli.poll() else ''}\n"
            f"{log.read_text()[-3000:] if log.exists() else ''}"
        )
    yield cli, url, port, log
    if cli.poll() is None:
        cli.send_signal(signal.SIGTERM)
        cli.wait(timeout=60)


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=f"{server[1]}/v1", api_key="unused", max_retries=0, timeout=60)


def tool_request(rows):
    messages, tools = serve_client.smoke_request(rows)
    return dict(model=TUNED, messages=messages, tools=tools, temperature=0, max_tokens=64), tools


def test_models_list_shows_the_served_name(client):
    assert [m.id for m in client.models.list()] == [TUNED]


def test_tool_request_returns_tool_calls(client, rows):
    request, tools = tool_request(rows)
    resp = client.chat.completions.create(**request)
    choice = resp.choices[0]
    assert resp.model == TUNED and choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name in {t["function"]["name"] for t in tools}
    assert isinstance(json.loads(call.function.arguments), dict)


def test_streamed_tool_request_returns_tool_call_deltas(client, rows):
    request, tools = tool_request(rows)
    name, arguments = None, ""
    for chunk in client.chat.completions.create(**request, stream=True):
        for delta_call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            name = name or delta_call.function.name
            arguments += delta_call.function.arguments or ""
    assert name in {t["function"]["name"] for t in tools}
    assert isinstance(json.loads(arguments), dict)


def test_bad_requests_raise_the_clients_errors(client):
    import openai

    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=TUNED, messages=[])
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])


def test_smoke_test_passes_against_the_endpoint(server, rows):
    messages, tools = serve_client.smoke_request(rows)
    result = serve_client.smoke_test(server[1], TUNED, messages, tools)
    assert result["ok"], result["reason"]
    assert result["latency_s"] > 0 and result["reply"].split()[0] in {t["function"]["name"] for t in tools}


def test_local_server_and_cluster_deployment_get_the_same_flags(server, capsys):
    """The same flag checks on the running local vLLM's command line and on the cluster
    Deployment that `deploy-k8s --dry-run` prints (both built by trainer.serving.args.vllm_args)."""
    import psutil
    import yaml

    from trainer.__main__ import main

    vllm = [
        p
        for p in psutil.Process(server[0].pid).children(recursive=True)  # vLLM, not its guard (trainer.core.procs)
        if p.cmdline()[1:3] == ["-m", serve_local.SERVER_MODULE]
    ]
    assert len(vllm) == 1
    assert_openai_flags(vllm[0].cmdline(), TUNED)

    main(["deploy-k8s", "--dry-run", "--name", TUNED, "--model-uri", "s3://b/models/sha256-x"])
    main(
        [
            "deploy-k8s",
            "--dry-run",
            "--name",
            f"{TUNED}-base",
            "--model-uri",
            "s3://b/models/sha256-x",
            "--adapter",
            f"{TUNED}=s3://b/adapters/sha256-y",
        ]
    )
    deployments = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d and d["kind"] == "Deployment"]
    assert len(deployments) == 2
    for d, (name, adapters) in zip(deployments, [(TUNED, set()), (f"{TUNED}-base", {TUNED})]):
        (container,) = [c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
        assert_openai_flags([*container.get("command", []), *container.get("args", [])], name, adapters)


def test_deploy_serves_base_and_adapter_side_by_side(tuned, tmp_path, capsys, monkeypatch):
    """serve_adapters=true: one vLLM serves the base model and the LoRA adapter, each by name."""
    import tempfile

    from components.deploy import deploy

    # As under run_local, whose TMPDIR keeps the server's log until the run copies it out: called here
    # in-process, the log folder was left in the machine's /tmp after every test run.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    smoke = art(Metrics, tmp_path, "smoke")
    out = deploy.python_func(
        model=tuned["merged"],
        dataset=tuned["dataset"],
        smoke=smoke,
        base_model=tuned["model"],
        adapter=tuned["adapter"],
        serve_adapters=True,
        name=TUNED,
    )
    printed = capsys.readouterr().out
    assert smoke.metadata["served_names"] == [f"{TUNED}-base", TUNED]
    # the adapter answers the tool request with a tool call; the random base only has to answer
    assert out.smoke_ok and smoke.metadata["smoke_ok"] == 1.0, printed
    assert smoke.metadata["smoke_latency_s"] > 0 and smoke.metadata["vllm_ready_s"] > 0
    assert f"{TUNED}: ok" in printed and "smoke-tested" in printed
    assert smoke.metadata[f"reply_{TUNED}"] != smoke.metadata[f"reply_{TUNED}-base"]  # two models, not one
    assert f"(log: {tmp_path}/vllm-" in printed  # the server's log went where TMPDIR says


def _listening(port: int) -> bool:
    import psutil

    return any(c.laddr.port == port and c.status == psutil.CONN_LISTEN for c in psutil.net_connections("tcp"))


def _alive(pids: list[int]) -> list[int]:
    import psutil

    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_sigterm_to_trainer_serve_leaves_nothing_on_the_port(server):
    """Last in the module: it stops the shared server."""
    import psutil

    cli, url, port, log = server
    group = [p.pid for p in psutil.Process(cli.pid).children(recursive=True)]
    assert _listening(port) and group
    cli.send_signal(signal.SIGTERM)
    assert cli.wait(timeout=60) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while (_listening(port) or _alive(group)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _listening(port) and not _alive(group)  # vLLM and its engine process, all gone
    printed = cli.stdout.read()
    assert f"vLLM log: {log}" in printed and "tool calls read by vLLM's hermes parser" in printed
    assert os.path.getsize(log) > 0
