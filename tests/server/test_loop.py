"""The engine loop thread (server/loop.py) over the simulated runner: failures always answered."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from engine_utils import new_engine

import radixflow.engine.trace_file as trace
from radixflow.generation.params import SamplingParams
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.generation.tracker import RequestTracker
from radixflow.models.io.tokenizer import save_tokenizer, train_tokenizer
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler.request import Request
from radixflow.scheduler.scheduler import SchedulerConfig
from radixflow.server.events import Final, NotAccepting, QueueFull
from radixflow.server.liveness import Liveness
from radixflow.server.loop import EngineLoop
from radixflow.server.metrics import ServerMetrics

# a hybrid shape with the test tokenizer's vocabulary (generated tokens must decode)
SPEC = replace(SIM_MODELS["qwen3_5-2b"], vocab_size=512, max_context=4096)
CFG = SchedulerConfig(token_budget=64, max_requests=8, block_size=8, num_blocks=512, num_state_slots=32)


class FailingRunner(SimRunner):
    def run(self, batch):
        raise RuntimeError("device lost")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> TextTokenizer:
    path = tmp_path_factory.mktemp("tok")
    save_tokenizer(train_tokenizer(512), path)
    return TextTokenizer.load(path)


@pytest.fixture
def make_loop() -> Iterator:
    loops: list[EngineLoop] = []

    def make(runner: SimRunner, max_pending: int = 8) -> EngineLoop:
        loop = EngineLoop(new_engine(runner, CFG), ServerMetrics(), max_pending)
        loop.start()
        loops.append(loop)
        return loop

    yield make
    for loop in loops:
        loop.shutdown(0.0)
        loop.join(10)


def submit(loop: EngineLoop, tokenizer: TextTokenizer, n: int, max_tokens: int = 4) -> queue.Queue:
    return submitted(loop, tokenizer, n, max_tokens)[0]


def submitted(
    loop: EngineLoop, tokenizer: TextTokenizer, n: int, max_tokens: int = 4
) -> tuple[queue.Queue, list[Request]]:
    """`submit`, and the requests submitted: a test holding rounds with a `GatedRunner` must not
    ask the engine thread for them (`loop.call` waits for the round the gate holds)."""
    events: queue.Queue = queue.Queue()
    items = []
    for i in range(n):
        req = Request(
            f"r{time.monotonic_ns()}-{i}", (5, 6, 7, 8 + i), sampling=SamplingParams(max_tokens=max_tokens)
        )
        items.append((req, RequestTracker(req, tokenizer)))
    loop.submit(items, events.put, stream=False)
    return events, [req for req, _ in items]


def finals(events: queue.Queue, n: int) -> list[Final]:
    # a deadline against a hang, not a speed test: a busy machine may take a while
    return sorted((events.get(timeout=60) for _ in range(n)), key=lambda f: f.index)


def test_requests_are_answered_and_forgotten(make_loop, tokenizer):
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))
    answers = finals(submit(loop, tokenizer, 3), 3)
    assert [len(f.output.token_ids) for f in answers] == [4, 4, 4]
    assert loop.call(lambda e: (e.requests, e.has_work())) == ([], False)


def test_a_failed_round_is_a_500_answer_and_the_loop_carries_on(make_loop, tokenizer):
    loop = make_loop(FailingRunner(SPEC, HARDWARE["h100"]))
    (answer,) = finals(submit(loop, tokenizer, 1), 1)
    assert answer.status == 500 and "device lost" in (answer.error or "")
    assert loop.alive and loop.accepting
    loop.call(lambda e: e.check_integrity())


def test_an_engine_failure_answers_everyone_and_refuses_more(make_loop, tokenizer):
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))

    def broken_step():
        raise RuntimeError("invariant violated")

    loop.engine.step = broken_step  # type: ignore[method-assign]
    answers = finals(submit(loop, tokenizer, 2), 2)
    assert {f.status for f in answers} == {500}
    assert all(f.error == "the engine failed: RuntimeError: invariant violated" for f in answers)
    loop.join(10)
    assert not loop.alive and not loop.accepting
    with pytest.raises(NotAccepting, match="the engine failed"):
        submit(loop, tokenizer, 1)


def test_an_engine_ended_by_a_base_exception_answers_everyone_and_refuses_more(make_loop, tokenizer):
    """A plugin's ``sys.exit()`` (SystemExit is no Exception) ended the engine thread past the
    loop's failure handling: its requests were never answered, and new ones were still accepted
    (the loop never stopped accepting) to wait forever."""
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))

    def exiting_step():
        raise SystemExit(3)

    loop.engine.step = exiting_step  # type: ignore[method-assign]
    answers = finals(submit(loop, tokenizer, 2), 2)
    assert [(f.status, f.error) for f in answers] == [(500, "the engine failed: SystemExit: 3")] * 2
    assert loop.join(10) and not loop.accepting
    with pytest.raises(NotAccepting, match="the engine failed"):
        submit(loop, tokenizer, 1)


class GatedRunner(SimRunner):
    """Runs its first round, then holds every later one until ``gate`` is set: the requests are
    running, and none can finish however long the test takes to look (no race against time)."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.rounds = 0
        self.gate = threading.Event()

    def run(self, batch):
        self.rounds += 1
        if self.rounds > 1:
            assert self.gate.wait(30), "the test never opened the gate"
        return super().run(batch)


@pytest.mark.parametrize("limit, queued", [(3, "3 requests are queued"), (1, "1 request is queued")])
def test_the_queue_bound_counts_prompts_until_they_are_answered(make_loop, tokenizer, limit, queued):
    """A full queue is refused naming its count (of one in the singular: it said "1 requests")."""
    runner = GatedRunner(SPEC, HARDWARE["h100"])  # none can be answered before the gate opens
    loop = make_loop(runner, max_pending=limit)
    events = submit(loop, tokenizer, limit)
    with pytest.raises(QueueFull, match=rf"^{queued} \(limit {limit}\); retry later$"):
        submit(loop, tokenizer, 1)
    runner.gate.set()
    finals(events, limit)
    finals(submit(loop, tokenizer, limit), limit)  # answered requests no longer count


def test_a_request_refused_for_its_own_prompts_says_they_would_pass_the_limit(make_loop, tokenizer):
    """A request whose prompts (or n choices) would take the queue past its limit said only "1
    request is queued (limit 3)": a client read the queue as having room, and retried in vain."""
    runner = GatedRunner(SPEC, HARDWARE["h100"])
    loop = make_loop(runner, max_pending=3)
    events = submit(loop, tokenizer, 1)
    said = r"^1 request is queued \(limit 3\); this one adds 3; retry later$"
    with pytest.raises(QueueFull, match=said):
        submit(loop, tokenizer, 3)
    runner.gate.set()
    finals(events, 1)


def test_shutdown_without_drain_time_fails_what_is_left(make_loop, tokenizer):
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))
    loop.call(lambda e: setattr(e, "step", lambda: time.sleep(0.01)))  # rounds that never finish anything
    events = submit(loop, tokenizer, 2)
    loop.shutdown(0.0)
    answers = finals(events, 2)
    assert {f.status for f in answers} == {503}
    assert answers[0].error == "the server shut down before this request finished"
    with pytest.raises(NotAccepting):
        submit(loop, tokenizer, 1)
    loop.join(10)
    assert not loop.alive


def test_requests_failed_by_the_drain_count_as_failed_not_aborted(make_loop, tokenizer):
    """A request the drain answers with a 503 failed (as the fleet's ingress counts it); aborted
    is what a client that went away did."""
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))
    loop.call(lambda e: setattr(e, "step", lambda: time.sleep(0.01)))  # rounds that never finish anything
    events = submit(loop, tokenizer, 2)
    loop.shutdown(0.0)
    assert {f.status for f in finals(events, 2)} == {503}
    loop.join(10)
    gauge = loop.metrics.registry.get_sample_value
    outcomes = {o: gauge("radixflow_requests_total", {"outcome": o}) for o in ("failed", "aborted")}
    assert outcomes == {"failed": 2, "aborted": 0}


def test_the_queue_gauges_follow_aborts(make_loop, tokenizer):
    runner = GatedRunner(SPEC, HARDWARE["h100"])
    loop = make_loop(runner)
    events, reqs = submitted(loop, tokenizer, 3, max_tokens=500)
    ids = [r.id for r in reqs]
    gauge = loop.metrics.registry.get_sample_value
    deadline = time.monotonic() + 30
    while gauge("radixflow_requests_running") != 3:  # published after each round
        assert time.monotonic() < deadline, "the requests never ran"
        time.sleep(0.01)
    assert gauge("radixflow_requests_pending") == 3
    loop.abort(ids)  # every client went away: no step follows, nothing else arrives
    runner.gate.set()  # the held round ends; the abort is applied before the next one
    loop.call(lambda e: None)  # the abort has been applied
    assert [gauge(f"radixflow_requests_{g}") for g in ("running", "waiting", "pending")] == [0, 0, 0]
    assert gauge("radixflow_requests_total", {"outcome": "aborted"}) == 3
    assert events.empty()  # nobody is answered after leaving


def test_the_cache_figures_are_published_before_the_first_request(make_loop):
    """A scrape of a server that has answered nothing yet shows its cache budget, not 0, and every
    kind of cache memory and eviction at 0."""
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))
    gauge = loop.metrics.registry.get_sample_value
    budget = loop.engine.cache.memory().budget_bytes
    assert budget > 0 and gauge("radixflow_cache_budget_bytes") == budget
    for kind in ("kv", "checkpoint", "working"):
        assert gauge("radixflow_cache_bytes", {"kind": kind}) == 0
    for kind in ("kv", "checkpoint"):
        assert gauge("radixflow_cache_evictions_total", {"kind": kind}) == 0


def test_the_kv_promised_to_running_requests_is_shown_beside_the_bytes_in_use(make_loop, tokenizer):
    """The KV a running request will still allocate is held against the budget before it is
    allocated: /metrics showed only the bytes in use, so a cache reading half full turned new
    requests away with nothing there saying why."""
    runner = GatedRunner(SPEC, HARDWARE["h100"])  # the requests run and cannot finish
    loop = make_loop(runner)
    events = submit(loop, tokenizer, 2, max_tokens=200)
    gauge = loop.metrics.registry.get_sample_value
    deadline = time.monotonic() + 30
    while gauge("radixflow_requests_running") != 2:  # published after the first round
        assert time.monotonic() < deadline, "the requests never ran"
        time.sleep(0.01)
    promised = gauge("radixflow_cache_promised_bytes")
    used = sum(gauge("radixflow_cache_bytes", {"kind": k}) for k in ("kv", "checkpoint", "working"))
    block = loop.engine.cache.ledger.block_bytes
    assert promised is not None and promised >= 2 * (200 // CFG.block_size - 1) * block
    assert used + promised <= gauge("radixflow_cache_budget_bytes")
    runner.gate.set()
    finals(events, 2)
    loop.call(lambda e: None)
    assert gauge("radixflow_cache_promised_bytes") == 0


def test_tokens_generated_before_an_abort_are_counted(make_loop, tokenizer):
    """`radixflow_generation_tokens_total` is every token generated, as its help says: a client
    that leaves mid-decode took those tokens too (prompt tokens and reuse stay finished-only)."""
    runner = GatedRunner(SPEC, HARDWARE["h100"])
    loop = make_loop(runner)
    _, reqs = submitted(loop, tokenizer, 2, max_tokens=500)
    gauge = loop.metrics.registry.get_sample_value
    deadline = time.monotonic() + 30
    while gauge("radixflow_requests_running") != 2:  # the first round ran: one token each
        assert time.monotonic() < deadline, "the requests never ran"
        time.sleep(0.01)
    loop.abort([r.id for r in reqs])
    runner.gate.set()
    loop.call(lambda e: None)  # the abort has been applied
    generated = sum(len(r.output) for r in reqs)
    assert generated >= 2 and gauge("radixflow_generation_tokens_total") == generated
    assert gauge("radixflow_prompt_tokens_total") == 0


def test_the_trace_is_flushed_while_serving_and_written_at_shutdown(tokenizer, tmp_path, monkeypatch):
    path = tmp_path / "serve.json"
    file = trace.TraceFile(path, {"clock": "sim"})
    engine = new_engine(SimRunner(SPEC, HARDWARE["h100"]), CFG, events=file.recorder("radixflow"))
    loop = EngineLoop(engine, ServerMetrics(), 8)
    monkeypatch.setattr(trace, "FLUSH_EVERY_S", 0.0)  # every round flushes: what a crash would leave
    loop.start()
    try:
        finals(submit(loop, tokenizer, 2), 2)
        served = json.loads(path.read_text())["traceEvents"]  # valid JSON while still serving
        assert any(e["name"] == "finished" for e in served)
        monkeypatch.setattr(trace, "FLUSH_EVERY_S", 3600.0)
        finals(submit(loop, tokenizer, 1), 1)
    finally:
        loop.shutdown(0.0)
        loop.join(10)
    events = json.loads(path.read_text())["traceEvents"]
    assert sum(e["name"] == "finished" for e in events) == 3 > sum(e["name"] == "finished" for e in served)


def test_the_trace_is_on_disk_once_the_server_goes_idle(tokenizer, tmp_path, monkeypatch):
    """A crash loses at most the last seconds (docs/trace.md): a server that goes idle writes what
    the trace holds then, not only at its next round or at shutdown, however long that takes."""
    path = tmp_path / "serve.json"
    file = trace.TraceFile(path, {"clock": "sim"})
    engine = new_engine(SimRunner(SPEC, HARDWARE["h100"]), CFG, events=file.recorder("radixflow"))
    loop = EngineLoop(engine, ServerMetrics(), 8)
    monkeypatch.setattr(trace, "FLUSH_EVERY_S", 3600.0)  # no timed flush in this test's life
    loop.start()
    try:
        finals(submit(loop, tokenizer, 2), 2)
        deadline = time.monotonic() + 30
        written = lambda: json.loads(path.read_text())["traceEvents"] if path.exists() else []  # noqa: E731
        while sum(e["name"] == "finished" for e in written()) < 2:
            assert time.monotonic() < deadline, "the idle server never wrote its trace"
            time.sleep(0.02)
    finally:
        loop.shutdown(0.0)
        loop.join(10)


def test_a_command_that_fails_the_loop_leaves_no_request_unanswered(make_loop, tokenizer):
    """A failure inside a command (here an admission) fails the engine loop like one inside a
    round: every prompt of the failing submission and every submission queued beside it is still
    answered, none waits forever."""
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))
    inside, gate = threading.Event(), threading.Event()
    held = threading.Thread(target=loop.call, args=(lambda e: (inside.set(), gate.wait(30)),))
    held.start()
    assert inside.wait(30)  # the engine thread is in a command: the next ones are applied together

    def broken_submit(request):
        raise RuntimeError("invariant violated")

    loop.engine.submit = broken_submit  # type: ignore[method-assign]
    first = submit(loop, tokenizer, 2)  # its first prompt's admission raises
    second = submit(loop, tokenizer, 1)  # queued in the same batch of commands, after it
    gate.set()
    held.join(30)
    failed = "the engine failed: RuntimeError: invariant violated"
    assert [(f.status, f.error) for f in finals(first, 2)] == [(500, failed)] * 2
    assert [(f.status, f.error) for f in finals(second, 1)] == [(503, failed)]
    assert loop.join(10) and not loop.accepting


def test_a_request_id_in_use_is_refused_alone_and_the_loop_carries_on(make_loop, tokenizer):
    """A job given again to a replica that still runs its first attempt (the ingress retried
    before the replica saw the cancellation): the engine's refusal of the id escaped the command
    and failed the engine loop, every request on the replica answered 500, and the first attempt,
    its entry overwritten by the second's, was never answered at all."""
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))
    inside, gate = threading.Event(), threading.Event()
    held = threading.Thread(target=loop.call, args=(lambda e: (inside.set(), gate.wait(30)),))
    held.start()
    assert inside.wait(30)  # the engine thread is in a command: both submissions come in together
    first: queue.Queue = queue.Queue()
    again: queue.Queue = queue.Queue()
    for sink in (first.put, again.put):
        req = Request("job-1", (5, 6, 7, 8), sampling=SamplingParams(max_tokens=4))
        loop.submit([(req, RequestTracker(req, tokenizer))], sink, stream=False)
    gate.set()
    held.join(30)
    (refused,) = finals(again, 1)
    assert (refused.status, refused.error) == (400, "duplicate request id 'job-1'")
    (answer,) = finals(first, 1)
    assert answer.status == 200 and len(answer.output.token_ids) == 4
    assert loop.alive and loop.accepting
    assert loop.call(lambda e: (e.requests, e.has_work())) == ([], False)
    # a 400, the caller's mistake, is no failure of the server: an alert on failed requests
    # (as vLLM counts validation errors apart) is not set off by a client's bad request
    assert outcomes(loop) == {"finished": 1, "failed": 0, "aborted": 0, "refused": 1}


def outcomes(loop: EngineLoop) -> dict[str, float]:
    samples = [s for m in loop.metrics.registry.collect() for s in m.samples]
    return {s.labels["outcome"]: s.value for s in samples if s.name == "radixflow_requests_total"}


def test_requests_failed_with_the_engine_are_counted_as_failed(make_loop, tokenizer):
    """Requests answered because the engine loop failed count as failed in
    `radixflow_requests_total`, not as the status they had when it failed (waiting, running)."""
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))

    def broken_step():
        raise RuntimeError("invariant violated")

    loop.engine.step = broken_step  # type: ignore[method-assign]
    finals(submit(loop, tokenizer, 2), 2)
    loop.join(10)
    assert outcomes(loop) == {"finished": 0, "failed": 2, "aborted": 0, "refused": 0}


def test_requests_accepted_while_the_failing_round_ran_count_as_refused_not_failed(make_loop, tokenizer):
    """A request accepted while the round that fails the engine loop runs is never handed to the
    engine: it gets the 503 a request arriving a moment later is refused with, and is counted as
    that one is (`radixflow_requests_rejected_total{reason="not_accepting"}`, once for the HTTP
    request), not as a failed engine request it never was: which of the two a client's request
    became was a race."""
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))
    inside, gate = threading.Event(), threading.Event()

    def failing_step():
        inside.set()
        assert gate.wait(30), "the test never opened the gate"
        raise RuntimeError("invariant violated")

    loop.engine.step = failing_step  # type: ignore[method-assign]
    running = submit(loop, tokenizer, 1)
    assert inside.wait(30)  # the engine thread is in the round that fails
    gap = submit(loop, tokenizer, 2)  # accepted: the loop has not failed yet
    gate.set()
    failed = "the engine failed: RuntimeError: invariant violated"
    assert [(f.status, f.error) for f in finals(running, 1)] == [(500, failed)]
    assert [(f.status, f.error) for f in finals(gap, 2)] == [(503, failed)] * 2
    assert loop.join(10)
    assert outcomes(loop) == {"finished": 0, "failed": 1, "aborted": 0, "refused": 0}
    gauge = loop.metrics.registry.get_sample_value
    assert gauge("radixflow_requests_rejected_total", {"reason": "not_accepting"}) == 1
    assert gauge("radixflow_requests_pending") == 0


def test_a_failed_engine_is_not_read_again_so_a_broken_cache_leaves_no_request_waiting(make_loop, tokenizer):
    """The engine loop fails on a broken invariant, which the cache's own figures may trip on
    again: publishing them after the failure raised out of the failure handling, and requests
    accepted while the failing round ran were never answered."""
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))
    inside, gate = threading.Event(), threading.Event()

    def failing_step():
        inside.set()
        assert gate.wait(30), "the test never opened the gate"
        loop.engine.scheduler.cache.memory = broken  # type: ignore[method-assign]
        raise RuntimeError("invariant violated")

    def broken():
        raise RuntimeError("the cache is broken too")

    loop.engine.step = failing_step  # type: ignore[method-assign]
    running = submit(loop, tokenizer, 1)
    assert inside.wait(30)
    gap = submit(loop, tokenizer, 1)  # accepted while the failing round runs
    gate.set()
    failed = "the engine failed: RuntimeError: invariant violated"
    assert [(f.status, f.error) for f in finals(running, 1)] == [(500, failed)]
    assert [(f.status, f.error) for f in finals(gap, 1)] == [(503, failed)]
    assert loop.join(10)
    assert loop.metrics.registry.get_sample_value("radixflow_requests_pending") == 0


def test_the_queue_gauges_of_a_failed_engine_say_it_runs_nothing(make_loop, tokenizer):
    """Once the engine loop failed and answered everyone with the failure, `/metrics` says no
    request waits or runs (they said those the broken engine held when it failed, forever)."""
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))
    step, steps = loop.engine.step, []

    def failing_after_one_round():
        steps.append(1)
        if len(steps) > 1:
            raise RuntimeError("invariant violated")
        return step()

    loop.engine.step = failing_after_one_round  # type: ignore[method-assign]
    assert {f.status for f in finals(submit(loop, tokenizer, 2, max_tokens=50), 2)} == {500}
    assert loop.join(10)
    held = loop.engine.scheduler
    assert len(held.running) + len(held.waiting) == 2  # the broken engine still holds them
    gauge = loop.metrics.registry.get_sample_value
    assert [gauge(f"radixflow_requests_{g}") for g in ("waiting", "running", "pending")] == [0, 0, 0]


def test_the_pending_gauge_counts_requests_accepted_while_a_round_runs(make_loop, tokenizer):
    """`radixflow_requests_pending` is the bounded queue a 429 is decided on: requests accepted
    while the engine thread is inside a round (seconds on a CPU) count at once, not only once the
    round ends and they are admitted (it read 2 here while 5 were queued)."""
    runner = GatedRunner(SPEC, HARDWARE["h100"])
    loop = make_loop(runner, max_pending=5)
    first, reqs = submitted(loop, tokenizer, 2, max_tokens=500)
    long = [r.id for r in reqs]
    gauge = loop.metrics.registry.get_sample_value
    deadline = time.monotonic() + 30
    while gauge("radixflow_requests_running") != 2:  # the first round ran; the second is held
        assert time.monotonic() < deadline, "the requests never ran"
        time.sleep(0.01)
    later = submit(loop, tokenizer, 3, max_tokens=1)  # queued behind the held round
    with pytest.raises(QueueFull):
        submit(loop, tokenizer, 1)
    assert gauge("radixflow_requests_pending") == 5
    loop.abort(long)
    runner.gate.set()
    finals(later, 3)
    loop.call(lambda e: None)
    assert gauge("radixflow_requests_pending") == 0 and first.empty()


def test_a_call_or_an_abort_after_the_engine_thread_ended_is_answered_at_once(make_loop):
    """Nothing ran a command given once the thread had ended: `call` waited out its whole timeout
    (a stats poll racing a shutdown) and an abort was never done."""
    loop = make_loop(SimRunner(SPEC, HARDWARE["h100"]))
    loop.shutdown(0.0)
    assert loop.join(60)
    assert loop.call(lambda engine: engine.has_work(), timeout=30) is False  # no TimeoutError
    loop.abort(["never-submitted"])  # run where it was given; an unknown id is not an error


class BlockingRunner(SimRunner):
    """A worker call that does not return until ``release`` is set (a stuck device, a deadlock)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.release = threading.Event()
        self.entered = threading.Event()  # a worker call began

    def run(self, batch):
        self.entered.set()
        self.release.wait()
        return super().run(batch)


def poll(check, timeout_s: float = 30.0):
    """``check()`` once it is truthy; fails after ``timeout_s`` (a deadline, not a speed test)."""
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, "the state never flipped"
        time.sleep(0.01)
    return found


def test_an_engine_stuck_in_a_worker_call_says_so_and_recovers(tokenizer):
    # the engine thread was alive, so the health check passed while every request waited on it
    runner = BlockingRunner(SPEC, HARDWARE["h100"])
    loop = EngineLoop(new_engine(runner, CFG), ServerMetrics(), 8, Liveness(0.05, first_round_s=0.05))
    loop.start()
    try:
        assert loop.stalled is None  # idle: nothing is owed
        events = submit(loop, tokenizer, 2)
        why = poll(lambda: loop.stalled)
        assert "no round finished" in why and "2 requests waiting" in why
        assert loop.alive and loop.accepting  # stuck is not dead: it may yet come back
        runner.release.set()
        assert [len(f.output.token_ids) for f in finals(events, 2)] == [4, 4]
        poll(lambda: loop.stalled is None)
    finally:
        runner.release.set()
        loop.shutdown(0.0)
        loop.join(10)


def test_the_loop_s_own_liveness_scales_a_round_up_to_the_engine_s_token_budget():
    # a tiny first round set the 30 s floor for a full-budget prefill after it (`Liveness`)
    loop = EngineLoop(new_engine(SimRunner(SPEC, HARDWARE["h100"]), CFG), ServerMetrics(), 8)
    assert loop.liveness.budget_tokens == CFG.token_budget == 64


def test_a_stop_with_the_engine_stuck_in_a_round_answers_everyone_and_returns(tokenizer):
    # the engine thread never ended (a worker call that never returns), so a stop waited for it
    # forever: the drain's 503s were never sent and the server hung on Ctrl-C/SIGTERM
    runner = BlockingRunner(SPEC, HARDWARE["h100"])
    loop = EngineLoop(new_engine(runner, CFG), ServerMetrics(), 8)
    loop.start()
    try:
        events = submit(loop, tokenizer, 2)
        assert runner.entered.wait(60)  # the first round is in its worker call
        done = threading.Event()
        stopped: list[bool] = []
        stopper = threading.Thread(target=lambda: (stopped.append(loop.stop(0.0, grace_s=0.0)), done.set()))
        stopper.start()
        assert done.wait(60), "stop waited for the stuck engine thread"
        assert stopped == [False]  # the engine thread was left behind, not joined
        answers = finals(events, 2)
        assert [(f.status, f.output) for f in answers] == [(503, None), (503, None)]
        assert "stuck" in answers[0].error
        assert loop.join(0.0)  # nothing is owed: a later join returns at once
        with pytest.raises(NotAccepting):
            submit(loop, tokenizer, 1)
        runner.release.set()  # the round comes back: its late answers go nowhere
        poll(lambda: not loop._thread.is_alive())
        assert events.empty()
    finally:
        runner.release.set()
        loop.shutdown(0.0)
        loop.join(10)
