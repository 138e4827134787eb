"""The fleet simulation: N engines on one modelled clock behind a router; a replica dying mid-run."""

from __future__ import annotations

import pytest
from engine_utils import new_engine

from radixflow.bench.fleet import QueueSample, ReplicaKill, run_fleet
from radixflow.bench.fleet_metrics import fleet_figures, fleet_policy_result, imbalance
from radixflow.bench.harness import fresh_copy
from radixflow.bench.metrics import summarize
from radixflow.engine.engine import Engine
from radixflow.fleet import RouterConfig, make_router
from radixflow.options import EngineOptions, plan_engine
from radixflow.scheduler.request import RequestStatus
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec


@pytest.fixture(scope="module")
def setup():
    plan = plan_engine(
        EngineOptions.from_mapping({"model": "qwen3_5-2b", "runner": "sim", "hardware": "h200"})
    )
    spec = WorkloadSpec(
        groups=12, candidates=6, context_len=512, candidate_len=32, arrival="poisson", rate=3000.0,
        vocab_size=plan.choice.vocab_size,
    )  # fmt: skip
    requests = build_workload(spec).requests
    return plan.build([len(r.prompt) for r in requests]), requests


def fleet(setup, router: str, replicas: int = 4, kills=()):
    built, requests = setup

    def engine() -> Engine:
        return new_engine(built.runner, built.scheduler)

    return run_fleet(fresh_copy(requests), engine, replicas, make_router(router, RouterConfig(seed=1)), kills)


def test_every_request_is_answered_and_routed_once(setup):
    for router in ("pow2", "prefix", "checkpoint"):
        run = fleet(setup, router)
        assert len(run.requests) == len(setup[1])
        assert all(r.status is RequestStatus.FINISHED for r in run.requests)
        assert sum(len(r.routed) for r in run.replicas) == len(setup[1])
        assert all(r.routed for r in run.replicas), f"{router} left a replica idle"


def test_checkpoint_router_reuses_more_than_pow2(setup):
    built = setup[0]
    figures = {}
    for router in ("pow2", "checkpoint"):
        run = fleet(setup, router)
        figures[router] = (
            fleet_policy_result(router, run, built.scheduler, None),
            fleet_figures(run, router),
        )
    pow2, ckpt = figures["pow2"], figures["checkpoint"]
    assert ckpt[0].reuse_rate > 1.5 * pow2[0].reuse_rate
    assert ckpt[1]["affinity_share"] > 0.7 and pow2[1]["affinity_share"] == 0.0
    assert len(ckpt[1]["per_replica"]) == 4 and ckpt[1]["max_queue"] >= 1


def test_one_replica_fleet_matches_a_lone_engine(setup):
    built, requests = setup
    run = fleet(setup, "checkpoint", replicas=1)
    engine = new_engine(built.runner, built.scheduler)
    engine.run(fresh_copy(requests))
    by_id = {r.id: r for r in engine.requests}
    assert [(r.reused, r.finish_s) for r in run.requests] == [
        (by_id[r.id].reused, by_id[r.id].finish_s) for r in run.requests
    ]


def test_the_fleets_rounds_lower_bound_is_its_replicas_summed_as_its_rounds_are(setup):
    # its rounds are every replica's rounds, summed; its lower bound was the largest replica's
    # alone (and without the replicas' dependency depths): 4 busy replicas read about 4x their bound
    built = setup[0]
    run = fleet(setup, "checkpoint")
    result = fleet_policy_result("p", run, built.scheduler, None)
    own = [summarize("p", r.engine, built.scheduler) for r in run.replicas]  # each as one engine
    assert result.rounds == sum(o.rounds for o in own)
    assert result.rounds_lower_bound == sum(o.rounds_lower_bound for o in own) <= result.rounds


def test_a_dying_replica_has_its_requests_retried(setup):
    whole = fleet(setup, "checkpoint")
    mid = whole.requests[len(whole.requests) // 2].arrival_s
    run = fleet(setup, "checkpoint", kills=[ReplicaKill(0, mid)])
    assert run.retried > 0
    assert all(r.status is RequestStatus.FINISHED for r in run.requests)  # none lost, none hangs
    assert not run.replicas[0].alive
    # nothing was routed to the dead replica after it died: its requests all arrived before
    assert all(r.arrival_s <= mid for r in run.replicas[0].engine.requests)


def test_a_fleet_with_no_survivor_fails_requests_with_an_error(setup):
    run = fleet(setup, "pow2", replicas=1, kills=[ReplicaKill(0, 0.001)])
    failed = [r for r in run.requests if r.status is RequestStatus.FAILED]
    assert failed and all(r.error == "no replica is left to serve it" for r in failed)
    assert all(r.status in (RequestStatus.FINISHED, RequestStatus.FAILED) for r in run.requests)


def test_imbalance_measures_how_long_a_queue_stays_hot():
    samples = [QueueSample(0.0, (1, 1, 1)), QueueSample(1.0, (10, 1, 1)), QueueSample(3.0, (2, 2, 2))]
    figures = imbalance(samples, 4.0)
    assert figures["longest_hot_s"] == 2.0 and figures["hot_share"] == 0.5
    assert figures["imbalance_mean"] == pytest.approx((1 + 2.5 + 1) / 3)
    calm = imbalance([QueueSample(0.0, (2, 0, 0))], 1.0)  # 2 > 2 x mean, but by under 2 requests
    assert calm["longest_hot_s"] == 0.0


def test_a_replica_answers_nothing_after_it_died(setup):
    # a kill landing inside one of the replica's rounds let that round finish: the dead replica
    # answered requests after its death, and their retries were routed only when it ended
    whole = fleet(setup, "checkpoint")
    rounds = whole.replicas[0].engine.rounds
    ends = {r.finish_s for r in whole.replicas[0].engine.requests}
    crossing = next(rd for rd in rounds if rd.start_s + rd.duration_s in ends and rd.duration_s > 0)
    at = crossing.start_s + crossing.duration_s / 2  # mid-round: the round's answers come too late
    run = fleet(setup, "checkpoint", kills=[ReplicaKill(0, at)])
    kept = {id(r) for r in run.requests}
    dead = run.replicas[0].engine.requests
    assert all(r.finish_s <= at for r in dead if id(r) in kept)  # kept: answered before it died
    assert all(r.status is RequestStatus.FINISHED for r in run.requests)
    retried = {r.id for r in dead if id(r) not in kept}
    assert retried and run.retried == len(retried)
    # the retries are routed at the death and run on the survivors from then on
    assert all(s.t >= prev.t for prev, s in zip(run.samples, run.samples[1:], strict=False))
    survivors = [rd for rep in run.replicas[1:] for rd in rep.engine.rounds]
    assert all(rd.start_s >= at for rd in survivors if any(c[0] in retried for c in rd.chunks))


def test_an_idle_survivor_runs_retries_only_after_the_death(setup):
    # the survivor had nothing to do, its clock still at 0: the retries (which keep their first
    # arrival for latency) ran on it before the replica they were retried from had died
    built, requests = setup
    one_context = [r for r in requests if r.id.startswith("g0")][:4]  # too few to overload one
    whole = fleet((built, one_context), "checkpoint", replicas=2)
    busy = next(i for i, rep in enumerate(whole.replicas) if rep.routed)
    assert not whole.replicas[1 - busy].routed  # the siblings followed the first: one idle replica
    last = whole.replicas[busy].engine.rounds[-1]
    at = last.start_s + last.duration_s / 2
    run = fleet((built, one_context), "checkpoint", replicas=2, kills=[ReplicaKill(busy, at)])
    assert run.retried and all(r.status is RequestStatus.FINISHED for r in run.requests)
    assert all(rd.start_s >= at for rd in run.replicas[1 - busy].engine.rounds)
    assert all(r.finish_s > at for r in run.replicas[1 - busy].engine.requests)


def test_a_replica_killed_twice_dies_once(setup):
    # the second kill of a dead replica retried its unfinished requests again: a second copy went
    # to a survivor that already ran the first (ValueError: duplicate request id)
    whole = fleet(setup, "checkpoint")
    mid = whole.requests[len(whole.requests) // 2].arrival_s
    once = fleet(setup, "checkpoint", kills=[ReplicaKill(0, mid)])
    twice = fleet(setup, "checkpoint", kills=[ReplicaKill(0, mid), ReplicaKill(0, mid * 1.5)])
    assert twice.retried == once.retried
    assert [(r.id, r.finish_s) for r in twice.requests] == [(r.id, r.finish_s) for r in once.requests]


def test_a_kill_naming_no_replica_is_one_line(setup):
    with pytest.raises(ValueError, match=r"ReplicaKill\(replica=4.*4 replicas"):
        fleet(setup, "pow2", kills=[ReplicaKill(4, 0.001)])
    with pytest.raises(ValueError, match=r"replica=-1"):
        fleet(setup, "pow2", kills=[ReplicaKill(-1, 0.001)])


def test_a_death_after_the_run_leaves_the_clocks_alone(setup):
    # every survivor's clock was moved to the death though nothing was retried on it: a kill
    # after the last answer made the makespan the time of the death
    whole = fleet(setup, "checkpoint")
    end = max(r.engine.now for r in whole.replicas)
    late = fleet(setup, "checkpoint", kills=[ReplicaKill(1, end * 10)])
    assert late.retried == 0
    assert [r.engine.now for r in late.replicas] == [r.engine.now for r in whole.replicas]
    built = setup[0]
    assert fleet_policy_result("checkpoint", late, built.scheduler, None).makespan_s == end


def test_per_replica_queues_count_the_samples_after_a_death(setup):
    # samples taken after a death (fewer live queues) were dropped from every replica's figures:
    # a kill at the start left the survivors, which served everything, with no queue figures
    run = fleet(setup, "checkpoint", kills=[ReplicaKill(0, 0.0)])
    figures = fleet_figures(run, "checkpoint")["per_replica"]
    assert figures[0]["routed"] == 0 and figures[0]["mean_queue"] is None
    for replica in figures[1:]:
        assert replica["routed"] > 0 and replica["mean_queue"] is not None and replica["max_queue"] > 0
    whole = fleet(setup, "checkpoint")  # without a death: the replica's queue at every arrival
    assert [r["mean_queue"] for r in fleet_figures(whole, "checkpoint")["per_replica"]] == [
        sum(s.queues[i] for s in whole.samples) / len(whole.samples) for i in range(4)
    ]


def test_a_fleet_that_routed_nothing_has_figures(setup):
    # no sample (the only replica died before the first arrival): imbalance's zip of the samples
    # with their successors' times raised ValueError
    run = fleet(setup, "checkpoint", replicas=1, kills=[ReplicaKill(0, 0.0)])
    assert not run.samples and all(r.status is RequestStatus.FAILED for r in run.requests)
    figures = fleet_figures(run, "checkpoint")
    assert figures["imbalance_mean"] is None and figures["hot_share"] is None
    assert figures["longest_hot_s"] == 0.0 and figures["affinity_share"] is None


def test_per_replica_answers_are_the_fleets_answers(setup):
    # answers a dead replica finished after its death (retried elsewhere) were counted as its
    # completions too: the replicas' completions added up to more than the fleet answered
    whole = fleet(setup, "checkpoint")
    ends = {r.finish_s for r in whole.replicas[0].engine.requests}
    crossing = next(
        rd
        for rd in whole.replicas[0].engine.rounds
        if rd.start_s + rd.duration_s in ends and rd.duration_s > 0
    )
    run = fleet(setup, "checkpoint", kills=[ReplicaKill(0, crossing.start_s + crossing.duration_s / 2)])
    assert run.retried
    per_replica = fleet_figures(run, "checkpoint")["per_replica"]
    finished = [r for r in run.requests if r.status is RequestStatus.FINISHED]
    assert sum(r["completed"] for r in per_replica) == len(finished) == len(run.requests)


def test_a_fleet_digests_the_outputs_in_the_order_a_single_engine_does():
    """The outputs' digest is over the requests as given (the workload's queue order), as
    `summarize` takes it: the same outputs under one engine or a fleet have the same digest."""
    plan = plan_engine(EngineOptions.from_mapping({"model": "qwen3_5-2b", "runner": "sim"}))
    spec = WorkloadSpec(
        groups=12, candidates=2, context_len=32, candidate_len=8, order="shuffled",
        vocab_size=plan.choice.vocab_size,
    )  # fmt: skip
    requests = build_workload(spec).requests
    built = plan.build([len(r.prompt) for r in requests])
    single = new_engine(built.runner, built.scheduler)
    single.run(fresh_copy(requests))
    make = lambda: new_engine(built.runner, built.scheduler)  # noqa: E731
    run = run_fleet(fresh_copy(requests), make, 3, make_router("pow2", RouterConfig(seed=1)))
    fleet_sha = fleet_policy_result("native", run, built.scheduler, None).outputs_sha256
    assert fleet_sha == summarize("native", single, built.scheduler).outputs_sha256
    assert [r.id for r in run.requests] == [r.id for r in requests]


def test_fleet_failures_list_every_unfinished_request_in_order_with_its_reason(setup):
    # the list was built with `r not in done` over a list: quadratic in the requests (now by status)
    run = fleet(setup, "checkpoint")
    failed, aborted = run.requests[3], run.requests[10]
    failed.status, failed.error = RequestStatus.FAILED, "device lost"
    aborted.status, aborted.error = RequestStatus.ABORTED, None
    result = fleet_policy_result("checkpoint", run, setup[0].scheduler, None)
    expected = [(failed.id, "device lost"), (aborted.id, "aborted")]
    assert [(f.id, f.reason) for f in result.failures] == expected
    assert (result.completed, result.failed) == (len(run.requests) - 2, 2)


class _Recording:
    """A router that records what it was shown of the replicas at each arrival."""

    uses_digests = True

    def __init__(self, name: str) -> None:
        self.inner, self.name, self.seen = make_router(name, RouterConfig(seed=1)), name, []

    def choose(self, request, replicas):
        self.seen.append({r.name: r for r in replicas})
        return self.inner.choose(request, replicas)

    def forget(self, replica):
        self.inner.forget(replica)


def test_a_replica_mid_round_is_seen_as_it_is_at_the_arrival_not_at_the_rounds_end(setup):
    # the fleet ran a replica's round to its end before routing an arrival that came during it:
    # the router saw that round's requests answered and its checkpoints READY before they were
    # (a queue shorter than it was, and a context no replica held yet)
    built, requests = setup
    make = lambda: new_engine(built.runner, built.scheduler)  # noqa: E731
    alone = run_fleet(fresh_copy(requests[:1]), make, 2, _Recording("pow2"))
    end = alone.requests[0].finish_s
    first, during, after = fresh_copy(requests[:3])
    during.arrival_s, after.arrival_s = end / 2, end * 1.5
    router = _Recording("pow2")
    run = run_fleet([first, during, after], make, 2, router)
    busy = next(r.name for r in run.replicas if r.engine.requests and r.engine.requests[0] is first)
    assert first.finish_s == end > during.arrival_s
    seen = router.seen[1][busy]
    assert (seen.queue, seen.digest.hashes) == (1, frozenset())
    assert router.seen[2][busy].digest.hashes  # once its round has ended, its checkpoints count


def test_routed_queues_are_the_replicas_queues_at_each_arrival(setup):
    # every arrival's sample: a replica's queue is its requests that arrived before and were not
    # answered by then (a round in progress at the arrival has not answered anything yet)
    run = fleet(setup, "checkpoint")
    for sample in run.samples:
        for name, queue in zip(sample.replicas, sample.queues, strict=True):
            engine = next(r.engine for r in run.replicas if r.name == name)
            held = [
                r for r in engine.requests
                if r.arrival_s < sample.t and (r.finish_s is None or r.finish_s > sample.t)
            ]  # fmt: skip
            assert queue == len(held), (sample.t, name)


def test_two_requests_with_one_id_are_refused_as_one_engine_refuses_them(setup):
    # one engine refuses a second request under an id in use; a fleet sent them to two replicas
    # and answered both as the later one: the first request's answer was lost without a word
    built, requests = setup
    twins = fresh_copy(requests[:2])
    twins[1].id = twins[0].id
    with pytest.raises(ValueError, match=rf"duplicate request id '{twins[0].id}'"):
        run_fleet(twins, lambda: new_engine(built.runner, built.scheduler), 2, make_router("pow2"))


def test_a_prompt_the_engine_refuses_is_taken_back_from_the_routers_memory(setup):
    # the Ray path takes a refused (400) job back from the router's memory; the sim kept it
    # recorded, so the prompt's siblings followed it to a replica that cached none of it
    built, requests = setup
    bad = fresh_copy(requests[:1])[0]
    bad.prompt = bad.prompt + (built.runner.model.vocab_size,)  # a token the model has not
    router = make_router("prefix", RouterConfig(seed=1))
    run = run_fleet([bad], lambda: new_engine(built.runner, built.scheduler), 2, router)
    assert run.requests[0].status is RequestStatus.FAILED
    assert len(router.memory) == 0


def test_a_fleet_of_no_replicas_is_refused_not_run_as_one_whose_replicas_all_died(setup):
    # every request failed "no replica is left to serve it", as if a fleet had lost them all
    built, requests = setup
    with pytest.raises(ValueError, match="a fleet needs at least 1 replica, got 0"):
        run_fleet(requests[:1], lambda: new_engine(built.runner, built.scheduler), 0, make_router("pow2"))
