"""Llama / Qwen3 (full-attention controls) against Hugging Face transformers on the tiny presets."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import model_utils  # noqa: E402
from model_utils import BLOCK, TOL, assert_same_top1, prompt, reference, save_and_load  # noqa: E402

from radixflow.models.families.llama import (  # noqa: E402
    PRESETS_LLAMA,
    PRESETS_QWEN3,
    LlamaForCausalLM,
    Qwen3ForCausalLM,
    init_weights,
    rope_parameters,
)
from radixflow.models.io.loader import save_model  # noqa: E402
from radixflow.models.layers import Config, use_kernels  # noqa: E402
from radixflow.models.seq_spec import SeqSpec, Snapshot  # noqa: E402

FAMILIES = {
    "llama": (LlamaForCausalLM, PRESETS_LLAMA),
    "qwen3": (Qwen3ForCausalLM, PRESETS_QWEN3),
}


class Pools(model_utils.Pools):
    NUM_BLOCKS = 64
    NUM_SLOTS = 4


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def models(request, tmp_path_factory):
    """(ours, reference) loaded from one saved tiny checkpoint."""
    cls, presets = FAMILIES[request.param]
    model = cls(Config(presets["tiny"]))
    init_weights(model, torch.Generator().manual_seed(0))
    path = tmp_path_factory.mktemp(request.param)
    ours, ref, info = save_and_load(model, path)
    assert not any(info.values()), f"transformers loading info not clean: {info}"
    return ours, ref


def check(ours_logits: torch.Tensor, ref_logits: torch.Tensor) -> float:
    diff = (ours_logits - ref_logits).abs().max().item()
    assert diff <= TOL, f"max abs diff {diff:.3g}"
    assert_same_top1(ours_logits, ref_logits)
    return diff


def test_full_prefill_batch(models):
    ours, ref = models
    pools = Pools(ours)
    prompts = [prompt(seed, n) for n, seed in ((37, 1), (64, 2), (100, 3))]
    chunks = [(p, SeqSpec(0, len(p), pools.blocks(len(p)))) for p in prompts]
    outs = pools.run(ours, chunks)
    diffs = [check(o, reference(ref, p)) for o, p in zip(outs, prompts, strict=True)]
    print(f"{ours.config.model_type} full prefill max abs diff {max(diffs):.2e}")


def test_continue_from_checkpoint(models):
    """Round 1 computes [0, 32) with a snapshot; round 2 computes [32, 90) on the same blocks."""
    ours, ref = models
    pools = Pools(ours)
    ids, p = prompt(4, 90), 32
    table = pools.blocks(len(ids))
    pools.run(ours, [(ids[:p], SeqSpec(0, p, table[: p // BLOCK], snapshots=[Snapshot(p, 0)]))])
    (out,) = pools.run(ours, [(ids[p:], SeqSpec(p, len(ids) - p, table, restore_slot=0))])
    diff = check(out, reference(ref, ids)[p:])
    print(f"{ours.config.model_type} continuation max abs diff {diff:.2e}")


def test_mixed_batch_and_in_round_kv_reuse(models):
    """One round mixing: a fresh sequence with a mid-chunk snapshot (a branch point), a sequence
    continuing from an earlier round, and a sequence whose prefix blocks are written by the fresh
    sequence in this same round. A later round then branches off the mid-chunk snapshot."""
    ours, ref = models
    pools = Pools(ours)
    # Earlier round: B's first 48 tokens.
    b_ids = prompt(5, 80)
    b_table = pools.blocks(len(b_ids))
    pools.run(ours, [(b_ids[:48], SeqSpec(0, 48, b_table[:3], snapshots=[Snapshot(48, 0)]))])

    shared, branch = prompt(6, 32), 32  # A and C share 32 tokens (two full blocks)
    a_ids = shared + prompt(7, 30)
    c_ids = shared + prompt(8, 25)
    a_table = pools.blocks(len(a_ids))
    c_table = a_table[: branch // BLOCK] + pools.blocks(len(c_ids) - branch)
    a_spec = SeqSpec(0, len(a_ids), a_table, snapshots=[Snapshot(branch, 1)])
    b_spec = SeqSpec(48, len(b_ids) - 48, b_table, restore_slot=0)
    c_spec = SeqSpec(branch, len(c_ids) - branch, c_table)  # reads A's blocks of this round
    out_a, out_b, out_c = pools.run(ours, [(a_ids, a_spec), (b_ids[48:], b_spec), (c_ids[branch:], c_spec)])
    diffs = [
        check(out_a, reference(ref, a_ids)),
        check(out_b, reference(ref, b_ids)[48:]),
        check(out_c, reference(ref, c_ids)[branch:]),
    ]
    # Later round: D branches off A's snapshot at 32 (restore slot 1, A's first two blocks).
    d_ids = shared + prompt(9, 20)
    d_table = a_table[: branch // BLOCK] + pools.blocks(len(d_ids) - branch)
    (out_d,) = pools.run(
        ours, [(d_ids[branch:], SeqSpec(branch, len(d_ids) - branch, d_table, restore_slot=1))]
    )
    diffs.append(check(out_d, reference(ref, d_ids)[branch:]))
    print(f"{ours.config.model_type} mixed batch max abs diff {max(diffs):.2e}")


def test_top1_margin(models):
    ours, _ = models
    pools = Pools(ours)
    ids = prompt(10, 200)
    (logits,) = pools.run(ours, [(ids, SeqSpec(0, len(ids), pools.blocks(len(ids))))])
    top2 = logits.topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).median().item()
    print(f"{ours.config.model_type} tiny median top-1 margin {margin:.3f}")
    assert margin > 0.1


def test_no_recurrent_state(models):
    ours, _ = models
    assert ours.state_layout() == {}
    assert set(ours.kv_layout()) == set(range(ours.config.num_hidden_layers))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_small_preset_size(family):
    cls, presets = FAMILIES[family]
    cfg = presets["small"]
    assert cfg["vocab_size"] == 8192 and cfg["max_position_embeddings"] >= 4096
    with torch.device("meta"):
        model = cls(Config(cfg))
    params = sum(p.numel() for p in model.parameters())
    print(f"{family} small: {params / 1e6:.1f}M parameters")
    assert 40e6 <= params <= 70e6


def test_rope_parameter_spellings():
    new = Config({"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}})
    old = Config({"rope_theta": 5e5})
    legacy = Config({"rope_theta": 5e5, "rope_scaling": {"type": "linear", "factor": 2.0}})
    assert rope_parameters(new) == rope_parameters(old) == {"rope_type": "default", "rope_theta": 5e5}
    assert rope_parameters(legacy)["rope_type"] == "linear"


def test_llama3_rope_matches_transformers(tmp_path):
    """llama3 frequency scaling, as the config would be written by transformers 5.24."""
    cfg = dict(PRESETS_LLAMA["tiny"])
    cfg["rope_parameters"] = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    _matches_transformers(cfg, tmp_path)


def _matches_transformers(cfg: dict, tmp_path) -> None:
    """A llama built from ``cfg`` gives transformers' logits on a 150-token prompt (the same
    checkpoint read by both)."""
    model = LlamaForCausalLM(Config(cfg))
    init_weights(model, torch.Generator().manual_seed(1))
    save_model(model, tmp_path)
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ids = prompt(11, 150)
    pools = Pools(model)
    (out,) = pools.run(model.eval(), [(ids, SeqSpec(0, len(ids), pools.blocks(len(ids))))])
    check(out, reference(ref, ids))


@pytest.mark.parametrize("inner", [None, 4096])
def test_a_top_level_original_context_decides_llama3_rope_as_in_transformers(tmp_path, inner):
    """transformers sets llama3's original_max_position_embeddings from a top-level key of that
    name, over the one in rope_parameters and over max_position_embeddings
    (`standardize_rope_params`); read otherwise, every long wavelength was scaled wrongly."""
    cfg = dict(PRESETS_LLAMA["tiny"])
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0}
    cfg["rope_parameters"] = {**rope, "high_freq_factor": 4.0}
    if inner is not None:
        cfg["rope_parameters"]["original_max_position_embeddings"] = inner
    cfg["original_max_position_embeddings"] = 64
    _matches_transformers(cfg, tmp_path)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_decoder_fuses_each_residual_add_with_the_next_norm_to_the_bit(family, kernels) -> None:
    # the decoder adds each attention and MLP output and norms the sum in one kernel call: the
    # same hidden states as every layer's forward in turn, then the final norm
    cls, presets = FAMILIES[family]
    model = cls(Config(presets["tiny"]))
    init_weights(model, torch.Generator().manual_seed(0))
    use_kernels(model, kernels)
    fused, stepped = model_utils.fused_and_layer_by_layer(
        model, kernels, model.model.embed_tokens, model.model.layers, model.model.norm
    )
    assert torch.equal(fused, stepped)
