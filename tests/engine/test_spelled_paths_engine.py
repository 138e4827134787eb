"""The engine with `lookup.SpelledPaths` (each extend's path, kept for the request's next chunk)
against the engine without it (every hint walked up): on workloads of prompts that share prefixes
(identical ones, a prompt a prefix of another, cuts on block boundaries), long decodes, scarce KV
(preemption and eviction) and aborts, both runs end alike, the checking runner
finds every chunk reading its own prefix's KV, and the cache's integrity (each kept path the
walk's) holds after every step."""

from __future__ import annotations

import random

import pytest
from checking_runner import VOCAB, CheckingRunner
from engine_utils import new_engine

from radixflow.cache import lookup
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.scheduler.sampling import SamplingParams


def _workload(rng: random.Random, bs: int) -> list[Request]:
    stem = tuple(rng.randrange(1, VOCAB) for _ in range(bs * rng.randint(1, 5) + rng.choice([0, 1])))
    reqs = []
    for i in range(rng.randint(2, 8)):
        cut = rng.choice(
            [len(stem), len(stem), bs * rng.randint(0, len(stem) // bs), rng.randint(1, len(stem))]
        )
        prompt = stem[:cut] + tuple(rng.randrange(1, VOCAB) for _ in range(rng.choice([0, 1, bs]))) or (1,)
        sampling = SamplingParams(max_tokens=rng.choice([1, bs + 1, 3 * bs + 2]), ignore_eos=True)
        reqs.append(Request(f"r{i}", prompt, rng.choice("aab"), sampling=sampling))
    return reqs


def _run(seed: int, remember: bool) -> list[tuple[object, ...]]:
    rng = random.Random(seed)
    bs = rng.choice([1, 2, 4])
    reqs = _workload(rng, bs)
    longest = max(-(-r.max_length // bs) for r in reqs)
    config = SchedulerConfig(
        token_budget=bs * rng.randint(1, 4), block_size=bs, num_blocks=longest + rng.choice([0, 2, 64])
    )
    runner = CheckingRunner(rng.random() < 0.7, bs)
    engine = new_engine(runner, config)
    runner.cache = engine.cache
    if not remember:
        engine.cache.publisher.paths.remember = lambda *args: None  # type: ignore[method-assign]
    for r in reqs[:3]:
        engine.submit(r)
    late, step = reqs[3:], 0
    while engine.has_work() or late:
        if step == 3 and engine.has_work():  # an abort, mid-prefill or mid-decode
            engine.abort(reqs[rng.randrange(min(3, len(reqs)))].id)
        if late and step % 2:
            engine.submit(late.pop(0))
        engine.step()
        engine.check_integrity()
        step += 1
    return [(r.id, r.status, r.output, r.finish_reason) for r in engine.requests]


@pytest.mark.parametrize("seeds", [range(0, 20), range(20, 40)])
def test_the_engine_ends_alike_with_and_without_kept_paths(seeds: range) -> None:
    for seed in seeds:
        assert _run(seed, remember=True) == _run(seed, remember=False), seed


def test_the_engine_answers_decode_steps_from_kept_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above compares something: decode steps are answered from memory."""
    answered = []
    take = lookup.SpelledPaths.take

    def spy(paths: lookup.SpelledPaths, *args: object) -> object:
        answered.append(paths._shape == paths.tree.shape and args[2].node_id in paths._known)  # type: ignore[attr-defined]
        return take(paths, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(lookup.SpelledPaths, "take", spy)
    for seed in range(5):
        _run(seed, remember=True)
    assert sum(answered) > 20
