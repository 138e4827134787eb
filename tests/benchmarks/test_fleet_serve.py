"""benchmarks/fleet_serve.py (its servers started by `server.fleet_spawn`, its figures kept by
`bench.router_runs`): its flags are checked before any server starts; the routers' trials are
interleaved and reported as medians with their spread and the machine's load."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
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
        # one `serve --replicas` refuses: a traceback ("the server exited with 2 before it was ready")
        (["--replicas", "1025"], "argument --replicas: must be at most 1024, got 1025"),
        (["--replicas", "two"], "argument --replicas"),
        # --clients 0 sent nothing, lost nothing, and passed: "0/256 answered, 0 lost", exit 0
        (["--clients", "0"], "argument --clients: must be positive, got 0"),
        (["--groups", "0"], "argument --groups: must be positive, got 0"),
        (["--candidates", "0"], "argument --candidates: must be positive, got 0"),
        # token ids are drawn from 4 (past the special ids) to below --vocab: 4 was a ValueError
        # traceback (empty range for randrange), a negative length a shorter prompt than asked
        (["--vocab", "4"], "argument --vocab: must be at least 5, got 4"),
        (["--context", "-1"], "argument --context: must be at least 0, got -1"),
        (["--candidate", "-3"], "argument --candidate: must be at least 0, got -3"),
        (["--context", "0", "--candidate", "0"], "--context, --candidate: a prompt needs a token"),
        (["--start-timeout", "nan"], "argument --start-timeout"),
        (["--repeat", "0"], "argument --repeat: must be positive, got 0"),
        (["--routers", "pow2,checkpoint,pow2"], "--routers: pow2 named twice"),
    ],
)
def test_a_bad_flag_is_one_line_before_any_server_starts(fleet_serve, monkeypatch, capsys, argv, needle):
    # an unknown router was a RuntimeError traceback once its server had refused it (after the
    # routers before it had run); one replica (no Ray, no /fleet) a KeyError after the traffic
    def no_server(*_):
        raise AssertionError("a server was started")

    monkeypatch.setattr(fleet_serve, "fleet_servers", no_server)
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
    _, latency = fleet_serve.asyncio.run(fleet_serve.drive(1, "m", [[5, 6], [7, 8]], 2, run))
    assert (run.answered, run.lost, latency) == (0, 2, None)
    run.trials.append(fleet_serve.Trial(0, 1.0, latency, None, 0.5))
    fleet_serve.summarize(run)
    assert run.mean_latency_s is None


@pytest.mark.parametrize("exit_code, passed", [(130, 0), (1, 1), (None, 1)])
def test_a_server_that_does_not_exit_as_a_ctrl_c_says_fails_the_run(
    fleet_serve, monkeypatch, tmp_path, exit_code, passed
):
    # every request answered and drained, no Ray process left: the run passed whatever status the
    # server ended with after its Ctrl-C (a traceback's 1, or none: killed once it did not exit)
    def run_all(args, routers):
        run = fleet_serve.RouterRun(routers[0], requests=4, answered=4, drain_answered=2, drain_sent=2)
        run.trials.append(fleet_serve.Trial(0, 1.0, 0.1, 0.5, 0.5))
        fleet_serve.summarize(run)
        run.exit_code, run.ray_processes_left = exit_code, 0
        return [run]

    monkeypatch.setattr(fleet_serve, "run_all", run_all)
    argv = ["fleet_serve.py", "--routers", "pow2", "--json", str(tmp_path / "out.json")]
    monkeypatch.setattr(sys, "argv", argv)
    assert fleet_serve.main() == passed


def test_a_server_that_never_gets_ready_leaves_no_ray_directory_behind(fleet_serve, monkeypatch, tmp_path):
    from radixflow.server import fleet_spawn

    # the run's Ray session directory was removed only after a run that started: a server that
    # exited or timed out before it was ready left its rf-ray-* directory in /tmp, one per try.
    # With the servers side by side, the one started before it is killed and its directory goes too
    dirs = iter([tmp_path / "rf-ray-a", tmp_path / "rf-ray-b"])
    first = SimpleNamespace(killed=False, poll=lambda: None, wait=lambda: 0)
    first.kill = lambda: setattr(first, "killed", True)

    def mkdtemp(**_):
        d = next(dirs)
        d.mkdir()
        return str(d)

    def started(args, router, log, ray_dir):
        if router == "checkpoint":
            raise RuntimeError("the server exited with 1 before it was ready")
        return first, 1

    monkeypatch.setattr(fleet_spawn.tempfile, "mkdtemp", mkdtemp)
    monkeypatch.setattr(fleet_spawn, "started", started)
    args = SimpleNamespace(log_dir=str(tmp_path / "logs"))
    servers = fleet_spawn.fleet_servers(args, ["pow2", "checkpoint"])
    with pytest.raises(RuntimeError, match="before it was ready"), servers:
        raise AssertionError("every server was ready")
    assert first.killed and not list(tmp_path.glob("rf-ray-*"))


def test_the_routers_trials_are_interleaved_and_reported_as_medians_with_the_load(
    fleet_serve, monkeypatch, tmp_path, capsys
):
    # every router ran all its traffic before the next started: a machine whose load drifted
    # favoured whichever router ran in the quiet part, and one run per router had no spread
    walls = {"pow2": [3.0, 1.0, 2.0], "prefix": [4.0, 4.0, 5.0], "checkpoint": [2.0, 9.0, 1.0]}
    order: list[tuple[int, str]] = []
    prompts: dict[int, set[tuple[int, ...]]] = {}

    @contextmanager
    def fleet_servers(args, routers):
        yield {r: r for r in routers}

    def measure_trial(args, server, trial_prompts, trial, run):
        order.append((trial, server))
        prompts.setdefault(trial, set()).add(tuple(map(tuple, trial_prompts)))
        run.requests += len(trial_prompts)
        run.answered += len(trial_prompts)
        wall = walls[server][trial]
        return fleet_serve.Trial(trial, wall, wall / 10, 0.5 + trial / 10, 1.5)

    def interrupted(args, server, run):
        run.drain_sent = run.drain_answered = 2
        run.exit_code, run.ray_processes_left = fleet_serve.INTERRUPTED, 0

    monkeypatch.setattr(fleet_serve, "fleet_servers", fleet_servers)
    monkeypatch.setattr(fleet_serve, "measure_trial", measure_trial)
    monkeypatch.setattr(fleet_serve, "interrupted", interrupted)
    out = tmp_path / "out.json"
    argv = ["fleet_serve.py", "--routers", "pow2,prefix,checkpoint", "--repeat", "3", "--groups", "2"]
    monkeypatch.setattr(sys, "argv", [*argv, "--candidates", "2", "--json", str(out)])
    assert fleet_serve.main() == 0
    assert order == [
        (0, "pow2"), (0, "prefix"), (0, "checkpoint"),
        (1, "prefix"), (1, "checkpoint"), (1, "pow2"),
        (2, "checkpoint"), (2, "pow2"), (2, "prefix"),
    ]  # fmt: skip
    # each trial sends every router the same prompts, and new ones (no trial finds another's cached)
    assert all(len(p) == 1 for p in prompts.values()) and len(set().union(*prompts.values())) == 3
    doc = json.loads(out.read_text())
    runs = {r["router"]: r for r in doc["runs"]}
    assert (runs["checkpoint"]["wall_s"], runs["checkpoint"]["wall_spread_s"]) == (2.0, [1.0, 9.0])
    assert runs["pow2"]["mean_latency_s"] == pytest.approx(0.2)
    assert runs["prefix"]["reuse_rate"] == pytest.approx(0.6)
    assert [t["load_1min"] for t in runs["pow2"]["trials"]] == [1.5] * 3
    assert len(doc["load_before"]) == len(doc["load_after"]) == 3
    printed = capsys.readouterr().out
    assert "checkpoint: 12/12 answered" in printed and "spread 1.0-9.0 s" in printed
    assert "load average" in printed


def test_a_fleet_answer_that_is_not_ok_says_its_status_and_body(fleet_serve, monkeypatch):
    """A non-200 ``/fleet`` (a 500's text body) was a bare JSONDecodeError ("Expecting value"),
    which said nothing of what the server had answered."""
    import httpx

    answer = httpx.Response(500, text="Internal Server Error")
    monkeypatch.setattr(fleet_serve.httpx, "get", lambda *a, **k: answer)
    with pytest.raises(RuntimeError, match="/fleet on port 9 answered 500: 'Internal Server Error'"):
        fleet_serve.fleet_tokens(9)


def test_the_fleet_binds_port_0_and_is_reached_where_its_banner_says(fleet_serve, monkeypatch, tmp_path):
    from radixflow.server import fleet_spawn

    # a port picked here (a socket bound, released, passed as --port) could be taken by another
    # process (a parallel test's, Ray's own) before the server bound it: the server picks its own
    # and says it in its banner, which lands in the run's log
    got: dict[str, object] = {}
    banner = "radixflow: serving m on http://127.0.0.1:41234/v1 (2 replicas on Ray Serve, router pow2)\n"

    class Proc:
        returncode = None

        def __init__(self, cmd, stdout, **_):
            got["cmd"] = cmd
            stdout.write("Ray starting\n" + banner)
            stdout.close()

        def poll(self):
            return None

    def get(url, **_):
        got.setdefault("urls", []).append(url)
        return SimpleNamespace(status_code=200)

    monkeypatch.setattr(fleet_spawn.subprocess, "Popen", Proc)
    monkeypatch.setattr(fleet_serve.httpx, "get", get)
    args = SimpleNamespace(model="m", replicas=2, start_timeout=5.0)
    proc, port = fleet_spawn.started(args, "pow2", tmp_path / "pow2.log", str(tmp_path))
    cmd = got["cmd"]
    assert isinstance(proc, Proc) and port == 41234
    assert cmd[cmd.index("--port") + 1] == "0" and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert got["urls"] == ["http://127.0.0.1:41234/health"]


def test_a_server_that_exits_before_it_is_ready_is_one_line_naming_why(fleet_serve, monkeypatch, tmp_path):
    from radixflow.server import fleet_spawn

    # a mistyped --model: its server exits with 2 at once, and the run ended in a RuntimeError
    # traceback, "the server exited with 2 before it was ready", why left in its log file
    why = "radixflow: error: model: unknown torch model 'nosuch' (zoo names: llama-tiny)"

    class Proc:
        returncode = 2

        def __init__(self, cmd, stdout, **_):
            stdout.write(f"some warning\n{why}\n\n")
            stdout.close()

        def poll(self):
            return 2

        def kill(self):
            pass

        def wait(self):
            return 2

    monkeypatch.setattr(fleet_spawn.subprocess, "Popen", Proc)
    monkeypatch.setattr(fleet_spawn.tempfile, "mkdtemp", lambda **_: str(tmp_path / "ray"))
    argv = ["fleet_serve.py", "--model", "nosuch", "--routers", "pow2", "--log-dir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as e:
        fleet_serve.main()
    said = str(e.value.code)
    assert said.startswith("fleet_serve: the pow2 server exited with 2 before it was ready: ")
    assert why in said and str(tmp_path / "fleet_serve_pow2.log") in said and "\n" not in said
