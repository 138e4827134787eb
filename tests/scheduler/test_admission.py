"""Checkpoint admission: which wanted saves may evict a cached checkpoint. `likely` keeps the
checkpoints that serve others from being flushed by one-off prompts; outputs never change."""

from __future__ import annotations

import pytest
from engine_utils import new_engine as engine_over

from radixflow.engine.engine import Engine
from radixflow.options import EngineOptions, build
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner, sim_token
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.admission import ADMISSIONS, AdmissionContext, AdmitAll, AdmitLikely, make_admission
from radixflow.scheduler.sampling import SamplingParams

HYBRID = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])


def context(wanted, branches=(), fork=None, tail=64, resumed=0) -> AdmissionContext:
    return AdmissionContext(list(wanted), lambda: list(branches), lambda: fork, tail, resumed)


def test_likely_admits_branch_points_the_learned_fork_and_a_continuing_tail():
    likely = AdmitLikely()
    assert likely.may_evict(context([16, 32, 48, 64], branches=[32])) == [32]  # 64: a one-off's tail
    assert likely.may_evict(context([16, 32, 48, 64], fork=48)) == [48]
    assert likely.may_evict(context([16, 64], resumed=8)) == [64]  # a later turn's own tail
    assert likely.may_evict(context([16, 64], fork=0)) == []  # history says: nowhere useful
    assert AdmitAll().may_evict(context([16, 64])) == [16, 64]


def test_the_registry():
    assert set(ADMISSIONS) == {"all", "likely"}
    with pytest.raises(ValueError, match="unknown checkpoint admission 'some'"):
        make_admission("some")


def engine(admission: str, cfg: SchedulerConfig) -> Engine:
    options = EngineOptions(admission=admission)
    return build.new_engine(HYBRID, cfg, options, policy="radixflow", placement="branch")


CTX = tuple(range(1000, 1064))  # 64 tokens: 8 blocks


def workload() -> list[Request]:
    """Three candidates over one context, then five one-off prompts one after another, then a
    late fourth candidate over the same context."""
    reqs = [Request(f"c{i}", CTX + tuple(range(10 * i, 10 * i + 8))) for i in range(3)]
    for i in range(5):
        reqs.append(Request(f"once{i}", tuple(range(5000 + 100 * i, 5048 + 100 * i)), arrival_s=1.0 + i))
    reqs.append(Request("late", CTX + tuple(range(90, 98)), arrival_s=10.0))
    return reqs


@pytest.mark.parametrize(("admission", "late_reuse"), [("all", 0), ("likely", 64)])
def test_one_off_prompts_do_not_flush_a_shared_context_under_likely(admission, late_reuse):
    cfg = SchedulerConfig(token_budget=256, max_requests=8, block_size=8, num_blocks=256, num_state_slots=2)
    eng = engine(admission, cfg)
    for r in workload():
        eng.submit(r)
    while eng.has_work():
        eng.step()
        eng.check_integrity()
    done = {r.id: r for r in eng.requests}
    assert all(r.status is RequestStatus.FINISHED for r in done.values())
    for r in done.values():  # what is kept changes, never what is computed
        assert r.output[0] == sim_token(r.namespace, r.prompt, HYBRID.model.vocab_size)
    assert done["late"].reused == late_reuse


@pytest.mark.parametrize("admission", ["all", "likely"])
def test_a_checkpoint_where_known_copies_of_a_prompt_resume_may_evict_under_likely(admission):
    """Two one-off prompts fill both state slots; then three copies of a block-aligned prompt
    arrive (`n` choices): each resumes at most a block before its end, a save `branch` places
    for them. `likely` let only branch points, the learned fork and a continuing tail evict, so
    under state pressure that save found no slot and every copy computed the prompt again."""
    cfg = SchedulerConfig(token_budget=256, max_requests=8, block_size=8, num_blocks=256, num_state_slots=2)
    eng = engine(admission, cfg)
    once = [Request(f"once{i}", tuple(range(5000 + 100 * i, 5048 + 100 * i)), arrival_s=i) for i in range(2)]
    copies = [Request(f"c{i}", CTX, arrival_s=5.0) for i in range(3)]
    for r in once + copies:
        eng.submit(r)
    while eng.has_work():
        eng.step()
        eng.check_integrity()
    assert eng.cache.usage().checkpoint_slots == 2  # the slots stayed full
    assert [r.reused for r in copies] == [0, 56, 56]
    assert all(r.output[0] == sim_token(r.namespace, r.prompt, HYBRID.model.vocab_size) for r in copies)


def test_admission_all_is_what_the_planner_did_before():
    # The default: every engine built without naming admission evicts for every wanted save.
    cfg = SchedulerConfig(token_budget=256, max_requests=8, block_size=8, num_blocks=256, num_state_slots=2)
    eng = engine_over(HYBRID, cfg, policy="radixflow", placement="branch")
    assert isinstance(eng.scheduler.checkpoints.admission, AdmitAll)


@pytest.mark.parametrize("admission", ["all", "likely"])
def test_a_save_where_a_checkpoint_is_already_cached_evicts_nothing(admission):
    """Three state slots: a one-off prompt's tail checkpoint (16), then two copies of a
    block-aligned prompt; the first saves where the copy resumes (56) and its end (64), filling
    the slots. The copy computes (56, 64], whose save at 64 is already cached and takes no slot:
    the planner counted it as one all the same and evicted the one-off's checkpoint for it, so the
    one-off prompt sent again computed everything."""
    cfg = SchedulerConfig(token_budget=256, max_requests=8, block_size=8, num_blocks=256, num_state_slots=3)
    eng = engine(admission, cfg)
    once = tuple(range(5000, 5020))
    copies = [Request(f"c{i}", CTX, arrival_s=1.0) for i in range(2)]
    reqs = [Request("once", once), *copies, Request("again", once, arrival_s=2.0)]
    for r in reqs:
        eng.submit(r)
    while eng.has_work():
        eng.step()
        eng.check_integrity()
    assert [r.reused for r in reqs] == [0, 0, 56, 16]
    assert eng.cache.evictions() == {"kv": 0, "checkpoint": 0}
    assert all(r.output[0] == sim_token(r.namespace, r.prompt, HYBRID.model.vocab_size) for r in reqs)


@pytest.mark.parametrize("admission", ["all", "likely"])
def test_a_decoded_tail_already_cached_evicts_nothing(admission):
    """Four state slots: a one-off prompt's checkpoint, then a generation whose decoded tail is
    kept at 24, then the same generation again (a retry) beside it: its working slot fills the
    slots. Its rolling tail save at 24 is cached already (the slot would be freed as it ends), yet
    it evicted the one-off's checkpoint for it, so the one-off prompt sent again computed all."""
    cfg = SchedulerConfig(token_budget=256, max_requests=8, block_size=8, num_blocks=256, num_state_slots=4)
    eng = engine(admission, cfg)
    once, turn, five = tuple(range(5000, 5020)), tuple(range(1000, 1020)), SamplingParams(max_tokens=5)
    reqs = [Request("once", once), Request("first", turn, arrival_s=1.0, sampling=five)]
    reqs += [Request("retry", turn, arrival_s=2.0, sampling=five), Request("again", once, arrival_s=3.0)]
    for r in reqs:
        eng.submit(r)
    while eng.has_work():
        eng.step()
        eng.check_integrity()
    assert [r.reused for r in reqs] == [0, 0, 16, 16]
    assert eng.cache.evictions() == {"kv": 0, "checkpoint": 0}
    assert reqs[1].output == reqs[2].output
