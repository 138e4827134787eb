"""Seeded fuzz of the real runner's logprobs under the cache, every tiny zoo family.

The property tests beside this module compare greedy tokens with a no-cache reference (budgets of
four tokens and up, prompts shorter than the kernels' 64-token chunk); the pressure module
compares logprobs with transformers on a few examples. Here every reported number is compared
with one no-cache forward of the request's whole sequence: each generated token, its logprob and
its alternatives, and each prompt logprob. The workloads reach what those leave out: budgets of
one to three tokens (block size 1), block size 4, prompts of one token and prompts across the
64-token kernel chunk, equal prompts and prefixes arriving together or later, follow-up turns
that extend a finished request's output (all of it, part of it, with a new tail), the `none`
placement, KV for little more than the longest request and one state slot, and a matmul plan
routing decode rounds off MKL where another backend runs (as a calibrated profile's may).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from engine_utils import new_engine
from model_utils import ZOO_TINY, one_thread, zoo_model  # noqa: F401 (fixture)

from radixflow.engine.engine import Engine
from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.kv_pool import KVPool
from radixflow.models.seq_spec import SeqSpec
from radixflow.runners.linear_backends import BACKENDS
from radixflow.runners.torch_runner import TorchRunner
from radixflow.runners.torch_settings import thread_count
from radixflow.scheduler import PLACEMENTS, SCHEDULING_POLICIES, Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.sampling import SamplingParams

Runners = dict[int, TorchRunner]  # block size -> runner
pytestmark = pytest.mark.usefixtures("one_thread")

SEEDS = range(6)  # per family: about a second each on one thread
BLOCK_SIZES = (1, 4, 8)
KV_TOKENS, MAX_SLOTS = 256, 4  # the runners' pools
# float32 noise between a decode step's kernels and GEMM routes and a plain prefill's (a cached
# value is either bit-equal or off by far more); the pressure module holds transformers to it too
TOL = 1e-4


@dataclass(frozen=True)
class Drawn:
    """One fuzz example: the scheduler's sizes, its policies and the first wave of requests."""

    config: SchedulerConfig
    policy: str
    placement: str
    requests: list[Request]


def draw_prompt(rng: random.Random, earlier: list[tuple[int, ...]]) -> tuple[int, ...]:
    """A prefix of an earlier prompt (maybe all of it), one token, or a shared stem (ending on and
    off blocks and the 64-token chunk) with a short tail."""
    kind = rng.random()
    if earlier and kind < 0.35:
        other = rng.choice(earlier)
        n = len(other)
        return other[: rng.choice([1, n, n, max(1, n - 1), rng.randint(1, n)])]
    if kind < 0.45:
        return (rng.randrange(3, 500),)
    stem = tuple(range(10, 10 + rng.choice([1, 2, 8, 9, 16, 17, 32, 63, 64, 65])))
    return stem + tuple(rng.randrange(3, 500) for _ in range(rng.choice([0, 0, 1, 2, 8, 9])))


def draw_example(rng: random.Random) -> Drawn:
    reqs: list[Request] = []
    for i in range(rng.randint(1, 5)):
        params = SamplingParams(
            max_tokens=rng.choice([1, 1, 2, 3, 5]),
            ignore_eos=True,
            logprobs=2,
            prompt_logprobs=rng.choice([None, 1]),
        )
        prompt = draw_prompt(rng, [r.prompt for r in reqs])
        arrival = rng.choice([0.0, 0.0, 1e-4, 1e-3])
        reqs.append(Request(f"r{i}", prompt, rng.choice(["a", "a", "b"]), arrival_s=arrival, sampling=params))
    bs = rng.choice(BLOCK_SIZES)
    # room for the longest request and its longest follow-up (9 tokens of tail), and a little more
    longest = max(len(r.prompt) + 2 * r.sampling.max_tokens + 9 for r in reqs)
    config = SchedulerConfig(
        token_budget=max(bs, rng.choice([1, 2, 3, bs + 1, 8, 16, 17, 32])),
        max_requests=rng.randint(1, 5),
        block_size=bs,
        num_blocks=-(-longest // bs) + rng.choice([0, 1, 2, 8]),
        num_state_slots=rng.randint(1, MAX_SLOTS),
    )
    policy, placement = rng.choice(sorted(SCHEDULING_POLICIES)), rng.choice(sorted(PLACEMENTS))
    return Drawn(config, policy, placement, reqs)


def follow_ups(rng: random.Random, engine: Engine) -> list[Request]:
    """Next turns of finished requests: the prompt, all or part of the output, a new tail."""
    out = []
    for i, r in enumerate(list(engine.requests)):
        if r.output and rng.random() < 0.6:
            kept = r.output[: rng.choice([len(r.output), len(r.output) - 1, rng.randint(0, len(r.output))])]
            tail = tuple(rng.randrange(3, 500) for _ in range(rng.choice([0, 0, 1, 2, 9])))
            prompt = tuple(r.prompt) + tuple(kept) + tail
            arrival = engine.now + rng.choice([0.0, 1e-4])
            out.append(Request(f"f{i}", prompt, r.namespace, arrival, r.sampling))
    return out


def run_all(engine: Engine, reqs: list[Request]) -> None:
    for r in reqs:
        engine.submit(r)
    while engine.has_work():
        engine.step()
        engine.check_integrity()


def reference_logprobs(runner: TorchRunner, tokens: tuple[int, ...]) -> torch.Tensor:
    """``[len(tokens), vocab]``: row ``p`` the log-softmax after ``tokens[: p + 1]``, from one plain
    forward of the whole sequence with no cache at all."""
    bs = runner.block_size
    nblocks = -(-len(tokens) // bs)
    kv = KVPool(runner.net.kv_layout(), nblocks, bs, runner.dtype, runner.device)
    state = StatePool(runner.net.state_layout(), 0, torch.float32, runner.device)
    spec = SeqSpec(0, len(tokens), list(range(nblocks)))
    fb = ForwardBatch.build([(list(tokens), spec)], kv, state, runner.device)
    with thread_count(runner.threads), torch.inference_mode():
        return torch.log_softmax(runner.net.compute_logits(runner.net(fb)).float(), dim=-1)


def check_request(runner: TorchRunner, r: Request) -> None:
    """Every token, logprob, alternative and prompt logprob of ``r`` against the reference."""
    assert r.status is RequestStatus.FINISHED and len(r.output) == r.sampling.max_tokens, (r.id, r.error)
    ref = reference_logprobs(runner, tuple(r.prompt) + tuple(r.output))
    for j, s in enumerate(r.output_logprobs):
        row = ref[len(r.prompt) - 1 + j]
        assert s.token == r.output[j] == int(row.argmax()), (r.id, j)
        got = [(s.token, s.logprob), *s.top]
        assert max(abs(v - float(row[t])) for t, v in got) <= TOL, (r.id, j)
    if r.sampling.prompt_logprobs is not None:
        assert [p.position for p in r.prompt_logprobs] == list(range(1, len(r.prompt))), r.id
        for p in r.prompt_logprobs:
            assert abs(p.logprob - float(ref[p.position - 1, p.token])) <= TOL, (r.id, p.position)


def decode_plan() -> str:
    """Decode rounds on a backend other than MKL where one runs here (prefill stays on MKL, as a
    calibrated plan's must), else MKL throughout."""
    other = next((n for n, b in BACKENDS.items() if n != "mkl" and b.problem() is None), "mkl")
    return f"single={other},decode={other},prefill=mkl"


@pytest.fixture(scope="module", params=ZOO_TINY)
def runners(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runners:
    path: Path = zoo_model(tmp_path_factory, request.param)
    plan = decode_plan()
    return {
        bs: TorchRunner(path, bs, KV_TOKENS // bs, MAX_SLOTS, predict_rounds=False, matmul=plan)
        for bs in BLOCK_SIZES
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_every_logprob_under_the_cache_matches_a_no_cache_forward(runners: Runners, seed: int) -> None:
    rng = random.Random(seed)
    drawn = draw_example(rng)
    runner = runners[drawn.config.block_size]
    engine = new_engine(runner, drawn.config, policy=drawn.policy, placement=drawn.placement)
    run_all(engine, drawn.requests)
    run_all(engine, follow_ups(rng, engine))
    usage = engine.cache.usage()
    assert usage.locked_blocks == 0 and usage.working_slots == 0
    for r in engine.requests:
        check_request(runner, r)
