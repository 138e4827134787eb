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
    workload, policy and repeat, one JSON line each (``benchmarks/predictor_replay.py`` reads it)."""

    path: Path | None
    label: dict[str, object] = field(default_factory=dict)

    def attach(self, runner: object) -> None:
        predictor = getattr(runner, "round_predictor", None)
        if self.path is None or predictor is None:
            return
        observe = predictor.observe

        def logged(features: Sequence[float], seconds: float) -> None:
            predicted = predictor.fit.predict(features)
            row = {"features": list(features), "seconds": seconds, "predicted": predicted}
            with self.path.open("a", encoding="utf-8") as f:  # type: ignore[union-attr]
                f.write(json.dumps(self.label | row) + "\n")
            observe(features, seconds)

        predictor.observe = logged
