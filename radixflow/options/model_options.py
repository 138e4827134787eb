"""`ModelOptions`: the engine options that say what runs (model, runner, device, threads, dtype,
matmul plan, kernels, clock, seed), the ``model`` group of every door's flags; `EngineOptions`
holds them with the rest."""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.engine.clocks import ROUND_CLOCKS
from radixflow.options.machine import MAX_THREADS
from radixflow.options.spec import option
from radixflow.scheduler.sampling_checks import SEED_RANGE, SEED_WORDS

RUNNERS = ("sim", "torch")
DTYPES = ("auto", "float32", "bfloat16", "float16")  # resolved per device: models/device.py
KERNELS = ("auto", "native", "torch")  # resolved per device and dtype: models/kernels/backend.py


@dataclass(frozen=True)
class ModelOptions:
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
        "torch intra-op threads, at most this machine's CPUs (default: torch's, at most those CPUs; "
        "serve and run-batch: the server's thread plan, one CPU left to the HTTP side per 8; serve "
        "--replicas: 1 per replica; calibrate: 1)",
        int,
        low=1,
        high=MAX_THREADS,
        group="model",
        metavar="N",
    )
    dtype: str = option(
        "auto",
        "torch runner weight and activation dtype: auto (float32 on a CPU, bfloat16 on CUDA where "
        "supported, else float16), float32, bfloat16 (on a CPU too: slower, logprobs off "
        "float32's by tenths) or float16 (CUDA only); only float32 reproduces a no-cache run exactly",
        str,
        choices=lambda: list(DTYPES),
        group="model",
    )
    matmul: str = option(
        "auto",
        "torch runner on a CPU in float32 (a plan is refused elsewhere): the matmul library per shape "
        "class: auto (the routes of the profile `radixflow calibrate` stored for this model and machine, "
        "else measured at startup), mkl, onednn, native (the native kernels' few-row product), "
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
        "also of a generated workload's token ids and arrivals, which take one >= 0; generate: also each "
        "prompt's own seed); "
        "64 bits, signed or unsigned, as a request's own seed",
        int,
        low=SEED_RANGE[0],  # read mod 2^64, as a request's own seed: -1 and 2^64 - 1 draw alike
        high=SEED_RANGE[1],
        range_words=SEED_WORDS,
        group="model",
        metavar="N",
    )
