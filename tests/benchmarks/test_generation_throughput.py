"""benchmarks/generation_throughput.py: the counts it refuses before any model is built."""

from __future__ import annotations

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def bench():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("generation_throughput")


@pytest.mark.parametrize("flag", ["--repeats", "--threads"])
def test_a_count_below_one_is_one_line_before_any_model_is_built(bench, monkeypatch, capsys, flag):
    # --repeats 0 built every model, then died on the median of no time (or an unbound result);
    # --threads 0 was torch.set_num_threads' RuntimeError traceback
    def no_model(*args: object) -> None:
        raise AssertionError("a model was built")

    monkeypatch.setattr(bench, "ensure_model", no_model)
    monkeypatch.setattr("sys.argv", ["generation_throughput.py", flag, "0"])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2
    assert f"argument {flag}: must be positive, got 0" in capsys.readouterr().err
