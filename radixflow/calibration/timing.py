"""Time the torch runner's worker call on designed batch shapes (CPU here, CUDA when present)."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from radixflow.calibration.design import DesignBatch
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.engine.clocks import round_clock
from radixflow.engine.runner import Runner
from radixflow.runners.profile_store import RunnerSettings
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput, SnapshotSpec

if TYPE_CHECKING:  # torch is imported only where batches are timed
    from radixflow.runners.torch_runner import TorchRunner

BLOCK_SIZE = 16


# A worker call is timed on the engine's round clocks (`engine.clocks`, the names `--clock` takes
# everywhere): "cpu", the CPU time of the thread running it (with one intra-op thread, the wall
# time on an idle machine; other processes on a shared machine do not inflate it, they only delay
# when it runs), or "wall"; a GPU needs wall, its work is not on the CPU clock.
def default_clock(device: str) -> str:
    return "cpu" if device.split(":")[0] == "cpu" else "wall"  # "cpu:0" is the CPU too


# What of a batch's repeated timings the fit takes. ``min`` (the default): on a shared machine
# timing noise is mostly one-sided (other processes only ever add time), so the fastest estimates
# the undisturbed cost. ``median``: the typical round, what a single real round scatters around
# (the sim twin of a real run prices rounds so, `benchmarks/policies_torch.py`).
KEPT: dict[str, Callable[[Sequence[float]], float]] = {"min": min, "median": statistics.median}


@dataclass(frozen=True)
class TimedBatch:
    model: str
    split: str
    chunks: tuple[ChunkShape, ...]
    seconds: float  # the kept figure of the repeats (`KEPT`); fit and held-out rounds alike
    repeats: tuple[float, ...] = ()  # every timing, in the order taken (empty: not recorded)

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "split": self.split,
            "seconds": self.seconds,
            "chunks": [[c.start, c.length, int(c.sample), int(c.restores), c.snapshots] for c in self.chunks],
            "repeats": list(self.repeats),
        }

    @staticmethod
    def from_dict(data: dict[str, object]) -> TimedBatch:
        chunks = tuple(ChunkShape(s, n, bool(x), bool(r), k) for s, n, x, r, k in data["chunks"])  # type: ignore[union-attr]
        repeats = tuple(float(t) for t in data.get("repeats", ()))  # type: ignore[union-attr]
        return TimedBatch(str(data["model"]), str(data["split"]), chunks, float(data["seconds"]), repeats)  # type: ignore[arg-type]


def round_noise_sigma(batches: Sequence[TimedBatch]) -> float | None:
    """The machine's per-round timing noise as a log-normal σ, from every shape timed the same
    number of times (the most common count, at least 2): the log of each timing less its shape's
    mean and its pass's mean (a pass: one timing of every shape of one model, in the order taken;
    each model's passes are its own, timed after the last model's), pooled. Taking the pass out
    leaves the slow drift of a shared machine's speed between passes (a common factor, minutes
    apart) out of the per-round noise. None with no model with two shapes timed twice."""
    counts = [len(b.repeats) for b in batches if len(b.repeats) >= 2 and min(b.repeats) > 0]
    if not counts:
        return None
    passes = max(set(counts), key=counts.count)
    by_model: dict[str, list[list[float]]] = {}
    for b in batches:
        if len(b.repeats) == passes and min(b.repeats) > 0:
            by_model.setdefault(b.model, []).append([math.log(t) for t in b.repeats])
    # one shape of a model: its pass means are its timings, nothing is left to tell noise by
    fits = [_pass_residuals(rows, passes) for rows in by_model.values() if len(rows) >= 2]
    dof = sum(d for _, d in fits)
    return math.sqrt(sum(s for s, _ in fits) / dof) if dof else None


def _pass_residuals(rows: list[list[float]], passes: int) -> tuple[float, int]:
    """The sum of squares left in one model's log timings (a row per shape, a column per pass)
    once each shape's and each pass's mean are taken out, and its degrees of freedom."""
    grand = statistics.fmean(x for r in rows for x in r)
    shape = [statistics.fmean(r) for r in rows]
    step = [statistics.fmean(r[j] for r in rows) for j in range(passes)]
    squares = sum((r[j] - shape[i] - step[j] + grand) ** 2 for i, r in enumerate(rows) for j in range(passes))
    return squares, (len(rows) - 1) * (passes - 1)


def _blocks(tokens: int) -> int:
    return -(-tokens // BLOCK_SIZE)


def to_scheduler_output(batch: DesignBatch, vocab_size: int) -> SchedulerOutput:
    """A round the runner can execute: disjoint block ids and state slots for each chunk.

    KV and state contents are whatever the pools hold (zeros): timing does not depend on them.
    """
    chunks, next_block, next_slot = [], 0, 0
    for i, c in enumerate(batch.chunks):
        table = tuple(range(next_block, next_block + _blocks(c.end)))
        next_block += len(table)
        restore = None
        if c.restores:
            restore, next_slot = next_slot, next_slot + 1
        snaps = []
        for _ in range(c.snapshots):
            snaps.append(SnapshotSpec(c.end // BLOCK_SIZE * BLOCK_SIZE, next_slot))
            next_slot += 1
        tokens = tuple((7 * j + i) % vocab_size for j in range(c.end))
        end = c.end if c.sample else c.end + BLOCK_SIZE  # a mid-prompt chunk: the prompt goes on
        prompt = tokens + tuple(1 for _ in range(end - c.end))
        chunks.append(
            ScheduledChunk(f"c{i}", "cal", prompt, c.start, c.end, table, restore, tuple(snaps), c.sample)
        )
    return SchedulerOutput(round_index=0, chunks=chunks)


def pool_sizes(batches: list[DesignBatch]) -> tuple[int, int]:
    """KV blocks and state slots the largest batch needs."""
    blocks = max(sum(_blocks(c.end) for c in b.chunks) for b in batches)
    slots = max(sum(int(c.restores) + c.snapshots for c in b.chunks) for b in batches)
    return blocks, max(slots, 1)


def time_batches(
    model: str,
    device: str,
    batches: list[DesignBatch],
    repeats: int,
    threads: int | None,
    on_batch: Callable[[], None] | None,
    clock: str,
    kept: str = "min",
    dtype: str = "float32",
    settings: dict[str, RunnerSettings] | None = None,
    kernels: str = "auto",
    matmul: str = "auto",
) -> list[TimedBatch]:
    """Each batch's worker-call times (``kept``: the figure of them the fit takes, `KEPT`); each
    repeat times every batch, in a fresh order. ``settings``, where given, gets the kernels and
    matmul routes the runner resolved (from ``kernels`` and ``matmul``, as `TorchRunner` takes
    them), under ``model``: what the rounds were timed on. The runner
    predicts nothing here: its predictor's bookkeeping (a round's terms before the call, a refit
    after) is outside the engine clock's worker call, so timing it would price every round over
    what the engine charges for it."""
    import torch

    read = round_clock(clock).read
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        runner = _timing_runner(model, device, dtype, pool_sizes(batches), kernels, matmul)
        if settings is not None:
            settings[model] = runner.settings()
        outputs = [to_scheduler_output(b, runner.model.vocab_size) for b in batches]
        samples = _repeated_times(runner, outputs, repeats, read, on_batch)
    finally:
        torch.set_num_threads(before)
    keep = KEPT[kept]
    return [
        TimedBatch(model, b.split, b.chunks, keep(s), tuple(s)) for b, s in zip(batches, samples, strict=True)
    ]


def _timing_runner(
    model: str, device: str, dtype: str, pools: tuple[int, int], kernels: str, matmul: str
) -> TorchRunner:
    """The runner the batches are timed on: pools for the largest (``pools``: KV blocks, state
    slots), predicting nothing (see `time_batches`)."""
    import torch

    from radixflow.models.zoo import ensure_model
    from radixflow.runners.torch_runner import TorchRunner

    blocks, slots = pools
    return TorchRunner(
        ensure_model(model), BLOCK_SIZE, blocks, slots, device=device, dtype=getattr(torch, dtype),
        label=model, predict_rounds=False, matmul=matmul, kernels=kernels,
    )  # fmt: skip


def _repeated_times(
    runner: Runner,
    outputs: list[SchedulerOutput],
    repeats: int,
    read: Callable[[], float],
    on_batch: Callable[[], None] | None,
) -> list[list[float]]:
    """Each output's worker-call times, one per repeat; each repeat runs every output, in a
    fresh order (no batch always runs right after the same one)."""
    samples: list[list[float]] = [[] for _ in outputs]
    order = list(range(len(outputs)))
    for rep in range(repeats):
        random.Random(rep).shuffle(order)
        for i in order:
            t0 = read()
            runner.run(outputs[i])
            samples[i].append(read() - t0)
            if on_batch is not None:
                on_batch()
    return samples
