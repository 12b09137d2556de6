"""Irrelevance rows made by function masking (pipeline parameter `irrelevance_share`).

Training on tool rows alone teaches "always call": a model tuned on them calls some tool even when none
fits the request (SmolLM2-135M tuned here went from 100% to 64% of text-wanted rows answered in text).
Hammer's recipe against it (xLAM's 60k rows + 7.5k such rows) is function masking: a copy of a tool row
whose called function is removed from the offered tools, answered with a text reply that no offered tool
fits. The copy keeps the conversation up to the call, so the model learns to read the offered tools
rather than the request alone: the same request gets the call while its function is offered, and the
reply once it is not.

From the user's own tool rows, single- or multi-turn: the copy is cut at a call turn (`mask_turn`: the last
trained assistant turn that calls only functions the row offers, none of them called in an earlier turn, so
a glaive or Hermes row -- call, tool result, text -- is masked at its call; a turn that answers a user is
preferred to one right after a tool result, whose copy would read as the answer to that result), every function that turn calls
is removed from the row's tools, the turn becomes `irrelevance_reply` (IRRELEVANCE_REPLY by default), and
what follows it is dropped. The tools left are kept (an `irrelevance` row for trainer.chat.fc_check); where the
called functions were all the row offered, the copy offers no tools at all (a plain `chat` row, which
teaches the model not to call a tool it was never given). Where the data has no tool-less row at all, at least
TOOLLESS_SHARE of the copies offer no tools (the tools left removed too, drawn with the seed), so the model
still sees requests answered without any tool.

Distractors (pipeline parameter `irrelevance_distractors`): that share of the copies offer, beside the row's
remaining tools, as many tools as were removed, drawn from the tools the dataset's training rows call, none that
fits the request (`fits`), as Hammer makes its irrelevance rows: the true tool is replaced by one that looks as
familiar and does another job. They used to come from a library of schemas no training row calls
(trainer.data.tool_library) and to replace the remaining tools: SmolLM2 tuned so (2026-11-29) declined every tool
it had never seen called, BFCL's included (BFCL AST 0%), so familiarity was the cue it learned. Tools an earlier
turn called stay offered.

Each split is masked on its own, after the train/eval split (a masked copy of an eval row never lands in
train), with the same share, so the eval split measures the `irrelevance` category; the copies are drawn
with the seed and spread evenly through their split (evaluate scores a prefix of eval_max_rows rows).
`irrelevance_share` is the share of each delivered split's rows that are such copies: 0.15 makes 15 of
every 100 rows delivered (15 copies beside 85 rows of the data), at most as many as the split has rows to
mask.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any, cast

from trainer.chat.types import Message, Row, Tool
from trainer.chat.parsers import END_MARKERS, parse_tool_call
from trainer.chat.turns import trained_turns
from trainer.data.formats import QUIET
from trainer.data.preflight import conversation_key
from trainer.core.errors import UserError
from trainer.core.jsontext import lone_surrogate
from trainer.config.params import BY_NAME
from trainer.chat.usertext import control_problem

# The masked turn's answer by default (pipeline parameter irrelevance_reply): short, neutral, the same in every
# row, so the model learns one behaviour and the held-out text match can score it.
IRRELEVANCE_REPLY = BY_NAME["irrelevance_reply"].default
SHARE_MAX = 0.5  # above it, declining would outnumber calling in the data the model learns from
DISTRACTORS_MAX = 4  # tools a copy with distractors offers at most (BFCL's irrelevance rows offer 1-3)
REPLY_MAX_CHARS = 500
# Of the copies made from data that has no tool-less row, at least this share offer no tools at all
TOOLLESS_SHARE = 0.1
# What makes a text answer read as a call to some parser (hermes, mistral, llama3_json's python tag)
_CALL_MARKERS = ("<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>")


def share_problem(share: Any, name: str = "irrelevance_share") -> str | None:
    """Why `share` is not a usable irrelevance share (None when it is), with the fix."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share):
        return f"{name} must be a finite number from 0 to {SHARE_MAX}, got {share!r}: e.g. {name}=0.1"
    if not 0 <= share <= SHARE_MAX:
        return (
            f"{name}={share:g} is out of range: it is the share of each split's rows made by function masking, "
            f"from 0 (none) to {SHARE_MAX} (half); e.g. {name}=0.1"
        )
    return None


def is_fraction(value: Any) -> bool:
    """A finite number from 0 to 1 (a boolean is none): what every share of the data's rows is."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1


def distractors_problem(share: Any, name: str = "irrelevance_distractors") -> str | None:
    """Why `share` is not a usable share of masked copies with distractors (None when it is), with the fix."""
    if not is_fraction(share):
        return (
            f"{name} must be a number from 0 to 1 (the share of the masked copies that offer, in place of the "
            f"removed tool, tools other rows call), got {share!r}: e.g. {name}=0.5"
        )
    return None


def reply_problem(reply: Any, name: str = "irrelevance_reply") -> str | None:
    """Why `reply` cannot be the masked rows' answer (None when it can), with the fix: it must be plain text that
    no tool-call parser reads as a call and that holds no end-of-turn marker (training would teach either)."""
    fix = f"e.g. {name}={IRRELEVANCE_REPLY!r}"
    if not isinstance(reply, str) or not reply.strip():
        return f"{name} must be a text answer, got {reply!r}: {fix}"
    if found := lone_surrogate(reply, name):  # bytes that are no UTF-8 in a command-line argument
        return (
            f"{name} holds {found[1]!a}, which is not text (a byte that is not UTF-8, or half of a UTF-16 pair) and "
            f"cannot be written to the dataset: give the reply as UTF-8 text, {fix}"
        )
    if len(reply) > REPLY_MAX_CHARS:
        return (
            f"{name} is {len(reply)} characters long (at most {REPLY_MAX_CHARS}): one short sentence is what the "
            f"model should learn to say; {fix}"
        )
    if any(m in reply for m in _CALL_MARKERS) or parse_tool_call(reply) is not None:
        return (
            f"{name} {reply[:80]!r} reads as a tool call, so the masked rows would teach calling where no tool "
            f"fits: give plain text, {fix}"
        )
    if marker := next((m for m in END_MARKERS if m in reply), None):
        return f"{name} holds the end-of-turn marker {marker!r}, which would end the answer early: {fix}"
    return control_problem(reply, name, fix)


def _name(tool: Any) -> Any:
    fn = tool.get("function", tool) if isinstance(tool, dict) else None
    return fn.get("name") if isinstance(fn, dict) else None


def _calls(message: Message) -> set[str]:
    return {c["function"]["name"] for c in message.get("tool_calls") or []}


def mask_turn(row: Row) -> int | None:
    """The turn a masked copy is cut at: the last trained assistant turn that calls only functions the row
    offers, none of them called in an earlier turn (the copy's history would call a tool it no longer
    declares); None when no turn qualifies."""
    offered = {_name(t) for t in row.get("tools") or []}
    trained, earlier, found = set(trained_turns(row["messages"])), set[str](), list[int]()
    for i, m in enumerate(row["messages"]):
        names = _calls(m)
        if i in trained and names and names <= offered and not names & earlier:
            found.append(i)
        earlier |= names
    # a turn that answers a user prefers: its copy is an irrelevance row (a request no offered tool fits), where a
    # reply right after a tool result would read as the answer to that result (trainer.chat.fc_check's multi_turn)
    asked = [i for i in found if row["messages"][i - 1].get("role") != "tool"]
    return (asked or found)[-1] if found else None


def called(row: Row) -> set[str]:
    """The functions the turn a copy is cut at calls (`mask_turn`; empty: no turn can be masked)."""
    turn = mask_turn(row)
    return set() if turn is None else _calls(row["messages"][turn])


def maskable(row: Row) -> bool:
    """A row with a call turn to mask (`mask_turn`)."""
    return mask_turn(row) is not None


def _history_tools(row: Row, turn: int) -> list[Tool]:
    """The row's tools that the turns before `turn` call: a copy keeps offering them."""
    earlier = {n for m in row["messages"][:turn] for n in _calls(m)}
    return [t for t in row.get("tools") or [] if _name(t) in earlier]


def masked(
    row: Row, reply: str = IRRELEVANCE_REPLY, distractors: list[Tool] | None = None, instead: bool = False
) -> Row:
    """A copy of `row` (maskable) cut at its `mask_turn`, without the functions that turn calls, answered with
    `reply`; without `tools` when none is left. `distractors`: tools offered beside the row's remaining ones (in
    a seeded place among them), or `instead` of them (beside those earlier turns call: trainer.data.builtin_data's
    decline rows). The row's other fields and earlier turns stay as they are."""
    turn = mask_turn(row)
    if turn is None:
        raise ValueError("masked() of a row with no turn to mask: ask maskable() first")
    names = _calls(row["messages"][turn])
    left = (
        _history_tools(row, turn) + list(distractors)
        if distractors is not None and instead
        else [t for t in row["tools"] if _name(t) not in names] + list(distractors or [])
    )
    # the row's other fields first, as they were (the copy's JSON keeps the row's key order)
    out = cast(Row, {k: v for k, v in row.items() if k not in ("messages", "tools")})
    out["messages"] = [*row["messages"][:turn], Message(role="assistant", content=reply)]
    if left:
        out["tools"] = left
    return out


# Words that say nothing about what a tool does (English glue and the verbs every tool name starts with): two tools
# or a tool and a request sharing only these are not alike.
_GLUE = frozenset(
    "a an the of in on at to for from by with and or is are be it its this that my me i you your we our what whats "
    "which how much many please can could would will do does any all some there here tell need want like about get "
    "set find search list show give make check calculate compute current latest new value values number numbers "
    "info information details data given between into per each one two".split()
)
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def words(text: Any) -> set[str]:
    """The content words of a name or a text, lower case (a name split at `_`, `-`, `.` and capitals), and the
    initials of a name of three words or more (body_mass_index also says "bmi")."""
    found = [w.lower() for w in _WORD.findall(str(text))]
    out = {w for w in found if len(w) >= 3 and w not in _GLUE}
    if len(found) >= 3 and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*(?:[_.\-]?[A-Za-z0-9]+)*", str(text)):
        out.add("".join(w[0] for w in found))  # an identifier of three words or more: its initials too
    return out


def _alike(a: set[str], b: set[str]) -> bool:
    """Two sets of words share one, or one word's first 4 letters (reserve, reservation; book, booking)."""
    return bool(a & b) or bool({w[:4] for w in a if len(w) >= 4} & {w[:4] for w in b if len(w) >= 4})


def tool_words(tool: Any) -> set[str]:
    """What a tool is about: its name's, description's and parameters' words (`words`)."""
    fn = tool.get("function", tool) if isinstance(tool, dict) else {}
    fn = fn if isinstance(fn, dict) else {}
    params = fn.get("parameters")
    props = params.get("properties") if isinstance(params, dict) else None
    return (
        words(fn.get("name", ""))
        | words(fn.get("description", ""))
        | set().union(*(words(p) for p in (props if isinstance(props, dict) else {})))
    )


def fits(tool: Any, row: Row) -> bool:
    """Whether `tool` might do what the row's masked turn asks, so that it is no distractor for it: it shares a word
    (`_alike`) with a function that turn calls (convert_length for convert_currency; loan_payment for
    mortgage_calculator, "Monthly mortgage payment") or with the requests before it (body_mass_index, "bmi", for
    "What is my BMI?"; book_table for "Reserve a table"). A heuristic that errs towards refusing a tool as a
    distractor: a distractor that fits teaches the model to decline a tool that does the job."""
    turn = mask_turn(row)
    if turn is None:
        return False
    names = _calls(row["messages"][turn])
    removed = set().union(*(tool_words(t) for t in row.get("tools") or [] if _name(t) in names))
    removed |= set().union(*(words(n) for n in names))
    asked = set().union(*(words(m.get("content") or "") for m in row["messages"][:turn] if m.get("role") == "user"))
    mine = tool_words(tool)
    return _alike(mine, removed) or _alike(mine, asked)


def tool_pool(splits: dict[str, list[Row]]) -> list[Tool]:
    """The tools the train split's rows call (the schema the calling row offers, one per name, first seen), in a
    fixed order: what distractors are drawn from, so that a distractor is as familiar as the tool it replaces.
    Without a train split, the tools every split's rows call."""
    pool: dict[str, Tool] = {}
    for rows in [splits["train"]] if "train" in splits else list(splits.values()):
        for row in rows:
            offered = {_name(t): t for t in row.get("tools") or []}
            for m in row["messages"]:
                for name in _calls(m):
                    if isinstance(name, str) and name in offered:
                        pool.setdefault(name, offered[name])
    return [pool[name] for name in sorted(pool)]


def distractors_for(row: Row, pool: list[Tool], rng: random.Random, k: int | None = None) -> list[Tool]:
    """`k` tools, or as many as the masked turn calls (at most DISTRACTORS_MAX), drawn from `pool`: none the row
    offers, none that `fits` the request (fewer, or none, where the pool has too few)."""
    own = {_name(t) for t in row.get("tools") or []}
    fit = [t for t in pool if _name(t) not in own and not fits(t, row)]
    k = max(1, min(DISTRACTORS_MAX, len(called(row)))) if k is None else k
    return rng.sample(fit, min(len(fit), k))


def copies_for(n_rows: int, share: float) -> int:
    """How many masked copies make `share` of a split of `n_rows` rows plus the copies."""
    return round(n_rows * share / (1 - share)) if n_rows and share > 0 else 0


def spread(rows: list[Any], extra: list[Any]) -> list[Any]:
    """`rows` and `extra` merged, each in its order, each row at its relative position in its list:
    any first N rows of the result hold both kinds in proportion."""
    keyed = [((i + 0.5) / len(rows), 0, i) for i in range(len(rows))] + [
        ((j + 0.5) / len(extra), 1, j) for j in range(len(extra))
    ]
    return [(extra if which else rows)[i] for _, which, i in sorted(keyed)]


def mask_split(
    rows: list[Row],
    share: float,
    seed: int,
    split: str,
    reply: str = IRRELEVANCE_REPLY,
    avoid: frozenset[str] = frozenset(),
    distractors: float = 0.0,
    pool: list[Tool] | None = None,
    stats: dict[str, int] | None = None,
) -> tuple[list[Row], list[Row]]:
    """(`rows` with masked copies of some of them spread through, the copies): `copies_for` of them, at
    most one per maskable row, drawn with `seed` and the split's name (the same copies on every machine);
    `distractors` of them (a share, rounded up) offer tools drawn from `pool` (`tool_pool`) beside the row's
    remaining ones, in place of those removed. `avoid`: conversation keys (trainer.data.preflight.conversation_key) no copy may
    have: the train split's rows, for the eval split's copies (two rows that differ only in a call's
    arguments mask alike), and the eval split's rows, for the train split's copies. `stats["distractors"]` (when
    given) counts the copies that offer distractors."""
    candidates = [r for r in rows if maskable(r) and (not avoid or conversation_key(masked(r, reply)) not in avoid)]
    n = min(copies_for(len(rows), share), len(candidates))
    if not n:
        return rows, []
    rng = random.Random(f"irrelevance-masking:{seed}:{split}")
    chosen = [candidates[i] for i in sorted(rng.sample(range(len(candidates)), n))]
    with_distractors = set(rng.sample(range(n), min(n, math.ceil(n * distractors)))) if distractors > 0 else set()
    copies = []
    for i, row in enumerate(chosen):
        drawn = distractors_for(row, pool or tool_pool({split: rows}), rng) if i in with_distractors else []
        if not drawn:  # the pool holds no tool that is not offered and does not fit: a plain copy
            with_distractors.discard(i)
        copy = masked(row, reply, drawn or None)
        if drawn:  # the distractors anywhere in the list, not last
            rng.shuffle(copy["tools"])
        copies.append(copy)
    if all(r.get("tools") for r in rows):  # data with no tool-less row gets some: a model must answer without tools too
        offered = [i for i, c in enumerate(copies) if c.get("tools")]
        wanted = max(0, math.ceil(n * TOOLLESS_SHARE) - (n - len(offered)))  # at least the share, one of a few copies
        # taken from the copies without distractors first, so that the distractors' share holds where it can
        plain = [i for i in offered if i not in with_distractors]
        taken = rng.sample(plain, min(wanted, len(plain)))
        taken += rng.sample(
            [i for i in offered if i in with_distractors], min(wanted - len(taken), len(offered) - len(plain))
        )
        for i in taken:
            copies[i] = cast(Row, {k: v for k, v in copies[i].items() if k != "tools"})
            with_distractors.discard(i)
        kept = [i for i, c in enumerate(copies) if conversation_key(c) not in avoid]  # one without tools may match
        with_distractors &= set(kept)
        copies = [copies[i] for i in kept]
    if stats is not None:
        stats["distractors"] = stats.get("distractors", 0) + len(with_distractors)
    return spread(rows, copies), copies


def data_problem(
    splits: dict[str, list[Row]], share: float, what: str = "the dataset", name: str = "irrelevance_share"
) -> str | None:
    """The refusal of a share above 0 for data whose training rows have no call to mask (None otherwise), saying
    which of the conditions the rows miss."""
    train = splits.get("train", [])
    if share <= 0 or any(maskable(r) for r in train):
        return None
    calls = [r for r in train if any(_calls(m) for m in r["messages"])]
    if not calls:
        why = "no training row makes a tool call (no assistant turn has tool_calls)"
    elif not any(r.get("tools") for r in calls):
        why = (
            f"its {len(calls)} training rows with tool calls offer no tools (no `tools` list, or a glaive system "
            "prompt without function JSON), so there is no offered function to remove"
        )
    else:
        why = (
            f"in each of its {len(calls)} training rows with tool calls, every call turn calls a function the row "
            "does not offer or one an earlier turn already called"
        )
    return (
        f"{name}={share:g}, but {what} has nothing function masking can make irrelevance rows from: {why}; set "
        f"{name}=0, or use rows whose calls name functions in the row's tools"
    )


def mask_splits(
    splits: dict[str, list[Row]],
    share: float,
    seed: int,
    what: str = "the dataset",
    reply: str = IRRELEVANCE_REPLY,
    distractors: float = 0.0,
) -> tuple[dict[str, list[Row]], dict[str, int]]:
    """Every split with its masked copies (`mask_split`) answered `reply`, `distractors` of them offering tools the
    training rows call (`tool_pool`) in place of those removed, and the copies made per split; says how many (one line,
    unless the reading is quiet: trainer.data.quiet_conversions).

    Raises:
        UserError: the share is out of range or the reply unusable, or a share above 0 for data with no tool-call
            row to mask.
    """
    if (
        problem := share_problem(share)
        or distractors_problem(distractors)
        or reply_problem(reply)
        or data_problem(splits, share, what)
    ):
        raise UserError(problem)
    pool = tool_pool(splits) if distractors > 0 else []
    out: dict[str, list[Row]] = {}
    copies: dict[str, list[Row]] = {}
    stats = {"distractors": 0}
    # Train first: no eval copy may be a train row (a copy included); and no train copy may be an eval row, which
    # would score the tuned model on a row it trained on (data.eval_overlap then blamed the user's data for it).
    evals = frozenset(conversation_key(r) for n, rows in splits.items() if n != "train" for r in rows)
    for name in sorted(splits, key=lambda n: n != "train"):
        avoid = (
            frozenset(conversation_key(r) for r in out["train"])
            if name != "train" and "train" in out
            else evals
            if name == "train"
            else frozenset()
        )
        out[name], copies[name] = mask_split(splits[name], share, seed, name, reply, avoid, distractors, pool, stats)
    out = {name: out[name] for name in splits}
    made = {name: len(rows) for name, rows in copies.items()}
    if share > 0 and not QUIET.get():
        toolless = sum(1 for rows in copies.values() for r in rows if not r.get("tools"))
        print(
            f"{sum(made.values())} irrelevance rows made by function masking (irrelevance_share={share:g}: "
            + ", ".join(f"{made[n]} of {len(out[n])} {n} rows" for n in out)
            + f"): the called functions removed from the offered tools, answered {reply!r}"
            + (f"; {toolless} of them offer no tool" if toolless else "")
            + (
                f"; {stats['distractors']} offer, in place of the removed, tools other training rows call that do "
                f"not fit the request (irrelevance_distractors={distractors:g}, from {len(pool)} tools)"
                if distractors > 0
                else ""
            ),
            flush=True,
        )
    return out, made
