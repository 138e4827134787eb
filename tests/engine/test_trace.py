"""The dependency trace (engine/trace.py): Chrome/Perfetto trace JSON checked against the Trace
Event Format (required fields and types, µs timestamps, flows that pair up and bind to slices)."""

from __future__ import annotations

import builtins
import errno
import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from radixflow.cli import main
from radixflow.engine.trace_file import TraceFile
from radixflow.options import EngineOptions, plan_engine
from radixflow.problems import ProblemError
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.sampling import SamplingParams
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

PHASES = {"X", "i", "s", "f", "C", "M"}


def requests(groups: int = 2, candidates: int = 3) -> list[Request]:
    spec = WorkloadSpec(groups=groups, candidates=candidates, context_len=64, candidate_len=16)
    return build_workload(spec).requests


def check_format(data: Any) -> list[dict[str, Any]]:
    """The Trace Event Format's rules for the events this writer emits; returns the events."""
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    assert data["displayTimeUnit"] in ("ms", "ns")
    events = data["traceEvents"]
    for e in events:
        assert e["ph"] in PHASES, e
        assert isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert isinstance(e.get("args", {}), dict), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name"), e
            continue
        assert isinstance(e["ts"], int | float) and e["ts"] >= 0, e  # µs
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0, e
        if e["ph"] == "i":
            assert e["s"] in ("g", "p", "t"), e
        if e["ph"] == "C":
            assert all(isinstance(v, int | float) for v in e["args"].values()), e
    flows: dict[Any, list[dict[str, Any]]] = {}
    for e in events:
        if e["ph"] in ("s", "f"):
            assert isinstance(e["id"], int) and e["cat"], e
            flows.setdefault((e["cat"], e["name"], e["id"]), []).append(e)
    for pair in flows.values():  # every flow id starts once and finishes once, later
        assert sorted(e["ph"] for e in pair) == ["f", "s"], pair
        start, finish = sorted(pair, key=lambda e: e["ph"], reverse=True)
        assert start["ts"] <= finish["ts"] and finish["bp"] == "e"
        assert enclosing(events, start) and enclosing(events, finish)
    return events


def enclosing(events: list[dict[str, Any]], at: dict[str, Any]) -> dict[str, Any] | None:
    """The complete event on ``at``'s track whose span holds ``at`` strictly (what a flow binds to)."""
    for e in events:
        same_track = e["ph"] == "X" and (e["pid"], e["tid"]) == (at["pid"], at["tid"])
        if same_track and e["ts"] < at["ts"] < e["ts"] + e["dur"]:
            return e
    return None


def track_names(events: list[dict[str, Any]]) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}


@pytest.fixture
def traced(tmp_path: Path):
    """A sim run of two contexts × three candidates under `native`, traced, plus its engine."""
    path = tmp_path / "trace.json"
    setup = plan_engine(EngineOptions(model="qwen3_5-2b", trace_out=str(path))).build()
    engine = setup.engine(policy="native")
    engine.scheduler.note("promote", "g0c0", dependents=2, why=float("nan"))  # goes into round 0
    engine.run(requests())
    engine.flush_events()
    return json.loads(path.read_text()), engine


def test_a_small_run_gives_every_kind_of_event_in_the_trace_event_format(traced):
    data, engine = traced
    events = check_format(data)
    assert data["otherData"]["clock"] == "sim" and data["otherData"]["time_unit"] == "us"
    names = Counter((e["ph"], e["name"]) for e in events)
    for kind in [("X", "prefill"), ("X", "parked"), ("X", "queued"), ("i", "woken"), ("i", "bubble")]:
        assert names[kind] > 0, kind
    assert names[("i", "arrived")] == names[("i", "finished")] == 6
    assert names[("X", "round 0")] == 1 and names[("C", "round")] == len(engine.rounds)
    (promote,) = [e for e in events if e["name"] == "promote"]
    assert promote["args"] == {"dependents": 2, "why": "nan"} and promote["cat"] == "decision"
    rounds = [e for e in events if e.get("cat") == "round" and e["ph"] == "X"]
    for e, record in zip(rounds, engine.rounds, strict=True):  # µs of the sim clock
        assert "predicted_us" not in e["args"]  # the sim's prediction is its charge: not shown
        assert e["ts"] == pytest.approx(record.start_s * 1e6) and e["dur"] == pytest.approx(
            record.duration_s * 1e6
        )


def test_a_flow_runs_from_the_producers_round_to_its_consumers(traced):
    data, _ = traced
    events = data["traceEvents"]
    tracks = track_names(events)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    pairs = {
        (tracks[(s["pid"], s["tid"])], tracks[(e["pid"], e["tid"])])
        for e in events
        if e["ph"] == "f"
        for s in [starts[e["id"]]]
    }
    assert ("g0c0", "g0c1") in pairs and ("g1c0", "g1c2") in pairs
    # the flow leaves g0c0's chunk in the round that computed the checkpoint, and lands in the
    # chunk g0c1 ran from it, after the round in which g0c1 was parked on g0c0
    flow = next(e for e in events if e["ph"] == "f" and tracks[(e["pid"], e["tid"])] == "g0c1")
    producer, consumer = enclosing(events, starts[flow["id"]]), enclosing(events, flow)
    assert producer is not None and consumer is not None
    assert producer["name"] == consumer["name"] == "prefill" and consumer["args"]["start"] == 64
    parked = [e for e in events if e["name"] == "parked" and tracks[(e["pid"], e["tid"])] == "g0c1"]
    assert parked and parked[0]["args"]["producer"] == "g0c0"
    assert producer["ts"] <= parked[0]["ts"] < consumer["ts"]


def test_a_follower_shows_as_a_follow_instant_naming_its_producer_in_the_producers_round(tmp_path):
    path = tmp_path / "trace.json"
    setup = plan_engine(EngineOptions(model="qwen3_5-2b", trace_out=str(path))).build()
    engine = setup.engine(policy="adaptive")
    engine.run(requests())
    engine.flush_events()
    events = check_format(json.loads(path.read_text()))
    tracks = track_names(events)
    follows = {tracks[(e["pid"], e["tid"])]: e for e in events if e["name"] == "follow"}
    assert set(follows) == {"g0c1", "g0c2", "g1c1", "g1c2"}
    assert follows["g0c1"]["args"] == {"producer": "g0c0", "tokens": 64}
    assert not [e for e in events if e["name"] == "parked"]  # nobody waited a round
    # a flow arrow from each producer's chunk to its followers', within the round
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    pairs = {
        (tracks[(starts[e["id"]]["pid"], starts[e["id"]]["tid"])], tracks[(e["pid"], e["tid"])])
        for e in events
        if e["ph"] == "f"
    }
    assert pairs == {("g0c0", "g0c1"), ("g0c0", "g0c2"), ("g1c0", "g1c1"), ("g1c0", "g1c2")}
    # followers run in their producer's round: both contexts take one round between them
    rounds = [e for e in events if e.get("cat") == "round" and e["ph"] == "X"]
    assert len(rounds) == len(engine.rounds) == 1


def test_a_chunks_checkpoints_are_those_it_placed_in_the_cache_not_its_own_state_between_chunks(tmp_path):
    # every save was listed: a prefill chunk's working-slot save at its end beside a checkpoint
    # there ([32, 64, 64]) and every decode step's ([101], [102]), though no checkpoint is
    # placed there; the flows still run from whoever wrote a slot
    path = tmp_path / "trace.json"
    setup = plan_engine(EngineOptions(model="qwen3_5-2b", token_budget=64, trace_out=str(path))).build()
    engine = setup.engine(policy="adaptive")
    engine.run([Request("a", tuple(range(1, 101)), sampling=SamplingParams(max_tokens=4, ignore_eos=True))])
    engine.flush_events()
    chunks = [e for e in check_format(json.loads(path.read_text())) if e.get("cat") == "chunk"]
    placed = [(c["name"], c["args"]["end"], c["args"]["checkpoints"]) for c in chunks]
    assert placed == [("prefill", 64, [32, 64]), ("prefill", 100, [96])] + [
        ("decode", end, []) for end in (101, 102, 103)
    ]


def test_a_decode_steps_rolling_tail_save_is_its_own_state_not_a_checkpoint_it_places(tmp_path):
    # a decode step ending on a block boundary listed its rolling tail save as a checkpoint placed
    # in the cache ([112], then [128], each overwriting the last in one slot, none matchable
    # until the request ends); the next turn resuming the kept tail still has its flow from the
    # step that wrote it
    path = tmp_path / "trace.json"
    setup = plan_engine(EngineOptions(model="qwen3_5-2b", token_budget=128, trace_out=str(path))).build()
    engine = setup.engine(policy="native")
    first = Request("a", tuple(range(1, 101)), sampling=SamplingParams(max_tokens=30, ignore_eos=True))
    engine.run([first])
    turn = Request("b", first.prompt + tuple(first.output) + (7, 8, 9))
    engine.run([turn])
    engine.flush_events()
    events = check_format(json.loads(path.read_text()))
    chunks = [e for e in events if e.get("cat") == "chunk"]
    decodes = [c["args"]["checkpoints"] for c in chunks if c["name"] == "decode"]
    assert len(decodes) == 29 and not any(decodes)
    (resumed,) = [c for c in chunks if track_names(events)[(c["pid"], c["tid"])] == "b"]
    assert resumed["args"]["start"] == 128
    (start,) = [e for e in events if e["ph"] == "s"]
    assert enclosing(events, start)["args"]["end"] == 128  # the step that saved it


def test_the_file_is_valid_json_after_every_flush_and_empty_flushes_are_harmless(tmp_path):
    path = tmp_path / "t.json"
    trace = TraceFile(path, {"clock": "sim"})
    trace.flush()
    recorder = trace.recorder("a")
    recorder.arrived(Request("r1", (1, 2, 3)))
    trace.flush()
    first = json.loads(path.read_text())["traceEvents"]
    trace.flush()
    recorder.arrived(Request("r2", (1, 2)))
    trace.flush()
    second = json.loads(path.read_text())["traceEvents"]
    assert len(second) > len(first) > 0 and second[: len(first)] == first


def test_an_older_trace_is_left_as_it_was_until_a_run_records_an_event(tmp_path):
    # opening the trace emptied the file: a run refused before it ran (a prompt over the model's
    # context) lost the user's previous trace for a trace of nothing
    path = tmp_path / "t.json"
    path.write_bytes(b"the previous trace\n")
    trace = TraceFile(path, {"clock": "sim"})
    recorder = trace.recorder("a")  # an engine built: its process and track names wait
    trace.flush()
    assert path.read_bytes() == b"the previous trace\n" and not trace.written
    recorder.arrived(Request("r1", (1, 2, 3)))
    trace.flush()
    data = json.loads(path.read_text())
    assert trace.written and data["otherData"] == {"clock": "sim"}
    names = {e["name"] for e in check_format(data)}
    assert names == {"process_name", "process_sort_index", "thread_name", "arrived"}


def test_a_first_write_cut_short_leaves_the_older_trace_whole(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_bytes(b"the previous trace\n")
    trace = TraceFile(path, {"clock": "sim"})
    trace.recorder("a").arrived(Request("r1", (1, 2, 3)))

    def interrupted(done, target):
        raise KeyboardInterrupt

    monkeypatch.setattr("radixflow.files.synced_into_place", interrupted)
    with pytest.raises(KeyboardInterrupt):
        trace.flush()
    assert path.read_bytes() == b"the previous trace\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left beside it


def test_a_trace_that_could_not_be_written_is_refused_as_it_is_opened(tmp_path):
    # checked without opening the file (which would empty an older one)
    with pytest.raises(FileNotFoundError):
        TraceFile(tmp_path / "missing" / "t.json", {})
    if os.geteuid() == 0:
        pytest.skip("root writes a read-only file")
    locked = tmp_path / "locked.json"
    locked.write_text("kept")
    locked.chmod(0o444)
    with pytest.raises(PermissionError):
        TraceFile(locked, {})
    assert locked.read_text() == "kept"


def test_engines_of_one_trace_are_processes_apart(tmp_path):
    path = tmp_path / "bench.json"
    argv = ["bench", "--groups", "2", "--candidates", "2", "--context-len", "32", "--candidate-len", "16"]
    assert main([*argv, "--policy", "native", "--policy", "radixflow", "--trace-out", str(path)]) == 0
    events = check_format(json.loads(path.read_text()))
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(processes.values()) == ["native · branch", "radixflow · branch"]
    assert len({e["pid"] for e in events}) == 2


@pytest.mark.parametrize("bad", ["missing-dir/t.json", "."])
def test_a_path_that_cannot_be_written_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, bad):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--groups", "1", "--trace-out", bad]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("radixflow: error: ") and "--trace-out" in line
    with pytest.raises(ProblemError, match="trace_out: "):
        EngineOptions(trace_out=bad).check()


def test_without_a_trace_nobody_listens(tmp_path):
    engine = plan_engine(EngineOptions(model="qwen3_5-2b")).build().engine()
    assert engine.events is None and engine.scheduler.events is None
    engine.scheduler.note("promote", "x")  # a policy may always report; nobody hears it


def test_a_request_refused_at_submit_has_its_track_arrived_and_finished_with_the_refusal(tmp_path):
    path = tmp_path / "trace.json"
    setup = plan_engine(EngineOptions(model="qwen3_5-2b", trace_out=str(path))).build()
    engine = setup.engine(policy="native")
    refused = Request("huge", (1, 2, 3), arrival_s=0.5, sampling=SamplingParams(max_tokens=10**9))
    engine.run([*requests(1, 2), refused])
    engine.flush_events()
    assert refused.status is RequestStatus.FAILED and refused.error
    events = check_format(json.loads(path.read_text()))
    tracks = track_names(events)
    mine = [e for e in events if e["ph"] != "M" and tracks.get((e["pid"], e["tid"])) == "huge"]
    assert [e["name"] for e in mine] == ["arrived", "finished"]
    assert mine[0]["ts"] == mine[1]["ts"] == pytest.approx(0.5e6)
    assert mine[1]["args"] == {"error": refused.error}


@pytest.mark.parametrize(
    "prompt", [5, iter((1, 2)), "hello world", {"a": 1}], ids=["int", "iterator", "text", "dict"]
)
def test_a_prompt_of_no_length_refused_at_submit_is_traced_not_raised(tmp_path, prompt):
    # untraced, such a prompt fails its request alone; traced, the `arrived` event took its
    # length and submit raised a bare "object of type 'int' has no len()"; a text's length was
    # its characters, a dict's its keys, given as its prompt_tokens
    path = tmp_path / "trace.json"
    engine = plan_engine(EngineOptions(model="qwen3_5-2b", trace_out=str(path))).build().engine()
    bad = Request("bad", prompt)
    engine.run([bad, *requests(1, 2)])
    engine.flush_events()
    assert bad.status is RequestStatus.FAILED and bad.error.startswith("prompt: must be a list of token ids")
    events = check_format(json.loads(path.read_text()))
    tracks = track_names(events)
    mine = [e for e in events if e["ph"] != "M" and tracks.get((e["pid"], e["tid"])) == "bad"]
    assert [(e["name"], e["args"]) for e in mine] == [
        ("arrived", {"prompt_tokens": None}),
        ("finished", {"error": bad.error}),
    ]


def test_a_write_the_disk_cuts_short_leaves_the_file_valid_json_with_the_events_before_it(
    tmp_path, monkeypatch
):
    # the disk filled part way through a flush: the file ended in half an event, no closing
    # brackets, and no viewer could open what had been written before
    path = tmp_path / "t.json"
    trace = TraceFile(path, {"clock": "sim"})
    recorder = trace.recorder("a")
    recorder.arrived(Request("r1", (1, 2, 3)))
    trace.flush()
    before = json.loads(path.read_text())["traceEvents"]

    def full_disk() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("radixflow.engine.trace_file.open", cut_short(full_disk), raising=False)
    for i in range(20):
        recorder.arrived(Request(f"more{i}", (1, 2, 3)))
    with pytest.raises(OSError):
        trace.flush()
    assert trace.error is not None
    assert json.loads(path.read_text())["traceEvents"] == before


def test_the_docs_name_every_arg_of_a_round_chunk_and_finished_event(tmp_path, monkeypatch):
    # docs/trace.md left out the rolled-back round (its name and `error`), `predicted_us`, a
    # chunk's `sample` and `aborted` on `finished`
    from radixflow.runners.sim import SimRunner

    run = SimRunner.run

    def fails_once(self, batch):
        if batch.round_index == 0:
            raise RuntimeError("boom")
        return run(self, batch)

    monkeypatch.setattr(SimRunner, "run", fails_once)
    path = tmp_path / "trace.json"
    setup = plan_engine(EngineOptions(model="qwen3_5-2b", trace_out=str(path))).build()
    engine = setup.engine(policy="native")
    work = requests()
    for r in work:
        engine.submit(r)
    engine.step()
    engine.abort(work[-1].id)
    engine.run([])
    engine.flush_events()
    events = json.loads(path.read_text())["traceEvents"]
    keys = {k for e in events if e["name"] in ("prefill", "decode", "finished") for k in e["args"]}
    keys |= {k for e in events if e.get("cat") == "round" and e["ph"] == "X" for k in e["args"]}
    keys |= {"predicted_us", "predicted_from", "wall_us"}  # a torch runner's: the sim has none
    doc = (Path(__file__).parents[2] / "docs" / "trace.md").read_text()
    assert any(e["name"].endswith(" (rolled back)") for e in events) and "(rolled back)" in doc
    assert sorted(k for k in keys if f"`{k}`" not in doc) == []


def test_a_path_that_is_no_regular_file_is_one_line_before_any_work(tmp_path, capsys):
    # /dev/null ran the whole bench, then failed it (exit 2) as the last flush could not truncate
    # it; a named pipe blocked opening until something read it
    assert main(["bench", "--groups", "1", "--policy", "native", "--trace-out", "/dev/null"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("radixflow: error: --trace-out: /dev/null is not a regular file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ProblemError, match=f"trace_out: {fifo} is not a regular file"):
        EngineOptions(trace_out=str(fifo)).check()


def test_a_rounds_wall_time_and_what_its_prediction_learned_from_are_in_its_args(tmp_path):
    # on the cpu clock a round's slice is its CPU time: its measured wall time (in the round trace
    # and the bench JSON) was dropped, and so was how many rounds its prediction had learned from
    from radixflow.engine.records import RoundRecord
    from radixflow.scheduler.output import SchedulerOutput

    path = tmp_path / "t.json"
    trace = TraceFile(path, {"clock": "cpu"})
    recorder = trace.recorder("a")
    record = RoundRecord(
        index=0, start_s=0.0, duration_s=0.004, worker_call_s=0.004, tokens=0, requests=0, bubble_tokens=0,
        blocked=0, stop_reason="queue_empty", chunks=(), predicted_s=0.003, predicted_from=7, wall_s=0.02,
    )  # fmt: skip
    recorder.round(record, SchedulerOutput(round_index=0), [])
    trace.flush()
    (event,) = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert event["args"]["wall_us"] == 20000.0
    assert (event["args"]["predicted_us"], event["args"]["predicted_from"]) == (3000.0, 7)


def test_back_to_back_slices_meet_exactly_in_a_viewers_nanoseconds(tmp_path):
    # a slice's end was its start and duration each rounded to the ns: one round could end a ns
    # after the next began, and a viewer nested the next round (or a request's next chunk) in it
    path = tmp_path / "trace.json"
    spec = WorkloadSpec(groups=3, candidates=4, context_len=64, candidate_len=16, kind="chats", independent=2)
    work = build_workload(spec).requests
    for r in work:
        r.sampling = SamplingParams(max_tokens=5)
    setup = plan_engine(EngineOptions(model="qwen3_5-2b", trace_out=str(path), token_budget=64)).build()
    engine = setup.engine(policy="radixflow")
    engine.run(work)
    engine.flush_events()
    ns = lambda us: round(us * 1000)  # noqa: E731 (Perfetto: llround(ts * 1000))
    tracks: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in check_format(json.loads(path.read_text())):
        if e["ph"] == "X" and e["name"] != "queued":  # queued holds the parked rounds it spans
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for slices in tracks.values():
        slices.sort(key=lambda e: e["ts"])
        for a, b in itertools.pairwise(slices):
            assert ns(a["ts"]) + ns(a["dur"]) <= ns(b["ts"]), (a, b)
    rounds = tracks[(1, 0)]
    assert len(rounds) == len(engine.rounds) > 10


def test_a_rolled_back_round_draws_no_flow_its_restores_never_ran(tmp_path, monkeypatch):
    # followers restored their producers' checkpoints in a round that then failed: flow arrows
    # were drawn to and from its slices, of no duration, which no viewer can bind them to
    from radixflow.runners.sim import SimRunner

    run = SimRunner.run

    def fails_first(self, batch):
        if batch.round_index == 0:
            raise RuntimeError("boom")
        return run(self, batch)

    monkeypatch.setattr(SimRunner, "run", fails_first)
    path = tmp_path / "trace.json"
    setup = plan_engine(EngineOptions(model="qwen3_5-2b", trace_out=str(path))).build()
    engine = setup.engine(policy="adaptive")
    engine.run(requests())
    assert len(engine.failed_rounds) == 1 and engine.failed_rounds[0].requests > 2  # followers in it
    engine.run([Request(f"again-{r.id}", r.prompt) for r in requests()])
    engine.flush_events()
    events = check_format(json.loads(path.read_text()))
    assert [e for e in events if e["ph"] == "s"]  # the rounds that ran still draw theirs


def test_a_second_writer_of_the_same_path_stops_the_first_instead_of_interleaving(tmp_path):
    # two runs given one --trace-out (two terminals, two LLMs in a notebook): each wrote at its
    # own offsets into the file the other had truncated, and the file was no longer JSON
    path = tmp_path / "t.json"
    first = TraceFile(path, {"clock": "sim"})
    a = first.recorder("a")
    a.arrived(Request("r1", (1, 2, 3)))
    first.flush()
    second = TraceFile(path, {"clock": "sim"})
    b = second.recorder("b")
    b.arrived(Request("r2", (1, 2)))
    second.flush()  # replaces it, as a second run does with its first events
    for i in range(5):
        a.arrived(Request(f"more{i}", (1,)))
    with pytest.raises(OSError, match="another writer"):
        first.flush()
    names = {e["args"].get("name") for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "M"}
    assert "b" in names and "a" not in names and "more0" not in names


KILLED_BETWEEN_WRITES = """
import builtins, os, sys
from pathlib import Path
from radixflow.engine import trace_file
from radixflow.scheduler.request import Request

class Killing:  # the process killed (SIGKILL: nothing runs after) at a flush's second write
    def __init__(self, f):
        self.f, self.writes = f, 0
    def __enter__(self):
        self.f.__enter__()
        return self
    def __exit__(self, *exc):
        return self.f.__exit__(*exc)
    def __getattr__(self, name):
        return getattr(self.f, name)
    def write(self, data):
        self.writes += 1
        if self.writes == 2:
            self.f.flush()
            os._exit(9)
        return self.f.write(data)

trace = trace_file.TraceFile(Path(sys.argv[1]), {"clock": "sim"})
recorder = trace.recorder("a")
recorder.arrived(Request("r1", (1, 2, 3)))
trace.flush()
trace_file.open = lambda *a, **k: Killing(builtins.open(*a, **k))
for i in range(2000):  # a flush of more than the write buffer: its events, then the brackets
    recorder.arrived(Request(f"more{i}", (1, 2, 3)))
trace.flush()
"""


def test_a_process_killed_between_a_flushs_writes_leaves_valid_json(tmp_path):
    # a flush appended its events, then the closing brackets, in two writes: a process killed
    # between them (the OOM killer, kill -9) left a file that was no JSON, where the trace
    # promises valid JSON after every flush and a crash costing only the last events
    path = tmp_path / "t.json"
    root = str(Path(__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-c", KILLED_BETWEEN_WRITES, str(path)]
    subprocess.run(argv, env=env, timeout=120, check=False)
    events = check_format(json.loads(path.read_text()))
    assert any(e["name"] == "arrived" for e in events)


def test_a_ctrl_c_part_way_through_a_flush_leaves_valid_json_and_the_next_flush_writes_its_events(
    tmp_path, monkeypatch
):
    # the interrupted write left half an event and no closing brackets; the flush a Ctrl-C then
    # makes (`trace_kept`) took the file for another writer's, and the trace stayed no JSON
    path = tmp_path / "t.json"
    trace = TraceFile(path, {"clock": "sim"})
    recorder = trace.recorder("a")
    recorder.arrived(Request("r1", (1, 2, 3)))
    trace.flush()

    def ctrl_c() -> None:
        monkeypatch.undo()  # one Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr("radixflow.engine.trace_file.open", cut_short(ctrl_c), raising=False)
    for i in range(20):
        recorder.arrived(Request(f"more{i}", (1, 2, 3)))
    with pytest.raises(KeyboardInterrupt):
        trace.flush()
    events = check_format(json.loads(path.read_text()))
    assert "more0" not in {e["args"].get("name") for e in events}
    trace.flush()  # as `trace_kept` flushes once the Ctrl-C stopped the run
    events = check_format(json.loads(path.read_text()))
    assert sum(e["name"] == "arrived" for e in events) == 21 and trace.error is None


def cut_short(fail: Callable[[], None]) -> type:
    """A stand-in for ``open`` whose files write half of their first long write, then call
    ``fail`` (which raises: a full disk, a Ctrl-C)."""

    class CutShort:
        def __init__(self, *args, **kwargs):
            self.f = builtins.open(*args, **kwargs)  # noqa: SIM115 (closed by __exit__, as open's is)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            if len(data) > 64:
                self.f.write(data[: len(data) // 2])
                self.f.flush()
                fail()
            return self.f.write(data)

    return CutShort


DOORS = {
    "bench": ["bench", "--groups", "1", "--policy", "native"],
    "generate": ["generate", "qwen3_5-tiny", "--prompt", "hi", "--max-tokens", "2"],
    "score": ["score", "qwen3_5-tiny", "--context", "Q:", "--candidate", " a", "--candidate", " b"],
    "run-batch": ["run-batch", "qwen3_5-tiny", "-i", "IN"],
    "serve": ["serve", "qwen3_5-tiny", "--port", "0"],
}


# every door writing to its standard output; standard error through the two doors that check it
# apart from a model (bench) and with one (generate): one check of one path, and each door run is
# a process of its own that starts torch (~3 s of CI each)
WHERE = [
    *[(door, "stdout", "output") for door in DOORS],
    *[(door, "stderr", "error") for door in ("bench", "generate")],
]


@pytest.mark.parametrize(("door", "stream", "named"), WHERE)
def test_a_trace_into_the_commands_own_output_is_one_line_before_any_work(zoo, tmp_path, door, stream, named):
    # `> out.txt` made /dev/stdout a regular file: the trace was written over the command's own
    # output (its first bytes then overwritten by the output), exit 0; with stderr, by the
    # progress and the messages
    given = tmp_path / "in.jsonl"
    given.write_text('{"custom_id": "a", "method": "POST", "url": "/v1/score", "body": {}}\n')
    argv = [str(given) if a == "IN" else a for a in DOORS[door]]
    root = str(Path(__file__).parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        done = subprocess.run(
            [sys.executable, "-m", "radixflow.cli", *argv, "--trace-out", f"/dev/{stream}"],
            stdout=stdout, stderr=stderr, env=env, timeout=120,
        )  # fmt: skip
    said = f"radixflow: error: --trace-out: /dev/{stream} is this process's standard {named}"
    assert (done.returncode, err.read_text().startswith(said)) == (2, True), err.read_text()
    assert out.read_text() == ""
