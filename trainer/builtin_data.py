"""`builtin:function-calling`: a seeded generator of tool-calling conversations.

Each row is a chat in the format the rest of the project expects (OpenAI / Hugging
Face style): `messages` with one user request and one assistant turn that calls a
tool, and the `tools` the assistant may call. The same seed gives the same rows on
every machine, so the built-in demo is reproducible and needs no network.
"""

from __future__ import annotations

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


def generate(n_train: int = 3000, n_eval: int = 200, seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Return `{"train": rows, "eval": rows}`; eval rows never repeat a train request."""
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
    return {"train": train_rows, "eval": eval_rows}
