"""The torch runner's round predictor: the fitted-rates model of its rounds, learned as it runs.

It starts from the profile `radixflow calibrate` stored for this model on this machine
(`profile_store`), or from a nominal prior when there is none, and refits after every round the
runner measures (`costmodel.round_cost.online_fit`: the machine's speed from the last few rounds,
the cost curve's coefficients from many). The scheduler sees only
a `scheduler.scan.RoundPredictor` (a callable, pure between two rounds) whose ``revision``
changes whenever the fit does, so a policy that memoises predictions knows to ask again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from radixflow.costmodel.hardware.profiles import HardwareProfile
from radixflow.costmodel.round_cost.fitted_rates import fit_features
from radixflow.costmodel.round_cost.online_fit import (
    OnlineFit,
    Prior,
    nominal_prior,
    nominal_rates,
    profile_prior,
)
from radixflow.costmodel.shape.hf_config import shape_from_checkpoint
from radixflow.costmodel.shape.model_shape import ModelShape
from radixflow.runners.sim import chunk_shapes
from radixflow.scheduler.output import ScheduledChunk


class LearnedRoundPredictor:
    """Seconds of a round of chunks on this runner, from the coefficients fitted so far."""

    def __init__(self, shape: ModelShape, prior: Prior, threads: int) -> None:
        self.shape = shape
        self.fit = OnlineFit(prior, nominal_rates(threads))
        self.revision = 0  # bumped by every refit

    def features(self, chunks: Sequence[ScheduledChunk]) -> list[float]:
        return fit_features(self.shape, chunk_shapes(chunks))

    def __call__(self, chunks: Sequence[ScheduledChunk]) -> float:
        """Pure: the same answer until the next `observe`."""
        return self.fit.predict(self.features(chunks))

    def observe(self, features: Sequence[float], seconds: float) -> None:
        """A round of ``features`` (`features`) took ``seconds``: refit."""
        self.fit.observe(features, seconds)
        self.revision += 1

    @property
    def source(self) -> str:
        return self.fit.prior.source


def make_predictor(
    checkpoint: str | Path, label: str, stored: HardwareProfile | None, threads: int
) -> LearnedRoundPredictor:
    """A predictor for the model at ``checkpoint`` from its ``stored`` profile (None: the
    nominal prior)."""
    prior = nominal_prior(threads) if stored is None else profile_prior(stored)
    return LearnedRoundPredictor(shape_from_checkpoint(label, checkpoint), prior, threads)
