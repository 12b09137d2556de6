"""The base model's scores kept in the bucket, so that the base is scored once per model tree, template, rows
and engine settings rather than in every run (issue 44).

The base answers greedily: on the same model tree, chat template, rows and engine settings its answers, and
so its metrics, are the same in every run. `KeptBase` names them by a sha256 over exactly these (`digest`)
and keeps one JSON object per digest and part at `base_scores/sha256-<digest>.json`: the held-out part (its
metrics and per-turn predictions, keyed by the held-out rows) and the BFCL part (its answers to BFCL's rows,
what bfcl.score, bfcl.counts, bfcl.failures and bfcl.answers take from the base, keyed by those rows alone).
The parts are kept apart because they change apart: a run on another dataset with the same base and BFCL
rows asks the base nothing about BFCL, which was two thirds of the evaluation here (base 8:05 of 12 min). One PUT writes the whole object, so it is there whole or
not at all; it names its own digest, so an object that is not what its name says is set aside. Reading or
writing it never fails a run: a store that does not answer, or an object that is damaged, is said in one
line and the base is scored.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
from typing import Any

from trainer.core.errors import Unavailable, UserError
from trainer.evaluate import bfcl

PREFIX = "base_scores"
FORMAT = 2  # 1: one object for both parts
PARTS = ("heldout", "bfcl")
# What decides the base's answers besides the rows: greedy decoding and BFCL's answer budget (HF generate's
# held-out budgets follow each row's expected answer, which the rows' digest covers).
ENGINE_SETTINGS = {"decoding": "greedy", "bfcl_answer_tokens": bfcl.ANSWER_TOKENS}


def digest(model_uri: str, chat_template: str | None, part: str, rows_key: dict[str, Any]) -> str:
    """The sha256 one part of the base's scores is kept under: the base model tree's content address
    (`model_uri`, a sha256-named tree), the chat template the tokenizer applies, the part (PARTS) and what it
    was asked (the suite's `key`: for heldout the rows scored and their settings, trainer.evaluate.heldout.HeldOut;
    for bfcl its rows and how they were drawn, trainer.evaluate.bfcl.Bfcl)."""
    what = {
        "format": FORMAT,
        "model": model_uri,
        "chat_template": chat_template or "",
        "part": part,
        "rows": rows_key,
        "engine": ENGINE_SETTINGS,
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class KeptBase:
    """The base's scores in `store` for the base model at `model_uri`; `run`: what names this run in the line
    a later run prints when it reuses them."""

    def __init__(self, store, model_uri: str, run: str = "") -> None:
        self.store, self.model_uri, self.run = store, model_uri, run

    def key(self, sha: str) -> str:
        return f"{PREFIX}/sha256-{sha}.json"

    def load(self, sha: str, part: str, rows: int) -> dict[str, Any] | None:
        """The kept `part` for digest `sha` (heldout: {"metrics", "predictions"}; bfcl: {"answers"}), None when
        there is none (said in one line when it is damaged or the store does not answer). `rows`: how many
        held-out turns or BFCL rows it must hold answers for."""
        from minio.error import S3Error

        key = self.key(sha)
        where = self.store.uri(key)
        try:
            raw = self.store.get_bytes(key)
        except S3Error as err:
            if err.code not in ("NoSuchKey", "NoSuchObject", "NoSuchBucket"):
                print(
                    f"WARNING: could not read the kept base scores at {where} ({err.code}): scoring the base model",
                    flush=True,
                )
            return None
        except (Unavailable, UserError, OSError) as err:
            print(
                f"WARNING: could not read the kept base scores at {where} ({err}): scoring the base model", flush=True
            )
            return None
        problem, kept = _damage(raw, sha, part, rows)
        if problem:
            print(
                f"WARNING: the kept base scores at {where} are damaged ({problem}): set aside, scoring the base model",
                flush=True,
            )
            return None
        print(f"base scores reused from {where} ({part}, scored by run {kept.get('run') or 'unknown'})", flush=True)
        return kept

    def save(self, sha: str, part: str, scores: dict[str, Any]) -> None:
        """Keep the base's `part` (heldout: {"metrics", "predictions"}; bfcl: {"answers"}) under `sha`; a store
        that refuses costs one warning, never the run."""
        from minio.error import S3Error

        key = self.key(sha)
        obj = {
            "format": FORMAT,
            "digest": sha,
            "part": part,
            "model": self.model_uri,
            "run": self.run,
            "scored_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **scores,
        }
        try:
            self.store.ensure_bucket()
            self.store.put_json(key, obj)
        except (S3Error, Unavailable, UserError, OSError) as err:
            print(
                f"WARNING: could not keep the base scores at {self.store.uri(key)} ({err}): the next run "
                "scores the base again",
                flush=True,
            )
            return
        print(f"base scores kept at {self.store.uri(key)} ({part}) for later runs", flush=True)


def _prediction_problem(p: Any, at: str) -> str:
    """What makes `p` no answer as the scorers read it (trainer.chat.types.Prediction: calls of a name and
    arguments, content text or null, raw text); '' when it is one."""
    if not isinstance(p, dict):
        return f"{at} is {type(p).__name__}, not an answer object"
    calls = p.get("calls")
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and (c.get("name") is None or isinstance(c.get("name"), str)) and "arguments" in c
        for c in calls
    ):
        return f"{at}'s calls are not a list of {{name, arguments}}"
    if p.get("content") is not None and not isinstance(p.get("content"), str):
        return f"{at}'s content is {type(p.get('content')).__name__}, not text"
    if not isinstance(p.get("raw"), str):
        return f"{at}'s raw text is {type(p.get('raw')).__name__}"
    return ""


def _damage(raw: bytes, sha: str, part: str, rows: int) -> tuple[str, dict[str, Any]]:
    """("", the object) when `raw` is the whole kept `part` for `sha`, every value of the shape its readers take
    (metrics finite numbers, answers as the scorers read them); otherwise what is wrong with it. An object with the
    right name and shape but other content used to fail the evaluate step of every run with that base."""
    try:
        kept = json.loads(raw)
    except (ValueError, RecursionError) as err:  # Recursion: nested past json's depth
        return f"not JSON: {type(err).__name__}: {str(err)[:80]}", {}
    if not isinstance(kept, dict):
        return "not a JSON object", {}
    if kept.get("format") != FORMAT or kept.get("digest") != sha or kept.get("part") != part:
        return (
            f"it names digest {str(kept.get('digest'))[:12]}, format {kept.get('format')}, part {kept.get('part')}"
        ), {}
    if part == "heldout":
        metrics, predictions = kept.get("metrics"), kept.get("predictions")
        if not isinstance(metrics, dict) or not isinstance(predictions, list) or len(predictions) != rows:
            got = len(predictions) if isinstance(predictions, list) else 0
            return f"{got} held-out answers instead of {rows}", {}
        bad = [
            k
            for k, v in metrics.items()
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
        ]
        if bad:
            return f"metric {bad[0]!r} is {metrics[bad[0]]!r}, not a finite number", {}
        for i, p in enumerate(predictions):
            if problem := _prediction_problem(p, f"answer {i}"):
                return problem, {}
    if part == "bfcl":
        answers = kept.get("answers")
        if not isinstance(answers, list) or len(answers) != rows:
            return f"{len(answers) if isinstance(answers, list) else 0} BFCL answers instead of {rows}", {}
        for i, p in enumerate(answers):  # None: a row too long to ask
            if p is not None and (problem := _prediction_problem(p, f"BFCL answer {i}")):
                return problem, {}
    return "", kept
