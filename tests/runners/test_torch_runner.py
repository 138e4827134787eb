"""The real runner under the real scheduler: cached runs equal no-cache runs, token for token."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from engine_utils import Engines, new_engine

from radixflow.bench.harness import fresh_copy, run_policies
from radixflow.models.io.loader import save_model
from radixflow.models.layers import Config
from radixflow.models.registry import FAMILIES
from radixflow.runners.torch_runner import TorchRunner, eos_token_ids
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.samples import Sample
from radixflow.scheduler.sampling import SamplingParams
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

CFG = SchedulerConfig(token_budget=160, max_requests=8, block_size=16, num_blocks=256, num_state_slots=48)


def tiny_checkpoint(tmp_path_factory, model_type: str, presets: str = "PRESETS"):
    module_name, cls_name = FAMILIES[model_type].split(":")
    module = pytest.importorskip(module_name)
    cfg = getattr(module, presets)["tiny"]
    torch.manual_seed(0)
    model = getattr(module, cls_name)(Config(cfg))
    module.init_weights(model, torch.Generator().manual_seed(0))
    path = tmp_path_factory.mktemp(model_type)
    save_model(model, path)
    return path


ALL_CASES = [
    ("lfm2", "PRESETS"),
    ("llama", "PRESETS_LLAMA"),
    ("qwen3_5_text", "PRESETS"),
    ("qwen3_next", "PRESETS"),
    ("nemotron_h", "PRESETS"),
    ("falcon_h1", "PRESETS"),
]
CASES = [c for c in ALL_CASES if importlib.util.find_spec(FAMILIES[c[0]].split(":")[0]) is not None]


def workload(vocab: int) -> list[Request]:
    spec = WorkloadSpec(groups=3, candidates=3, context_len=40, candidate_len=10, vocab_size=vocab, seed=1)
    return build_workload(spec).requests


@pytest.mark.parametrize("model_type, presets", CASES)
def test_policies_agree_with_the_no_cache_reference(tmp_path_factory, model_type, presets):
    path = tiny_checkpoint(tmp_path_factory, model_type, presets)
    runner = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots)
    reqs = workload(runner.model.vocab_size)
    runs = run_policies(reqs, Engines(runner, CFG), ["native", "radixflow"], "branch")
    for run in runs:
        assert run.result.completed == len(reqs)
        assert run.result.agreement == 1.0
    assert runs[0].result.outputs_sha256 == runs[1].result.outputs_sha256
    if runner.model.has_recurrent:
        assert runs[1].result.rounds < runs[0].result.rounds
        assert runs[1].result.reuse_rate == runs[0].result.reuse_rate > 0


def test_chunked_prefill_and_eviction_stay_exact(tmp_path_factory):
    path = tiny_checkpoint(tmp_path_factory, "lfm2")
    tight = SchedulerConfig(token_budget=32, max_requests=4, block_size=16, num_blocks=24, num_state_slots=6)
    runner = TorchRunner(path, tight.block_size, tight.num_blocks, tight.num_state_slots)
    reqs = workload(runner.model.vocab_size)
    reference = runner.reference_tokens(reqs)
    engine = new_engine(runner, tight)
    engine.run(fresh_copy(reqs))
    assert all(r.status is RequestStatus.FINISHED for r in engine.requests)
    assert {r.id: r.output[0] for r in engine.requests} == reference
    assert any(len(rd.chunks) and rd.tokens == 32 for rd in engine.rounds)  # chunking happened


def test_bad_requests_fail_and_others_are_served(tmp_path_factory):
    path = tiny_checkpoint(tmp_path_factory, "lfm2")
    runner = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots)
    vocab, ctx = runner.model.vocab_size, runner.model.max_context
    reqs = [Request("ok", (1, 2, 3)), Request("oov", (1, vocab)), Request("long", (1,) * (ctx + 1))]
    new_engine(runner, CFG).run(reqs)
    assert [r.status for r in reqs] == [RequestStatus.FINISHED, RequestStatus.FAILED, RequestStatus.FAILED]
    assert "vocabulary" in (reqs[1].error or "") and "context" in (reqs[2].error or "")


def test_eos_token_ids_from_config_and_generation_config(tmp_path):
    assert eos_token_ids(tmp_path, Config({"eos_token_id": 2})) == (2,)
    assert eos_token_ids(tmp_path, Config({"eos_token_id": [7, 3, 7]})) == (7, 3)
    assert eos_token_ids(tmp_path, Config({"eos_token_id": None})) == ()
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 11]}))
    assert eos_token_ids(tmp_path, Config({"eos_token_id": 3})) == (3, 11)
    (tmp_path / "generation_config.json").write_text("{not json")
    assert eos_token_ids(tmp_path, Config({"eos_token_id": 3})) == (3,)


def test_the_tokenizers_eos_token_ends_generation_as_in_vllm(tmp_path):
    # a ChatML fine-tune of a base model: config.json still says the base model's EOS (2), the
    # tokenizer's is "<|im_end|>" (32000), with no generation_config.json. vLLM stops at the
    # tokenizer's eos_token; here the reply ran on past it to max_tokens, finish_reason length
    tokenizer = {"added_tokens": [{"id": 32000, "content": "<|im_end|>"}], "model": {"vocab": {"a": 5}}}
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    assert eos_token_ids(tmp_path, Config({"eos_token_id": 2, "vocab_size": 32002})) == (2, 32000)
    # written as an AddedToken, or a token of the model's own vocabulary
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "a"}}))
    assert eos_token_ids(tmp_path, Config({"eos_token_id": 2})) == (2, 5)
    # one the tokenizer does not know, or a tokenizer file that cannot be read, adds nothing
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    assert eos_token_ids(tmp_path, Config({"eos_token_id": 2})) == (2,)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "a"}))
    (tmp_path / "tokenizer.json").write_text("{not json")
    assert eos_token_ids(tmp_path, Config({"eos_token_id": 2})) == (2,)


@pytest.mark.parametrize("name", ["generation_config.json", "tokenizer_config.json", "tokenizer.json"])
def test_a_stop_id_file_nested_too_deeply_only_loses_its_stop_ids(tmp_path, name):
    # json.loads raised RecursionError, which no suppress caught: the runner was never built
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 5}}}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "a"}))
    (tmp_path / name).write_text("[" * 100_000 + "]" * 100_000)
    kept = (2, 5) if name == "generation_config.json" else (2,)  # the tokenizer's "a" is 5
    assert eos_token_ids(tmp_path, Config({"eos_token_id": 2})) == kept


def test_an_unreadable_generation_config_only_loses_its_stop_ids(tmp_path, monkeypatch):
    # a generation_config.json the process may not read (another user's checkpoint, mode 0600)
    # raised PermissionError out of the runner's construction: the model never loaded
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 11]}))

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(type(tmp_path), "read_text", refused)
    assert eos_token_ids(tmp_path, Config({"eos_token_id": 3})) == (3,)


def test_runner_reports_the_checkpoint_eos(tmp_path_factory):
    path = tiny_checkpoint(tmp_path_factory, "lfm2")
    runner = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots)
    assert runner.model.eos_token_ids == (int(runner.net.config.eos_token_id),)


def test_an_eos_id_outside_the_vocabulary_ends_nothing_and_breaks_nothing(tmp_path_factory):
    # a generation_config.json naming an end id the vocabulary lacks (a config from another
    # tokenizer): no such token can be sampled, so it ends nothing; kept, it failed every request
    # held back by min_tokens with an IndexError from the sampler
    path = tiny_checkpoint(tmp_path_factory, "lfm2")
    vocab = int(json.loads((path / "config.json").read_text())["vocab_size"])
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, vocab, vocab + 5]}))
    runner = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots)
    assert vocab not in runner.model.eos_token_ids and vocab + 5 not in runner.model.eos_token_ids
    req = Request("r", (5, 6, 7), sampling=SamplingParams(max_tokens=3, min_tokens=2))
    new_engine(runner, CFG).run([req])
    assert req.status is RequestStatus.FINISHED, req.error
    assert len(req.output) >= 2


# bfloat16 keeps 8 mantissa bits: through a tiny model's layers a greedy token's first logprob
# moved by at most 0.16 from float32's (qwen3_5-tiny, AVX2 kernels) when written; a wrong dtype
# path (a state rounded to bf16 and fed back, a mis-cast pool) moves it by O(1). Only the greedy
# tokens are compared: a lower-ranked token moves further where bf16 flips an MoE router's near-tie.
BF16_LOGPROB_TOL = 0.25
BF16_TOP = 5  # alternatives reported per first token
BF16_MODELS = [f"{f}-tiny" for f in ("qwen3_5", "qwen3_next", "lfm2", "nemotron_h", "falcon_h1", "llama")]


def assert_bf16_matches_f32(f32: Sample, bf16: Sample) -> None:
    """Each run's greedy token has its logprob within `BF16_LOGPROB_TOL` in the other run, so
    bfloat16's token may differ from float32's only where float32 ranks it within 2 * tol of its
    own: a near-tie, which the CPU's bfloat16 kernels (AVX2 or AVX-512, each rounding in its own
    order) may break either way. Where float32's top-1 margin exceeds 2 * tol the tokens agree."""
    in_f32, in_bf16 = dict(f32.top), dict(bf16.top)
    assert f32.token in in_bf16 and bf16.token in in_f32, (f32, bf16)
    assert abs(in_bf16[f32.token] - f32.logprob) <= BF16_LOGPROB_TOL, (f32, bf16)
    assert abs(in_f32[bf16.token] - bf16.logprob) <= BF16_LOGPROB_TOL, (f32, bf16)
    assert in_f32[bf16.token] >= f32.logprob - 2 * BF16_LOGPROB_TOL, (f32, bf16)


@pytest.mark.parametrize("name", BF16_MODELS)
def test_bfloat16_on_a_cpu_runs_and_matches_float32_but_at_near_ties(zoo, name):
    """Every `.to(dtype)` path of the runner (weights, KV pool, float32 recurrent state, logits)
    runs on a CPU in bfloat16: the first greedy token is float32's but at a near-tie, its logprob
    within `BF16_LOGPROB_TOL` (`assert_bf16_matches_f32`), and the recurrent state pool stays
    float32."""
    from radixflow.models.zoo import ensure_model
    from radixflow.scheduler.sampling import SamplingParams

    path = ensure_model(name)
    g = torch.Generator().manual_seed(0)
    prompts = [tuple(torch.randint(3, 200, (17 + 9 * i,), generator=g).tolist()) for i in range(3)]
    cfg = SchedulerConfig(token_budget=64, max_requests=4, num_blocks=32, num_state_slots=16)
    firsts = {}
    for dtype in (torch.float32, torch.bfloat16):
        runner = TorchRunner(path, cfg.block_size, cfg.num_blocks, cfg.num_state_slots, dtype=dtype)
        params = SamplingParams(max_tokens=3, ignore_eos=True, logprobs=BF16_TOP)
        reqs = [Request(f"r{i}", p, sampling=params) for i, p in enumerate(prompts)]
        new_engine(runner, cfg).run(reqs)  # a token budget of 64 chunks the prompts: restores too
        assert all(r.status == RequestStatus.FINISHED and len(r.output) == 3 for r in reqs)
        assert all(t.dtype == torch.float32 for ts in runner.state.tensors.values() for t in ts)
        assert next(runner.net.parameters()).dtype == dtype
        firsts[dtype] = [r.output_logprobs[0] for r in reqs]
    for a, b in zip(firsts[torch.float32], firsts[torch.bfloat16], strict=True):
        assert_bf16_matches_f32(a, b)


@pytest.mark.parametrize("device", ["gpu", "cuda:99"])
def test_a_bad_device_is_one_problem_on_device_before_any_work(tmp_path_factory, device):
    # an unknown device name once reached the kernels' choice first and came out as torch's own
    # RuntimeError ("Expected one of cpu, cuda, ... device type at start of device string")
    from radixflow.problems import ProblemError

    path = tiny_checkpoint(tmp_path_factory, "llama", "PRESETS_LLAMA")
    with pytest.raises(ProblemError) as info:
        TorchRunner(path, 16, 8, 2, device=device, predict_rounds=False)
    assert info.value.problem.param == "device"
    assert repr(device) in info.value.problem.message


def test_a_round_of_no_chunks_computes_nothing_and_fails_nothing(tmp_path_factory):
    # as the sim runner answers it; the forward over zero rows once failed ("max() arg is an
    # empty sequence" from the block tables), and the predictor must not learn from it
    from radixflow.scheduler.output import SchedulerOutput

    runner = TorchRunner(tiny_checkpoint(tmp_path_factory, "lfm2"), 16, 8, 2)
    learned = runner.predictor.fit.rounds
    result = runner.run(SchedulerOutput(round_index=0))
    assert result.samples == {} and result.prompt_logprobs == {}
    assert runner.predictor.fit.rounds == learned


def test_a_runner_computes_on_the_threads_it_was_built_with_whatever_another_set_since(tmp_path_factory):
    # torch's thread count is the process's: a second runner built on other threads (a second LLM
    # with its own torch_threads) once moved the first one's forwards onto them, away from what
    # its matmul plan was measured on and its round profile was keyed by
    from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput

    runner = TorchRunner(tiny_checkpoint(tmp_path_factory, "llama", "PRESETS_LLAMA"), 16, 8, 2)
    built_on = torch.get_num_threads()
    seen = []
    forward = runner.net.forward
    runner.net.forward = lambda fb: (seen.append(torch.get_num_threads()), forward(fb))[1]
    chunk = ScheduledChunk("r", "", (1, 2, 3), 0, 3, (0,), None, (), sample=True)
    try:
        torch.set_num_threads(built_on + 1)  # what building another runner does
        runner.run(SchedulerOutput(round_index=0, chunks=[chunk]))
        runner.reference_logits((1, 2, 3))
        assert seen == [built_on, built_on]
        assert torch.get_num_threads() == built_on + 1  # the other's count, back for its rounds
    finally:
        torch.set_num_threads(built_on)
