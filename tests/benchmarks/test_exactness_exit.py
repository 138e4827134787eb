"""benchmarks/choices.py and score_many.py: a failed exactness check is a failed run."""

from __future__ import annotations

import json
import sys

import pytest
from benchmark_utils import load_benchmark


@pytest.mark.parametrize(
    ("script", "check", "key"),
    [("choices", "same_choices", "same"), ("score_many", "close", "same_scores")],
)
def test_a_run_whose_outputs_differ_exits_nonzero_with_its_figures_written(
    script, check, key, zoo, tmp_path, monkeypatch
):
    # both printed "... : False" and exited 0: a full-size run a user reads only by its exit status
    # (or a script that chains it) passed with outputs that differ
    bench = load_benchmark(script)
    monkeypatch.setattr(bench, check, lambda *args, **kwargs: False)
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", [f"{script}.py", "--smoke", "--json", str(out)])
    with pytest.raises(SystemExit) as done:
        bench.main()
    assert done.value.code not in (0, None) and "differ" in str(done.value.code)
    assert json.loads(out.read_text())[key] is False
