"""Turning `radixflow bench` flags into a runner choice, a workload and a scheduler config,
and refusing, before any work, what cannot run."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from radixflow.bench.runner_choice import Capacity, RunnerChoice, SimChoice, TorchChoice
from radixflow.cli.bench_flags import DEFAULT_DEVICE, DEFAULT_HARDWARE
from radixflow.cli.command import UsageError
from radixflow.cli.extras import require_torch_extra
from radixflow.costmodel.hardware import ProfileError, resolve_hardware
from radixflow.engine.runner import ModelInfo
from radixflow.runners.sim import HardwareProfile
from radixflow.scheduler.scheduler import SchedulerConfig
from radixflow.workloads.candidates import WorkloadSpec, build_workload
from radixflow.workloads.trace import TraceError, read_trace
from radixflow.workloads.workload import Workload

MEMORY_SHARE = 0.9  # the torch runner's pools may take at most this share of available memory


def hardware(args: argparse.Namespace) -> HardwareProfile:
    try:
        hw = resolve_hardware(args.hardware or DEFAULT_HARDWARE)
    except ProfileError as e:
        raise UsageError(str(e)) from None
    if args.round_overhead_ms is not None:
        hw = hw.with_fixed_round_cost(args.round_overhead_ms / 1e3)
    if args.per_request_ms is not None:
        hw = replace(hw, per_request_s=args.per_request_ms / 1e3)
    if args.tflops is not None:
        hw = replace(hw, flops=args.tflops * 1e12)
    return hw


def torch_choice(args: argparse.Namespace) -> TorchChoice:
    require_torch_extra("--runner torch")
    return TorchChoice(args.model, args.device or DEFAULT_DEVICE)


RUNNERS: dict[str, Callable[[argparse.Namespace], RunnerChoice]] = {
    "sim": lambda args: SimChoice(args.model, hardware(args)),
    "torch": torch_choice,
}


def workload_spec(args: argparse.Namespace, vocab_size: int) -> WorkloadSpec:
    """The generated workload: given flags over `WorkloadSpec`'s defaults."""
    w = WorkloadSpec()
    pick = lambda value, default: default if value is None else value  # noqa: E731
    spec = WorkloadSpec(
        groups=pick(args.groups, w.groups),
        candidates=pick(args.candidates, w.candidates),
        context_len=pick(args.context_len, w.context_len),
        candidate_len=pick(args.candidate_len, w.candidate_len),
        order=pick(args.order, w.order),
        arrival=pick(args.arrival, w.arrival),
        rate=pick(args.rate, w.rate),
        independent=pick(args.independent, w.independent),
        namespaces=pick(args.namespaces, w.namespaces),
        vocab_size=vocab_size,
        seed=pick(args.seed, w.seed),
    )
    try:
        spec.validate()  # sizes are checked here, before a single token is drawn
    except ValueError as e:
        raise UsageError(str(e)) from None
    return spec


def load_workload(args: argparse.Namespace, vocab_size: int) -> tuple[Workload, dict[str, object]]:
    if args.trace is not None:
        try:
            return read_trace(args.trace), {"trace": str(args.trace)}
        except TraceError as e:
            raise UsageError(str(e)) from None
    spec = workload_spec(args, vocab_size)
    return build_workload(spec), spec.to_dict()


def scheduler_config(args: argparse.Namespace, capacity: Capacity | None = None) -> SchedulerConfig:
    default = SchedulerConfig()
    capacity = capacity or Capacity(default.num_blocks, default.num_state_slots)
    sched = SchedulerConfig(
        token_budget=args.token_budget,
        max_requests=args.max_requests,
        block_size=args.block_size,
        num_blocks=args.kv_blocks or capacity.kv_blocks,
        num_state_slots=args.state_slots or capacity.state_slots,
    )
    try:
        sched.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    return sched


def check_generated_fits(args: argparse.Namespace, spec: WorkloadSpec, sched: SchedulerConfig) -> None:
    """Generated prompts all have one length: if one cannot fit the KV cache, none can."""
    blocks = math.ceil(spec.prompt_len / sched.block_size)
    if blocks > sched.num_blocks:
        raise UsageError(
            f"a prompt of {spec.prompt_len} tokens (--context-len + --candidate-len) needs {blocks} KV "
            f"blocks of {sched.block_size} tokens; the cache has {sched.num_blocks} (--kv-blocks)"
        )


def check_generated_context(spec: WorkloadSpec, model: ModelInfo) -> None:
    if spec.prompt_len >= model.max_context:
        raise UsageError(
            f"a prompt of {spec.prompt_len} tokens (--context-len + --candidate-len) does not fit "
            f"{model.name}'s context of {model.max_context} tokens (one more is generated)"
        )


def check_torch_memory(path: Path, device: str, sched: SchedulerConfig) -> None:
    """The torch runner allocates its KV and state pools up front: refuse what memory cannot hold
    (an over-large allocation is a MemoryError, or the OOM killer, not a message)."""
    need = pool_bytes(path, sched)
    have = available_memory() if device == "cpu" else None
    if need is None or have is None or need <= MEMORY_SHARE * have:
        return
    raise UsageError(
        f"the torch runner's cache needs {need / 1e9:.1f} GB ({sched.num_blocks} KV blocks of "
        f"{sched.block_size} tokens, {sched.num_state_slots} state slots) but {have / 1e9:.1f} GB of "
        "memory is available: lower --kv-blocks, --block-size or --state-slots"
    )


def pool_bytes(path: Path, sched: SchedulerConfig) -> int | None:
    """Bytes of the torch runner's float32 KV and state pools for the model at ``path`` (None: unknown)."""
    try:
        import torch

        from radixflow.models.io.loader import read_config
        from radixflow.models.registry import model_class

        config = read_config(path)
        with torch.device("meta"):
            net = model_class(config.model_type)(config)
        # per KV slot: K and V of every attention layer, and the final hidden state kept beside them
        kv = sum(2 * heads * dim for heads, dim in net.kv_layout().values()) + int(config.hidden_size)
        state = sum(math.prod(s) for shapes in net.state_layout().values() for s in shapes)
    except Exception:  # a model that cannot be built on meta: loading it reports the real error
        return None
    return 4 * (kv * sched.block_size * sched.num_blocks + state * sched.num_state_slots)


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
