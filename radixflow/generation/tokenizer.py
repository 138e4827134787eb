"""A model's tokenizer as the generation layer uses it: text <-> token ids, token strings, chat.

Loaded from the model directory (``tokenizer.json`` plus ``tokenizer_config.json``, as the zoo and
Hugging Face checkpoints lay them out). One encoding is used everywhere (`encode`): the offline
API, ``/v1/completions`` and ``/tokenize`` cannot disagree on where a prompt's tokens fall.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radixflow.generation.chat import ChatTemplate, compile_problem
from radixflow.generation.token_bound import token_bound
from radixflow.jsonl import json_value
from radixflow.problems import Problem


class TokenizerError(ValueError):
    """The model directory has no usable tokenizer (a one-line reason)."""


class TextTooLong(TokenizerError):
    """A text that certainly has more tokens than a `limited` tokenizer takes; refused before it
    was tokenized. Carries the `Problem` (the ``prompt``, as the context check after tokenizing)."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


@dataclass(frozen=True)
class TokenizerInfo:
    """What ``/tokenizer_info`` reports (and the special tokens the chat template sees)."""

    vocab_size: int
    bos_token: str | None
    eos_token: str | None
    chat_template: str | None


class TextTokenizer:
    def __init__(self, backend: Any, config: dict[str, Any], context: int | None = None) -> None:
        """``context``: refuse (`TextTooLong`) a text whose length proves it has that many tokens
        or more, before tokenizing it (`limited`)."""
        self._tok, self._config = backend, config
        self.info = TokenizerInfo(
            vocab_size=int(backend.get_vocab_size(with_added_tokens=True)),
            bos_token=_token_text(config.get("bos_token")),
            eos_token=_token_text(config.get("eos_token")),
            chat_template=config.get("chat_template") or None,
        )
        named = {k: _token_text(config.get(k)) for k in _NAMED_SPECIALS}
        self.chat = ChatTemplate(self.info.chat_template, self.info.bos_token, self.info.eos_token, named)
        added = backend.get_added_tokens_decoder()
        self._added = {i: t.content for i, t in added.items()}
        decoder = backend.decoder
        self._byte_level = decoder is not None and b'"ByteLevel"' in decoder.__getstate__()
        # each token's text on its own, as decoded so far: pure, at most one entry per token id,
        # and read by every echoed prompt and every top-logprob key (a dict is safe across threads)
        self._texts: dict[int, str] = {}
        self._bound = token_bound(backend)  # None: no sound bound for this pipeline
        self._context = context  # a text must have no more tokens than this (None: any length)

    def limited(self, context: int) -> TextTokenizer:
        """This tokenizer, refusing with `TextTooLong`, before tokenizing it, a text that its length
        proves has more than ``context`` tokens (the model's context: no such prompt can run; one
        that fills it may, generating nothing). A text the bound cannot judge is tokenized as before."""
        return TextTokenizer(self._tok, self._config, context)

    def min_tokens(self, text: str) -> int:
        """A lower bound on ``len(encode(text))``, from the text's length alone (0: no bound). Pure."""
        if self._bound is None:
            return 0
        return self._bound.over(text, 0) or 0

    @classmethod
    def load(cls, model_dir: str | Path) -> TextTokenizer:
        """The tokenizer of a model directory; `TokenizerError` when it has none or it is broken."""
        from tokenizers import Tokenizer

        root = Path(model_dir)
        path = root / "tokenizer.json"
        if not path.is_file():
            raise TokenizerError(f"{root} has no tokenizer.json: text prompts need the model's tokenizer")
        try:
            backend = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises its own exception type for a broken file
            raise TokenizerError(f"cannot read {path}: {e}") from None
        return cls(backend, _read_config(root))

    def largest_id(self) -> int | None:
        """The largest token id this tokenizer can produce, added tokens included (None: no tokens)."""
        return max(self._tok.get_vocab(with_added_tokens=True).values(), default=None)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; special tokens written in it (``<|im_start|>``) become their ids.

        Raises `TokenizerError` for text with no UTF-8 form (a lone UTF-16 surrogate), and
        `TextTooLong` from a `limited` tokenizer."""
        _check_unicode(text)
        if self._context is not None and self._bound is not None:
            least = self._bound.over(text, self._context)
            if least is not None:
                raise TextTooLong(
                    Problem("prompt", f"has at least {least} tokens; the model context is {self._context}")
                )
        if len(text) < _LONG:
            return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)
        return list(self._tok.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids)

    def decode(self, ids: list[int] | tuple[int, ...], skip_special_tokens: bool = False) -> str:
        if len(ids) < _LONG:
            return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return self._tok.decode_batch([list(ids)], skip_special_tokens=skip_special_tokens)[0]

    def decode_each(self, ids: Sequence[int], skip_special_tokens: bool = False) -> list[str]:
        if skip_special_tokens:
            return self._tok.decode_batch([[t] for t in ids], skip_special_tokens=True)
        texts = self._texts
        missing = list({t for t in ids if t not in texts})
        if missing:
            # skip_special_tokens given: the backend's batch decode skips them by default
            alone = self._tok.decode_batch([[t] for t in missing], skip_special_tokens=False)
            texts.update(zip(missing, alone, strict=True))
        return [texts[t] for t in ids]

    def token_text(self, token: int) -> str:
        """One token on its own (a partial UTF-8 character shows as U+FFFD); for top-logprob keys."""
        text = self._texts.get(token)
        if text is None:
            text = self._texts[token] = self._tok.decode([token], skip_special_tokens=False)
        return text

    def token_bytes(self, token: int) -> bytes:
        """The token's own bytes (OpenAI's logprob ``bytes``): a token holding part of a UTF-8
        character gives those raw bytes, where its text shows only U+FFFD."""
        if token in self._added:
            return self._added[token].encode("utf-8")
        piece = self._tok.id_to_token(token)
        if piece is None:
            return self.token_text(token).encode("utf-8")
        if self._byte_level:  # GPT-2 style: each byte is spelled as one printable character
            try:
                return bytes(_BYTE_OF_CHAR[c] for c in piece)
            except KeyError:
                return self.token_text(token).encode("utf-8")
        fallback = _BYTE_PIECE.fullmatch(piece)  # sentencepiece byte fallback: "<0xE2>"
        if fallback is not None:
            return bytes([int(fallback.group(1), 16)])
        return piece.replace("\u2581", " ").encode("utf-8")  # sentencepiece's word-start mark is a space


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: printable bytes stand for themselves, the
    rest for the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    others = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + i): b for i, b in enumerate(others)})
    return table


_BYTE_OF_CHAR = _byte_level_alphabet()
# transformers' named special tokens besides bos and eos (SPECIAL_TOKENS_ATTRIBUTES): a chat
# template sees each one the tokenizer config sets
_NAMED_SPECIALS = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
# Past this many characters (encode) or tokens (decode) the tokenizer is called through its batch
# API, which releases the GIL while it works (the server's event loop keeps running); same result.
_LONG = 2048


NOT_UNICODE = "which is not valid Unicode"


def _check_unicode(text: str) -> None:
    said = unicode_problem(text)
    if said is not None:
        raise TokenizerError(said)


def unicode_problem(text: str) -> str | None:
    """Why ``text`` has no UTF-8 form (a lone UTF-16 surrogate), or None where it has one."""
    if text.isascii():  # a flag CPython keeps: no pass over a long prompt (on a thread holding the GIL)
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start]
        return f"text contains a lone UTF-16 surrogate ({bad!r} at character {e.start}), " + NOT_UNICODE
    return None


def _read_config(root: Path) -> dict[str, Any]:
    """The tokenizer's settings as transformers gathers them: tokenizer_config.json (if any), an
    older save's special_tokens_map.json over it, and a chat_template.jinja over its template."""
    path = origin = root / "tokenizer_config.json"
    config = _json_object(path)
    if "added_tokens_decoder" not in config:  # an older save: transformers reads this file over it
        names = ("bos_token", "eos_token", *_NAMED_SPECIALS)
        found = _json_object(root / "special_tokens_map.json")
        config = {**config, **{k: v for k, v in found.items() if k in names}}
    template = root / "chat_template.jinja"  # newer checkpoints keep it beside the config; it wins
    if template.is_file():
        try:
            config["chat_template"], origin = template.read_text(encoding="utf-8"), template
        except (OSError, UnicodeDecodeError) as e:
            raise TokenizerError(f"cannot read {template}: {e}") from None
    if isinstance(config.get("chat_template"), list):  # named templates: use the default one
        named = {t.get("name"): t.get("template") for t in config["chat_template"] if isinstance(t, dict)}
        config["chat_template"] = named.get("default")
    found = config.get("chat_template")
    if found is not None and not isinstance(found, str):  # refused now, not as a TypeError at the first chat
        raise TokenizerError(f"{path}: chat_template must be a string, got {type(found).__name__}")
    problem = compile_problem(found) if found is not None else None
    if problem is not None:  # refused now, not as every chat request's 400 blaming its messages
        raise TokenizerError(f"{origin}: chat_template does not compile ({problem})")
    return config


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (empty when there is no such file); `TokenizerError` if broken."""
    if not path.is_file():
        return {}
    try:
        found = json_value(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # not UTF-8, not JSON, 4300+ digit ints, nesting
        raise TokenizerError(f"cannot read {path}: {e}") from None
    if not isinstance(found, dict):
        raise TokenizerError(f"{path} does not hold a JSON object")
    return found


def _token_text(value: Any) -> str | None:
    """Special tokens are written either as a string or as an AddedToken dict with "content"."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
