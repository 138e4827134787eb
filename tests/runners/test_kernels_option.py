"""The ``kernels`` option through the torch runner: native and eager decode steps give the same
greedy tokens on every family, and without a compiler ``auto`` runs the eager steps with one log
line (no traceback), while ``native`` is refused on ``kernels``."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from engine_utils import new_engine

from radixflow.bench.harness import fresh_copy
from radixflow.models.kernels import backend
from radixflow.models.kernels.native.build import find_compiler
from radixflow.models.zoo import ensure_model
from radixflow.problems import ProblemError
from radixflow.runners.torch_runner import TorchRunner
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.sampling import SamplingParams
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

CFG = SchedulerConfig(token_budget=160, max_requests=8, block_size=16, num_blocks=256, num_state_slots=48)
MODELS = ["qwen3_5-tiny", "qwen3_next-tiny", "lfm2-tiny", "nemotron_h-tiny", "falcon_h1-tiny", "llama-tiny"]


def tiny(tmp_path_factory: pytest.TempPathFactory, name: str):
    return ensure_model(name, cache_dir=tmp_path_factory.getbasetemp() / "zoo")


def workload(vocab: int) -> list[Request]:
    """Candidates sharing prefixes (cache hits, restored states), each decoding 8 greedy tokens
    (batched decode rounds, rows finishing while others go on)."""
    spec = WorkloadSpec(groups=3, candidates=3, context_len=40, candidate_len=10, vocab_size=vocab, seed=1)
    params = SamplingParams(max_tokens=8, ignore_eos=True, logprobs=1)
    return [replace(r, sampling=params) for r in build_workload(spec).requests]


def greedy_outputs(runner: TorchRunner) -> dict[str, tuple[tuple[int, ...], list[float]]]:
    """Every request of the workload run to its end: its tokens and their logprobs."""
    engine = new_engine(runner, CFG)
    engine.run(fresh_copy(workload(runner.model.vocab_size)))
    assert all(r.status is RequestStatus.FINISHED and len(r.output) == 8 for r in engine.requests)
    return {r.id: (tuple(r.output), [lp.logprob for lp in r.output_logprobs]) for r in engine.requests}


@pytest.mark.skipif(find_compiler() is None, reason="no C compiler: the native kernels cannot be built here")
@pytest.mark.parametrize("name", MODELS)
def test_native_and_eager_decode_steps_generate_the_same_tokens(tmp_path_factory, name):
    path = tiny(tmp_path_factory, name)
    native = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots, kernels="native")
    eager = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots, kernels="torch")
    assert (native.kernels.name, eager.kernels.name) == ("native", "torch")
    got, want = greedy_outputs(native), greedy_outputs(eager)
    for rid, (tokens, logprobs) in want.items():
        assert got[rid][0] == tokens, rid
        assert max(abs(a - b) for a, b in zip(got[rid][1], logprobs, strict=True)) < 1e-4, rid


def test_without_a_compiler_the_runner_falls_back_in_one_log_line(tmp_path_factory, monkeypatch, caplog):
    path = tiny(tmp_path_factory, "lfm2-tiny")
    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setattr(backend, "find_compiler", lambda: None)
    with caplog.at_level(logging.WARNING, logger="radixflow.kernels"):
        runner = TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots)
    assert runner.kernels.name == "torch"
    (record,) = caplog.records
    assert "no C compiler" in record.getMessage() and record.exc_info is None
    assert len(greedy_outputs(runner)) == len(workload(runner.model.vocab_size))
    with pytest.raises(ProblemError) as info:
        TorchRunner(path, CFG.block_size, CFG.num_blocks, CFG.num_state_slots, kernels="native")
    assert info.value.problem.param == "kernels" and "no C compiler" in info.value.problem.message
