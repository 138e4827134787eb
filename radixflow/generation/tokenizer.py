"""A model's tokenizer as the generation layer uses it: text <-> token ids, token strings, chat.

Loaded from the model directory (``tokenizer.json`` plus ``tokenizer_config.json``, as the zoo and
Hugging Face checkpoints lay them out). One encoding is used everywhere (`encode`): the offline
API, ``/v1/completions`` and ``/tokenize`` cannot disagree on where a prompt's tokens fall.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radixflow.generation.chat import ChatTemplate


class TokenizerError(ValueError):
    """The model directory has no usable tokenizer (a one-line reason)."""


@dataclass(frozen=True)
class TokenizerInfo:
    """What ``/tokenizer_info`` reports (and the special tokens the chat template sees)."""

    vocab_size: int
    bos_token: str | None
    eos_token: str | None
    chat_template: str | None


class TextTokenizer:
    def __init__(self, backend: Any, config: dict[str, Any]) -> None:
        self._tok = backend
        self.info = TokenizerInfo(
            vocab_size=int(backend.get_vocab_size(with_added_tokens=True)),
            bos_token=_token_text(config.get("bos_token")),
            eos_token=_token_text(config.get("eos_token")),
            chat_template=config.get("chat_template") or None,
        )
        self.chat = ChatTemplate(self.info.chat_template, self.info.bos_token, self.info.eos_token)
        added = backend.get_added_tokens_decoder()
        self._special = frozenset(i for i, t in added.items() if t.special)

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

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; special tokens written in it (``<|im_start|>``) become their ids."""
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int] | tuple[int, ...], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def decode_each(self, ids: list[int] | tuple[int, ...], skip_special_tokens: bool = False) -> list[str]:
        return self._tok.decode_batch([[t] for t in ids], skip_special_tokens=skip_special_tokens)

    def token_text(self, token: int) -> str:
        """One token on its own (a partial UTF-8 character shows as U+FFFD); for top-logprob keys."""
        return self._tok.decode([token], skip_special_tokens=False)

    def is_special(self, token: int) -> bool:
        return token in self._special

    def special_id(self, text: str | None) -> int | None:
        return None if text is None else self._tok.token_to_id(text)


def _read_config(root: Path) -> dict[str, Any]:
    path = root / "tokenizer_config.json"
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenizerError(f"cannot read {path}: {e}") from None
    if not isinstance(config, dict):
        raise TokenizerError(f"{path} does not hold a JSON object")
    template = root / "chat_template.jinja"  # newer Hugging Face checkpoints keep it beside the config
    if not config.get("chat_template") and template.is_file():
        config["chat_template"] = template.read_text(encoding="utf-8")
    if isinstance(config.get("chat_template"), list):  # named templates: use the default one
        named = {t.get("name"): t.get("template") for t in config["chat_template"] if isinstance(t, dict)}
        config["chat_template"] = named.get("default")
    return config


def _token_text(value: Any) -> str | None:
    """Special tokens are written either as a string or as an AddedToken dict with "content"."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
