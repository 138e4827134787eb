"""`LLM.score` on every family's tiny preset, at the edges: a context one token short of, on and
one past a KV block boundary, candidates that are prefixes of one another and one that ends its
prompt on a block boundary, under a cache that cannot hold them all at once and few state slots.
Each candidate's logprobs equal the same candidate scored alone on a roomy engine (the cache
changes when work runs, never what it computes), and the engine is left consistent."""

from __future__ import annotations

import pytest
from model_utils import ZOO_TINY, state_slots

from radixflow.generation import LLM

BLOCK = 16
TOL = 1e-4


@pytest.mark.parametrize("model", ZOO_TINY)
def test_scores_under_scarce_memory_equal_each_candidate_alone(zoo, roomy, model):
    # one candidate's prompt needs up to 4 blocks (33 + 16 tokens): 6 cannot hold four at once
    scarce = LLM(model, kv_blocks=6, torch_threads=1, **state_slots(model, 2))
    for context_len in (2 * BLOCK - 1, 2 * BLOCK, 2 * BLOCK + 1):
        context = [(5 * i + context_len) % 200 + 3 for i in range(context_len)]
        long = [(11 * i) % 150 + 20 for i in range(3 * BLOCK - context_len)]  # the prompt ends on a block
        candidates = [long, long[:3], long[:1], [40, 41, 42, 43, 44, 45, 46, 47, 48]]
        scores = scarce.score(context, candidates, namespace=f"ctx{context_len}")
        for s, cand in zip(scores, candidates, strict=True):
            (alone,) = roomy[model].score(context, [cand], namespace=f"alone{context_len}-{s.index}")
            assert s.token_ids == tuple(cand) and len(s.logprobs) == len(cand)
            assert s.logprobs == pytest.approx(alone.logprobs, abs=TOL), (model, context_len, s.index)
        assert max(s.cached_tokens for s in scores) >= BLOCK  # later candidates found the context
        scarce.engine.check_integrity()
        assert scarce.engine.requests == []
    usage = scarce.engine.cache.usage()
    assert usage.locked_blocks == 0 and usage.working_slots == 0
