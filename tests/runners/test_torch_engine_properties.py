"""The torch runner under the real Engine, for every hybrid family (and an attention control).

Random workloads built to hit the edges where recurrent state goes wrong: chunked prompts whose
chunks end on checkpoint positions and block boundaries, prompts that are prefixes of other
prompts, one to three state slots, small token budgets. After every round the cache's integrity
holds; at the end nothing stays locked, every request has finished (each fits the cache alone)
and its token equals a plain no-cache prefill of its prompt. With decoding (several tokens, an
abort mid-run) every finished request's tokens equal a no-cache greedy loop's. Groups of
candidates arriving together make `adaptive`'s consumers follow their producer into its round
(the recurrent layers' second wave).
"""

from __future__ import annotations

import importlib
import random
from pathlib import Path

import pytest
import torch
from engine_utils import drive, new_engine
from hypothesis import given, settings
from hypothesis import strategies as st
from model_utils import one_thread  # noqa: F401 (fixture)

from radixflow.cache import EVICTION_POLICIES
from radixflow.models.io.loader import save_model
from radixflow.models.layers import Config
from radixflow.models.registry import model_class
from radixflow.models.zoo_catalogue import FAMILY_SOURCES, preset_config
from radixflow.runners.sampler import SampleRow, adjusted
from radixflow.runners.torch_runner import TorchRunner
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.admission import ADMISSIONS
from radixflow.scheduler.sampling import SamplingParams
from radixflow.scheduler.token_sequences import ends_the_output

Runners = dict[int, TorchRunner]  # block size -> runner
pytestmark = pytest.mark.usefixtures("one_thread")

BLOCK_SIZES = (1, 8)  # 1: checkpoints can land on any token, even a chunk's first one
MAX_PROMPT = 48
KV_TOKENS, MAX_SLOTS = 192, 4  # the runners' pools; each example's cache uses at most these
# Shared stems diverging on and off block boundaries (tokens below every tiny vocabulary).
STEMS = [
    tuple(range(10, 42)),
    tuple(range(10, 26)) + tuple(range(100, 116)),
    tuple(range(10, 29)) + tuple(range(200, 208)),
    tuple(range(300, 324)),
]
# family -> hypothesis examples, tuned to keep the whole module under a minute on 2 cores
EXAMPLES = {
    "qwen3_5": 80,
    "qwen3_next": 80,
    "lfm2": 80,
    "nemotron_h": 80,
    "falcon_h1": 80,
    "qwen3": 30,  # full-attention control
}


@st.composite
def prompts(draw: st.DrawFn, earlier: list[tuple[int, ...]]) -> tuple[int, ...]:
    if earlier and draw(st.integers(0, 2)) == 0:  # a prefix of an earlier prompt (maybe all of it)
        other = draw(st.sampled_from(earlier))
        return other[: draw(st.sampled_from([8, 16, len(other)]) | st.integers(1, len(other)))]
    stem = draw(st.sampled_from(STEMS))
    cut = draw(st.sampled_from([8, 16, 24, len(stem)]) | st.integers(0, len(stem)))
    tail_len = draw(st.sampled_from([0, 1, 8, 16]) | st.integers(0, 16))
    tail = tuple(draw(st.lists(st.integers(3, 500), min_size=tail_len, max_size=tail_len)))
    return (stem[:cut] + tail)[:MAX_PROMPT] or (7,)


@st.composite
def workloads(draw: st.DrawFn) -> list[Request]:
    reqs: list[Request] = []
    for i in range(draw(st.integers(1, 6))):
        prompt = draw(prompts([r.prompt for r in reqs]))
        arrival = draw(st.sampled_from([0.0, 0.0, 0.0, 1e-4]))
        reqs.append(Request(f"r{i}", prompt, draw(st.sampled_from(["a", "a", "a", "b"])), arrival_s=arrival))
    return reqs


@st.composite
def configs(draw: st.DrawFn) -> SchedulerConfig:
    bs = draw(st.sampled_from(BLOCK_SIZES))
    kv_tokens = draw(st.integers(MAX_PROMPT + 2 * bs, KV_TOKENS))
    return SchedulerConfig(
        token_budget=draw(st.sampled_from([8, 16, 24, 32]) | st.integers(max(bs, 4), 40)),
        max_requests=draw(st.integers(1, 4)),
        block_size=bs,
        num_blocks=kv_tokens // bs,
        num_state_slots=draw(st.integers(1, 3) | st.just(MAX_SLOTS)),
    )


@pytest.fixture(scope="module", params=list(EXAMPLES))
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The family's tiny preset built once with the zoo's seed: ``(family, directory)``."""
    family = request.param
    config = preset_config(f"{family}-tiny")
    model = model_class(config["model_type"])(Config(config))
    importlib.import_module(FAMILY_SOURCES[family][0]).init_weights(model, torch.Generator().manual_seed(0))
    path: Path = tmp_path_factory.mktemp(family)
    save_model(model, path)
    return family, path


@pytest.fixture(scope="module")
def runners(checkpoint: tuple[str, Path]) -> Runners:
    """One runner per block size. No learned round predictor: its prediction follows the wall
    clock, and the counts these tests assert (follows) must not depend on the machine's load."""
    family, path = checkpoint
    return {
        bs: TorchRunner(path, bs, KV_TOKENS // bs, MAX_SLOTS, label=family, predict_rounds=False)
        for bs in BLOCK_SIZES
    }


def run_engine(
    runner: TorchRunner,
    cfg: SchedulerConfig,
    policy: str,
    placement: str,
    reqs: list[Request],
    eviction: str | None = None,
    admission: str | None = None,
):
    engine = new_engine(
        runner, cfg, policy=policy, placement=placement, eviction=eviction, admission=admission
    )
    for r in reqs:
        engine.submit(Request(r.id, r.prompt, r.namespace, r.arrival_s))
    while engine.has_work():
        engine.step()
        engine.cache.check_integrity()
    usage = engine.cache.usage()
    assert usage.locked_blocks == 0 and usage.working_slots == 0  # everything released
    return engine


def check_against_reference(
    runner: TorchRunner,
    cfg: SchedulerConfig,
    placement: str,
    reqs: list[Request],
    eviction: str | None = None,
    admission: str | None = None,
):
    reference = runner.reference_tokens(reqs)
    for policy in ("native", "radixflow", "adaptive"):
        engine = run_engine(runner, cfg, policy, placement, reqs, eviction, admission)
        for r in engine.requests:
            # every drawn prompt fits the cache alone (KV for MAX_PROMPT, >= 1 slot): none may fail
            assert r.status is RequestStatus.FINISHED, (policy, r.id, r.error)
            assert r.output[0] == reference[r.id], (policy, r.id)


def test_torch_engine_matches_the_no_cache_reference(runners: Runners) -> None:
    family = runners[BLOCK_SIZES[0]].model.name

    @settings(max_examples=EXAMPLES[family], deadline=None)
    @given(
        reqs=workloads(),
        cfg=configs(),
        placement=st.sampled_from(["branch", "lone", "align"]),
        eviction=st.sampled_from(sorted(EVICTION_POLICIES)),
    )
    def prop(reqs: list[Request], cfg: SchedulerConfig, placement: str, eviction: str) -> None:
        check_against_reference(runners[cfg.block_size], cfg, placement, reqs, eviction)

    prop()


@st.composite
def scarce_configs(draw: st.DrawFn) -> SchedulerConfig:
    """KV for the longest prompt and two blocks more, one or two state slots: most admissions
    evict something."""
    bs = draw(st.sampled_from(BLOCK_SIZES))
    return SchedulerConfig(
        token_budget=draw(st.sampled_from([8, 16, 24])),
        max_requests=draw(st.integers(1, 4)),
        block_size=bs,
        num_blocks=-(-MAX_PROMPT // bs) + 2,
        num_state_slots=draw(st.integers(1, 2)),
    )


def test_scarce_memory_matches_the_reference_under_every_eviction_policy(runners: Runners) -> None:
    @settings(max_examples=12, deadline=None)
    @given(
        reqs=workloads(),
        cfg=scarce_configs(),
        placement=st.sampled_from(["branch", "lone"]),
        eviction=st.sampled_from(sorted(EVICTION_POLICIES)),
        admission=st.sampled_from(sorted(ADMISSIONS)),
    )
    def prop(
        reqs: list[Request], cfg: SchedulerConfig, placement: str, eviction: str, admission: str
    ) -> None:
        check_against_reference(runners[cfg.block_size], cfg, placement, reqs, eviction, admission)

    prop()


@st.composite
def scarce_budgets(draw: st.DrawFn, runners: Runners) -> SchedulerConfig:
    """Scarce memory as one byte budget: the longest prompt's KV and two blocks more, and one or two
    checkpoints' bytes, shared under the runner's whole pools as caps (a freed checkpoint holds KV,
    freed KV a checkpoint)."""
    bs = draw(st.sampled_from(BLOCK_SIZES))
    model = runners[bs].model
    block, slot = model.kv_bytes_per_token * bs, max(model.checkpoint_bytes, 1)
    blocks, slots = -(-MAX_PROMPT // bs) + 2, draw(st.integers(1, 2))
    return SchedulerConfig(
        token_budget=draw(st.sampled_from([8, 16, 24])),
        max_requests=draw(st.integers(1, 4)),
        block_size=bs,
        num_blocks=KV_TOKENS // bs,
        num_state_slots=MAX_SLOTS,
        cache_memory=blocks * block + slots * slot + draw(st.integers(0, block - 1)),
    )


def test_a_scarce_byte_budget_matches_the_reference_under_every_eviction_policy(runners: Runners) -> None:
    @settings(max_examples=12, deadline=None)
    @given(
        data=st.data(),
        reqs=workloads(),
        placement=st.sampled_from(["branch", "lone"]),
        eviction=st.sampled_from(sorted(EVICTION_POLICIES)),
        admission=st.sampled_from(sorted(ADMISSIONS)),
    )
    def prop(data: st.DataObject, reqs: list[Request], placement: str, eviction: str, admission: str) -> None:
        cfg = data.draw(scarce_budgets(runners))
        check_against_reference(runners[cfg.block_size], cfg, placement, reqs, eviction, admission)

    prop()


def groups_of_candidates(rng: random.Random, block_size: int) -> list[Request]:
    """One to three shared stems (on and off block boundaries) with one to four tails each (of
    0, 1, 2 tokens, a block or 9), most arriving together: consumers that follow their producer."""
    reqs = []
    for g in range(rng.randint(1, 3)):
        stem_len = rng.choice([block_size, 2 * block_size, 24, 31, 32])
        stem = tuple(rng.randrange(3, 500) for _ in range(stem_len))
        for c in range(rng.randint(1, 4)):
            tail = tuple(rng.randrange(3, 500) for _ in range(rng.choice([0, 1, 1, 2, block_size, 9])))
            prompt = (stem + tail)[:MAX_PROMPT] or (7,)
            arrival = rng.choice([0.0, 0.0, 1e-4])
            reqs.append(Request(f"g{g}c{c}", prompt, rng.choice(["a", "a", "b"]), arrival_s=arrival))
    return reqs


def test_consumers_following_their_producer_into_its_round_match_the_reference(runners: Runners) -> None:
    # Candidates of shared contexts arriving together, under budgets that fit a producer and its
    # followers in one round or cut them: `adaptive` starts consumers from checkpoints their
    # producer writes earlier in the same round (the runner's second wave), and it must happen.
    follows = 0
    for seed in range(24):
        rng = random.Random(seed)
        bs = rng.choice(BLOCK_SIZES)
        reqs = groups_of_candidates(rng, bs)
        cfg = SchedulerConfig(
            token_budget=rng.choice([16, 32, 48, 64, 96]),
            max_requests=rng.randint(2, 8),
            block_size=bs,
            num_blocks=KV_TOKENS // bs,
            num_state_slots=rng.randint(1, MAX_SLOTS),
        )
        placement = rng.choice(["branch", "lone", "align"])
        check_against_reference(runners[bs], cfg, placement, reqs)
        engine = run_engine(runners[bs], cfg, "adaptive", placement, reqs)
        follows += engine.scheduler.policy.counters()["follows"]
    has_state = runners[BLOCK_SIZES[0]].model.has_recurrent
    assert (follows > 5) if has_state else (follows == 0)  # nothing blocks without recurrent state


@pytest.mark.parametrize("placement", ["branch", "lone", "align"])
def test_a_chunk_ending_on_a_checkpoint_completes_exactly(runners: Runners, placement: str) -> None:
    # The crash of issue 6 in small: a 64-token context chunked at a 64-token budget ends exactly
    # on the branch point, where the checkpoint slot and the working slot both snapshot.
    context = tuple(range(20, 84))
    reqs = [Request(f"c{i}", context + tuple(range(100 + 10 * i, 108 + 10 * i))) for i in range(3)]
    cfg = SchedulerConfig(token_budget=64, max_requests=4, block_size=8, num_blocks=24, num_state_slots=4)
    check_against_reference(runners[8], cfg, placement, reqs)


# what a request may pick: anything, an allow-list, token choices (one a prefix of another), or
# anything but banned sequences
LIMITS = [
    {},
    {},
    {},
    {"allowed_token_ids": (5, 9, 21, 40)},
    {"token_choices": ((5, 9), (5, 9, 40), (21,))},
    {"bad_token_sequences": ((7,), (5, 9))},
    {"token_choices": ((5, 9), (5, 9, 40), (21,)), "bad_token_sequences": ((9, 40),)},  # (5, 9, 40) closed
]


@st.composite
def generations(draw: st.DrawFn) -> list[Request]:
    """Two to six requests that decode different numbers of tokens, some arriving later."""
    reqs: list[Request] = []
    for i in range(draw(st.integers(2, 6))):
        reqs.append(
            Request(
                f"g{i}",
                draw(prompts([r.prompt for r in reqs])),
                arrival_s=draw(st.sampled_from([0.0, 0.0, 1e-4, 1e-3])),
                sampling=SamplingParams(
                    max_tokens=draw(st.integers(1, 8)),
                    ignore_eos=True,
                    repetition_penalty=draw(st.sampled_from([1.0, 1.0, 1.3, 0.8])),
                    presence_penalty=draw(st.sampled_from([0.0, 0.0, 0.7])),
                    frequency_penalty=draw(st.sampled_from([0.0, 0.0, -0.5])),
                    logit_bias=draw(st.sampled_from([(), (), ((5, 2.5), (9, -1.0))])),
                    **draw(st.sampled_from(LIMITS)),
                ),
            )
        )
    return reqs


@st.composite
def decode_configs(draw: st.DrawFn) -> SchedulerConfig:
    """Several requests per round (so decode rows batch), few state slots."""
    return SchedulerConfig(
        token_budget=draw(st.sampled_from([16, 24, 48])),
        max_requests=draw(st.integers(3, 6)),
        block_size=8,
        num_blocks=draw(st.sampled_from([KV_TOKENS // 8, 2 * KV_TOKENS // 8])),
        num_state_slots=draw(st.integers(2, 2 * MAX_SLOTS)),
    )


def test_batched_decode_generates_what_the_per_sequence_path_does(checkpoint: tuple[str, Path]) -> None:
    # The same workloads through the engine with the decode rows of each round batched and on
    # their own (chunked) path: the same tokens, logprobs within float noise. Requests finish at
    # different rounds, new prompts prefill while others decode, and state slots run short.
    family, path = checkpoint
    runners = [
        TorchRunner(path, 8, 2 * KV_TOKENS // 8, 2 * MAX_SLOTS, label=family, batched_decode=batched)
        for batched in (True, False)
    ]

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(reqs=generations(), cfg=decode_configs())
    def prop(reqs: list[Request], cfg: SchedulerConfig) -> None:
        outs = []
        for runner in runners:
            engine = new_engine(runner, cfg, policy="radixflow")
            drive(engine, [Request(r.id, r.prompt, r.namespace, r.arrival_s, r.sampling) for r in reqs])
            outs.append({r.id: r for r in engine.requests})
        for rid, got in outs[0].items():
            want = outs[1][rid]
            assert got.status is RequestStatus.FINISHED and got.output == want.output, rid
            pairs = zip(got.output_logprobs, want.output_logprobs, strict=True)
            assert max((abs(a.logprob - b.logprob) for a, b in pairs), default=0.0) <= 3e-5, rid

    prop()


@st.composite
def generation_configs(draw: st.DrawFn) -> SchedulerConfig:
    """Either block size, budgets that cut prompts anywhere, one request per round up to five,
    the runner's whole KV pool (a prompt plus what it decodes always fits) and few state slots."""
    bs = draw(st.sampled_from(BLOCK_SIZES))
    return SchedulerConfig(
        token_budget=draw(st.sampled_from([8, 16]) | st.integers(max(bs, 4), 40)),
        max_requests=draw(st.integers(1, 5)),
        block_size=bs,
        num_blocks=KV_TOKENS // bs,
        num_state_slots=draw(st.integers(1, MAX_SLOTS)),
    )


def greedy_reference(
    runner: TorchRunner, prompt: tuple[int, ...], n: int, params: SamplingParams | None = None
) -> list[int]:
    """``n`` greedy tokens, each from a plain no-cache prefill of the prompt and the tokens before
    it, after ``params``' logit bias, penalties and allow-list (the sampler's own rule: what is tested here
    is that the cache changes nothing)."""
    params = params or SamplingParams()
    out: list[int] = []
    for _ in range(n):
        seq = prompt + tuple(out)
        row = SampleRow(params, len(seq), seq, len(prompt))
        out.append(int(adjusted(runner.reference_logits(seq)[None], [row]).argmax(-1)))
    return out


def test_generation_under_every_policy_matches_a_no_cache_greedy_reference(runners: Runners) -> None:
    # Decode steps share rounds with chunked prefills, checkpoints are taken and restored between
    # them, and one request may be aborted mid-run: every request that finishes decodes exactly
    # the tokens a no-cache greedy loop gives, and nothing stays locked.
    family = runners[BLOCK_SIZES[0]].model.name

    @settings(max_examples=EXAMPLES[family] // 2, deadline=None)
    @given(
        reqs=generations(),
        cfg=generation_configs(),
        policy=st.sampled_from(["native", "radixflow", "adaptive"]),
        placement=st.sampled_from(["branch", "lone", "align"]),
        abort=st.none() | st.tuples(st.integers(0, 6), st.integers(0, 5)),
    )
    def prop(reqs: list[Request], cfg: SchedulerConfig, policy: str, placement: str, abort) -> None:
        runner = runners[cfg.block_size]
        engine = new_engine(runner, cfg, policy=policy, placement=placement)
        for r in reqs:
            engine.submit(Request(r.id, r.prompt, r.namespace, r.arrival_s, r.sampling))
        step = 0
        while engine.has_work():
            if abort is not None and step == abort[0]:
                engine.abort(reqs[abort[1] % len(reqs)].id)
            engine.step()
            engine.check_integrity()
            step += 1
        usage = engine.cache.usage()
        assert usage.locked_blocks == 0 and usage.working_slots == 0
        for r in engine.requests:
            if r.status is RequestStatus.ABORTED:
                continue
            assert r.status is RequestStatus.FINISHED, (r.id, r.error)
            choices = r.sampling.open_choices
            if choices is None:
                assert len(r.output) == r.sampling.max_tokens, r.id
            else:  # a whole open choice nothing extends, or cut by max_tokens
                assert any(tuple(c[: len(r.output)]) == tuple(r.output) for c in choices), r.output
                ended = ends_the_output(choices, r.output)
                assert len(r.output) == r.sampling.max_tokens or ended, r.output
            want = greedy_reference(runner, r.prompt, len(r.output), r.sampling)
            assert r.output == want, (policy, placement, r.id)

    prop()


def test_candidates_arriving_one_by_one_reuse_a_lone_context_exactly(runners: Runners) -> None:
    # each candidate is submitted when the one before it has finished: only `lone` leaves the
    # first candidate of a context a checkpoint where the context ends
    runner = runners[8]
    cfg = SchedulerConfig(token_budget=32, max_requests=4, block_size=8, num_blocks=24, num_state_slots=4)
    reqs = [
        Request(
            f"g{g}c{c}", tuple(range(20 + 50 * g, 44 + 50 * g)) + tuple(range(300 + 13 * c, 312 + 13 * c))
        )
        for g in range(2)
        for c in range(3)
    ]
    reference = runner.reference_tokens(reqs)
    engine = new_engine(runner, cfg, policy="radixflow", placement="lone")
    for r in reqs:
        engine.run([Request(r.id, r.prompt, r.namespace, engine.now)])
        engine.cache.check_integrity()
    assert all(r.output[0] == reference[r.id] for r in engine.requests)
    # hybrids: the first group's cold-start ladder, then the fork learned; attention: the KV
    assert [r.reused for r in engine.requests] == [0, 24, 24, 0, 24, 24]
