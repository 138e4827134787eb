"""Engine loop: arrivals, validation, clock."""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator

import pytest
from engine_utils import new_engine

from radixflow.engine.records import AbortResult
from radixflow.engine.runner import RoundResult
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner, sim_token
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.samples import FinishReason
from radixflow.scheduler.sampling import SamplingParams

RUNNER = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
CFG = SchedulerConfig(token_budget=128, max_requests=8, block_size=8, num_blocks=256, num_state_slots=32)


def test_bad_requests_fail_and_the_rest_are_served():
    vocab = RUNNER.model.vocab_size
    reqs = [
        Request("ok", (1, 2, 3)),
        Request("oov", (1, vocab + 5)),
        Request("neg", (-1, 2)),
        Request("empty", ()),
        Request("ok2", (4, 5, 6)),
    ]
    engine = new_engine(RUNNER, CFG)
    engine.run(reqs)
    status = {r.id: r.status for r in reqs}
    assert status == {
        "ok": RequestStatus.FINISHED,
        "oov": RequestStatus.FAILED,
        "neg": RequestStatus.FAILED,
        "empty": RequestStatus.FAILED,
        "ok2": RequestStatus.FINISHED,
    }
    assert "outside the vocabulary" in (reqs[1].error or "")


@pytest.mark.parametrize(
    "request_",
    [
        Request("prompt", (1, 10**5000)),
        Request("bias", (1, 2), sampling=SamplingParams(logit_bias={10**5000: 1.0})),
        Request("stop", (1, 2), sampling=SamplingParams(stop_token_ids=(10**5000,))),
        Request("max", (1, 2), sampling=SamplingParams(max_tokens=10**5000)),
    ],
    ids=lambda r: r.id,
)
def test_a_huge_token_id_or_count_fails_its_request_in_one_short_line(request_):
    # past Python's 4300 digits an int has no str: the refusal itself raised ValueError ("Exceeds
    # the limit ... for integer string conversion") out of the engine's step
    engine = new_engine(RUNNER, CFG)
    engine.run([request_])
    assert request_.status is RequestStatus.FAILED
    assert request_.error is not None and len(request_.error) < 160, request_.error


def test_a_prompt_token_that_is_no_integer_fails_its_request_alone():
    # 2.5 ran as token 2 on the torch runner (cached under 2.5), True as token 1, and a string
    # raised a TypeError out of submit
    reqs = [Request("float", (1, 2.5, 3)), Request("bool", (True, 2)), Request("text", (1, "7"))]
    reqs.append(Request("none", (None,)))
    engine = new_engine(RUNNER, CFG)
    engine.run([*reqs, Request("ok", (1, 2, 3))])
    errors = {r.id: r.error for r in reqs}
    assert errors == {
        "float": "prompt: token 2.5 is not a token id (an integer)",
        "bool": "prompt: token True is not a token id (an integer)",
        "text": "prompt: token '7' is not a token id (an integer)",
        "none": "prompt: token None is not a token id (an integer)",
    }
    assert engine.get("ok").status is RequestStatus.FINISHED


@pytest.mark.parametrize("namespace", [None, 5, b"ns"])
def test_a_namespace_that_is_no_string_fails_its_request_alone(namespace):
    # it was taken, and its admission raised out of the scheduler mid-round (the fork history
    # hashes the name), leaving the request running with what it had reserved
    bad, ok = Request("bad", (1, 2, 3), namespace=namespace), Request("ok", (1, 2, 4))
    engine = new_engine(RUNNER, CFG)
    engine.run([bad, ok])
    assert bad.status is RequestStatus.FAILED
    assert bad.error == f"namespace: must be a string, got {namespace!r}"
    assert ok.status is RequestStatus.FINISHED
    engine.check_integrity()


@pytest.mark.parametrize("sampling", [None, {"max_tokens": 4}])
def test_sampling_that_is_no_sampling_params_fails_its_request_alone(sampling):
    # an AttributeError came out of submit, and the request stayed behind, waiting for ever
    bad, ok = Request("bad", (1, 2, 3), sampling=sampling), Request("ok", (1, 2, 4))
    engine = new_engine(RUNNER, CFG)
    engine.run([bad, ok])
    assert bad.status is RequestStatus.FAILED
    assert bad.error == f"sampling: must be a SamplingParams, got {sampling!r}"
    assert ok.status is RequestStatus.FINISHED


@pytest.mark.parametrize(
    ("prompt", "kind"),
    [({2, 1}, "set"), ({1: 2}, "dict"), (b"\x01\x02", "bytes"), (iter((1, 2)), "tuple_iterator"), (5, "int")],
)
def test_a_prompt_that_is_no_list_of_token_ids_fails_its_request_alone(prompt, kind):
    # a set ran in whatever order it iterates, a dict as its keys, bytes as their values; an
    # iterator or a number raised a TypeError out of submit and left the request waiting for ever
    bad, ok = Request("bad", prompt), Request("ok", (1, 2, 4))
    engine = new_engine(RUNNER, CFG)
    engine.run([bad, ok])
    assert bad.status is RequestStatus.FAILED
    assert bad.error == f"prompt: must be a list of token ids, got {kind}"
    assert ok.status is RequestStatus.FINISHED and not engine.has_work()


def test_idle_engine_jumps_to_the_next_arrival_after_its_request_cost():
    late = Request("late", (1, 2, 3), arrival_s=5.0)
    engine = new_engine(RUNNER, CFG)
    engine.run([late])
    overhead = RUNNER.model.request_overhead_s  # tokenization and API, before it can be scheduled
    assert overhead == pytest.approx(2e-3)
    assert engine.rounds[0].start_s == pytest.approx(5.0 + overhead)
    assert late.latency_s == pytest.approx(overhead + engine.rounds[0].duration_s)


def test_request_cannot_be_submitted_twice():
    req = Request("a", (1, 2, 3))
    new_engine(RUNNER, CFG).run([req])
    with pytest.raises(ValueError, match="already submitted"):
        new_engine(RUNNER, CFG).submit(req)


def test_a_request_one_engine_holds_before_admitting_it_is_refused_by_another():
    # the check looked at the status and the cache registration, both unset until the request is
    # admitted: a second engine took it too, then dropped it unrun (the first had moved it on)
    # and reported it finished with the first's output; its abort there unlocked the first
    # engine's path in its own cache (a bare KeyError)
    first, second = new_engine(RUNNER, CFG), new_engine(RUNNER, CFG)
    req = Request("a", (1, 2, 3), arrival_s=1.0)
    first.submit(req)
    with pytest.raises(ValueError, match=r"^request 'a' was already submitted to an engine$"):
        second.submit(req)
    assert second.get("a") is None and not second.has_work()
    first.run([])
    assert req.status is RequestStatus.FINISHED
    first.check_integrity()


@pytest.mark.parametrize("arrival", [float("nan"), float("inf"), -1.0, True])
def test_an_arrival_time_that_is_no_time_is_refused_in_one_line(arrival):
    # a NaN arrival was never admitted (the engine ran forever), an infinite one sent the clock to
    # infinity: refused, naming the field and the value, and the id stays free
    engine = new_engine(RUNNER, CFG)
    with pytest.raises(ValueError, match=rf"^arrival_s must be a finite number >= 0, got {arrival}$"):
        engine.submit(Request("a", (1, 2, 3), arrival_s=arrival))
    assert not engine.has_work() and engine.get("a") is None
    engine.run([Request("a", (1, 2, 3))])
    assert engine.requests[0].status is RequestStatus.FINISHED


@pytest.mark.parametrize("arrival", [10**400, 1e18], ids=["int-past-a-float", "1e18"])
def test_an_arrival_time_past_the_clocks_reach_is_refused_in_one_line(arrival):
    # an integer past a float's range raised a bare OverflowError out of submit and left the
    # request behind, waiting for ever with its id taken; at 1e18 s the engine clock could not
    # tell a round's milliseconds apart: the request ran with a latency of 0
    engine = new_engine(RUNNER, CFG)
    says = (
        "arrival_s must be at most 4294967296 (seconds): past it the engine clock no longer tells µs "
        f"apart, got {arrival!r}"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(says)}$"):
        engine.submit(Request("a", (1, 2, 3), arrival_s=arrival))
    assert not engine.has_work() and engine.get("a") is None
    last = Request("a", (1, 2, 3), arrival_s=float(2**32))
    engine.run([last])
    assert last.status is RequestStatus.FINISHED and last.latency_s > 0


def test_sim_cost_grows_with_tokens_and_context():
    from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput

    def batch(start: int, end: int) -> SchedulerOutput:
        chunk = ScheduledChunk("r", "n", tuple(range(end)), start, end, (), None, (), True)
        return SchedulerOutput(round_index=0, chunks=[chunk])

    def seconds(b: SchedulerOutput) -> float:
        return RUNNER.run(b).duration_s

    assert seconds(batch(0, 4096)) > seconds(batch(0, 1024))
    assert seconds(batch(8192, 8192 + 1024)) > seconds(batch(0, 1024))


def test_duplicate_request_id_is_rejected():
    engine = new_engine(RUNNER, CFG)
    engine.submit(Request("same", (1, 2, 3)))
    with pytest.raises(ValueError, match="duplicate request id 'same'"):
        engine.submit(Request("same", (7, 8, 9)))
    engine.run([])
    expected = sim_token("default", (1, 2, 3), RUNNER.model.vocab_size)
    assert [r.output for r in engine.requests] == [[expected]]


@pytest.mark.parametrize(
    ("thing", "kind"), [({"id": "a", "prompt": [1, 2]}, "dict"), (None, "NoneType"), ("a", "str")]
)
def test_a_submission_that_is_no_request_is_refused_in_one_line(thing, kind):
    # a bare AttributeError ("'dict' object has no attribute 'id'") came out of submit
    engine = new_engine(RUNNER, CFG)
    with pytest.raises(ValueError, match=rf"^request must be a Request, got {kind}$"):
        engine.submit(thing)
    assert engine.requests == [] and not engine.has_work()


@pytest.mark.parametrize("rid", [5, ["a"], None])
def test_a_request_id_that_is_no_string_is_refused_in_one_line(rid):
    # an unhashable id raised a TypeError out of the duplicate check; a number or None was taken,
    # then looked up (`get`, `abort`, a server's answers) by a key no caller spells
    engine = new_engine(RUNNER, CFG)
    with pytest.raises(ValueError, match=rf"^request id must be a string, got {re.escape(repr(rid))}$"):
        engine.submit(Request(rid, (1, 2, 3)))
    assert engine.requests == [] and not engine.has_work()


@pytest.mark.parametrize(
    "state", [{"working_slot": 3}, {"output": [1]}, {"computed": 2}, {"block_table": [0]}, {"error": "x"}]
)
def test_a_request_carrying_scheduler_state_is_refused_before_anything_is_taken(state):
    # a working_slot set by hand died mid-run in a bare KeyError: 3; an output set by hand was
    # continued as if the engine had generated it
    engine = new_engine(RUNNER, CFG)
    (name,) = state
    with pytest.raises(ValueError, match=rf"^request 'a' carries scheduler state \({name}="):
        engine.submit(Request("a", (1, 2, 3), **state))
    assert engine.requests == [] and not engine.has_work()


def test_scheduler_state_is_told_after_a_run_filled_a_request_s_own_fields():
    # the defaults compared with are read once per process: a run filling one request's output
    # (a list the dataclass made) must not make a later output set by hand look fresh
    engine = new_engine(RUNNER, CFG)
    engine.run([Request("ran", (1, 2, 3))])
    assert engine.get("ran").output
    with pytest.raises(ValueError, match=r"^request 'b' carries scheduler state \(output=\[7\]\)"):
        new_engine(RUNNER, CFG).submit(Request("b", (1, 2, 3), output=[7]))


@pytest.mark.parametrize("call", ["abort", "stop", "get", "forget"])
@pytest.mark.parametrize("rid", [["a"], {"a": 1}])
def test_a_lookup_by_an_id_that_is_no_string_is_refused_in_one_line(call, rid):
    # an unhashable id raised a bare "unhashable type: 'list'" out of the dict lookup, naming
    # neither the parameter nor the value; submit already refused such an id this way
    engine = new_engine(RUNNER, CFG)
    engine.submit(Request("a", (1, 2, 3)))
    with pytest.raises(ValueError, match=rf"^request_id must be a string, got {re.escape(repr(rid))}$"):
        getattr(engine, call)(rid)
    assert engine.get("a").status is RequestStatus.WAITING


def test_abort_reports_unknown_done_and_not_yet_arrived_requests():
    engine = new_engine(RUNNER, CFG)
    early, late = Request("early", (1, 2, 3)), Request("late", (4, 5, 6), arrival_s=9.0)
    engine.submit(early)
    engine.submit(late)
    assert engine.abort("nope") is AbortResult.UNKNOWN
    assert engine.abort("late") is AbortResult.ABORTED
    engine.run([])
    assert engine.abort("early") is AbortResult.ALREADY_DONE
    assert engine.abort("late") is AbortResult.ALREADY_DONE
    assert late.status is RequestStatus.ABORTED
    assert engine.now < 9.0  # the aborted arrival does not move the clock


@pytest.mark.parametrize("end", ["abort", "stop"])
def test_a_request_ended_before_it_arrives_ends_at_its_arrival_not_before(end):
    # it ended at the engine's clock, before it arrived: a latency of -9 s (a stopped one counts
    # as finished)
    engine = new_engine(RUNNER, CFG)
    late = Request("late", (4, 5, 6), arrival_s=9.0)
    engine.submit(late)
    ended = {"abort": AbortResult.ABORTED, "stop": AbortResult.STOPPED}[end]
    assert getattr(engine, end)("late") is ended
    engine.run([])
    assert late.finish_s == 9.0 and late.latency_s == 0.0 and late.status.done


def test_stop_answers_stopped_as_the_request_ends_finished_not_aborted():
    # stop answered ABORTED while the request ended FINISHED (reason stop), its output kept: a
    # caller branching on the answer took a stopped request for a cancelled one
    engine = new_engine(RUNNER, CFG)
    running = Request("running", (1, 2, 3), sampling=SamplingParams(max_tokens=8))
    late = Request("late", (4, 5, 6), arrival_s=9.0)
    for req in (running, late):
        engine.submit(req)
    engine.step()
    engine.step()
    assert [engine.stop(r.id) for r in (running, late)] == [AbortResult.STOPPED] * 2
    assert [(r.status, r.finish_reason) for r in (running, late)] == [
        (RequestStatus.FINISHED, FinishReason.STOP)
    ] * 2
    assert len(running.output) == 2
    assert engine.stop("running") is AbortResult.ALREADY_DONE


def test_request_that_cannot_fit_an_empty_cache_fails_at_submit_with_the_limit():
    cfg = SchedulerConfig(token_budget=16, max_requests=4, block_size=8, num_blocks=4, num_state_slots=0)
    engine = new_engine(RUNNER, cfg)
    too_long, chunked = Request("too-long", tuple(range(1, 40))), Request("chunked", tuple(range(1, 30)))
    engine.submit(too_long)
    engine.submit(chunked)
    assert too_long.status is RequestStatus.FAILED
    assert too_long.error == (
        "prompt: does not fit in the KV cache: 39 tokens need 5 blocks, cache has 4 (kv_blocks)"
    )
    assert chunked.status is RequestStatus.FAILED and "need a state slot" in (chunked.error or "")
    assert not engine.has_work()


def test_forget_drops_done_requests_and_round_history_is_bounded():
    engine = new_engine(RUNNER, CFG, round_history=2)
    reqs = [Request(f"r{i}", (1 + i, 2, 3), arrival_s=float(i)) for i in range(4)]
    engine.run(reqs)
    assert len(engine.rounds) == 2 and [rd.index for rd in engine.rounds] == [2, 3]
    engine.forget("r0")
    assert [r.id for r in engine.requests] == ["r1", "r2", "r3"] and engine.get("r0") is None
    pending = Request("p", (5, 6, 7), arrival_s=99.0)
    engine.submit(pending)
    with pytest.raises(ValueError, match="still waiting"):
        engine.forget("p")


def test_the_scheduler_sees_a_predictor_that_gives_the_sim_round_time_of_its_chunks():
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h200"])
    engine = new_engine(runner, CFG)
    assert engine.scheduler.predict is not None
    outputs = []
    schedule = engine.scheduler.schedule

    def recording_schedule():
        outputs.append(schedule())
        return outputs[-1]

    engine.scheduler.schedule = recording_schedule
    ctx = tuple(range(100, 180))  # shared context: reuse, restores and snapshots; then decode steps
    reqs = [Request(f"r{i}", ctx + (i,) * 9, arrival_s=0.001 * i) for i in range(6)]
    reqs.append(Request("gen", (7, 8, 9), sampling=SamplingParams(max_tokens=5)))
    engine.run(reqs)
    assert len(engine.rounds) == len(outputs) >= 5
    assert any(all(c.length == 1 for c in out.chunks) for out in outputs)  # a decode-only round
    for out, record in zip(outputs, engine.rounds, strict=True):
        assert engine.scheduler.predict(out.chunks) == record.duration_s


def test_a_runner_that_predicts_nothing_gives_the_scheduler_none():
    from tests.behaviour_pins import FixedCostRunner

    assert new_engine(FixedCostRunner(has_recurrent=True), CFG).scheduler.predict is None


@contextlib.contextmanager
def background_job() -> Iterator[None]:
    """As `cmd &` in a script starts a command: SIGINT ignored; the CLI takes SIGTERM as a Ctrl-C."""
    from radixflow.cli.sigterm import SigtermAsCtrlC

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with SigtermAsCtrlC():
            yield
    finally:
        signal.signal(signal.SIGINT, before)


# a Ctrl-C; and a SIGTERM in a background job, which was raised at once, the round half built or
# half applied: the engine's hold held Python's own Ctrl-C handler alone
STOPS = {
    "ctrl-c": (signal.SIGINT, contextlib.nullcontext),
    "background-sigterm": (signal.SIGTERM, background_job),
}


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("part", ["schedule", "update"])
def test_a_ctrl_c_in_the_scheduler_waits_for_its_part_of_the_round(part, stop, monkeypatch):
    """A SIGINT while the scheduler builds a round or takes its results is raised once that part
    is done: a round not run yet is rolled back (its requests failed, as in a worker call), one
    that ran stands; either way the cache and scheduler stay consistent."""
    sig, context = STOPS[stop]
    engine = new_engine(RUNNER, CFG)
    reqs = [
        Request(f"r{i}", tuple(range(1, 40 + i)), sampling=SamplingParams(max_tokens=3)) for i in range(3)
    ]
    for r in reqs:
        engine.submit(r)
    original = getattr(engine.scheduler, part)

    def interrupted(*args: object) -> object:
        signal.raise_signal(sig)  # noted, not raised, until the part is done
        return original(*args)

    monkeypatch.setattr(engine.scheduler, part, interrupted)
    with context(), pytest.raises(KeyboardInterrupt):
        engine.step()
    monkeypatch.undo()
    engine.check_integrity()
    ran = part == "update"
    assert [len(engine.rounds), len(engine.failed_rounds)] == ([1, 0] if ran else [0, 1])
    assert all(r.status is (RequestStatus.RUNNING if ran else RequestStatus.FAILED) for r in reqs)
    for r in reqs:
        engine.abort(r.id)
    engine.check_integrity()
    assert engine.step() is None


def _step_with_a_ctrl_c_at(engine, line: int) -> bool:
    """``engine.step()`` with a SIGINT raised at its ``line``-th executed line (counting the
    engine's and the Ctrl-C hold's own lines only); whether the step got that far."""
    import sys

    watched = ("radixflow/engine/engine.py", "radixflow/engine/interrupts.py")
    seen = 0

    def trace(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal seen
        if not frame.f_code.co_filename.endswith(watched):
            return None
        if event == "line":
            seen += 1
            if seen == line:
                signal.raise_signal(signal.SIGINT)
        return trace

    before = sys.gettrace()  # a coverage tool's or a debugger's, put back after
    sys.settrace(trace)
    try:
        engine.step()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(before)
    return seen >= line


def test_a_ctrl_c_at_any_line_of_a_step_leaves_the_engine_as_good_as_new():
    """Wherever in a round a SIGINT lands (as the scheduler's part ends and the worker call is
    about to start, as a round is rolled back, ...), the engine is left consistent: once the
    interrupted requests are aborted (as `LLM` does), the same prompts run exactly, every KV
    position read was computed for that prefix."""
    from checking_runner import VOCAB, CheckingRunner

    cfg = SchedulerConfig(token_budget=16, max_requests=8, block_size=4, num_blocks=64, num_state_slots=16)
    prompts = [tuple(range(1, 20 + i)) for i in range(3)]
    line = 0
    while True:
        line += 1
        runner = CheckingRunner(True, 4)
        engine = new_engine(runner, cfg)
        runner.cache = engine.cache
        reqs = [Request(f"r{i}", p, sampling=SamplingParams(max_tokens=2)) for i, p in enumerate(prompts)]
        for r in reqs:
            engine.submit(r)
        engine.step()  # one round in: the cache holds a prefix of each
        reached = _step_with_a_ctrl_c_at(engine, line)
        for r in reqs:
            engine.abort(r.id)
        engine.check_integrity()
        again = [Request(f"a{i}", p, sampling=SamplingParams(max_tokens=2)) for i, p in enumerate(prompts)]
        engine.run(again)
        for r in again:
            assert r.status is RequestStatus.FINISHED, (line, r.id, r.error)
            expected = [sim_token(r.namespace, r.prompt + tuple(r.output[:i]), VOCAB) for i in range(2)]
            assert r.output == expected, (line, r.id)
        if not reached:
            break
    assert line > 20  # the whole step was walked


def test_a_prompt_filling_the_context_runs_when_nothing_is_generated():
    # a prompt of exactly the model context was refused even with max_tokens 0 (scoring, prompt
    # logprobs only), where it fits; one token more, or one token to generate, does not
    from dataclasses import replace

    runner = SimRunner(replace(SIM_MODELS["qwen3_5-2b"], max_context=64), HARDWARE["h100"])
    engine = new_engine(runner, CFG)
    full = Request("full", (1,) * 64, sampling=SamplingParams(max_tokens=0))
    assert engine.problem(full) is None and engine.room(64) == 0
    engine.run([full])
    assert full.status == RequestStatus.FINISHED
    over = Request("over", (1,) * 65, sampling=SamplingParams(max_tokens=0))
    generating = Request("gen", (1,) * 64, sampling=SamplingParams(max_tokens=1))
    for req in (over, generating):
        problem = engine.problem(req)
        assert problem is not None and problem.param == "prompt", problem
    assert str(engine.problem(over)) == "prompt: has 65 tokens; the model context is 64"
    no_room = "prompt: has 64 tokens, the whole model context: no room to generate"
    assert str(engine.problem(generating)) == no_room


def test_a_one_token_prompt_past_the_context_is_named_in_the_singular():
    """'prompt of 1 tokens plus max_tokens 8 ...': the count's noun now follows it."""
    from radixflow.engine.runner import ModelInfo, validate_prompt

    model = ModelInfo("m", False, vocab_size=16, max_context=4)
    problem = validate_prompt(Request("r", (1,), sampling=SamplingParams(max_tokens=8)), model)
    assert problem is not None and problem.message.startswith("prompt of 1 token plus max_tokens 8")


@pytest.mark.parametrize("history", [-1, 2.5, True])
def test_a_round_history_that_is_no_count_is_refused_naming_it(history):
    # -1 said deque's "maxlen must be non-negative" and 2.5 "an integer is required", neither
    # naming round_history; True kept one round
    expected = rf"^round_history must be None or an integer >= 0, got {history!r}$"
    with pytest.raises(ValueError, match=expected):
        new_engine(RUNNER, CFG, round_history=history)


def test_a_round_that_schedules_nothing_is_named_as_the_scheduler_bug_it_is(monkeypatch):
    # An idle engine always has a chunk to run: a request that cannot fit an empty cache is
    # refused at submit (above), and one that fits starts from a shallower point or from scratch
    # when its own reuse point pins what it needs (tests/scheduler/test_scheduler.py: the reuse
    # point that pins the only slot); the random and edge-budget fuzzes (test_engine_random,
    # test_engine_pressure) run every policy without an empty round. So an empty round is a bug:
    # it failed the oldest request with "does not fit in the cache's free KV blocks/state slots",
    # blaming a request that fits, and under -O an assert would loop `run` forever.
    engine = new_engine(RUNNER, CFG)
    req = Request("a", (1, 2, 3))
    engine.submit(req)
    monkeypatch.setattr(engine.scheduler, "schedule", lambda: SchedulerOutput(round_index=0))
    with pytest.raises(AssertionError, match=r"round 0 scheduled no chunk with 1 waiting \(first 'a'\)"):
        engine.step()
    assert req.status is RequestStatus.WAITING and req.error is None


class _Misanswering(SimRunner):
    """The sim runner whose first round's result breaks the `Runner` protocol as ``mistake`` says."""

    def __init__(self, mistake: str) -> None:
        super().__init__(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
        self.mistake, self.calls = mistake, 0

    def run(self, batch: SchedulerOutput) -> RoundResult:
        result = super().run(batch)
        self.calls += 1
        if self.calls > 1:
            return result
        if self.mistake == "no sample":
            del result.samples["b"]
        else:
            result.duration_s = {"nan": float("nan"), "negative": -1.0, "inf": float("inf")}[self.mistake]
        return result


@pytest.mark.parametrize(
    "mistake, said",
    [
        ("no sample", "returned no sample for request 'b'"),
        ("nan", "returned a round duration of nan"),
        ("negative", "returned a round duration of -1.0"),
        ("inf", "returned a round duration of inf"),
    ],
)
def test_a_round_result_that_breaks_the_runner_protocol_rolls_the_round_back_naming_it(mistake, said):
    # a runner (one a user wrote) answering a sampled chunk with no token raised a bare
    # KeyError: 'b' out of step with the round half applied (its checkpoints PENDING for ever, the
    # next step an empty AssertionError); a NaN or negative duration moved the engine clock so
    reqs = [Request("a", (1, 2, 3)), Request("b", (4, 5, 6, 7)), Request("c", (8, 9))]
    engine = new_engine(_Misanswering(mistake), CFG)
    for r in reqs:
        engine.submit(r)
    engine.step()
    engine.check_integrity()
    (record,) = engine.failed_rounds
    assert engine.now == record.start_s == RUNNER.model.request_overhead_s and not engine.rounds
    assert record.error is not None and said in record.error, record.error
    assert all(r.status is RequestStatus.FAILED and r.error == record.error for r in reqs)
    later = Request("d", (4, 5, 6, 7))
    engine.run([later])
    assert later.status is RequestStatus.FINISHED
    assert later.output == [sim_token("default", later.prompt, RUNNER.model.vocab_size)]
