"""benchmarks/per_candidate.py: the per-mode figures over repeats."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def candidates():
    return load_benchmark("per_candidate")


def _calls() -> dict:
    answer = lambda prompts: [((1,), ()) for _ in prompts]  # noqa: E731
    return {"batch": answer, "sequential": answer}


def test_a_batch_that_took_no_measurable_cpu_has_no_cpu_ratio(candidates):
    # the server's CPU is read in 10 ms ticks: a small batch reads 0, and its ratio was NaN,
    # written to the JSON as `NaN` (not JSON)
    shape = candidates.Shape(2, 4, 2, 1, 50)
    figures = candidates.measure(_calls(), shape, 2, lambda: 0.0, 1e-4, 0)
    assert figures["sequential"].cpu_ratio is None and figures["sequential"].wall_ratio is not None
    json.dumps({m: candidates.asdict(f) for m, f in figures.items()}, allow_nan=False)


def test_each_mode_is_read_against_the_batch_trial_by_trial(candidates, capsys):
    # only the ratio of medians was printed: no paired ratio, no spread to read it against
    shape = candidates.Shape(2, 4, 2, 1, 50)
    clock = iter(range(100))
    figures = candidates.measure(_calls(), shape, 2, lambda: float(next(clock)), 1e-4, 0)
    assert figures["sequential"].cpu_runs_s == [1.0, 1.0] and len(figures["sequential"].wall_runs_s) == 2
    candidates.print_paired("m llm one", figures)
    out = capsys.readouterr().out
    assert "m llm one: CPU time against batch, trial by trial" in out
    assert "sequential: +0.0% to +0.0%, median +0.0% over 2 trials; the range spans 0" in out


def test_every_mode_of_every_kind_is_warmed_up_on_prompts_of_its_own(candidates, monkeypatch):
    # only the first kind's batch ran before the timed repeats: the first gen batch, and the
    # first one-by-one call, paid their one-time costs (kernel plans per shape) in the figures
    seen: list[tuple[str, str, tuple]] = []

    def calls(llm, kind, gen_tokens):  # type: ignore[no-untyped-def]
        return {m: lambda p, k=kind, m=m: seen.append((k, m, tuple(map(tuple, p)))) for m in ("batch", "one")}

    monkeypatch.setattr(candidates, "LLM", lambda *args, **kwargs: None)
    monkeypatch.setattr(candidates, "llm_calls", calls)
    monkeypatch.setattr(candidates, "measure", lambda *args: seen.append(("measured", "", ())) or {})
    args = SimpleNamespace(torch_threads=1, kinds=["score", "gen"], repeat=1, atol=0.0, seed=0)
    candidates.run_llm("m", candidates.Shape(2, 4, 2, 1, 50), args)
    warmed = [(k, m) for k, m, _ in seen[:4]]
    assert warmed == [("score", "batch"), ("score", "one"), ("gen", "batch"), ("gen", "one")]
    assert len({p for _, _, p in seen[:4]}) == 4  # each its own prompts: none served from the cache
    assert seen[4][0] == "measured"
