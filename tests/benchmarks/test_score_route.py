"""benchmarks/score_route.py: the load average it prints is the one its JSON holds."""

from __future__ import annotations

import itertools
import json
import sys
from types import SimpleNamespace

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def route():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("score_route")


class FakeHttp:
    """The server's two answers: every candidate's total logprob -1.0 both ways."""

    def __init__(self, **kwargs: object) -> None:
        pass

    def __enter__(self) -> FakeHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def get(self, path: str) -> SimpleNamespace:
        return SimpleNamespace(json=lambda: {"vocab_size": 50})

    def post(self, path: str, json: dict) -> SimpleNamespace:
        if path == "/v1/score":
            body = {"data": [{"total_logprob": -1.0} for _ in json["candidates"]]}
        else:
            context = len(json["prompt"][0]) - 1
            lps = [None] + [0.0] * (context - 1) + [-1.0]
            body = {
                "choices": [
                    {"index": i, "logprobs": {"token_logprobs": lps}} for i in range(len(json["prompt"]))
                ]
            }
        return SimpleNamespace(json=lambda: body, content=b"{}", raise_for_status=lambda: None)


def test_the_load_printed_is_the_load_written(route, monkeypatch, tmp_path, capsys):
    # the load after the run was read once for the printed line and again for the JSON: two
    # readings seconds apart, so the file could hold a load the run never printed
    readings = itertools.count(1)
    monkeypatch.setattr(route, "loads_now", lambda: [next(readings) + 0.125] * 3)
    proc = SimpleNamespace(pid=0, terminate=lambda: None, wait=lambda: None)
    monkeypatch.setattr(route, "serve_process", lambda *args: (proc, "http://fake"))
    monkeypatch.setattr(route, "cpu_seconds", lambda pid: 0.0)
    monkeypatch.setattr(route.httpx, "Client", FakeHttp)
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["score_route.py", "--smoke", "--json", str(out)])
    route.main()
    before, after = json.loads(out.read_text())["load"]
    assert before == [1.125] * 3 and after == [2.125] * 3
    # two decimals, as /proc/loadavg gave them: os.getloadavg's own printed as 6.49169921875
    assert "load before 1.12 1.12 1.12, after 2.12 2.12 2.12" in capsys.readouterr().out


def test_each_way_is_read_against_score_trial_by_trial(route, capsys):
    # only the ratio of medians was printed: no paired ratio, no spread to read it against
    seen = {"score": [(1.0, 0.5, 10), (2.0, 1.0, 10)], "echo": [(1.5, 1.0, 20), (2.2, 1.0, 20)]}
    args = SimpleNamespace(model="m", candidates=2, candidate_len=3, context_len=24, repeat=2)
    figures = route.table(seen, args)
    out = capsys.readouterr().out
    assert "wall time against score, trial by trial" in out
    assert "echo: +10.0% to +50.0%, median +30.0% over 2 trials" in out
    assert "echo: +0.0% to +100.0%, median +50.0% over 2 trials" in out  # the server's CPU
    assert figures["echo"]["wall_runs_s"] == [1.5, 2.2]  # the pairs, beside the medians
    assert figures["echo"]["server_cpu_runs_s"] == [1.0, 1.0]


def test_each_way_is_asked_once_untimed_before_the_timed_repeats(route, monkeypatch):
    # the server's first request paid its one-time costs (kernel plans, allocator): it was the
    # first repeat's `score`, all of it with --repeat 1, one side of the first paired ratio
    asked: list[str] = []

    def ask(http, model, job):  # type: ignore[no-untyped-def]
        asked.append(job[0])
        return [-1.0] * len(job[2]), 999 if job[0].startswith("warm-up") else 10

    monkeypatch.setattr(route, "MODES", {"score": ask, "echo": ask})
    monkeypatch.setattr(route, "cpu_seconds", lambda pid: 0.0)
    args = SimpleNamespace(repeat=2, candidates=2, context_len=4, candidate_len=2, atol=0.0, model="m")
    seen, agree = route.timings(FakeHttp(), 0, args)
    assert asked[:2] == ["warm-up-score", "warm-up-echo"] and len(asked) == 6
    assert all(size == 10 for runs in seen.values() for _, _, size in runs) and agree
    assert len(seen["score"]) == len(seen["echo"]) == 2
