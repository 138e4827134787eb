"""`radixflow bench` end to end on the sim runner, plus its error handling."""

from __future__ import annotations

import json

import pytest

from radixflow.cli import main


def test_bench_defaults_meet_the_acceptance_figures(tmp_path, capsys):
    out = tmp_path / "out.json"
    assert main(["bench", "--runner", "sim", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data) == {"workload", "config", "results"}
    native, flow = data["results"]
    assert (native["policy"], flow["policy"]) == ("native", "radixflow")
    for r in (native, flow):
        assert r["completed"] == r["requests"] == 64
        assert r["rounds"] >= r["rounds_lower_bound"]
    assert flow["rounds"] < native["rounds"]
    assert abs(flow["reuse_rate"] - native["reuse_rate"]) <= 0.005
    assert flow["outputs_sha256"] == native["outputs_sha256"]
    assert "worker rounds" in capsys.readouterr().out


def test_full_attention_control_gives_identical_rounds(tmp_path):
    out = tmp_path / "out.json"
    assert main(["bench", "--model", "qwen3-4b", "--json", str(out)]) == 0
    native, flow = json.loads(out.read_text())["results"]
    assert native["rounds"] == flow["rounds"]
    assert native["bubble_tokens"] == flow["bubble_tokens"] == 0


def test_trace_write_then_replay_gives_same_results(tmp_path):
    trace, a, b = tmp_path / "t.jsonl", tmp_path / "a.json", tmp_path / "b.json"
    args = ["bench", "--groups", "3", "--candidates", "4", "--arrival", "poisson", "--rate", "200"]
    assert main([*args, "--write-trace", str(trace), "--json", str(a)]) == 0
    assert main(["bench", "--trace", str(trace), "--json", str(b), "--round-trace", str(tmp_path / "r")]) == 0
    res_a, res_b = json.loads(a.read_text())["results"], json.loads(b.read_text())["results"]
    assert [r["rounds"] for r in res_a] == [r["rounds"] for r in res_b]
    assert [r["outputs_sha256"] for r in res_a] == [r["outputs_sha256"] for r in res_b]
    rounds = [json.loads(x) for x in (tmp_path / "r").read_text().splitlines()]
    assert {r["policy"] for r in rounds} == {"native", "radixflow"}


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["bench", "--token-budget", "8", "--block-size", "16"], "smaller than one block"),
        (["bench", "--groups", "0"], "empty workload"),
        (["bench", "--rate", "-3"], "must be positive"),
        (["bench", "--policy", "greedy"], "invalid choice"),
        (["bench", "--model", "gpt-9"], "unknown sim model"),
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
    assert main(["bench", "--round-overhead-ms", "40", "--tflops", "100", "--json", str(b)]) == 0
    base, slow = json.loads(a.read_text()), json.loads(b.read_text())
    assert slow["config"]["hardware"]["round_overhead_s"] == 0.04
    assert slow["results"][0]["makespan_s"] > base["results"][0]["makespan_s"]
    assert slow["results"][0]["rounds"] == base["results"][0]["rounds"]
