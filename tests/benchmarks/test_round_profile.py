"""benchmarks/round_profile.py: the counts it refuses before any model is built."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def bench():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("round_profile")


@pytest.mark.parametrize("flag", ["--repeats", "--threads"])
def test_a_count_below_one_is_one_line_before_any_model_is_built(bench, monkeypatch, capsys, flag):
    # --repeats 0 built every model, then died on the median of no time (or an unbound result);
    # --threads 0 was torch.set_num_threads' RuntimeError traceback
    def no_model(*args: object) -> None:
        raise AssertionError("a model was built")

    monkeypatch.setattr(bench, "bench", no_model)
    monkeypatch.setattr("sys.argv", ["round_profile.py", flag, "0"])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2
    assert f"argument {flag}: must be positive, got 0" in capsys.readouterr().err


def test_the_commit_is_provenances_and_no_git_is_no_traceback(bench, monkeypatch, tmp_path):
    # its own `commit()` ran git with no timeout and no guard: where git is not installed, a
    # FileNotFoundError traceback after every round was measured; beside it `run.commit`
    # (`provenance.git_commit`) said the same thing its own way
    monkeypatch.setattr(
        bench, "bench", lambda kind, model, args: {"model": model, "matmul_plan": "x", "rounds": []}
    )
    monkeypatch.setattr(bench.torch, "set_num_threads", lambda n: None)
    out = tmp_path / "p.json"
    monkeypatch.setattr("sys.argv", ["round_profile.py", "--smoke", "--json", str(out)])
    monkeypatch.setenv("PATH", str(tmp_path))  # no git here
    bench.main()
    figures = json.loads(out.read_text())
    assert figures["commit"] == "unknown" and figures["run"]["commit"] is None


def test_the_rounds_take_turns_first_repeat_by_repeat(bench, monkeypatch):
    # every repeat ran the decode rounds, then the prefill, in one fixed order: drift between
    # them fell on the same round each time
    ran: list[str] = []
    runner = SimpleNamespace(matmul=None)
    monkeypatch.setattr(bench, "ensure_model", lambda model: model)
    monkeypatch.setattr(bench, "TorchRunner", lambda *args, **kwargs: runner)
    monkeypatch.setattr(bench, "resolve_kernels", lambda *args: SimpleNamespace(name="torch"))
    monkeypatch.setattr(bench, "decode_round", lambda r, b, c, k: lambda: ran.append(f"decode {b}"))
    monkeypatch.setattr(bench, "prefill_round", lambda r, lengths, k: lambda: ran.append("prefill"))
    monkeypatch.setattr(bench, "top_non_gemm", lambda run: [])
    args = SimpleNamespace(matmul="auto", batches=[2], context=8, lengths=[4], repeats=2, kernels=["torch"])
    bench.bench("deltanet", "m", args)
    timed = ran[4:]  # each round run twice first: the warm-up, then its GEMMs recorded
    assert timed == ["decode 2", "prefill", "prefill", "decode 2"]
