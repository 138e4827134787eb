"""The predictor's rounds log (`--rounds-out`): one labelled JSON line per round the runner's
predictor learns from, and a log that cannot be written never failing the rounds themselves."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from radixflow.bench.round_log import RoundLog


class Predictor:
    def __init__(self) -> None:
        self.seen: list[tuple[list[float], float]] = []
        self.fit = SimpleNamespace(predict=lambda features: 2 * sum(features))

    def observe(self, features: list[float], seconds: float) -> None:
        self.seen.append((features, seconds))


def test_every_round_is_a_labelled_line(tmp_path: Path):
    predictor = Predictor()
    log = RoundLog(tmp_path / "r.jsonl", {"family": "f", "repeat": 0})
    log.attach(SimpleNamespace(round_predictor=predictor))
    predictor.observe([1.0, 2.0], 0.5)
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert rows == [{"family": "f", "repeat": 0, "features": [1.0, 2.0], "seconds": 0.5, "predicted": 6.0}]
    assert predictor.seen == [([1.0, 2.0], 0.5)]


def test_a_path_that_cannot_be_written_is_refused_when_attached_before_any_round(tmp_path: Path):
    # it was found at the first round's write, inside the runner's worker call: every round
    # failed as a worker call that raised, and the benchmark ended in a ZeroDivisionError
    log = RoundLog(tmp_path / "missing" / "r.jsonl")
    with pytest.raises(OSError):
        log.attach(SimpleNamespace(round_predictor=Predictor()))


def test_a_write_that_fails_mid_run_stops_the_log_not_the_round(tmp_path: Path):
    predictor = Predictor()
    path = tmp_path / "r.jsonl"
    log = RoundLog(path)
    log.attach(SimpleNamespace(round_predictor=predictor))
    path.unlink()
    path.mkdir()  # the next append fails, as on a full disk
    predictor.observe([1.0], 0.25)  # called inside the worker call: it must not raise
    assert predictor.seen == [([1.0], 0.25)]
    assert log.error is not None and str(path) in log.error
