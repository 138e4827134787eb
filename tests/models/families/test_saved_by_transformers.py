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

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from model_utils import Pools, check, one_thread, prompt, reference, run  # noqa: F401 (fixture)

from radixflow.models.io.loader import load_model
from radixflow.models.seq_spec import SeqSpec, Snapshot

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = 101
_DELTANET = {"linear_num_key_heads": 1, "linear_num_value_heads": 3, "linear_key_head_dim": 12}
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-gqa3": (
        "LlamaConfig",
        {
            "hidden_size": 36,
            "num_hidden_layers": 2,
            "num_attention_heads": 6,
            "num_key_value_heads": 2,
            "head_dim": 10,
            "intermediate_size": 50,
            "rms_norm_eps": 0.05,
            "attention_bias": True,
            "mlp_bias": True,
            "tie_word_embeddings": True,
        },
    ),
    "qwen3-untied": (
        "Qwen3Config",
        {
            "hidden_size": 24,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "head_dim": 12,
            "intermediate_size": 40,
            "tie_word_embeddings": False,
            "attention_bias": True,
            "mlp_bias": True,  # not a Qwen3 field: its MLP has no biases whatever config.json says
        },
    ),
    "qwen3_5-ratio3": (
        "Qwen3_5TextConfig",
        {
            "hidden_size": 30,
            "num_hidden_layers": 3,
            "num_attention_heads": 3,
            "num_key_value_heads": 1,
            "head_dim": 10,
            "intermediate_size": 44,
            **_DELTANET,
            "linear_value_head_dim": 6,
            "linear_conv_kernel_dim": 5,
            "layer_types": ["linear_attention", "full_attention", "linear_attention"],
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5},
            "tie_word_embeddings": True,
        },
    ),
    "qwen3_next-moe": (
        "Qwen3NextConfig",
        {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "intermediate_size": 40,
            **_DELTANET,
            "linear_value_head_dim": 8,
            "linear_conv_kernel_dim": 2,
            "layer_types": ["linear_attention", "full_attention"],
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 24,
            "norm_topk_prob": False,
        },
    ),
    "lfm2-k2": (
        "Lfm2Config",
        {
            "hidden_size": 30,
            "num_hidden_layers": 3,
            "num_attention_heads": 3,
            "num_key_value_heads": 1,
            "intermediate_size": 60,
            "block_multiple_of": 8,
            "conv_L_cache": 2,
            "conv_bias": True,
            "layer_types": ["conv", "full_attention", "conv"],
            "norm_eps": 0.05,
        },
    ),
    "nemotron_h-groups3": (
        "NemotronHConfig",
        {
            "hidden_size": 28,
            "layers_block_type": ["mamba", "attention", "moe", "mlp", "mamba"],
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "intermediate_size": 36,
            "mamba_num_heads": 6,
            "mamba_head_dim": 4,
            "n_groups": 3,
            "ssm_state_size": 8,
            "conv_kernel": 3,
            "chunk_size": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 12,
            "moe_shared_expert_intermediate_size": 20,
            "use_bias": True,
        },
    ),
    "falcon_h1-mup": (
        "FalconH1Config",
        {
            "hidden_size": 24,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "intermediate_size": 40,
            "mamba_d_ssm": 24,
            "mamba_n_heads": 3,
            "mamba_d_head": "auto",
            "mamba_n_groups": 3,
            "mamba_d_state": 4,
            "mamba_d_conv": 5,
            "mamba_chunk_size": 16,
            "mamba_rms_norm": True,
            "mamba_norm_before_gate": False,
            "time_step_limit": [0.01, 0.5],
            "ssm_multipliers": [1.0, 0.5, 1.5, 1.0, 0.7],
            "mlp_multipliers": [0.8, 1.2],
            "key_multiplier": 0.6,
            "embedding_multiplier": 2.0,
            "lm_head_multiplier": 0.5,
            "tie_word_embeddings": True,
        },
    ),
}
# chunk lengths of one sequence, each resuming from the checkpoint the one before saved: a
# decode row first, then around the kernels' chunk of 64 (and 16)
SCHEDULE = [1, 15, 1, 64, 1, 16, 17]


def spread(model: torch.nn.Module, seed: int) -> None:
    """Weights far from transformers' tiny init, so a wrong piece shows at O(1): linear layers
    variance-preserving, norms and biases jittered, logits with a spread of ~2."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() < 2:
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)
            elif "embed" in name or "lm_head" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 2 / math.sqrt(p.shape[-1]))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p[0].numel()))


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(ours, transformers') from the checkpoint transformers saved."""
    cls, fields = CONFIGS[request.param]
    config = getattr(transformers, cls)(vocab_size=VOCAB, max_position_embeddings=512, **fields)
    torch.manual_seed(0)
    ref = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    spread(ref, 1)
    path: Path = tmp_path_factory.mktemp(request.param)
    ref.save_pretrained(path)
    return load_model(path), ref.eval()


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
