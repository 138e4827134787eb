"""benchmarks/choices.py: what it reads its modes against."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def choices():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("choices")


def test_each_mode_is_read_against_n_trial_by_trial(choices, capsys):
    # only the ratio of medians was printed: no paired ratio, no spread to read it against
    seconds = {"n": [1.0, 2.0], "calls": [1.5, 2.2], "prompts": [3.0, 4.0]}
    rows = choices.figures(seconds)
    assert rows["calls"]["ratio_to_n"] == pytest.approx(1.85 / 1.5) and rows["calls"]["runs"] == [1.5, 2.2]
    args = SimpleNamespace(model="m", n=3, context_len=4, gen_tokens=2, repeat=2)
    choices.report(args, rows, seconds, ((0.5, 0, 0), (0.7, 0, 0)), True)
    out = capsys.readouterr().out
    assert "CPU time against n, trial by trial" in out
    assert "calls: +10.0% to +50.0%, median +30.0% over 2 trials" in out


def test_every_mode_is_warmed_up_not_only_n(choices, monkeypatch):
    # only `n` ran before the timed repeats: the first `prompts` run (n prompts packed, another
    # shape) paid its one-time costs (kernel plans, the allocator) in the figures
    ran: list[str] = []
    monkeypatch.setattr(choices, "LLM", lambda *args, **kwargs: None)
    monkeypatch.setattr(choices, "runs", lambda *args: {m: lambda m=m: ran.append(m) for m in choices.MODES})
    monkeypatch.setattr(choices, "same_choices", lambda *args: True)
    monkeypatch.setattr("sys.argv", ["choices.py", "--smoke"])
    choices.main()
    assert ran == [*choices.MODES, *choices.MODES]  # the warm-up, then the one timed repeat
