"""The JSON the docs describe key by key is what the commands write: `radixflow cost --json`'s
shape in docs/cost-model.md and the `run` block of every `--json` (`bench`'s and each benchmark
script's) in docs/usage.md. A key the code gains (`cost`'s `fits`, the run's `dirty`) and the
page leaves out is one a reader of the file has to guess at; these catch it."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from radixflow.bench.provenance import Machine, Provenance
from radixflow.cli import main

ROOT = Path(__file__).resolve().parent.parent
_COST_SHAPE = re.compile(r"`--json`: `(\{.*?\})`")
_RUN_SENTENCE = re.compile(
    r"`--json PATH` \(its `run` says what produced the figures: (.*?); its `config`", re.S
)


def _keys_by_depth(shape: str) -> dict[int, set[str]]:
    """The quoted keys of a shape written as the docs write it (`{"a", "b": {name: {"c"}}}`),
    by the depth of braces they are at."""
    keys: dict[int, set[str]] = {}
    depth = 0
    for token in re.findall(r'[{}]|"\w+"', shape):
        if token in "{}":
            depth += 1 if token == "{" else -1
        else:
            keys.setdefault(depth, set()).add(token.strip('"'))
    return keys


def _cost_shape_said() -> dict[int, set[str]]:
    found = _COST_SHAPE.search((ROOT / "docs" / "cost-model.md").read_text())
    assert found, "cost-model.md's shape of `radixflow cost --json`"
    return _keys_by_depth(found.group(1))


def test_cost_model_gives_every_key_cost_json_writes_and_only_those(capsys: pytest.CaptureFixture[str]):
    assert main(["cost", "qwen3_5-2b", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    terms = {key for term in report["terms"].values() for key in term}
    assert _cost_shape_said() == {1: set(report), 3: terms}


def test_a_cost_key_the_shape_leaves_out_is_caught():
    said = _keys_by_depth('{"seconds", "tp", "terms": {name: {"seconds", "flops"}}}')
    assert said == {1: {"seconds", "tp", "terms"}, 3: {"seconds", "flops"}}


def _run_sentence() -> str:
    found = _RUN_SENTENCE.search((ROOT / "docs" / "usage.md").read_text())
    assert found, "usage.md's sentence on `--json`'s `run`"
    return " ".join(found.group(1).split())


def _run_keys_missing(sentence: str) -> list[str]:
    """The keys of the `run` block (`Provenance.to_json`) the sentence does not quote, and the
    machine's fields it does not name (as `avx512` or as words: "CPU model", "platform")."""
    quoted = set(re.findall(r"`(\w+)`", sentence))
    top = ["format", *(f.name for f in dataclasses.fields(Provenance))]
    words = sentence.lower().replace("`", "")
    machine = [f.name for f in dataclasses.fields(Machine)]
    return [k for k in top if k not in quoted] + [f for f in machine if not re.search(rf"\b{f}\b", words)]


def test_usage_names_every_key_of_the_run_block_every_json_carries():
    sentence = _run_sentence()
    assert "`dirty`" in sentence
    assert _run_keys_missing(sentence) == []


def test_a_run_key_the_sentence_leaves_out_is_caught():
    sentence = _run_sentence().replace("`dirty`", "whether it was dirty").replace("platform", "OS")
    assert _run_keys_missing(sentence) == ["dirty", "platform"]
