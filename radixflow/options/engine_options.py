"""`EngineOptions`: everything that says how an engine is built, declared once.

Each field carries its `OptionSpec` (help, limits, choices) in its metadata, so the command-line
flags (`radixflow.options.flags`), the mapping form used by TOML cells and `radixflow.LLM(**kwargs)`
(`from_mapping`) and the one `validate()` all read the same declaration: an option added here
appears at every door with the same default, help and error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from radixflow.cache.eviction import EVICTION_POLICIES
from radixflow.costmodel.hardware.profile_checks import MAX_FLOPS, MAX_OVERHEAD_S, ProfileError
from radixflow.costmodel.hardware.profile_files import resolve_hardware
from radixflow.costmodel.hardware.profiles import SCHEDULER_MODES
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.engine.clocks import ROUND_CLOCKS
from radixflow.options.machine import bookkeeping_problem, output_problem, threads_problem
from radixflow.options.sizes import size_problem
from radixflow.options.spec import checked, fields_problem, option
from radixflow.options.spec import spec_of as spec_of  # where the flags and tests read it
from radixflow.problems import Problem, ProblemError
from radixflow.runners.matmul_plan import plan_problem
from radixflow.scheduler.admission import ADMISSIONS
from radixflow.scheduler.config import SchedulerConfig, budget_problem
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES
from radixflow.user_paths import expand_home

# Cache capacities: every block and slot is bookkept in Python and, on the torch runner, allocated
# as real tensors up front (the torch pools are checked against memory when the model is known).
MAX_KV_BLOCKS = 1 << 22
MAX_STATE_SLOTS = 1 << 20
MAX_BLOCK_SIZE = 1 << 16
MAX_COUNT = 1 << 31  # token budget and requests per round: plain counters, no allocation
MAX_COST_MS = MAX_OVERHEAD_S * 1e3  # what a hardware profile may hold, in ms
TFLOPS_RANGE = (1e-3, MAX_FLOPS / 1e12)  # 1 GFLOP/s (a slow CPU) up to the profiles' limit
MAX_SEED = 2**64 - 1
RUNNERS = ("sim", "torch")
DTYPES = ("auto", "float32", "bfloat16", "float16")  # resolved per device: models/device.py
KERNELS = ("auto", "native", "torch")  # resolved per device and dtype: models/kernels/backend.py
PATH_OPTIONS = ("hardware", "trace_out")  # options that may name a file (`expand_home`)


def _scheduler_default(name: str) -> Any:
    """The default `SchedulerConfig` declares for ``name``: the round budgets are declared there
    (the scheduler owns them) and read here, so each has one declaration."""
    return {f.name: f.default for f in dataclasses.fields(SchedulerConfig)}[name]


def _names(registry: Mapping[str, object]) -> Callable[[], list[str]]:
    return lambda: sorted(registry)


@dataclass(frozen=True)
class EngineOptions:
    model: str | None = option(
        None,
        f"a sim shape ({', '.join(SIM_MODELS)}), a zoo model (see `radixflow models`) or a "
        "checkpoint directory; the sim runner costs any of them by its config, no weights read "
        "(default: qwen3_5-2b on the sim runner, qwen3_5-small on torch)",
        str,
        group="model",
        metavar="MODEL",
    )
    runner: str | None = option(
        None,
        "sim: the cost model; torch: real forward passes (default: sim for a sim shape, else torch)",
        str,
        choices=lambda: list(RUNNERS),
        group="model",
    )
    device: str = option("cpu", "torch runner device, e.g. cpu or cuda", str, group="model")
    torch_threads: int | None = option(
        None,
        "torch intra-op threads, at most this machine's CPUs (default: torch's; serve and run-batch: "
        "the server's thread plan, one CPU left to the HTTP side per 8; serve --replicas: 1 per replica; "
        "calibrate: 1)",
        int,
        low=1,
        group="model",
        metavar="N",
    )
    dtype: str = option(
        "auto",
        "torch runner weight and activation dtype: auto (float32 on a CPU, bfloat16 on CUDA where "
        "supported, else float16), float32, bfloat16 (on a CPU too: slower, logprobs ~0.1 off "
        "float32) or float16 (CUDA only); only float32 reproduces a no-cache run exactly",
        str,
        choices=lambda: list(DTYPES),
        group="model",
    )
    matmul: str = option(
        "auto",
        "torch runner on a CPU in float32 (a plan is refused elsewhere): the matmul library per shape "
        "class: auto (measured at startup), mkl, onednn, native (the native kernels' few-row product), "
        "or class=library pairs for the classes single, decode and prefill",
        str,
        group="model",
        metavar="PLAN",
    )
    kernels: str = option(
        "auto",
        "torch runner: what runs the decode steps that are not GEMMs (recurrent state steps, decode "
        "attention): native (C kernels built at first use with the system compiler; CPU float32 "
        "only), torch (eager ops), or auto (native where it runs and builds, else torch)",
        str,
        choices=lambda: list(KERNELS),
        group="model",
    )
    clock: str = option(
        "wall",
        "torch runner: what a round advances the engine clock (latencies, makespan) by: wall (its "
        "wall time) or cpu (the CPU time of the thread running it, so other load on the machine "
        "does not move the figures; wall time is reported beside)",
        str,
        choices=lambda: list(ROUND_CLOCKS),
        group="model",
    )
    seed: int = option(
        0,
        "random seed: of the sampler, for requests without a seed of their own (bench: "
        "also of a generated workload's token ids and arrivals; generate: also each prompt's own seed)",
        int,
        low=0,
        high=MAX_SEED,
        group="model",
        metavar="N",
    )
    policy: str = option(
        "adaptive", "scheduling policy", str, choices=_names(SCHEDULING_POLICIES), group="scheduler"
    )
    placement: str | None = option(
        None,
        "where recurrent-state checkpoints go (default: the policy's own: lone for adaptive, branch "
        "for native and radixflow)",
        str,
        choices=_names(PLACEMENTS),
        group="scheduler",
    )
    eviction: str = option(
        "lru",
        "which cached entry is evicted first",
        str,
        choices=_names(EVICTION_POLICIES),
        group="scheduler",
    )
    admission: str = option(
        "all",
        "which wanted checkpoints may evict cached ones when state slots are short (likely: only "
        "where reuse is likely)",
        str,
        choices=_names(ADMISSIONS),
        group="scheduler",
    )
    token_budget: int = option(
        _scheduler_default("token_budget"),
        "prompt tokens computed per round (at least one block)",
        int,
        low=1,
        high=MAX_COUNT,
        group="scheduler",
        metavar="N",
    )
    max_requests: int = option(
        _scheduler_default("max_requests"),
        "chunks per round", int, low=1, high=MAX_COUNT, group="scheduler", metavar="N"
    )
    block_size: int = option(
        _scheduler_default("block_size"),
        "tokens per KV block", int, low=1, high=MAX_BLOCK_SIZE, group="scheduler", metavar="N"
    )
    kv_blocks: int | None = option(
        None,
        f"KV capacity in blocks, at most {MAX_KV_BLOCKS} (default: sim "
        f"{_scheduler_default('num_blocks')}; torch: sized to the "
        "workload where there is one, else 1024)",
        int,
        low=1,
        high=MAX_KV_BLOCKS,
        group="scheduler",
        metavar="N",
    )
    state_slots: int | None = option(
        None,
        f"recurrent-state checkpoint slots, at most {MAX_STATE_SLOTS} (default: sim "
        f"{_scheduler_default('num_state_slots')}, torch 256; "
        "a full-attention model gets none)",
        int,
        low=0,
        high=MAX_STATE_SLOTS,
        group="scheduler",
        metavar="N",
    )
    cache_memory: str | None = option(
        None,
        "one memory budget for the cache, shared on demand by KV blocks and recurrent-state "
        "checkpoints, each charged at its real size: bytes with a unit, e.g. 2GiB, 512MB, 300M "
        "(M, G: powers of 1000; Mi, Gi: of 1024); kv_blocks and state_slots then only cap each kind "
        "(default: no shared budget, the two capacities alone)",
        str,
        group="scheduler",
        metavar="SIZE",
    )
    hardware: str = option(
        "h100",
        "sim cost profile: h100, h200, cpu or a profile file written by `radixflow calibrate`",
        str,
        group="sim",
        metavar="NAME|FILE",
    )
    fixed_cost_ms: float | None = option(
        None,
        f"sim: the whole fixed cost of a worker call with prefill in ms (replaces the profile's "
        f"per-call and per-layer parts; h100/h200: 3, band 1-10), at most {MAX_COST_MS:.0f} "
        "(default: the profile's)",
        float,
        low=0.0,
        high=MAX_COST_MS,
        group="sim",
        metavar="MS",
        aliases=("--round-overhead-ms",),
    )
    decode_fixed_cost_ms: float | None = option(
        None,
        f"sim: the fixed cost of a decode-only worker call in ms (h100/h200: 0.4), at most "
        f"{MAX_COST_MS:.0f} (default: the profile's; a profile without one charges --fixed-cost-ms)",
        float,
        low=0.0,
        high=MAX_COST_MS,
        group="sim",
        metavar="MS",
    )
    request_overhead_ms: float | None = option(
        None,
        f"sim: each request's own cost in ms (tokenization, API; h100/h200: 2): it is admitted that "
        f"long after it arrives, so the cost is in its latency and in no round; at most "
        f"{MAX_COST_MS:.0f} (default: the profile's)",
        float,
        low=0.0,
        high=MAX_COST_MS,
        group="sim",
        metavar="MS",
    )
    scheduler_time: str | None = option(
        None,
        "sim: the scheduler's modelled CPU time per round overlaps the worker call (overlap: vLLM "
        "V1's async scheduling; only what is longer than the call shows) or adds to it (serial) "
        "(default: the profile's; h100/h200: overlap)",
        str,
        choices=lambda: list(SCHEDULER_MODES),
        group="sim",
    )
    per_request_ms: float | None = option(
        None,
        f"sim: cost per scheduled chunk in ms, at most {MAX_COST_MS:.0f} (default: the profile's)",
        float,
        low=0.0,
        high=MAX_COST_MS,
        group="sim",
        metavar="MS",
    )
    tflops: float | None = option(
        None,
        f"sim: the profile's TFLOP/s (a roofline profile: the peak its kernels run at a stated "
        f"fraction of; h100/h200 time measured kernels and ignore it), {TFLOPS_RANGE[0]:g} to "
        f"{TFLOPS_RANGE[1]:g} (default: the profile's)",
        float,
        low=TFLOPS_RANGE[0],
        high=TFLOPS_RANGE[1],
        group="sim",
        metavar="X",
    )
    trace_out: str | None = option(
        None,
        "write the dependency trace (rounds, chunks, producers and their consumers, bubbles) to this "
        "file as Chrome/Perfetto trace JSON; open it in ui.perfetto.dev (bench: a process per policy "
        "run; default: no trace)",
        str,
        group="output",
        metavar="PATH",
    )

    # ------------------------------------------------------------------ construction
    def __post_init__(self) -> None:
        # a file's leading ~ is the home directory at every door (LLM(...), TOML, --flag=~/x,
        # which no shell expands), as a model path's is where the loader reads it
        for name in PATH_OPTIONS:
            value = getattr(self, name)
            if isinstance(value, str):  # a wrong type is the type check's to refuse
                object.__setattr__(self, name, expand_home(value))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], **overrides: Any) -> EngineOptions:
        """Options from a mapping (a TOML cell, `LLM(**kwargs)`): keys are field names, values must
        have the field's type (an int field given 4.5, "4" or True is refused, not cast).

        Raises `ProblemError` naming the first bad key; the result is validated.
        """
        options = checked(cls, {**data, **overrides})
        options.check()
        return options

    def replace(self, **changes: Any) -> EngineOptions:
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ validation
    def validate(self) -> Problem | None:
        """Why these options cannot build an engine (None when they can): every field's type,
        range and choices, the budgets against each other, and this machine's limits. Reads the
        machine (CPU count, available memory); allocates nothing."""
        return (
            fields_problem(self)
            or budget_problem(self.token_budget, self.block_size)
            or threads_problem(self.torch_threads)
            or plan_problem(self.matmul)
            or bookkeeping_problem(self.kv_blocks, self.state_slots)
            or size_problem("cache_memory", self.cache_memory)
            or output_problem("trace_out", self.trace_out)
            or hardware_problem(self.hardware)
        )

    def check(self) -> None:
        """`validate`, raising `ProblemError`."""
        problem = self.validate()
        if problem is not None:
            raise ProblemError(problem)


def hardware_problem(name: str) -> Problem | None:
    """Why ``name`` is no cost profile (a built-in name or a readable profile file), on either
    runner: a value is refused at every door or at none. Reads the file."""
    try:
        resolve_hardware(name)
    except ProfileError as e:
        return Problem("hardware", str(e))
    return None


def option_fields() -> tuple[dataclasses.Field[Any], ...]:
    """Every engine option, in declaration order."""
    return dataclasses.fields(EngineOptions)
