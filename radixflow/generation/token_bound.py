"""A sound lower bound on how many tokens a text becomes, cheap enough to check before tokenizing.

Each token covers at most ``longest`` units of the text the model sees (UTF-8 bytes for a
byte-level tokenizer, characters otherwise), ``longest`` being the vocabulary's longest token; so
a text of ``n`` units is at least ``ceil(n / longest)`` tokens. That holds only where every unit is
covered by some token: a BPE model that keeps every byte (a byte-level alphabet, or sentencepiece's
byte fallback), pre-tokenizers that drop nothing, no added token that swallows the whitespace
beside it, no truncation. Any other pipeline gets no bound: it must never refuse a prompt that
would fit. Units are counted after the tokenizer's own normalizer (NFC can shorten a text), and
only for a text that is long before normalizing, so a short prompt costs one length check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# pre-tokenizers that split a text without dropping any of it (unless told to remove matches)
_KEEPING = frozenset({"ByteLevel", "Metaspace", "Digits", "Punctuation", "Split", "UnicodeScripts"})


@dataclass(frozen=True)
class TokenBound:
    longest: int  # units the vocabulary's longest token covers
    byte_level: bool  # units are UTF-8 bytes; else characters
    normalize: Callable[[str], str] | None  # the tokenizer's normalizer, if it has one

    def units(self, text: str) -> int:
        if not self.byte_level or text.isascii():  # an ASCII text is as many bytes as characters
            return len(text)
        return len(text.encode("utf-8", "surrogatepass"))

    def over(self, text: str, limit: int) -> int | None:
        """A lower bound on ``text``'s tokens when it proves more than ``limit``; else None. Pure."""
        if len(text) * 4 <= limit * self.longest:  # not even at four bytes a character
            return None
        least = -(-self.units(text) // self.longest)
        if least > limit and self.normalize is not None:
            least = -(-self.units(self.normalize(text)) // self.longest)
        return least if least > limit else None


def token_bound(backend: Any) -> TokenBound | None:
    """The bound for a `tokenizers.Tokenizer`, or None when its pipeline may cover a stretch of text
    with no token or swallow any length of it into one. Reads the vocabulary once."""
    model = backend.model
    if type(model).__name__ != "BPE" or backend.truncation is not None:
        return None
    pre = backend.pre_tokenizer
    spec = json.loads(pre.__getstate__()) if pre is not None else None
    if spec is not None and not _keeps_everything(spec):
        return None
    added = backend.get_added_tokens_decoder()
    if any(t.lstrip or t.rstrip for t in added.values()):
        return None
    byte_level = spec is not None and _has_byte_level(spec)
    vocab = backend.get_vocab(with_added_tokens=False)
    if byte_level and not _byte_alphabet() <= vocab.keys():
        return None  # a byte outside the vocabulary would become nothing, or a fused unknown
    if not byte_level and not (model.byte_fallback and _byte_pieces() <= vocab.keys()):
        return None
    contents = [t.content for t in added.values()]
    if byte_level:
        longest = max([len(p) for p in vocab] + [len(c.encode("utf-8")) for c in contents])
    else:
        longest = max([len(p) for p in vocab] + [len(c) for c in contents])
    normalizer = backend.normalizer
    return TokenBound(max(longest, 1), byte_level, normalizer.normalize_str if normalizer else None)


def _keeps_everything(spec: dict[str, Any]) -> bool:
    if spec.get("type") == "Sequence":
        return all(_keeps_everything(s) for s in spec.get("pretokenizers", ()))
    return spec.get("type") in _KEEPING and spec.get("behavior") != "Removed"


def _has_byte_level(spec: dict[str, Any]) -> bool:
    if spec.get("type") == "Sequence":
        return any(_has_byte_level(s) for s in spec.get("pretokenizers", ()))
    return spec.get("type") == "ByteLevel"


def _byte_alphabet() -> set[str]:
    from tokenizers import pre_tokenizers

    return set(pre_tokenizers.ByteLevel.alphabet())


def _byte_pieces() -> set[str]:
    return {f"<0x{b:02X}>" for b in range(256)}
