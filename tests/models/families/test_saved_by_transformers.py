"""Every family on small configs unlike the zoo's presets, from a checkpoint transformers' own
``save_pretrained`` wrote, against that transformers model: a plain prefill, chunks that resume
from a checkpoint with lengths on the chunk boundaries of the SSD and delta-rule kernels (1,
chunk - 1, chunk, chunk + 1), and a round packing a resumed prefill chunk with a decode row.

The configs vary what the presets hold fixed: GQA ratios (none, 2, 3), head sizes apart from
hidden / heads, a partial rotary share of 1/2, conv kernels of 2, 3 and 5 taps, Mamba2 groups and
chunk sizes, DeltaNet value heads per key head (3), tied and untied embeddings, a large norm
epsilon, biases, layer patterns (MoE and MLP layers, recurrent layers first and last), muP
multipliers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hf_configs import CONFIGS, VOCAB, save_reference
from model_utils import Pools, check, one_thread, prompt, reference, run  # noqa: F401 (fixture)

from radixflow.models.io.loader import load_model
from radixflow.models.seq_spec import SeqSpec, Snapshot

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

# chunk lengths of one sequence, each resuming from the checkpoint the one before saved: a
# decode row first, then around the kernels' chunk of 64 (and 16)
SCHEDULE = [1, 15, 1, 64, 1, 16, 17]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(ours, transformers') from the checkpoint transformers saved."""
    path: Path = tmp_path_factory.mktemp(request.param)
    ref = save_reference(request.param, path)
    return load_model(path), ref


def expected(ref: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():  # no cache: transformers' Qwen3-Next asks an all-DeltaNet cache for a length
        return ref(input_ids=torch.tensor([tokens]), use_cache=False).logits[0].float()


def test_prefill(pair) -> None:
    ours, ref = pair
    tokens = [t % VOCAB for t in prompt(1, 65)]
    pools = Pools(ours)
    (got,) = run(ours, pools, [(tokens, SeqSpec(0, len(tokens), pools.blocks(len(tokens))))])
    check(got, expected(ref, tokens))


def test_chunks_resuming_from_checkpoints(pair) -> None:
    ours, ref = pair
    tokens = [t % VOCAB for t in prompt(2, sum(SCHEDULE))]
    pools = Pools(ours)
    table, start, outs = pools.blocks(len(tokens)), 0, []
    for n in SCHEDULE:
        spec = SeqSpec(start, n, table, None if start == 0 else 0, [Snapshot(start + n, 0)])
        outs += run(ours, pools, [(tokens[start : start + n], spec)])
        start += n
    check(torch.cat(outs), expected(ref, tokens))


def test_a_resumed_chunk_packed_with_a_decode_row(pair) -> None:
    ours, ref = pair
    a, b = [t % VOCAB for t in prompt(3, 50)], [t % VOCAB for t in prompt(4, 21)]
    pools = Pools(ours)
    ta, tb = pools.blocks(len(a)), pools.blocks(len(b))
    first = [
        (a[:30], SeqSpec(0, 30, ta, None, [Snapshot(30, 0)])),
        (b[:20], SeqSpec(0, 20, tb, None, [Snapshot(20, 1)])),
    ]
    run(ours, pools, first)
    second = [(a[30:], SeqSpec(30, 20, ta, 0)), (b[20:], SeqSpec(20, 1, tb, 1, [Snapshot(21, 1)]))]
    got_a, got_b = run(ours, pools, second)
    check(got_a, expected(ref, a)[30:])
    check(got_b, expected(ref, b)[20:])
