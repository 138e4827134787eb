"""The pluggable policies in combination on the real runner, sized through the options' path.

A few sampled points of policy × placement (``none`` and the policy's own included) × eviction ×
admission × memory (caps, one cache_memory budget, or both, down to barely the longest request)
per tiny zoo family, built as every door builds them (`plan_engine` → `build` → `engine`). Every
request's greedy tokens equal the same request run alone on a fresh engine (no cache to reuse);
the cache's integrity holds after every step and nothing is left locked at the end.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from model_utils import ZOO_TINY, one_thread, zoo_model  # noqa: F401 (fixture)

from radixflow.cache import EVICTION_POLICIES
from radixflow.engine.engine import Engine
from radixflow.options import EngineOptions, build
from radixflow.problems import ProblemError
from radixflow.scheduler import PLACEMENTS, SCHEDULING_POLICIES, Request, RequestStatus
from radixflow.scheduler.admission import ADMISSIONS
from radixflow.scheduler.sampling import SamplingParams

pytestmark = pytest.mark.usefixtures("one_thread")

CASES = 3  # per family


def workload(rng: random.Random, bs: int) -> list[Request]:
    stem = tuple(rng.randrange(3, 200) for _ in range(bs * rng.randint(1, 3) + rng.choice([0, 1])))
    reqs = []
    for i in range(rng.randint(2, 5)):
        cut = rng.choice([len(stem), bs * rng.randint(0, len(stem) // bs), rng.randint(1, len(stem))])
        tail = tuple(rng.randrange(3, 200) for _ in range(rng.choice([0, 1, bs])))
        prompt = stem[:cut] + tail or (5,)
        params = SamplingParams(max_tokens=rng.choice([1, 2, bs + 1]), ignore_eos=True)
        reqs.append(Request(f"r{i}", prompt, sampling=params))
    return reqs


def drive(engine: Engine, reqs: list[Request], rng: random.Random | None = None) -> set[str]:
    """Step to the end with integrity checks; with ``rng``, abort one request mid-prefill at times."""
    aborted = set()
    for r in reqs:
        engine.submit(r)
    while engine.has_work():
        mid = [r for r in reqs if r.status is RequestStatus.RUNNING and r.computed < len(r.prompt)]
        if rng is not None and mid and rng.random() < 0.1:
            victim = rng.choice(mid)
            engine.abort(victim.id)
            aborted.add(victim.id)
            engine.check_integrity()
        engine.step()
        engine.check_integrity()
    usage = engine.cache.usage()
    assert usage.locked_blocks == 0 and usage.working_slots == 0 and engine.cache.promised == 0
    return aborted


def case(path: Path, seed: int) -> None:
    rng = random.Random(seed)
    bs = rng.choice([1, 4, 8])
    reqs = workload(rng, bs)
    base = {"model": str(path), "runner": "torch", "dtype": "float32", "block_size": bs}
    entry = build.plan_engine(EngineOptions(**base)).choice.entry_bytes(bs)
    longest = max(-(-r.max_length // bs) for r in reqs)
    memory: dict[str, object] = {}
    mode = rng.choice(["caps", "budget", "both"])
    if mode != "budget":
        memory |= {"kv_blocks": longest + rng.choice([0, 1, 4]), "state_slots": rng.choice([None, 1, 2])}
    if mode != "caps":
        memory["cache_memory"] = str(longest * entry.block + entry.slot * rng.choice([1, 2, 5]))
    options = EngineOptions(
        **base,
        token_budget=bs * rng.randint(1, 3),
        max_requests=rng.randint(1, 4),
        policy=rng.choice(sorted(SCHEDULING_POLICIES)),
        placement=rng.choice([None, *sorted(PLACEMENTS)]),
        eviction=rng.choice(sorted(EVICTION_POLICIES)),
        admission=rng.choice(sorted(ADMISSIONS)),
        **memory,
    )
    try:
        engine = build.build_engine(options, reqs)
    except ProblemError as e:  # barely too small: refused up front, in one line
        assert e.problem.param == "cache_memory" and "\n" not in e.problem.message, options
        return
    aborted = drive(engine, reqs, rng)
    fresh = build.build_engine(EngineOptions(**base, placement="none"), reqs)
    for r in reqs:
        if r.id in aborted:
            assert r.status is RequestStatus.ABORTED, (options, r.id)
            continue
        assert r.status is RequestStatus.FINISHED, (options, r.id, r.status, r.error)
        alone = Request(r.id, r.prompt, sampling=r.sampling)
        drive(fresh, [alone])
        assert r.output == alone.output, (options, r.id)
        fresh = build.build_engine(EngineOptions(**base, placement="none"), reqs)


@pytest.mark.parametrize("name", ZOO_TINY)
def test_every_combination_generates_what_a_fresh_engine_does(tmp_path_factory, name: str) -> None:
    path = zoo_model(tmp_path_factory, name)
    for seed in range(CASES):
        case(path, 1000 * ZOO_TINY.index(name) + seed)
