"""LFM2 (short conv + attention) against transformers' Lfm2ForCausalLM on CPU, float32."""

from __future__ import annotations

import pytest
import torch
from model_utils import Pools, check, prompt, reference, run, save_and_load

from radixflow.models.families.lfm2 import PRESETS, Lfm2ForCausalLM, init_weights
from radixflow.models.layers import Config
from radixflow.models.seq_spec import SeqSpec, Snapshot

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Lfm2ForCausalLM, torch.nn.Module]:
    path = tmp_path_factory.mktemp("lfm2_tiny")
    model = Lfm2ForCausalLM(Config(PRESETS["tiny"]))
    init_weights(model, torch.Generator().manual_seed(0))
    ours, ref, info = save_and_load(model, path)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return ours, ref


def test_layout_and_keys(models: tuple[Lfm2ForCausalLM, torch.nn.Module]) -> None:
    ours, ref = models
    assert set(ours.state_dict()) == set(ref.state_dict())
    assert ours.lm_head.weight is ours.model.embed_tokens.weight
    assert sorted(ours.kv_layout()) == [1, 4]
    assert ours.state_layout() == {i: ((64, 2),) for i in (0, 2, 3)}


def test_full_prefill_batch(models: tuple[Lfm2ForCausalLM, torch.nn.Module]) -> None:
    ours, ref = models
    pools = Pools(ours)
    prompts = [prompt(1, 37), prompt(2, 64), prompt(3, 100)]
    chunks = [(p, SeqSpec(0, len(p), pools.blocks(len(p)))) for p in prompts]
    diffs = [check(out, reference(ref, p)) for out, p in zip(run(ours, pools, chunks), prompts, strict=True)]
    print(f"full prefill max abs diff: {max(diffs):.2e}")


def test_restore_continuation(models: tuple[Lfm2ForCausalLM, torch.nn.Module]) -> None:
    ours, ref = models
    pools = Pools(ours)
    tokens, p = prompt(4, 90), 32
    table = pools.blocks(len(tokens))
    run(ours, pools, [(tokens[:p], SeqSpec(0, p, table, snapshots=[Snapshot(p, 3)]))])
    (out,) = run(ours, pools, [(tokens[p:], SeqSpec(p, len(tokens) - p, table, restore_slot=3))])
    diff = check(out, reference(ref, tokens)[p:])
    print(f"restored continuation max abs diff: {diff:.2e}")


def test_mixed_batch_and_mid_chunk_snapshots(
    models: tuple[Lfm2ForCausalLM, torch.nn.Module], kernels
) -> None:
    ours, ref = models
    pools = Pools(ours, kernels=kernels)
    a, b, c = prompt(5, 53), prompt(6, 77), prompt(7, 80)
    ta, tb, tc = pools.blocks(len(a) + 1), pools.blocks(len(b)), pools.blocks(len(c))
    # Earlier round: B's first 48 tokens, checkpoint at 48.
    run(ours, pools, [(b[:48], SeqSpec(0, 48, tb, snapshots=[Snapshot(48, 0)]))])
    # Mixed round: A from scratch (snapshot at its end), B restored at 48, C with snapshots at a
    # non-aligned branch point (45) and an aligned one (64) inside its chunk.
    outs = run(
        ours,
        pools,
        [
            (a, SeqSpec(0, len(a), ta, snapshots=[Snapshot(len(a), 1)])),
            (b[48:], SeqSpec(48, len(b) - 48, tb, restore_slot=0)),
            (c, SeqSpec(0, len(c), tc, snapshots=[Snapshot(45, 2), Snapshot(64, 3)])),
        ],
    )
    diffs = [check(outs[0], reference(ref, a)), check(outs[1], reference(ref, b)[48:])]
    diffs.append(check(outs[2], reference(ref, c)))
    # Later round: branches from both C checkpoints plus a one-token decode step of A.
    d1 = c[:45] + prompt(8, 20)
    d2 = c[:64] + prompt(9, 15)
    a_next = [*a, int(outs[0][-1].argmax())]
    t1 = pools.copy_blocks(tc[:3]) + pools.blocks(len(d1) - 48)  # block 2 holds C's 32..47
    t2 = tc[:4] + pools.blocks(len(d2) - 64)
    outs = run(
        ours,
        pools,
        [
            (d1[45:], SeqSpec(45, len(d1) - 45, t1, restore_slot=2)),
            (a_next[-1:], SeqSpec(len(a), 1, ta, restore_slot=1)),
            (d2[64:], SeqSpec(64, len(d2) - 64, t2, restore_slot=3)),
        ],
    )
    diffs.append(check(outs[0], reference(ref, d1)[45:]))
    diffs.append(check(outs[1], reference(ref, a_next)[-1:]))
    diffs.append(check(outs[2], reference(ref, d2)[64:]))
    print(f"mixed batch max abs diff: {max(diffs):.2e}")


def test_short_chunks_keep_window(models: tuple[Lfm2ForCausalLM, torch.nn.Module], kernels) -> None:
    """Chunks shorter than the conv window must carry older inputs through the checkpoint."""
    ours, ref = models
    pools = Pools(ours, kernels=kernels)
    tokens = prompt(10, 8)
    table = pools.blocks(len(tokens))
    outs = []
    for pos in range(len(tokens)):
        restore = None if pos == 0 else pos % 2
        spec = SeqSpec(pos, 1, table, restore_slot=restore, snapshots=[Snapshot(pos + 1, (pos + 1) % 2)])
        outs.extend(run(ours, pools, [(tokens[pos : pos + 1], spec)]))
    check(torch.cat(outs), reference(ref, tokens))


def test_top1_margin(models: tuple[Lfm2ForCausalLM, torch.nn.Module]) -> None:
    ours, _ = models
    pools = Pools(ours)
    tokens = prompt(11, 128)
    (logits,) = run(ours, pools, [(tokens, SeqSpec(0, len(tokens), pools.blocks(len(tokens))))])
    top = logits.topk(2, dim=-1).values
    margins = top[:, 0] - top[:, 1]
    print(f"top-1 margin: median {margins.median():.3f}, min {margins.min():.4f}")
    assert margins.median() > 0.1
    # Tied embeddings must not make every position predict its own input token.
    assert (logits.argmax(-1) == torch.tensor(tokens)).float().mean() < 0.5


def test_small_preset_size() -> None:
    with torch.device("meta"):
        model = Lfm2ForCausalLM(Config(PRESETS["small"]))
    n = sum(p.numel() for p in model.parameters())
    print(f"small preset parameters: {n / 1e6:.1f}M")
    assert 40e6 <= n <= 70e6
    assert PRESETS["small"]["max_position_embeddings"] >= 4096
    assert PRESETS["small"]["vocab_size"] == 8192


@pytest.mark.parametrize("word, embedding", [(False, True), (True, False)])
def test_tie_embedding_decides_over_tie_word_embeddings(tmp_path, word: bool, embedding: bool) -> None:
    """transformers' Lfm2Config sets tie_word_embeddings from LFM2's own ``tie_embedding`` when a
    config has it: the two disagreeing, ours must tie (or not) as transformers does."""
    import json

    from radixflow.models.io.loader import load_model, save_model

    torch.manual_seed(0)
    model = Lfm2ForCausalLM(Config({**PRESETS["tiny"], "tie_word_embeddings": embedding}))
    init_weights(model, torch.Generator().manual_seed(5))
    save_model(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(tie_word_embeddings=word, tie_embedding=embedding)
    (tmp_path / "config.json").write_text(json.dumps(config))
    ours = load_model(tmp_path)
    assert (ours.lm_head.weight is ours.model.embed_tokens.weight) is embedding
    ids = prompt(9, 12)
    pools = Pools(ours)
    (got,) = run(ours, pools, [(ids, SeqSpec(0, len(ids), pools.blocks(len(ids))))])
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    check(got, reference(ref, ids))


@pytest.mark.parametrize(
    "edit",
    [
        # absent: transformers' default multiplier is 1.0, then the width rounds up (2/3 of 150
        # is 100: to 128 at the preset's multiple of 32, to 256 at the default multiple)
        {"intermediate_size": 150, "block_ffn_dim_multiplier": None},
        {"intermediate_size": 150, "block_ffn_dim_multiplier": None, "block_multiple_of": None},
        {"block_ff_dim": 96},  # LFM2's own spelling decides over intermediate_size, as there
    ],
)
def test_feed_forward_width_as_transformers_reads_the_config(edit: dict) -> None:
    """The feed-forward width of a config that leaves LFM2's sizing fields out (or spells the
    width twice) is the width transformers' Lfm2Config builds from it."""
    config = {k: v for k, v in {**PRESETS["tiny"], **edit}.items() if v is not None}
    with torch.device("meta"):
        ours = Lfm2ForCausalLM(Config(config))
        ref = transformers.Lfm2ForCausalLM(transformers.Lfm2Config.from_dict(config))
    shapes = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == shapes
