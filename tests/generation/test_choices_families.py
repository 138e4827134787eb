"""``n`` choices on every family's tiny preset, the prompt ending one token short of, on and one
past a KV block boundary, under a cache too small to hold the choices at once: each choice equals
a lone request with its seed on a roomy engine (the cache changes when work runs, never what it
computes), and the engine is left consistent."""

from __future__ import annotations

import pytest
from model_utils import ZOO_TINY, state_slots

from radixflow.generation import LLM, SamplingParams

BLOCK = 16
PARAMS = SamplingParams(max_tokens=7, temperature=1.0, seed=21, ignore_eos=True, n=3)


@pytest.mark.parametrize("model", ZOO_TINY)
def test_choices_under_scarce_memory_equal_lone_requests(zoo, roomy, model):
    # each choice alone needs 3 blocks (up to 33 + 7 tokens): 5 blocks cannot hold three at once
    scarce = LLM(model, kv_blocks=5, torch_threads=1, **state_slots(model, 4))
    for prompt_len in (2 * BLOCK - 1, 2 * BLOCK, 2 * BLOCK + 1):
        prompt = [(7 * i + prompt_len) % 200 + 3 for i in range(prompt_len)]
        outs = scarce.generate([prompt], PARAMS)
        assert [o.choice for o in outs] == [0, 1, 2]
        assert all(o.cached_tokens >= BLOCK for o in outs[1:])  # the later choices shared the prompt
        for out, params in zip(outs, PARAMS.choices(), strict=True):
            (alone,) = roomy[model].generate([prompt], params)
            assert out.token_ids == alone.token_ids, (model, prompt_len, out.choice)
        scarce.engine.check_integrity()
        assert scarce.engine.requests == []
    usage = scarce.engine.cache.usage()
    assert usage.locked_blocks == 0 and usage.working_slots == 0
