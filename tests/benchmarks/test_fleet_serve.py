"""benchmarks/fleet_serve.py: its flags are checked before any server starts."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def fleet_serve():
    pytest.importorskip("openai")
    pytest.importorskip("httpx")
    return load_benchmark("fleet_serve")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--routers", "pow2,round_robin"], "--routers: unknown router 'round_robin'"),
        (["--replicas", "1"], "--replicas: a fleet needs at least 2"),
        # --clients 0 sent nothing, lost nothing, and passed: "0/256 answered, 0 lost", exit 0
        (["--clients", "0"], "argument --clients: must be positive, got 0"),
        (["--groups", "0"], "argument --groups: must be positive, got 0"),
        (["--candidates", "0"], "argument --candidates: must be positive, got 0"),
        # token ids are drawn from 4 (past the special ids) to below --vocab: 4 was a ValueError
        # traceback (empty range for randrange), a negative length a shorter prompt than asked
        (["--vocab", "4"], "argument --vocab: must be at least 5, got 4"),
        (["--context", "-1"], "argument --context: must be >= 0, got -1"),
        (["--candidate", "-3"], "argument --candidate: must be >= 0, got -3"),
        (["--context", "0", "--candidate", "0"], "--context, --candidate: a prompt needs a token"),
        (["--start-timeout", "nan"], "argument --start-timeout"),
    ],
)
def test_a_bad_flag_is_one_line_before_any_server_starts(fleet_serve, monkeypatch, capsys, argv, needle):
    # an unknown router was a RuntimeError traceback once its server had refused it (after the
    # routers before it had run); one replica (no Ray, no /fleet) a KeyError after the traffic
    def no_server(*_):
        raise AssertionError("a server was started")

    monkeypatch.setattr(fleet_serve, "one_router", no_server)
    monkeypatch.setattr(sys, "argv", ["fleet_serve.py", *argv])
    with pytest.raises(SystemExit) as e:
        fleet_serve.main()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert needle in err[-1] and "Traceback" not in "".join(err)


def test_a_run_with_no_answer_has_no_mean_latency(fleet_serve, monkeypatch):
    # every request lost read "mean latency 0 ms": a latency no request had
    async def refused(*_):
        raise ConnectionError("refused")

    monkeypatch.setattr(fleet_serve, "one", refused)
    run = fleet_serve.RouterRun("pow2")
    fleet_serve.asyncio.run(fleet_serve.drive(1, "m", [[5, 6], [7, 8]], 2, run))
    assert (run.answered, run.lost, run.mean_latency_s) == (0, 2, None)


@pytest.mark.parametrize("exit_code, passed", [(130, 0), (1, 1), (None, 1)])
def test_a_server_that_does_not_exit_as_a_ctrl_c_says_fails_the_run(
    fleet_serve, monkeypatch, tmp_path, exit_code, passed
):
    # every request answered and drained, no Ray process left: the run passed whatever status the
    # server ended with after its Ctrl-C (a traceback's 1, or none: killed once it did not exit)
    def one_router(args, router, prompts):
        run = fleet_serve.RouterRun(router, requests=4, answered=4, drain_answered=2, drain_sent=2)
        run.exit_code, run.ray_processes_left = exit_code, 0
        return run

    monkeypatch.setattr(fleet_serve, "one_router", one_router)
    argv = ["fleet_serve.py", "--routers", "pow2", "--json", str(tmp_path / "out.json")]
    monkeypatch.setattr(sys, "argv", argv)
    assert fleet_serve.main() == passed


def test_a_server_that_never_gets_ready_leaves_no_ray_directory_behind(fleet_serve, monkeypatch, tmp_path):
    # the run's Ray session directory was removed only after a run that started: a server that
    # exited or timed out before it was ready left its rf-ray-* directory in /tmp, one per try
    ray_dir = tmp_path / "rf-ray-x"

    def mkdtemp(**_):
        ray_dir.mkdir()
        return str(ray_dir)

    def never_ready(*_):
        raise RuntimeError("the server exited with 1 before it was ready")

    monkeypatch.setattr(fleet_serve.tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(fleet_serve, "started", never_ready)
    args = SimpleNamespace(log_dir=str(tmp_path / "logs"))
    with pytest.raises(RuntimeError, match="before it was ready"):
        fleet_serve.one_router(args, "pow2", [[5, 6]])
    assert not ray_dir.exists()
