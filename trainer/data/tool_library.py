"""A library of tool schemas across domains, and requests each one answers.

The schemas are the distractors a masked copy may offer (trainer.data.masking); with their requests
(`REQUESTS`) they are the tools `builtin:function-calling-wide` calls beside the built-in five
(trainer.data.builtin_data), so a model learns to read schemas rather than memorise five.

A model tuned on rows that offer the same five tools learns "refuse when one of these five is missing", not
"refuse when no offered tool fits": BFCL's irrelevance rows offer one function unrelated to the request (an
area formula beside a question about a film), and SmolLM2 tuned on the built-in data with masked copies of
its own rows called such a function on 52% of them. Masked copies that offer tools drawn from here (and from
the rest of the dataset) put unrelated schemas beside the data's own requests, so the model has to read the
schema to decline.

Written for this project, in OpenAI's tool format; none is taken from BFCL (the project never trains on
BFCL rows) and none shares a name with the built-in data's five tools.
"""

from __future__ import annotations

import json
import random
from typing import Any, Callable

from trainer.chat.types import Tool

_S, _N, _I, _B = {"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": "boolean"}


def tool(name: str, description: str, required: dict[str, Any], optional: dict[str, Any] | None = None) -> Tool:
    """An OpenAI tool; `required` and `optional` map each parameter to its JSON schema (an optional one
    carries its `default`, which the call leaves out when the request does not say otherwise)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {**required, **(optional or {})},
                "required": list(required),
            },
        },
    }


def _enum(*values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


LIBRARY: list[Tool] = [
    # mathematics and science
    tool("solve_quadratic", "Roots of a*x^2 + b*x + c = 0", {"a": _N, "b": _N, "c": _N}),
    tool("triangle_area", "Area of a triangle from its base and height", {"base": _N, "height": _N}),
    tool("circle_circumference", "Circumference of a circle", {"radius": _N}, {"unit": _enum("cm", "m", "in")}),
    tool("prime_factors", "The prime factors of a whole number", {"number": _I}),
    tool(
        "matrix_determinant",
        "Determinant of a square matrix",
        {"matrix": {"type": "array", "items": {"type": "array", "items": _N}}},
    ),
    tool(
        "compound_interest",
        "Value of a deposit after compound interest",
        {"principal": _N, "annual_rate": _N, "years": _I},
        {"compounds_per_year": {**_I, "default": 12}},
    ),
    tool("kinetic_energy", "Kinetic energy of a moving body", {"mass_kg": _N, "velocity_ms": _N}),
    tool("molar_mass", "Molar mass of a chemical formula", {"formula": _S}),
    tool(
        "convert_length",
        "Convert a length between units",
        {
            "value": _N,
            "from_unit": _enum("mm", "cm", "m", "km", "in", "ft", "mi"),
            "to_unit": _enum("mm", "cm", "m", "km", "in", "ft", "mi"),
        },
    ),
    tool(
        "standard_deviation",
        "Standard deviation of a list of numbers",
        {"values": {"type": "array", "items": _N}},
        {"sample": {**_B, "default": True}},
    ),
    # money and shopping
    tool("stock_quote", "Latest price of a stock by its ticker symbol", {"ticker": _S}),
    tool("loan_payment", "Monthly payment of a loan", {"amount": _N, "annual_rate": _N, "months": _I}),
    tool(
        "track_parcel",
        "Where a parcel is, by its tracking number",
        {"tracking_number": _S},
        {"carrier": _enum("dhl", "ups", "fedex", "usps")},
    ),
    tool("add_to_cart", "Add a product to the shopping cart", {"product_id": _S}, {"quantity": {**_I, "default": 1}}),
    tool(
        "split_bill",
        "Each person's share of a bill with tip",
        {"total": _N, "people": _I},
        {"tip_percent": {**_N, "default": 15}},
    ),
    # food and health
    tool(
        "find_recipe",
        "Recipes that use the given ingredients",
        {"ingredients": {"type": "array", "items": _S}},
        {"diet": _enum("any", "vegetarian", "vegan")},
    ),
    tool("calorie_count", "Calories in a serving of a food", {"food": _S, "grams": _N}),
    tool("body_mass_index", "Body mass index from weight and height", {"weight_kg": _N, "height_m": _N}),
    tool("book_table", "Reserve a restaurant table", {"restaurant": _S, "party_size": _I, "datetime": _S}),
    # media, sports and culture
    tool("movie_showtimes", "Showtimes of a film at cinemas near a place", {"title": _S, "location": _S}),
    tool("song_lyrics", "Lyrics of a song", {"title": _S, "artist": _S}),
    tool("team_standings", "League table of a sports league", {"league": _S}, {"season": _S}),
    tool("player_stats", "Season statistics of an athlete", {"player": _S, "season": _S}),
    tool("translate_text", "Translate text into another language", {"text": _S, "target_language": _S}),
    tool("word_definition", "Dictionary definition of a word", {"word": _S}),
    tool("book_search", "Books by title, author or subject", {"query": _S}, {"limit": {**_I, "default": 5}}),
    # places, travel and home
    tool(
        "nearby_places",
        "Places of a kind near a location",
        {"location": _S, "kind": _enum("restaurant", "pharmacy", "museum", "park", "hotel")},
    ),
    tool("driving_distance", "Road distance and driving time between two places", {"origin": _S, "destination": _S}),
    tool(
        "train_timetable", "Train departures between two stations", {"from_station": _S, "to_station": _S, "date": _S}
    ),
    tool(
        "hotel_availability", "Free hotel rooms in a city for given nights", {"city": _S, "check_in": _S, "nights": _I}
    ),
    tool("set_thermostat", "Set the home thermostat", {"temperature": _N}, {"room": _S}),
    tool("send_email", "Send an email", {"to": _S, "subject": _S, "body": _S}),
    tool("timezone_of", "The time zone of a city", {"city": _S}),
]


# --- Requests each library tool answers: (phrasings, sampler of the call's arguments, optional wording) ---
# A phrasing names every required argument as `{name}`, and every optional one as `{name}` too: the words the
# optional wording gives where the call sets it, nothing where it is left at its default (a request names what
# its call holds and nothing else). Values are written as the call holds them, so every argument can be
# copied from the request.

Sampler = Callable[[random.Random], dict[str, Any]]
OPTIONAL_GIVEN = 0.3  # as the built-in five's optional arguments (trainer.data.builtin_data)

PLACES = ["Paris", "Lyon", "Osaka", "Munich", "Porto", "Krakow", "Quebec", "Perth", "Bergen", "Seville"]
DATES = ["2026-12-03", "2026-12-11", "2027-01-08", "2027-02-14", "2027-03-21"]


def _opt(r: random.Random, args: dict[str, Any], name: str, values: list[Any]) -> dict[str, Any]:
    if r.random() < OPTIONAL_GIVEN:
        args[name] = r.choice(values)
    return args


def _two(r: random.Random, values: list[Any]) -> list[Any]:
    return r.sample(values, 2)


REQUESTS: dict[str, tuple[list[str], Sampler, dict[str, str]]] = {
    "solve_quadratic": (
        ["Solve {a}*x^2 + {b}*x + {c} = 0.", "Find the roots of the quadratic with a={a}, b={b} and c={c}."],
        lambda r: {"a": r.choice([1, 2, 3, 4]), "b": r.choice([-7, -5, -2, 3, 4, 6]), "c": r.choice([-8, -3, 1, 2, 5])},
        {},
    ),
    "triangle_area": (
        [
            "What's the area of a triangle with base {base} and height {height}?",
            "A triangle is {base} wide at the base and {height} tall: what is its area?",
        ],
        lambda r: {"base": r.choice([3, 4, 6, 7.5, 9, 12]), "height": r.choice([2, 5, 8, 10, 2.5])},
        {},
    ),
    "circle_circumference": (
        [
            "What is the circumference of a circle of radius {radius}{unit}?",
            "Circle with radius {radius}{unit}: how long is its circumference?",
        ],
        lambda r: _opt(r, {"radius": r.choice([2, 3.5, 7, 10, 15])}, "unit", ["cm", "m", "in"]),
        {"unit": " {}"},
    ),
    "prime_factors": (
        ["What are the prime factors of {number}?", "Factorise {number} into primes."],
        lambda r: {"number": r.choice([84, 90, 126, 210, 360, 462, 975, 1001])},
        {},
    ),
    "matrix_determinant": (
        ["Compute the determinant of the matrix {matrix}.", "What is det({matrix})?"],
        lambda r: {
            "matrix": r.choice(
                [[[1, 2], [3, 4]], [[2, 0], [1, 5]], [[4, 7], [2, 6]], [[1, 0, 2], [0, 3, 1], [2, 1, 0]]]
            )
        },
        {},
    ),
    "compound_interest": (
        [
            "How much is {principal} worth after {years} years at {annual_rate}% a year{compounds_per_year}?",
            "I deposit {principal} at an annual rate of {annual_rate}% for {years} years{compounds_per_year}: "
            "what will it be worth?",
        ],
        lambda r: _opt(
            r,
            {
                "principal": r.choice([500, 1000, 2500, 10000]),
                "annual_rate": r.choice([2, 3.5, 4, 5.25]),
                "years": r.choice([3, 5, 10, 20]),
            },
            "compounds_per_year",
            [1, 4],
        ),
        {"compounds_per_year": ", compounded {} times a year"},
    ),
    "kinetic_energy": (
        [
            "What is the kinetic energy of a {mass_kg} kg body moving at {velocity_ms} m/s?",
            "Kinetic energy: mass {mass_kg} kg, speed {velocity_ms} m/s.",
        ],
        lambda r: {"mass_kg": r.choice([2, 5, 70, 1200]), "velocity_ms": r.choice([3, 9.8, 15, 30])},
        {},
    ),
    "molar_mass": (
        ["What's the molar mass of {formula}?", "Give me the molar mass of {formula}."],
        lambda r: {"formula": r.choice(["H2O", "NaCl", "C6H12O6", "CO2", "H2SO4", "CaCO3", "NH3"])},
        {},
    ),
    "convert_length": (
        ["Convert {value} {from_unit} to {to_unit}.", "How many {to_unit} is {value} {from_unit}?"],
        lambda r: dict(
            zip(
                ["value", "from_unit", "to_unit"],
                [r.choice([3, 12, 42, 100, 5.5]), *_two(r, ["mm", "cm", "m", "km", "in", "ft", "mi"])],
            )
        ),
        {},
    ),
    "standard_deviation": (
        [
            "What is the standard deviation of {values}{sample}?",
            "Standard deviation of these numbers{sample}: {values}.",
        ],
        lambda r: _opt(r, {"values": r.sample([2, 4, 4, 5, 7, 9, 11, 13], r.choice([4, 5, 6]))}, "sample", [False]),
        {"sample": " as a whole population (sample=False)"},
    ),
    "stock_quote": (
        ["What is {ticker} trading at?", "Get me the latest price of {ticker} stock."],
        lambda r: {"ticker": r.choice(["AAPL", "MSFT", "NVDA", "TSLA", "AMZN", "SAP", "ASML"])},
        {},
    ),
    "loan_payment": (
        [
            "What's the monthly payment on a {amount} loan at {annual_rate}% over {months} months?",
            "I borrow {amount} for {months} months at {annual_rate}% a year: how much do I pay each month?",
        ],
        lambda r: {
            "amount": r.choice([5000, 12000, 25000, 200000]),
            "annual_rate": r.choice([3, 4.5, 6, 7.9]),
            "months": r.choice([12, 36, 60, 240]),
        },
        {},
    ),
    "track_parcel": (
        ["Where is my parcel {tracking_number}{carrier}?", "Track package {tracking_number}{carrier}."],
        lambda r: _opt(
            r,
            {"tracking_number": r.choice(["1Z999AA10123456784", "JD014600003828", "9400111899560"])},
            "carrier",
            ["dhl", "ups", "fedex", "usps"],
        ),
        {"carrier": " sent with {}"},
    ),
    "add_to_cart": (
        ["Put product {product_id} in my cart{quantity}.", "Add item {product_id} to the cart{quantity}."],
        lambda r: _opt(
            r, {"product_id": r.choice(["SKU-1042", "SKU-2231", "B07XJ8C8F5", "P-778"])}, "quantity", [2, 3, 6]
        ),
        {"quantity": ", {} of them"},
    ),
    "split_bill": (
        [
            "Split a bill of {total} between {people} people{tip_percent}.",
            "We are {people} and the bill is {total}{tip_percent}: what does each of us pay?",
        ],
        lambda r: _opt(
            r, {"total": r.choice([48, 96.5, 120, 310]), "people": r.choice([2, 3, 4, 6])}, "tip_percent", [10, 18, 20]
        ),
        {"tip_percent": " with a {}% tip"},
    ),
    "find_recipe": (
        ["Find me a{diet} recipe with {ingredients}.", "What can I cook{diet} with {ingredients}?"],
        lambda r: _opt(
            r,
            {
                "ingredients": r.sample(
                    ["eggs", "spinach", "rice", "lentils", "tomatoes", "tofu", "leeks"], r.choice([2, 3])
                )
            },
            "diet",
            ["vegetarian", "vegan"],
        ),
        {"diet": " {}"},
    ),
    "calorie_count": (
        ["How many calories are in {grams} grams of {food}?", "Calories in {grams} g of {food}?"],
        lambda r: {
            "food": r.choice(["oatmeal", "banana", "cheddar", "salmon", "almonds"]),
            "grams": r.choice([30, 50, 120, 200]),
        },
        {},
    ),
    "body_mass_index": (
        [
            "What's the BMI of someone weighing {weight_kg} kg at {height_m} m?",
            "Body mass index for {weight_kg} kg and {height_m} m tall?",
        ],
        lambda r: {"weight_kg": r.choice([54, 68, 81.5, 95]), "height_m": r.choice([1.58, 1.7, 1.82, 1.95])},
        {},
    ),
    "book_table": (
        [
            "Reserve a table for {party_size} at {restaurant} on {datetime}.",
            "Book {restaurant} for {party_size} people, {datetime}.",
        ],
        lambda r: {
            "restaurant": r.choice(["Chez Lou", "Sakura House", "The Green Fork", "Trattoria Nonna"]),
            "party_size": r.choice([2, 4, 5, 8]),
            "datetime": r.choice(["2026-12-05 19:30", "2027-01-16 20:00", "2027-02-02 12:30"]),
        },
        {},
    ),
    "movie_showtimes": (
        ["When is {title} showing in {location}?", "Showtimes for {title} near {location}?"],
        lambda r: {
            "title": r.choice(["The Quiet Harbour", "Ninth Orbit", "Paper Lanterns", "Cold Coast"]),
            "location": r.choice(PLACES),
        },
        {},
    ),
    "song_lyrics": (
        ["Get me the lyrics of {title} by {artist}.", "What are the words to {title} by {artist}?"],
        lambda r: {
            "title": r.choice(["Blue River", "Late Trains", "Salt and Honey"]),
            "artist": r.choice(["The Lanterns", "Mira Vale", "North Atlas"]),
        },
        {},
    ),
    "team_standings": (
        ["Show me the {league} table{season}.", "Where does everyone stand in the {league}{season}?"],
        lambda r: _opt(
            r,
            {"league": r.choice(["Premier League", "La Liga", "Serie A", "NBA", "Bundesliga"])},
            "season",
            ["2024-25", "2025-26"],
        ),
        {"season": " for the {} season"},
    ),
    "player_stats": (
        ["What were {player}'s stats in {season}?", "Season {season} statistics for {player}, please."],
        lambda r: {
            "player": r.choice(["Ana Ruiz", "Tom Becker", "Kenji Mori", "Lena Novak"]),
            "season": r.choice(["2023-24", "2024-25", "2025-26"]),
        },
        {},
    ),
    "translate_text": (
        ["Translate '{text}' into {target_language}.", "How do you say '{text}' in {target_language}?"],
        lambda r: {
            "text": r.choice(["where is the station", "two coffees please", "see you tomorrow"]),
            "target_language": r.choice(["French", "German", "Portuguese", "Dutch"]),
        },
        {},
    ),
    "word_definition": (
        ["Define the word {word}.", "What does {word} mean?"],
        lambda r: {"word": r.choice(["ephemeral", "laconic", "ubiquitous", "serendipity", "quixotic"])},
        {},
    ),
    "book_search": (
        ["Find books about {query}{limit}.", "Search the library for {query}{limit}."],
        lambda r: _opt(
            r, {"query": r.choice(["volcanoes", "Roman history", "bird watching", "chess openings"])}, "limit", [3, 10]
        ),
        {"limit": ", {} results"},
    ),
    "nearby_places": (
        ["Find a {kind} near {location}.", "Is there a {kind} close to {location}?"],
        lambda r: {
            "location": r.choice(PLACES),
            "kind": r.choice(["restaurant", "pharmacy", "museum", "park", "hotel"]),
        },
        {},
    ),
    "driving_distance": (
        ["How far is the drive from {origin} to {destination}?", "Driving time from {origin} to {destination}?"],
        lambda r: dict(zip(["origin", "destination"], _two(r, PLACES))),
        {},
    ),
    "train_timetable": (
        [
            "Trains from {from_station} to {to_station} on {date}?",
            "When do trains leave {from_station} for {to_station} on {date}?",
        ],
        lambda r: {**dict(zip(["from_station", "to_station"], _two(r, PLACES))), "date": r.choice(DATES)},
        {},
    ),
    "hotel_availability": (
        [
            "Are there free hotel rooms in {city} from {check_in} for {nights} nights?",
            "I need a room in {city} for {nights} nights from {check_in}.",
        ],
        lambda r: {"city": r.choice(PLACES), "check_in": r.choice(DATES), "nights": r.choice([1, 2, 3, 7])},
        {},
    ),
    "set_thermostat": (
        ["Set the thermostat to {temperature} degrees{room}.", "Turn the heating to {temperature} degrees{room}."],
        lambda r: _opt(r, {"temperature": r.choice([18, 19.5, 21, 23])}, "room", ["bedroom", "kitchen", "office"]),
        {"room": " in the {}"},
    ),
    "send_email": (
        [
            "Email {to} with the subject '{subject}' saying '{body}'.",
            "Send {to} an email, subject '{subject}': '{body}'.",
        ],
        lambda r: {
            "to": r.choice(["ana@example.com", "ops@example.org", "li.wei@example.net"]),
            "subject": r.choice(["Invoice", "Friday plan", "Draft ready"]),
            "body": r.choice(["see attached", "running ten minutes late", "looks good to me"]),
        },
        {},
    ),
    "timezone_of": (
        ["What time zone is {city} in?", "Which time zone does {city} use?"],
        lambda r: {"city": r.choice(PLACES)},
        {},
    ),
}


def say(value: Any) -> str:
    """A call's argument as a request writes it: text as it is, a list of texts joined with "and", anything
    else as JSON (numbers, lists of numbers)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return ", ".join(value[:-1]) + " and " + value[-1] if len(value) > 1 else value[0]
    return json.dumps(value)


def request(name: str, rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A user request `name` answers, and the arguments of the call that answers it."""
    phrasings, sample, optional = REQUESTS[name]
    args = sample(rng)
    words = {k: say(v) for k, v in args.items()}
    for key, wording in optional.items():
        words[key] = wording.format(say(args[key])) if key in args else ""
    return rng.choice(phrasings).format(**words), args
