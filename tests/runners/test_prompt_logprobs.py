"""Prompt logprobs (echo) equal transformers' within 1e-4, cold or served from the cache.

A reused position's logprob comes from the final hidden state kept beside its KV (computed by
another request, in an earlier round or earlier in the same one, by a prefill or a decode step);
it must equal what a cold run and transformers report.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from engine_utils import drive, new_engine
from model_utils import ZOO_PARITY, ZOO_TINY, one_thread, zoo_model  # noqa: F401  (a fixture)

from radixflow.models.kv_pool import KVPool
from radixflow.runners.prompt_logprobs import PromptScorer
from radixflow.runners.torch_runner import TorchRunner
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.output import ScheduledChunk
from radixflow.scheduler.samples import PromptLogprob
from radixflow.scheduler.sampling import SamplingParams

transformers = pytest.importorskip("transformers")

CFG = SchedulerConfig(token_budget=128, max_requests=8, block_size=16, num_blocks=64, num_state_slots=32)
TOL = 1e-4
K = 5
ECHO = SamplingParams(max_tokens=0, prompt_logprobs=K)  # score the prompt, generate nothing


class Pair:
    def __init__(self, name: str, path) -> None:
        self.name = name
        self.runner = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots)
        self.ref = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        self.vocab = self.runner.model.vocab_size

    def expected(self, tokens: tuple[int, ...]) -> torch.Tensor:
        """transformers' logprobs ``[len - 1, vocab]``: row ``p - 1`` scores token ``p``."""
        with torch.no_grad():
            logits = self.ref(torch.tensor([tokens]), position_ids=torch.arange(len(tokens))[None]).logits
        return torch.log_softmax(logits[0, :-1].float(), dim=-1)

    def check(self, req: Request, tokens: tuple[int, ...] | None = None) -> float:
        """``req``'s prompt logprobs against transformers; returns the largest difference."""
        tokens = tokens or req.prompt
        assert req.status is RequestStatus.FINISHED, req.error
        expected = self.expected(tokens)
        assert [p.position for p in req.prompt_logprobs] == list(range(1, len(req.prompt)))
        worst = 0.0
        for p in req.prompt_logprobs:
            row = expected[p.position - 1]
            assert p.token == tokens[p.position]
            k = req.sampling.prompt_logprobs or 0
            vals, ids = row.topk(max(k, 1))
            # the same top token, but at a near-tie that either side's rounding may break
            assert len(p.top) == k and (p.top[0][0] == int(ids[0]) or float(vals[0] - vals[1]) <= 2 * TOL)
            # the rank: 1 + the tokens likelier, counting a near-tie with the token either way
            own = row[p.token]
            likelier, tied = int((row > own + 2 * TOL).sum()), int((row >= own - 2 * TOL).sum())
            assert p.rank is not None and likelier + 1 <= p.rank <= tied, (p.rank, likelier, tied)
            diffs = [abs(p.logprob - float(row[p.token]))]
            diffs += [abs(v - float(e)) for (_, v), e in zip(p.top, vals, strict=True)]
            diffs += [abs(v - float(row[t])) for t, v in p.top]
            worst = max(worst, *diffs)
        assert worst <= TOL, f"{self.name} {req.id}: max |Δ logprob| {worst:.2e}"
        return worst


@pytest.fixture(scope="module", params=ZOO_PARITY)
def pair(request, tmp_path_factory, one_thread):  # noqa: F811
    return Pair(request.param, zoo_model(tmp_path_factory, request.param))


def tokens(vocab: int, n: int, seed: int) -> tuple[int, ...]:
    return tuple(torch.randint(3, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist())


def same_ranking(x: PromptLogprob, y: PromptLogprob, tol: float) -> bool:
    """The same top ids in the same order, but where two ranks' logprobs are within 2 * ``tol``
    (a near-tie either run's rounding may order either way; at the last rank, with the next one,
    which is not listed)."""
    values = [v for _, v in x.top]
    for i, ((a, _), (b, _)) in enumerate(zip(x.top, y.top, strict=True)):
        near = i == len(values) - 1 or abs(values[i] - values[i + 1]) <= 2 * tol
        near = near or (i > 0 and abs(values[i] - values[i - 1]) <= 2 * tol)
        if a != b and not near:
            return False
    return True


def same(a: list[PromptLogprob], b: list[PromptLogprob], tol: float = TOL) -> bool:
    """Position by position the same tokens and top ids (`same_ranking`), logprobs within ``tol``:
    two runs that compute a position in chunks of different shapes sum in another order (on this
    AMD EPYC, 1.05e-5 apart at one position of qwen3_5-tiny; each run is within 1e-4 of
    transformers)."""
    return all(
        x.position == y.position
        and x.token == y.token
        and abs(x.logprob - y.logprob) <= tol
        and all(abs(v - w) <= tol for (_, v), (_, w) in zip(x.top, y.top, strict=True))
        and same_ranking(x, y, tol)
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("policy", ["native", "radixflow"])
def test_cold_and_reused_prompts_match_transformers(pair, policy):
    context = tokens(pair.vocab, 48, 1)  # cold's tail checkpoint (hybrids) lands on its end
    cold = Request("cold", context + tokens(pair.vocab, 6, 2), sampling=replace(ECHO, max_tokens=1))
    engine = drive(new_engine(pair.runner, CFG, policy=policy), [cold])
    warm = Request("warm", context + tokens(pair.vocab, 9, 3), sampling=ECHO)
    drive(engine, [warm])
    assert cold.reused == 0 and warm.reused == 48  # most of warm's prompt came from the cache
    worst = max(pair.check(cold), pair.check(warm))
    alone = drive(new_engine(pair.runner, CFG, policy=policy), [Request("alone", warm.prompt, sampling=ECHO)])
    # served from the cache = computed cold, position by position
    assert same(alone.requests[0].prompt_logprobs, warm.prompt_logprobs)
    print(f"{pair.name} {policy}: max |Δ logprob| vs transformers {worst:.2e}")


def test_candidates_scored_against_one_context_reuse_its_logprobs(pair):
    """K candidates on one context: all exact, and the context goes through the head once."""
    context = tokens(pair.vocab, 48, 4)
    # the first wants more alternatives than the rest: their memoized rows must still serve both
    asks = [replace(ECHO, prompt_logprobs=12), ECHO, ECHO, ECHO]
    cands = [Request(f"c{i}", context + tokens(pair.vocab, 4, 10 + i), sampling=asks[i]) for i in range(4)]
    before = pair.runner.scorer.rows_computed
    drive(new_engine(pair.runner, CFG), cands)
    for c in cands:
        pair.check(c)
    shared = {c.reused for c in cands[1:]}
    assert cands[0].reused == 0 and shared == {48}
    # A position's row is (hidden state of the position before, its token): rows in the reused
    # blocks are computed once for all candidates, the rest once per candidate.
    rows = {(p - 1, c.prompt[p]) if p - 1 < 48 else (c.id, p) for c in cands for p in range(1, len(c.prompt))}
    assert pair.runner.scorer.rows_computed - before == len(rows) < 4 * (len(cands[0].prompt) - 1)


def test_chunked_prefill_and_a_follow_up_turn_match_transformers(pair):
    """Chunk boundaries, and a context whose tail was decoded (hidden states written by decode steps)."""
    small = replace(CFG, token_budget=32)
    params = SamplingParams(max_tokens=20, prompt_logprobs=K)
    first = Request("first", tokens(pair.vocab, 70, 5), sampling=params)
    engine = drive(new_engine(pair.runner, small), [first])
    assert max(rd.tokens for rd in engine.rounds) == 32  # the prompt was chunked
    pair.check(first)
    turn = Request("turn", first.sequence + tokens(pair.vocab, 5, 6), sampling=ECHO)
    drive(engine, [turn])
    assert turn.reused > len(first.prompt)  # reused positions include decoded ones
    pair.check(turn)


def test_overwritten_slots_are_not_served_from_the_memo(pair):
    """Two prompts differing only in their first token land in the same KV slots one after the
    other (the first one is evicted); the second must be scored from its own hidden states."""
    tight = replace(CFG, num_blocks=4)
    a = tokens(pair.vocab, 50, 7)
    b = (3 + (a[0] - 2) % (pair.vocab - 3), *a[1:])
    ra, rb = Request("a", a, sampling=ECHO), Request("b", b, sampling=ECHO)
    drive(new_engine(pair.runner, tight), [ra, rb])
    pair.check(ra)
    pair.check(rb)
    assert not same(ra.prompt_logprobs[1:], rb.prompt_logprobs[1:], tol=1e-7)


def test_a_small_memo_evicts_reuses_and_grows_its_rows_and_stays_exact(pair, monkeypatch):
    """Memo rows are tensors: a memo of 8 keys starting at 4 rows grows within a round, a short
    round after it evicts the context's rows (the next candidate recomputes them) and reuses the
    freed rows; every answer stays exact."""
    monkeypatch.setattr("radixflow.runners.prompt_logprobs._FIRST_ROWS", 4)
    runner, saved = pair.runner, pair.runner.scorer
    scorer = runner.scorer = PromptScorer(runner.net, runner.kv, memo_entries=8)
    try:
        context = tokens(pair.vocab, 40, 20)
        engine = new_engine(runner, CFG)
        for i in range(3):
            cand = Request(f"m{i}", context + tokens(pair.vocab, 5, 30 + i), sampling=ECHO)
            before = scorer.rows_computed
            drive(engine, [cand])
            pair.check(cand)
            assert scorer.rows_computed - before == len(cand.prompt) - 1  # nothing left to reuse
            drive(engine, [Request(f"f{i}", tokens(pair.vocab, 6, 50 + i), sampling=ECHO)])
            assert len(scorer._rows) <= 8
    finally:
        runner.scorer = saved


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_prompt_logits_that_are_not_finite_are_refused_by_name_and_not_memoized(bad):
    """A prompt position whose logits hold NaN or +inf (a dtype's overflow) was reported with a
    NaN logprob (which a response writes as its -9999 stand-in, a score like any other) and
    memoized. It is refused by name, as the sampler refuses such a row, and nothing is kept."""
    weight = torch.randn(8, 6, generator=torch.Generator().manual_seed(0))
    net = SimpleNamespace(config=SimpleNamespace(vocab_size=6), compute_logits=lambda h: h @ weight)
    kv = KVPool({}, 2, 4, torch.float32, "cpu", hidden_size=8)
    kv.hidden.normal_(generator=torch.Generator().manual_seed(1))
    kv.hidden[2, 3] = bad  # the state before position 3 of the chunk below
    scorer = PromptScorer(net, kv)
    chunk = ScheduledChunk("r", "ns", (1, 2, 3, 4, 5), 0, 5, (0, 1), None, (), False, ECHO, 1, 5)
    with pytest.raises(ValueError, match=r"logits are not finite in 1 of 4 prompt positions"):
        scorer.score([chunk])
    assert not scorer._rows and not scorer._k  # nothing memoized


def out_of_memory(scorer: PromptScorer) -> None:
    raise MemoryError("grow")


def test_a_round_failed_as_the_memo_grows_leaves_it_whole_and_exact(pair, monkeypatch):
    """A scoring round that fails as the memo's tensors grow (the device out of memory) fails its
    requests alone. The memo once kept the keys it had begun to add, without their alternatives'
    count or values: a later round writing their slots, or scoring them, failed on a KeyError."""
    monkeypatch.setattr("radixflow.runners.prompt_logprobs._FIRST_ROWS", 4)
    runner, saved = pair.runner, pair.runner.scorer
    scorer = runner.scorer = PromptScorer(runner.net, runner.kv)
    grow = PromptScorer._grow
    try:
        context = tokens(pair.vocab, 40, 60)
        engine = new_engine(runner, CFG)
        drive(engine, [Request("ctx", context, sampling=ECHO)])  # 39 keys in 64 rows: 25 free
        monkeypatch.setattr(PromptScorer, "_grow", out_of_memory)
        prompt = context + tokens(pair.vocab, 30, 61)  # 30 keys or more: the rows run out
        failed = drive(engine, [Request("failed", prompt, sampling=ECHO)]).requests[-1]
        assert failed.status is RequestStatus.FAILED and "grow" in (failed.error or "")
        monkeypatch.setattr(PromptScorer, "_grow", grow)
        again = [Request("again", prompt, sampling=ECHO), Request("more", prompt + (7,), sampling=ECHO)]
        drive(engine, again)
        for req in again:
            pair.check(req)
        assert len(scorer._rows) == len(scorer._k)  # every key has its row's contents
    finally:
        runner.scorer = saved


# policy, placement, eviction, admission: each of every kind at least once
SCARCE_COMBOS = [
    ("native", "lone", "lru", "all"),
    ("radixflow", "align", "cost-per-byte", "likely"),
    ("adaptive", "branch", "cost-per-byte", "all"),
]


@pytest.mark.parametrize(("policy", "placement", "eviction", "admission"), SCARCE_COMBOS)
def test_prompts_scored_again_after_eviction_match_transformers(pair, policy, placement, eviction, admission):
    """Five KV blocks (one more than the longest prompt) and two state slots: two candidates of
    one context, then an unrelated prompt that evicts the context, then the first candidate's
    prompt again, one token longer and a prefix of the context, under each policy, placement,
    eviction and admission. Positions served from the cache and positions recomputed into recycled
    slots (the memo must not answer for what they held) all give transformers' logprobs, top 5
    and ranks."""
    if pair.name not in ZOO_TINY:
        pytest.skip("the tiny presets take every cache path; SmolLM2's 30 layers cost ~10 s a case")
    scarce = replace(CFG, token_budget=32, num_blocks=5, num_state_slots=2)
    engine = new_engine(pair.runner, scarce, policy, placement, eviction=eviction, admission=admission)
    context = tokens(pair.vocab, 48, 40)
    first = [
        Request(f"c{i}", context + tokens(pair.vocab, 3 + i, 41 + i), sampling=replace(ECHO, max_tokens=i))
        for i in range(2)
    ]
    other = Request("other", tokens(pair.vocab, 60, 50), sampling=ECHO)
    again = [
        Request("same", first[0].prompt, sampling=replace(ECHO, prompt_logprobs=2)),
        Request("longer", first[0].prompt + (7,), sampling=ECHO),
        Request("prefix", context[:32], sampling=replace(ECHO, max_tokens=2)),
    ]
    for wave in (first, [other], again):
        drive(engine, wave)
    assert sum(engine.cache.evictions().values()) > 0 and again[1].reused >= 32  # evicted, and reused
    for req in [*first, other, *again]:
        pair.check(req)
