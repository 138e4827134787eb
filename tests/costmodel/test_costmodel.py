"""Cost model: per-kind work, hardware profiles, shapes read from configs, the NNLS fit."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from radixflow.costmodel.hardware.profile_checks import COMPUTE_TERMS, ProfileError
from radixflow.costmodel.hardware.profile_files import load_profile, resolve_hardware, save_profile
from radixflow.costmodel.hardware.profiles import HARDWARE, HardwareProfile
from radixflow.costmodel.round_cost.by_profile import round_cost_model
from radixflow.costmodel.round_cost.fitted_rates import CostModel, round_work
from radixflow.costmodel.round_cost.nnls import nnls
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.hf_config import shape_from_config
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS


def test_falcon_h1_sim_shape_has_state_in_every_layer():
    # Falcon-H1 runs attention and Mamba2 in parallel in each layer: every layer holds state.
    shape = SIM_MODELS["falcon_h1-1.5b"]
    assert shape.has_recurrent
    assert all(layer.has_state and layer.has_attention for layer in shape.layers)
    assert set(shape.layer_kinds) == {"attention+mamba2"}


def test_falcon_h1_sim_blocks_consumers_so_policies_differ():
    from engine_utils import Engines

    from radixflow.bench.harness import run_policies
    from radixflow.runners.sim import SimRunner
    from radixflow.scheduler.scheduler import SchedulerConfig
    from radixflow.workloads.build import build_workload
    from radixflow.workloads.candidates import WorkloadSpec

    spec = WorkloadSpec(groups=4, candidates=4, context_len=256, candidate_len=16, seed=1)
    reqs = build_workload(spec).requests
    runner = SimRunner(SIM_MODELS["falcon_h1-1.5b"], HARDWARE["h200"])
    config = SchedulerConfig(token_budget=512)
    native, flow = run_policies(reqs, Engines(runner, config), ["native", "radixflow"], "branch")
    assert native.result.bubble_tokens > 0 and flow.result.rounds < native.result.rounds


def test_every_hybrid_sim_shape_is_hybrid_and_the_control_is_not():
    for name, shape in SIM_MODELS.items():
        assert shape.has_recurrent == (name != "qwen3-4b"), name
        assert shape.source, name


def test_output_projection_is_charged_at_sampled_positions_only():
    shape = SIM_MODELS["qwen3_5-2b"]
    sampled = round_work(shape, [ChunkShape(0, 512, True)])
    unsampled = round_work(shape, [ChunkShape(0, 512, False)])
    assert unsampled.flops["lm_head"] == 0
    assert sampled.flops["lm_head"] == 2 * shape.hidden * shape.vocab_size
    assert {k: v for k, v in sampled.flops.items() if k != "lm_head"} == {
        k: v for k, v in unsampled.flops.items() if k != "lm_head"
    }


def test_attention_pays_for_context_and_recurrent_layers_do_not():
    shape = SIM_MODELS["qwen3_5-2b"]
    fresh = round_work(shape, [ChunkShape(0, 256, True)])
    late = round_work(shape, [ChunkShape(8192, 256, True)])
    assert late.flops["attention"] == fresh.flops["attention"] > 0  # the chunk's own causal pairs
    assert fresh.flops["prefix_attention"] == 0
    assert late.flops["prefix_attention"] > 10 * fresh.flops["attention"]
    assert late.flops["gdn"] == fresh.flops["gdn"] > 0  # recurrent cost: per token, not per context
    assert late.flops["matmul"] == fresh.flops["matmul"]
    assert late.bytes > fresh.bytes  # more KV read


def test_attention_split_into_the_chunks_own_pairs_and_its_prefix_prices_as_before():
    """A chunk's attention FLOPs are its causal pairs plus its pairs over the cached prefix; a
    profile with no figure of its own for the prefix (every one written before the split) prices
    it at attention's rate, so its rounds cost what they did."""
    shape = SIM_MODELS["falcon_h1-1.5b"]
    chunks = [ChunkShape(512, 32, True, restores=True, snapshots=1), ChunkShape(0, 544, True, snapshots=1)]
    work = round_work(shape, chunks)
    attention = [m for m in shape.mixers if m.kind == "attention"]
    total = sum(m.mix_flops(c) for m in attention for c in chunks)
    assert work.flops["attention"] + work.flops["prefix_attention"] == pytest.approx(total, rel=1e-15)
    assert work.flops["prefix_attention"] == sum(4.0 * m.heads * m.head_dim * 32 * 512 for m in attention)
    old = HardwareProfile("old", 1e11, None, 0.01, 0.001, kind_scale={"attention": 3.0, "mamba2": 20.0})
    assert old.seconds_per_flop("prefix_attention") == old.seconds_per_flop("attention")
    as_before = sum(work.flops[t] * old.seconds_per_flop(t) for t in ("matmul", "mamba2", "lm_head"))
    as_before += total * old.seconds_per_flop("attention")
    terms = CostModel(shape, old).breakdown(chunks).terms
    fixed = sum(t.seconds for name, t in terms.items() if name not in COMPUTE_TERMS)
    assert CostModel(shape, old).round_seconds(chunks) == pytest.approx(fixed + as_before, rel=1e-12)
    gathered = replace(old, prefix_kv_s=1e-9)
    extra = CostModel(shape, gathered).round_seconds(chunks) - CostModel(shape, old).round_seconds(chunks)
    assert extra == pytest.approx(1e-9 * shape.kv_bytes_per_token(1) * 512)  # 512 cached tokens read
    assert CostModel(shape, gathered).breakdown(chunks).terms["prefix_kv"].seconds == pytest.approx(extra)
    scales = {"attention": 3.0, "prefix_attention": 1.0}
    split = HardwareProfile("new", 1e11, None, 0.01, 0.001, kind_scale=scales)
    assert split.seconds_per_flop("prefix_attention") == pytest.approx(split.seconds_per_flop("matmul"))


def test_state_copies_are_memory_traffic():
    shape = SIM_MODELS["nemotron_h-8b"]
    plain = round_work(shape, [ChunkShape(64, 64, True)])
    copies = round_work(shape, [ChunkShape(64, 64, True, restores=True, snapshots=2)])
    assert copies.bytes - plain.bytes == pytest.approx(3 * shape.state_bytes())


def test_h100_and_h200_share_compute_and_differ_in_memory():
    h100, h200 = HARDWARE["h100"], HARDWARE["h200"]
    assert h100.flops == h200.flops == 989e12
    assert (h100.bandwidth, h200.bandwidth) == (3.35e12, 4.8e12)
    assert h100.layer_overhead_s == h200.layer_overhead_s == 0.0  # no per-layer cost of a call
    assert (h100.round_overhead_s, h100.decode_overhead_s) == (3e-3, 0.4e-3)
    shape = SIM_MODELS["qwen3-4b"]
    small, big = [ChunkShape(0, 16, True)], [ChunkShape(0, 8192, True)]
    h100_model, h200_model = round_cost_model(shape, h100), round_cost_model(shape, h200)
    # a 16-token round reads every weight: memory-bound, faster on the H200's HBM3e
    assert h200_model.round_seconds(small) < h100_model.round_seconds(small)
    # an 8192-token round's GEMMs are compute-bound: measured within a few percent of each other
    matmul = [m.breakdown(big).terms["matmul"].seconds for m in (h100_model, h200_model)]
    assert matmul[0] == pytest.approx(matmul[1], rel=0.1)
    assert h100_model.breakdown(small).terms["fixed"].seconds == pytest.approx(3e-3)


def test_fixed_round_cost_override_replaces_the_per_layer_part():
    cpu = HARDWARE["cpu"]
    fitted = replace(cpu, layer_overhead_s=1e-3)  # a calibrated profile may charge per layer
    shape = SIM_MODELS["qwen3-4b"]
    assert _overhead_s(CostModel(shape, fitted)) == pytest.approx(2e-3 + 36 * 1e-3 + 1e-3)
    hw = fitted.with_fixed_round_cost(0.01)
    assert _overhead_s(CostModel(shape, hw)) == pytest.approx(0.01 + 1e-3)


def _overhead_s(model: CostModel) -> float:
    """A 16-token round's terms not priced by its work: per call, per layer, per sequence."""
    terms = model.breakdown([ChunkShape(0, 16, True)]).terms
    return sum(terms[n].seconds for n in ("fixed", "layers", "sequences") if n in terms)


def test_a_fitted_per_token_pair_cost_makes_a_token_dearer_in_a_larger_round():
    shape = SIM_MODELS["qwen3-4b"]
    plain = CostModel(shape, HARDWARE["cpu"])
    paired = CostModel(shape, replace(HARDWARE["cpu"], token_pair_s=1e-8))
    small, big = [ChunkShape(0, 256, True)], [ChunkShape(0, 256, True)] * 8
    assert "token_pairs" not in plain.breakdown(big).terms  # a profile without the figure: no term
    assert paired.breakdown(big).terms["token_pairs"].seconds == pytest.approx(1e-8 * 2048**2)
    extra = [paired.round_seconds(r) - plain.round_seconds(r) for r in (small, big)]
    assert extra == pytest.approx([1e-8 * 256**2, 1e-8 * 2048**2])  # squared: 64x for 8x the tokens


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_next", "lfm2", "nemotron_h", "falcon_h1", "qwen3"])
def test_shape_from_zoo_config_matches_the_built_model(family):
    zoo_catalogue = pytest.importorskip("radixflow.models.zoo_catalogue")
    zoo_info = pytest.importorskip("radixflow.models.zoo_info")
    name = f"{family}-small"
    shape = shape_from_config(name, zoo_catalogue.preset_config(name))
    info = zoo_info.model_info(name)
    assert shape.total_params() == pytest.approx(info.params, rel=0.01)  # norms/biases not counted
    assert len(shape.layers) == len(info.layers)
    stateful = [any(r in k for r in ("deltanet", "mamba2", "conv")) for k in info.layers]
    assert [layer.has_state for layer in shape.layers] == stateful


def test_a_qwen3_5_multimodal_config_is_costed_as_its_language_model():
    """A Hub Qwen3.5 checkpoint nests the language model under ``text_config`` (the torch loader
    builds that); the torch runner's round predictor reads the same file, and crashed on it."""
    zoo_catalogue = pytest.importorskip("radixflow.models.zoo_catalogue")
    text = zoo_catalogue.preset_config("qwen3_5-small")
    wrapped = {
        "model_type": "qwen3_5",
        "text_config": {**text, "model_type": "qwen3_5_text"},
        "vision_config": {"model_type": "qwen3_5_vision"},
    }
    assert shape_from_config("m", wrapped) == shape_from_config("m", text)


def _moe_checkpoint_config(**text: object) -> dict:
    """A ``config.json`` as transformers writes a Qwen3.5-MoE checkpoint's (``Qwen3_5MoeConfig``):
    the language model's fields under ``text_config``, built from the class's own defaults."""
    transformers = pytest.importorskip("transformers")
    return transformers.Qwen3_5MoeConfig(text_config=text or None).to_dict()


def _same_layers(got, want) -> None:  # type: ignore[no-untyped-def]
    assert len(got.layers) == len(want.layers)
    assert got.layer_kinds == want.layer_kinds  # the DeltaNet/attention pattern
    assert [layer.mixers for layer in got.layers] == [layer.mixers for layer in want.layers]  # KV heads
    assert [layer.mlp for layer in got.layers] == [layer.mlp for layer in want.layers]  # experts, top-k


def test_a_qwen3_5_moe_checkpoint_config_is_costed_as_its_language_model():
    """transformers writes a Qwen3.5-MoE checkpoint as ``model_type: qwen3_5_moe`` with the text
    model under ``text_config``; the reader unwrapped only ``qwen3_5`` and refused it."""
    cfg = _moe_checkpoint_config()
    assert cfg["model_type"] == "qwen3_5_moe"
    assert cfg["text_config"]["model_type"] == "qwen3_5_moe_text"
    shape = shape_from_config("m", cfg)
    _same_layers(shape, SIM_MODELS["qwen3_5-35b-a3b"])  # the catalogue documents those defaults
    assert (shape.hidden, shape.vocab_size) == (2048, 248_320)
    assert shape.max_context == cfg["text_config"]["max_position_embeddings"]


def test_a_qwen3_5_moe_checkpoint_with_the_catalogue_sizes_is_the_catalogue_shape():
    from radixflow.costmodel.shape.sim_catalogue import PUBLIC_CONFIGS

    text = dict(PUBLIC_CONFIGS["qwen3_5-35b-a3b"][0])
    cfg = _moe_checkpoint_config(**text)
    want = SIM_MODELS["qwen3_5-35b-a3b"]
    assert shape_from_config(want.name, cfg, want.source) == want


def test_every_qwen3_5_moe_layer_is_costed_as_moe_whatever_qwen3_next_fields_it_carries():
    """transformers builds a sparse MoE block in every Qwen3.5-MoE decoder layer; it keeps but never
    reads Qwen3-Next's ``mlp_only_layers``/``decoder_sparse_step``, which made layers dense here."""
    cfg = _moe_checkpoint_config(mlp_only_layers=[0], decoder_sparse_step=2, intermediate_size=5632)
    assert cfg["text_config"]["decoder_sparse_step"] == 2  # kept in config.json as written
    _same_layers(shape_from_config("m", cfg), SIM_MODELS["qwen3_5-35b-a3b"])


def test_a_qwen3_5_moe_shape_has_the_weights_transformers_builds():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3_5MoeConfig()
    with torch.device("meta"):  # 35B parameters, none allocated
        model = transformers.Qwen3_5MoeForCausalLM(cfg.text_config)
    params = sum(p.numel() for p in model.parameters())
    shape = shape_from_config("m", cfg.to_dict())
    assert shape.total_params() == pytest.approx(params, rel=1e-3)  # norms and biases are not costed


def test_nnls_recovers_non_negative_coefficients():
    rng = random.Random(0)
    truth = [0.5, 0.0, 2e-9, 3.0]
    rows = [[1.0, rng.random() * 5, rng.random() * 1e9, rng.random()] for _ in range(40)]
    y = [sum(a * b for a, b in zip(r, truth, strict=True)) for r in rows]
    got = nnls(rows, y)
    assert all(g >= 0 for g in got)
    for g, t in zip(got, truth, strict=True):
        assert g == pytest.approx(t, rel=1e-6, abs=1e-9)


def test_nnls_clamps_a_coefficient_that_would_be_negative():
    rows = [[1.0, float(x)] for x in range(10)]
    y = [5.0 - 0.1 * x for x in range(10)]  # best unconstrained slope is negative
    intercept, slope = nnls(rows, y)
    assert slope == 0 and intercept == pytest.approx(sum(y) / len(y), rel=1e-6)


def test_profile_file_round_trip_and_errors(tmp_path):
    path = tmp_path / "p.json"
    save_profile(HARDWARE["h200"], path)
    assert load_profile(path) == HARDWARE["h200"]
    assert resolve_hardware(str(path)).bandwidth == 4.8e12
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "flops": "fast"}))
    with pytest.raises(ProfileError, match="'flops'"):
        load_profile(path)
    path.write_text(json.dumps({**data, "speed": 1}))
    with pytest.raises(ProfileError, match="'speed'"):
        load_profile(path)
    with pytest.raises(ProfileError, match="unknown hardware"):
        resolve_hardware("tpu")


@pytest.mark.parametrize("name", sorted(SIM_MODELS))
def test_round_work_charges_every_layers_weights_and_mixing(name):
    # The per-shape constants `round_work` reads (computed once per shape) are the layers' own
    # figures, summed in layer order: the same FLOPs as walking the layers every round.
    shape = SIM_MODELS[name]
    chunks = [ChunkShape(300, 17, True, restores=True), ChunkShape(0, 1, False, wave=1)]
    matmul, mixing = 0.0, dict.fromkeys(("attention", "prefix_attention", "gdn", "mamba2", "conv"), 0.0)
    for layer in shape.layers:
        for mixer in layer.mixers:
            matmul += 2.0 * mixer.params(shape.hidden) * 18
            prefix = sum(mixer.prefix_flops(c) for c in chunks)  # over the 300 cached tokens
            mixing[mixer.kind] += sum(mixer.mix_flops(c) for c in chunks) - prefix
            mixing["prefix_attention"] += prefix
        if layer.mlp is not None:
            matmul += 2.0 * layer.mlp.active_params(shape.hidden) * 18
    work = round_work(shape, chunks)
    assert work.flops["matmul"] == matmul
    assert {k: work.flops[k] for k in mixing} == mixing
    fewer = replace(shape, layers=shape.layers[:1])  # a copy computes its own constants
    assert fewer.total_params() < shape.total_params() and len(fewer.mixers) < len(shape.mixers)
    assert work.counts["layer"] == shape.decoder_layers + sum(layer.has_state for layer in shape.layers)


@pytest.mark.parametrize("decodes", [1, 8])
def test_the_memory_term_moves_its_bytes_at_the_profiles_bandwidth(decodes):
    """The fitted-rates memory term is the memory time compute does not hide, but it carried the
    round's every byte: `radixflow cost` showed 104.8 GB/s for it on the 20 GB/s CPU profile (8
    decode steps of qwen3_5-2b, where compute hides most of the memory time)."""
    shape, cpu = SIM_MODELS["qwen3_5-2b"], HARDWARE["cpu"]
    chunks = [ChunkShape(256, 1, True)] * decodes
    terms = CostModel(shape, cpu).breakdown(chunks).terms
    memory = terms["memory"]
    assert memory.seconds > 0 and memory.bytes / memory.seconds == pytest.approx(cpu.bandwidth)
    compute = sum(t.seconds for t in terms.values() if t.flops)
    assert memory.seconds == pytest.approx(round_work(shape, chunks, 4).bytes / cpu.bandwidth - compute)


def test_a_round_reads_its_output_head_where_it_computes_logits_and_only_its_embedding_rows():
    """`round_work` counted the whole embedding table as read by every worker call, beside the
    output head: on an untied model the vocabulary's weights twice (17% over the weights a decode
    step of qwen3_5-35b-a3b reads), and the head even in a chunk that computes no logits."""
    shape = SIM_MODELS["falcon_h1-1.5b"]  # untied: its embedding table and output head are two
    table = shape.hidden * shape.vocab_size
    assert not shape.tied_embeddings
    layers = shape.touched_params(1) - 2 * table  # one token: every weight of this dense model

    def weights(chunks):
        kv = shape.kv_bytes_per_token(2) * sum(c.end for c in chunks)
        return round_work(shape, chunks, 2).bytes - kv

    assert weights([ChunkShape(100, 1, True)]) == 2 * (layers + table + shape.hidden)  # head + 1 row
    assert weights([ChunkShape(0, 64, False)]) == 2 * (layers + 64 * shape.hidden)  # no logits, no head


def test_a_round_of_more_tokens_than_the_vocabulary_reads_each_embedding_row_once_at_most():
    """The lookup was charged a row per token, past the whole table where a round's tokens
    outnumber the vocabulary (a small-vocabulary checkpoint costed by the sim)."""
    shape = replace(SIM_MODELS["qwen3-4b"], vocab_size=100)
    more, fewer = shape.read_params(4096, logits=False), shape.read_params(100, logits=False)
    assert more - fewer == shape.touched_params(4096) - shape.touched_params(100)  # no more rows
