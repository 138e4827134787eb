"""benchmarks/costmodel_validation.py: held-out error of the measured kernel tables, as JSON."""

from __future__ import annotations

import json

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def validation():
    return load_benchmark("costmodel_validation")


def test_held_out_error_meets_the_acceptance_and_is_written_as_json(validation, tmp_path, capsys):
    out = tmp_path / "validation.json"
    assert validation.main(["--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["accepted"] is True
    for gpu in ("h100", "h200"):
        classes = result["gpus"][gpu]
        assert set(classes) == {
            "gemm",
            "context_attention",
            "generation_attention",
            "gdn",
            "moe",
            "allreduce",
        }
        for name in ("gemm", "context_attention", "generation_attention", "gdn"):
            assert 0 <= classes[name]["median"] <= 0.10 and classes[name]["median"] <= classes[name]["p90"]
            assert classes[name]["n"] > 0 and classes[name]["shapes"]["n"] > 0
    assert "median" in capsys.readouterr().out


def test_holding_out_every_point_is_refused(validation):
    with pytest.raises(SystemExit):
        validation.main(["--k", "1"])


def _strict(text: str) -> object:
    def refuse(name: str) -> None:
        raise AssertionError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_a_class_with_no_held_out_point_is_null_in_strict_json_and_not_accepted(validation, tmp_path, capsys):
    # every 100000th point holds none out: its median was NaN, written as `NaN` (not JSON)
    out = tmp_path / "validation.json"
    assert validation.main(["--k", "100000", "--json", str(out)]) == 1
    result = _strict(out.read_text())
    gemm = result["gpus"]["h100"]["gemm"]
    assert (gemm["median"], gemm["p90"], gemm["n"]) == (None, None, 0)
    assert result["accepted"] is False
    assert "FAIL" in capsys.readouterr().out
