"""Workload specs and traces at their edges: sizes past a float's range, line numbers."""

from __future__ import annotations

import io
import re

import pytest

from radixflow.problems import shown
from radixflow.workloads.candidates import MAX_WORKLOAD_REQUESTS, WorkloadSpec
from radixflow.workloads.jsonl_trace import TraceError, read_trace

HUGE = 10**400  # past a float's range: an integer a TOML key or a flag may still spell


@pytest.mark.parametrize(
    "key, refused",
    [("groups", True), ("candidates", True), ("independent", True), ("context_len", True),
     ("burst_size", False), ("seed", False)],  # a burst of them all at t=0, a seed: fine
)  # fmt: skip
def test_an_integer_past_a_float_s_range_is_a_problem_not_an_overflow(key, refused):
    # math.isfinite(10**400) raised OverflowError: a traceback from `bench --groups` and a TOML cell
    problem = WorkloadSpec(**{key: HUGE, "arrival": "bursty"}).problem()
    assert (problem.param, "too large" in problem.message) == (key, True) if refused else problem is None


def test_a_huge_group_count_is_refused_as_too_large():
    problem = WorkloadSpec(groups=HUGE).problem()
    assert problem is not None and problem.param == "groups" and "too large" in problem.message


@pytest.mark.parametrize("candidates", [HUGE, 10**20], ids=["1e400", "1e20"])
def test_a_skewed_workload_of_far_too_many_candidates_is_refused_before_its_groups_are_sized(candidates):
    # groups x candidates shares were computed as floats: OverflowError past 1e308, and below it a
    # count rounded in the message (800000000000000090112 requests for 8 x 10**20)
    problem = WorkloadSpec(candidates=candidates, skew=1.0).problem()
    assert problem is not None and problem.param == "candidates"
    assert f"at least {shown(8 * candidates - 4)} requests" in problem.message
    assert f"the limit is {MAX_WORKLOAD_REQUESTS} requests" in problem.message


@pytest.mark.parametrize("groups", [str(HUGE), "9" * 4300], ids=["1e400", "4300 digits"])
def test_bench_refuses_a_huge_group_count_in_one_short_line(capsys, groups):
    # 4300 digits: the message's request count, 8 x groups, was past what str() converts (ValueError)
    from radixflow.cli import main

    assert main(["bench", "--runner", "sim", "--groups", groups]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "--groups" in err and len(err) < 400


@pytest.mark.parametrize("skew", ["0.0", "1.0"])
def test_an_independent_share_beside_far_too_many_candidates_is_refused_in_one_line(tmp_path, skew):
    # the share's count, share x groups x candidates, was a float: OverflowError past 1e308
    from radixflow.experiments.config import ExperimentConfigError
    from radixflow.experiments.config_parse import load_config

    path = tmp_path / "e.toml"
    path.write_text(
        'name = "e"\npolicies = ["native"]\nseeds = [0]\n[defaults]\nrunner = "sim"\nmodel = "qwen3_5-2b"\n'
        f"independent_share = 0.5\n[defaults.workload]\ncandidates = {HUGE}\nskew = {skew}\n"
    )
    with pytest.raises(ExperimentConfigError) as e:
        load_config(path)
    assert ": defaults.workload.candidates: workload too large" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("key", ["rate", "skew"])
def test_a_number_key_given_an_integer_past_a_float_s_range_is_not_finite(key):
    # a TOML `rate = 1000...0` (401 digits) passed, then raised OverflowError drawing its gaps
    problem = WorkloadSpec(**{key: HUGE, "arrival": "poisson"}).problem()
    assert problem is not None and problem.param == key
    assert problem.message.startswith("must be a finite number, got 100000000000...")


def test_a_byte_not_utf8_on_a_line_ended_by_a_lone_carriage_return_names_its_own_line(tmp_path):
    # lines ended by "\r" are split after decoding: the byte on the second was said to be on
    # the first, at a column counted from the first's start (33)
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"id": "a", "prompt": [1]}\r{"id": "\xff", "prompt": [2]}\r')
    with pytest.raises(TraceError, match=r"t\.jsonl:2: not UTF-8 text \(byte 0xff at column 9\)"):
        read_trace(path)


def test_usage_md_gives_every_workload_key_its_default_and_every_kind():
    # the keys a TOML cell takes beyond bench's flags (kind, skew, shared_prefix_len, burst_size)
    # were named on no page a user reads
    from dataclasses import fields
    from pathlib import Path

    from radixflow.workloads.candidates import KINDS

    text = (Path(__file__).parents[2] / "docs" / "usage.md").read_text()
    start = text.index("A generated workload (`radixflow.workloads.candidates.WorkloadSpec`)")
    paragraph = " ".join(text[start : text.index("\n\n", start)].split())
    for f in fields(WorkloadSpec):
        if f.name not in ("vocab_size", "seed"):  # the model's, the run's
            default = f"`{f.default}`" if isinstance(f.default, str) else f"{f.default:g}"
            assert f"`{f.name}` ({default}" in paragraph, f.name
    assert all(f"`{kind}`" in paragraph for kind in KINDS)


def test_bench_refuses_a_malformed_trace_before_the_model_is_resolved(tmp_path, monkeypatch, capsys):
    # the trace was read once the model was resolved: a zoo model built (12 s on CPU) before a
    # bad line was refused, which the docs call bad input, refused before any work
    import radixflow.cli.bench as bench
    from radixflow.cli import main

    monkeypatch.setattr(bench, "plan_engine", lambda _: pytest.fail("the model was resolved first"))
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": "hello"}\n')
    assert main(["bench", "--trace", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"radixflow: error: --trace {path}:1: 'prompt' must be")


def test_a_burst_larger_than_a_float_holds_arrives_at_once():
    # its spec passed, then the gap between bursts, burst_size / rate, raised OverflowError
    from radixflow.workloads.build import build_workload

    work = build_workload(WorkloadSpec(groups=1, candidates=3, arrival="bursty", burst_size=HUGE))
    assert [r.arrival_s for r in work.requests] == [0.0] * 3


def test_bench_refuses_an_unknown_model_before_reading_a_trace(tmp_path, monkeypatch, capsys):
    # the trace is read before the model is resolved; a misspelt model is still refused first (a
    # trace of 2**20 requests takes minutes to read)
    import radixflow.cli.bench_setup as bench_setup
    from radixflow.cli import main

    monkeypatch.setattr(bench_setup, "read_trace", lambda *_: pytest.fail("the trace was read first"))
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": [1]}\n')
    assert main(["bench", "--runner", "sim", "--model", "no-such-model", "--trace", str(path)]) == 2
    assert "--model" in capsys.readouterr().err


def test_a_byte_order_mark_inside_a_trace_says_what_it_is(tmp_path):
    # two traces saved with a BOM and joined (cat a b > t): "not valid JSON (Unexpected UTF-8 BOM
    # (decode using utf-8-sig))", advice for Python code, not for a trace's reader
    path = tmp_path / "t.jsonl"
    row = '\ufeff{"id": "%s", "prompt": [1]}\n'
    path.write_text(row % "a" + row % "b", encoding="utf-8")
    said = "t.jsonl:2: a UTF-8 byte order mark starts this line; one may only start the file (files joined?)"
    with pytest.raises(TraceError, match=re.escape(said)):
        read_trace(path)


def test_an_arrival_of_minus_zero_is_read_as_zero(tmp_path):
    # -0.0 is not below 0, so it passed, and --write-trace wrote it back as "arrival_s": -0.0
    from radixflow.workloads.jsonl_trace import trace_text

    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": [1], "arrival_s": -0.0}\n')
    assert '"arrival_s": 0.0,' in trace_text(read_trace(path))


def test_a_trace_of_lone_carriage_returns_is_read_a_line_at_a_time(tmp_path, monkeypatch):
    # a file's lines were read at newlines only, then split at carriage returns: a trace whose
    # lines end in "\r" alone was one line, read whole into memory before its first was checked
    import radixflow.workloads.jsonl_trace as jsonl_trace

    data = b'{"id": "a", "prompt": "text"}\r' + b'{"id": "b", "prompt": [1]}\r' * 100_000
    raw = _CountingReader(data)
    monkeypatch.setattr(jsonl_trace, "open", lambda *_: io.BufferedReader(raw), raising=False)
    with pytest.raises(TraceError, match=r"t\.jsonl:1: 'prompt' must be"):
        read_trace(tmp_path / "t.jsonl")
    assert raw.given < len(data) // 10


class _CountingReader(io.RawIOBase):
    """A raw binary stream over ``data`` that counts the bytes it has given."""

    def __init__(self, data: bytes) -> None:
        self.stream, self.given = io.BytesIO(data), 0

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = self.stream.readinto(buffer)
        self.given += n
        return n

    def readable(self) -> bool:
        return True


def test_a_bursty_span_past_the_arrival_limit_says_its_bursts_and_exact_span():
    # it read "arrive over up to 4.72e+09 s": "up to" is the Poisson bound (twice its mean), a
    # bursty span is exact, and three digits could print a span just past the limit as below it
    sizes = {"groups": 1, "candidates": 10_000, "context_len": 1, "candidate_len": 1}
    problem = WorkloadSpec(**sizes, arrival="bursty", burst_size=1000, rate=2**-19).problem()
    assert problem is not None and problem.param == "rate"
    said = "10000 requests in bursts of 1000 at 1.90735e-06 requests/s arrive over 4718592000 s;"
    assert problem.message.startswith(said)


def test_a_trace_is_parsed_without_cycle_collection_and_leaves_it_on(tmp_path, monkeypatch):
    # each line's objects (its row, prompt and request) set off the cycle collector, which walks
    # every request read so far: a quarter of a 200k-line trace's 10 s load; none are cycles
    import gc

    import radixflow.workloads.jsonl_trace as jsonl_trace

    seen, parse = [], jsonl_trace._parse
    monkeypatch.setattr(jsonl_trace, "_parse", lambda *a: seen.append(gc.isenabled()) or parse(*a))
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": [1]}\n{"id": "b", "prompt": "x"}\n')
    with pytest.raises(TraceError, match=r"t\.jsonl:2"):
        read_trace(path)
    assert seen == [False, False] and gc.isenabled()
