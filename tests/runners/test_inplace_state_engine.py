"""In-place recurrent state under the real scheduler, on every recurrent family, at the edges.

Four requests of different lengths with a state pool one slot bigger than the round's rows
(``num_state_slots = max_requests + 1``): the scheduler admits them as slots free up, a row
finishes while another decodes on (its last step saves nothing), a request restores the
checkpoint another saved at their shared prefix, and with small KV blocks a decode step on a
block boundary also saves the request's tail checkpoint, in the step its row decodes in place.
Every generated token must be a greedy choice of a no-cache forward over the whole sequence, its
logprob within `TOL` of that forward's; a spy pool checks that the in-place rows' states never
left the pool.
"""

from __future__ import annotations

import pytest
import torch
from engine_utils import drive, new_engine
from model_utils import BLOCK, TOL, ZOO_TINY, SpyPool, prompt, zoo_model

from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.kv_pool import KVPool
from radixflow.models.seq_spec import SeqSpec
from radixflow.runners.torch_runner import TorchRunner
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.sampling import SamplingParams

CFG = SchedulerConfig(token_budget=64, max_requests=4, block_size=4, num_blocks=64, num_state_slots=5)
RECURRENT = [name for name in ZOO_TINY if name not in ("llama-tiny", "qwen3-tiny")]


def requests() -> list[Request]:
    shared = prompt(11, 9)
    prompts = [shared + prompt(12, 2), prompt(13, 7), shared + prompt(14, 3), prompt(15, 6)]
    lengths = [11, 3, 8, 6]  # tokens generated: the short ones finish while the others decode
    return [
        Request(f"r{i}", tuple(p), sampling=SamplingParams(max_tokens=n, ignore_eos=True))
        for i, (p, n) in enumerate(zip(prompts, lengths, strict=True))
    ]


def no_cache_logprobs(net: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    """float32 log-softmax at every position of ``tokens``, from one forward without any cache."""
    blocks = -(-len(tokens) // BLOCK)
    kv = KVPool(net.kv_layout(), blocks, BLOCK, torch.float32, "cpu")
    state = StatePool(net.state_layout(), 0, torch.float32, "cpu")
    batch = ForwardBatch.build([(tokens, SeqSpec(0, len(tokens), list(range(blocks))))], kv, state, "cpu")
    with torch.inference_mode():
        return torch.log_softmax(net.compute_logits(net(batch)).float(), dim=-1)


@pytest.mark.parametrize("name", RECURRENT)
def test_in_place_decode_under_the_scheduler_matches_a_no_cache_forward(tmp_path_factory, name):
    path = zoo_model(tmp_path_factory, name)
    runner = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots, predict_rounds=False)
    spy = runner.state = SpyPool(runner.net.state_layout(), CFG.num_state_slots, torch.float32, "cpu")
    reqs = drive(new_engine(runner, CFG), requests()).requests
    assert all(r.status is RequestStatus.FINISHED for r in reqs)
    assert spy.in_place and spy.checkpoints and spy.copied_back == 0
    assert any(r.reused for r in reqs)  # a fork restored a checkpoint
    for req in reqs:
        seq = [*req.prompt, *req.output]
        want = no_cache_logprobs(runner.net, seq[:-1])[len(req.prompt) - 1 :]
        assert len(req.output) == req.sampling.max_tokens == want.shape[0]
        for i, (token, sample) in enumerate(zip(req.output, req.output_logprobs, strict=True)):
            row = want[i]
            # a greedy choice up to the tolerance: near-ties may go either way on another CPU
            assert row[token] >= row.max() - 2 * TOL, (req.id, i)
            assert abs(sample.logprob - row[token].item()) <= TOL, (req.id, i)
