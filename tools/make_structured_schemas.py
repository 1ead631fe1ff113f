#!/usr/bin/env python3
"""tools/make_structured_schemas.py — writes tests/fixtures/structured/schemas.json: the JSON
schemas the structured-output tests and bench/grammar_bench.py run (each with a prompt that
asks for it). Varied on purpose: flat and nested objects, required and optional
properties, arrays with minItems/maxItems, enums and const, anyOf / oneOf, string
patterns and formats, numeric bounds, $defs/$ref, nullable fields, additionalProperties.
Every schema is checked here with jsonschema's metaschema validator (Draft 2020-12).
Usage: python3 tools/make_structured_schemas.py [OUT]
"""
import json
import os
import sys

import jsonschema

S = "string"


def obj(props, required=None, extra=False, **kw):
    d = {"type": "object", "properties": props, "required": list(props) if required is None else required}
    if not extra:
        d["additionalProperties"] = False
    d.update(kw)
    return d


def s(**kw):
    return {"type": "string", "maxLength": kw.pop("maxLength", 40), **kw}


def i(**kw):
    return {"type": "integer", **kw}


def n(**kw):
    return {"type": "number", **kw}


B = {"type": "boolean"}


def arr(items, lo=None, hi=None):
    d = {"type": "array", "items": items}
    if lo is not None:
        d["minItems"] = lo
    if hi is not None:
        d["maxItems"] = hi
    return d


CASES = [
    ("a person with a name and an age", obj({"name": s(), "age": i(minimum=0, maximum=130)})),
    ("a book with title, author and year", obj({"title": s(), "author": s(), "year": i(minimum=1000, maximum=2100)})),
    ("a city with its country and population", obj({"city": s(), "country": s(), "population": i(minimum=0)})),
    ("a product with a name, a price in dollars and whether it is in stock",
     obj({"name": s(), "price": n(minimum=0), "in_stock": B})),
    ("a color as red, green and blue components", obj({"r": i(minimum=0, maximum=255), "g": i(minimum=0, maximum=255),
                                                       "b": i(minimum=0, maximum=255)})),
    ("a point in 3D space", obj({"x": n(), "y": n(), "z": n()})),
    ("the weather: a temperature in Celsius and a condition",
     obj({"temperature_c": n(minimum=-90, maximum=60), "condition": {"enum": ["sunny", "cloudy", "rain", "snow"]}})),
    ("a traffic light state", obj({"light": {"enum": ["red", "yellow", "green"]}})),
    ("a log entry with a level and a message",
     obj({"level": {"enum": ["debug", "info", "warning", "error"]}, "message": s()})),
    ("a user with a username of lowercase letters and an id",
     obj({"username": s(pattern="^[a-z]{3,12}$"), "id": i(minimum=1)})),
    ("a date as year, month and day", obj({"year": i(minimum=1900, maximum=2100), "month": i(minimum=1, maximum=12),
                                          "day": i(minimum=1, maximum=31)})),
    ("an ISO date string", obj({"date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}})),
    ("a US phone number", obj({"phone": {"type": "string", "pattern": "^\\([0-9]{3}\\) [0-9]{3}-[0-9]{4}$"}})),
    ("a hex color code", obj({"hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}})),
    ("three fruits", obj({"fruits": arr(s(maxLength=20), 3, 3)})),
    ("between one and four programming languages", obj({"languages": arr(s(maxLength=20), 1, 4)})),
    ("a shopping list of at most five items with quantities",
     obj({"items": arr(obj({"name": s(maxLength=20), "quantity": i(minimum=1, maximum=99)}), 1, 5)})),
    ("a matrix of two rows of two integers", obj({"matrix": arr(arr(i(), 2, 2), 2, 2)})),
    ("a list of up to three scores between 0 and 100", obj({"scores": arr(n(minimum=0, maximum=100), 0, 3)})),
    ("a company with an address", obj({"company": s(), "address": obj({"street": s(), "city": s(),
                                                                        "zip": s(pattern="^[0-9]{5}$")})})),
    ("an employee with a manager who has a name and an email",
     obj({"name": s(), "manager": obj({"name": s(), "email": s(pattern="^[a-z]+@[a-z]+\\.com$")})})),
    ("a recipe with a name, servings and up to four ingredients",
     obj({"name": s(), "servings": i(minimum=1, maximum=12), "ingredients": arr(s(maxLength=24), 1, 4)})),
    ("a movie with an optional rating", obj({"title": s(), "rating": n(minimum=0, maximum=10)}, required=["title"])),
    ("a contact with a name and optionally a phone and an email",
     obj({"name": s(), "phone": s(maxLength=20), "email": s(maxLength=40)}, required=["name"])),
    ("a server configuration with host, port and whether TLS is on",
     obj({"host": s(), "port": i(minimum=1, maximum=65535), "tls": B})),
    ("a yes/no answer with a confidence", obj({"answer": {"enum": ["yes", "no"]}, "confidence": n(minimum=0, maximum=1)})),
    ("a shape: either a circle with a radius or a rectangle with width and height",
     {"anyOf": [obj({"kind": {"const": "circle"}, "radius": n(minimum=0)}),
                obj({"kind": {"const": "rectangle"}, "width": n(minimum=0), "height": n(minimum=0)})]}),
    ("an identifier that is either an integer or a short string",
     obj({"id": {"anyOf": [i(), s(maxLength=12)]}})),
    ("a value that is a number or null", obj({"value": {"anyOf": [n(), {"type": "null"}]}})),
    ("a payment by card or by bank transfer",
     {"oneOf": [obj({"method": {"const": "card"}, "last4": s(pattern="^[0-9]{4}$")}),
                obj({"method": {"const": "bank"}, "iban": s(pattern="^[A-Z]{2}[0-9]{10}$")})]}),
    ("a tree node with a value and up to two children that are leaves",
     obj({"value": i(), "children": arr(obj({"value": i()}), 0, 2)})),
    ("a family: two parents and up to three children, each with a name and age",
     {"$defs": {"person": obj({"name": s(maxLength=20), "age": i(minimum=0, maximum=120)})},
      **obj({"parents": arr({"$ref": "#/$defs/person"}, 2, 2), "children": arr({"$ref": "#/$defs/person"}, 0, 3)})}),
    ("a line segment from one point to another",
     {"$defs": {"pt": obj({"x": i(), "y": i()})}, **obj({"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}})}),
    ("a flag", obj({"enabled": B})),
    ("a single integer between 1 and 10", obj({"n": i(minimum=1, maximum=10)})),
    ("a version number", obj({"major": i(minimum=0), "minor": i(minimum=0), "patch": i(minimum=0)})),
    ("a semantic version string", obj({"version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$"}})),
    ("an HTTP response with a status code and headers",
     obj({"status": i(minimum=100, maximum=599), "headers": arr(obj({"name": s(maxLength=20), "value": s()}), 0, 3)})),
    ("a chess move from one square to another",
     obj({"from": s(pattern="^[a-h][1-8]$"), "to": s(pattern="^[a-h][1-8]$")})),
    ("a temperature reading with a unit",
     obj({"value": n(), "unit": {"enum": ["C", "F", "K"]}})),
    ("a geographic location", obj({"lat": n(minimum=-90, maximum=90), "lon": n(minimum=-180, maximum=180)})),
    ("a task with a title, priority and tags",
     obj({"title": s(), "priority": {"enum": ["low", "medium", "high"]}, "tags": arr(s(maxLength=12), 0, 3)})),
    ("a sentiment label for the sentence 'I love this'",
     obj({"sentiment": {"enum": ["positive", "negative", "neutral"]}})),
    ("a translation of 'hello' into French and Spanish", obj({"fr": s(), "es": s()})),
    ("a summary with a title and exactly two bullet points",
     obj({"title": s(), "bullets": arr(s(maxLength=60), 2, 2)})),
    ("an invoice with a number, lines of description and amount, and a total",
     obj({"number": s(pattern="^INV-[0-9]{4}$"), "lines": arr(obj({"description": s(), "amount": n(minimum=0)}), 1, 3),
          "total": n(minimum=0)})),
    ("a pet: a dog with a breed, or a cat with an indoor flag",
     {"anyOf": [obj({"species": {"const": "dog"}, "breed": s()}), obj({"species": {"const": "cat"}, "indoor": B})]}),
    ("a key/value settings object with a theme and a font size",
     obj({"theme": {"enum": ["light", "dark"]}, "font_size": i(minimum=8, maximum=32)})),
    ("a nullable middle name with a first and last name",
     obj({"first": s(), "middle": {"anyOf": [s(), {"type": "null"}]}, "last": s()})),
    ("a rectangle's corners as two arrays of two numbers",
     obj({"top_left": arr(n(), 2, 2), "bottom_right": arr(n(), 2, 2)})),
    ("a quiz question with four options and the index of the answer",
     obj({"question": s(maxLength=80), "options": arr(s(maxLength=30), 4, 4), "answer": i(minimum=0, maximum=3)})),
    ("an object with any extra string fields but a required id",
     {"type": "object", "properties": {"id": i()}, "required": ["id"],
      "additionalProperties": {"type": "string", "maxLength": 20}, "maxProperties": 3}),
    ("a list of two to three words as an array", arr(s(maxLength=15), 2, 3)),
    ("a boolean answer: is the sky blue", B),
    ("a number between 0 and 1", n(minimum=0, maximum=1)),
    ("a status string", {"enum": ["ok", "degraded", "down"]}),
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                                                              "structured", "schemas.json")
    cases = []
    for k, (what, schema) in enumerate(CASES):
        jsonschema.Draft202012Validator.check_schema(schema)
        cases.append({"name": f"s{k:02d}", "prompt": f"Reply with JSON only: {what}.", "schema": schema})
    with open(out, "w") as f:
        json.dump({"generator": "tools/make_structured_schemas.py", "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} schemas -> {out}")


if __name__ == "__main__":
    main()
