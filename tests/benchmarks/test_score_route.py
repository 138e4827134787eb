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
    monkeypatch.setattr(route, "load", lambda: [float(next(readings))] * 3)
    proc = SimpleNamespace(pid=0, terminate=lambda: None, wait=lambda: None)
    monkeypatch.setattr(route, "serve_process", lambda *args: (proc, "http://fake"))
    monkeypatch.setattr(route, "cpu_seconds", lambda pid: 0.0)
    monkeypatch.setattr(route.httpx, "Client", FakeHttp)
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["score_route.py", "--smoke", "--json", str(out)])
    route.main()
    before, after = json.loads(out.read_text())["load"]
    assert f"load before {before}, after {after}" in capsys.readouterr().out
