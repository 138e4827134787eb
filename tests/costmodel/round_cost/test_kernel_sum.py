"""The GPU cost model (`costmodel.round_cost.kernel_sum`) on the roofline kernels: terms, tensor
parallelism, MoE, fixed costs per call, the scheduler's time and the per-request cost."""

from __future__ import annotations

from dataclasses import replace

import pytest
from engine_utils import new_engine

from radixflow.costmodel.hardware.gpu_figures import DENSE_BF16_FLOPS
from radixflow.costmodel.hardware.profiles import HARDWARE
from radixflow.costmodel.kernel_times.roofline import RooflineKernels
from radixflow.costmodel.round_cost.breakdown import scheduler_s
from radixflow.costmodel.round_cost.by_profile import round_cost_model
from radixflow.costmodel.round_cost.fitted_rates import CostModel, round_work
from radixflow.costmodel.round_cost.kernel_sum import KernelCostModel
from radixflow.costmodel.round_cost.tensor_parallel import MAX_TP, choose_tp, uneven_split
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.mixer_shapes import Attention, GatedDeltaNet, Mamba2
from radixflow.costmodel.shape.model_shape import Layer, Mlp, ModelShape, expected_experts
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.runners.sim import SimRunner, chunk_shape
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.scheduler.output import ScheduledChunk

# the shipped H200 profile times measured kernels; these tests pin the model's structure on the
# roofline kernels, whose figures follow from the shapes alone (the tables:
# tests/costmodel/kernel_times/test_measured.py)
H200 = replace(HARDWARE["h200"], kernels="roofline")
# a round with everything in it: a fresh prefill, one after a cached prefix (state restored, two
# snapshots) and decode steps at two contexts
MIXED = [
    ChunkShape(0, 300, True),
    ChunkShape(1024, 200, True, restores=True, snapshots=2),
    ChunkShape(700, 1, True),
    ChunkShape(1500, 1, True),
]


def _gpu(name: str, hardware=H200) -> KernelCostModel:
    model = round_cost_model(SIM_MODELS[name], hardware)
    assert isinstance(model, KernelCostModel)
    return model


@pytest.mark.parametrize("name", sorted(SIM_MODELS))
def test_terms_sum_to_the_round_the_sim_charges_and_each_names_its_source(name):
    model = _gpu(name)
    cost = model.breakdown(MIXED)
    assert cost.seconds == pytest.approx(sum(t.seconds for t in cost.terms.values()))
    assert all(t.source and t.seconds >= 0 for t in cost.terms.values())
    kernels = {k: t for k, t in cost.terms.items() if k not in ("fixed", "scheduler")}
    assert all(t.source.startswith("roofline: ") for t in kernels.values()), kernels
    runner = SimRunner(SIM_MODELS[name], H200)
    assert model.round_seconds(MIXED) == runner.cost.round_seconds(MIXED)


def test_the_work_is_split_into_the_kernel_terms_of_each_layer_kind():
    assert {"matmul", "attention", "gdn", "lm_head", "state_copy"} <= set(
        _gpu("qwen3_5-2b").breakdown(MIXED).terms
    )
    assert "mamba2" in _gpu("nemotron_h-8b").breakdown(MIXED).terms
    assert "conv" in _gpu("lfm2-1.2b").breakdown(MIXED).terms
    assert "moe" in _gpu("qwen3_5-35b-a3b").breakdown(MIXED).terms
    control = _gpu("qwen3-4b").breakdown(MIXED).terms
    assert "state_copy" not in control and "gdn" not in control  # no recurrent state to copy


def test_a_long_prefill_runs_its_gemms_below_peak():
    cost = _gpu("qwen3_5-2b").breakdown([ChunkShape(0, 8192, True)])
    matmul = cost.terms["matmul"]
    assert matmul.flops / matmul.seconds <= 0.9 * DENSE_BF16_FLOPS
    # ...and a one-token decode step reads every weight: bound by memory, not FLOPs
    decode = _gpu("qwen3_5-2b").breakdown([ChunkShape(100, 1, True)]).terms["matmul"]
    assert decode.seconds == pytest.approx(decode.bytes / H200.bandwidth)


def test_decode_attention_is_one_batched_call_at_the_mean_context():
    model = _gpu("qwen3-4b")
    pair = model.breakdown([ChunkShape(1000, 1, True), ChunkShape(3000, 1, True)]).terms["attention"]
    even = model.breakdown([ChunkShape(2000, 1, True)] * 2).terms["attention"]
    assert pair.seconds == pytest.approx(even.seconds) and pair.bytes == even.bytes


def test_acceptance_figures_of_the_roofline_on_h200():
    prefill = _gpu("qwen3-4b").round_seconds([ChunkShape(0, 512, True)])
    decode = _gpu("qwen3-4b").round_seconds([ChunkShape(2048, 1, True)])
    assert 5e-3 <= prefill <= 30e-3 and 1.5e-3 <= decode <= 6e-3


# ------------------------------------------------------------------ tensor parallelism
def test_tp_is_the_smallest_power_of_two_that_holds_weights_and_a_minimum_pool():
    assert _gpu("qwen3_5-2b").tp == 1
    assert _gpu("qwen3_next-80b-a3b").tp == 2  # 160 GB of bf16 weights on 141 GB GPUs
    assert _gpu("qwen3_next-80b-a3b", HARDWARE["h100"]).tp == 4  # 80 GB GPUs
    shape = SIM_MODELS["qwen3_next-80b-a3b"]
    chosen = choose_tp(shape, 141e9, 2)
    assert chosen.fits and chosen.need_bytes / chosen.tp <= 0.9 * 141e9 < chosen.need_bytes / (chosen.tp / 2)


def test_tp_without_a_memory_figure_is_one_and_a_model_too_large_for_max_tp_says_so():
    assert _gpu("qwen3_next-80b-a3b", replace(H200, memory_bytes=None)).tp == 1
    tiny = choose_tp(SIM_MODELS["qwen3_next-80b-a3b"], 1e9, 2)
    assert (tiny.tp, tiny.fits) == (MAX_TP, False)


def test_the_catalogues_tensor_parallel_shapes_split_their_heads_evenly():
    for name in ("qwen3_next-80b-a3b", "qwen3_5-35b-a3b"):
        assert uneven_split(SIM_MODELS[name], 4) is None


@pytest.mark.parametrize(
    ("mixer", "tp", "why"),
    [
        (Attention(40, 8, 128), 1, None),
        (Attention(40, 8, 128), 8, None),
        (Attention(32, 2, 128), 8, None),  # each GPU holds a copy of one KV head
        (Attention(40, 8, 128), 16, "attention heads 40"),
        (Attention(48, 12, 128), 16, "attention kv_heads 12"),
        (GatedDeltaNet(6, 12, 128, 128), 4, "gdn k_heads 6"),
        (Mamba2(24, 64, 128, 1), 16, "mamba2 heads 24"),
    ],
)
def test_a_tp_that_splits_no_heads_evenly_is_named(mixer, tp, why):
    """The cost model prices any power-of-two tp at each GPU's rounded-up share of heads (40 query
    heads on 16 GPUs as 3 each), a split vLLM refuses, without a word."""
    shape = ModelShape("m", 1024, 1000, (Layer((mixer,), Mlp(512)),))
    want = None if why is None else f"layer 0's {why} do not split over {tp} GPUs"
    assert uneven_split(shape, tp) == want


def test_tensor_parallel_rounds_pay_two_all_reduces_per_layer_and_split_the_weights():
    model = _gpu("qwen3_next-80b-a3b")
    cost = model.breakdown([ChunkShape(0, 512, True)])
    layers = len(SIM_MODELS["qwen3_next-80b-a3b"].layers)
    one = model.kernels.allreduce(512 * 2048 * 2, 2)
    assert cost.terms["allreduce"].seconds == pytest.approx(2 * layers * one.seconds)
    assert "allreduce" not in _gpu("qwen3_5-2b").breakdown([ChunkShape(0, 512, True)]).terms
    # one GPU reads its half of the weights (activations and the replicated router in full)
    single = KernelCostModel(model.shape, H200, RooflineKernels("x", 989e12, 4.8e12, float("inf")))
    assert single.tp == 1
    split, whole = (
        cost.terms["matmul"].bytes,
        single.breakdown([ChunkShape(0, 512, True)]).terms["matmul"].bytes,
    )
    assert whole / 2 < split < 0.6 * whole


# ------------------------------------------------------------------ MoE
def test_moe_touches_top_k_experts_for_one_token_and_all_for_many():
    assert expected_experts(512, 10, 1) == pytest.approx(10)
    assert expected_experts(512, 10, 4096) == pytest.approx(512)
    assert expected_experts(512, 10, 8) < 80  # some of the 8 tokens share experts
    assert expected_experts(0, 0, 100) == 0.0


def test_latent_experts_are_costed_in_their_latent_width():
    """Nemotron-H's ``moe_latent_size`` experts hold latent x intermediate matrices, a quarter of
    the hidden-width ones here: the moe term read and multiplied them at the hidden width. They
    cost what the same experts cost in a model as wide as the latent."""

    def moe_term(hidden: int, latent: int):  # type: ignore[no-untyped-def]
        mlp = Mlp(1024, gated=False, experts=64, top_k=4, latent=latent)
        shape = ModelShape("m", hidden=hidden, vocab_size=1000, layers=(Layer((), mlp),))
        return round_cost_model(shape, H200).breakdown([ChunkShape(0, 4096, True)]).terms["moe"]

    latent, plain = moe_term(4096, latent=1024), moe_term(1024, latent=0)
    assert (latent.flops, latent.bytes) == (plain.flops, plain.bytes)


def test_moe_rounds_read_the_weights_of_the_experts_they_touch():
    model = _gpu("qwen3_5-35b-a3b")
    one = model.breakdown([ChunkShape(100, 1, True)]).terms["moe"]
    many = model.breakdown([ChunkShape(0, 4096, True)]).terms["moe"]
    mlp = next(layer.mlp for layer in model.shape.layers if layer.mlp and layer.mlp.experts)
    per_expert = mlp.expert_params(model.shape.hidden) * 2
    moe_layers = sum(1 for layer in model.shape.layers if layer.mlp and layer.mlp.experts)
    assert one.bytes < 1.01 * moe_layers * mlp.top_k * per_expert + 1e6
    assert many.bytes > 0.99 * moe_layers * mlp.experts * per_expert
    # the fitted-rate path reads the same experts
    shape = model.shape
    small, large = (
        round_work(shape, [ChunkShape(100, 1, True)]),
        round_work(shape, [ChunkShape(0, 4096, True)]),
    )
    assert small.bytes < 0.2 * large.bytes
    # every weight but the embedding table, of which the 4096 rows looked up (this model is untied)
    table, rows = shape.hidden * shape.vocab_size, shape.hidden * 4096
    assert large.bytes == pytest.approx(
        (shape.total_params() - table + rows) * 2 + shape.kv_bytes_per_token(2) * 4096, rel=1e-3
    )


# ------------------------------------------------------------------ fixed costs
def _nemotron_merged() -> ModelShape:
    """Nemotron-H with each MLP-only block folded into the mixer block before it."""
    shape, layers = SIM_MODELS["nemotron_h-8b"], []
    for layer in shape.layers:
        if not layer.mixers and layers and layers[-1].mlp is None:
            layers[-1] = Layer(layers[-1].mixers, layer.mlp)
        else:
            layers.append(layer)
    return replace(shape, layers=tuple(layers))


def test_how_blocks_are_labelled_does_not_change_a_round():
    blocks, merged = SIM_MODELS["nemotron_h-8b"], _nemotron_merged()
    assert (
        len(blocks.layers) == 52
        and len(merged.layers) == blocks.decoder_layers == merged.decoder_layers == 28
    )
    for hardware in (H200, replace(HARDWARE["cpu"], layer_overhead_s=1e-3)):
        a, b = round_cost_model(blocks, hardware), round_cost_model(merged, hardware)
        assert a.breakdown(MIXED).terms.keys() == b.breakdown(MIXED).terms.keys()
        assert a.round_seconds(MIXED) == pytest.approx(b.round_seconds(MIXED))


def test_the_fixed_cost_of_a_call_is_per_call_not_per_layer():
    fixed = {
        name: _gpu(name).breakdown([ChunkShape(0, 64, True)]).terms["fixed"].seconds for name in SIM_MODELS
    }
    assert set(fixed.values()) == {3e-3}


def test_decode_only_rounds_pay_the_decode_fixed_cost_and_mixed_rounds_the_prefill_one():
    model = _gpu("qwen3_5-2b")
    decode = [ChunkShape(500, 1, True), ChunkShape(900, 1, True)]
    assert model.breakdown(decode).terms["fixed"].seconds == pytest.approx(0.4e-3)
    assert model.breakdown([*decode, ChunkShape(0, 64, True)]).terms["fixed"].seconds == pytest.approx(3e-3)
    assert "decode" in model.breakdown(decode).terms["fixed"].source
    # a profile without a decode figure charges its one fixed cost to every call
    cpu = CostModel(SIM_MODELS["qwen3_5-2b"], HARDWARE["cpu"])
    assert cpu.breakdown(decode).terms["fixed"].seconds == HARDWARE["cpu"].round_overhead_s


def test_the_fixed_cost_override_sets_calls_with_prefill_and_keeps_the_decode_figure():
    hw = H200.with_fixed_round_cost(10e-3)
    model = round_cost_model(SIM_MODELS["qwen3_5-2b"], hw)
    assert model.breakdown([ChunkShape(0, 64, True)]).terms["fixed"].seconds == 10e-3
    assert model.breakdown([ChunkShape(64, 1, True)]).terms["fixed"].seconds == 0.4e-3


# ------------------------------------------------------------------ prompt logprobs
def test_prompt_logprobs_pay_the_output_head_at_every_position():
    model = _gpu("qwen3_5-2b")
    plain = model.breakdown([ChunkShape(0, 512, True)])
    scored = model.breakdown([ChunkShape(0, 512, True, head_rows=511)])
    head, scored_head = plain.terms["lm_head"], scored.terms["lm_head"]
    assert scored_head.flops == pytest.approx(512 * head.flops)
    assert scored.seconds > plain.seconds
    work = round_work(model.shape, [ChunkShape(0, 512, True, head_rows=511)])
    assert work.flops["lm_head"] == 2 * 512 * model.shape.hidden * model.shape.vocab_size


@pytest.mark.parametrize(
    ("start", "end", "reported_from", "rows"), [(0, 64, 1, 63), (32, 64, 1, 63), (32, 64, 40, 24)]
)
def test_the_sim_counts_the_head_rows_of_a_prompt_logprob_chunk(start, end, reported_from, rows):
    chunk = ScheduledChunk(
        "r", "n", tuple(range(end)), start, end, (), None, (), True, prompt_logprobs_from=reported_from
    )
    assert chunk_shape(chunk).head_rows == rows
    assert chunk_shape(replace(chunk, prompt_logprobs_from=None)).head_rows == 0


# ------------------------------------------------------------------ scheduler time
def test_scheduler_time_is_hidden_by_a_longer_call_when_overlapped_and_added_when_serial():
    chunks = [ChunkShape(0, 16, True)] * 40  # 40 admissions: 2.1 ms of scheduling
    overlap = _gpu("qwen3_5-2b", replace(H200, round_overhead_s=0.0))
    serial = _gpu("qwen3_5-2b", replace(H200, round_overhead_s=0.0, scheduler_overlap=False))
    spent = scheduler_s(H200, chunks)
    assert spent == pytest.approx(0.1e-3 + 40 * 50e-6)
    call = serial.breakdown(chunks).worker_call_s
    assert call == overlap.breakdown(chunks).worker_call_s
    assert serial.round_seconds(chunks) == pytest.approx(call + spent)
    assert overlap.round_seconds(chunks) == pytest.approx(max(call, spent))
    long = [ChunkShape(0, 4096, True)]  # a long call hides all of it
    assert overlap.breakdown(long).terms["scheduler"].seconds == 0.0
    assert serial.breakdown(long).terms["scheduler"].seconds == pytest.approx(scheduler_s(H200, long))


def test_decode_steps_cost_the_scheduler_its_per_round_time_only():
    assert scheduler_s(H200, [ChunkShape(100, 1, True)] * 64) == pytest.approx(0.1e-3)


def test_the_sim_round_is_worker_call_plus_the_scheduler_time_it_shows():
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], replace(H200, scheduler_overlap=False))
    engine = new_engine(runner, SchedulerConfig(token_budget=256, block_size=16))
    engine.run([Request(f"r{i}", tuple(range(i, i + 40))) for i in range(3)])
    record = engine.rounds[0]
    assert record.duration_s == pytest.approx(record.worker_call_s + 0.1e-3 + 3 * 50e-6)


# ------------------------------------------------------------------ per-request cost
def test_the_request_cost_is_in_each_latency_and_in_no_round():
    def run(ms: float) -> tuple[list[float], list[float]]:
        runner = SimRunner(SIM_MODELS["qwen3_5-2b"], replace(H200, request_overhead_s=ms / 1e3))
        engine = new_engine(runner, SchedulerConfig(token_budget=4096, block_size=16))
        reqs = [Request(f"r{i}", tuple(range(i, i + 100)), arrival_s=0.5 * i) for i in range(3)]
        engine.run(reqs)
        return [r.duration_s for r in engine.rounds], [r.latency_s for r in reqs]

    (rounds0, latency0), (rounds5, latency5) = run(0.0), run(5.0)
    assert rounds0 == rounds5  # the same rounds, each as long
    assert latency5 == pytest.approx([x + 5e-3 for x in latency0])


# ------------------------------------------------------------------ roofline kernels
ROOF = RooflineKernels("h200", 989e12, 4.8e12, 141e9)


def test_a_roofline_kernel_takes_the_longer_of_its_flops_and_its_bytes():
    big = ROOF.gemm(8192, 4096, 4096)
    assert big.seconds == pytest.approx(big.flops / (0.8 * 989e12)) and big.seconds > big.bytes / 4.8e12
    small = ROOF.gemm(1, 4096, 4096)
    assert small.seconds == pytest.approx(small.bytes / 4.8e12) and small.bytes >= 2 * 4096 * 4096
    decode = ROOF.decode_attention(8, 4096, 32, 8, 128)
    assert decode.seconds == pytest.approx(decode.bytes / 4.8e12)  # KV reads bind
    assert decode.bytes >= 8 * 4096 * 2 * 8 * 128 * 2


def test_causal_prefill_attention_counts_the_keys_each_query_sees():
    fresh = ROOF.prefill_attention(4, 4, 1, 1, 1)
    assert fresh.flops == 4.0 * (1 + 2 + 3 + 4)
    after = ROOF.prefill_attention(2, 10, 1, 1, 1)  # positions 8 and 9 see 9 and 10 keys
    assert after.flops == 4.0 * (9 + 10)


def test_an_all_reduce_on_one_gpu_is_free_and_grows_with_the_message():
    assert ROOF.allreduce(1 << 20, 1).seconds == 0.0
    small, large = ROOF.allreduce(1 << 10, 2), ROOF.allreduce(1 << 30, 2)
    assert 0 < small.seconds < large.seconds and large.bytes == pytest.approx(1 << 30)


def test_a_profile_without_bandwidth_or_memory_has_no_memory_time_and_one_gpu():
    kernels = RooflineKernels.from_profile(replace(H200, bandwidth=None, memory_bytes=None))
    assert kernels.gemm(1, 4096, 4096).seconds == pytest.approx(2 * 4096 * 4096 / (0.8 * 989e12))
    assert choose_tp(SIM_MODELS["qwen3_next-80b-a3b"], kernels.memory_bytes, 2).tp == 1


def test_a_profile_names_its_kernel_source_or_is_costed_by_fitted_rates():
    assert isinstance(round_cost_model(SIM_MODELS["qwen3-4b"], H200), KernelCostModel)
    assert isinstance(round_cost_model(SIM_MODELS["qwen3-4b"], HARDWARE["cpu"]), CostModel)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_shipped_gpu_profiles_time_measured_kernels_and_label_every_roofline(gpu):
    for name in ("qwen3_5-2b", "nemotron_h-8b", "lfm2-1.2b", "qwen3_next-80b-a3b"):
        terms = round_cost_model(SIM_MODELS[name], HARDWARE[gpu]).breakdown(MIXED).terms
        for term, cost in terms.items():
            if term in ("fixed", "scheduler", "state_copy"):
                continue
            # a measured table, or a roofline that says no measurement exists
            parts = cost.source.split("; ")
            assert all(p.startswith(("measured: ", "roofline: no ")) for p in parts), (
                name,
                term,
                cost.source,
            )
    assert "measured: " in terms["matmul"].source


def test_a_summed_term_names_each_source_once_however_many_calls():
    terms = round_cost_model(SIM_MODELS["qwen3-4b"], HARDWARE["h200"]).breakdown(MIXED).terms
    assert all(len(t.source) < 2000 for t in terms.values())  # 36 layers of 4 GEMMs, not 144 names


def test_a_rounds_prefill_chunks_are_one_batched_call():
    model = round_cost_model(SIM_MODELS["qwen3_5-2b"], HARDWARE["h200"])
    one = model.breakdown([ChunkShape(0, 2048, True)]).terms["gdn"].seconds
    four = model.breakdown([ChunkShape(0, 2048, True)] * 4).terms["gdn"].seconds
    # four sequences run side by side: far less than four times one (the measured batch efficiency)
    assert one < four < 3 * one


# ------------------------------------------------------------------ waves
@pytest.mark.parametrize("name", ["qwen3_5-2b", "nemotron_h-8b", "lfm2-1.2b", "falcon_h1-1.5b"])
def test_a_follower_pays_a_second_call_of_each_recurrent_kernel_and_nothing_more(name):
    """A consumer following its producer within the round (wave 1) runs every recurrent layer's
    kernels a second time, on its own rows: the round costs more than the same chunks in one wave,
    by recurrent terms only, and less than a round of its own."""
    model = _gpu(name, HARDWARE["h200"])
    producer = ChunkShape(0, 1088, True, snapshots=1)
    follower = ChunkShape(1024, 64, True, restores=True)
    one = model.breakdown([producer, follower]).terms
    two = model.breakdown([producer, replace(follower, wave=1)]).terms
    changed = {k for k in one.keys() | two.keys() if k not in one or k not in two or one[k] != two[k]}
    recurrent = {"gdn", "mamba2", "conv"}
    assert changed and changed <= recurrent
    assert sum(two[k].seconds for k in changed) > sum(one[k].seconds for k in changed)
    together = model.round_seconds([producer, replace(follower, wave=1)])
    apart = model.round_seconds([producer]) + model.round_seconds([follower])
    assert together < apart


def test_a_one_token_follower_is_costed_as_a_prefill_row_not_a_decode_step():
    model = _gpu("qwen3_5-2b", HARDWARE["h200"])
    producer = ChunkShape(0, 1025, False, snapshots=1)
    follower = ChunkShape(1024, 1, True, restores=True, wave=1)
    terms = model.breakdown([producer, follower]).terms
    assert "decode" not in terms["fixed"].source  # a call with prefill
    alone = model.breakdown([producer]).terms
    assert terms["gdn"].seconds > alone["gdn"].seconds


@pytest.mark.parametrize("name", ["qwen3_5-2b", "nemotron_h-8b", "lfm2-1.2b", "falcon_h1-1.5b"])
def test_a_one_token_producer_keeps_its_recurrent_kernels_when_its_follower_runs_in_wave_1(name):
    """A producer whose chunk is one token (a decode-length row in wave 0) and a follower in wave
    1: the recurrent layers ran the follower's wave alone, the producer's step never charged."""
    model = _gpu(name, HARDWARE["h200"])
    producer = ChunkShape(100, 1, True, snapshots=1)
    follower = ChunkShape(101, 32, True, restores=True, wave=1)
    both = model.breakdown([producer, follower]).terms
    alone = model.breakdown([follower]).terms
    step = model.breakdown([producer]).terms
    for kind in {"gdn", "mamba2", "conv"} & step.keys():
        assert both[kind].seconds == pytest.approx(alone[kind].seconds + step[kind].seconds)


def test_a_round_with_a_one_token_follower_is_a_call_with_prefill_however_short_its_rows():
    """Every row one token long, but one follows another in wave 1: the kernels ran it as a
    prefill row, while the fixed cost was a decode-only call's (0.4 ms against 3 ms)."""
    rows = [ChunkShape(100, 1, True, snapshots=1), ChunkShape(101, 1, True, restores=True, wave=1)]
    for model in (_gpu("qwen3_5-2b", HARDWARE["h200"]), CostModel(SIM_MODELS["qwen3_5-2b"], HARDWARE["cpu"])):
        fixed = model.breakdown(rows).terms["fixed"]
        assert fixed.seconds == model.hardware.round_overhead_s and "decode" not in fixed.source
    steps = [ChunkShape(100, 1, True), ChunkShape(200, 1, True)]  # decode steps alone: a decode-only call
    assert _gpu("qwen3_5-2b", HARDWARE["h200"]).breakdown(steps).terms["fixed"].seconds == 0.4e-3


def test_the_fitted_model_charges_a_later_wave_the_layer_overhead_of_each_recurrent_layer():
    shape = SIM_MODELS["qwen3_5-2b"]
    hw = replace(HARDWARE["cpu"], layer_overhead_s=1e-4)
    model = CostModel(shape, hw)
    chunks = [ChunkShape(0, 64, True, snapshots=1), ChunkShape(48, 16, True, restores=True)]
    waved = [chunks[0], replace(chunks[1], wave=1)]
    recurrent = sum(layer.has_state for layer in shape.layers)
    assert 0 < recurrent < len(shape.layers)
    extra = model.breakdown(waved).terms["layers"].seconds - model.breakdown(chunks).terms["layers"].seconds
    assert extra == pytest.approx(recurrent * 1e-4)
    assert round_work(shape, waved).counts["layer"] == shape.decoder_layers + recurrent


def test_the_sim_puts_a_chunk_restoring_a_slot_saved_earlier_in_its_round_in_the_next_wave():
    from radixflow.runners.sim import chunk_shapes
    from radixflow.scheduler.output import SnapshotSpec

    def chunk(rid: str, start: int, end: int, restore: int | None, saves: tuple[int, ...]) -> ScheduledChunk:
        snaps = tuple(SnapshotSpec(end, s) for s in saves)
        return ScheduledChunk(rid, "", tuple(range(end)), start, end, (), restore, snaps, True)

    chunks = [
        chunk("p", 0, 64, None, (1,)),
        chunk("ready", 32, 64, 7, ()),  # restores a slot saved in an earlier round
        chunk("f", 64, 80, 1, (2,)),
        chunk("ff", 80, 96, 2, ()),
    ]
    assert [c.wave for c in chunk_shapes(chunks)] == [0, 0, 1, 2]
