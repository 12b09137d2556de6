"""Text a user gives that the model is trained to say (irrelevance_reply): refused when it holds what
a terminal or the tokenizer reads as something other than text; and text as words (`words`), one split for the
contamination guard and the text scoring. Imports nothing of ours, so the light
modules (trainer.data.masking) may."""

from __future__ import annotations

import re
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


# Scripts written without spaces between words (Han, kana, Thai, Lao, Khmer, Myanmar): one character, one word.
_UNSPACED = re.compile(
    "([\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\U00020000-\U0002fa1f])"
)


# One such character (what `words` makes of each)
UNSPACED_CHAR = re.compile(_UNSPACED.pattern[1:-1])

_APOSTROPHES = "'\u2019\u02bc"


class _Spacing(dict):
    """str.translate's table, filled as characters are met: format characters (zero-width spaces, joiners,
    byte-order marks: Unicode category Cf) and apostrophes dropped ("what's" is one word, as it is in
    "what's the weather in london", five words), other punctuation and symbols (P*, S*) read as a space."""

    def __missing__(self, code: int) -> str | None:
        kind = unicodedata.category(chr(code))
        self[code] = value = (
            None if kind == "Cf" or chr(code) in _APOSTROPHES else " " if kind[0] in "PS" else chr(code)
        )
        return value


_SPACING = _Spacing()


def words(text: str) -> list[str]:
    """Text as the contamination check compares it: Unicode NFKC (full-width digits and letters as ASCII),
    format characters dropped, punctuation and symbols as spaces, case folded, split at white space."""
    text = unicodedata.normalize("NFKC", str(text)).translate(_SPACING).casefold()
    return _UNSPACED.sub(r" \1 ", text).split()
