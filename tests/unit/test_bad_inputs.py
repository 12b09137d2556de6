"""Table of bad inputs through the real entry points: `pipelines.run_local` (finetune and sweep),
`pipelines.submit` (with --dry-run, and against a fake KFP API) and the `validate-params` step that
opens both pipelines in the KFP UI. Each must exit with status 2 and one message naming the
problem and its fix, print no traceback, and start nothing: no S3 server, no pipeline root, no
Kubernetes object rendered, no request to KFP. Most run in process (a second for the whole
table); tests/test_cli_errors.py runs a few of the same entry points as subprocesses, end to end.
"""

from functools import partial
import json
import shutil
from pathlib import Path

import pytest

from pipelines import run_local, submit
from tests.fakes.kfp_fake_api import FakeKfpAPI

GOOD_ROW = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
}


LATIN1 = (
    json.dumps(GOOD_ROW)
    + "\n"
    + json.dumps(
        {"messages": [{"role": "user", "content": "café"}, {"role": "assistant", "content": "x"}]}, ensure_ascii=False
    )
).encode("latin-1")


def jsonl(tmp_path, *lines, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def raw_file(tmp_path, data: bytes, name="data.jsonl"):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def rows(tmp_path, bad_row):
    """A dataset of good rows plus one bad one (enough rows for both splits)."""
    return jsonl(tmp_path, *[GOOD_ROW] * 10, bad_row)


def model_variant(tmp_path, model_dir, change):
    """A copy of the tiny model with one thing broken by `change(dir)`."""
    out = tmp_path / "model"
    shutil.copytree(model_dir, out)
    change(out)
    return str(out)


def no_template(d):
    (d / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((d / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(config))


SYSTEM_ROW = {"messages": [{"role": "system", "content": "Be terse."}, *GOOD_ROW["messages"]]}
REPEATED_KEY = '{"prompt": "a", "prompt": "b", "completion": "c"}'
SHAREGPT_ROW = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}


def refuses_system(d):
    template = d / "chat_template.jinja"
    template.write_text(
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}" + template.read_text()
    )


LONG_ROW = {"messages": [{"role": "user", "content": "word " * 400}, {"role": "assistant", "content": "ok"}]}


def calling(arguments):
    """A tool-calling row whose call has these arguments (a JSON string, as OpenAI sends them)."""
    return {
        "messages": [
            {"role": "user", "content": "Weather?"},
            {**CALL, "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
        ],
        "tools": [TOOL],
    }


BIG_NUMBER_ROW = (
    '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "n": ' + "9" * 5000 + "}"
)
OVERFLOWS = b"{% for i in range(200000) %}{% endfor %}{{ messages[0].content }}"  # Jinja's sandbox: OverflowError
NAN_ARGS, TWICE_ARGS = '{"city": NaN}', '{"city": "Paris", "city": "Rome"}'
TOOL_ROW = {"messages": [{"role": "user", "content": "Weather in Paris?"}, CALL], "tools": [TOOL]}


def drops_tool_calls(d):
    """A template that shows the tools but renders an assistant turn from its content only."""
    (d / "chat_template.jinja").write_text(
        "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}<|{{ m.role }}|>{{ m.content or '' }}"
        "{% generation %}{% endgeneration %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )


def as_adapter(d):
    """What `train` writes for method=lora: adapter files and the tokenizer, no config.json."""
    (d / "config.json").unlink()
    (d / "model.safetensors").rename(d / "adapter_model.safetensors")
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 16}))


def arch(name, **config):
    """A change for model_variant: config.json names another architecture (and model_type ...)."""

    def change(d):
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "architectures": [name], **config}))

    return change


def truncated(d):
    """An interrupted download: the weights file cut short."""
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])


def huge_header(d):
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes((2**62).to_bytes(8, "little") + data[8:])


def pickle_only(d):
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(b"\x80\x02c__builtin__\neval\n")  # never unpickled


def module_prefix(d):
    from safetensors.torch import load_file, save_file

    save_file({f"module.{k}": v for k, v in load_file(d / "model.safetensors").items()}, d / "model.safetensors")


def fifo(t):
    import os

    os.mkfifo(t / "chats.jsonl")
    return t / "chats.jsonl"


def sharded(d):
    (d / "model.safetensors").rename(d / "model-00001-of-00002.safetensors")
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )


def _eval_led_by(tmp_path, rows: str) -> str:
    """A dataset folder whose eval split starts with 20 rows evaluate cannot use (`rows`: "long", longer than
    max_seq_len; "text", no tool call), then 40 tool-call rows: which rows count depends on eval_max_rows."""
    from trainer.data import builtin_data

    d, built = tmp_path / f"led-by-{rows}", builtin_data.generate()  # the one-call rows alone: every one a call
    d.mkdir(exist_ok=True)
    chat = [
        {
            "messages": [
                {"role": "user", "content": "x " * 3000 if rows == "long" else f"hello {i}"},
                {"role": "assistant", "content": f"hi {i}"},
            ]
        }
        for i in range(20)
    ]
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in built["train"][:300]))
    (d / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chat + built["eval"][:40]))
    return f"dataset_source={d}"


def _chat_only(tmp_path) -> str:
    path = tmp_path / "chat.jsonl"
    path.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]})
            + "\n"
            for i in range(40)
        )
    )
    return f"dataset_source={path}"


# (id, params: callable (tmp_path, tiny model dir) -> ["key=value", ...], expected message with the fix)
CASES = [
    # sources
    ("unknown-builtin-model", lambda t, m: ["model_source=builtin:gpt-9"], "unknown built-in model 'builtin:gpt-9'"),
    ("unknown-model-scheme", lambda t, m: ["model_source=ftp://x"], "unknown model source 'ftp://x'"),
    ("missing-model-dir", lambda t, m: [f"model_source={t}/nope/"], "model path not found"),
    (
        "empty-dataset-source",
        lambda t, m: ["dataset_source= "],
        "dataset_source is empty: give builtin:function-calling",
    ),
    (
        "revision-for-a-local-model",
        lambda t, m: [f"model_source={m}", "model_revision=v2"],
        "model_revision='v2' applies to Hub ids only, but model_source",
    ),
    (
        "revision-with-space",
        lambda t, m: ["dataset_source=org/data", "dataset_revision=main "],
        "dataset_revision='main ' is not a branch, tag or commit name",
    ),
    ("missing-dataset-file", lambda t, m: [f"dataset_source={t}/train.jsonl"], "dataset path not found"),
    ("malformed-s3-uri", lambda t, m: ["dataset_source=s3://B/x"], "expected s3://bucket/prefix"),
    (
        "source-of-300-characters",
        lambda t, m: ["dataset_source=" + "a" * 300 + ".jsonl"],
        "(306 characters) is no path this machine can open (File name too long; a name between slashes has at most "
        "255 bytes)",
    ),
    ("model-source-of-300-characters", lambda t, m: ["model_source=" + "m" * 300], "(300 characters) is no path"),
    (
        "file-url-relative",
        lambda t, m: ["model_source=file://mymodels/llama"],
        "model_source file://mymodels/llama: a file:// URL names a file on this machine with an absolute path "
        "(file:///abs/path, or file://localhost/abs/path), not on host 'mymodels'; for a path relative to this folder "
        "write ./mymodels/llama",
    ),
    (
        "dataset-is-a-fifo",
        lambda t, m: [f"dataset_source={fifo(t)}"],
        "chats.jsonl is a FIFO (named pipe), not a file or a folder: pass a .jsonl",
    ),
    (
        "dataset-is-a-device",
        lambda t, m: ["dataset_source=/dev/null"],
        "dataset /dev/null is a character device, not a file or a folder",
    ),
    # a model that cannot train, found now rather than inside training (issue 9, item 3)
    (
        "model-without-weights",
        lambda t, m: [f"model_source={model_variant(t, m, lambda d: (d / 'model.safetensors').unlink())}"],
        "has config.json but no weights (*.safetensors or pytorch_model*.bin): download the whole model",
    ),
    (
        "model-malformed-config",
        lambda t, m: [f"model_source={model_variant(t, m, lambda d: (d / 'config.json').write_text('{oops'))}"],
        "config.json is not valid JSON (Expecting property name",
    ),
    (
        "model-config-without-type",
        lambda t, m: [f"model_source={model_variant(t, m, lambda d: (d / 'config.json').write_text('{}'))}"],
        "config.json has no model_type",
    ),
    (
        "model-without-chat-template",
        lambda t, m: [f"model_source={model_variant(t, m, no_template)}"],
        "has no chat template, which training needs",
    ),
    (
        "model-missing-shard",
        lambda t, m: [f"model_source={model_variant(t, m, sharded)}"],
        "lists 1 shard(s) that are missing (model-00002-of-00002.safetensors): the download is incomplete",
    ),
    (
        "model-without-tokenizer",
        lambda t, m: [f"model_source={model_variant(t, m, lambda d: (d / 'tokenizer.json').unlink())}"],
        "has no tokenizer",
    ),
    # corrupt or mismatched weights: every rank died in finetune, or trained from random weights (issue 20)
    (
        "weights-truncated",
        lambda t, m: [f"model_source={model_variant(t, m, truncated)}"],
        "model/model.safetensors is truncated: 27 of its 39 tensors lie beyond the end of the file",
    ),
    (
        "weights-header-2**62",
        lambda t, m: [f"model_source={model_variant(t, m, huge_header)}"],
        "model/model.safetensors's header claims 4,611,686,018,427,387,904 bytes but the file has",
    ),
    (
        "weights-pickle-only",
        lambda t, m: [f"model_source={model_variant(t, m, pickle_only)}"],
        "model has its weights only as pickle (pytorch_model.bin): loading a pickle runs code from the file, which "
        "this trainer never does; convert them to safetensors",
    ),
    (
        "weights-module-prefix",
        lambda t, m: [f"model_source={model_variant(t, m, module_prefix)}"],
        "the weights do not match config.json: 39 of the model's 39 weights are missing",
    ),
    (
        "weights-of-another-model",
        lambda t, m: [
            f"model_source={model_variant(t, m, arch('GPT2LMHeadModel', model_type='gpt2', n_embd=128, n_layer=2, n_head=4))}"
        ],
        "config.json and the weights are of different models",
    ),
    # not a causal LM: AutoModelForCausalLM fails, or trains from a random lm_head
    (
        "model-is-a-classifier",
        lambda t, m: [f"model_source={model_variant(t, m, arch('LlamaForSequenceClassification'))}"],
        "holds a LlamaForSequenceClassification, not a text-generating model",
    ),
    (
        "model-is-encoder-decoder",
        lambda t, m: [
            f"model_source={model_variant(t, m, arch('T5ForConditionalGeneration', model_type='t5', is_encoder_decoder=True))}"
        ],
        "is a 't5' model, not a decoder-only causal language model",
    ),
    (
        "model-type-unknown",
        lambda t, m: [f"model_source={model_variant(t, m, arch('LlamaForCausalLM', model_type='llama9'))}"],
        "model_type 'llama9' is unknown to the installed transformers",
    ),
    (
        "model-needs-remote-code",
        lambda t, m: [
            f"model_source={model_variant(t, m, arch('X', model_type='chatglm', auto_map={'AutoModelForCausalLM': 'm.X'}))}"
        ],
        "needs its own Python code (auto_map in config.json)",
    ),
    # the model's chat template raises on these rows (Gemma's refuses a system turn): found before training
    (
        "template-refuses-system",
        lambda t, m: [
            f"model_source={model_variant(t, m, refuses_system)}",
            f"dataset_source={jsonl(t, *[SYSTEM_ROW] * 3, *[GOOD_ROW] * 9)}",
        ],
        "model: the model's chat template refuses 3 of 12 rows (System role not supported; "
        "e.g. the row whose first message is system: 'Be terse.'): change those rows",
    ),
    # no row short enough: training would find none, or evaluation none to score, after delivery
    (
        "rows-longer-than-the-context",
        lambda t, m: [f"dataset_source={jsonl(t, *[LONG_ROW] * 12)}"],
        "dataset_source with model builtin:tiny-llama: no train row of the 11 checked fits max_seq_len=512 tokens (the "
        "shortest has",
    ),
    (
        "rows-longer-than-max-seq-len",
        lambda t, m: [f"dataset_source={jsonl(t, *[GOOD_ROW] * 12)}", "max_seq_len=4"],
        "no eval row of the 1 checked fits max_seq_len=4 tokens (the shortest has",
    ),
    (
        "too-few-train-rows",
        lambda t, m: [f"dataset_source={jsonl(t, *[GOOD_ROW] * 12)}", "batch_tokens=0", "batch_size=16"],
        "data.jsonl': only 11 training rows, fewer than batch_size x processes = 16 x 2",
    ),
    # with the built-in rows too: a template that raises was found only in finetune, after delivery
    (
        "template-overflow-with-builtin-data",
        lambda t, m: [f"chat_template={raw_file(t, OVERFLOWS, 'big.jinja')}"],
        "big.jinja' refuses 200 of 200 rows (OverflowError: Range too big.",
    ),
    # a user's template that does not parse: said so, not as 200 refused rows to change
    (
        "template-syntax-error",
        lambda t, m: [f"chat_template={raw_file(t, b'{% for m in messages %}{{ m.content }', 'bad.jinja')}"],
        "bad.jinja' is not valid Jinja (unexpected '}', line 1): fix the template",
    ),
    (
        "template-drops-tool-calls",
        lambda t, m: [
            f"model_source={model_variant(t, m, drops_tool_calls)}",
            f"dataset_source={jsonl(t, *[TOOL_ROW] * 4, *[GOOD_ROW] * 8)}",
        ],
        "calls dropped: 4 of 12 assistant turns (the model would learn empty answers where the calls belong)",
    ),
    (
        "adapter-as-model",
        lambda t, m: [f"model_source={model_variant(t, m, as_adapter)}"],
        "is a LoRA adapter (adapter_config.json), not a whole model: merge it into its base first",
    ),
    (
        "dataset-dir-as-model",
        lambda t, m: [f"model_source={jsonl(t, GOOD_ROW, name='train.jsonl') and t}"],
        "holds a dataset, not a model: pass it as dataset_source",
    ),
    (
        "dataset-file-as-model",
        lambda t, m: [f"model_source={jsonl(t, GOOD_ROW)}"],
        "holds a dataset, not a model: pass it as dataset_source",
    ),
    # file encodings and shapes (item 4)
    ("malformed-jsonl", lambda t, m: [f"dataset_source={jsonl(t, GOOD_ROW, '{oops')}"], "data.jsonl:2: not valid JSON"),
    (
        "binary-file",
        lambda t, m: [f"dataset_source={raw_file(t, bytes(range(256)) * 8)}"],
        "is not JSONL text (binary data): give a UTF-8 .jsonl file",
    ),
    (
        "gzip-named-jsonl",
        lambda t, m: [f"dataset_source={raw_file(t, bytes.fromhex('1f8b0800') + bytes(64))}"],
        "is not JSONL text (gzip-compressed): give a UTF-8 .jsonl file with one JSON object per line (decompress it first: gunzip data.jsonl)",
    ),
    (
        "utf16-file",
        lambda t, m: [f"dataset_source={raw_file(t, json.dumps(GOOD_ROW).encode('utf-16'))}"],
        "is not JSONL text (UTF-16 text)",
    ),
    ("latin1-file", lambda t, m: [f"dataset_source={raw_file(t, LATIN1)}"], "data.jsonl:2: not UTF-8 text (byte 0xe9"),
    (
        "json-nested-100k-deep",
        lambda t, m: [f"dataset_source={jsonl(t, GOOD_ROW, '[' * 100_000 + ']' * 100_000)}"],
        "data.jsonl:2: JSON nested too deeply",
    ),
    (
        "row-without-messages",
        lambda t, m: [f"dataset_source={jsonl(t, GOOD_ROW, {'text': 'x'})}"],
        "data.jsonl:2: row has no 'messages' field",
    ),
    (
        "unknown-role",
        lambda t, m: [
            f"dataset_source={jsonl(t, {'messages': [{'role': 'robot', 'content': 'x'}, {'role': 'assistant', 'content': 'y'}]})}"
        ],
        "unknown role 'robot'",
    ),
    (
        "tool-args-not-json",
        lambda t, m: [
            f"dataset_source={jsonl(t, {'messages': [{'role': 'user', 'content': 'x'}, {'role': 'assistant', 'content': '', 'tool_calls': [{'function': {'name': 'f', 'arguments': '{bad'}}]}]})}"
        ],
        "arguments is not valid JSON",
    ),
    # field types (item 3)
    (
        "tools-is-a-name",
        lambda t, m: [f"dataset_source={rows(t, {**GOOD_ROW, 'tools': 'get_weather'})}"],
        "'tools' must be a list of",
    ),
    (
        "tool-without-name",
        lambda t, m: [f"dataset_source={rows(t, {**GOOD_ROW, 'tools': [{'type': 'function'}]})}"],
        "tools[0] needs function.name",
    ),
    (
        "content-has-an-image",
        lambda t, m: [
            f"dataset_source={rows(t, {'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}, {'type': 'image_url', 'image_url': {'url': 'x'}}]}, GOOD_ROW['messages'][1]]})}"
        ],
        "messages[0].content must be a string, got a list; only text parts can be trained on, and this one has "
        "image_url parts",
    ),
    (
        "content-null-without-tool-calls",
        lambda t, m: [
            f"dataset_source={rows(t, {'messages': [{'role': 'user', 'content': None}, GOOD_ROW['messages'][1]]})}"
        ],
        "messages[0].content is missing or null; it must be a string",
    ),
    (
        "content-is-a-number",
        lambda t, m: [
            f"dataset_source={rows(t, {'messages': [GOOD_ROW['messages'][0], {'role': 'assistant', 'content': 42}]})}"
        ],
        "messages[1].content must be a string, got a number",
    ),
    (
        "tool-calls-not-a-list",
        lambda t, m: [
            f"dataset_source={rows(t, {'messages': [GOOD_ROW['messages'][0], {'role': 'assistant', 'content': None, 'tool_calls': {'function': {'name': 'f'}}}]})}"
        ],
        "messages[1].tool_calls must be a list",
    ),
    (
        "tool-call-not-declared",
        lambda t, m: [
            f"dataset_source={rows(t, {'messages': [GOOD_ROW['messages'][0], {**CALL, 'tool_calls': [{'function': {'name': 'get_wether', 'arguments': {}}}]}], 'tools': [TOOL]})}"
        ],
        "calls 'get_wether', which is not in the row's tools ['get_weather']; declare it in 'tools' or fix the name",
    ),
    (
        "no-assistant-message",
        lambda t, m: [f"dataset_source={rows(t, {'messages': [{'role': 'user', 'content': 'x'}]})}"],
        "no assistant message",
    ),
    ("empty-file", lambda t, m: [f"dataset_source={jsonl(t)}"], "file has no rows"),
    # formats converted on load (ShareGPT, Alpaca, OpenAI weights): what cannot be converted
    (
        "sharegpt-unknown-from",
        lambda t, m: [
            f"dataset_source={jsonl(t, *[SHAREGPT_ROW] * 10, {'conversations': [{'from': 'human', 'value': 'hi'}, {'from': 'narrator', 'value': 'yo'}]})}"
        ],
        "data.jsonl:11: conversations[1] has unknown 'from' 'narrator': ShareGPT turns are from human, user, gpt",
    ),
    (
        "alpaca-row-among-chat-rows",
        lambda t, m: [f"dataset_source={rows(t, {'instruction': 'Say hi', 'output': 'hi'})}"],
        "data.jsonl:11: row is Alpaca (instruction, input, output), but 10 of the file's 11 rows are chat ('messages') "
        "or prompt-completion: a file holds one format; convert this row to it, or remove it",
    ),
    (
        "weight-one-half",
        lambda t, m: [
            f"dataset_source={rows(t, {'messages': [GOOD_ROW['messages'][0], {**GOOD_ROW['messages'][1], 'weight': 0.5}]})}"
        ],
        "messages[1].weight must be 0 (do not train on this message) or 1, got 0.5",
    ),
    (
        "every-answer-empty",
        lambda t, m: [
            f"dataset_source={jsonl(t, *[{'messages': [GOOD_ROW['messages'][0], {'role': 'assistant', 'content': ''}]}] * 12)}"
        ],
        "data.jsonl lines 1, 2, 3 and 9 more: every assistant message is empty (no content, no tool_calls)",
    ),
    (
        "repeated-key",
        lambda t, m: [f"dataset_source={jsonl(t, *[GOOD_ROW] * 10, REPEATED_KEY)}"],
        "data.jsonl:11: has the key 'prompt' twice (a JSON reader keeps only the last value): keep one",
    ),
    ("one-row", lambda t, m: [f"dataset_source={jsonl(t, GOOD_ROW)}"], "has one row, which the split puts into eval"),
    # values Python reads but nothing downstream can write, parse or learn from (issue 20)
    (
        "lone-surrogate-in-content",
        lambda t, m: [
            f"dataset_source={rows(t, {'messages': [{'role': 'user', 'content': 'a' + chr(0xD800)}, GOOD_ROW['messages'][1]]})}"
        ],
        "data.jsonl:11: messages[0].content holds a lone surrogate ('\\ud800', half of a UTF-16 pair written as a \\u "
        "escape), which is not text and cannot be stored as UTF-8",
    ),
    (
        "lone-surrogate-in-arguments",
        lambda t, m: [f"dataset_source={rows(t, calling(json.dumps({'city': chr(0xDFFF)})))}"],
        "messages[1].tool_calls[0].function.arguments.city holds a lone surrogate ('\\udfff'",
    ),
    (
        "number-of-5000-digits",
        lambda t, m: [f"dataset_source={jsonl(t, *[GOOD_ROW] * 10, BIG_NUMBER_ROW)}"],
        "data.jsonl:11: not valid JSON (a number of more than 4300 digits (Python reads at most 4300) at column 94)",
    ),
    (
        "nan-in-arguments",
        lambda t, m: [f"dataset_source={rows(t, calling(NAN_ARGS))}"],
        "messages[1].tool_calls[0].function.arguments['city'] must be a finite number, not NaN or Infinity",
    ),
    (
        "1e999-in-arguments",
        lambda t, m: [f"dataset_source={rows(t, calling({'city': 'Paris', 'days': float('inf')}))}"],
        "messages[1].tool_calls[0].function.arguments['days'] must be a finite number",
    ),
    (
        "key-twice-in-arguments",
        lambda t, m: [f"dataset_source={rows(t, calling(TWICE_ARGS))}"],
        "data.jsonl:11: messages[1].tool_calls[0].function.arguments has the key 'city' twice (a JSON reader keeps only "
        "the last value): keep one",
    ),
    (
        "parameter-not-utf8",
        lambda t, m: ["served_model_name=tuned" + chr(0xDCFF)],
        "served_model_name holds '\\udcff', which is not text (bytes that are not UTF-8",
    ),
    # values
    ("lora-rank-zero", lambda t, m: ["lora_r=0"], "lora_r must be > 0"),
    # accumulation rounds up to one micro-batch per process: the value did nothing
    (
        "tokens-per-step-below-a-micro-batch",
        lambda t, m: ["tokens_per_step=100"],
        "tokens_per_step=100 is less than one micro-batch on every process (batch_tokens 512 x 2 processes = 1024)",
    ),
    # 976563 micro-batches per step, hundreds of passes over the data for one step: accepted before
    (
        "tokens-per-step-of-a-thousand-steps",
        lambda t, m: ["tokens_per_step=1000000000"],
        "tokens_per_step=1000000000 is 976563 micro-batches per optimizer step (batch_tokens 512 x 2 processes = 1024 "
        "tokens each), more than 1024: give at most 1048576",
    ),
    # typed beside full fine-tuning, it did nothing without a word
    (
        "adapter-settings-with-full",
        lambda t, m: ["method=full", "lora_r=32", "lora_alpha=128"],
        "lora_r=32, lora_alpha=128 set an adapter, which method=full does not train: drop them, or use method=lora",
    ),
    (
        "lora-rank-above-width",
        lambda t, m: ["lora_r=100000"],
        "lora_r=100000 is above the hidden size of model_source 'builtin:tiny-llama' (128)",
    ),
    (
        "lora-rank-above-local-width",
        lambda t, m: [f"model_source={m}", "lora_r=129"],
        "(128): a rank above the layer width adds memory and no capacity",
    ),
    ("negative-lr", lambda t, m: ["learning_rate=-0.1"], "learning_rate must be > 0"),
    ("zero-nodes", lambda t, m: ["nodes=0"], "nodes must be >= 1"),
    ("zero-batch", lambda t, m: ["batch_size=0"], "batch_size must be > 0"),
    ("batch-tokens-below-seq-len", lambda t, m: ["batch_tokens=100"], "batch_tokens=100 must be >= max_seq_len=512"),
    ("seq-len-over-model", lambda t, m: ["max_seq_len=4096"], "exceeds the model's context length 512"),
    ("unknown-method", lambda t, m: ["method=qlora4"], "method must be one of lora, dora, qlora, full, got 'qlora4'"),
    (
        "dora-served-as-adapter",
        lambda t, m: ["method=dora", "serve_adapters=true", "lora_train_embeddings=false"],
        "serve_adapters=true: vLLM cannot load DoRA adapters (it refuses use_dora); set serve_adapters=false",
    ),
    (
        "qlora-served-as-adapter",
        lambda t, m: ["method=qlora", "serve_adapters=true", "lora_train_embeddings=false"],
        "serve_adapters=true: a QLoRA adapter was trained against the 4-bit base",
    ),
    ("qlora-compiled", lambda t, m: ["method=qlora", "compile=true"], "method=qlora with compile=true"),
    ("dora-rank-above-width", lambda t, m: ["method=dora", "lora_r=100000"], "lora_r=100000 is above the hidden size"),
    ("eval-fraction", lambda t, m: ["eval_fraction=1.5"], "eval_fraction must be between 0 and 1"),
    ("seed-above-2**64", lambda t, m: [f"seed={2**64 + 1}"], "seed must be between 0 and 4294967295"),
    ("seed-negative", lambda t, m: ["seed=-1"], "seed must be between 0 and 4294967295"),
    ("negative-restarts", lambda t, m: ["max_restarts=-1"], "max_restarts must be >= 0"),
    ("serve-gpus-negative", lambda t, m: ["serve_gpus=-1"], "serve_gpus must be >= 0 (0 serves on CPU)"),
    ("served-name-empty", lambda t, m: ["served_model_name="], "served_model_name is empty: give the name"),
    ("served-name-blank", lambda t, m: ["served_model_name=   "], "served_model_name is empty: give the name"),
    # vLLM would read it as an option and fail at deploy, after training
    ("served-name-dash-locally", lambda t, m: ["served_model_name=-tuned"], "must not start with '-' or hold spaces"),
    ("served-name-space-locally", lambda t, m: ["served_model_name=my model"], "e.g. 'my-model'"),
    # each local node is a process holding the whole model: 100000 of them is a fork bomb
    ("local-world-too-big", lambda t, m: ["nodes=100000"], "training processes on this machine"),
    (
        "trainjob-without-runtime",
        lambda t, m: ["launcher=trainjob", "training_runtime="],
        "e.g. training_runtime=torch-distributed",
    ),
    ("unknown-launcher", lambda t, m: ["launcher=slurm"], "launcher must be one of"),
    ("unknown-deploy-backend", lambda t, m: ["deploy_backend=heroku"], "deploy_backend must be 'local', 'kubernetes'"),
    ("cluster-cleanup", lambda t, m: ["launcher=kubernetes", "cleanup=sometimes"], "cleanup must be one of"),
    # submit refused it; a local run accepted it (one validation for both)
    ("local-cleanup", lambda t, m: ["cleanup=sometimes"], "cleanup must be one of ('never', 'on-success', 'always')"),
    (
        "model-folder-as-dataset",
        lambda t, m: [f"dataset_source={m}"],
        "is a model folder (config.json and weights), not a dataset: pass it as model_source",
    ),
    # non-finite floats (item 2)
    ("lr-inf", lambda t, m: ["learning_rate=inf"], "learning_rate='inf' is not a finite number"),
    ("steps-huge", lambda t, m: ["max_steps=100000000000"], "max_steps must be <= 100,000,000"),
    ("lr-nan", lambda t, m: ["learning_rate=nan"], "learning_rate='nan' is not a finite number"),
    ("dropout-minus-inf", lambda t, m: ["lora_dropout=-inf"], "give a real value, e.g. lora_dropout=0.0"),
    ("eval-fraction-nan", lambda t, m: ["eval_fraction=NaN"], "eval_fraction='NaN' is not a finite number"),
    (
        "nan-inside-json",
        lambda t, m: ['node_selector={"pool": NaN}'],
        "holds NaN or Infinity, which JSON does not allow",
    ),
    # --param syntax and types
    (
        "tolerations-not-list",
        lambda t, m: ['tolerations={"key": "gpu"}'],
        "is not a valid JSON list, e.g. tolerations=[]",
    ),
    (
        "python-dict-quotes",
        lambda t, m: ["node_selector={'pool': 'h100'}"],
        "node_selector=\"{'pool': 'h100'}\" is not a valid JSON object (JSON strings take double quotes), e.g. "
        "node_selector={}",
    ),
    ("unknown-parameter", lambda t, m: ["max_stepz=3"], "unknown parameter 'max_stepz'"),
    ("wrong-type", lambda t, m: ["max_steps=many"], "max_steps='many' is not a valid whole number, e.g. max_steps="),
    ("float-for-int", lambda t, m: ["lora_r=16.5"], "lora_r='16.5' is not a valid whole number"),
    ("bool-word", lambda t, m: ["keep_serving=maybe"], "keep_serving='maybe' is not a valid true/false"),
    ("steps-not-whole", lambda t, m: ["max_steps=1e3.5"], "max_steps='1e3.5' is not a valid whole number"),
    ("steps-infinite", lambda t, m: ["max_steps=1e309"], "max_steps='1e309' is not a valid whole number"),
    ("not-key-value", lambda t, m: ["max_steps"], "is not key=value"),
    (
        "param-given-twice",
        lambda t, m: ["max_steps=5", "max_steps=7"],
        "parameter max_steps is given twice with different values (max_steps='5', then max_steps='7'): give it once",
    ),
    (
        "json-key-given-twice",
        lambda t, m: ['node_selector={"pool": "a100", "pool": "h100"}'],
        'parameter node_selector: \'pool\' appears twice in one JSON object ("a100", then "h100"): give each key once',
    ),
    (
        "json-param-nested-deep",
        lambda t, m: ["tolerations=" + "[" * 100_000 + "]" * 100_000],
        "the JSON is nested too deeply",
    ),
    # The eval rows evaluate scores are the split's first eval_max_rows: each of these trained to the end, then
    # failed in evaluate or could never pass the gate.
    (
        "eval-rows-scored-all-too-long",
        lambda t, m: [_eval_led_by(t, "long"), "eval_max_rows=20"],
        "no eval row of the first 20 (eval_max_rows=20: the rows evaluate scores) fits max_seq_len=512 tokens",
    ),
    (
        "gate-on-chat-only-data",
        lambda t, m: [_chat_only(t), "min_gain=0.1"],
        "min_gain=0.1 gates on the function-calling accuracy, but the eval split of dataset_source",
    ),
    (
        "gate-on-eval-rows-scored-without-tool-calls",
        lambda t, m: [_eval_led_by(t, "text"), "eval_max_rows=20", "min_fc_accuracy=0.5"],
        "hold no tool-call rows (20 text rows), so the tuned model could never pass: raise eval_max_rows (the split's 60 "
        "rows hold 40 tool-call rows), or set min_fc_accuracy=0 and min_gain=0 for chat-only data",
    ),
    # Kubernetes values, checked locally too when a cluster is named (item 5)
    (
        "k8s-namespace",
        lambda t, m: ["launcher=kubernetes", "namespace=LLM_Finetune"],
        "namespace='LLM_Finetune' is not a valid Kubernetes name (RFC 1123 label)",
    ),
    ("k8s-node-selector-int", lambda t, m: ["launcher=kubernetes", 'node_selector={"pool": 1}'], "quote it"),
    (
        "registry-address-with-password",
        lambda t, m: ["registry_address=https://me:pw@registry.example.com"],
        "registry_address='https://***@registry.example.com' carries a user name or password in the URL",
    ),
    # was found only by validate-params' probe, after the run had started ("answered ... with something other than JSON")
    (
        "registry-address-port-no-number",
        lambda t, m: ["registry_address=http://model-registry:port"],
        "registry_address='http://model-registry:port' must be an http:// or https:// URL (the port is not a number",
    ),
    # was found by the validate-params step: exit 1 and a failed run's record, after the S3 server started
    (
        "registry-unreachable",
        lambda t, m: ["registry_address=http://127.0.0.1:9"],
        "cannot reach the model registry at http://127.0.0.1:9 within 10s",
    ),
    (
        "k8s-system-namespace",
        lambda t, m: ["launcher=kubernetes", "namespace=kube-system"],
        "namespace='kube-system' is a Kubernetes system namespace",
    ),
    # BFCL as an evaluation suite (issue 35)
    (
        "eval-suites-misspelled",
        lambda t, m: ["eval_suites=heldout,bcfl"],
        "eval_suites='heldout,bcfl': unknown 'bcfl'; give heldout, bfcl or heldout,bfcl",
    ),
    ("bfcl-rows-negative", lambda t, m: ["eval_suites=bfcl", "bfcl_rows=-1"], "bfcl_rows must be >= 0"),
    (
        "bfcl-source-missing",
        lambda t, m: ["eval_suites=heldout,bfcl", f"bfcl_source={t}/bfcl.whl"],
        "bfcl.whl: no such file or folder; give bfcl-eval==2026.3.23's wheel",
    ),
    (
        "bfcl-source-without-the-suite",
        lambda t, m: [f"bfcl_source={t}"],
        "bfcl_source is set but eval_suites='heldout' does not score bfcl",
    ),
    (
        "max-category-drop-negative",
        lambda t, m: ["max_category_drop=-0.1"],
        "max_category_drop=-0.1 is a fraction of accuracy, as min_gain and min_fc_accuracy are, from 0 (no category may "
        "fall) to 1.0 (off): a fraction: 0.1 is 10 points",
    ),
    (
        "max-category-drop-in-points",
        lambda t, m: ["max_category_drop=10"],
        "max_category_drop=10 is a fraction of accuracy, as min_gain and min_fc_accuracy are, from 0 (no category may "
        "fall) to 1.0 (off): a fraction: 0.1 is 10 points, so give max_category_drop=0.1",
    ),
    ("max-category-drop-nan", lambda t, m: ["max_category_drop=nan"], "max_category_drop"),
    (
        "gate-significance-as-a-percentage",
        lambda t, m: ["gate_significance=5"],
        "gate_significance=5 is a p-value threshold, from 0 (off: every drop past max_category_drop is refused) up to, "
        "not including, 1: e.g. 0.05",
    ),
    ("gate-significance-nan", lambda t, m: ["gate_significance=nan"], "gate_significance='nan' is not a finite number"),
]

SWEEP_CASES = [
    ("negative-min-gain", ["min_gain=-0.5"], "min_gain must be >= 0, got -0.5"),
    (
        "trial-value-quoted",
        ['trials=[{"lora_r": "16", "lora_alpha": 32, "learning_rate": 0.001}]'],
        "trials[0].lora_r must be a whole number, got '16' (a string): write 16 without quotes",
    ),
    (
        "trial-value-null",
        ['trials=[{"lora_r": 16, "lora_alpha": null, "learning_rate": 0.001}]'],
        "trials[0].lora_alpha must be a whole number, got null: give a value",
    ),
    (
        "trial-bool-as-int",
        ['trials=[{"lora_r": true, "lora_alpha": 32, "learning_rate": 0.001}]'],
        "trials[0].lora_r must be a whole number, got true (a boolean)",
    ),
    (
        "trial-float-rank",
        ['trials=[{"lora_r": 16.5, "lora_alpha": 32, "learning_rate": 0.001}]'],
        "trials[0].lora_r must be a whole number, got 16.5",
    ),
    (
        "trial-lr-string",
        ['trials=[{"lora_r": 16, "lora_alpha": 32, "learning_rate": "fast"}]'],
        "trials[0].learning_rate must be a number, got 'fast' (a string)",
    ),
    (
        "trial-lr-infinity",
        ['trials=[{"lora_r": 16, "lora_alpha": 32, "learning_rate": Infinity}]'],
        "holds NaN or Infinity",
    ),
    (
        "trial-lr-negative",
        ['trials=[{"lora_r": 16, "lora_alpha": 32, "learning_rate": -1}]'],
        "trials[0]: learning_rate must be > 0",
    ),
    (
        "trial-missing-key",
        ['trials=[{"lora_r": 16, "learning_rate": 0.001}]'],
        "trials[0] must have exactly the keys ['learning_rate', 'lora_alpha', 'lora_r']",
    ),
    ("trials-empty", ["trials=[]"], "trials must be a non-empty JSON list"),
    # found by deploy-trials after every trial had trained, without this
    (
        "deploy-all-trials-with-embeddings",
        ["deploy_all_trials=true"],
        "deploy_all_trials=true serves every trial's adapter beside the base model, and vLLM cannot load an adapter "
        "that trains the embeddings in full: set lora_train_embeddings=false",
    ),
    (
        "trial-repeated",
        [
            'trials=[{"lora_r": 16, "lora_alpha": 32, "learning_rate": 0.001}, '
            '{"lora_r": 16.0, "lora_alpha": 32, "learning_rate": 0.001}]'
        ],
        "trials[1] repeats trials[0]",
    ),
    ("trial-not-object", ['trials=[16]'], "trials[0] must have exactly the keys"),
    ("min-gain-nan", ["min_gain=nan"], "min_gain='nan' is not a finite number"),
    ("select-metric", ["select_metric=bleu"], "select_metric must be one of ['eval_loss', 'fc_ast_accuracy']"),
    ("shared-nodes", ["nodes=0"], "nodes must be >= 1"),
]


def _fails_cleanly(capsys, exit_info, expected):
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert expected in err, err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def test_adapter_settings_beside_full_fine_tuning_only_when_typed_and_meaningful():
    """Refused: an adapter setting typed beside method=full. Not refused: lora_train_embeddings=false (the
    pipeline's help advises it for any pretrained model), the defaults, and anything beside a misspelt
    method (which is refused on its own)."""
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.cli_params import parse_params

    def problems(*pairs):
        found = []
        parse_params(finetune_pipeline, list(pairs), found)
        return found

    assert problems("method=full", "lora_dropout=0.1") == [
        "lora_dropout=0.1 sets an adapter, which method=full does not train: drop it, or use method=lora"
    ]
    assert problems("method=full", "lora_train_embeddings=false") == []
    assert problems("method=full", "lora_r=64") == []  # the default, typed
    assert problems("method=FULL", "lora_r=32") == [] and problems("method=lora", "lora_r=32") == []


@pytest.fixture(autouse=True)
def no_kubeconfig(monkeypatch, tmp_path):
    """run_local loads the Kubernetes settings for a step that runs on a cluster: never this machine's own (a
    developer's kubeconfig, its credential plugins, a pod's service account) in these tests."""
    monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "no-kubeconfig"))
    monkeypatch.setattr("kubeflow.training.utils.utils.is_running_in_k8s", lambda: False)


@pytest.fixture
def no_s3(monkeypatch):
    started = []
    monkeypatch.setattr(run_local, "start_s3", lambda *a: started.append(1))
    return started


@pytest.mark.parametrize("params, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_run_local_bad_input_fails_fast_and_cleanly(tmp_path, capsys, no_s3, tiny_model_dir, params, expected):
    root = tmp_path / "root"
    argv = ["--pipeline-root", str(root), "--output-dir", str(tmp_path / "out")]
    for p in params(tmp_path, tiny_model_dir):
        argv += ["--param", p]
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(argv)
    _fails_cleanly(capsys, exit_info, expected)
    assert not no_s3 and not root.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("params, expected", [c[1:] for c in SWEEP_CASES], ids=[c[0] for c in SWEEP_CASES])
def test_sweep_bad_input_fails_fast_and_cleanly(tmp_path, capsys, no_s3, params, expected):
    root = tmp_path / "root"
    argv = ["--pipeline", "sweep", "--pipeline-root", str(root), *[a for p in params for a in ("--param", p)]]
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(argv)
    _fails_cleanly(capsys, exit_info, expected)
    assert not no_s3 and not root.exists()


@pytest.mark.parametrize("pipeline", ["finetune", "sweep"])
def test_s3_source_without_s3_endpoint_is_refused_before_the_throwaway_server(
    tmp_path, capsys, monkeypatch, no_s3, pipeline
):
    # The throwaway S3 starts empty, so an s3:// source there can only fail later, inside deliver-*.
    monkeypatch.delenv("S3_ENDPOINT", raising=False)
    root = tmp_path / "root"
    argv = [
        "--pipeline",
        pipeline,
        "--pipeline-root",
        str(root),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--param",
        "model_source=s3://llm-finetune/datasets/sha256-abc",
        "--param",
        "nodes=0",
        "--param",
        "chat_template=s3://llm-finetune/templates/chat.jinja",
    ]  # a template too: it failed in deliver
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(argv)
    err = _fails_cleanly(capsys, exit_info, "give --s3-endpoint (or S3_ENDPOINT) of the S3/MinIO that holds it")
    assert "nodes must be >= 1" in err  # reported together with the other problems
    assert "chat_template='s3://llm-finetune/templates/chat.jinja' is an object in S3" in err
    assert "or a local .jinja file or a built-in template's name instead" in err
    assert not no_s3 and not root.exists() and not (tmp_path / "runs").exists()


def test_a_local_run_sending_a_step_to_a_cluster_needs_a_kubeconfig_before_it_starts(
    tmp_path, capsys, monkeypatch, no_s3
):
    """launcher=trainjob or deploy_backend=kubernetes with no kubeconfig passed validate-params, delivered and
    (for a deploy backend) trained, then failed in that step with exit status 1, suggesting a --dry-run
    run_local does not have."""
    from trainer.k8s.lifecycle import kube_config_problem

    root = tmp_path / "root"  # no kubeconfig here, and not in a pod (no_kubeconfig)
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(
            [
                "--pipeline-root",
                str(root),
                "--runs-dir",
                str(tmp_path / "runs"),
                "--param",
                "launcher=trainjob",
                "--param",
                "deploy_backend=kserve",
            ]
        )
    err = _fails_cleanly(
        capsys,
        exit_info,
        "with launcher=trainjob and deploy_backend=kserve a step runs on a "
        "Kubernetes cluster, but no usable Kubernetes configuration is here",
    )
    assert "point KUBECONFIG" in err and "launcher=local and deploy_backend=local" in err and "--dry-run" not in err
    assert not no_s3 and not root.exists() and not (tmp_path / "runs").exists()
    # a kubeconfig that loads is enough (the API server is not asked)
    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(config))
    assert kube_config_problem("launcher=pytorchjob") is None
    assert run_local.cluster_config_problems({"launcher": "pytorchjob", "deploy_backend": "local"}) == []
    # one that is not YAML, or a folder: the same refusal, not a traceback
    config.write_text("apiVersion: v1\nclusters: [\n  - {")
    assert "the kubeconfig is not valid YAML" in kube_config_problem("launcher=pytorchjob")
    monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path))
    assert "Is a directory" in kube_config_problem("launcher=pytorchjob")


def test_unreachable_s3_endpoint_is_refused_before_the_pipeline_starts(tmp_path, capsys, monkeypatch, no_retry_backoff):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("S3_ENDPOINT", "")  # restored after the test (start_s3 sets it)
    root = tmp_path / "root"
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(
            ["--s3-endpoint", "http://127.0.0.1:9", "--pipeline-root", str(root), "--runs-dir", str(tmp_path / "runs")]
        )
    _fails_cleanly(capsys, exit_info, "S3 endpoint http://127.0.0.1:9 unreachable")
    assert not root.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "command, source, problem",
    [
        ("deliver-dataset", lambda t: raw_file(t, LATIN1), "not UTF-8 text"),
        (
            "deliver-dataset",
            lambda t: rows(t, {"messages": [{"role": "user", "content": chr(0xD800)}, GOOD_ROW["messages"][1]]}),
            "holds a lone surrogate",
        ),
        ("deliver-model", lambda t: str(t / "nope"), "model path not found"),
        ("deliver-dataset", lambda t: "/dev/zero", "dataset /dev/zero is a character device"),
    ],
)
def test_deliver_reports_the_source_and_missing_s3_settings_together(
    tmp_path, capsys, monkeypatch, command, source, problem
):
    from trainer.__main__ import main

    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main([command, source(tmp_path)])
    err = _fails_cleanly(capsys, exit_info, "(2 problems)")
    assert problem in err and "S3 credentials missing" in err


@pytest.mark.parametrize("entry", ["run_local", "submit --dry-run", "validate-params"])
def test_a_password_in_a_url_parameter_is_refused_and_never_shown(tmp_path, capsys, monkeypatch, no_s3, entry):
    """registry_address=http://user:pass@host showed its password on the console, in run.json, run.log,
    `runs list` and submit --dry-run: refused before anything prints it, with the Secret that holds it."""
    params = [
        "registry_address=http://admin:s3cret@registry:8080",
        "registry_address=http://admin:s3cret@registry:8080",
    ]
    if entry == "run_local":
        call = partial(
            run_local.main,
            [
                "--pipeline-root",
                str(tmp_path / "r"),
                "--runs-dir",
                str(tmp_path / "runs"),
                *[a for p in params for a in ("--param", p)],
            ],
        )
    elif entry == "submit --dry-run":
        monkeypatch.setattr(submit, "dry_run_objects", lambda p: pytest.fail("rendered"))
        call = partial(submit.main, ["--dry-run", *[a for p in params + CLUSTER for a in ("--param", p)]])
    else:
        from components.validate_params import validate_params

        call = partial(validate_params.python_func, registry_address="http://admin:s3cret@registry:8080")
    with pytest.raises(SystemExit) as exit_info:
        call()
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and "s3cret" not in out + err, out + err
    assert "registry_address='http://***@registry:8080' carries a user name or password in the URL" in err
    assert "the registry's bearer token goes into the Secret 'llm-finetune-registry'" in err
    assert not (tmp_path / "runs").exists() and not no_s3


@pytest.mark.parametrize("entry", ["run_local", "submit --dry-run"])
def test_a_password_in_the_vllm_image_is_refused_and_never_shown(tmp_path, capsys, monkeypatch, no_s3, entry):
    """vllm_image=user:pass@registry/name:tag passed the tag rule and went into the rendered Deployment."""
    param = ["--param", "vllm_image=user:SECRETPW@registry.io/vllm:1"]
    if entry == "run_local":
        call = partial(
            run_local.main, ["--pipeline-root", str(tmp_path / "r"), "--runs-dir", str(tmp_path / "runs"), *param]
        )
    else:
        monkeypatch.setattr(submit, "dry_run_objects", lambda p: pytest.fail("rendered"))
        call = partial(submit.main, ["--dry-run", *param, *[a for p in CLUSTER for a in ("--param", p)]])
    with pytest.raises(SystemExit) as exit_info:
        call()
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and "SECRETPW" not in out + err, out + err
    assert "vllm_image='***@registry.io/vllm:1' carries a user name or password" in err and "imagePullSecret" in err
    assert not (tmp_path / "runs").exists() and not no_s3
    # an image pinned by digest has an @ too, after the name: accepted
    from trainer.validate import pipeline_problems

    digest = "vllm/vllm-openai@sha256:" + "0" * 64
    assert not [p for p in pipeline_problems({"vllm_image": digest}) if "vllm_image" in p]


def test_a_password_in_an_s3_source_is_never_shown_by_the_throwaway_server_check(tmp_path, capsys, monkeypatch, no_s3):
    """Without --s3-endpoint an s3:// source is refused twice (a password in it; no S3 holds it): the second
    message printed the source as given, password included."""
    monkeypatch.delenv("S3_ENDPOINT", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(
            [
                "--pipeline-root",
                str(tmp_path / "r"),
                "--runs-dir",
                str(tmp_path / "runs"),
                "--param",
                "dataset_source=s3://AKID:SECRETX@bucket/data.jsonl",
                "--param",
                "model_source=s3://AKID:SECRETM@bucket/models/x",
            ]
        )
    err = _fails_cleanly(capsys, exit_info, "dataset_source='s3://***@bucket/data.jsonl' is an object in S3")
    assert "model_source='s3://***@bucket/models/x' is an object in S3" in err
    assert "SECRET" not in err and "AKID" not in err and not (tmp_path / "runs").exists() and not no_s3


def test_a_password_holding_a_slash_hash_or_question_mark_is_masked_too(tmp_path, capsys, monkeypatch, no_s3):
    """AWS secret keys hold '/': urlsplit ended the host there and saw no user info, so the whole key was
    printed twice; an image reference with '#' in its password passed and was rendered."""
    from trainer.core.settings import url_credentials
    from trainer.validate import pipeline_problems

    monkeypatch.delenv("S3_ENDPOINT", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(
            [
                "--pipeline-root",
                str(tmp_path / "r"),
                "--runs-dir",
                str(tmp_path / "runs"),
                "--param",
                "dataset_source=s3://AKIAEXAMPLE:wJalr/K7MD+x@bucket/data.jsonl",
            ]
        )
    err = _fails_cleanly(capsys, exit_info, "dataset_source='s3://***@bucket/data.jsonl'")
    assert "wJalr" not in err and "AKIAEXAMPLE" not in err
    [problem] = [p for p in pipeline_problems({"vllm_image": "user:pa#ss@registry.io/vllm:v1"}) if "vllm_image" in p]
    assert "'***@registry.io/vllm:v1' carries a user name or password" in problem and "pa#ss" not in problem
    # not credentials: a port before a path with an '@', an '@' in an object key, images pinned by digest
    assert url_credentials("http://registry:8080/api@v1") == url_credentials("s3://bucket/key@v1") == ""
    for image in ("vllm-cpu:v1@sha256:" + "0" * 64, "ubuntu@sha256:" + "a" * 64):
        assert not [p for p in pipeline_problems({"vllm_image": image}) if "vllm_image" in p], image


def test_a_password_in_the_s3_endpoint_is_refused_and_never_shown(tmp_path, capsys, monkeypatch):
    from trainer.__main__ import main

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("S3_ENDPOINT", "")
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(
            [
                "--s3-endpoint",
                "http://minio:s3cret@127.0.0.1:9",
                "--pipeline-root",
                str(tmp_path / "r"),
                "--runs-dir",
                str(tmp_path / "runs"),
            ]
        )
    err = _fails_cleanly(capsys, exit_info, "--s3-endpoint 'http://***@127.0.0.1:9' carries a user name or password")
    assert "s3cret" not in err and "AWS_SECRET_ACCESS_KEY" in err and not (tmp_path / "runs").exists()
    monkeypatch.setenv("S3_ENDPOINT", "minio:s3cret@127.0.0.1:9")  # as the components and the CLI read it
    with pytest.raises(SystemExit) as exit_info:
        main(["deliver-dataset", "builtin:function-calling"])
    err = _fails_cleanly(capsys, exit_info, "S3_ENDPOINT '***@127.0.0.1:9' carries a user name or password")
    assert "s3cret" not in err


@pytest.mark.parametrize(
    "endpoint, reason",
    [
        ("ftp://127.0.0.1:9000", "scheme 'ftp': give http:// or https://"),
        ("http://127.0.0.1:notaport", "the port is not a number from 1 to 65535"),  # was minio's ValueError, exit 1
        ("http://127.0.0.1:99999", "the port is not a number from 1 to 65535"),
        ("https://minio.example.com/my-bucket", "a path or query after the host)"),
        ("http://[::1", "Invalid IPv6 URL"),
    ],
)
def test_an_s3_endpoint_that_is_no_url_is_refused_before_any_contact(endpoint, reason, tmp_path, capsys, monkeypatch):
    """Said at once, with the form to give: not "unreachable" after retries, not a traceback; the trainer CLI and
    the components (Store) too. The forms minio takes are accepted (`Store` builds its client without contact)."""
    from trainer.__main__ import main
    from trainer.core.settings import url_problem
    from trainer.core.storage import Store

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("S3_ENDPOINT", "")
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(
            ["--s3-endpoint", endpoint, "--pipeline-root", str(tmp_path / "r"), "--runs-dir", str(tmp_path / "runs")]
        )
    err = _fails_cleanly(capsys, exit_info, f"--s3-endpoint {endpoint!r} is not an S3 endpoint ({reason}")
    assert "give http(s)://HOST:PORT" in err and not (tmp_path / "runs").exists()
    monkeypatch.setenv("S3_ENDPOINT", endpoint)  # as the components and the CLI read it
    with pytest.raises(SystemExit) as exit_info:
        main(["deliver-dataset", "builtin:function-calling"])
    _fails_cleanly(capsys, exit_info, f"S3_ENDPOINT {endpoint!r} is not an S3 endpoint ({reason}")
    for fine in (
        "http://127.0.0.1:9000",
        "https://minio.example.com",
        "minio.llm-finetune.svc:9000",
        "http://[::1]:9000/",
        "HTTP://minio:9000",
    ):
        assert url_problem(fine, need_scheme=False, path=False) == "", fine
        monkeypatch.setenv("S3_ENDPOINT", fine)
        Store.from_env()


RUNAWAY = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"


def test_a_template_that_runs_away_is_one_refusal_within_the_budget(tmp_path, capsys, monkeypatch, no_s3):
    """Nested range(99999) loops hung validation with no limit: rendering runs under a wall-clock budget."""
    from trainer import data

    monkeypatch.setattr(data.preflight, "TEMPLATE_BUDGET_S", 0.5)
    template = tmp_path / "runaway.jinja"
    template.write_text(RUNAWAY + "{{ messages[0].content }}")
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(
            [
                "--pipeline-root",
                str(tmp_path / "r"),
                "--param",
                f"chat_template={template}",
                "--param",
                f"dataset_source={jsonl(tmp_path, *[GOOD_ROW] * 12)}",
            ]
        )
    err = _fails_cleanly(
        capsys,
        exit_info,
        f"(1 problem):\n  - dataset_source with model builtin:tiny-llama: the chat "
        f"template {template} did not finish rendering 12 rows within 0.5 s (a template is code",
    )
    assert "fix the template, or give another with chat_template=" in err and not no_s3


def test_build_tiny_model_refuses_a_folder_with_files(tmp_path, capsys):
    from trainer.__main__ import main

    (tmp_path / "config.json").write_text('{"mine": true}')
    with pytest.raises(SystemExit) as exit_info:
        main(["build-tiny-model", str(tmp_path)])
    _fails_cleanly(capsys, exit_info, "is not empty (it holds config.json): build-tiny-model writes config.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
    assert (tmp_path / "config.json").read_text() == '{"mine": true}'


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            lambda t, m: [model_variant(t, m, lambda d: (d / "model.safetensors").unlink())],
            "has config.json but no weights",
        ),
        (lambda t, m: [model_variant(t, m, lambda d: (d / "config.json").write_text("{oops"))], "is not valid JSON"),
        (
            lambda t, m: [str(m), "--served-model-name=-tuned"],
            "--served-model-name='-tuned' must not start with '-' or hold spaces (it is the name clients pass as `model`): "
            "e.g. 'tuned'",
        ),
        (
            lambda t, m: [str(m), "--served-model-name= "],
            "--served-model-name is empty: give the name clients will ask",
        ),
        (
            lambda t, m: [model_variant(t, m, no_template)],
            "has no chat template, which the server needs to answer /v1/chat/completions",
        ),
        (
            lambda t, m: [str(m), "--lora", "my adapter=/x"],
            "--lora name='my adapter' must not start with '-' or hold spaces",
        ),
    ],
    ids=[
        "no-weights",
        "malformed-config",
        "option-like-name",
        "blank-name",
        "lora-name-with-space",
        "no-chat-template",
    ],
)
def test_serve_refuses_what_vllm_would_fail_on_before_starting_it(tmp_path, capsys, tiny_model_dir, argv, expected):
    from trainer.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", *argv(tmp_path, tiny_model_dir), "--port", "70000"])  # refused too: nothing can start
    err = _fails_cleanly(capsys, exit_info, expected)
    assert "cannot serve (2 problems)" in err


def test_submit_options_are_checked_with_the_parameters(monkeypatch, capsys):
    rendered = []
    monkeypatch.setattr(submit, "dry_run_objects", lambda p: rendered.append(p) or [])
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--dry-run", "--experiment", "", "--run-name", " ", "--timeout", "-5", "--param", "nodes=0"])
    err = _fails_cleanly(capsys, exit_info, "(5 problems)")
    for needle in (
        "--experiment is empty",
        "--run-name is empty",
        "--timeout -5",
        "nodes must be >= 1",
        "deploy_backend=local serves",
    ):
        assert needle in err
    # launcher not given: a submitted run trains as a TrainJob (launcher=local, the pipelines' default, is run_local's)
    assert "launcher=local would train" not in err
    assert not rendered
    # silently ignored before: --timeout without --wait (as --catchup without --recurring is refused), a
    # --kfp-namespace no Kubernetes namespace (profile) can have
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--dry-run", "--timeout", "5", "--kfp-namespace", "Bad_NS!", "--param", "deploy_backend=kserve"])
    err = _fails_cleanly(capsys, exit_info, "(2 problems)")
    assert "--timeout 5 limits --wait, which is not given: add --wait, or drop --timeout" in err
    assert "--kfp-namespace='Bad_NS!' is not a valid Kubernetes name (RFC 1123 label)" in err
    assert not rendered


@pytest.mark.parametrize("pipeline", ["sweep", "finetune"])
def test_negative_parallelism_is_refused(tmp_path, capsys, no_s3, pipeline):
    with pytest.raises(SystemExit) as exit_info:
        run_local.main(["--pipeline", pipeline, "--parallelism", "-2", "--pipeline-root", str(tmp_path / "r")])
    _fails_cleanly(
        capsys,
        exit_info,
        "--parallelism -2: give how many sweep trials run at once, e.g. --parallelism 2, or 0 for all at once",
    )
    assert not no_s3 and not (tmp_path / "r").exists()


CLUSTER = [
    "launcher=kubernetes",
    "deploy_backend=kubernetes",
    "model_source=Qwen/Qwen2.5-0.5B-Instruct",
    "lora_train_embeddings=false",
    "learning_rate=0.0002",
]

# Values the Kubernetes API server would refuse, most of them after training has finished.
K8S_CASES = [
    ("namespace-underscore", ["namespace=LLM_Finetune"], "is not a valid Kubernetes name (RFC 1123 label)"),
    ("namespace-kube-public", ["namespace=kube-public"], "namespace='kube-public' is a Kubernetes system namespace"),
    ("namespace-kube-node-lease", ["namespace=kube-node-lease"], "is a Kubernetes system namespace"),
    (
        "served-name-underscore",
        ["served_model_name=My_Model"],
        "served_model_name='My_Model' is not a valid Kubernetes Service name (RFC 1035 label)",
    ),
    ("served-name-70-chars", ["served_model_name=" + "m" * 70], "(it has 70 characters): use at most 63"),
    ("served-name-digit-first", ["served_model_name=7b-chat"], "starting with a letter"),
    ("served-name-empty", ["served_model_name="], "served_model_name is empty"),
    # once: it was also "model_source '' is a path on this machine, which the cluster cannot read"
    ("model-source-empty", ["model_source="], "(1 problem)"),
    ("node-selector-int-value", ['node_selector={"pool": 1}'], "node_selector['pool'] must be a string"),
    ("node-selector-bad-key", ['node_selector={"gpu type": "h100"}'], "is not a valid label key"),
    ("node-selector-long-value", ['node_selector={"pool": "' + "x" * 64 + '"}'], "is not a valid label value"),
    (
        "toleration-operator",
        ['tolerations=[{"key": "gpu", "operator": "Sometimes"}]'],
        "tolerations[0].operator='Sometimes' is not allowed: use 'Equal'",
    ),
    (
        "toleration-effect",
        ['tolerations=[{"key": "gpu", "operator": "Exists", "effect": "Never"}]'],
        "tolerations[0].effect='Never' is not allowed",
    ),
    (
        "toleration-exists-with-value",
        ['tolerations=[{"key": "gpu", "operator": "Exists", "value": "x"}]'],
        "operator 'Exists' takes no value",
    ),
    (
        "toleration-unknown-field",
        ['tolerations=[{"key": "gpu", "operator": "Exists", "colour": "red"}]'],
        "unknown field(s) ['colour']",
    ),
    (
        "toleration-seconds-without-noexecute",
        ['tolerations=[{"key": "gpu", "operator": "Exists", "tolerationSeconds": 5}]'],
        "tolerationSeconds applies only to effect 'NoExecute'",
    ),
    ("serve-gpus-negative", ["serve_gpus=-1"], "serve_gpus must be >= 0"),
    ("kueue-queue", ["kueue_queue=bad queue!"], "kueue_queue='bad queue!' is not a valid label value"),
    ("accelerator-resource", ["accelerator_resource=gpu"], "accelerator_resource"),
    ("launcher-local-on-cluster", ["launcher=local"], "launcher=local would train inside one pipeline pod"),
    (
        "eval-vllm-without-gpu",
        ["eval_engine=vllm"],
        "eval_engine=vllm serves the models inside the evaluate pod with "
        "the CUDA vLLM of its image (docker/Dockerfile.eval)",
    ),
    (
        "eval-vllm-on-amd",
        ["eval_engine=vllm", "eval_gpus=1", "eval_accelerator_type=amd.com/gpu"],
        "which needs an NVIDIA GPU: set eval_gpus=1",
    ),
    (
        "local-dataset-on-cluster",
        ["dataset_source=./data.jsonl"],
        "is a path on this machine, which the cluster cannot read: deliver it first",
    ),
]


@pytest.mark.parametrize("params, expected", [c[1:] for c in K8S_CASES], ids=[c[0] for c in K8S_CASES])
def test_submit_dry_run_refuses_what_the_api_server_would(monkeypatch, capsys, tmp_path, params, expected):
    rendered = []
    monkeypatch.setattr(submit, "dry_run_objects", lambda p: rendered.append(p) or [])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.jsonl").write_text(json.dumps(GOOD_ROW) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        given = {p.split("=", 1)[0] for p in params}  # a case's value replaces the base one (no key twice)
        base = [p for p in CLUSTER if p.split("=", 1)[0] not in given]
        submit.main(["--dry-run", *[a for p in base + params for a in ("--param", p)]])
    _fails_cleanly(capsys, exit_info, expected)
    assert not rendered


@pytest.fixture
def kfp_api(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # kfp.Client reads ~/.config/kfp/context.json
    with FakeKfpAPI() as api:
        yield api


@pytest.mark.parametrize(
    "cron, expected",
    [
        ("not a cron at all x", "is not a valid cron expression; KFP recurring runs take a 6-field cron"),
        ("0 3 * * *", "has 5 field(s); KFP recurring runs take a 6-field cron: second minute hour"),
        ("0 0 3 * * * 2027", "has 7 field(s)"),
        ("0 0 25 * * *", "(ranges: second/minute 0-59, hour 0-23"),
        ("@every fortnight", "@every takes a duration like '@every 6h'"),
    ],
    ids=["garbage", "5-fields", "7-fields", "hour-25", "every-bad"],
)
def test_bad_cron_is_refused_before_anything_is_uploaded(kfp_api, capsys, cron, expected):
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *[a for p in CLUSTER for a in ("--param", p)], "--recurring", cron])
    _fails_cleanly(capsys, exit_info, expected)
    assert not kfp_api.state.requests  # nothing compiled, uploaded or contacted


@pytest.mark.parametrize(
    "host, expected",
    [
        ("http://127.0.0.1:9", "cannot reach KFP at http://127.0.0.1:9"),
        ("localhost:8080", "is not an http(s):// URL (no http:// or https://)"),
        ("http://localhost:80800", "is not an http(s):// URL (the port is not a number from 1 to 65535)"),
    ],
    ids=["unreachable", "no-scheme", "bad-port"],
)
def test_unreachable_kfp_host_is_one_line(capsys, host, expected):
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", host, *[a for p in CLUSTER for a in ("--param", p)]])
    err = _fails_cleanly(capsys, exit_info, expected)
    assert len(err.strip().splitlines()) == 1


def test_kfp_host_answering_401_names_the_token(kfp_api, capsys):
    kfp_api.state.healthz_status = 401
    with pytest.raises(SystemExit) as exit_info:
        submit.main(["--host", kfp_api.url, *[a for p in CLUSTER for a in ("--param", p)]])
    _fails_cleanly(capsys, exit_info, "refused the request (HTTP 401): set KFP_TOKEN")
    assert [r for r in kfp_api.state.requests if "healthz" not in str(r)] == []  # only the probe


# The validate-params step, as the KFP UI runs it: same rules, the Kubernetes ones included.
VALIDATE_STEP_CASES = [
    ("namespace", {"launcher": "kubernetes", "namespace": "LLM_Finetune"}, "RFC 1123 label"),
    ("served-name", {"deploy_backend": "kubernetes", "served_model_name": "My_Model"}, "RFC 1035 label"),
    ("kueue", {"launcher": "kubernetes", "kueue_queue": "bad queue!"}, "kueue_queue='bad queue!'"),
    ("lr-nan", {"learning_rate": float("nan")}, "learning_rate must be a finite number, got nan"),
    ("seed", {"seed": 2**40}, "seed must be between 0 and 4294967295"),
    # typed as text where a number or a boolean belongs
    (
        "steps-as-text",
        {"max_steps": " 16 "},
        "max_steps must be a whole number, got ' 16 ' (a string): write 16 without quotes",
    ),
    (
        "lr-as-text",
        {"learning_rate": "1e-4"},
        "learning_rate must be a number, got '1e-4' (a string): write 1e-4 without",
    ),
    (
        "bool-as-text",
        {"keep_serving": "yes"},
        "keep_serving must be true or false, got 'yes' (a string): use true or false",
    ),
    ("list-as-text", {"tolerations": "[]"}, "tolerations must be a JSON list, got '[]' (a string)"),
    (
        "sweep-trial",
        {"trials": [{"lora_r": "16", "lora_alpha": 32, "learning_rate": 0.001}]},
        "invalid sweep parameters (1 problem):\n  - trials[0].lora_r must be a whole number",
    ),
]


@pytest.mark.parametrize(
    "params, expected", [c[1:] for c in VALIDATE_STEP_CASES], ids=[c[0] for c in VALIDATE_STEP_CASES]
)
def test_validate_params_step_applies_the_same_rules(capsys, monkeypatch, params, expected):
    from components.validate_params import validate_params

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        validate_params.python_func(**params)
    _fails_cleanly(capsys, exit_info, expected)


def test_validate_params_step_in_a_cluster_pod_refuses_what_submit_refuses(capsys, monkeypatch):
    from components.validate_params import validate_params

    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.delenv("FINETUNE_RUN_LOCAL", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        validate_params.python_func(dataset_source="./mine.jsonl")
    err = _fails_cleanly(capsys, exit_info, "launcher=local would train inside one pipeline pod")
    assert "is a path on this machine" in err
    # run_local inside a pod (a Kubeflow Notebook): the tasks run in that pod, as on a laptop.
    monkeypatch.setenv("FINETUNE_RUN_LOCAL", "1")
    validate_params.python_func()
    assert "parameters OK" in capsys.readouterr().out
    monkeypatch.delenv("FINETUNE_RUN_LOCAL")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    validate_params.python_func()  # the defaults are a valid local run
    assert "parameters OK" in capsys.readouterr().out


def test_several_problems_are_reported_together(tmp_path, capsys, no_s3):
    with pytest.raises(SystemExit):
        run_local.main(
            [
                "--pipeline-root",
                str(tmp_path / "r"),
                "--param",
                "lora_r=0",
                "--param",
                "nodes=0",
                "--param",
                "model_source=builtin:nope",
                "--param",
                "learning_rate=0",
            ]
        )
    err = capsys.readouterr().err
    assert "4 problems" in err and err.count("\n  - ") == 4


def test_a_bad_datasets_rows_are_indented_under_it(tmp_path, capsys, no_s3):
    path = rows(tmp_path, {**GOOD_ROW, "tools": "{}"})
    with pytest.raises(SystemExit):
        run_local.main(
            ["--pipeline-root", str(tmp_path / "r"), "--param", f"dataset_source={path}", "--param", "lora_r=0"]
        )
    lines = capsys.readouterr().err.splitlines()
    assert lines[1].startswith(f"  - bad dataset {path} (1 problem):")
    assert lines[2].startswith(f"    - {path}:11: 'tools' must be a list") and lines[3].startswith("  - lora_r")


def test_utf8_bom_file_is_accepted(tmp_path, capsys, no_s3):
    """Editors save JSONL with a byte-order mark; it is valid UTF-8. Only the other problem shows."""
    path = raw_file(tmp_path, b"\xef\xbb\xbf" + (json.dumps(GOOD_ROW) + "\n").encode() * 12)
    with pytest.raises(SystemExit):
        run_local.main(
            ["--pipeline-root", str(tmp_path / "r"), "--param", f"dataset_source={path}", "--param", "lora_r=0"]
        )
    err = capsys.readouterr().err
    assert "1 problem)" in err and "lora_r must be > 0" in err and "data.jsonl" not in err


def test_validate_params_under_kfp_local_reads_trials_as_kfp_sends_them(tmp_path, monkeypatch):
    """KFP hands JSON list members over as floats (lora_r 4 arrives as 4.0): a good sweep passes,
    a quoted number still fails, in the same subprocess executor a cluster pod runs."""
    import warnings

    from kfp import local

    from components.validate_params import validate_params

    warnings.filterwarnings("ignore", message=".*non-Python base image.*")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the executors' component sources
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path),
        raise_on_error=True,
        workspace_root=str(tmp_path),
    )
    validate_params(
        trials=[{"lora_r": 4, "lora_alpha": 8, "learning_rate": 0.003}],
        tolerations=[{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}],
        launcher="kubernetes",
    )
    with pytest.raises(RuntimeError, match="validate-params"):
        validate_params(trials=[{"lora_r": "16", "lora_alpha": 8, "learning_rate": 0.003}])


@pytest.mark.parametrize(
    "module, argv, expected",
    [
        (
            "trainer",
            [
                "launch-k8s",
                "--dry-run",
                "--namespace",
                "Bad_NS",
                "--model-uri",
                "s3://b/models/m",
                "--dataset-uri",
                "s3://b/datasets/d",
                "--output-prefix",
                "runs/r",
            ],
            "namespace='Bad_NS'",
        ),
        (
            "trainer",
            [
                "launch-k8s",
                "--dry-run",
                "--node-selector",
                '{"pool": 1}',
                "--model-uri",
                "s3://b/models/m",
                "--dataset-uri",
                "s3://b/datasets/d",
                "--output-prefix",
                "runs/r",
                "--learning-rate",
                "nan",
            ],
            ["learning_rate must be a finite number", "node_selector['pool'] must be a string"],
        ),  # one message
        (
            "trainer",
            ["deploy-k8s", "--dry-run", "--name", "My_Model", "--gpus", "-3", "--model-uri", "s3://b/models/m"],
            "'My_Model' is not a valid Kubernetes Service name",
        ),
        # without --dry-run: the settings are refused before any kubeconfig is looked for
        (
            "trainer",
            ["deploy-k8s", "--name", "My_Model", "--gpus", "-3", "--model-uri", "s3://b/models/m"],
            "serve_gpus must be >= 0, got -3",
        ),
        (
            "trainer",
            ["deploy-k8s", "--backend", "kserve", "--name", "My_Model", "--model-uri", "s3://b/models/m"],
            "'My_Model' is not a valid Kubernetes Service name",
        ),
        # valid settings but no cluster configured: one line naming KUBECONFIG, not a ConfigException traceback
        (
            "trainer",
            [
                "launch-k8s",
                "--model-uri",
                "s3://b/models/m",
                "--dataset-uri",
                "s3://b/datasets/d",
                "--output-prefix",
                "runs/r",
            ],
            "no usable Kubernetes configuration",
        ),
        (
            "trainer",
            [
                "launch-k8s",
                "--launcher",
                "trainjob",
                "--model-uri",
                "s3://b/models/m",
                "--dataset-uri",
                "s3://b/datasets/d",
                "--output-prefix",
                "runs/r",
            ],
            "point KUBECONFIG",
        ),
        ("trainer", ["deploy-k8s", "--name", "my-model", "--model-uri", "s3://b/models/m"], "add --dry-run"),
        # the pod's fetch step reads only the bucket: a path here would fail inside the cluster
        (
            "trainer",
            [
                "deploy-k8s",
                "--dry-run",
                "--name",
                "ok",
                "--model-uri",
                "/local/merged",
                "--adapter",
                "Bad_Name=s3://b/adapters/a",
            ],
            ["model_uri='/local/merged' must be an s3:// URI", "adapter name='Bad_Name' is not a valid"],
        ),
        ("manifests", ["--namespace", "Bad_NS", "--pipeline-sa", "kubeflow:"], "must be namespace:name"),
    ],
    ids=[
        "launch-k8s-namespace",
        "launch-k8s-nan-and-selector",
        "deploy-k8s-name-gpus",
        "deploy-k8s-live-bad",
        "deploy-k8s-kserve-live-bad",
        "launch-k8s-no-kubeconfig",
        "launch-k8s-trainjob-no-kubeconfig",
        "deploy-k8s-no-kubeconfig",
        "deploy-k8s-local-model-uri",
        "manifests-namespace-sa",
    ],
)
def test_kubernetes_clis_refuse_before_rendering(capsys, monkeypatch, tmp_path, module, argv, expected):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    if module == "trainer":
        from trainer.__main__ import main
    else:
        from pipelines.manifests import main
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, err
    assert all(e in err for e in ([expected] if isinstance(expected, str) else expected)), err
    assert err.startswith("error: ") and "Traceback" not in err
    assert not out.strip()  # nothing rendered or created


@pytest.mark.parametrize("launcher", ["pytorchjob", "trainjob"])
def test_launch_k8s_refuses_an_image_from_the_environment_with_a_flag_in_it(capsys, monkeypatch, launcher):
    """Issue 57 F1: FINETUNE_IMAGE="... --privileged" was rendered as it was by launch-k8s --dry-run, where submit
    refused it: the check now lives with the pods' settings (trainer.k8s.podspec.ClusterSpec), which both go through."""
    from trainer.__main__ import main

    monkeypatch.setenv("FINETUNE_IMAGE", "ghcr.io/x/llm-finetune:v1 --privileged")
    argv = ["launch-k8s", "--dry-run", "--launcher", launcher, "--model-uri", "s3://b/models/m"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--dataset-uri", "s3://b/datasets/d", "--output-prefix", "runs/r"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and not out.strip()
    assert (
        'FINETUNE_IMAGE="ghcr.io/x/llm-finetune:v1 --privileged" is not an image reference: it holds white space' in err
    )


@pytest.mark.parametrize(
    "pair, value",
    [
        ("max_steps= 16 ", 16),
        ("max_steps=1e3", 1000),
        ("max_steps=100.0", 100),
        ("max_steps=-0", 0),
        ("learning_rate=1e-4", 1e-4),
        ("learning_rate= 2e-4 ", 2e-4),
        ("lora_dropout=-0", 0.0),
        ("keep_serving=True", True),
        ("keep_serving= yes", True),
        ("keep_serving=OFF", False),
        ("keep_serving=0", False),
        ("tolerations= [ ] ", []),
        ('node_selector={"pool": "h100"}', {"pool": "h100"}),
        ("served_model_name=модель-1", "модель-1"),
    ],
)
def test_values_as_people_type_them_are_read(pair, value):
    """What a user types on the command line (or pastes from the KFP UI) reads as they meant it."""
    from pipelines.dag.finetune import finetune_pipeline
    from pipelines.cli_params import parse_params

    key = pair.partition("=")[0]
    got = parse_params(finetune_pipeline, [pair])[key]
    assert got == value and type(got) is type(value)


def _user_dataset(tmp_path, fmt):
    """GOOD_ROW-like data as a user's own tools save it."""
    import pandas as pd

    pairs = [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(12)]
    if fmt == "csv":
        path = tmp_path / "pairs.csv"
        pd.DataFrame(pairs).to_csv(path, index=False)
    elif fmt == "parquet":
        path = tmp_path / "pairs.parquet"
        pd.DataFrame(pairs).to_parquet(path)
    elif fmt == "json":
        path = tmp_path / "chats.json"
        path.write_text(json.dumps([GOOD_ROW] * 12))
    elif fmt == "sharegpt":
        path = tmp_path / "sharegpt.jsonl"
        jsonl(tmp_path, *[SHAREGPT_ROW] * 12, name=path.name)
    elif fmt == "alpaca":
        path = tmp_path / "alpaca.json"
        path.write_text(json.dumps([{"instruction": f"q{i}", "input": "", "output": f"a{i}"} for i in range(12)]))
    elif fmt == "save_to_disk":
        import datasets

        path = tmp_path / "saved"
        datasets.Dataset.from_list([GOOD_ROW] * 12).save_to_disk(str(path))
    else:  # a directory with train + test files
        path = tmp_path / "dir"
        path.mkdir()
        jsonl(path, *[GOOD_ROW] * 10, name="train.jsonl")
        pd.DataFrame(pairs[:2]).to_csv(path / "test.csv", index=False)
    return str(path)


@pytest.mark.parametrize("fmt", ["csv", "parquet", "json", "sharegpt", "alpaca", "save_to_disk", "train-and-test-dir"])
def test_a_users_own_dataset_formats_pass_validation(tmp_path, capsys, no_s3, fmt):
    """Only the other problem shows: the dataset itself was read and accepted."""
    with pytest.raises(SystemExit):
        run_local.main(
            [
                "--pipeline-root",
                str(tmp_path / "r"),
                "--param",
                f"dataset_source={_user_dataset(tmp_path, fmt)}",
                "--param",
                "lora_r=0",
            ]
        )
    err = capsys.readouterr().err
    assert "(1 problem)" in err and "lora_r must be > 0" in err, err


def test_a_max_seq_len_no_built_in_row_fits_is_refused_at_validate():
    """max_seq_len=1 on the built-in pair used to pass validate-params and stop in finetune, after
    delivery; a max_seq_len at or above the default costs no check (the demo's validate stays instant)."""
    from trainer.validate import pipeline_problems

    problems = pipeline_problems({"max_seq_len": 1})
    assert len(problems) == 2 and all("fits max_seq_len=1 tokens" in p and "raise max_seq_len" in p for p in problems)
    assert pipeline_problems({"max_seq_len": 160}) == []  # some rows fit: the rest are skipped and counted


def test_eval_engine_vllm_on_a_cluster_runs_on_an_nvidia_gpu_in_the_eval_image():
    """The evaluate step's image is the project on vLLM's (docker/Dockerfile.eval): eval_engine=vllm
    passes with an NVIDIA GPU for the step, and the compiled step runs that image."""
    from components.evaluate import evaluate
    from trainer.core import settings
    from trainer import validate

    gpu = {"eval_engine": "vllm", "eval_gpus": 1, "eval_accelerator_type": "nvidia.com/gpu"}
    assert not [p for p in validate.on_cluster_problems(gpu) if "eval_engine" in p]
    assert [p for p in validate.on_cluster_problems({**gpu, "eval_gpus": 0}) if "eval_engine=vllm" in p]
    assert evaluate.component_spec.implementation.container.image == settings.get("EVAL_IMAGE")
    assert settings.get("EVAL_IMAGE") != settings.image()
    dockerfile = (Path(__file__).parents[2] / "docker" / "Dockerfile.eval").read_text()
    assert f"ARG VLLM_IMAGE={settings.get('VLLM_IMAGE')}" in dockerfile  # scored with the vLLM that serves


def test_merge_with_the_two_trees_swapped_or_not_a_model_is_refused(store, tiny_model_dir, tmp_path, capsys):
    """`trainer merge` with --model-uri and --adapter-uri swapped exited 0 with "full fine-tune: nothing to merge,
    model copied" and the unchanged base model; a dataset as --model-uri was transformers' traceback."""
    from tests.unit.test_eval_served import _adapter
    from trainer.__main__ import main

    model, _ = store.put_dir(tiny_model_dir, "models/merge-base")
    adapter, _ = store.put_dir(_adapter(tiny_model_dir, tmp_path / "adapter"), "runs/merge-in/adapter")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "train.jsonl").write_text("{}\n")
    dataset, _ = store.put_dir(data_dir, "datasets/merge-in")
    capsys.readouterr()  # the adapter's making
    for argv, expected in (
        (
            ["--model-uri", adapter, "--adapter-uri", model],
            f"{adapter} is an adapter (adapter_config.json), not a base model: the two look swapped",
        ),
        (["--model-uri", dataset, "--adapter-uri", adapter], f"{dataset} is not a model (no config.json)"),
        (["--model-uri", model, "--adapter-uri", dataset], f"{dataset} is neither an adapter"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["merge", *argv, "--out", str(tmp_path / "out")])
        _fails_cleanly(capsys, exit_info, expected)
        assert not (tmp_path / "out").exists()
    main(["merge", "--model-uri", model, "--adapter-uri", adapter, "--out", str(tmp_path / "out")])
    assert (tmp_path / "out" / "config.json").exists() and not (tmp_path / "out" / "adapter_config.json").exists()
