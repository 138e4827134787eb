"""Nemotron-H and Falcon-H1 (Mamba2 hybrids) against transformers on CPU, float32."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import model_utils
import pytest
import torch
from model_utils import check, prompt, reference, run, save_and_load
from safetensors import safe_open

from radixflow.models.families.falcon_h1 import PRESETS as PRESETS_FALCON
from radixflow.models.families.falcon_h1 import FalconH1ForCausalLM
from radixflow.models.families.mamba2_init import init_weights
from radixflow.models.families.nemotron_h import PRESETS as PRESETS_NEMOTRON
from radixflow.models.families.nemotron_h import NemotronHForCausalLM, nemotron_layer_types
from radixflow.models.io.loader import load_model, save_model
from radixflow.models.kernels.ssd import ssd_chunked, ssd_step
from radixflow.models.layers import Config, use_kernels
from radixflow.models.seq_spec import SeqSpec, Snapshot

transformers = pytest.importorskip("transformers")

FAMILIES = {"nemotron_h": NemotronHForCausalLM, "falcon_h1": FalconH1ForCausalLM}
PRESETS_BY_TYPE = {"nemotron_h": PRESETS_NEMOTRON, "falcon_h1": PRESETS_FALCON}


class Pools(model_utils.Pools):
    NUM_BLOCKS = 160


def build_pair(config: dict[str, Any], path: Path) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Our model (via save_model/load_model) and transformers' model from the same checkpoint."""
    model = FAMILIES[config["model_type"]](Config(config))
    init_weights(model, torch.Generator().manual_seed(0))
    ours, ref, info = save_and_load(model, path)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return ours, ref


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def models(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp(f"{request.param}_tiny")
    return build_pair(PRESETS_BY_TYPE[request.param]["tiny"], path)


# ---------------------------------------------------------------------------------------------
# Checkpoint layout


def test_checkpoint_names_both_ways(models, tmp_path: Path) -> None:
    """Our names are what transformers writes; a transformers-saved checkpoint loads into ours."""
    ours, ref = models
    ref.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        written = set(f.keys())
    tied = {"lm_head.weight"} if ours.config.get("tie_word_embeddings", False) else set()
    assert set(ours.state_dict()) - tied == written
    again = load_model(tmp_path, "cpu", torch.float32)
    tokens = prompt(12, 40)
    pools = [Pools(again), Pools(ours)]
    a = run(again, pools[0], [(tokens, SeqSpec(0, 40, pools[0].blocks(40)))])[0]
    b = run(ours, pools[1], [(tokens, SeqSpec(0, 40, pools[1].blocks(40)))])[0]
    assert torch.equal(a, b)


def test_layouts(models) -> None:
    ours, _ = models
    if ours.config.model_type == "nemotron_h":  # pattern "M-*ME*M"
        assert sorted(ours.kv_layout()) == [2, 5]
        assert ours.kv_layout()[2] == (2, 16)
        shapes = ((128 + 2 * 2 * 16, 3), (8, 16, 16))
        assert ours.state_layout() == {i: shapes for i in (0, 3, 6)}
    else:
        assert ours.kv_layout() == {i: (2, 16) for i in range(3)}
        assert ours.state_layout() == {i: ((128 + 2 * 2 * 16, 3), (8, 16, 16)) for i in range(3)}


def test_legacy_nemotron_config() -> None:
    """Older configs spell the pattern as a string and prefix Mamba fields with ``mamba_``."""
    legacy = dict(PRESETS_NEMOTRON["tiny"])
    del legacy["layers_block_type"]
    legacy["hybrid_override_pattern"] = "M-*ME*M"
    legacy["mamba_n_groups"] = legacy.pop("n_groups")
    legacy["mamba_d_conv"] = legacy.pop("conv_kernel")
    legacy["mamba_chunk_size"] = legacy.pop("chunk_size")
    assert nemotron_layer_types(Config(legacy)) == PRESETS_NEMOTRON["tiny"]["layers_block_type"]
    a, b = NemotronHForCausalLM(Config(legacy)), NemotronHForCausalLM(Config(PRESETS_NEMOTRON["tiny"]))
    assert {k: v.shape for k, v in a.state_dict().items()} == {k: v.shape for k, v in b.state_dict().items()}


# ---------------------------------------------------------------------------------------------
# SSD kernels


def naive_scan(x, dt, a, b, c, h):
    """Token-by-token reference recurrence."""
    ys = []
    for t in range(x.shape[0]):
        y, h = ssd_step(x[t : t + 1], dt[t : t + 1], a, b[t : t + 1], c[t : t + 1], h.unsqueeze(0))
        h = h[0]
        ys.append(y[0])
    return torch.stack(ys), h


@pytest.mark.parametrize(("length", "chunk"), [(1, 64), (5, 64), (64, 64), (100, 64), (130, 16)])
def test_chunked_ssd_matches_recurrence(length: int, chunk: int) -> None:
    g = torch.Generator().manual_seed(length)
    heads, p, groups, n = 4, 8, 2, 6
    x = torch.randn(length, heads, p, generator=g)
    dt = torch.rand(length, heads, generator=g) * 0.5
    a = -torch.rand(heads, generator=g) * 4
    b = torch.randn(length, groups, n, generator=g)
    c = torch.randn(length, groups, n, generator=g)
    h0 = torch.randn(heads, p, n, generator=g)
    y, h = ssd_chunked(x, dt, a, b, c, h0, chunk)
    y_ref, h_ref = naive_scan(x, dt, a, b, c, h0)
    assert (y - y_ref).abs().max() < 1e-4
    assert (h - h_ref).abs().max() < 1e-4


# ---------------------------------------------------------------------------------------------
# Against transformers


def test_full_prefill_batch(models, kernels) -> None:
    ours, ref = models
    pools = Pools(ours, kernels=kernels)
    prompts = [prompt(1, 37), prompt(2, 64), prompt(3, 100)]
    chunks = [(p, SeqSpec(0, len(p), pools.blocks(len(p)))) for p in prompts]
    outs = run(ours, pools, chunks)
    diffs = [check(out, reference(ref, p)) for out, p in zip(outs, prompts, strict=True)]
    print(f"{ours.config.model_type} full prefill max abs diff: {max(diffs):.2e}")


@pytest.mark.parametrize(("p", "n"), [(32, 90), (160, 300)])
def test_restore_continuation(models, kernels, p: int, n: int) -> None:
    ours, ref = models
    pools = Pools(ours, kernels=kernels)
    tokens = prompt(4, n)
    table = pools.blocks(len(tokens))
    run(ours, pools, [(tokens[:p], SeqSpec(0, p, table, snapshots=[Snapshot(p, 3)]))])
    (out,) = run(ours, pools, [(tokens[p:], SeqSpec(p, len(tokens) - p, table, restore_slot=3))])
    diff = check(out, reference(ref, tokens)[p:])
    print(f"{ours.config.model_type} restored continuation at {p} max abs diff: {diff:.2e}")


def test_mixed_batch_and_mid_chunk_snapshots(models, kernels) -> None:
    ours, ref = models
    pools = Pools(ours, kernels=kernels)
    a, b, c = prompt(5, 53), prompt(6, 77), prompt(7, 80)
    ta, tb, tc = pools.blocks(len(a) + 1), pools.blocks(len(b) + 1), pools.blocks(len(c))
    # Earlier round: B's first 48 tokens, checkpoint at 48.
    run(ours, pools, [(b[:48], SeqSpec(0, 48, tb, snapshots=[Snapshot(48, 0)]))])
    # Mixed round: A from scratch (snapshot at its end), B restored at 48 (snapshot at its end),
    # C with snapshots at a non-aligned branch point (45) and an aligned one (64) in its chunk.
    outs = run(
        ours,
        pools,
        [
            (a, SeqSpec(0, len(a), ta, snapshots=[Snapshot(len(a), 1)])),
            (b[48:], SeqSpec(48, len(b) - 48, tb, restore_slot=0, snapshots=[Snapshot(len(b), 4)])),
            (c, SeqSpec(0, len(c), tc, snapshots=[Snapshot(45, 2), Snapshot(64, 3)])),
        ],
    )
    diffs = [check(outs[0], reference(ref, a)), check(outs[1], reference(ref, b)[48:])]
    diffs.append(check(outs[2], reference(ref, c)))
    # Later round: branches from both C checkpoints plus one-token decode steps of A and B
    # (two one-token sequences take the vectorised decode path).
    d1 = c[:45] + prompt(8, 20)
    d2 = c[:64] + prompt(9, 15)
    a_next = [*a, int(outs[0][-1].argmax())]
    b_next = [*b, int(outs[1][-1].argmax())]
    t1 = pools.copy_blocks(tc[:3]) + pools.blocks(len(d1) - 48)  # block 2 holds C's 32..47
    t2 = tc[:4] + pools.blocks(len(d2) - 64)
    outs = run(
        ours,
        pools,
        [
            (d1[45:], SeqSpec(45, len(d1) - 45, t1, restore_slot=2)),
            (a_next[-1:], SeqSpec(len(a), 1, ta, restore_slot=1, snapshots=[Snapshot(len(a) + 1, 5)])),
            (d2[64:], SeqSpec(64, len(d2) - 64, t2, restore_slot=3)),
            (b_next[-1:], SeqSpec(len(b), 1, tb, restore_slot=4, snapshots=[Snapshot(len(b) + 1, 6)])),
        ],
    )
    diffs.append(check(outs[0], reference(ref, d1)[45:]))
    diffs.append(check(outs[1], reference(ref, a_next)[-1:]))
    diffs.append(check(outs[2], reference(ref, d2)[64:]))
    diffs.append(check(outs[3], reference(ref, b_next)[-1:]))
    # The decode snapshots continue correctly too.
    a_more = [*a_next, *prompt(10, 6)]
    (out,) = run(ours, pools, [(a_more[len(a_next) :], SeqSpec(len(a_next), 6, ta + pools.blocks(6), 5))])
    diffs.append(check(out, reference(ref, a_more)[len(a_next) :]))
    print(f"{ours.config.model_type} mixed batch max abs diff: {max(diffs):.2e}")


def test_nemotron_backbone_fuses_each_residual_add_with_the_next_norm_to_the_bit(kernels) -> None:
    # the backbone adds each block's output and norms the sum in one kernel call: the same
    # hidden states as every block's `x + mix(norm(x))` in turn, then the final norm
    model = NemotronHForCausalLM(Config(PRESETS_NEMOTRON["tiny"]))
    init_weights(model, torch.Generator().manual_seed(0))
    use_kernels(model, kernels)
    fused, stepped = model_utils.fused_and_layer_by_layer(
        model, kernels, model.backbone.embeddings, model.backbone.layers, model.backbone.norm_f
    )
    assert torch.equal(fused, stepped)


def test_short_chunks_keep_window(models, kernels) -> None:
    """Chunks shorter than the conv window must carry older inputs through the checkpoint."""
    ours, ref = models
    pools = Pools(ours, kernels=kernels)
    tokens = prompt(11, 8)
    table = pools.blocks(len(tokens))
    outs = []
    for pos in range(len(tokens)):
        restore = None if pos == 0 else pos % 2
        spec = SeqSpec(pos, 1, table, restore_slot=restore, snapshots=[Snapshot(pos + 1, (pos + 1) % 2)])
        outs.extend(run(ours, pools, [(tokens[pos : pos + 1], spec)]))
    check(torch.cat(outs), reference(ref, tokens))


def test_top1_margin(models) -> None:
    ours, _ = models
    pools = Pools(ours)
    tokens = prompt(13, 128)
    (logits,) = run(ours, pools, [(tokens, SeqSpec(0, len(tokens), pools.blocks(len(tokens))))])
    top = logits.topk(2, dim=-1).values
    margins = top[:, 0] - top[:, 1]
    print(f"{ours.config.model_type} top-1 margin: median {margins.median():.3f}, min {margins.min():.4f}")
    assert margins.median() > 0.1


def test_recurrent_layers_matter(models) -> None:
    """Dropping the Mamba2 state must change the logits (the state path is not negligible)."""
    ours, _ = models
    tokens = prompt(14, 64)
    pools = Pools(ours)
    table = pools.blocks(64)
    run(ours, pools, [(tokens[:32], SeqSpec(0, 32, table, snapshots=[Snapshot(32, 0)]))])
    (good,) = run(ours, pools, [(tokens[32:], SeqSpec(32, 32, table, restore_slot=0))])
    (bad,) = run(ours, pools, [(tokens[32:], SeqSpec(32, 32, table, restore_slot=None))])
    assert (good - bad).abs().max() > 0.5


# ---------------------------------------------------------------------------------------------
# Falcon-H1 variants: the three ways the SSM output is gated, and tied embeddings


@pytest.mark.parametrize(
    "overrides",
    [
        {"mamba_rms_norm": False},
        {"mamba_rms_norm": True, "mamba_norm_before_gate": False, "tie_word_embeddings": True},
    ],
)
def test_falcon_variants(overrides: dict[str, Any], tmp_path: Path) -> None:
    config = {**PRESETS_FALCON["tiny"], **overrides}
    ours, ref = build_pair(config, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "falcon_h1"
    if overrides.get("tie_word_embeddings"):
        assert ours.lm_head.weight is ours.model.embed_tokens.weight
    pools = Pools(ours)
    tokens = prompt(15, 70)
    table = pools.blocks(len(tokens))
    first = run(ours, pools, [(tokens[:40], SeqSpec(0, 40, table, snapshots=[Snapshot(21, 0)]))])[0]
    (rest,) = run(ours, pools, [(tokens[21:], SeqSpec(21, 49, table, restore_slot=0))])
    expected = reference(ref, tokens)
    check(first, expected[:40])
    check(rest, expected[21:])


# ---------------------------------------------------------------------------------------------
# Presets


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_small_preset_size(model_type: str) -> None:
    preset = PRESETS_BY_TYPE[model_type]["small"]
    with torch.device("meta"):
        model = FAMILIES[model_type](Config(preset))
    n = sum(p.numel() for p in model.parameters())
    print(f"{model_type} small preset parameters: {n / 1e6:.1f}M")
    assert 40e6 <= n <= 70e6
    assert preset["max_position_embeddings"] >= 4096
    assert preset["vocab_size"] == 8192


TINY_PATTERN = PRESETS_NEMOTRON["tiny"]["layers_block_type"]
# another spelling beside the field's own: transformers' NemotronHConfig sets the field from it
# (the older mamba_* kwargs; its attribute_map's layer_types and num_local_experts)
NEMOTRON_ALIASES = [
    ("time_step_min", "mamba_dt_min", 0.5),  # a dt floor: silently other logits once
    ("n_groups", "mamba_n_groups", 1),
    ("conv_kernel", "mamba_d_conv", 2),
    ("use_conv_bias", "mamba_conv_bias", False),
    ("layers_block_type", "layer_types", [TINY_PATTERN[i] for i in (0, 4, 2, 3, 1, 5, 6)]),
    ("n_routed_experts", "num_local_experts", 4),
]


@pytest.mark.parametrize("both", [True, False], ids=["beside", "alone"])
@pytest.mark.parametrize(("name", "alias", "value"), NEMOTRON_ALIASES)
def test_nemotron_alias_is_read_as_transformers_reads_it(
    tmp_path: Path, name: str, alias: str, value: Any, both: bool
) -> None:
    config = dict(PRESETS_NEMOTRON["tiny"])
    assert config[name] != value
    model = NemotronHForCausalLM(Config({**config, name: value}))
    init_weights(model, torch.Generator().manual_seed(4))
    save_model(model, tmp_path)
    if not both:
        del config[name]
    (tmp_path / "config.json").write_text(json.dumps({**config, alias: value}))
    ours = load_model(tmp_path)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    tokens = prompt(13, 30)
    pools = Pools(ours)
    check(run(ours, pools, [(tokens, SeqSpec(0, 30, pools.blocks(30)))])[0], reference(ref, tokens))


def test_falcon_config_without_mamba_d_ssm_reads_transformers_default() -> None:
    # transformers' FalconH1Config defaults mamba_d_ssm to 1024 (an explicit null: expand x hidden)
    from radixflow.models.families.falcon_h1 import falcon_mamba_spec
    from radixflow.models.layers import Config

    config = {"model_type": "falcon_h1", "hidden_size": 256, "mamba_n_heads": 8}
    spec = falcon_mamba_spec(Config({**FalconH1ForCausalLM.config_defaults, **config}))
    assert spec.heads * spec.head_dim == 1024
