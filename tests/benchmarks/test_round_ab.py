"""benchmarks/round_ab.py: the two versions' order, the repeats it refuses, its temporary package."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from benchmark_utils import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def ab():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("round_ab")


def _logged(log: list[str], pkg: str):
    def run() -> torch.Tensor:
        log.append(pkg)
        return torch.zeros(1)

    return run


def test_the_two_versions_alternate_which_runs_first(ab):
    # base always ran first: a machine that slows within a repeat skewed every repeat one way
    log: list[str] = []
    runs = {pkg: _logged(log, pkg) for pkg in ("radixflow_base", "radixflow")}
    ab.compare("decode 2", runs, 4)
    timed = log[2:]  # after the one untimed call of each
    firsts = [timed[i] for i in range(0, len(timed), 2)]
    assert firsts.count("radixflow_base") == firsts.count("radixflow") == 2


def test_zero_repeats_is_refused_before_anything_is_built(ab, monkeypatch, capsys):
    # --repeats 0 built both models, then raised StatisticsError on the median of no time
    def no_copy(*args: object) -> None:
        raise AssertionError("the base package was copied")

    monkeypatch.setattr(ab, "base_package", no_copy)
    monkeypatch.setattr("sys.argv", ["round_ab.py", "--repeats", "0"])
    with pytest.raises(SystemExit) as exc:
        ab.main()
    assert exc.value.code == 2 and "argument --repeats: must be positive, got 0" in capsys.readouterr().err


def test_the_temporary_package_is_removed_when_a_run_fails(ab, monkeypatch, tmp_path):
    # a run that raised left /tmp/round_ab_* (a whole radixflow copy) behind, and on sys.path
    made = tmp_path / "round_ab_x"
    monkeypatch.setattr(ab.tempfile, "mkdtemp", lambda prefix: (made.mkdir(), str(made))[1])
    monkeypatch.setattr(ab, "base_package", lambda base, into: (into / "radixflow_base").mkdir())

    def broken(pkg: str, model: str) -> None:
        raise RuntimeError("model failed to build")

    monkeypatch.setattr(ab, "side", broken)
    monkeypatch.setattr("sys.argv", ["round_ab.py", "--smoke"])
    with pytest.raises(RuntimeError, match="model failed to build"):
        ab.main()
    assert not made.exists()
    assert str(made) not in ab.sys.path


def test_a_base_without_a_radixflow_package_is_one_line(ab, monkeypatch, capsys, tmp_path):
    # a --base that is not a checkout (the archive's parent, a typo) was copytree's traceback
    monkeypatch.setattr("sys.argv", ["round_ab.py", "--base", str(tmp_path), "--smoke"])
    with pytest.raises(SystemExit) as exc:
        ab.main()
    assert exc.value.code == 2
    assert f"--base: {tmp_path} has no radixflow package" in capsys.readouterr().err


def test_the_ratio_is_also_paired_repeat_by_repeat_with_its_median_and_range(ab, monkeypatch, capsys):
    # only the ratios of two medians and of two minima, maybe of different repeats: nothing paired,
    # no spread to read new/base against
    log: list[str] = []
    runs = {pkg: _logged(log, pkg) for pkg in ("radixflow_base", "radixflow")}
    clock = iter([0.0, 1.0, 0.0, 2.0, 0.0, 3.0, 0.0, 2.0])  # base 1, new 2; then new 3, base 2
    monkeypatch.setattr(ab, "time", SimpleNamespace(thread_time=lambda: next(clock)))
    row = ab.compare("decode 2", runs, 2)
    assert row["ratio_median"] == pytest.approx(2.5 / 1.5)  # of the medians, as before
    assert row["ratio_runs"] == [2.0, 1.5] and row["ratio_paired_median"] == 1.75
    ab.print_paired("m", row)
    out = capsys.readouterr().out
    assert "m decode 2: CPU time against base, trial by trial" in out
    assert "new: +50.0% to +100.0%, median +75.0% over 2 trials" in out
