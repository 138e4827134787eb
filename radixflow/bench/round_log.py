"""Every real round the torch runner's predictor learns from, written as a benchmark runs
(`benchmarks/policies_torch.py --rounds-out`), for `benchmarks/predictor_replay.py` to replay."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RoundLog:
    """Every real round the runner's predictor learns from (``--rounds-out``): its terms
    (`fitted_rates.fit_feature_names`), measured and predicted seconds, labelled by family,
    workload, policy and repeat, one JSON line each (``benchmarks/predictor_replay.py`` reads it).
    ``error``: why the log stopped, after a write failed (None: every round is in it)."""

    path: Path | None
    label: dict[str, object] = field(default_factory=dict)
    error: str | None = None

    def attach(self, runner: object) -> None:
        """Log every round ``runner``'s predictor learns from. Raises OSError, before any round,
        where ``path`` cannot be appended to."""
        if self.path is None:
            return
        self.path.open("a", encoding="utf-8").close()
        predictor = getattr(runner, "round_predictor", None)
        if predictor is None:
            return
        observe = predictor.observe

        def logged(features: Sequence[float], seconds: float) -> None:
            predicted = predictor.fit.predict(features)
            observe(features, seconds)
            self._write({"features": list(features), "seconds": seconds, "predicted": predicted})

        predictor.observe = logged

    def _write(self, row: dict[str, object]) -> None:
        """Append one row. The runner calls this inside its worker call, where an exception fails
        the round: a write that fails (a full disk) stops the log instead, ``error`` saying why."""
        if self.error is not None or self.path is None:
            return
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(self.label | row) + "\n")
        except OSError as e:
            self.error = f"cannot write {self.path}: {e.strerror or e}"
