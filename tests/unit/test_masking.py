"""Irrelevance rows made by function masking (trainer.data.masking, pipeline parameter irrelevance_share):
the called functions really gone from the copies' tools, a text answer, the share kept per split, seeded, no
eval row's copy in train; the parameter's checks at validate, deliver-dataset and its CLI."""

import json

import pytest

from trainer import data
from trainer.store import delivery
from trainer.chat import fc_check
from trainer.config import sources
from trainer.data import masking
from trainer.core.errors import UserError


def _tool(name):
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
        },
    }


def _call(name, x="1"):
    return {"type": "function", "function": {"name": name, "arguments": {"x": x}}}


def _row(request, calls, tools, history=()):
    return {
        "messages": [
            {"role": "user", "content": request},
            *history,
            {"role": "assistant", "content": "", "tool_calls": calls},
        ],
        "tools": [_tool(t) for t in tools],
    }


def _text_row(request, tools=()):
    row = {"messages": [{"role": "user", "content": request}, {"role": "assistant", "content": "Hello."}]}
    return {**row, "tools": [_tool(t) for t in tools]} if tools else row


def _splits(n_train=100, n_eval=20):
    """Tool rows (one call among three tools, every fourth a parallel call, every fifth the row's only tool)
    and a few text rows, each request unique and named by its split."""

    def rows(split, n):
        out = []
        for i in range(n):
            if i % 10 == 9:
                out.append(_text_row(f"{split} chat {i}"))
            elif i % 5 == 4:
                out.append(_row(f"{split} simple {i}", [_call("a")], ["a"]))
            elif i % 4 == 3:
                out.append(_row(f"{split} parallel {i}", [_call("a"), _call("b")], ["a", "b", "c"]))
            else:
                out.append(_row(f"{split} multiple {i}", [_call("b", str(i))], ["a", "b", "c"]))
        return out

    return {"train": rows("train", n_train), "eval": rows("eval", n_eval)}


def _names(row):
    return {t["function"]["name"] for t in row.get("tools") or []}


def _copies(rows):
    return [r for r in rows if r["messages"][-1].get("content") == masking.IRRELEVANCE_REPLY]


def test_a_copy_offers_every_tool_but_the_called_ones_and_answers_in_text():
    row = {**_row("book it", [_call("b")], ["a", "b", "c"]), "id": 7}
    copy = masking.masked(row)
    assert _names(copy) == {"a", "c"} and copy["id"] == 7
    assert copy["messages"] == [row["messages"][0], {"role": "assistant", "content": masking.IRRELEVANCE_REPLY}]
    assert fc_check.category(copy) == "irrelevance" and fc_check.category(row) == "multiple"
    assert _names(row) == {"a", "b", "c"}  # the source row is left as it was
    parallel = masking.masked(_row("two", [_call("a"), _call("c")], ["a", "b", "c"]))
    assert _names(parallel) == {"b"}
    only = masking.masked(_row("one", [_call("a")], ["a"]))
    assert "tools" not in only and fc_check.category(only) == fc_check.CHAT  # no tool left: none offered
    assert data.validate_rows([copy, parallel, only], "copies")  # rows the row checks accept


def test_which_rows_are_masked():
    assert masking.maskable(_row("q", [_call("a")], ["a", "b"]))
    assert not masking.maskable(_text_row("q", ["a"]))  # answers in text
    # its last call repeats one its history made: the copy is cut at the first call instead (cut later, its history
    # would call a tool the copy does not declare)
    history = [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", **_call("a")}]},
        {"role": "tool", "tool_call_id": "c0", "content": "{}"},
        {"role": "user", "content": "again"},
    ]
    again = _row("q", [_call("a")], ["a", "b"], history)
    assert masking.mask_turn(again) == 1 and masking.masked(again)["messages"] == [
        again["messages"][0],
        {"role": "assistant", "content": masking.IRRELEVANCE_REPLY},
    ]
    assert not masking.maskable(_row("q", [_call("z")], ["a", "b"]))  # calls a function the row does not offer
    # a multi-turn row whose last turn calls another function than its history: masked after its history
    row = _row("q", [_call("b")], ["a", "b"], history)
    copy = masking.masked(row)
    assert masking.maskable(row) and copy["messages"][:-1] == row["messages"][:-1] and _names(copy) == {"a"}
    # a weight-0 turn after the scored one is not kept: the copy ends with its answer
    weighted = _row("q", [_call("a")], ["a", "b"])
    weighted["messages"].append({"role": "assistant", "content": "ignored", "weight": 0})
    assert masking.masked(weighted)["messages"][-1]["content"] == masking.IRRELEVANCE_REPLY


def test_the_share_of_each_split_is_kept_seeded_and_spread():
    splits = _splits(300, 60)
    out, made = masking.mask_splits(splits, 0.15, seed=3)
    for name in ("train", "eval"):
        copies = _copies(out[name])
        assert len(copies) == made[name] == masking.copies_for(len(splits[name]), 0.15)
        assert abs(made[name] / len(out[name]) - 0.15) <= 1 / len(out[name])  # the share, within rounding
        assert [r for r in out[name] if r not in copies] == splits[name]  # the data's rows, in their order
        positions = [i for i, r in enumerate(out[name]) if r in copies]
        assert positions[0] < len(out[name]) / made[name] + 1 and positions[-1] > len(out[name]) * 0.8  # spread
        assert sum(fc_check.category(r) == "irrelevance" for r in copies) > 0.5 * len(copies)
    assert masking.mask_splits(splits, 0.15, seed=3) == (out, made)  # the seed decides
    assert masking.mask_splits(splits, 0.15, seed=4)[0] != out
    assert masking.mask_splits(splits, 0.0, seed=3) == (splits, {"train": 0, "eval": 0})
    # half the rows at most, and never a row masked twice: a split with few tool rows gives what it has
    few = {"train": [_row("t", [_call("a")], ["a", "b"])] + [_text_row(f"c{i}") for i in range(9)], "eval": []}
    assert masking.mask_splits(few, 0.5, seed=0)[1] == {"train": 1, "eval": 0}


def test_no_eval_rows_copy_lands_in_train():
    splits = _splits(200, 40)
    out, _ = masking.mask_splits(splits, 0.3, seed=0)
    requests = {name: {r["messages"][0]["content"] for r in _copies(rows)} for name, rows in out.items()}
    assert requests["train"] and requests["eval"]
    assert all(q.startswith("train ") for q in requests["train"]) and all(
        q.startswith("eval ") for q in requests["eval"]
    )


def test_the_log_line_counts_the_copies(capsys):
    masking.mask_splits(_splits(100, 20), 0.2, seed=0, what="x")
    line = capsys.readouterr().out
    assert line.startswith(
        "30 irrelevance rows made by function masking (irrelevance_share=0.2: 25 of 125 train rows, 5 of 25 eval rows)"
    ), line
    assert masking.IRRELEVANCE_REPLY in line and "offer no tool" in line
    with data.quiet_conversions():  # a check that only reads the data says nothing
        masking.mask_splits(_splits(100, 20), 0.2, seed=0)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "share, said",
    [
        (-0.1, "irrelevance_share=-0.1 is out of range"),
        (0.6, "irrelevance_share=0.6 is out of range"),
        (float("nan"), "irrelevance_share must be a finite number from 0 to 0.5, got nan"),
        (float("inf"), "must be a finite number"),
        (True, "must be a finite number"),
        ("0.1", "must be a finite number"),
    ],
)
def test_a_share_out_of_range_or_not_a_number_is_refused_with_the_fix(share, said):
    problem = masking.share_problem(share)
    assert said in problem and "e.g. irrelevance_share=0.1" in problem
    assert masking.share_problem(0) is None and masking.share_problem(0.5) is None


def test_data_without_tool_calls_is_refused_before_any_work():
    chat = {"train": [_text_row(f"q{i}", ["a"]) for i in range(5)], "eval": [_text_row("e")]}
    err = str(pytest.raises(UserError, masking.mask_splits, chat, 0.1, 0, "dataset chats.jsonl").value)
    assert err == (
        "irrelevance_share=0.1, but dataset chats.jsonl has nothing function masking can make irrelevance "
        "rows from: no training row makes a tool call (no assistant turn has tool_calls); set "
        "irrelevance_share=0, or use rows whose calls name functions in the row's tools"
    )
    # calls, but to tools no row offers (a glaive system prompt without function JSON): said as that
    untooled = {"train": [{"messages": _row("q", [_call("a")], [])["messages"]}]}
    err = str(pytest.raises(UserError, masking.mask_splits, untooled, 0.1, 0).value)
    assert "its 1 training rows with tool calls offer no tools (no `tools` list" in err
    assert masking.mask_splits(chat, 0, 0)[0] == chat  # 0: nothing asked, nothing refused


def test_deliver_dataset_counts_the_copies_in_its_metadata(store, tmp_path, capsys):
    path = tmp_path / "tools.jsonl"
    rows = _splits(110, 0)["train"]
    data.write_jsonl(rows, path)
    uri, meta = delivery.deliver_dataset(str(path), "", store, eval_fraction=0.1, seed=0, irrelevance_share=0.1)
    assert meta["irrelevance_share"] == 0.1 and meta["irrelevance_rows"] == {"train": 11, "eval": 1}
    assert meta["rows"] == {"train": 99 + 11, "eval": 11 + 1}
    assert "12 irrelevance rows made by function masking" in capsys.readouterr().out
    tree = store.get_tree(uri)
    assert json.loads((tree / data.CHECKED).read_text())["rows"] == meta["rows"]  # checked once, here
    delivered = {s: data.read_jsonl(tree / f"{s}.jsonl") for s in ("train", "eval")}
    eval_requests = {r["messages"][0]["content"] for r in delivered["eval"]}
    assert not eval_requests & {r["messages"][0]["content"] for r in _copies(delivered["train"])}
    assert len(_copies(delivered["eval"])) == 1
    _, plain = delivery.deliver_dataset(str(path), "", store)
    assert plain["irrelevance_rows"] == {"train": 0, "eval": 0} and plain["rows"] == {"train": 99, "eval": 11}
    # a delivered tree passes through as it is: a share for it is refused, not applied to it again
    err = str(pytest.raises(UserError, delivery.deliver_dataset, uri, "", store, irrelevance_share=0.1).value)
    assert "is a delivered tree, passed through as it is: set irrelevance_share=0" in err
    err = str(pytest.raises(UserError, delivery.deliver_dataset, str(path), "", store, irrelevance_share=0.9).value)
    assert "irrelevance_share=0.9 is out of range" in err


def test_validate_refuses_the_share_at_once(tmp_path):
    from trainer.validate import pipeline_problems

    chats = tmp_path / "chats.jsonl"
    data.write_jsonl([_text_row(f"q{i}") for i in range(40)], chats)
    problems = pipeline_problems({"dataset_source": str(chats), "irrelevance_share": 0.2, "nodes": 1})
    assert [p for p in problems if "irrelevance_share" in p] == [
        f"irrelevance_share=0.2, but dataset_source {str(chats)!r} has nothing function masking can make irrelevance "
        "rows from: no training row makes a tool call (no assistant turn has tool_calls); set irrelevance_share=0, or "
        "use rows whose calls name functions in the row's tools"
    ]
    problems = pipeline_problems({"irrelevance_share": 0.7, "nodes": 1})
    assert [p for p in problems if "irrelevance_share" in p] == [
        "irrelevance_share=0.7 is out of range: it is the share of each split's rows made by function masking, from 0 "
        "(none) to 0.5 (half); e.g. irrelevance_share=0.1"
    ]
    problems = pipeline_problems({"irrelevance_share": float("nan"), "nodes": 1})
    assert [p for p in problems if "irrelevance_share" in p] == [
        "irrelevance_share must be a finite number, got nan: NaN and infinity train nothing; use e.g. 0.0"
    ]
    assert not [p for p in pipeline_problems({"irrelevance_share": 0.15, "nodes": 1}) if "irrelevance" in p]


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--irrelevance-share", "0.8"], "--irrelevance-share=0.8 is out of range"),
        (["--irrelevance-share", "nan"], "--irrelevance-share must be a finite number from 0 to 0.5, got nan"),
        (
            ["--irrelevance-share", "0.1"],
            "--irrelevance-share=0.1, but dataset {path} has nothing function masking "
            "can make irrelevance rows from: no training row makes a tool call",
        ),
    ],
)
def test_deliver_dataset_cli_exits_2_naming_the_fix(tmp_path, capsys, argv, said):
    from trainer.__main__ import main

    path = tmp_path / "chats.jsonl"
    data.write_jsonl([_text_row(f"q{i}") for i in range(20)], path)
    with pytest.raises(SystemExit) as exit_:
        main(["deliver-dataset", str(path), *argv])
    assert exit_.value.code == 2
    assert said.format(path=path) in capsys.readouterr().err


def test_the_parameter_is_the_tables_and_reaches_the_deliver_dataset_step():
    from components.deliver_dataset import deliver_dataset
    from pipelines.dag.finetune import finetune_pipeline
    from trainer.config import params

    p = params.BY_NAME["irrelevance_share"]
    assert (p.type, p.default, p.pipelines) == (float, 0.0, ("finetune", "sweep"))
    assert "irrelevance_share" in deliver_dataset.component_spec.inputs
    spec = json.dumps(
        finetune_pipeline.pipeline_spec.root.dag.tasks["deliver-dataset"]
        .inputs.parameters["irrelevance_share"]
        .component_input_parameter
    )
    assert "irrelevance_share" in spec
    assert sources.parse("builtin:function-calling", "dataset")  # the demo's data has tool rows to mask


def test_the_run_record_takes_the_delivered_datasets_counts(tmp_path):
    """run_local's run.json: the deliver-dataset task's rows and irrelevance rows (inside a sweep's sub-DAG too)."""
    from pipelines import runs

    meta = {
        "uri": "s3://b/datasets/sha256-x",
        "source": "x.jsonl",
        "rows": {"train": 110.0, "eval": 12.0},
        "irrelevance_share": 0.1,
        "irrelevance_rows": {"train": 11.0, "eval": 1.0},
        "n_files": 2,
        "mix": [{"source": "x.jsonl", "weight": 1.0, "train_rows": 110.0, "train_taken": 110.0, "eval_rows": 12.0}],
    }
    task = tmp_path / "kfp" / "deliver-dataset"
    task.mkdir(parents=True)
    (task / "executor_output.json").write_text(
        json.dumps(
            {
                "artifacts": {
                    "dataset": {"artifacts": [{"name": "dataset", "uri": str(task / "dataset"), "metadata": meta}]}
                }
            }
        )
    )
    assert runs.delivered_dataset(tmp_path / "kfp") == {
        k: meta[k] for k in ("uri", "rows", "irrelevance_share", "irrelevance_rows", "mix")
    }
    assert runs.delivered_dataset(tmp_path / "nothing") == {}


def test_data_without_a_tool_less_row_gets_some_among_the_copies():
    # every row offers three tools and calls one: masking alone would leave tools in every copy
    every = {"train": [_row(f"q{i}", [_call("b", str(i))], ["a", "b", "c"]) for i in range(200)], "eval": []}
    out, made = masking.mask_splits(every, 0.2, seed=1)
    copies = _copies(out["train"])
    toolless = [c for c in copies if not c.get("tools")]
    assert made["train"] == 50 and len(toolless) == 5  # ceil(50 * TOOLLESS_SHARE)
    few, made_few = masking.mask_splits({"train": every["train"][:36], "eval": every["train"][36:48]}, 0.2, seed=1)
    for split, n in made_few.items():  # 9 and 3 copies: at least 10% is one, not none (int() rounded down)
        assert n in (9, 3) and sum(1 for c in _copies(few[split]) if not c.get("tools")) == 1, split
    assert all(_names(c) == {"a", "c"} for c in copies if c.get("tools"))  # the others as masking made them
    assert masking.mask_splits(every, 0.2, seed=1) == (out, made)  # drawn with the seed
    # data with a tool-less row of its own: the copies stay as masking made them
    own = {"train": every["train"] + [_text_row("hi")], "eval": []}
    assert not [c for c in _copies(masking.mask_splits(own, 0.2, seed=1)[0]["train"]) if not c.get("tools")]
    # copies left with no tool (the called one was all the row had) count toward the share
    lone = {"train": [_row(f"q{i}", [_call("a")], ["a"] if i % 2 else ["a", "b"]) for i in range(200)], "eval": []}
    lone_copies = _copies(masking.mask_splits(lone, 0.2, seed=1)[0]["train"])
    assert sum(1 for c in lone_copies if not c.get("tools")) == sum(
        1 for r in lone["train"] if len(r["tools"]) == 1 and masking.masked(r) in lone_copies
    )


@pytest.mark.parametrize(
    "reply, said",
    [
        ("", "irrelevance_reply must be a text answer, got ''"),
        ("   ", "must be a text answer"),
        ("caf\udce9", "irrelevance_reply holds '\\udce9', which is not text (a byte that is not UTF-8"),
        (None, "must be a text answer, got None"),
        ('<tool_call>{"name": "x", "arguments": {}}</tool_call>', "reads as a tool call"),
        ('{"name": "lookup", "arguments": {"q": 1}}', "reads as a tool call"),
        ("No tool fits.<|im_end|>", "holds the end-of-turn marker '<|im_end|>'"),
        ("x" * 501, "is 501 characters long (at most 500)"),
    ],
)
def test_a_reply_that_is_no_plain_short_text_is_refused_with_the_fix(reply, said):
    problem = masking.reply_problem(reply)
    assert said in problem and f"e.g. irrelevance_reply={masking.IRRELEVANCE_REPLY!r}" in problem
    assert masking.reply_problem("Dazu passt keines der angebotenen Werkzeuge.") is None


def test_the_reply_is_a_parameter_that_reaches_the_copies_and_the_metadata(store, tmp_path):
    from components.deliver_dataset import deliver_dataset
    from pipelines.dag.finetune import finetune_pipeline
    from trainer.config import params
    from trainer.validate import pipeline_problems

    p = params.BY_NAME["irrelevance_reply"]
    assert (p.type, p.default, p.pipelines) == (str, masking.IRRELEVANCE_REPLY, ("finetune", "sweep"))
    assert "irrelevance_reply" in deliver_dataset.component_spec.inputs
    spec = json.dumps(
        finetune_pipeline.pipeline_spec.root.dag.tasks["deliver-dataset"]
        .inputs.parameters["irrelevance_reply"]
        .component_input_parameter
    )
    assert "irrelevance_reply" in spec
    path = tmp_path / "tools.jsonl"
    data.write_jsonl(_splits(110, 0)["train"], path)
    reply = "Sorry, no tool here does that."
    uri, meta = delivery.deliver_dataset(
        str(path), "", store, eval_fraction=0.1, seed=0, irrelevance_share=0.1, irrelevance_reply=reply
    )
    delivered = data.read_jsonl(store.get_tree(uri) / "train.jsonl")
    assert meta["irrelevance_reply"] == reply
    assert sum(r["messages"][-1].get("content") == reply for r in delivered) == meta["irrelevance_rows"]["train"] == 11
    assert uri != delivery.deliver_dataset(str(path), "", store, eval_fraction=0.1, seed=0, irrelevance_share=0.1)[0]
    assert "irrelevance_reply" not in delivery.deliver_dataset(str(path), "", store)[1]  # no copies, no reply
    err = str(
        pytest.raises(
            UserError,
            delivery.deliver_dataset,
            str(path),
            "",
            store,
            irrelevance_share=0.1,
            irrelevance_reply="<tool_call>",
        ).value
    )
    assert "reads as a tool call" in err
    assert [x for x in pipeline_problems({"irrelevance_reply": "", "nodes": 1}) if "irrelevance_reply" in x] == [
        f"irrelevance_reply must be a text answer, got '': e.g. irrelevance_reply={masking.IRRELEVANCE_REPLY!r}"
    ]


def test_deliver_dataset_cli_takes_the_reply_and_refuses_a_bad_one(tmp_path, capsys):
    from trainer.__main__ import main

    path = tmp_path / "tools.jsonl"
    data.write_jsonl(_splits(40, 0)["train"], path)
    with pytest.raises(SystemExit) as exit_:
        main(["deliver-dataset", str(path), "--irrelevance-share", "0.1", "--irrelevance-reply", " "])
    assert exit_.value.code == 2
    assert "--irrelevance-reply must be a text answer, got ' '" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # `$(printf 'caf\xe9')`: Latin-1, read by Python as a lone surrogate
        main(["deliver-dataset", str(path), "--irrelevance-share", "0.1", "--irrelevance-reply", "caf\udce9"])
    assert exit_.value.code == 2  # was a UnicodeEncodeError traceback from writing the rows, after every check
    assert "--irrelevance-reply holds '\\udce9', which is not text" in capsys.readouterr().err


def test_no_eval_copy_is_a_train_row_when_two_rows_differ_only_in_a_calls_arguments(store, tmp_path, capsys):
    from trainer.data import eval_overlap

    # train and eval ask the same with the same tools, calling with other values: their masked copies are alike
    splits = {
        "train": [_row("book it", [_call("a", "1")], ["a", "b"]) for _ in range(1)] + _splits(40, 0)["train"],
        "eval": [_row("book it", [_call("a", "2")], ["a", "b"])] + _splits(0, 8)["eval"],
    }
    assert eval_overlap(splits) == ""
    for seed in range(20):  # whichever rows the seed draws
        out, _ = masking.mask_splits(splits, 0.5, seed)
        assert eval_overlap(out) == "", seed
    # the delivery warns after masking, on what it delivers
    path = tmp_path / "rows.jsonl"
    data.write_jsonl(splits["train"] * 2, path)  # every row twice: overlap from the data itself
    delivery.deliver_dataset(str(path), "", store, eval_fraction=0.2, seed=0, irrelevance_share=0.2)
    assert "eval rows are also train rows" in capsys.readouterr().out


def test_glaive_and_hermes_rows_are_masked_at_their_call():
    """Issue 44/45: multi-turn rows (call, tool result, text) were refused ("use data with tool calls") though every
    row has a call; a copy is now cut at the call turn, the called function removed, the reply given there."""
    from tests.unit.test_fc_datasets import GLAIVE, write

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        [row] = data.read_rows(write(Path(tmp), [GLAIVE], "glaive.jsonl"))
    assert masking.maskable(row) and masking.data_problem({"train": [row]}, 0.2) is None
    copy = masking.masked(row)
    turn = masking.mask_turn(row)
    # the last call turn that answers the user (get_time: save_note follows a tool result), whose function no earlier
    # turn called; the turns before it kept as they were
    assert row["messages"][turn]["tool_calls"][0]["function"]["name"] == "get_time"
    assert copy["messages"][:-1] == row["messages"][:turn]
    assert copy["messages"][-1] == {"role": "assistant", "content": masking.IRRELEVANCE_REPLY}
    assert _names(copy) == {"convert_currency", "save_note"}  # the earlier turn's tool stays offered
    assert data.validate_rows([copy], "copies") and fc_check.category(copy) == "irrelevance"


def test_distractor_copies_offer_tools_other_rows_call_in_place_of_the_removed_one():
    """Issue 56: distractors come from the tools the training rows call (a library tool no row calls taught SmolLM2
    to decline whatever it had never seen called) and are offered beside the row's remaining tools, as Hammer's
    irrelevance rows are; the copies that got one are counted, and a pool with nothing to offer leaves a plain copy."""
    splits = _splits(200, 40)
    splits["train"] += [_row(f"other {i}", [_call(n)], [n, "zeta_tool"]) for i, n in enumerate(["d", "e", "f"])]
    pool = {t["function"]["name"] for t in masking.tool_pool(splits)}
    assert pool == {"a", "b", "d", "e", "f"}  # called ones only: c and zeta_tool are offered, never called
    out, made = masking.mask_splits(splits, 0.2, seed=1, distractors=1.0)
    with_any = 0
    for name in ("train", "eval"):
        for c in _copies(out[name]):
            if c.get("tools"):  # not one of the tool-less copies
                extra = _added(c, splits)
                assert extra <= pool and len(extra) <= 2, extra  # as many as were removed (parallel rows: 2)
                with_any += bool(extra)
    assert with_any > 0
    assert masking.mask_splits(splits, 0.2, seed=1, distractors=1.0) == (out, made)  # seeded
    assert masking.mask_splits(splits, 0.2, seed=1)[0] != out  # 0: the rows' own remaining tools, as before
    # nothing in the pool that is not offered already: a plain copy, and the count says so
    lone = {"train": [_row(f"r {i}", [_call("a")], ["a", "b"]) for i in range(40)], "eval": []}
    stats: dict[str, int] = {}
    _, copies = masking.mask_split(lone["train"], 0.2, 0, "train", distractors=1.0, pool=[_tool("a")], stats=stats)
    assert stats["distractors"] == 0 and all(_names(c) <= {"b"} for c in copies)
    for bad in (-0.1, 1.5, float("nan"), True, "0.5"):
        err = str(pytest.raises(UserError, masking.mask_splits, splits, 0.2, 1, distractors=bad).value)
        assert err.startswith("irrelevance_distractors must be a number from 0 to 1") and "e.g." in err


def _added(copy, splits):
    """The tools `copy` offers beyond its row's remaining ones; asserts that those are all offered and the removed
    ones gone."""
    row = next(r for rows in splits.values() for r in rows if r["messages"][:-1] == copy["messages"][:-1])
    removed = masking.called(row)
    left = {t["function"]["name"] for t in row.get("tools") or []} - removed
    got = _names(copy)
    assert not got & removed and left <= got, (row, copy)
    return got - left


def _lib(name):
    from trainer.data.tool_library import LIBRARY

    return next(t for t in LIBRARY if t["function"]["name"] == name)


@pytest.mark.parametrize(
    "request_text, removed, description, fitting, unrelated",
    [
        # issue 57 F15: a BMI question masked with the library's body_mass_index offered, answered "none fits"
        (
            "What is my BMI? I weigh 70 kg and I am 1.75 m tall.",
            "calculate_bmi",
            "Calculate BMI",
            "body_mass_index",
            "song_lyrics",
        ),
        (
            "Get me a spot at Luigi's for 4 at 8pm.",
            "make_reservation",
            "Make a restaurant reservation",
            "book_table",
            "stock_quote",
        ),
        (
            "What would I pay a month on 300k over 30 years?",
            "mortgage_calculator",
            "Monthly mortgage payment",
            "loan_payment",
            "timezone_of",
        ),
        ("20 EUR in USD?", "convert_currency", "Convert money between currencies", "convert_length", "song_lyrics"),
    ],
)
def test_a_tool_that_fits_the_request_is_no_distractor(request_text, removed, description, fitting, unrelated):
    """Issue 57 F15: distractors were filtered by the words of the removed function's name alone, so
    make_reservation / book_table and mortgage_calculator / loan_payment, which share none, were offered, and the
    row taught declining a tool that does the job. `fits` reads the removed tool's name, description and parameters
    and the request."""
    import random

    own = {"type": "function", "function": {"name": removed, "description": description, "parameters": {}}}
    row = {
        "messages": [
            {"role": "user", "content": request_text},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": removed, "arguments": {}}}],
            },
        ],
        "tools": [own],
    }
    assert masking.fits(_lib(fitting), row) and not masking.fits(_lib(unrelated), row)
    pool = [_lib(fitting), _lib(unrelated)]
    for seed in range(10):
        assert [t["function"]["name"] for t in masking.distractors_for(row, pool, random.Random(seed))] == [unrelated]


def test_a_share_that_makes_no_row_is_refused_at_validate_naming_the_least_that_makes_one(tmp_path):
    """Refused, not warned: irrelevance_share was set to add rows, and copies_for rounds each split's count to 0,
    so the run would train without them and no later line would say so; the fix names the least share that makes
    one row."""
    from trainer.data import builtin_data
    from trainer import data
    from trainer.validate import pipeline_problems

    data.write_jsonl(builtin_data.generate(40, 0, seed=3)["train"], tmp_path / "mine.jsonl")
    source = str(tmp_path / "mine.jsonl")
    [refused] = [
        p for p in pipeline_problems({"dataset_source": source, "irrelevance_share": 0.005}) if "irrelevance_share" in p
    ]
    assert refused.startswith(
        f"irrelevance_share=0.005 makes no irrelevance row from dataset_source {source!r}'s "
        "36 train and 4 eval rows (each split's count rounds to 0): give at least "
        "irrelevance_share=0.014, or 0 for none"
    ), refused
    assert masking.copies_for(36, 0.014) == 1 and masking.copies_for(36, 0.013) == 0
    assert not [
        p for p in pipeline_problems({"dataset_source": source, "irrelevance_share": 0.014}) if "irrelevance_share" in p
    ]


def test_settings_that_do_nothing_are_warned_at_validate(capsys):
    """Warned, not refused: irrelevance_reply or irrelevance_distractors without a share, and bfcl_rows without the
    bfcl suite, are harmless and often left set while the share or the suite is turned off for one run (a
    comparison, a quick held-out score); a bfcl_source without the suite stays refused (_suite_problems: a path or
    upload given is meant to be read). One line each, printed by the validate-params step (and run_local)."""
    from components.validate_params import validate_params
    from trainer.validate import pipeline_warnings

    assert (
        pipeline_warnings({}) == []
        and pipeline_warnings(
            {"irrelevance_share": 0.1, "irrelevance_distractors": 0.5, "irrelevance_reply": "No tool fits."}
        )
        == []
    )
    [both] = pipeline_warnings(
        {"irrelevance_share": 0.0, "irrelevance_reply": "No tool fits.", "irrelevance_distractors": 0.5}
    )
    assert both == (
        "irrelevance_reply='No tool fits.' and irrelevance_distractors=0.5 apply to the rows function "
        "masking makes, but irrelevance_share is 0, so none are made: set irrelevance_share (e.g. 0.1), or "
        "leave them at the default"
    )
    [rows] = pipeline_warnings({"eval_suites": "heldout", "bfcl_rows": 100})
    assert rows.startswith("bfcl_rows=100 applies to the bfcl suite, but eval_suites='heldout' does not score it")
    assert pipeline_warnings({"eval_suites": "heldout,bfcl", "bfcl_rows": 100}) == []
    validate_params.python_func(irrelevance_distractors=0.5)
    out = capsys.readouterr().out
    assert out.count("WARNING: irrelevance_distractors=0.5 applies to the rows") == 1 and "parameters OK" in out


def test_no_train_copy_is_an_eval_row_so_the_overlap_warning_is_the_datas_own(store, tmp_path, capsys):
    """A train row whose masked copy equals an eval row (the eval split already holds that text answer): the copy
    was made, and deliver-dataset's overlap warning then blamed the user's data. Train's copies now avoid the eval
    rows as eval's avoid the train rows; the warning fires only for duplicates the data itself holds."""
    from trainer.data import eval_overlap

    book = _row("book it", [_call("a")], ["a", "b"])
    splits = {
        "train": [book] + _splits(40, 0)["train"],
        "eval": [masking.masked(book, masking.IRRELEVANCE_REPLY)] + _splits(0, 8)["eval"],
    }
    assert eval_overlap(splits) == ""
    for seed in range(10):  # a share of 0.5 masks every maskable train row it may
        out, made = masking.mask_splits(splits, 0.5, seed)
        assert eval_overlap(out) == "" and made["train"] > 0, seed
        assert not [c for c in _copies(out["train"]) if c["messages"][0]["content"] == "book it"]
    path = tmp_path / "rows"
    path.mkdir()
    data.write_jsonl(splits["train"], path / "train.jsonl")
    data.write_jsonl(splits["eval"], path / "eval.jsonl")
    delivery.deliver_dataset(str(path), "", store, seed=0, irrelevance_share=0.5)
    assert "eval rows are also train rows" not in capsys.readouterr().out


def test_the_log_counts_the_copies_that_offer_distractors(capsys):
    """With every copy asked to offer distractors, the tool-less tenth (data with no tool-less row) is said apart,
    and only the copies that got a distractor are counted (the line said "100% offer unrelated tools" beside "N of
    them offer no tool"; a pool with nothing to add still counted)."""
    splits = {k: [r for r in v if r.get("tools")] for k, v in _splits(200, 40).items()}
    splits["train"] += [_row(f"other {i}", [_call(n)], [n]) for i, n in enumerate(["d", "e"])]
    out, made = masking.mask_splits(splits, 0.3, seed=2, distractors=1.0)
    copies = [c for rows in out.values() for c in _copies(rows)]
    toolless = sum(not c.get("tools") for c in copies)
    added = sum(bool(_added(c, splits)) for c in copies if c.get("tools"))
    assert toolless and added == len(copies) - toolless  # d and e for the a, b, c rows; a or b for theirs
    line = capsys.readouterr().out
    assert (
        f"; {toolless} of them offer no tool; {added} offer, in place of the removed, tools other training rows call"
        in line
    )
