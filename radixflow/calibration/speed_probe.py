"""The shared machine's speed now against its speed while a profile was timed, on fixed round
shapes of calibrate's fit grid (`SpeedProbe`): a sim twin priced on a profile timed minutes
earlier is priced at the speed of the minutes it is compared with (`benchmarks/policies_torch.py`)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

# Round shapes of calibrate's fit grid (sequences, tokens each, cached prefix) timed between the
# real runs on a runner of their own: the machine's speed at the time of each cell's runs.
PROBE_SHAPES = ((2, 256, 0), (4, 16, 1024), (1, 64, 1024))


@dataclass
class SpeedProbe:
    """A shared machine's speed moves by tens of percent within minutes, on the CPU clock too
    (it leaves out waiting for a core, not the slowdown of sharing one): a profile timed before a
    family's runs prices the later ones at the speed of its own minutes. The probe times fixed
    round shapes (never the real rounds) around the profile's timing (``reference``) and after each
    turn of the real runs (``current``); `speed` is their ratio, by which the twin prices a cell."""

    runner: object
    outputs: list[object]
    read: object  # the engine clock's reader
    reference: list[list[float]] = field(default_factory=list)
    current: list[list[float]] = field(default_factory=list)

    @staticmethod
    def build(family: str, budget: int, clock: str) -> SpeedProbe:
        from radixflow.calibration.design import fit_design
        from radixflow.calibration.run import model_shape
        from radixflow.calibration.timing import BLOCK_SIZE, pool_sizes, to_scheduler_output
        from radixflow.engine.clocks import round_clock
        from radixflow.models.zoo import ensure_model
        from radixflow.runners.torch_runner import TorchRunner

        design = fit_design(budget, BLOCK_SIZE, model_shape(family).has_recurrent)
        pick = lambda b: (len(b.chunks), b.chunks[0].length, b.chunks[0].start)  # noqa: E731
        batches = [b for b in design if pick(b) in PROBE_SHAPES]
        blocks, slots = pool_sizes(batches)
        path = ensure_model(family)
        runner = TorchRunner(path, BLOCK_SIZE, blocks, slots, label=family, predict_rounds=False)
        outputs = [to_scheduler_output(b, runner.model.vocab_size) for b in batches]
        for out in outputs:  # untimed: a fresh runner's first calls are slow (read 15-28% over here)
            runner.run(out)
        return SpeedProbe(runner, outputs, round_clock(clock).read)

    def time(self, into: list[list[float]]) -> None:
        """One timing of every probe shape, appended to ``into``."""
        row = []
        for out in self.outputs:
            t0 = self.read()  # type: ignore[operator]
            self.runner.run(out)  # type: ignore[attr-defined]
            row.append(self.read() - t0)  # type: ignore[operator]
        into.append(row)

    def speed(self) -> float | None:
        """The geometric mean over shapes of (median now) / (median while the profile was timed);
        a shape with no positive, finite median on either side (a clock that did not advance over
        its round) says nothing of the speed and is left out. None: no shape is left."""
        if not self.reference or not self.current:
            return None
        medians = [
            (statistics.median(r[i] for r in self.current), statistics.median(r[i] for r in self.reference))
            for i in range(len(self.outputs))
        ]
        ratios = [now / then for now, then in medians if _timed(now) and _timed(then)]
        return math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None


def _timed(seconds: float) -> bool:
    return 0 < seconds < math.inf
