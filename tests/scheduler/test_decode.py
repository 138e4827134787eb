"""Generation in the scheduler: decode steps, finish conditions, follow-up turns, stop and abort."""

from __future__ import annotations

from dataclasses import replace

import pytest
from engine_utils import drive, new_engine

from radixflow.cache.node import Node
from radixflow.cache.publish import Publisher
from radixflow.cache.types import NodeHandle
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner, sim_token
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.samples import FinishReason
from radixflow.scheduler.sampling import SamplingParams

HYBRID = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
ATTN = SimRunner(SIM_MODELS["qwen3-4b"], HARDWARE["h100"])
CFG = SchedulerConfig(token_budget=64, max_requests=8, block_size=8, num_blocks=256, num_state_slots=32)
VOCAB = HYBRID.model.vocab_size


def expected(req: Request, n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(sim_token(req.namespace, req.prompt + tuple(out), VOCAB))
    return out


def test_generates_max_tokens_one_decode_step_per_round():
    req = Request("a", tuple(range(1, 21)), sampling=SamplingParams(max_tokens=6))
    engine = drive(new_engine(HYBRID, CFG), [req])
    assert req.output == expected(req, 6) and req.finish_reason is FinishReason.LENGTH
    decode_steps = [(("a", p, p + 1),) for p in range(20, 25)]
    assert [rd.chunks for rd in engine.rounds] == [(("a", 0, 20),), *decode_steps]
    assert req.first_token_s == engine.rounds[0].start_s + engine.rounds[0].duration_s
    assert req.ttft_s is not None and req.latency_s is not None and req.ttft_s < req.latency_s
    assert engine.cache.usage().working_slots == 0 and engine.cache.usage().locked_blocks == 0


def test_decode_steps_go_first_and_share_the_round_with_prefill():
    cfg = replace(CFG, token_budget=16)
    long_gen = Request("gen", tuple(range(1, 9)), sampling=SamplingParams(max_tokens=4))
    late = Request("late", tuple(range(100, 140)), arrival_s=1e-9)
    engine = drive(new_engine(HYBRID, cfg), [long_gen, late])
    second = engine.rounds[1].chunks
    assert second[0] == ("gen", 8, 9)  # the decode step is scheduled before the newcomer's prefill
    assert second[1] == ("late", 0, 8)  # the prefill chunk fills what the budget leaves (block aligned)
    assert long_gen.output == expected(long_gen, 4) and late.status is RequestStatus.FINISHED


def test_stop_token_and_zero_max_tokens():
    prompt = tuple(range(1, 12))
    first_two = expected(Request("x", prompt), 2)
    stopper = Request("s", prompt, sampling=SamplingParams(max_tokens=10, stop_token_ids=(first_two[1],)))
    scorer = Request("z", prompt, sampling=SamplingParams(max_tokens=0))
    drive(new_engine(HYBRID, CFG), [stopper, scorer])
    assert stopper.output == first_two and stopper.finish_reason is FinishReason.STOP
    assert stopper.stopped_by_token and not scorer.stopped_by_token  # a door leaves its text out
    assert scorer.output == [] and scorer.finish_reason is FinishReason.LENGTH
    assert scorer.status is RequestStatus.FINISHED


def test_eos_ends_generation_unless_ignored():
    prompt = tuple(range(1, 12))
    eos = expected(Request("x", prompt), 3)[2]
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    runner.model = replace(runner.model, eos_token_ids=(eos,))
    ends = Request("e", prompt, sampling=SamplingParams(max_tokens=8))
    ignores = Request("i", prompt, sampling=SamplingParams(max_tokens=8, ignore_eos=True))
    drive(new_engine(runner, CFG), [ends, ignores])
    assert len(ends.output) == 3 and ends.finish_reason is FinishReason.STOP
    assert len(ignores.output) == 8 and ignores.finish_reason is FinishReason.LENGTH
    # only the scheduler knows the model's EOS: it says the token ended the request
    assert ends.stopped_by_token and not ignores.stopped_by_token


def test_follow_up_turn_reuses_prompt_and_output_of_the_finished_conversation():
    for runner in (HYBRID, ATTN):
        first = Request("t1", tuple(range(1, 21)), sampling=SamplingParams(max_tokens=14))
        engine = drive(new_engine(runner, CFG), [first])
        history = first.prompt + tuple(first.output)  # 34 tokens; KV of the first 33 exists
        follow = Request("t2", (*history, 900, 901, 902), sampling=SamplingParams(max_tokens=2))
        drive(engine, [follow])
        assert follow.reused == 32  # the last whole block of the conversation
        assert follow.output == expected(follow, 2)


def test_every_decode_step_extends_the_cache_from_the_request_s_lock(monkeypatch: pytest.MonkeyPatch):
    # a decode step's extend starts its walk at the request's lock (the hint `ChunkWriter.emit`
    # passes): were the hint dropped, each step would walk its whole path from the root again
    routes: list[tuple[int, bool]] = []  # (the chunk's block start, whether its walk began at the lock)
    known_path = Publisher._known_path

    def spy(
        self: Publisher, ns: str, tokens: tuple[int, ...], base: int, cuts: list[int], hint: NodeHandle | None
    ) -> list[Node] | None:
        path = known_path(self, ns, tokens, base, cuts, hint)
        routes.append((base, path is not None))
        return path

    monkeypatch.setattr(Publisher, "_known_path", spy)
    req = Request("a", tuple(range(1, 21)), sampling=SamplingParams(max_tokens=14))
    drive(new_engine(HYBRID, CFG), [req])
    assert req.output == expected(req, 14)
    # the prefill from the root (nothing locked), then 13 decode steps at 20..32, each from its lock
    assert routes == [(0, False)] + [(p // 8 * 8, True) for p in range(20, 33)]


def test_stop_mid_decode_keeps_the_output_and_caches_it():
    req = Request("a", tuple(range(1, 21)), sampling=SamplingParams(max_tokens=50))
    engine = new_engine(HYBRID, CFG)
    engine.submit(req)
    for _ in range(14):
        engine.step()
    engine.stop("a")
    engine.check_integrity()
    assert req.status is RequestStatus.FINISHED and req.finish_reason is FinishReason.STOP
    assert not req.stopped_by_token  # a stop string's end: its last token's text is kept
    assert req.output == expected(req, 14)
    assert engine.cache.usage().working_slots == 0 and not engine.has_work()
    follow = Request("b", (*req.prompt, *req.output, 7))
    drive(engine, [follow])
    assert follow.reused == 32  # the tail checkpoint at 32 became a tree checkpoint


def test_abort_mid_decode_releases_everything():
    req = Request("a", tuple(range(1, 21)), sampling=SamplingParams(max_tokens=50))
    other = Request("b", tuple(range(40, 60)), sampling=SamplingParams(max_tokens=3))
    engine = new_engine(HYBRID, CFG)
    engine.submit(req)
    engine.submit(other)
    for _ in range(5):
        engine.step()
    engine.abort("a")
    engine.check_integrity()
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    usage = engine.cache.usage()
    assert req.status is RequestStatus.ABORTED and other.output == expected(other, 3)
    assert usage.working_slots == 0 and usage.locked_blocks == 0


def test_kv_for_max_tokens_is_reserved_at_admission():
    # 4 blocks of 8: a 20-token prompt generating 13 tokens needs 32 positions, all 4 blocks, so a
    # second one must wait for it rather than run out of KV mid-decode.
    cfg = replace(CFG, num_blocks=4)
    a = Request("a", tuple(range(1, 21)), sampling=SamplingParams(max_tokens=13))
    b = Request("b", tuple(range(30, 50)), sampling=SamplingParams(max_tokens=13))
    engine = drive(new_engine(HYBRID, cfg), [a, b])
    assert a.output == expected(a, 13) and b.output == expected(b, 13)
    assert b.first_token_s is not None and a.finish_s is not None and b.first_token_s > a.finish_s
    too_long = Request("c", tuple(range(1, 21)), sampling=SamplingParams(max_tokens=14))
    engine.submit(too_long)
    assert too_long.status is RequestStatus.FAILED and "max_tokens: does not fit" in (too_long.error or "")


def test_a_prompt_too_long_for_the_cache_alone_is_named_whatever_max_tokens_is():
    # 4 blocks of 8 hold 32 positions: a 40-token prompt cannot fit however few tokens it asks
    # for, so the error names the prompt (lowering max_tokens cannot help), as the context check does
    cfg = replace(CFG, num_blocks=4)
    for n in (1, 2, 8):
        req = Request(f"p{n}", tuple(range(1, 41)), sampling=SamplingParams(max_tokens=n))
        assert str(cfg.unfit_reason(req)) == (
            "prompt: does not fit in the KV cache: 40 tokens need 5 blocks, cache has 4 (kv_blocks)"
        ), n


def test_a_request_too_big_for_the_kv_cache_names_the_option_that_sizes_it():
    # the sizes were there but not the option: a torch runner with no workload to size its cache
    # to (`LLM`, a server) has 1024 blocks, and a long generation was refused without a word of
    # kv_blocks (the other checks of the cache's size name it)
    cfg = replace(CFG, num_blocks=4)
    req = Request("c", tuple(range(1, 21)), sampling=SamplingParams(max_tokens=14))
    assert str(cfg.unfit_reason(req)) == (
        "max_tokens: does not fit in the KV cache: the prompt's 20 tokens plus max_tokens 14 need "
        "5 blocks, cache has 4 (kv_blocks)"
    )


def test_a_prompt_ending_mid_block_owes_no_kv_for_the_block_it_already_holds():
    # a's 20-token prompt ends inside its third block, which it holds: its 4 decode steps (to
    # position 24) allocate nothing more, so b's one block fits beside it in 4 blocks at once.
    cfg = replace(CFG, num_blocks=4)
    a = Request("a", tuple(range(1, 21)), sampling=SamplingParams(max_tokens=5))
    b = Request("b", tuple(range(30, 34)), arrival_s=1e-9, sampling=SamplingParams(max_tokens=5))
    drive(new_engine(HYBRID, cfg), [a, b])
    assert a.output == expected(a, 5) and b.output == expected(b, 5)
    assert b.first_token_s is not None and a.finish_s is not None and b.first_token_s < a.finish_s
