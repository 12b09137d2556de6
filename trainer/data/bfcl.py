"""The Berkeley Function Calling Leaderboard's data (BFCL v4), read from its PyPI wheel.

BFCL's questions, function documents and possible answers ship in the wheel `bfcl-eval` (Apache-2.0)
under `bfcl_eval/data/`. Its package dependencies are every vendor SDK and a numpy pin, so it is never a
dependency of this project: `fetch` runs `pip download --no-deps` of the pinned version (into a folder the
caller owns), and `extract` copies the files of the single-turn categories below, plus a VERSION file, into
a tree that delivery uploads content-addressed like any dataset (trainer.store.delivery.deliver_bfcl).

A BFCL row read here (`read`) is a chat row the evaluation asks as BFCL asks an OpenAI-style FC model
(model_handler/utils.py `convert_to_tool`): its functions as OpenAI tools, Gorilla's types mapped to JSON
schema (`dict` -> object, `float` -> number, `tuple` -> array, `any` -> string, ...), `.` in names written
as `_`; its first turn's messages as given. The original function documents and BFCL's possible answers
travel with it for the checker (trainer.evaluate.bfcl).
"""

from __future__ import annotations

import copy
import json
import random
import re
import shutil
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, Callable

from trainer.chat.types import Row, Tool
from trainer.core import pypi
from trainer.data.preflight import conversation_key
from trainer.core.errors import UserError
from trainer.chat.usertext import UNSPACED_CHAR as _UNSPACED_CHAR
from trainer.chat.usertext import words  # noqa: F401 - the contamination guard's split, also bfcl.words

VERSION = "2026.3.23"
PACKAGE = f"bfcl-eval=={VERSION}"
FETCH_TIMEOUT_S = 300

# The single-turn categories (multi-turn later); BFCL's own names. Irrelevance rows have no answer file:
# right means no call.
NON_LIVE_AST = ("simple_python", "multiple", "parallel", "parallel_multiple")
LIVE_AST = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
IRRELEVANCE = ("irrelevance", "live_irrelevance")
CATEGORIES = NON_LIVE_AST + ("irrelevance",) + LIVE_AST + ("live_irrelevance",)

_DATA = "bfcl_eval/data"
VERSION_FILE = "VERSION"

# constants/type_mappings.py GORILLA_TO_OPENAPI (the names BFCL's function documents use)
GORILLA_TO_OPENAPI = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "double": "number",
    "char": "string",
    "ArrayList": "array",
    "Array": "array",
    "HashMap": "object",
    "Hashtable": "object",
    "Queue": "array",
    "Stack": "array",
    "Any": "string",
    "String": "string",
    "Bigint": "integer",
}


def data_file(category: str) -> str:
    return f"BFCL_v4_{category}.json"


def fetch(dest: Path) -> Path:
    """`pip download --no-deps bfcl-eval==VERSION -d dest` (the index pip is configured with); the wheel."""
    try:
        return pypi.download_wheel(PACKAGE, dest, FETCH_TIMEOUT_S)
    except pypi.FetchError as err:
        raise UserError(
            f"cannot fetch {PACKAGE} from the package index ({err}); where pods reach no package index, "
            f"download it once (`pip download --no-deps {PACKAGE}`) and pass the wheel, its unpacked "
            "bfcl_eval/data folder, or its s3:// upload as bfcl_source"
        ) from None


def _version_of_wheel(name: str) -> str:
    got = re.match(r"bfcl_eval-([^-]+)-", name)
    return got[1] if got else "unknown"


def _listed(missing: list[str]) -> str:
    return ", ".join(missing[:4]) + (f" and {len(missing) - 4} more of its files" if len(missing) > 4 else "")


def extract(source: Path, dest: Path, check: bool = True) -> Path:
    """The tree the evaluation reads, from a bfcl-eval wheel or a folder (its `bfcl_eval/data` folder, or
    a tree made here before): `BFCL_v4_<category>.json` and `possible_answer/` for every category in
    CATEGORIES, and VERSION. Every missing file is named at once; every category is then read (`checked`), unless
    `check` is False (a caller that reads them all itself, as the contamination check does)."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = [data_file(c) for c in CATEGORIES] + [
        f"possible_answer/{data_file(c)}" for c in CATEGORIES if c not in IRRELEVANCE
    ]
    if source.is_file():
        if source.suffix != ".whl":
            raise UserError(f"bfcl_source {source}: expected a bfcl-eval wheel (.whl) or a folder of BFCL's data")
        try:
            with zipfile.ZipFile(source) as whl:
                names = set(whl.namelist())
                missing = [w for w in wanted if f"{_DATA}/{w}" not in names]
                if missing:
                    raise UserError(f"bfcl_source {source}: the wheel lacks {_listed(missing)}: use {PACKAGE}")
                for w in wanted:
                    (dest / w).parent.mkdir(parents=True, exist_ok=True)
                    (dest / w).write_bytes(whl.read(f"{_DATA}/{w}"))
        except zipfile.BadZipFile:
            raise UserError(
                f"bfcl_source {source}: not a wheel (not a zip file, or one cut short); use {PACKAGE}'s wheel, "
                f"downloaded again (pip download --no-deps {PACKAGE})"
            ) from None
        except (zlib.error, EOFError, OSError) as err:  # a member cut short or damaged: a download that stopped
            raise UserError(
                f"bfcl_source {source}: the wheel is damaged ({type(err).__name__}: {str(err)[:80]}); download it "
                f"again (pip download --no-deps {PACKAGE})"
            ) from None
        (dest / VERSION_FILE).write_text(_version_of_wheel(source.name) + "\n")
        return checked(dest, f"bfcl_source {source}") if check else dest
    if not source.is_dir():
        raise UserError(f"bfcl_source {source}: no such file or folder")
    root = source / _DATA if (source / _DATA).is_dir() else source
    missing = [w for w in wanted if not (root / w).is_file()]
    if missing:
        raise UserError(
            f"bfcl_source {source}: lacks {_listed(missing)}: give the bfcl_eval/data folder of {PACKAGE} "
            "(or the wheel itself)"
        )
    for w in wanted:
        (dest / w).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / w, dest / w)
    version = (root / VERSION_FILE).read_text().strip() if (root / VERSION_FILE).is_file() else "unknown (a folder)"
    (dest / VERSION_FILE).write_text(version + "\n")
    return checked(dest, f"bfcl_source {source}") if check else dest


def checked(tree: Path, what: str) -> Path:
    """`tree`, every category of it read as the evaluation reads it (`read`): a data file that is not JSON or not of
    BFCL's rows is refused where the source is given (validate, deliver-bfcl), not when the evaluation reaches it
    after every delivery and the training."""
    for category in CATEGORIES:
        try:
            read(tree, category)
        except UserError as err:
            raise UserError(f"{what}: {err}") from None
    return tree


def fetched(dest: Path) -> Path:
    """The pinned wheel from the package index, extracted into `dest`."""
    with tempfile.TemporaryDirectory(prefix="bfcl-wheel-") as tmp:
        return extract(fetch(Path(tmp)), dest)


def version(tree: Path) -> str:
    path = Path(tree) / VERSION_FILE
    return path.read_text().strip() if path.is_file() else "unknown"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path.name}: not UTF-8 text; re-deliver BFCL's data") from None
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except (json.JSONDecodeError, RecursionError) as err:
                raise UserError(
                    f"{path.name} line {n}: not JSON ({getattr(err, 'msg', err)}); re-deliver BFCL's data"
                ) from None
    return rows


def _cast(properties: dict[str, Any]) -> dict[str, Any]:
    """BFCL's `_cast_to_openai_type`: Gorilla types to JSON schema, nested properties and items too."""
    for value in properties.values():
        kind = value.get("type")
        if kind is None:
            value["type"] = "string"
        else:
            if kind == "float":
                value["format"] = "float"
                value["description"] = value.get("description", "") + " This is a float type value."
            value["type"] = GORILLA_TO_OPENAPI.get(kind, "string")
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _cast(value["properties"])
            elif "items" in value:
                items = value["items"]
                items["type"] = GORILLA_TO_OPENAPI.get(items.get("type"), "string")
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = GORILLA_TO_OPENAPI.get(items["items"].get("type"), "string")
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast(items["properties"])
    return properties


def served_name(name: str) -> str:
    """A function's name as BFCL gives it to OpenAI-style models: `.` written as `_`."""
    return name.replace(".", "_")


def to_tools(functions: list[dict[str, Any]]) -> list[Tool]:
    """BFCL's function documents as OpenAI tools (`convert_to_tool` for OpenAI-style models)."""
    tools: list[Tool] = []
    for fn in copy.deepcopy(functions):
        fn["name"] = served_name(fn["name"])
        params = fn.setdefault("parameters", {})
        params["type"] = "object"
        params["properties"] = _cast(params.get("properties") or {})
        tools.append(Tool(type="function", function=fn))
    return tools


class BfclRow(Row, total=True):
    """A BFCL question as a chat row, with what scores it: its id and category, BFCL's own function docs and
    its possible answers (None for irrelevance: right is no call)."""

    id: str
    category: str
    functions: list[dict[str, Any]]
    ground_truth: Any


def read(tree: Path, category: str) -> list[BfclRow]:
    """Every row of `category`: {"id", "category", "messages", "tools", "functions", "ground_truth"}
    (ground_truth None for irrelevance: right is no call)."""
    if category not in CATEGORIES:
        raise UserError(f"unknown BFCL category {category!r}: one of {', '.join(CATEGORIES)}")
    questions = _jsonl(Path(tree) / data_file(category))
    answers = (
        {}
        if category in IRRELEVANCE
        else {r["id"]: r["ground_truth"] for r in _jsonl(Path(tree) / "possible_answer" / data_file(category))}
    )
    rows: list[BfclRow] = []
    for n, q in enumerate(questions, 1):
        try:
            if category not in IRRELEVANCE and q["id"] not in answers:
                raise UserError(f"BFCL row {q['id']} has no possible answer; re-deliver BFCL's data")
            rows.append(
                BfclRow(
                    id=q["id"],
                    category=category,
                    messages=list(q["question"][0]),
                    tools=to_tools(q["function"]),
                    functions=q["function"],
                    ground_truth=answers.get(q["id"]),
                )
            )
        except (KeyError, TypeError, IndexError, AttributeError) as err:
            raise UserError(
                f"{data_file(category)} row {n} is not a BFCL question ({type(err).__name__}: {str(err)[:60]}); "
                "give BFCL's own data (its wheel, or its bfcl_eval/data folder)"
            ) from None
    return rows


def sample(rows: list[BfclRow], n: int, seed: int) -> list[BfclRow]:
    """`n` rows drawn with `seed` (the same rows in every run with the same seed), in the file's order; 0: all."""
    if n <= 0 or n >= len(rows):
        return list(rows)
    keep = set(random.Random(f"bfcl-{seed}").sample(range(len(rows)), n))
    return [r for i, r in enumerate(rows) if i in keep]


# Contamination: training rows that hold BFCL's questions. Language-model papers measure test-set overlap
# in 13-word n-grams (GPT-3, Brown et al. 2020, section 2.2 and appendix C, removed training documents that
# share a 13-gram with a benchmark): a run that long is no coincidence. Questions shorter than that count
# only as most (at least half) of a message, from MIN_WHOLE words up: under six words BFCL's questions are
# greetings, names and fragments ("hi", "thanks", "who are you", "version", "drink", "who discovered
# radium": 355 of its 3,495 user messages) that a support chat says too, while at six they name a task and
# its arguments ("convert 150 euros to canadian dollars").
NGRAM = 13
MIN_WHOLE = 6
SHOWN = 5  # matched rows shown in the refusal; the rest counted
# A question of MIN_WHOLE to NGRAM-1 words is matched whole only where it names a task: at least MIN_CONTENT of its
# words are not conversational glue (greetings, pronouns, question and helper words: GLUE), and a script written
# without spaces counts two characters a word. "Hi, what can you do for me?" (7 words, none but glue) and
# "你是谁？你能做什么？" (8 characters: 4 words) were refused as BFCL's questions, which a support chat says too;
# "convert 150 euros to canadian dollars" (5 content words) still is one.
MIN_CONTENT = 3
GLUE = frozenset(
    "i im me my mine you your yours we us our he him his she her it its they them their this that these those a an "
    "the is are was were be been am do does did done can could would will shall should may might must have has had "
    "what whats who whom whose which when where why how hi hello hey thanks thank please ok okay yes no and or but "
    "so to of in on at for with about from by as if then there here just also tell know like want need help "
    "anything something everything all any some more much very really good great nice there let lets show give get "
    "go make say see".split()
)

# How text is split into words (NFKC, punctuation as spaces, each character of a script without spaces a word) is
# trainer.chat.usertext.words: the held-out text scoring (ROUGE-L) splits alike.


def names_a_task(w: list[str]) -> bool:
    """Whether a question of fewer than NGRAM words is one to match whole (MIN_CONTENT's rule): MIN_WHOLE words or
    more, MIN_CONTENT of them not GLUE, a character of a script without spaces counting half a word."""
    unspaced = sum(1 for x in w if len(x) == 1 and _UNSPACED_CHAR.fullmatch(x))
    length = len(w) - unspaced + unspaced / 2
    content = sum(1 for x in w if x not in GLUE and not (len(x) == 1 and _UNSPACED_CHAR.fullmatch(x))) + unspaced / 2
    return length >= MIN_WHOLE and content >= MIN_CONTENT


class Questions:
    """BFCL's user messages (every turn of every category, as `words`), indexed once: each 13-word run of a
    question of NGRAM words or more, and the questions of MIN_WHOLE to NGRAM-1 words whole."""

    def __init__(self, tree: Path):
        self.asked: list[tuple[str, list[str]]] = []  # (BFCL id, words)
        self.grams: dict[tuple[str, ...], tuple[int, int]] = {}  # 13 words -> (question, where they start)
        self.whole: dict[tuple[str, ...], int] = {}
        for category in CATEGORIES:
            for q in _jsonl(Path(tree) / data_file(category)):
                for turn in q["question"]:
                    for m in turn:
                        if m.get("role") == "user" and (w := words(_text(m.get("content")))):
                            self.asked.append((q["id"], w))
        for k, (_, w) in enumerate(self.asked):
            if len(w) >= NGRAM:
                for i in range(len(w) - NGRAM + 1):
                    self.grams.setdefault(tuple(w[i : i + NGRAM]), (k, i))
            elif names_a_task(w):
                self.whole.setdefault(tuple(w), k)

    def match(self, w: list[str]) -> tuple[str, list[str]] | None:
        """(BFCL id, the words matched) where `w` shares a 13-word run with a question, or is mostly (at least
        half its words) a whole question of MIN_WHOLE to NGRAM-1 words; else None."""
        for i in range(len(w) - NGRAM + 1):
            if (got := self.grams.get(tuple(w[i : i + NGRAM]))) is not None:
                k, s = got
                qid, q = self.asked[k]
                start, end = i, i + NGRAM
                while start > 0 and s > 0 and w[start - 1] == q[s - 1]:
                    start, s = start - 1, s - 1
                while end < len(w) and s + end - start < len(q) and w[end] == q[s + end - start]:
                    end += 1
                return qid, w[start:end]
        for n in range(min(len(w), NGRAM - 1), max(MIN_WHOLE, -(-len(w) // 2)) - 1, -1):
            for i in range(len(w) - n + 1):
                if (whole := self.whole.get(tuple(w[i : i + n]))) is not None:
                    return self.asked[whole][0], w[i : i + n]
        return None


def _text(content: Any) -> str:
    """A message's text: its content, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _texts(row: Row):
    """(which text, its `words`) of a row the check reads: each user and system message, and the user
    messages together (a question split over two turns)."""
    users: list[list[str]] = []
    for m in row.get("messages") or []:
        if isinstance(m, dict) and m.get("role") in ("user", "system") and (w := words(_text(m.get("content")))):
            if m["role"] == "user":
                users.append(w)
            yield f"{m['role']} message", w
    if len(users) > 1:
        yield "user messages together", [x for w in users for x in w]


def contaminated(rows: list[Row], tree: Path) -> list[tuple[int, str, str, list[str]]]:
    """(index in `rows`, which text, BFCL id, words matched) of each row holding a BFCL question."""
    asked = Questions(tree)
    hits = []
    for n, row in enumerate(rows):
        for which, w in _texts(row):
            if got := asked.match(w):
                hits.append((n, which, *got))
                break
    return hits


def _shortened(w: list[str], limit: int = 80) -> str:
    text = " ".join(w)
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."


def contamination(
    train_rows: list[Row], tree: Path, where: str = "row {}", origins: Callable[[list[Row]], list[str]] | None = None
) -> str | None:
    """None, or the problem: training rows holding BFCL questions (`Questions.match` on each user and system
    message and on the user messages together, as `words`), each distinct row once (a row a mix repeats, or
    a file holds twice, is one) with where it is, the BFCL id and the words matched; SHOWN of them, the rest
    counted.

    `origins`: where each of the matched rows (distinct, in order) is, e.g. "data.jsonl:17", for rows that
    went through a shuffle or a mix; None: their places in `train_rows`, 1-based, in `where`
    ("train.jsonl:{}")."""
    hits = contaminated(train_rows, tree)
    if not hits:
        return None
    distinct: dict[str, tuple[tuple[int, str, str, list[str]], list[int]]] = {}
    for hit in hits:
        distinct.setdefault(conversation_key(train_rows[hit[0]]), (hit, []))[1].append(hit[0] + 1)
    found = list(distinct.values())
    shown = found[:SHOWN]
    places = (
        origins([train_rows[hit[0]] for hit, _ in shown])
        if origins
        else [
            where.format(", ".join(map(str, at[:5])) + (f" and {len(at) - 5} more" if len(at) > 5 else ""))
            for _, at in shown
        ]
    )
    lines = [
        f'{place}: its {which} holds BFCL {qid} ("{_shortened(w)}")'
        for place, ((_, which, qid, w), _) in zip(places, shown)
    ]
    if len(found) > SHOWN:
        lines.append(f"and {len(found) - SHOWN} more")
    n = len(found)
    return (
        f"{n} training row{'s' if n > 1 else ''} ask{'' if n > 1 else 's'} BFCL {version(tree)} questions (each "
        "row counted once, however often the data repeats it): a score on BFCL after training on its test rows "
        "measures nothing.\n" + "\n".join(lines) + "\nRemove those rows from the dataset (the lines named; "
        f"trainer.data.bfcl.contaminated(rows, bfcl_tree) lists every one: a user or system message sharing "
        f"{NGRAM} words in a row with a BFCL question, or mostly a whole one of {MIN_WHOLE} words or more, after "
        "Unicode NFKC, case, punctuation and white space), or drop bfcl from eval_suites"
    )


SUITES = ("heldout", "bfcl")


def parse_suites(value: str) -> tuple[str, ...]:
    """`eval_suites` ("heldout", "bfcl", "heldout,bfcl") as a tuple in SUITES' order, or one UserError."""
    names = [v.strip().lower() for v in str(value or "").split(",") if v.strip()]
    unknown = [n for n in names if n not in SUITES]
    if unknown or not names:
        raise UserError(
            f"eval_suites={value!r}: {'unknown ' + ', '.join(map(repr, unknown)) if unknown else 'empty'}; "
            "give heldout, bfcl or heldout,bfcl (comma-separated)"
        )
    return tuple(s for s in SUITES if s in names)


def source_problem(source: str) -> str | None:
    """What is wrong with `bfcl_source` from its value alone (a local path must exist), or None."""
    source = (source or "").strip()
    if not source or source.startswith("s3://"):
        return (
            None
            if not source or re.fullmatch(r"s3://[a-z0-9.-]{3,63}/\S+", source)
            else (f"bfcl_source {source!r}: expected s3://bucket/key")
        )
    path = Path(source.removeprefix("file://")).expanduser()
    if not path.exists():
        return (
            f"bfcl_source {source}: no such file or folder; give {PACKAGE}'s wheel or its bfcl_eval/data folder, "
            "or leave it empty to fetch the wheel from the package index"
        )
    if path.is_file() and path.suffix != ".whl":
        return f"bfcl_source {source}: expected a bfcl-eval wheel (.whl) or a folder of BFCL's data"
    return None


# The leaderboard's published scores that a report sets beside ours (board of 2026-04-12, FC mode, evaluated with
# bfcl-eval 2025.12.17; percent): {model: {"non_live_ast": overall, category: score}}. The board's "simple" is the mean
# of simple_python, simple_java and simple_javascript, so it stands beside no category of ours (we ask simple_python)
# and is left out; its non-live AST overall is the mean of that simple, multiple, parallel and parallel_multiple.
ANCHORS = {
    "Qwen3-0.6B": {
        "non_live_ast": 71.79,
        "multiple": 86.0,
        "parallel": 67.5,
        "parallel_multiple": 69.5,
        "irrelevance": 80.84,
    },
    "Hammer2.1-0.5b": {
        "non_live_ast": 65.98,
        "multiple": 81.0,
        "parallel": 69.0,
        "parallel_multiple": 51.5,
        "irrelevance": 80.79,
    },
    "xLAM-2-1b-fc-r": {
        "non_live_ast": 69.04,
        "multiple": 82.5,
        "parallel": 73.5,
        "parallel_multiple": 56.0,
        "irrelevance": 64.47,
    },
    "Llama-3.2-1B-Instruct": {
        "non_live_ast": 38.38,
        "multiple": 50.5,
        "parallel": 44.0,
        "parallel_multiple": 15.0,
        "irrelevance": 51.57,
    },
}


def version_number(text: str) -> float | None:
    """A version as a number KFP can log and compare (metrics are numbers): 2026.3.23 -> 20260323."""
    got = re.fullmatch(r"(\d{4})\.(\d{1,2})\.(\d{1,2})", text.strip())
    return float(int(got[1]) * 10_000 + int(got[2]) * 100 + int(got[3])) if got else None
