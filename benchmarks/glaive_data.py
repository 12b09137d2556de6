"""python -m benchmarks.glaive_data OUT.jsonl [--rows 3000] [--seed 0]

A dataset in glaive-function-calling-v2's format (columns `system` and `chat`, from its dataset card) made from the
built-in data's generators, for measuring the pipeline on the format users bring when the Hub is out of reach:
every tool row is a conversation that calls, reads the tool's result and answers in text (what glaive's rows
do), and one in ten asks for something none of its functions does and is answered in text. The file is read by
the project's glaive reader (trainer.data.fc_formats) like a download of the real dataset.

    python -m benchmarks.glaive_data /tmp/glaive.jsonl
    python -m pipelines.run_local --param dataset_source=/tmp/glaive.jsonl ...
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from trainer.data import builtin_data

SYSTEM = "SYSTEM: You are a helpful assistant with access to the following functions. Use them if required -\n"
END = " <|endoftext|>"


def _system(tools: list[dict[str, Any]]) -> str:
    return SYSTEM + "\n\n".join(json.dumps(t["function"], indent=4) for t in tools) + "\n"


def _turn(message: dict[str, Any]) -> str:
    if message["role"] == "user":
        return f"USER: {message['content']}"
    if message["role"] == "tool":
        return f"FUNCTION RESPONSE: {message['content']}"
    calls = message.get("tool_calls") or []
    if not calls:
        return f"ASSISTANT: {message['content']}{END}"
    fn = calls[0]["function"]  # glaive's rows make one call a turn
    # glaive writes the arguments as a JSON string in single quotes
    call = '{"name": ' + json.dumps(fn["name"]) + ', "arguments": \'' + json.dumps(fn["arguments"]) + "'}"
    return f"ASSISTANT: <functioncall> {call}{END}"


def glaive_row(row: dict[str, Any]) -> dict[str, str]:
    """A chat row (OpenAI format, one call a turn) as glaive-function-calling-v2 writes it."""
    return {"system": _system(row.get("tools") or []), "chat": "\n\n\n".join(_turn(m) for m in row["messages"])}


def rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    """`n` glaive rows with distinct first requests: nine in ten call, read the result and answer, one in ten is
    a request none of the offered functions does, answered in text."""
    rng, out, seen = random.Random(seed), [], set()
    while len(out) < n:
        row = builtin_data.make_irrelevance_row(rng) if rng.random() < 0.1 else builtin_data.make_multi_turn_row(rng)
        request = row["messages"][0]["content"]
        if request not in seen:
            seen.add(request)
            out.append(glaive_row(row))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    made = rows(args.rows, args.seed)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in made))
    print(f"{len(made)} glaive-function-calling-v2 rows -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
