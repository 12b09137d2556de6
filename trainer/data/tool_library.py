"""A library of tool schemas across domains: the distractors a masked copy may offer (trainer.data.masking).

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

from typing import Any

_S, _N, _I, _B = {"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": "boolean"}


def _tool(name: str, description: str, required: dict[str, Any], optional: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required)}}}


def _enum(*values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


LIBRARY: list[dict[str, Any]] = [
    # mathematics and science
    _tool("solve_quadratic", "Roots of a*x^2 + b*x + c = 0", {"a": _N, "b": _N, "c": _N}),
    _tool("triangle_area", "Area of a triangle from its base and height", {"base": _N, "height": _N}),
    _tool("circle_circumference", "Circumference of a circle", {"radius": _N}, {"unit": _enum("cm", "m", "in")}),
    _tool("prime_factors", "The prime factors of a whole number", {"number": _I}),
    _tool("matrix_determinant", "Determinant of a square matrix",
          {"matrix": {"type": "array", "items": {"type": "array", "items": _N}}}),
    _tool("compound_interest", "Value of a deposit after compound interest",
          {"principal": _N, "annual_rate": _N, "years": _I}, {"compounds_per_year": {**_I, "default": 12}}),
    _tool("kinetic_energy", "Kinetic energy of a moving body", {"mass_kg": _N, "velocity_ms": _N}),
    _tool("molar_mass", "Molar mass of a chemical formula", {"formula": _S}),
    _tool("convert_length", "Convert a length between units",
          {"value": _N, "from_unit": _enum("mm", "cm", "m", "km", "in", "ft", "mi"),
           "to_unit": _enum("mm", "cm", "m", "km", "in", "ft", "mi")}),
    _tool("standard_deviation", "Standard deviation of a list of numbers",
          {"values": {"type": "array", "items": _N}}, {"sample": {**_B, "default": True}}),
    # money and shopping
    _tool("stock_quote", "Latest price of a stock by its ticker symbol", {"ticker": _S}),
    _tool("loan_payment", "Monthly payment of a loan", {"amount": _N, "annual_rate": _N, "months": _I}),
    _tool("track_parcel", "Where a parcel is, by its tracking number", {"tracking_number": _S},
          {"carrier": _enum("dhl", "ups", "fedex", "usps")}),
    _tool("add_to_cart", "Add a product to the shopping cart", {"product_id": _S}, {"quantity": {**_I, "default": 1}}),
    _tool("split_bill", "Each person's share of a bill with tip", {"total": _N, "people": _I},
          {"tip_percent": {**_N, "default": 15}}),
    # food and health
    _tool("find_recipe", "Recipes that use the given ingredients",
          {"ingredients": {"type": "array", "items": _S}}, {"diet": _enum("any", "vegetarian", "vegan")}),
    _tool("calorie_count", "Calories in a serving of a food", {"food": _S, "grams": _N}),
    _tool("body_mass_index", "Body mass index from weight and height", {"weight_kg": _N, "height_m": _N}),
    _tool("book_table", "Reserve a restaurant table", {"restaurant": _S, "party_size": _I, "datetime": _S}),
    # media, sports and culture
    _tool("movie_showtimes", "Showtimes of a film at cinemas near a place", {"title": _S, "location": _S}),
    _tool("song_lyrics", "Lyrics of a song", {"title": _S, "artist": _S}),
    _tool("team_standings", "League table of a sports league", {"league": _S}, {"season": _S}),
    _tool("player_stats", "Season statistics of an athlete", {"player": _S, "season": _S}),
    _tool("translate_text", "Translate text into another language", {"text": _S, "target_language": _S}),
    _tool("word_definition", "Dictionary definition of a word", {"word": _S}),
    _tool("book_search", "Books by title, author or subject", {"query": _S}, {"limit": {**_I, "default": 5}}),
    # places, travel and home
    _tool("nearby_places", "Places of a kind near a location",
          {"location": _S, "kind": _enum("restaurant", "pharmacy", "museum", "park", "hotel")}),
    _tool("driving_distance", "Road distance and driving time between two places", {"origin": _S, "destination": _S}),
    _tool("train_timetable", "Train departures between two stations", {"from_station": _S, "to_station": _S,
                                                                          "date": _S}),
    _tool("hotel_availability", "Free hotel rooms in a city for given nights",
          {"city": _S, "check_in": _S, "nights": _I}),
    _tool("set_thermostat", "Set the home thermostat", {"temperature": _N}, {"room": _S}),
    _tool("send_email", "Send an email", {"to": _S, "subject": _S, "body": _S}),
    _tool("timezone_of", "The time zone of a city", {"city": _S}),
]
