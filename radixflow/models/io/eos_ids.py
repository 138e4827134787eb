"""A checkpoint's end-of-sequence token ids, from its config.json, generation_config.json and
tokenizer files (what ends generation, as vLLM reads them)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from radixflow.jsonl import json_value


def eos_token_ids(path: str | Path, config: Mapping[str, Any]) -> tuple[int, ...]:
    """End-of-sequence ids: ``eos_token_id`` (an int or a list) of config.json and, where the
    checkpoint has one, of generation_config.json (chat models list their turn end there), and the
    tokenizer's ``eos_token`` (vLLM's main end: a chat fine-tune's "<|im_end|>" where config.json
    still names its base model's). An id outside the vocabulary is left out: no such token is ever
    sampled, so it ends nothing, and the sampler indexes the logits with the end ids it holds back
    (``min_tokens``)."""
    ids = _as_ids(config.get("eos_token_id"))
    gen = Path(path) / "generation_config.json"
    if gen.is_file():
        # an unreadable generation config (no permission, garbled JSON, nested past the parser:
        # `json_value`'s ValueError) only loses its extra stop ids
        with contextlib.suppress(OSError, ValueError, AttributeError):
            ids += _as_ids(json_value(gen.read_text(encoding="utf-8")).get("eos_token_id"))
    # unreadable tokenizer files lose only this id (the tokenizer's own loading says why)
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
        ids += _tokenizer_eos(Path(path))
    vocab = config.get("vocab_size")
    return tuple(i for i in dict.fromkeys(ids) if not isinstance(vocab, int) or i < vocab)


def _tokenizer_eos(path: Path) -> tuple[int, ...]:
    """The id of tokenizer_config.json's ``eos_token`` (a string or an AddedToken's dict) in
    tokenizer.json: an added token's, or the model vocabulary's; none when either file is missing
    or the token is in neither."""
    config, tokenizer = path / "tokenizer_config.json", path / "tokenizer.json"
    if not (config.is_file() and tokenizer.is_file()):
        return ()
    eos = json_value(config.read_text(encoding="utf-8")).get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    if not isinstance(eos, str):
        return ()
    spec = json_value(tokenizer.read_text(encoding="utf-8"))
    added = {t.get("content"): t.get("id") for t in spec.get("added_tokens") or ()}
    vocab = (spec.get("model") or {}).get("vocab")
    found = added.get(eos, vocab.get(eos) if isinstance(vocab, dict) else None)
    return _as_ids(found)


def _as_ids(value: object) -> tuple[int, ...]:
    values = value if isinstance(value, list) else [value]
    return tuple(v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0)
