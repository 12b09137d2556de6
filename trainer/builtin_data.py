"""`builtin:function-calling`: a seeded generator of tool-calling conversations.

Each row is a chat in the format the rest of the project expects (OpenAI / Hugging
Face style): `messages` with one user request and one assistant turn that calls a
tool, and the `tools` the assistant may call. The same seed gives the same rows on
every machine, so the built-in demo is reproducible and needs no network.

Those rows are BFCL's `multiple` category (one call among five tools). `generate(...,
categories=True)` adds rows of the other categories `trainer.fc_check` reports (`simple`,
`parallel`, `irrelevance`, `multi_turn`), from their own random stream, so the `multiple` rows
are the same as without the flag, in the same order: appended to the train split (training
shuffles), spread evenly through the eval split (eval_max_rows scores its first rows, which then
hold every category). `builtin:function-calling-bfcl` delivers them; `builtin:function-calling`,
the demo's, does not (its tiny model learns the calls in the demo's steps).
"""

from __future__ import annotations

import json
import random
from typing import Any

CITIES = ["Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Oslo", "Cairo", "Lima", "Seoul",
          "Sydney", "Toronto", "Dublin", "Vienna", "Prague", "Lisbon", "Athens", "Nairobi", "Denver", "Boston"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "SEK"]
AMOUNTS = [5, 10, 20, 25, 50, 75, 100, 150, 200, 250, 500, 1000]
PEOPLE = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Oscar"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
TIMES = ["9am", "10am", "11am", "noon", "2pm", "3pm", "4pm", "5pm"]
UNITS = ["celsius", "fahrenheit"]


def _tool(name: str, description: str, **params: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": t} for p, t in params.items()},
                "required": list(params),
            },
        },
    }


TOOLS = [
    _tool("get_weather", "Current weather in a city", city="string", unit="string"),
    _tool("convert_currency", "Convert money between currencies", amount="number",
          from_currency="string", to_currency="string"),
    _tool("schedule_meeting", "Book a meeting with a person", person="string", day="string", time="string"),
    _tool("set_alarm", "Set an alarm", day="string", time="string"),
    _tool("search_flights", "Find flights between two cities", origin="string", destination="string",
          day="string"),
]

# (tool name, user phrasings, argument sampler). Several phrasings per tool so the
# model has to read the request, not memorise one sentence.
_TEMPLATES: list[tuple[str, list[str], Any]] = [
    ("get_weather",
     ["What's the weather in {city} in {unit}?", "How warm is it in {city}? Use {unit}.",
      "Tell me the {unit} temperature in {city}.", "Weather for {city} please, in {unit}."],
     lambda r: {"city": r.choice(CITIES), "unit": r.choice(UNITS)}),
    ("convert_currency",
     ["Convert {amount} {from_currency} to {to_currency}.", "How much is {amount} {from_currency} in {to_currency}?",
      "I have {amount} {from_currency}, what is that in {to_currency}?"],
     lambda r: dict(zip(["amount", "from_currency", "to_currency"],
                        [r.choice(AMOUNTS), *r.sample(CURRENCIES, 2)]))),
    ("schedule_meeting",
     ["Schedule a meeting with {person} on {day} at {time}.", "Book time with {person} {day} {time}.",
      "Can you set up a meeting with {person} at {time} on {day}?"],
     lambda r: {"person": r.choice(PEOPLE), "day": r.choice(DAYS), "time": r.choice(TIMES)}),
    ("set_alarm",
     ["Wake me up at {time} on {day}.", "Set an alarm for {day} at {time}.", "Alarm {time} {day} please."],
     lambda r: {"day": r.choice(DAYS), "time": r.choice(TIMES)}),
    ("search_flights",
     ["Find flights from {origin} to {destination} on {day}.", "I need to fly {origin} to {destination} on {day}.",
      "Any flights on {day} from {origin} to {destination}?"],
     lambda r: dict(zip(["origin", "destination", "day"], [*r.sample(CITIES, 2), r.choice(DAYS)]))),
]


def make_row(rng: random.Random) -> dict[str, Any]:
    """One conversation: a user request and the assistant's tool call."""
    name, phrasings, sample = rng.choice(_TEMPLATES)
    args = sample(rng)
    return {
        "messages": [
            {"role": "user", "content": rng.choice(phrasings).format(**args)},
            {"role": "assistant", "content": "",
             "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]},
        ],
        "tools": TOOLS,
    }


def generate(n_train: int = 3000, n_eval: int = 200, seed: int = 0,
             categories: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Return `{"train": rows, "eval": rows}`; eval rows never repeat a train request.

    `categories`: `CATEGORY_SHARE` more rows in each split per other function-calling category
    (see `category_rows`); the rows without it stay, in their order.
    """
    rng = random.Random(seed)
    eval_rows: list[dict[str, Any]] = []
    eval_requests: set[str] = set()
    while len(eval_rows) < n_eval:
        row = make_row(rng)
        request = row["messages"][0]["content"]
        if request not in eval_requests:
            eval_requests.add(request)
            eval_rows.append(row)
    train_rows: list[dict[str, Any]] = []
    while len(train_rows) < n_train:
        row = make_row(rng)
        if row["messages"][0]["content"] not in eval_requests:
            train_rows.append(row)
    if categories:
        category_rows(train_rows, eval_rows, seed)
    return {"train": train_rows, "eval": eval_rows}


DATASETS = {"function-calling": {}, "function-calling-bfcl": {"categories": True}}


def dataset(name: str = "function-calling") -> dict[str, list[dict[str, Any]]]:
    """What `builtin:<name>` delivers (a key of DATASETS): `function-calling` the `multiple` rows
    (the demo's), `function-calling-bfcl` with every other function-calling category as well."""
    return generate(**DATASETS[name])


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
    ("send emails", ["Send an email to {person} saying I'm late.", "Email {person} that the report is done."],
     lambda r: {"person": r.choice(PEOPLE)}),
    ("tell jokes", ["Tell me a joke about {city}.", "Make me laugh with a joke about {city}."],
     lambda r: {"city": r.choice(CITIES)}),
    ("translate text", ["Translate 'good morning' into {language}.", "How do I say thank you in {language}?"],
     lambda r: {"language": r.choice(LANGUAGES)}),
    ("cancel meetings", ["Cancel my meeting with {person} on {day}.", "Call off the {day} meeting with {person}."],
     lambda r: {"person": r.choice(PEOPLE), "day": r.choice(DAYS)}),
    ("remove alarms", ["Delete my alarm for {day} at {time}.", "Turn off the {time} alarm on {day}."],
     lambda r: {"day": r.choice(DAYS), "time": r.choice(TIMES)}),
    ("book hotels", ["Book a hotel in {city} for {day}.", "Find me a hotel in {city} on {day}."],
     lambda r: {"city": r.choice(CITIES), "day": r.choice(DAYS)}),
    ("look up city facts", ["What is the population of {city}?", "How many people live in {city}?"],
     lambda r: {"city": r.choice(CITIES)}),
    ("buy or sell assets", ["Buy {amount} {currency} worth of gold.", "Sell {amount} {currency} of my shares."],
     lambda r: {"amount": r.choice(AMOUNTS), "currency": r.choice(CURRENCIES)}),
]
_PAIRS = ["{a} {b}", "{a} Also: {b}", "Two things. {a} {b}"]


def _call_row(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A user request and the call that answers it, as `make_row` draws them."""
    row = make_row(rng)
    return row["messages"][0]["content"], row["messages"][1]["tool_calls"][0]


def make_simple_row(rng: random.Random) -> dict[str, Any]:
    """`simple`: the request's own tool is the only one offered."""
    row = make_row(rng)
    name = row["messages"][1]["tool_calls"][0]["function"]["name"]
    return {**row, "tools": [t for t in TOOLS if t["function"]["name"] == name]}


def make_parallel_row(rng: random.Random) -> dict[str, Any]:
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
        "tools": TOOLS,
    }


def make_irrelevance_row(rng: random.Random) -> dict[str, Any]:
    """`irrelevance`: a request no tool fits, answered in text that says so."""
    action, phrasings, sample = rng.choice(_IRRELEVANT)
    return {
        "messages": [
            {"role": "user", "content": rng.choice(phrasings).format(**sample(rng))},
            {"role": "assistant", "content": f"Sorry, I can't {action}: none of my tools does that."},
        ],
        "tools": TOOLS,
    }


def _tool_result(rng: random.Random, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """What the tool returns for `args`, and the answer that reports it to the user."""
    if name == "get_weather":
        temp = rng.randint(-5, 35) if args["unit"] == "celsius" else rng.randint(25, 95)
        cond = rng.choice(CONDITIONS)
        return ({"temperature": temp, "unit": args["unit"], "conditions": cond},
                f"It is {temp} degrees {args['unit']} and {cond} in {args['city']}.")
    if name == "convert_currency":
        converted = round(args["amount"] * rng.choice(RATES), 2)
        return ({"amount": converted, "currency": args["to_currency"]},
                f"{args['amount']} {args['from_currency']} is {converted} {args['to_currency']}.")
    if name == "schedule_meeting":
        meeting = f"M{rng.randint(100, 999)}"
        return ({"status": "booked", "meeting_id": meeting},
                f"Your meeting with {args['person']} on {args['day']} at {args['time']} is booked ({meeting}).")
    if name == "set_alarm":
        return {"status": "set"}, f"Your alarm is set for {args['day']} at {args['time']}."
    route = f"from {args['origin']} to {args['destination']} on {args['day']}"
    if rng.random() < 0.25:  # an empty result: the answer must come from the result, not the request
        return {"flights": []}, f"There are no flights {route}."
    flight, departs = f"{rng.choice(AIRLINES)}{rng.randint(100, 999)}", rng.choice(DEPARTURES)
    return ({"flights": [{"flight": flight, "departs": departs}]},
            f"I found flight {flight} {route}, departing at {departs}.")


def make_multi_turn_row(rng: random.Random) -> dict[str, Any]:
    """`multi_turn`: request, call, the tool's result, then a text answer built from the result."""
    request, call = _call_row(rng)
    fn = call["function"]
    result, answer = _tool_result(rng, fn["name"], fn["arguments"])
    return {
        "messages": [
            {"role": "user", "content": request},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", **call}]},
            {"role": "tool", "tool_call_id": "call_0", "content": json.dumps(result)},
            {"role": "assistant", "content": answer},
        ],
        "tools": TOOLS,
    }


CATEGORY_MAKERS = [make_simple_row, make_parallel_row, make_irrelevance_row, make_multi_turn_row]


def category_rows(train_rows: list[dict[str, Any]], eval_rows: list[dict[str, Any]], seed: int) -> None:
    """Add `CATEGORY_SHARE` of each split per category (at least 1 in a non-empty split), the
    categories interleaved: appended to `train_rows`, spread evenly through `eval_rows` (any
    first N eval rows hold every kind in proportion: eval_max_rows scores a prefix).

    A random stream of their own leaves the other rows alone. New eval rows repeat no eval
    request and no train request; new train rows repeat no eval request.
    """
    rng = random.Random(f"builtin-categories:{seed}")
    extra = _new_rows(len(eval_rows), rng, avoid={_request(r) for r in train_rows + eval_rows}, unique=True)
    eval_rows[:] = _spread(eval_rows, extra)
    train_rows += _new_rows(len(train_rows), rng, avoid={_request(r) for r in eval_rows}, unique=False)


def _new_rows(n_rows: int, rng: random.Random, avoid: set[str], unique: bool) -> list[dict[str, Any]]:
    per_category = max(1, round(n_rows * CATEGORY_SHARE)) if n_rows else 0
    rows = []
    for k in range(per_category * len(CATEGORY_MAKERS)):
        make = CATEGORY_MAKERS[k % len(CATEGORY_MAKERS)]
        row = make(rng)
        while _request(row) in avoid:
            row = make(rng)
        if unique:
            avoid.add(_request(row))
        rows.append(row)
    return rows


def _spread(rows: list[dict[str, Any]], extra: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` and `extra` merged, each in its order, each row at its relative position in its list."""
    keyed = [((i + 0.5) / len(rows), 0, i) for i in range(len(rows))] + \
            [((j + 0.5) / len(extra), 1, j) for j in range(len(extra))]
    return [(extra if which else rows)[i] for _, which, i in sorted(keyed)]


def _request(row: dict[str, Any]) -> str:
    return row["messages"][0]["content"]
