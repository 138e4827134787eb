"""`radixflow bench` end to end on the sim runner, plus its error handling."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_utils import checkout_env, run_reader_gone

import radixflow
from radixflow.cli import main
from radixflow.cli.app import COMMANDS, DESCRIPTION, build_parser


def test_bench_defaults_meet_the_acceptance_figures(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["bench", "--runner", "sim", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data) == {"run", "workload", "config", "load_1min", "results"}
    native, flow, adaptive = data["results"]
    assert (native["policy"], flow["policy"], adaptive["policy"]) == ("native", "radixflow", "adaptive")
    for r in (native, flow, adaptive):
        assert r["completed"] == r["requests"] == 64
        assert r["rounds"] >= r["rounds_lower_bound"]
    assert flow["rounds"] < native["rounds"]
    assert abs(flow["reuse_rate"] - native["reuse_rate"]) <= 0.005
    assert flow["outputs_sha256"] == native["outputs_sha256"] == adaptive["outputs_sha256"]
    assert "worker" in capsys.readouterr().out  # the table (a narrow console wraps its labels)


def test_full_attention_control_gives_identical_rounds(tmp_path):
    out = tmp_path / "out.json"
    assert main(["bench", "--model", "qwen3-4b", "--json", str(out)]) == 0
    native, flow, adaptive = json.loads(out.read_text())["results"]
    assert native["rounds"] == flow["rounds"] == adaptive["rounds"]
    assert native["bubble_tokens"] == flow["bubble_tokens"] == adaptive["bubble_tokens"] == 0


def test_a_full_attention_runs_config_says_what_its_engines_ran(tmp_path):
    # the engines of a model without recurrent state place no checkpoint and hold no state; the
    # JSON said each policy's own placement (branch, lone) and has_recurrent true
    out = tmp_path / "out.json"
    args = ["--groups", "2", "--candidates", "2", "--context-len", "64", "--json", str(out)]
    assert main(["bench", "--model", "qwen3-4b", *args]) == 0
    config = json.loads(out.read_text())["config"]
    assert (config["placement"], config["has_recurrent"], config["num_state_slots"]) == ("none", False, 0)
    assert main(["bench", "--model", "qwen3_5-2b", "--placement", "align", *args]) == 0
    assert json.loads(out.read_text())["config"]["placement"] == "align"


def test_a_runs_config_says_which_eviction_admission_and_seed_it_ran(tmp_path):
    # --eviction and --admission change what a cache under pressure keeps, and --seed the sampler
    # of a replayed trace (a generated workload's is in "workload"), yet the JSON said none of them:
    # two runs that differed only there read alike
    out, trace = tmp_path / "out.json", tmp_path / "t.jsonl"
    trace.write_text('{"id": "a", "prompt": [1, 2, 3]}\n')
    args = ["--trace", str(trace), "--json", str(out)]
    assert main(["bench", *args, "--eviction", "cost-per-byte", "--admission", "likely", "--seed", "7"]) == 0
    config = json.loads(out.read_text())["config"]
    assert (config["eviction"], config["admission"], config["seed"]) == ("cost-per-byte", "likely", 7)


def test_a_runs_config_says_whether_its_followers_ran_in_their_producers_round(tmp_path):
    # every engine runs with the runner's same_round_state (the sim prices a round's waves, as the
    # torch runner runs them), which adaptive's followers need; the JSON said false, the
    # scheduler's default before the engine read the runner
    out = tmp_path / "out.json"
    args = ["--groups", "2", "--candidates", "2", "--context-len", "64", "--json", str(out)]
    assert main(["bench", "--model", "qwen3_5-2b", *args]) == 0
    assert json.loads(out.read_text())["config"]["same_round_state"] is True
    assert main(["bench", "--model", "qwen3-4b", *args]) == 0  # nothing to follow without state
    assert json.loads(out.read_text())["config"]["same_round_state"] is False


def test_trace_write_then_replay_gives_same_results(tmp_path):
    trace, a, b = tmp_path / "t.jsonl", tmp_path / "a.json", tmp_path / "b.json"
    args = ["bench", "--groups", "3", "--candidates", "4", "--arrival", "poisson", "--rate", "200"]
    assert main([*args, "--write-trace", str(trace), "--json", str(a)]) == 0
    assert main(["bench", "--trace", str(trace), "--json", str(b), "--round-trace", str(tmp_path / "r")]) == 0
    res_a, res_b = json.loads(a.read_text())["results"], json.loads(b.read_text())["results"]
    assert [r["rounds"] for r in res_a] == [r["rounds"] for r in res_b]
    assert [r["outputs_sha256"] for r in res_a] == [r["outputs_sha256"] for r in res_b]
    rounds = [json.loads(x) for x in (tmp_path / "r").read_text().splitlines()]
    assert {r["policy"] for r in rounds} == {"native", "radixflow", "adaptive"}


SMALL_BENCH = ["bench", "--groups", "2", "--candidates", "2", "--context-len", "32", "--candidate-len", "16"]


@pytest.mark.parametrize("flag", ["--json", "--round-trace", "--write-trace"])
def test_bench_writes_an_output_given_as_dash_to_standard_output(tmp_path, monkeypatch, capsys, flag):
    # `--json -` wrote a file named "-", where score and run-batch take "-" as standard output;
    # now it is standard output, which then holds only that output (the table goes to stderr)
    monkeypatch.chdir(tmp_path)
    assert main([*SMALL_BENCH, "--policy", "native", flag, "-"]) == 0
    out, err = capsys.readouterr()
    assert not (tmp_path / "-").exists()
    if flag == "--json":
        assert json.loads(out)["results"][0]["policy"] == "native"
    else:
        assert all(json.loads(line) for line in out.splitlines()) and out.endswith("\n")
    assert "native" in err  # the table


@pytest.mark.parametrize("flag", ["--json", "--round-trace", "--write-trace"])
def test_bench_writes_an_output_given_as_dot_slash_dash_to_a_file_named_dash(
    tmp_path, monkeypatch, capsys, flag
):
    # `--json ./-` (the way to name a file called "-") was read as `-`, `Path` dropping its
    # "./": the output went to standard output and no file was written
    monkeypatch.chdir(tmp_path)
    assert main([*SMALL_BENCH, "--policy", "native", flag, "./-"]) == 0
    out, _ = capsys.readouterr()
    assert (tmp_path / "-").read_text().endswith("\n")
    assert "native" in out and not out.startswith("{")  # the table, on standard output


def test_bench_refuses_two_outputs_to_standard_output(capsys):
    assert main([*SMALL_BENCH, "--json", "-", "--round-trace", "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "radixflow: error: --round-trace -: standard output already takes --json; give one a file"


def test_round_trace_keeps_every_trials_rounds_each_row_naming_its_trial(tmp_path):
    out, trace = tmp_path / "out.json", tmp_path / "rounds.jsonl"
    argv = ["bench", "--groups", "2", "--candidates", "2", "--context-len", "32", "--candidate-len", "16"]
    argv += ["--policy", "native", "--policy", "adaptive", "--repeat", "3"]
    assert main([*argv, "--json", str(out), "--round-trace", str(trace)]) == 0
    rows = [json.loads(x) for x in trace.read_text().splitlines()]
    results = {r["policy"]: r["rounds"] for r in json.loads(out.read_text())["results"]}
    for policy, rounds in results.items():
        for trial in (1, 2, 3):
            mine = [r for r in rows if r["policy"] == policy and r["trial"] == trial]
            assert [r["index"] for r in mine] == list(range(rounds)), (policy, trial)
    assert len(rows) == 3 * sum(results.values())


def test_a_repeated_bench_shows_each_policys_spread_and_the_load_and_keeps_the_load(tmp_path, capsys):
    # the table shows medians only: without the trials' range and the machine's load a reader
    # could not tell whether two policies differ
    out = tmp_path / "out.json"
    argv = [*SMALL_BENCH, "--policy", "native", "--policy", "adaptive", "--repeat", "2"]
    assert main([*argv, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mean latency over 2 trials, min–max:" in text and "makespan over 2 trials, min–max:" in text
    assert re.search(r"^  adaptive: [0-9.]+–[0-9.]+ s, spread [0-9.]+% of the lowest$", text, re.M)
    # the "vs native" column's percentage, trial by trial: its spread
    assert "mean latency against native, trial by trial (ratios of trials run side by side):" in text
    assert re.search(
        r"^  adaptive: [-+][0-9.]+% to [-+][0-9.]+%, median [-+][0-9.]+% over 2 trials", text, re.M
    )
    assert "machine load (1-minute average):" in text
    load = json.loads(out.read_text())["load_1min"]
    assert set(load) == {"start", "end"} and all(v >= 0 for v in load.values())
    assert main([*SMALL_BENCH, "--policy", "native"]) == 0
    assert "trials, min–max" not in capsys.readouterr().out  # one trial: no spread to show


def test_round_trace_keeps_a_rolled_back_round_with_its_error(tmp_path, monkeypatch):
    # a round whose worker call failed was left out: the trace skipped its index and hid why its
    # requests failed
    from radixflow.runners.sim import SimRunner

    run = SimRunner.run

    def failing(self, batch):
        if batch.round_index == 1:
            raise RuntimeError("device lost")
        return run(self, batch)

    monkeypatch.setattr(SimRunner, "run", failing)
    trace = tmp_path / "rounds.jsonl"
    argv = [*SMALL_BENCH, "--token-budget", "32", "--policy", "native", "--repeat", "2"]
    assert main([*argv, "--round-trace", str(trace)]) == 0
    rows = [json.loads(x) for x in trace.read_text().splitlines()]
    for trial in (1, 2):
        mine = [r for r in rows if r["trial"] == trial]
        assert [r["index"] for r in mine] == list(range(len(mine))) and len(mine) > 2
        (failed,) = [r for r in mine if r["error"] is not None]
        assert failed["index"] == 1 and "device lost" in failed["error"] and failed["tokens"] > 0


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["bench", "--token-budget", "8", "--block-size", "16"], "smaller than one block"),
        (["bench", "--groups", "0"], "--groups: empty workload"),
        (["bench", "--candidates", "0"], "--candidates: empty workload"),  # named --groups, not given
        (["bench", "--rate", "-3"], "--rate: must be at least 1e-06 requests/s, got -3"),
        (["bench", "--policy", "greedy"], "--policy: unknown policy 'greedy'"),
        (["bench", "--model", "gpt-9"], "unknown torch model 'gpt-9' (zoo names: llama-tiny"),
        (["bench", "--runner", "sim", "--model", "gpt-9"], "unknown sim model 'gpt-9' (sim shapes: qwen3_5"),
        (["bench", "--frobnicate"], "unrecognized arguments"),
        (["bench", "--json", "/nonexistent-dir/out.json"], "does not exist"),
        (["bench", "--trace", "/nonexistent-dir/t.jsonl"], "cannot read trace"),
    ],
)
def test_user_mistakes_give_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_malformed_trace_reports_line_number(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": [1, 2, 3]}\n{"id": "b", "prompt": "oops"}\n')
    assert main(["bench", "--trace", str(bad)]) == 2
    assert "bad.jsonl:2:" in capsys.readouterr().err


def test_cost_model_parameters_are_configurable(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["bench", "--json", str(a)]) == 0
    assert main(["bench", "--fixed-cost-ms", "40", "--tflops", "100", "--json", str(b)]) == 0
    base, slow = json.loads(a.read_text()), json.loads(b.read_text())
    assert slow["config"]["hardware"]["round_overhead_s"] == 0.04
    assert slow["results"][0]["makespan_s"] > base["results"][0]["makespan_s"]
    assert slow["results"][0]["rounds"] == base["results"][0]["rounds"]


def _trace(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_requests_that_cannot_run_are_reported_with_their_reason(tmp_path, capsys):
    # A bad token id is refused at submission; a prompt longer than the whole KV cache at admission.
    trace = _trace(
        tmp_path / "t.jsonl",
        [
            {"id": "ok", "prompt": list(range(40))},
            {"id": "oov", "prompt": [1, 2, 10**9]},
            {"id": "long", "prompt": list(range(300))},
        ],
    )
    out = tmp_path / "out.json"
    assert main(["bench", "--trace", str(trace), "--kv-blocks", "10", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "failed" in table and "(oov)" in table and "(long)" in table
    for result in json.loads(out.read_text())["results"]:
        assert (result["completed"], result["failed"]) == (1, 2)
        reasons = {f["id"]: f["reason"] for f in result["failures"]}
        assert set(reasons) == {"oov", "long"}
        assert "outside the vocabulary" in reasons["oov"]
        assert "does not fit" in reasons["long"]


def test_the_bench_progress_in_a_log_reaches_every_request_even_those_that_fail(
    tmp_path, capsys, monkeypatch
):
    # a request refused at submit never runs a chunk: it still counts as done, so the log's last
    # line says 100% rather than stopping short with an ETA
    monkeypatch.setattr("radixflow.progress.QUIET_S", 0.0)
    rows = [{"id": "ok", "prompt": list(range(40))}, {"id": "oov", "prompt": [1, 2, 10**9]}]
    trace = _trace(tmp_path / "t.jsonl", rows)
    assert main(["bench", "--trace", str(trace), "--policy", "native", "--policy", "radixflow"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "/4 (" in line]
    assert lines and "4/4 (100%)" in lines[-1]
    assert [line.split(": ")[0] for line in lines] == ["native", "radixflow"]


def test_a_bench_cut_short_whose_json_the_disk_refuses_says_where_its_round_trace_went(
    tmp_path, capsys, monkeypatch
):
    # the line gave --json's failure alone, though --round-trace, tried after it, held the trials
    # finished: read as nothing kept
    import errno

    import radixflow.cli.bench_outputs as bench
    from radixflow.runners.sim import SimRunner

    out, rounds = tmp_path / "out.json", tmp_path / "rounds.jsonl"
    write_whole, run = bench.write_whole, SimRunner.run
    seen: list[int] = []

    def full_for_json(path, text):
        if Path(path) == out:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write_whole(path, text)

    def interrupted_in_the_second_run(self, batch):
        seen.append(batch.round_index)
        if batch.round_index == 0 and len(seen) > 1:
            raise KeyboardInterrupt
        return run(self, batch)

    monkeypatch.setattr("radixflow.cli.bench_outputs.write_whole", full_for_json)
    monkeypatch.setattr(SimRunner, "run", interrupted_in_the_second_run)
    argv = [*SMALL_BENCH, "--policy", "native", "--policy", "radixflow"]
    assert main([*argv, "--json", str(out), "--round-trace", str(rounds)]) == 130
    said = capsys.readouterr().err.splitlines()[-1]
    assert said == (
        f"radixflow: interrupted; cannot write --json {out}: No space left on device; "
        f"1 of 2 policy runs finished, written to {rounds} (the same command runs them all again)"
    )
    assert {json.loads(line)["policy"] for line in rounds.read_text().splitlines()} == {"native"}


def test_a_repeated_bench_one_of_whose_trials_completed_nothing_says_which_share(
    tmp_path, capsys, monkeypatch
):
    # "no request completed under native" where its first trial completed every request and the
    # table showed its latencies: the exit status is the worst trial's, the line now says so
    from radixflow.runners.sim import SimRunner

    run, engines = SimRunner.run, []

    def lost_in_the_second_trial(self, batch):
        engines.append(batch.round_index == 0)
        if sum(engines) == 2:
            raise RuntimeError("device lost")
        return run(self, batch)

    monkeypatch.setattr(SimRunner, "run", lost_in_the_second_trial)
    assert main([*SMALL_BENCH, "--policy", "native", "--repeat", "2"]) == 1
    # the reason whole (the table cuts it at 30 characters)
    said = (
        "no request completed under native in 1 of its 2 trials "
        "(4 of 4 failed: worker call failed: RuntimeError: device lost)"
    )
    assert capsys.readouterr().err.splitlines()[-1] == f"radixflow: error: {said}"


def test_the_bench_progress_of_a_repeated_run_names_each_trial(tmp_path, capsys, monkeypatch):
    # with --repeat every trial's lines read "native: round 1": a log of a long run could not
    # say which trial it was in, where the trace's processes and --round-trace name it
    monkeypatch.setattr("radixflow.progress.QUIET_S", 0.0)
    trace = _trace(tmp_path / "t.jsonl", [{"id": "a", "prompt": list(range(40))}])
    argv = ["bench", "--trace", str(trace), "--policy", "native", "--policy", "radixflow", "--repeat", "2"]
    assert main(argv) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "/4 (" in line]
    described = list(dict.fromkeys(line.split(": ")[0] for line in lines))
    assert described == ["native #1", "radixflow #1", "radixflow #2", "native #2"]  # each first in turn


def test_a_trace_the_disk_refuses_while_running_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    # a flush while the policies ran failed (a warning in the log), and the last flush then said
    # nothing: exit 0 with a trace cut short
    import builtins
    import errno

    def full_disk(path, mode="r", *args, **kwargs):
        if mode == "r+b":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return builtins.open(path, mode, *args, **kwargs)

    monkeypatch.setattr("radixflow.engine.trace_file.open", full_disk, raising=False)
    monkeypatch.setattr("radixflow.engine.trace_file.FLUSH_EVERY_S", 0.0)  # every round flushes
    path = tmp_path / "t.json"
    assert main([*SMALL_BENCH, "--policy", "native", "--trace-out", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"radixflow: error: cannot write --trace-out {path}: No space left on device"


def test_a_trace_that_cannot_be_written_costs_the_run_none_of_its_other_results(
    tmp_path, capsys, monkeypatch
):
    # the trace's failure was raised as the policies finished: no table, and --json and
    # --round-trace never written, the whole run's results lost for its trace
    from radixflow.engine.trace_file import RewrittenError

    def taken(path, text):  # another run given this path took it: this run's trace stops
        raise RewrittenError("it was rewritten by another writer (another run given this path?)")

    monkeypatch.setattr("radixflow.engine.trace_file.write_whole", taken)
    trace, out, rounds = tmp_path / "t.json", tmp_path / "out.json", tmp_path / "rounds.jsonl"
    argv = [*SMALL_BENCH, "--policy", "native", "--json", str(out), "--round-trace", str(rounds)]
    assert main([*argv, "--trace-out", str(trace)]) == 2
    captured = capsys.readouterr()
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith(f"radixflow: error: cannot write --trace-out {trace}: ")
    assert "worker" in captured.out  # the table
    assert json.loads(out.read_text())["results"][0]["completed"] > 0 and rounds.read_text()


def test_a_json_the_disk_refuses_costs_the_run_none_of_its_other_outputs(tmp_path, capsys, monkeypatch):
    # --json's failure was raised at once: --round-trace and the --trace-out trace, written after
    # it, were never written, the whole run's rounds lost for one file
    import errno

    import radixflow.cli.bench_outputs as bench

    out, rounds, trace = tmp_path / "out.json", tmp_path / "rounds.jsonl", tmp_path / "t.json"
    write_whole = bench.write_whole

    def full_for_json(path, text):
        if Path(path) == out:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write_whole(path, text)

    monkeypatch.setattr("radixflow.cli.bench_outputs.write_whole", full_for_json)
    argv = [*SMALL_BENCH, "--policy", "native", "--json", str(out), "--round-trace", str(rounds)]
    assert main([*argv, "--trace-out", str(trace)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"radixflow: error: cannot write --json {out}: No space left on device"
    assert rounds.read_text() and json.loads(trace.read_text())


@pytest.mark.parametrize("flag", ["--json", "--round-trace", "--write-trace"])
def test_an_output_the_disk_refuses_is_one_line_naming_its_flag(tmp_path, capsys, monkeypatch, flag):
    # the line named the path alone ("cannot write out.json: ..."), where every other output's
    # failure names its flag: with three outputs of one kind, which one failed?
    import errno

    def full_disk(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr("radixflow.cli.bench_outputs.write_whole", full_disk)
    path = tmp_path / "out"
    assert main([*SMALL_BENCH, "--policy", "native", flag, str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"radixflow: error: cannot write {flag} {path}: No space left on device"


def test_exit_1_and_null_figures_when_no_request_completes(tmp_path, capsys):
    trace = _trace(tmp_path / "t.jsonl", [{"id": "oov", "prompt": [10**9]}])
    out = tmp_path / "out.json"
    assert main(["bench", "--trace", str(trace), "--json", str(out)]) == 1
    err = capsys.readouterr().err
    assert "radixflow: error: no request completed under native, radixflow" in err
    result = json.loads(out.read_text())["results"][0]  # written even so
    assert result["mean_latency_s"] is None and result["reuse_rate"] is None
    assert result["failures"] == [{"id": "oov", "reason": result["failures"][0]["reason"]}]


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("radixflow ")


def test_every_bench_flag_is_explained_with_its_default(capsys):
    from radixflow.cli import build_parser

    bench = next(a for a in build_parser()._actions if a.dest == "command").choices["bench"]
    for action in bench._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{action.option_strings} has no help"
        # either the help text says the default, or the formatter appends "(default: X)"
        assert "default" in action.help or action.default not in (None, False), action.option_strings
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    # decode steps take the budget too (tests/scheduler/test_decode.py): "prompt tokens" said otherwise
    assert "tokens computed per round, decode steps too (at least one block) (default: 2048)" in help_text
    assert "shared contexts (default: 8)" in help_text


def test_bench_help_says_what_each_arrival_process_is(capsys):
    # "--arrival {batch,poisson,bursty}: arrival process" left bursty's bursts of 16 (a size no
    # flag sets) to the source; --rate's "requests/s" reads as a steady stream for them too
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    said = "batch: every request at t=0; poisson: exponential gaps at --rate; bursty: 16 at a time"
    assert said in help_text


@pytest.mark.parametrize(
    "argv, warning",
    [
        (["--groups", "3", "--candidates", "4"], "--groups, --candidates have no effect with --trace"),
        (["--device", "cpu"], "--device has no effect with the sim runner"),
        # the seed draws a generated workload, and bench's requests are greedy: it drew nothing
        (["--seed", "7"], "--seed has no effect with --trace"),
        (["--groups", "3", "--seed", "7"], "--groups, --seed have no effect with --trace"),
    ],
)
def test_flags_without_effect_are_warned_about(tmp_path, capsys, argv, warning):
    trace = _trace(tmp_path / "t.jsonl", [{"id": "a", "prompt": [1, 2, 3]}])
    assert main(["bench", "--trace", str(trace), *argv]) == 0
    assert f"radixflow: warning: {warning}" in capsys.readouterr().err


def test_rate_with_batch_arrivals_is_warned_about(capsys):
    assert main(["bench", "--groups", "1", "--candidates", "2", "--rate", "5"]) == 0
    assert "--rate has no effect with --arrival batch" in capsys.readouterr().err


@pytest.mark.parametrize("groups", ["0", "1"])
def test_namespaces_with_one_group_or_none_is_warned_about(capsys, groups):
    # the groups go round-robin over the namespaces and independent requests are in ns0: with
    # one group every request was in ns0, the flag silently read by nothing
    assert main(["bench", "--groups", groups, "--independent", "2", "--namespaces", "4"]) == 0
    said = f"radixflow: warning: --namespaces has no effect with --groups {groups} (the groups go round-robin"
    assert said in capsys.readouterr().err


def test_sim_cost_flags_with_the_torch_runner_are_warned_about(capsys, monkeypatch):
    from radixflow.options import EnginePlan
    from radixflow.problems import Problem, ProblemError

    def stop(plan: EnginePlan, prompt_lengths: object = None) -> None:
        raise ProblemError(Problem("model", "stopped where the runner is built"))

    # warned of once the run goes ahead (a refused one is its error line alone): stopped after that
    monkeypatch.setattr(EnginePlan, "build", stop)
    argv = ["bench", "--runner", "torch", "--model", "qwen3_5-tiny", "--tflops", "3", "--hardware", "h200"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "radixflow: warning: --hardware, --tflops have no effect with the torch runner" in err


def test_no_warning_for_defaults(capsys):
    assert main(["bench", "--groups", "1", "--candidates", "2"]) == 0
    assert "warning" not in capsys.readouterr().err


def _small_files(limit: int) -> Callable[[], None]:
    """For a child process: files past ``limit`` bytes cannot be written (EFBIG, as a full disk
    refuses them with ENOSPC), and the write fails rather than the process being killed."""

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    return limit_files


def test_a_json_output_that_cannot_be_written_whole_leaves_the_old_file_as_it_was(tmp_path):
    """A write that fails part way (a full disk) left --json truncated: the old report gone and
    the new one not JSON. Now the new file replaces the old only once written whole."""
    out = tmp_path / "out.json"
    out.write_text('{"old": true}\n')
    env = checkout_env()
    argv = ["bench", "--runner", "sim", "--groups", "2", "--candidates", "2", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "radixflow.cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        preexec_fn=_small_files(1000),
    )
    assert proc.returncode == 2
    said = f"radixflow: error: cannot write --json {out}:"
    assert proc.stderr.splitlines()[-1].startswith(said), proc.stderr
    assert json.loads(out.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temporary file left behind


@pytest.mark.parametrize(
    ("sig", "said", "code"), [(signal.SIGTERM, "terminated", 143), (signal.SIGHUP, "hung up", 129)]
)
def test_sigterm_stops_every_command_as_ctrl_c_does(monkeypatch, capsys, sig, said, code):
    """SIGTERM ended `score --input`, `run-batch`, `bench`, ... at once, exit 143 with no word and
    no cleanup; now main takes it as a Ctrl-C (one line, exit 143), `serve` too (its server's own
    handlers take over while it serves: tests/cli/test_serve_signals.py). SIGHUP (the terminal
    closed) too."""
    import argparse
    import dataclasses

    from radixflow.cli import app

    seen = {}

    def probe(name):
        def run(args, console):
            seen[name] = signal.getsignal(sig)
            os.kill(os.getpid(), sig)
            return 0

        return run

    class Parser:
        def __init__(self, only=None):  # build_parser's: the command argv names
            pass

        def parse_args(self, argv):
            return argparse.Namespace(command=argv[0])

    commands = tuple(dataclasses.replace(c, run=probe(c.name)) for c in app.COMMANDS)
    monkeypatch.setattr(app, "COMMANDS", commands)
    monkeypatch.setattr(app, "build_parser", Parser)
    before = signal.getsignal(sig)  # SIG_DFL, or Ray's SIGTERM once a test has started Ray
    for command in commands:
        got = app.main([command.name])
        err = capsys.readouterr().err
        assert (got, err) == (code, f"radixflow: {said}\n"), command.name
        assert seen[command.name] is not before
        assert signal.getsignal(sig) is before


def test_a_sigterm_ignored_by_whoever_started_the_process_stays_ignored(monkeypatch):
    from radixflow.cli.sigterm import SigtermAsCtrlC

    monkeypatch.setattr(signal, "getsignal", lambda sig: signal.SIG_IGN)
    installed = []
    monkeypatch.setattr(signal, "signal", lambda *a: installed.append(a))
    with SigtermAsCtrlC() as term:
        pass
    assert installed == [] and not term.came


def test_a_device_written_in_place_is_appended_to_not_truncated(tmp_path):
    """`score ... -o /dev/stdout >> all.jsonl` (or after a header the shell wrote) opened the file
    behind /dev/stdout anew and truncated it, losing what was there; now it is appended to."""
    path = tmp_path / "all.jsonl"
    path.write_text("earlier\n")
    from radixflow.cli.lines_out import write_lines

    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        write_lines("--output", Path(f"/dev/fd/{fd}"), lambda out: out.write("new\n"))
    finally:
        os.close(fd)
    assert path.read_text() == "earlier\nnew\n"


class _FullStdout:
    """Standard output on a full disk (``radixflow score --input F > /mnt/full/out.jsonl``)."""

    def write(self, text: str) -> int:
        return len(text)  # buffered, as a TextIOWrapper's is

    def flush(self) -> None:
        raise OSError(28, "No space left on device")


def test_standard_output_that_cannot_be_written_is_one_line(monkeypatch):
    """`score --input F > out.jsonl` (or run-batch) on a full disk ended in an OSError traceback,
    where `--output out.jsonl` says one line, exit 2, as usage.md promises of any output."""
    from radixflow.cli.command import UsageError
    from radixflow.cli.lines_out import write_lines

    def run(out):
        out.write("row\n")
        out.flush()

    monkeypatch.setattr(sys, "stdout", _FullStdout())
    said = r"^cannot write --output \(standard output\): No space left on device$"
    with pytest.raises(UsageError, match=said):
        write_lines("--output", None, run)


def test_the_top_level_help_names_every_command():
    for command in COMMANDS:
        assert f"{command.name} (" in DESCRIPTION, command.name


def test_the_replicas_help_says_one_replica_still_runs_on_ray_with_a_ray_address():
    # `serve --replicas 1 --ray-address A` deploys on the cluster; the help said 1 meant no Ray
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    text = next(a for a in sub.choices["serve"]._actions if a.dest == "replicas").help
    assert "no Ray" not in text or "--ray-address" in text.split("no Ray")[1][:40], text


def test_a_leftover_partial_that_is_a_broken_or_looping_link_is_replaced(tmp_path):
    """An OUTPUT.partial left as a link to a link back to it was a RuntimeError traceback from
    resolving it; one that is a dangling link was refused. Either is an earlier file that the
    run removes first, as it removes any other."""
    from radixflow.cli.lines_out import check_partial, write_lines

    given, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    given.write_text("{}\n")
    for target in ("out.jsonl.partial", "gone"):
        partial = tmp_path / "out.jsonl.partial"
        partial.unlink(missing_ok=True)
        partial.symlink_to(target)
        check_partial("--output", out, {"--input": given})
        write_lines("--output", out, lambda f: f.write("row\n"))
        assert out.read_text() == "row\n" and not partial.is_symlink()


def test_a_reader_that_leaves_a_path_to_stdout_early_ends_the_command_quietly(monkeypatch):
    """``score --input F --output /dev/stdout | head -1`` (or ``bench --json /dev/stdout | head``)
    was ``radixflow: error: cannot write ...: Broken pipe`` and exit 2, where ``--output -`` ends
    quietly, as SIGPIPE ends a shell tool (141): the two name the same standard output."""
    from radixflow.cli import app
    from radixflow.cli.lines_out import write_lines

    read, write = os.pipe()
    os.close(read)  # the reader has left
    try:
        with pytest.raises(BrokenPipeError):
            write_lines("--output", Path(f"/dev/fd/{write}"), lambda out: out.write("row\n"))
        monkeypatch.setattr(app, "_reader_left", lambda: 128 + signal.SIGPIPE)  # pytest's stdout stays
        small = ["--runner", "sim", "--groups", "1", "--candidates", "2"]
        assert main(["bench", *small, "--json", f"/dev/fd/{write}"]) == 128 + signal.SIGPIPE
    finally:
        os.close(write)


def test_the_score_summary_counts_one_context_in_the_singular():
    # it said "1 contexts, 1 candidates scored, 1 lines failed"
    from radixflow.cli.score_file import ScoreTally

    tally = ScoreTally(contexts=1, candidates=1, prompt_tokens=4, cached_tokens=0, failed=1)
    assert tally.line().startswith("1 context, 1 candidate scored, 1 line failed; 0 of 4 prompt tokens")


def test_a_bench_stopped_by_ctrl_c_keeps_its_trace_down_to_the_round_it_rolled_back(
    tmp_path, monkeypatch, capsys
):
    # the trace is written every few seconds: a sim bench interrupted in its first seconds left
    # a valid file with no event at all, not even the round the interrupt rolled back; and the
    # line said only "radixflow: interrupted", not that the trace was kept
    from radixflow.runners.sim import SimRunner

    run = SimRunner.run

    def interrupted(self, batch):
        if batch.round_index == 1:
            raise KeyboardInterrupt
        return run(self, batch)

    monkeypatch.setattr(SimRunner, "run", interrupted)
    path = tmp_path / "t.json"
    argv = ["bench", "--groups", "2", "--candidates", "3", "--context-len", "64", "--candidate-len", "16"]
    assert main([*argv, "--policy", "native", "--trace-out", str(path)]) == 130
    said = f"radixflow: interrupted; the trace, down to where the run stopped, is in {path}"
    assert capsys.readouterr().err.splitlines()[-1] == said
    events = json.loads(path.read_text())["traceEvents"]
    rounds = {e["name"]: e["args"] for e in events if e.get("cat") == "round" and e["ph"] == "X"}
    assert list(rounds) == ["round 0", "round 1 (rolled back)"]
    assert rounds["round 1 (rolled back)"]["error"] == "interrupted"


# `radixflow bench` whose second policy's run is held, once its engine has run, until a signal comes:
# the signal then lands after the first policy finished and before the second did, whatever the
# machine's speed
HELD_AT_SECOND_POLICY = """
import sys, time
from radixflow.bench import harness
from radixflow.cli.app import main
summarize = harness.summarize
def held(policy, *args):
    result = summarize(policy, *args)
    print(f"summarized {policy}", flush=True)
    if policy == "radixflow":
        time.sleep(600)
    return result
harness.summarize = held
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("sig", "said", "code"),
    [
        (signal.SIGINT, "interrupted", 130),
        (signal.SIGTERM, "terminated", 143),
        (signal.SIGHUP, "hung up", 129),
    ],
)
def test_bench_stopped_after_its_first_policy_writes_that_policys_results_marked_interrupted(
    tmp_path, sig, said, code
):
    """A Ctrl-C (or SIGTERM) during `bench` wrote neither --json nor --round-trace: the policies
    finished were lost, and an older file at the path stayed as if it were this run's. Now both
    hold the trials finished, the JSON marked "interrupted" with the trials it lacks, and the one
    line says where they are. A SIGHUP (the terminal or the ssh session closed) killed the run
    outright, as SIGTERM once did: now it is taken as a Ctrl-C too."""
    out, rounds, whole = tmp_path / "out.json", tmp_path / "rounds.jsonl", tmp_path / "whole.json"
    out.write_text('{"old": true}\n')
    rounds.write_text('{"old": true}\n')
    assert main([*SMALL_BENCH, "--runner", "sim", "--json", str(whole)]) == 0
    env = {**os.environ, "PYTHONPATH": str(Path(radixflow.__file__).parents[1])}
    argv = [sys.executable, "-c", HELD_AT_SECOND_POLICY, *SMALL_BENCH, "--runner", "sim"]
    argv += ["--json", str(out), "--round-trace", str(rounds)]
    # a SIGINT ignored where pytest runs (a background job of a shell) would be ignored by the child too
    default_int = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    proc = subprocess.Popen(argv, **pipes, text=True, env=env, preexec_fn=default_int)
    try:
        assert proc.stdout.readline() == "summarized native\n"
        assert proc.stdout.readline() == "summarized radixflow\n"  # and held there
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    where = f"1 of 3 policy runs finished, written to {out} and {rounds}"
    line = f"radixflow: {said}; {where} (marked interrupted; the same command runs them all again)"
    assert (proc.returncode, err.splitlines()[-1]) == (code, line), err
    assert "Traceback" not in err
    data = json.loads(out.read_text())
    assert data["interrupted"] is True
    assert data["unfinished"] == [{"policy": "radixflow", "trial": 1}, {"policy": "adaptive", "trial": 1}]
    uninterrupted = json.loads(whole.read_text())
    assert data["results"] == uninterrupted["results"][:1]  # the sim's clock: the same figures
    assert (data["workload"], data["config"]) == (uninterrupted["workload"], uninterrupted["config"])
    trace = [json.loads(line) for line in rounds.read_text().splitlines()]
    assert trace and {row["policy"] for row in trace} == {"native"}


def test_a_bench_hung_up_on_whose_stderr_is_gone_keeps_its_results_and_exits_129(tmp_path):
    """A hangup (an ssh session dropped) takes the terminal too: the one line could not be written,
    and that failure was a traceback (to nowhere) and exit 1 instead of the signal's 129. Now the
    line is dropped where stderr is gone; the results are written and the exit code is the hangup's."""
    out = tmp_path / "out.json"
    argv = [sys.executable, "-c", HELD_AT_SECOND_POLICY, *SMALL_BENCH, "--runner", "sim", "--json", str(out)]
    default_int = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    err_read, err_write = os.pipe()
    pipes = {"stdout": subprocess.PIPE, "stderr": err_write}
    proc = subprocess.Popen(argv, **pipes, text=True, env=checkout_env(), preexec_fn=default_int)
    os.close(err_write)
    try:
        assert proc.stdout.readline() == "summarized native\n"
        assert proc.stdout.readline() == "summarized radixflow\n"  # and held there
        os.close(err_read)  # the reader of stderr gone, before the signal
        proc.send_signal(signal.SIGHUP)
        proc.communicate(timeout=120)  # what it still writes to stdout (the table) read as it comes
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGHUP
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and [r["policy"] for r in data["results"]] == ["native"]


# the command line's own process, given a signal once its command has ended, as the interpreter
# ends (a second or two with torch loaded, after an interrupted run's one line)
SIGNAL_AS_IT_ENDS = """
import os, signal, sys
from radixflow.cli import main
sys.argv = ["radixflow", *sys.argv[1:]]
code = main()
os.kill(os.getpid(), signal.SIGINT)  # the user's second Ctrl-C: the prompt has not come back
sys.exit(code)
"""


@pytest.mark.parametrize("argv", [["generate"], ["cost", "qwen3_5-2b", "--prefill", "128"]])
def test_a_ctrl_c_as_the_process_ends_ends_it_without_a_traceback(argv):
    """A run cut short said its one line and then took a second or two to end (the interpreter
    tearing torch down); a second Ctrl-C then was a traceback under that line ('Exception ignored
    in: <module 'threading'> ... KeyboardInterrupt'). Now, once the command has ended, a Ctrl-C
    or a SIGTERM ends the process at once, by the signal, as it ends any other tool."""
    # a SIGINT ignored where pytest runs (a background job of a shell) would be ignored by the child too
    default_int = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_AS_IT_ENDS, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=checkout_env(),
        preexec_fn=default_int,
    )
    assert done.returncode == -signal.SIGINT, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr


def test_bench_that_crashes_in_its_second_policy_keeps_the_first_policys_results(tmp_path, monkeypatch):
    """A crash (not a Ctrl-C) in a policy's run lost the trials already finished: --json and
    --round-trace were never written. Now they hold them, the JSON marked cut short with the error
    that cut it, and the error itself still ends the command (a bug's traceback, with a note)."""
    from radixflow.bench import harness

    out, rounds = tmp_path / "out.json", tmp_path / "rounds.jsonl"
    summarize = harness.summarize

    def crashing(policy, *args):
        if policy == "radixflow":
            raise RuntimeError("boom in the second policy")
        return summarize(policy, *args)

    monkeypatch.setattr(harness, "summarize", crashing)
    with pytest.raises(RuntimeError, match="boom") as crash:
        main([*SMALL_BENCH, "--runner", "sim", "--json", str(out), "--round-trace", str(rounds)])
    assert f"1 of 3 policy runs finished, written to {out} and {rounds}" in " ".join(crash.value.__notes__)
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and data["error"] == "RuntimeError: boom in the second policy"
    assert [r["policy"] for r in data["results"]] == ["native"]
    assert data["unfinished"] == [{"policy": "radixflow", "trial": 1}, {"policy": "adaptive", "trial": 1}]
    assert {json.loads(line)["policy"] for line in rounds.read_text().splitlines()} == {"native"}


def test_a_second_ctrl_c_as_a_bench_cut_short_writes_its_results_does_not_lose_them(
    tmp_path, monkeypatch, capsys
):
    """A Ctrl-C pressed twice (the second as the run cut short by the first wrote --json and
    --round-trace, a synced write each) stopped those writes: the policy runs finished were
    lost, the old files left, and the line did not say so. The run is stopping already: a
    second Ctrl-C (or SIGTERM) while its results go out changes nothing now."""
    from radixflow.bench import harness
    from radixflow.cli import bench_outputs

    out, rounds = tmp_path / "out.json", tmp_path / "rounds.jsonl"
    summarize, write_whole = harness.summarize, bench_outputs.write_whole

    def stopped(policy, *args):
        if policy == "radixflow":
            raise KeyboardInterrupt  # the first Ctrl-C
        return summarize(policy, *args)

    def tapped_again(path, text):
        signal.raise_signal(signal.SIGINT)  # the second, as each output goes out
        write_whole(path, text)

    monkeypatch.setattr(harness, "summarize", stopped)
    monkeypatch.setattr(bench_outputs, "write_whole", tapped_again)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's, as a shell starts it
    try:
        code = main([*SMALL_BENCH, "--runner", "sim", "--json", str(out), "--round-trace", str(rounds)])
    finally:
        signal.signal(signal.SIGINT, handler)
    assert code == 130
    assert f"1 of 3 policy runs finished, written to {out} and {rounds}" in capsys.readouterr().err
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and [r["policy"] for r in data["results"]] == ["native"]
    assert {json.loads(line)["policy"] for line in rounds.read_text().splitlines()} == {"native"}


def test_score_rows_are_written_in_input_order_as_each_context_finishes():
    """A batch's rows were written once the whole batch returned; now each as its context
    finishes, one finished before an earlier line's held back until that one is written."""
    import io

    from radixflow.cli.score_file import ScoreJob, run_jobs

    jobs = [ScoreJob(n, f"q{n}", "ctx", [" a"]) for n in (1, 2, 3)]
    out = io.StringIO()
    seen: list[int] = []

    def score_many(contexts, candidates, progress, on_context):
        for i in (1, 0, 2):  # the second context finishes first
            on_context(i, [])
            seen.append(out.getvalue().count("\n"))
        return [[], [], []]

    run_jobs(
        jobs, score_many, lambda context, candidates, add_special_tokens: ([1], [[2]]), out, lambda d, t: None
    )
    assert seen == [0, 2, 3]
    assert [json.loads(line)["line"] for line in out.getvalue().splitlines()] == [1, 2, 3]


LEFT_BEHIND = """
import signal, sys, threading
import torch
import radixflow.cli.serve as serve
from radixflow.cli.app import main

class Server:  # a server that left its engine thread behind, still in torch
    engine_left = True

    def run(self, sockets=None):
        a = torch.randn(512, 512)
        threading.Thread(target=lambda: [a @ a for _ in iter(int, 1)], daemon=True).start()
        if {sig}:
            signal.raise_signal({sig})  # taken as a Ctrl-C
        raise KeyboardInterrupt

serve.run = lambda args, console: serve.serve_until_stopped(Server(), None)
sys.exit(main(["serve", "llama-tiny"]))
"""


@pytest.mark.parametrize(("sig", "said"), [(0, "interrupted"), (signal.SIGTERM, "terminated")])
def test_serve_exits_with_one_line_when_it_left_its_stuck_engine_behind(sig, said):
    # the server answered the stuck engine's requests and returned, but the interpreter's exit
    # then ran under the engine thread: one in torch aborts it ("terminate called", exit 134)
    pytest.importorskip("torch")
    env = checkout_env()
    script = LEFT_BEHIND.format(sig=int(sig))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == (128 + sig if sig else 130), done.stderr
    assert done.stderr.splitlines() == [
        f"radixflow: {said}; the engine was stuck in a round: its requests were answered with 503 "
        "and it was left behind"
    ]


@pytest.mark.parametrize("to_stdout", [[], ["--json", "-"]], ids=["table", "json"])
def test_a_bench_whose_reader_leaves_early_still_writes_its_output_files(tmp_path, to_stdout):
    """``radixflow bench --json out.json | head``: the reader left while the table (or the
    ``--json -``) was printed, and the run ended (141) before ``--round-trace`` and
    ``--trace-out`` were written, so the finished run's results were lost. The files are written
    all the same."""
    env = checkout_env()
    files = {"--json": tmp_path / "out.json", "--round-trace": tmp_path / "rounds.jsonl"}
    files["--trace-out"] = tmp_path / "trace.json"
    argv = ["bench", "--runner", "sim", "--groups", "1", "--candidates", "2", *to_stdout]
    argv += [a for flag, path in files.items() if flag not in to_stdout for a in (flag, str(path))]
    proc = run_reader_gone(argv, env)  # the reader has left before the table is printed
    assert proc.returncode == 141 and "Traceback" not in proc.stderr, proc.stderr
    if not to_stdout:
        assert len(json.loads(files["--json"].read_text())["results"]) == 3
    assert files["--round-trace"].read_text().count("\n") >= 3
    assert json.loads(files["--trace-out"].read_text())["traceEvents"]


def _screen(data: str) -> list[str]:
    """The lines a terminal shows after ``data``: text, newlines, carriage returns, erase-line
    and cursor-up sequences (the ones rich's live bar uses); other escape sequences ignored."""
    screen, row, col = [""], 0, 0
    for token in re.split(r"(\x1b\[[0-9;?]*[A-Za-z]|\r|\n)", data):
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
            screen += [""] * (row + 1 - len(screen))
        elif token.startswith("\x1b["):
            if token[-1] == "K":
                screen[row] = "" if token[2:-1] == "2" else screen[row][:col]
            elif token[-1] == "A":
                row = max(0, row - int(token[2:-1] or 1))
        elif token:
            line = screen[row].ljust(col)
            screen[row], col = line[:col] + token + line[col + len(token) :], col + len(token)
    return screen


def test_run_batch_answers_to_a_terminal_are_not_written_into_its_progress_bar(tmp_path):
    """`radixflow run-batch M -i F` on a terminal: the answers went to standard output behind
    rich's live bar, not through it, so a line began with the bar ('requests ━━━ 2% {"id": ...')."""
    pytest.importorskip("httpx")
    line = {"method": "POST", "url": "/v1/completions", "body": {"model": "qwen3_5-tiny", "prompt": "hi"}}
    given = tmp_path / "in.jsonl"
    given.write_text("".join(json.dumps({"custom_id": f"r{i}", **line}) + "\n" for i in range(4)))
    main_end, terminal = os.openpty()
    env = checkout_env() | {"TERM": "xterm", "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "radixflow.cli", "run-batch", "qwen3_5-tiny", "-i", str(given)],
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        env=env,
    )
    os.close(terminal)
    shown = b""
    with contextlib.suppress(OSError):  # EIO once the command has ended
        while chunk := os.read(main_end, 65536):
            shown += chunk
    os.close(main_end)
    assert proc.wait(timeout=120) == 0, shown
    answers = [row for row in _screen(shown.decode()) if '"custom_id"' in row]
    assert len(answers) == 4 and all(row.startswith('{"id": "batch_req_') for row in answers), answers
