"""`builtin:function-calling`: a seeded generator of tool-calling conversations.

Each row is a chat in the format the rest of the project expects (OpenAI / Hugging
Face style): `messages` with one user request and one assistant turn that calls a
tool, and the `tools` the assistant may call. The same seed gives the same rows on
every machine, so the built-in demo is reproducible and needs no network.

Those rows are BFCL's `multiple` category (one call among five tools, whose schemas hold
strings, an enum, a float, integers, an array, a nested object and optional parameters with
defaults). `generate(..., categories=True)` adds rows of the other categories `trainer.chat.fc_check`
reports (`simple`, `parallel`, `irrelevance`, `multi_turn`), from their own random stream, so the
`multiple` rows are the same as without the flag, in the same order: appended to the train split
(training shuffles), spread evenly through the eval split (eval_max_rows scores its first rows,
which then hold every category). `builtin:function-calling`, the demo's, delivers them all, so the
demo measures every category its promotion gate reads; the `multiple` rows stay the majority.
"""

from __future__ import annotations

import json
import random
from typing import Any

from trainer.chat.types import Row, Tool, WireCall
from trainer.data import tool_library
from trainer.data.tool_library import tool
from trainer.data.masking import DISTRACTORS_MAX, IRRELEVANCE_REPLY, distractors_for, spread
from trainer.config.sources import BUILTIN_DATASETS

CITIES = [
    "Paris",
    "London",
    "Tokyo",
    "Berlin",
    "Madrid",
    "Rome",
    "Oslo",
    "Cairo",
    "Lima",
    "Seoul",
    "Sydney",
    "Toronto",
    "Dublin",
    "Vienna",
    "Prague",
    "Lisbon",
    "Athens",
    "Nairobi",
    "Denver",
    "Boston",
]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "SEK"]
# `amount` is a JSON number (a float in BFCL's terms); the requests' amounts are whole ones, the tool results'
# converted amounts decimals. Two decimal amounts among these held the tiny demo model's number copying back: at
# the demo's 650 steps, seed 0, it copied no amount (69.5% of the rows right, 89.0% without them).
AMOUNTS = [5, 10, 20, 25, 50, 75, 100, 150, 200, 250, 500, 1000]
PEOPLE = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Oscar"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
TIMES = ["9am", "10am", "11am", "noon", "2pm", "3pm", "4pm", "5pm"]
UNITS = ["celsius", "fahrenheit"]
# The optional integers, where a request gives them (in 30% of its tool's requests; their defaults otherwise).
# Mostly numbers the amounts use: the tiny model copies them as it learned to copy amounts (with 15, 45, 90 of
# their own it wrote one of them, not the request's, in 14 of 167 rows).
MINUTES = [10, 20, 25, 50, 75, 100]  # a meeting's length (30, the default, otherwise)
PASSENGERS = [2, 3, 4, 5, 10, 20]  # travellers (1, the default, otherwise)
OPTIONAL_GIVEN = 0.3


_TEXT = {"type": "string"}

# Five tools whose schemas hold every kind a call's arguments take: strings, an enum, a float (`amount`),
# integers, an array, a nested object, and optional parameters with defaults.
TOOLS: list[Tool] = [
    tool(
        "get_weather",
        "Current weather in a city",
        {"city": _TEXT},
        {"unit": {"type": "string", "enum": UNITS, "default": "celsius"}},
    ),
    tool(
        "convert_currency",
        "Convert money between currencies",
        {"amount": {"type": "number"}, "from_currency": _TEXT, "to_currency": _TEXT},
    ),
    tool(
        "schedule_meeting",
        "Book a meeting",
        {"attendees": {"type": "array", "items": _TEXT}, "day": _TEXT, "time": _TEXT},
        {"minutes": {"type": "integer", "default": 30}},
    ),
    tool("set_alarm", "Set an alarm", {"day": _TEXT, "time": _TEXT}),
    tool(
        "search_flights",
        "Find flights",
        {
            "route": {
                "type": "object",
                "properties": {"origin": _TEXT, "destination": _TEXT},
                "required": ["origin", "destination"],
            },
            "day": _TEXT,
        },
        {"passengers": {"type": "integer", "default": 1}},
    ),
]


def _weather(r: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the call's arguments, the words its request is written from); an optional value only where the
    request names it (its words are empty otherwise)."""
    args = {"city": r.choice(CITIES)}
    words = {"city": args["city"], "unit": ""}
    if r.random() < 0.75:
        args["unit"] = r.choice(UNITS)
        words["unit"] = f" in {args['unit']}"
    return args, words


def _currency(r: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    words = dict(zip(["amount", "from_currency", "to_currency"], [r.choice(AMOUNTS), *r.sample(CURRENCIES, 2)]))
    return words, words


def _meeting(r: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    people, day, time = r.sample(PEOPLE, r.choice((1, 1, 2))), r.choice(DAYS), r.choice(TIMES)
    args: dict[str, Any] = {"attendees": people, "day": day, "time": time}
    words = {"people": " and ".join(people), "day": day, "time": time, "minutes": ""}
    if r.random() < OPTIONAL_GIVEN:
        args["minutes"] = r.choice(MINUTES)
        words["minutes"] = f" for {args['minutes']} minutes"
    return args, words


def _alarm(r: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    words = {"day": r.choice(DAYS), "time": r.choice(TIMES)}
    return words, words


def _flights(r: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    origin, destination = r.sample(CITIES, 2)
    args: dict[str, Any] = {"route": {"origin": origin, "destination": destination}, "day": r.choice(DAYS)}
    words = {"origin": origin, "destination": destination, "day": args["day"], "who": ""}
    if r.random() < OPTIONAL_GIVEN:
        args["passengers"] = r.choice(PASSENGERS)
        words["who"] = f" for {args['passengers']} people"
    return args, words


# (tool name, user phrasings, sampler of (arguments, words)). Several phrasings per tool so the model
# has to read the request, not memorise one sentence; a phrasing names every word it is given.
_TEMPLATES: list[tuple[str, list[str], Any]] = [
    (
        "get_weather",
        [
            "What's the weather in {city}{unit}?",
            "How warm is it in {city}{unit}?",
            "Tell me the temperature in {city}{unit}.",
            "Weather for {city}{unit} please.",
        ],
        _weather,
    ),
    (
        "convert_currency",
        [
            "Convert {amount} {from_currency} to {to_currency}.",
            "How much is {amount} {from_currency} in {to_currency}?",
            "I have {amount} {from_currency}, what is that in {to_currency}?",
        ],
        _currency,
    ),
    (
        "schedule_meeting",
        [
            "Schedule a meeting with {people} on {day} at {time}{minutes}.",
            "Book time with {people} {day} {time}{minutes}.",
            "Can you set up a meeting{minutes} with {people} at {time} on {day}?",
        ],
        _meeting,
    ),
    (
        "set_alarm",
        ["Wake me up at {time} on {day}.", "Set an alarm for {day} at {time}.", "Alarm {time} {day} please."],
        _alarm,
    ),
    (
        "search_flights",
        [
            "Find flights{who} from {origin} to {destination} on {day}.",
            "I need to fly {origin} to {destination} on {day}{who}.",
            "Any flights on {day} from {origin} to {destination}{who}?",
        ],
        _flights,
    ),
]


# Tools a row offers: 3 or 4 of the five, the called ones among them, in TOOLS' order. A model must find
# the call in a list that changes (BFCL's `multiple` rows offer 2-4 functions), and a real tokenizer's row
# stays near its length with five tools of plain strings (SmolLM2 with chatml-tools: under 640 tokens).
OFFERED = (3, 4)


def offered(rng: random.Random, called: set[str] | frozenset[str] = frozenset()) -> list[Tool]:
    """The tools a row offers: every one in `called`, then others drawn with `rng` up to 3 or 4 in all."""
    others = [t["function"]["name"] for t in TOOLS if t["function"]["name"] not in called]
    names = set(called) | set(rng.sample(others, max(0, rng.choice(OFFERED) - len(called))))
    return [t for t in TOOLS if t["function"]["name"] in names]


def make_row(rng: random.Random) -> Row:
    """One conversation: a user request and the assistant's tool call."""
    name, phrasings, sample = rng.choice(_TEMPLATES)
    args, words = sample(rng)
    return {
        "messages": [
            {"role": "user", "content": rng.choice(phrasings).format(**words)},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}],
            },
        ],
        "tools": offered(rng, {name}),
    }


def generate(
    n_train: int = 3000, n_eval: int = 200, seed: int = 0, categories: bool = False, wide: bool = False
) -> dict[str, list[Row]]:
    """Return `{"train": rows, "eval": rows}`; eval rows never repeat a train request.

    `categories`: `CATEGORY_SHARE` more rows in each split per other function-calling category
    (see `category_rows`); the rows without it stay, in their order. `wide`: the rows of
    `builtin:function-calling-wide` (`make_wide_row`), calling the library's tools too.
    """
    rng = random.Random(seed)
    make = make_wide_row if wide else make_row
    eval_rows: list[Row] = []
    eval_requests: set[str] = set()
    while len(eval_rows) < n_eval:
        row = make(rng)
        request = _request(row)
        if request not in eval_requests:
            eval_requests.add(request)
            eval_rows.append(row)
    train_rows: list[Row] = []
    while len(train_rows) < n_train:
        row = make(rng)
        if _request(row) not in eval_requests:
            train_rows.append(row)
    if categories:
        category_rows(train_rows, eval_rows, seed, WIDE_MAKERS if wide else CATEGORY_MAKERS)
    return {"train": train_rows, "eval": eval_rows}


def dataset(name: str = "function-calling") -> dict[str, list[Row]]:
    """What `builtin:<name>` delivers (a name of trainer.config.sources.BUILTIN_DATASETS): the `multiple` rows and
    rows of every other function-calling category; `function-calling-wide`'s call the library's tools too."""
    canonical = BUILTIN_DATASETS.get(name)
    if canonical not in ("function-calling", "function-calling-wide"):
        raise KeyError(f"no built-in dataset {name!r}")  # sources.parse refuses it first
    return generate(categories=True, wide=canonical == "function-calling-wide")


# --- Rows of the other function-calling categories (generate(..., categories=True)) ---

# Each new category adds this share of a split's rows (4 categories: 20% more rows in all):
# enough rows for a tiny model to learn to decline and to answer from a result, few enough that
# the `multiple` rows it learns first still dominate.
CATEGORY_SHARE = 0.05
LANGUAGES = ["French", "German", "Spanish", "Italian", "Japanese", "Korean"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy"]
AIRLINES = ["AF", "BA", "LH", "IB", "UA", "KL"]
DEPARTURES = ["07:15", "09:40", "13:05", "18:30", "21:55"]
RATES = [0.5, 0.8, 0.9, 1.1, 1.25, 1.5, 2]

# Requests no tool fits, some close to a tool (cancel is not schedule, a hotel is not a flight):
# (what the assistant cannot do, user phrasings, argument sampler).
_IRRELEVANT: list[tuple[str, list[str], Any]] = [
    (
        "send emails",
        ["Send an email to {person} saying I'm late.", "Email {person} that the report is done."],
        lambda r: {"person": r.choice(PEOPLE)},
    ),
    (
        "tell jokes",
        ["Tell me a joke about {city}.", "Make me laugh with a joke about {city}."],
        lambda r: {"city": r.choice(CITIES)},
    ),
    (
        "translate text",
        ["Translate 'good morning' into {language}.", "How do I say thank you in {language}?"],
        lambda r: {"language": r.choice(LANGUAGES)},
    ),
    (
        "cancel meetings",
        ["Cancel my meeting with {person} on {day}.", "Call off the {day} meeting with {person}."],
        lambda r: {"person": r.choice(PEOPLE), "day": r.choice(DAYS)},
    ),
    (
        "remove alarms",
        ["Delete my alarm for {day} at {time}.", "Turn off the {time} alarm on {day}."],
        lambda r: {"day": r.choice(DAYS), "time": r.choice(TIMES)},
    ),
    (
        "book hotels",
        ["Book a hotel in {city} for {day}.", "Find me a hotel in {city} on {day}."],
        lambda r: {"city": r.choice(CITIES), "day": r.choice(DAYS)},
    ),
    (
        "look up city facts",
        ["What is the population of {city}?", "How many people live in {city}?"],
        lambda r: {"city": r.choice(CITIES)},
    ),
    (
        "buy or sell assets",
        ["Buy {amount} {currency} worth of gold.", "Sell {amount} {currency} of my shares."],
        lambda r: {"amount": r.choice(AMOUNTS), "currency": r.choice(CURRENCIES)},
    ),
]
_PAIRS = ["{a} {b}", "{a} Also: {b}", "Two things. {a} {b}"]


def _call_row(rng: random.Random) -> tuple[str, WireCall]:
    """A user request and the call that answers it, as `make_row` draws them."""
    row = make_row(rng)
    return _request(row), row["messages"][1]["tool_calls"][0]


def make_simple_row(rng: random.Random) -> Row:
    """`simple`: the request's own tool is the only one offered."""
    row = make_row(rng)
    name = row["messages"][1]["tool_calls"][0]["function"]["name"]
    return {**row, "tools": [t for t in TOOLS if t["function"]["name"] == name]}


def make_parallel_row(rng: random.Random) -> Row:
    """`parallel`: two requests in one message, answered with two calls in one turn."""
    first, call_a = _call_row(rng)
    second, call_b = _call_row(rng)
    while call_b == call_a:
        second, call_b = _call_row(rng)
    return {
        "messages": [
            {"role": "user", "content": rng.choice(_PAIRS).format(a=first, b=second)},
            {"role": "assistant", "content": "", "tool_calls": [call_a, call_b]},
        ],
        "tools": offered(rng, {call_a["function"]["name"], call_b["function"]["name"]}),
    }


def make_irrelevance_row(rng: random.Random) -> Row:
    """`irrelevance`: a request no tool fits, answered in text that says so."""
    action, phrasings, sample = rng.choice(_IRRELEVANT)
    return {
        "messages": [
            {"role": "user", "content": rng.choice(phrasings).format(**sample(rng))},
            {"role": "assistant", "content": f"Sorry, I can't {action}: none of my tools does that."},
        ],
        "tools": offered(rng),
    }


def _tool_result(rng: random.Random, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """What the tool returns for `args`, and the answer that reports it to the user."""
    if name == "get_weather":
        unit = args.get("unit", "celsius")  # the schema's default where the request named no unit
        temp = rng.randint(-5, 35) if unit == "celsius" else rng.randint(25, 95)
        cond = rng.choice(CONDITIONS)
        return (
            {"temperature": temp, "unit": unit, "conditions": cond},
            f"It is {temp} degrees {unit} and {cond} in {args['city']}.",
        )
    if name == "convert_currency":
        converted = round(args["amount"] * rng.choice(RATES), 2)
        return (
            {"amount": converted, "currency": args["to_currency"]},
            f"{args['amount']} {args['from_currency']} is {converted} {args['to_currency']}.",
        )
    if name == "schedule_meeting":
        meeting = f"M{rng.randint(100, 999)}"
        return (
            {"status": "booked", "meeting_id": meeting},
            f"Your meeting with {' and '.join(args['attendees'])} on {args['day']} at {args['time']} is booked "
            f"({meeting}).",
        )
    if name == "set_alarm":
        return {"status": "set"}, f"Your alarm is set for {args['day']} at {args['time']}."
    route = f"from {args['route']['origin']} to {args['route']['destination']} on {args['day']}"
    if rng.random() < 0.25:  # an empty result: the answer must come from the result, not the request
        return {"flights": []}, f"There are no flights {route}."
    flight, departs = f"{rng.choice(AIRLINES)}{rng.randint(100, 999)}", rng.choice(DEPARTURES)
    return (
        {"flights": [{"flight": flight, "departs": departs}]},
        f"I found flight {flight} {route}, departing at {departs}.",
    )


def make_multi_turn_row(rng: random.Random) -> Row:
    """`multi_turn`: request, call, the tool's result, then a text answer built from the result."""
    request, call = _call_row(rng)
    fn = call["function"]
    result, answer = _tool_result(rng, fn["name"], fn["arguments"])
    return {
        "messages": [
            {"role": "user", "content": request},
            {"role": "assistant", "content": "", "tool_calls": [WireCall(id="call_0", **call)]},
            {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(result)},
            {"role": "assistant", "content": answer},
        ],
        "tools": offered(rng, {fn["name"]}),
    }


CATEGORY_MAKERS = [make_simple_row, make_parallel_row, make_irrelevance_row, make_multi_turn_row]


def category_rows(train_rows: list[Row], eval_rows: list[Row], seed: int, makers: list[Any] = CATEGORY_MAKERS) -> None:
    """Add `CATEGORY_SHARE` of each split per category (at least 1 in a non-empty split), the
    categories interleaved: appended to `train_rows`, spread evenly through `eval_rows` (any
    first N eval rows hold every kind in proportion: eval_max_rows scores a prefix).

    A random stream of their own leaves the other rows alone. New eval rows repeat no eval
    request and no train request; new train rows repeat no eval request.
    """
    rng = random.Random(f"builtin-categories:{seed}")
    extra = _new_rows(
        len(eval_rows), rng, avoid={_request(r) for r in train_rows + eval_rows}, unique=True, makers=makers
    )
    eval_rows[:] = spread(eval_rows, extra)
    train_rows += _new_rows(len(train_rows), rng, avoid={_request(r) for r in eval_rows}, unique=False, makers=makers)


def _new_rows(n_rows: int, rng: random.Random, avoid: set[str], unique: bool, makers: list[Any]) -> list[Row]:
    per_category = max(1, round(n_rows * CATEGORY_SHARE)) if n_rows else 0
    rows: list[Row] = []
    for k in range(per_category * len(makers)):
        make = makers[k % len(makers)]
        row = make(rng)
        while _request(row) in avoid:
            row = make(rng)
        if unique:
            avoid.add(_request(row))
        rows.append(row)
    return rows


def _request(row: Row) -> str:
    return row["messages"][0].get("content") or ""


# --- builtin:function-calling-wide: the five tools and the library's 33 (trainer.data.tool_library) ---
# A model tuned on rows offering the same five tools learns to call those five; SmolLM2 so tuned called an
# unrelated BFCL function on 24% of BFCL's irrelevance rows and got 13% of its non-live calls right. These
# rows call 38 tools across domains, among others drawn from all 38, so what the model learns is to read the
# offered schemas. The multi_turn rows stay on the five (their tool results and answers are written for them).

LIBRARY_SHARE = 0.5  # of the wide rows' calls go to a library tool (~45 train rows each), the rest to the five
WIDE_TOOLS = sorted(TOOLS + tool_library.LIBRARY, key=lambda t: t["function"]["name"])


def offered_wide(
    rng: random.Random, called: set[str] | frozenset[str] = frozenset(), offered: tuple[int, ...] = OFFERED
) -> list[Tool]:
    """Every tool in `called` and others drawn from WIDE_TOOLS, `offered` in all (3 or 4), in a random order (a model
    must not learn that the called tool comes first)."""
    others = [t for t in WIDE_TOOLS if t["function"]["name"] not in called]
    tools = [t for t in WIDE_TOOLS if t["function"]["name"] in called]
    tools += rng.sample(others, max(0, rng.choice(offered) - len(tools)))
    rng.shuffle(tools)
    return tools


def _wide_call(rng: random.Random) -> tuple[str, WireCall]:
    """A request and the call answering it: a library tool's (LIBRARY_SHARE of them) or one of the five's."""
    if rng.random() < LIBRARY_SHARE:
        name = rng.choice(sorted(tool_library.REQUESTS))
        request, args = tool_library.request(name, rng)
        return request, WireCall(type="function", function={"name": name, "arguments": args})
    return _call_row(rng)


def _one_call_row(request: str, call: WireCall, tools: list[Tool]) -> Row:
    return {
        "messages": [{"role": "user", "content": request}, {"role": "assistant", "content": "", "tool_calls": [call]}],
        "tools": tools,
    }


def make_wide_row(rng: random.Random) -> Row:
    """`multiple` over 38 tools: a request, its call, 3 or 4 tools offered."""
    request, call = _wide_call(rng)
    return _one_call_row(request, call, offered_wide(rng, {call["function"]["name"]}))


def make_wide_simple_row(rng: random.Random) -> Row:
    request, call = _wide_call(rng)
    return _one_call_row(request, call, [t for t in WIDE_TOOLS if t["function"]["name"] == call["function"]["name"]])


def make_wide_parallel_row(rng: random.Random) -> Row:
    first, call_a = _wide_call(rng)
    second, call_b = _wide_call(rng)
    while call_b == call_a:
        second, call_b = _wide_call(rng)
    return {
        "messages": [
            {"role": "user", "content": rng.choice(_PAIRS).format(a=first, b=second)},
            {"role": "assistant", "content": "", "tool_calls": [call_a, call_b]},
        ],
        # the two called and one other: with four of the 38 schemas a row could pass the laptop's 640 tokens
        "tools": offered_wide(rng, {call_a["function"]["name"], call_b["function"]["name"]}, offered=(3,)),
    }


def make_wide_irrelevance_row(rng: random.Random) -> Row:
    """Half the built-in irrelevance rows (a request none of the five does, the five offered); half a request
    a library tool answers, offered 1-4 other tools none of which fits it (trainer.data.masking.fits), as BFCL's irrelevance rows offer functions unrelated to the question."""
    if rng.random() < 0.5:
        return make_irrelevance_row(rng)
    return decline_row(*_wide_call(rng), rng)


def decline_row(request: str, call: WireCall, rng: random.Random) -> Row:
    """`request` (which `call` answers) declined, among 1-4 tools none of which fits it (trainer.data.masking.fits)."""
    own = [t for t in WIDE_TOOLS if t["function"]["name"] == call["function"]["name"]]
    # drawn from a stream of their own (one draw of `rng`): the rows after this one do not depend on how many tools
    # the distractor rule (trainer.data.masking.fits) lets through
    pick = random.Random(rng.random())
    tools = distractors_for(_one_call_row(request, call, own), WIDE_TOOLS, pick, k=pick.randint(1, DISTRACTORS_MAX))
    return {
        "messages": [{"role": "user", "content": request}, {"role": "assistant", "content": IRRELEVANCE_REPLY}],
        "tools": tools,
    }


def make_wide_multi_turn_row(rng: random.Random) -> Row:
    row = make_multi_turn_row(rng)
    return {**row, "tools": offered_wide(rng, {row["messages"][1]["tool_calls"][0]["function"]["name"]})}


WIDE_MAKERS = [make_wide_simple_row, make_wide_parallel_row, make_wide_irrelevance_row, make_wide_multi_turn_row]
