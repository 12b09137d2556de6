"""Text a user gives that the model is trained to say (irrelevance_reply): refused when it holds what
a terminal or the tokenizer reads as something other than text. Imports nothing of ours, so the light
modules (trainer.data.masking) may."""

from __future__ import annotations

import unicodedata
from typing import Any, Iterable

# Bidirectional overrides, embeddings and isolates (Unicode category Cf): they reorder what a reader sees
# ("Trojan Source"), so an answer that holds one shows other text than it is.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_ALLOWED = frozenset("\t\n")


def control_character(text: str) -> tuple[int, str] | None:
    """(position, character) of the first control character in `text` (Unicode category Cc but a tab or a
    newline, or a bidirectional override), None when it has none."""
    for i, ch in enumerate(text):
        if ch in _BIDI or (ch not in _ALLOWED and unicodedata.category(ch) == "Cc"):
            return i, ch
    return None


def control_problem(text: Any, name: str, fix: str = "") -> str | None:
    """Why `text` cannot be trained as an answer because of a control character (None when it holds none):
    an escape sequence (`\\x1b[2J` clears a screen) or a bidi override would be learnt, and printed raw by
    every terminal that shows the model's answers."""
    if not isinstance(text, str) or not (found := control_character(text)):
        return None
    at, ch = found
    return (
        f"{name} holds the control character {ch!a} at position {at} (an escape sequence, a terminal control "
        f"or a bidirectional override), which the model would learn to say: give plain text without it"
        f"{', ' + fix if fix else ''}"
    )


def special_tokens(tokenizer: Any) -> list[str]:
    """The tokenizer's special tokens and added tokens (a chat template's turn markers among them), longest
    first; an added token that is only whitespace is left out (some tokenizers add runs of spaces)."""
    found = set(getattr(tokenizer, "all_special_tokens", None) or [])
    found |= set((getattr(tokenizer, "added_tokens_encoder", None) or {}).keys())
    return sorted((t for t in found if isinstance(t, str) and t.strip()), key=lambda t: (-len(t), t))


def special_token_problem(text: Any, tokens: Iterable[str], name: str, model: str, fix: str = "") -> str | None:
    """Why `text` cannot be trained as an answer because it holds one of `model`'s special tokens (None when
    it holds none): the tokenizer reads it as that token (a turn marker, an end of text), not as text, so
    the answer would teach the model to end or open a turn there."""
    if not isinstance(text, str):
        return None
    token = next((t for t in tokens if t in text), None)
    if token is None:
        return None
    return (
        f"{name} holds {token!r}, a special token of model {model} (its tokenizer reads it as a turn or "
        f"text marker, not as text), so the answer would teach the model to end or open a turn there: "
        f"leave it out{', ' + fix if fix else ''}"
    )
