"""JSON text read strictly: repeated keys named, NaN and infinity found, lone surrogates refused, whole
numbers past Python's limit a JSONDecodeError at their place. Rows (tool-call arguments, CSV and
Parquet cells; trainer.data) and a mix's dataset_source (trainer.config.sources) are read with it; it
imports nothing of ours, so the light modules may."""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any


_SURROGATE = re.compile("[\ud800-\udfff]")
# A config file (config.json, adapter_config.json, tokenizer_config.json) is kilobytes; a chat template inside
# tokenizer_config.json can be a few hundred: far above any real one, far below what a link to /dev/zero fills
CONFIG_MAX_BYTES = 64 << 20


def config_text(path: Any, encoding: str = "utf-8") -> str:
    """A small text file's content, or OSError saying why not: not a regular file (a FIFO would wait for a
    writer forever, a link to /dev/zero fill the memory: the kernel stopped `trainer serve` at 21 GB) or larger than
    CONFIG_MAX_BYTES. Every reader of a config file in a directory a user gives goes through it."""
    import os
    import stat

    st = os.stat(path)  # follows links: what the link names is what would be read
    if not stat.S_ISREG(st.st_mode):
        raise OSError(f"{path} is not a regular file (a FIFO, a device or a socket): give the file itself")
    if st.st_size > CONFIG_MAX_BYTES:
        raise OSError(f"{path} is {st.st_size} bytes, more than a config file holds ({CONFIG_MAX_BYTES} at most)")
    with open(path, encoding=encoding) as f:
        text = f.read(CONFIG_MAX_BYTES + 1)  # a file that grows while read stops here too
    if len(text) > CONFIG_MAX_BYTES:
        raise OSError(f"{path} grew past {CONFIG_MAX_BYTES} bytes while read")
    return text


# How a lone surrogate gets into a str: a JSON escape (UTF-8 bytes cannot encode one, and Arrow
# strings are UTF-8), so only rows whose JSON text has one are searched.
ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def lone_surrogate(value: Any, path: str) -> tuple[str, str] | None:
    """(where, which) of the first lone surrogate in a JSON value, or None: json reads the escape
    `"\\ud800"`, and Python a command-line argument that is not UTF-8, into a str that no UTF-8
    writer accepts (a delivery, a log line or the KFP API would fail on it)."""
    try:
        json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
        return None
    except UnicodeEncodeError:
        pass

    def find(v: Any, at: str) -> tuple[str, str] | None:
        if isinstance(v, str):
            return (at, m[0]) if (m := _SURROGATE.search(v)) else None
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, item in items:
            if isinstance(k, str) and (m := _SURROGATE.search(k)):
                return f"{at} (a key)", m[0]
            if found := find(item, (f"{at}.{k}" if at else str(k)) if isinstance(v, dict) else f"{at}[{k}]"):
                return found
        return None

    return find(value, path) or (path, "?")


def surrogate_problem(row: Any, path: str) -> str | None:
    """A row's lone surrogate, as a problem with its fix (None when it has none)."""
    if not (found := lone_surrogate(row, path)):
        return None
    return (
        f"{found[0] or 'the row'} holds a lone surrogate ({found[1]!a}, half of a UTF-16 pair written as a "
        "\\u escape), which is not text and cannot be stored as UTF-8: fix the escape (a pair such as "
        "\\ud83d\\ude00 is one character) or drop the row"
    )


def non_finite_paths(value: Any, path: str) -> list[str]:
    """Paths of NaN and infinity anywhere inside a JSON value (json reads NaN, Infinity, 1e999)."""
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite_paths(v, f"{path}[{k!r}]")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_finite_paths(v, f"{path}[{i}]")]
    return []


def json_type(value: Any) -> str:
    return {str: "string", dict: "object", list: "list", bool: "boolean", int: "number", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def repeats_hook(repeated: list[str]):
    """An object_pairs_hook (json.loads, json.JSONDecoder) that builds each object as json does
    and adds the keys it repeats to `repeated`."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) < len(items):
            seen: set[str] = set()
            for k, _ in items:
                if k in seen:
                    repeated.append(k)
                seen.add(k)
        return out

    return pairs


def loads(text: str, **kwargs: Any) -> tuple[Any, list[str]]:
    """json.loads (json_loads, with `kwargs`), and the keys that an object repeats: json keeps only
    the last value of `{"prompt": "a", "prompt": "b"}`, so one of them would be dropped without a word."""
    repeated: list[str] = []
    return json_loads(text, object_pairs_hook=repeats_hook(repeated), **kwargs), repeated


def json_loads(text: str, **kwargs: Any) -> Any:
    """json.loads, with a whole number longer than Python's int limit (4300 digits) as a
    JSONDecodeError at its place, as any other malformed JSON, instead of a bare ValueError."""
    try:
        return json.loads(text, **kwargs)
    except json.JSONDecodeError:
        raise
    except ValueError as err:
        limit = sys.get_int_max_str_digits()
        if "integer string conversion" not in str(err) or not isinstance(text, str):
            raise
        at = re.search(r"\d{%d,}" % (limit + 1), text)
        raise json.JSONDecodeError(
            f"a number of more than {limit} digits (Python reads at most {limit})", text, at.start() if at else 0
        ) from None


def repeated_key(key: str) -> str:
    return f"has the key {key!r} twice (a JSON reader keeps only the last value): keep one"
