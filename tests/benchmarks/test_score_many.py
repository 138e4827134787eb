"""benchmarks/score_many.py: what it reads its modes against."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def many():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("score_many")


class FakeLLM:
    """Every candidate token's logprob -1.0, whichever way it is asked."""

    def __init__(self, model: str, torch_threads: int) -> None:
        pass

    def score(self, context: list[int], candidates: list[list[int]]) -> list[SimpleNamespace]:
        return [SimpleNamespace(logprobs=(-1.0,) * len(c)) for c in candidates]

    def score_many(self, contexts: list, candidates: list) -> list[list[SimpleNamespace]]:
        return [self.score(c, k) for c, k in zip(contexts, candidates, strict=True)]


def test_each_mode_is_read_against_many_trial_by_trial(many, monkeypatch, capsys):
    # only the ratio of medians was printed: no paired ratio, no spread to read it against
    monkeypatch.setattr(many, "LLM", FakeLLM)
    shape = {"contexts": 2, "candidates": 2, "context_len": 4, "candidate_len": 2, "torch_threads": 1}
    args = SimpleNamespace(model="m", repeat=2, seed=0, vocab=50, atol=0.0, **shape)
    result = many.measure(args)
    result["load_before_after"] = [(0.5, 0.25, 0.0), None]  # None: a platform with no load average
    many.report(args, result)
    out = capsys.readouterr().out
    assert "wall time against many, trial by trial" in out and "  per_context: " in out
    assert "CPU time against many, trial by trial" in out and "load 0.50 0.25 0.00 before, n/a after" in out
    walls = result["modes"]["per_context"]["wall_runs_s"]  # the pairs, beside the medians
    assert len(walls) == 2 and result["modes"]["per_context"]["wall_s"] == pytest.approx(sum(walls) / 2)
