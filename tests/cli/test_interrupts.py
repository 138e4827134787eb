"""What a command cut short (a Ctrl-C, a SIGTERM or SIGHUP taken as one) keeps, and its one line."""

from __future__ import annotations

import errno
import io
import json
import signal
import sys

import pytest

from radixflow.cli import main
from radixflow.progress import RequestBar

GENERATE = ["generate", "llama-tiny", "--prompt", "a", "--prompt", "b", "--prompt", "c", "--max-tokens", "3"]


@pytest.fixture
def ctrl_c_after_two_answers(monkeypatch):
    """A Ctrl-C as the second request is answered (its output handed on, the bar told)."""
    hear = RequestBar.hear

    def then_ctrl_c(self, done, total):
        hear(self, done, total)
        if done == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(RequestBar, "hear", then_ctrl_c)


def test_a_generate_cut_short_prints_the_outputs_it_finished(
    zoo, capsys, monkeypatch, ctrl_c_after_two_answers
):
    """A Ctrl-C during `generate` printed nothing: the outputs already finished were lost. Now they
    are printed, as an uninterrupted run prints them, and the line says how many of all."""
    with monkeypatch.context() as m:
        m.setattr(RequestBar, "hear", lambda *a: None)
        assert main(GENERATE) == 0
    whole = capsys.readouterr().out.splitlines()
    assert main(GENERATE) == 130
    out, err = capsys.readouterr()
    finished = [out.splitlines()[i : i + 2] for i in range(0, len(out.splitlines()), 2)]
    assert len(finished) == 2 and all(f[0] in whole and f == whole[whole.index(f[0]) :][:2] for f in finished)
    said = "2 of 3 outputs finished, printed above (the same command runs them all again)"
    assert err.splitlines()[-1] == f"radixflow: interrupted; {said}"


def test_a_generate_cut_short_gives_json_of_the_outputs_it_finished_in_their_places(
    zoo, capsys, monkeypatch, ctrl_c_after_two_answers
):
    """With --json the list keeps each output at its prompt's place, null for one not finished."""
    with monkeypatch.context() as m:
        m.setattr(RequestBar, "hear", lambda *a: None)
        assert main([*GENERATE, "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert main([*GENERATE, "--json"]) == 130
    out, err = capsys.readouterr()
    cut = json.loads(out)
    assert len(cut) == 3 and sum(o is None for o in cut) == 1
    assert all(o is None or o == w for o, w in zip(cut, whole, strict=True))
    said = (
        "2 of 3 outputs finished, printed above, null for the others (the same command runs them all again)"
    )
    assert err.splitlines()[-1] == f"radixflow: interrupted; {said}"


def test_a_generate_whose_round_fails_still_prints_the_outputs_it_finished(zoo, capsys, monkeypatch):
    """A round that failed (its worker call raised) ended `generate` with its one line and exit 1,
    and the outputs finished before it were lost with it. Now they are printed first."""
    from radixflow.runners.torch_runner import TorchRunner

    failing, run, hear = [], TorchRunner.run, RequestBar.hear

    def lost_once_one_is_done(self, batch):
        if failing:
            raise RuntimeError("device lost")
        return run(self, batch)

    def then_fail(self, done, total):
        hear(self, done, total)
        failing.append(done)

    one_a_round = [*GENERATE, "--max-requests", "1"]  # the prompts finish in rounds of their own
    assert main(one_a_round) == 0
    whole = capsys.readouterr().out.splitlines()
    monkeypatch.setattr(TorchRunner, "run", lost_once_one_is_done)
    monkeypatch.setattr(RequestBar, "hear", then_fail)
    assert main(one_a_round) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == whole[:2]  # the first prompt's output, as a whole run prints it
    line = err.splitlines()[-1]
    assert line.startswith("radixflow: error: prompt 1 (request ") and "device lost" in line
    assert line.endswith("; 1 of 3 outputs finished, printed above (the same command runs them all again)")


SCORE = ["score", "llama-tiny", "--context", "a", *[f"--candidate= {c}" for c in "bcd"]]


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_score_whose_round_fails_still_prints_the_candidates_it_scored(zoo, capsys, monkeypatch, json_flag):
    """`generate` prints what finished before a failed round; `score --context` lost every
    candidate already scored. Now they are printed (in --json's list at their places, null for
    the others; in the table ranked among themselves)."""
    from radixflow.runners.torch_runner import TorchRunner

    failing, run, hear = [], TorchRunner.run, RequestBar.hear

    def lost_once_one_is_done(self, batch):
        if failing:
            raise RuntimeError("device lost")
        return run(self, batch)

    def then_fail(self, done, total):
        hear(self, done, total)
        failing.append(done)

    one_a_round = [*SCORE, "--max-requests", "1", *json_flag]  # the candidates finish in rounds of their own
    assert main([*one_a_round, "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    monkeypatch.setattr(TorchRunner, "run", lost_once_one_is_done)
    monkeypatch.setattr(RequestBar, "hear", then_fail)
    assert main(one_a_round) == 1
    out, err = capsys.readouterr()
    others = ", null for the others" if json_flag else ""
    said = f"; 1 of 3 candidates scored, printed above{others} (the same command scores them all again)"
    assert err.splitlines()[-1].endswith(said)
    if json_flag:
        cut = json.loads(out)
        assert len(cut) == 3 and sum(c is None for c in cut) == 2
        assert all(c is None or c == w for c, w in zip(cut, whole, strict=True))
    else:
        assert len([w for w in whole if f"{w['total']:.4f}" in out]) == 1  # its row alone, ranked 1
        assert "│ 1 " in out and "│ 2 " not in out


BENCH = ["bench", "--runner", "sim", "--groups", "2", "--candidates", "2", "--context-len", "32"]


def test_a_ctrl_c_as_a_finished_bench_shows_its_table_still_writes_its_files(tmp_path, capsys, monkeypatch):
    """Every policy run had finished; a Ctrl-C as the table was printed (or --json written) lost
    them all: no file written, an older one left as if it were this run's. Now the files are
    written whole, and the line says the run had finished."""
    from radixflow.cli import bench

    out, rounds = tmp_path / "out.json", tmp_path / "rounds.jsonl"
    out.write_text('{"old": true}\n')
    assert main([*BENCH, "--json", str(tmp_path / "whole.json")]) == 0
    whole = json.loads((tmp_path / "whole.json").read_text())
    capsys.readouterr()

    def ctrl_c(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "_show", ctrl_c)
    assert main([*BENCH, "--json", str(out), "--round-trace", str(rounds)]) == 130
    data = json.loads(out.read_text())
    assert "interrupted" not in data and data["results"] == whole["results"]
    assert {json.loads(line)["policy"] for line in rounds.read_text().splitlines()} == {
        "native",
        "radixflow",
        "adaptive",
    }
    said = f"every policy run had finished, written to {out} and {rounds}"
    assert capsys.readouterr().err.splitlines()[-1] == f"radixflow: interrupted; {said}"


class FullDisk(io.StringIO):
    """Standard output on a disk with no space left (``> out.txt``)."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("as_json", [[], ["--json"]], ids=["text", "json"])
def test_generate_to_a_full_disk_is_one_line(zoo, capsys, monkeypatch, as_json):
    """`generate ... > out.txt` on a full disk was an OSError traceback and exit 1 (text; --json
    said one line): now one line and exit 2, as for any output that cannot be written."""
    monkeypatch.setattr(sys, "stdout", FullDisk())
    assert main([*GENERATE, *as_json]) == 2
    said = "radixflow: error: cannot write standard output: No space left on device"
    assert capsys.readouterr().err.splitlines()[-1] == said


def test_a_ctrl_c_once_calibrate_wrote_its_profile_says_it_was_written(zoo, tmp_path, capsys, monkeypatch):
    """A Ctrl-C after the fit, as each model's own fit was stored (a synced write each) or the
    table printed, said only "interrupted": --out had been written whole, but the line read as if
    the minutes of timing were lost. Now it says where the profile is."""
    from dataclasses import replace

    from radixflow.calibration import command
    from radixflow.costmodel.hardware.profiles import HARDWARE

    fitted = replace(HARDWARE["h100"], calibration={"runners": {}})
    monkeypatch.setattr(command, "_time_and_fit", lambda *a: (fitted, [], {}))

    def ctrl_c(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "_store_own_fits", ctrl_c)
    out = tmp_path / "p.json"
    out.write_text("the previous profile\n")
    assert main(["calibrate", "--model", "lfm2-tiny", "--out", str(out)]) == 130
    said = f"the fitted profile was written to {out} before it stopped"
    assert capsys.readouterr().err == f"radixflow: interrupted; {said}\n"
    assert json.loads(out.read_text())["name"] == fitted.name


def test_a_command_that_left_its_engine_behind_ends_by_its_code_though_stdout_is_gone(monkeypatch, capsys):
    """A run-batch (or serve) cut short with its engine stuck in a round ends at once (the
    interpreter's shutdown would wait on that thread); stdout's last flush came first, and where a
    hangup had taken the terminal it raised: a traceback, and the shutdown it was to skip."""
    import os

    from radixflow.cli import app
    from radixflow.cli.command import ROUND_LEFT

    ended = []
    monkeypatch.setattr(os, "_exit", ended.append)
    monkeypatch.setattr(sys, "stdout", FullDisk())
    stopped = KeyboardInterrupt()
    stopped.add_note(ROUND_LEFT)
    app._ended("hung up", 129, stopped)
    assert ended == [129]
    assert capsys.readouterr().err == f"radixflow: hung up; {ROUND_LEFT}\n"


def test_a_bench_cut_short_without_files_shows_the_policies_it_finished(capsys, monkeypatch):
    """Without --json a Ctrl-C in bench's last policy lost the ones finished: the table was never
    shown. Now it shows those finished, and the line says so."""
    from radixflow.bench import harness

    summarize = harness.summarize

    def ctrl_c_at_adaptive(policy, *args):
        if policy == "adaptive":
            raise KeyboardInterrupt
        return summarize(policy, *args)

    assert main(BENCH) == 0
    whole = capsys.readouterr().out
    monkeypatch.setattr(harness, "summarize", ctrl_c_at_adaptive)
    assert main(BENCH) == 130
    out, err = capsys.readouterr()

    def figures(table: str) -> list[str]:  # the first table's mean latencies, one per policy
        row = next(line for line in table.splitlines() if "mean latency" in line)
        return [cell.strip() for cell in row.split("│")[2:-1]]

    assert figures(out)[:2] == figures(whole)[:2]  # native's and radixflow's, as the whole run's
    assert "adaptive" not in out
    said = "2 of 3 policy runs finished, shown above (the same command runs them all again)"
    assert err.splitlines()[-1] == f"radixflow: interrupted; {said}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_sigterm_in_a_background_job_waits_for_the_engines_safe_point(sig):
    """`cmd &` in a script starts it with SIGINT ignored: the engine's hold (`HeldInterrupt`),
    which holds Python's own Ctrl-C handler alone, held nothing there, and a SIGTERM or SIGHUP
    taken as a Ctrl-C was raised at once, wherever the engine was (a request half admitted, a
    round half applied). Now it waits for the safe point as a Ctrl-C does; SIGINT stays ignored."""
    from radixflow.cli.sigterm import SigtermAsCtrlC
    from radixflow.engine.interrupts import HeldInterrupt

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with SigtermAsCtrlC() as term, HeldInterrupt() as held:
            try:
                signal.raise_signal(signal.SIGINT)  # ignored, as the job was started
                assert not held.came
                signal.raise_signal(sig)  # the bookkeeping goes on
            except KeyboardInterrupt:
                pytest.fail("raised inside the hold")
            assert held.came
            with pytest.raises(KeyboardInterrupt), held.let_through():  # raised where it may be
                pass
            with pytest.raises(KeyboardInterrupt), held.let_through():  # the worker call: at once
                signal.raise_signal(sig)
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert term.signum == sig and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
