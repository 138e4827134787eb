"""Qwen3.5 / Qwen3-Next runner vs transformers: packed prefill, restore/snapshot, mixed batches."""

from __future__ import annotations

import model_utils
import pytest
import torch
from model_utils import BLOCK, TOL, assert_same_top1, save_and_load

from radixflow.models.families.qwen3_5 import PRESETS, Qwen35ForCausalLM, init_weights
from radixflow.models.families.qwen3_next import PRESETS as PRESETS_NEXT
from radixflow.models.families.qwen3_next import Qwen3NextForCausalLM
from radixflow.models.kernels.delta_rule import CHUNK_SIZES, chunked_gated_delta_rule, unit_lower_solve
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS
from radixflow.models.layers import Config
from radixflow.models.seq_spec import SeqSpec, Snapshot

transformers = pytest.importorskip("transformers")

FAMILIES = {
    "qwen3_5_text": (PRESETS, Qwen35ForCausalLM),
    "qwen3_next": (PRESETS_NEXT, Qwen3NextForCausalLM),
}


class Pools(model_utils.Pools):
    NUM_BLOCKS = 96
    NUM_SLOTS = 8

    def blocks(self, n_tokens: int, prefix: list[int] | None = None) -> list[int]:
        """Block table covering ``n_tokens``, reusing ``prefix`` blocks and allocating the rest."""
        table = list(prefix or [])
        while len(table) * BLOCK < n_tokens:
            table.append(self.next_block)
            self.next_block += 1
        return table

    def fork(self, block: int) -> int:
        """Copy-on-write: a fresh block holding a copy of ``block``'s KV (for unaligned branches)."""
        new = self._alloc()
        src, dst = slice(block * BLOCK, (block + 1) * BLOCK), slice(new * BLOCK, (new + 1) * BLOCK)
        for layer in self.kv.k:
            self.kv.k[layer][dst] = self.kv.k[layer][src]
            self.kv.v[layer][dst] = self.kv.v[layer][src]
        return new

    def _alloc(self) -> int:
        self.next_block += 1
        return self.next_block - 1


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def models(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(ours loaded by load_model, transformers model, vocab) for the family's tiny preset."""
    presets, cls = FAMILIES[request.param]
    torch.manual_seed(0)
    model = cls(Config(presets["tiny"]))
    init_weights(model, torch.Generator().manual_seed(1234))
    path = tmp_path_factory.mktemp(request.param)
    ours, ref, _ = save_and_load(model, path)
    return ours, ref, presets["tiny"]["vocab_size"]


def tokens(n: int, seed: int, vocab: int) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def reference(ref: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return ref(torch.tensor([ids]), position_ids=torch.arange(len(ids))[None]).logits[0].float()


def check(ours: torch.Tensor, expected: torch.Tensor) -> float:
    diff = (ours - expected).abs().max().item()
    assert diff <= TOL, f"max abs diff {diff}"
    assert_same_top1(ours, expected)
    return diff


def test_state_dict_keys_match_transformers(models) -> None:
    ours, ref, _ = models
    assert set(ours.state_dict()) == set(ref.state_dict())


def test_packed_prefill_matches_transformers(models, kernels) -> None:
    ours, ref, vocab = models
    pools = Pools(ours, kernels=kernels)
    prompts = [tokens(n, seed, vocab) for seed, n in enumerate((37, 64, 100))]
    chunks = [(p, SeqSpec(0, len(p), pools.blocks(len(p)))) for p in prompts]
    diffs = [check(out, reference(ref, p)) for out, p in zip(pools.run(ours, chunks), prompts, strict=True)]
    print(f"{ours.config.model_type} packed prefill max abs diff {max(diffs):.2e}")


@pytest.mark.parametrize("p", [32, 64])
def test_continuation_from_checkpoint(models, p: int, kernels) -> None:
    ours, ref, vocab = models
    pools = Pools(ours, kernels=kernels)
    ids = tokens(100, 7, vocab)
    table = pools.blocks(p)
    pools.run(ours, [(ids[:p], SeqSpec(0, p, table, snapshots=[Snapshot(p, 3)]))])
    table = pools.blocks(len(ids), prefix=table)
    (out,) = pools.run(ours, [(ids[p:], SeqSpec(p, len(ids) - p, table, restore_slot=3))])
    diff = check(out, reference(ref, ids)[p:])
    print(f"{ours.config.model_type} continuation at {p}: max abs diff {diff:.2e}")


def test_mixed_batch_and_mid_chunk_snapshots(models, kernels) -> None:
    ours, ref, vocab = models
    pools = Pools(ours, kernels=kernels)
    x, y, z = tokens(80, 11, vocab), tokens(37, 12, vocab), tokens(100, 13, vocab)
    x_table = pools.blocks(32)
    pools.run(ours, [(x[:32], SeqSpec(0, 32, x_table, snapshots=[Snapshot(32, 0)]))])
    x_table = pools.blocks(len(x), prefix=x_table)
    z_table = pools.blocks(len(z))
    # one round: from scratch / restored at 32 / from scratch with snapshots at 45 (unaligned) and 64
    z_spec = SeqSpec(0, len(z), z_table, snapshots=[Snapshot(45, 1), Snapshot(64, 2)])
    outs = pools.run(
        ours,
        [
            (y, SeqSpec(0, len(y), pools.blocks(len(y)))),
            (x[32:], SeqSpec(32, len(x) - 32, x_table, restore_slot=0)),
            (z, z_spec),
        ],
    )
    diffs = [check(outs[0], reference(ref, y)), check(outs[1], reference(ref, x)[32:])]
    diffs.append(check(outs[2], reference(ref, z)))
    # next round: two branches of z diverging at the snapshot points, both in one batch
    b64 = z[:64] + tokens(30, 14, vocab)
    b45 = z[:45] + tokens(20, 15, vocab)
    t64 = pools.blocks(len(b64), prefix=z_table[:4])
    t45 = pools.blocks(len(b45), prefix=[*z_table[:2], pools.fork(z_table[2])])
    outs = pools.run(
        ours,
        [
            (b64[64:], SeqSpec(64, len(b64) - 64, t64, restore_slot=2)),
            (b45[45:], SeqSpec(45, len(b45) - 45, t45, restore_slot=1)),
        ],
    )
    diffs += [check(outs[0], reference(ref, b64)[64:]), check(outs[1], reference(ref, b45)[45:])]
    print(f"{ours.config.model_type} mixed batch max abs diff {max(diffs):.2e}")


def _short_suffixes_beside_a_prompt(models, kernels) -> None:
    """12 suffixes of 11 tokens after a checkpointed 16-token context, beside one 70-token prompt
    from scratch, in one round: each against transformers."""
    ours, ref, vocab = models
    pools = Pools(ours, kernels=kernels)
    ctx = tokens(16, 21, vocab)
    ctx_table = pools.blocks(16)
    pools.run(ours, [(ctx, SeqSpec(0, 16, ctx_table, snapshots=[Snapshot(16, 0)]))])
    prompts = [ctx + tokens(11, 30 + i, vocab) for i in range(12)]
    chunks = [(p[16:], SeqSpec(16, 11, pools.blocks(27, prefix=ctx_table), restore_slot=0)) for p in prompts]
    long = tokens(70, 50, vocab)
    outs = pools.run(ours, [*chunks, (long, SeqSpec(0, 70, pools.blocks(70)))])
    diffs = [check(out, reference(ref, p)[16:]) for out, p in zip(outs, prompts, strict=False)]
    diffs.append(check(outs[-1], reference(ref, long)))
    print(f"{ours.config.model_type} {kernels.name} short suffixes max abs diff {max(diffs):.2e}")


@pytest.mark.parametrize("chunk", CHUNK_SIZES)
def test_short_suffixes_beside_a_prompt_match_transformers(models, chunk: int, monkeypatch) -> None:
    """A server-like round at every chunk length the eager kernel may pick (forced here: the
    tiny model's small heads would always pick 32)."""
    from radixflow.models.kernels import delta_rule

    monkeypatch.setattr(delta_rule, "pick_chunk", lambda *args: chunk)
    _short_suffixes_beside_a_prompt(models, TORCH_KERNELS)


def test_short_suffixes_beside_a_prompt_match_transformers_token_by_token(models, kernels) -> None:
    """The same round through each backend (the native one runs the delta rule token by token,
    with no chunk length)."""
    _short_suffixes_beside_a_prompt(models, kernels)


def test_a_prompt_that_is_a_prefix_of_another_matches_transformers(models, kernels) -> None:
    """One round: a prompt, and a longer one it is a prefix of, from scratch side by side, the
    first saving its state at its end (a checkpoint on a block boundary) and a third row
    following from that state in the same round (a second wave); a one-token prompt beside."""
    ours, ref, vocab = models
    pools = Pools(ours, kernels=kernels)
    longer = tokens(45, 61, vocab)
    short = longer[:32]
    first = pools.blocks(32)
    follow = pools.blocks(45, prefix=first)
    rows = [
        (short, SeqSpec(0, 32, first, snapshots=[Snapshot(32, 0)])),
        (longer, SeqSpec(0, 45, pools.blocks(45))),
        (longer[32:], SeqSpec(32, 13, follow, restore_slot=0)),
        (longer[:1], SeqSpec(0, 1, pools.blocks(1))),
    ]
    outs = pools.run(ours, rows)
    want = reference(ref, longer)
    for (_, spec), out in zip(rows, outs, strict=True):
        check(out, want[spec.start : spec.end])


def test_decode_steps_match_transformers(models, kernels) -> None:
    """Single-token chunks (decode) continuing from a prefill checkpoint, several sequences at once."""
    ours, ref, vocab = models
    pools = Pools(ours, kernels=kernels)
    seqs = [tokens(40, 20, vocab), tokens(53, 21, vocab)]
    prefill = [24, 48]
    tables = [pools.blocks(n) for n in (40, 53)]
    pools.run(
        ours,
        [
            (s[:p], SeqSpec(0, p, t, snapshots=[Snapshot(p, i)]))
            for i, (s, p, t) in enumerate(zip(seqs, prefill, tables, strict=True))
        ],
    )
    expected = [reference(ref, s) for s in seqs]
    for step in range(5):
        chunks = [
            ([s[p + step]], SeqSpec(p + step, 1, t, restore_slot=i, snapshots=[Snapshot(p + step + 1, i)]))
            for i, (s, p, t) in enumerate(zip(seqs, prefill, tables, strict=True))
        ]
        outs = pools.run(ours, chunks)
        for out, exp, p in zip(outs, expected, prefill, strict=True):
            check(out, exp[p + step : p + step + 1])


def test_top1_margin_is_peaked(models) -> None:
    ours, _, vocab = models
    pools = Pools(ours)
    ids = tokens(100, 30, vocab)
    (logits,) = pools.run(ours, [(ids, SeqSpec(0, len(ids), pools.blocks(len(ids))))])
    top = logits.topk(2, dim=-1).values
    margins = top[:, 0] - top[:, 1]
    median = margins.median().item()
    print(f"{ours.config.model_type} top-1 margin median {median:.3f} min {margins.min().item():.2e}")
    assert median > 0.1


def _naive_delta_rule(q, k, v, g, beta, state):
    outs = []
    for t in range(q.shape[0]):
        state = state * g[t].exp()[:, None, None]
        mem = torch.einsum("hk,hkv->hv", k[t], state)
        state = state + torch.einsum("hk,hv->hkv", k[t], beta[t][:, None] * (v[t] - mem))
        outs.append(torch.einsum("hk,hkv->hv", q[t], state))
    return torch.stack(outs), state


@pytest.mark.parametrize("chunk", CHUNK_SIZES)
@pytest.mark.parametrize(
    "splits", [[150], [1, 63, 86], [64, 64, 22], [5, 1, 1, 143], [16, 16, 1], [32, 33], [17, 15]]
)
def test_chunked_delta_rule_matches_recurrence(splits: list[int], chunk: int) -> None:
    gen = torch.Generator().manual_seed(0)
    n, h, dk, dv = sum(splits), 3, 8, 6
    q = torch.nn.functional.normalize(torch.randn(n, h, dk, generator=gen), dim=-1) * dk**-0.5
    k = torch.nn.functional.normalize(torch.randn(n, h, dk, generator=gen), dim=-1)
    v = torch.randn(n, h, dv, generator=gen)
    g = -torch.rand(n, h, generator=gen) * torch.tensor([0.01, 0.3, 3.0])
    beta = torch.rand(n, h, generator=gen)
    init = torch.randn(h, dk, dv, generator=gen)
    want, want_state = _naive_delta_rule(q, k, v, g, beta, init)
    state, lo, outs = init, 0, []
    for length in splits:
        sl = slice(lo, lo + length)
        out, state = chunked_gated_delta_rule(q[sl], k[sl], v[sl], g[sl], beta[sl], state, chunk=chunk)
        outs.append(out)
        lo += length
    assert torch.allclose(torch.cat(outs), want, atol=1e-5)
    assert torch.allclose(state, want_state, atol=1e-5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_small_preset_size(family: str) -> None:
    presets, cls = FAMILIES[family]
    cfg = presets["small"]
    assert cfg["vocab_size"] == 8192 and cfg["max_position_embeddings"] >= 4096
    with torch.device("meta"):
        model = cls(Config(cfg))
    params = sum(p.numel() for p in model.parameters())
    assert 40e6 <= params <= 70e6, params


def test_unit_lower_solve_matches_lapack() -> None:
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(2, 3, 64, 64, generator=gen) * 0.3
    rhs = torch.randn(2, 3, 64, 10, generator=gen)
    want = torch.linalg.solve_triangular(a, rhs, upper=False, unitriangular=True)
    assert torch.allclose(unit_lower_solve(a, rhs), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("chunk", [4, 16, 32, 64])
def test_chunk_plan_kernel_matches_per_segment_kernel(chunk: int) -> None:
    """Several sequences of unequal length, cut into segments with saves, in one batched call:
    the outputs and every saved state equal the per-segment kernel's (padding is inert)."""
    from radixflow.models.kernels.chunks import ChunkPlan
    from radixflow.models.kernels.delta_rule import gated_delta_rule_chunks

    g = torch.Generator().manual_seed(3)
    heads, dk, dv = 2, 8, 6
    seqs = [[5, 70], [1], [13, 2, 9], [64]]  # segment lengths per sequence
    rows = sum(sum(s) for s in seqs)
    q = torch.nn.functional.normalize(torch.randn(rows, heads, dk, generator=g), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(rows, heads, dk, generator=g), dim=-1)
    v = torch.randn(rows, heads, dv, generator=g)
    gate = -torch.rand(rows, heads, generator=g)
    beta = torch.rand(rows, heads, generator=g)
    inits = [torch.randn(heads, dk, dv, generator=g) for _ in seqs]
    want_out = torch.empty(rows, heads, dv)
    want_saves: dict[int, torch.Tensor] = {}
    layout, base, key = [], 0, 0
    for lengths, state in zip(seqs, inits, strict=True):
        mine = []
        for n in lengths:
            sl = slice(base, base + n)
            args = (q[sl], k[sl], v[sl], gate[sl], beta[sl])
            want_out[sl], state = chunked_gated_delta_rule(*args, state, chunk)
            want_saves[key] = state
            mine.append((base, base + n, key))
            base, key = base + n, key + 1
        layout.append(mine)
    plan = ChunkPlan.build(layout, rows, chunk, torch.device("cpu"))
    got_saves: dict[int, torch.Tensor] = {}
    states = torch.stack([inits[b] for b in plan.order])
    out = gated_delta_rule_chunks(
        q, k, v, gate, beta, states, plan, lambda key, s: got_saves.__setitem__(key, s.clone())
    )
    assert (out - want_out).abs().max().item() < 1e-5
    assert sorted(got_saves) == sorted(want_saves)
    for key, want in want_saves.items():
        assert (got_saves[key] - want).abs().max().item() < 1e-5, key
