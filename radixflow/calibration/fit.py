"""Fit a hardware profile to timed rounds (non-negative least squares) and score it on held-out rounds."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from radixflow.calibration.timing import TimedBatch, round_noise_sigma
from radixflow.costmodel.hardware.profile_checks import COMPUTE_TERMS, MAX_FLOPS, MAX_KIND_SCALE
from radixflow.costmodel.hardware.profiles import SPLIT_FROM, HardwareProfile
from radixflow.costmodel.round_cost.fitted_rates import CostModel, fit_feature_names, fit_features
from radixflow.costmodel.round_cost.nnls import nnls
from radixflow.costmodel.shape.model_shape import ModelShape

SRC_FITTED = "fitted by `radixflow calibrate` (NNLS on timed worker calls; see 'calibration')"
# the source of a term no timed model exercises (`HardwareProfile.sources`, key "kind_scale.<term>")
SRC_UNFITTED = "not timed by `radixflow calibrate` (no model it timed runs it): charged at the matmul rate"
# ... of a term split off another that was timed (`profiles.SPLIT_FROM`): left out of kind_scale,
# the term is charged at that one's rate, as a profile written before the split charges it
SRC_UNFITTED_SPLIT = "not timed by `radixflow calibrate` (no round it timed had it): charged at the {} rate"


class FitError(ValueError):
    """Timed rounds no profile can be fitted to (one line, naming what is wrong with them)."""


@dataclass(frozen=True)
class ModelError:
    model: str
    fit_rounds: int
    held_out_rounds: int
    median_abs_error: float  # median |predicted - measured| / measured on held-out rounds
    max_abs_error: float


FIT_TERMS = fit_feature_names()  # the fitted-rates terms, the round's squared token count, cached KV read


def _rows(batches: list[TimedBatch], shapes: dict[str, ModelShape], dtype_bytes: int) -> list[list[float]]:
    return [_row(b, shapes[b.model], dtype_bytes) for b in batches]


def _row(batch: TimedBatch, shape: ModelShape, dtype_bytes: int) -> list[float]:
    return fit_features(shape, batch.chunks, dtype_bytes)


def _fit_rounds(batches: list[TimedBatch]) -> list[TimedBatch]:
    """The rounds of the ``fit`` split; `FitError` where there are none, or all of one size, or
    where any round (fit or held out) has no positive, finite time."""
    _check_times(batches)
    fit = [b for b in batches if b.split == "fit"]
    if not fit:
        raise FitError("no fit rounds to calibrate from")
    sizes = {sum(c.length for c in b.chunks) for b in fit}
    if len(sizes) == 1:  # nothing tells the per-call cost from the per-token ones: any split fits
        raise FitError(
            f"the fit rounds are all {sizes.pop()} tokens: a fit needs rounds of at least two sizes "
            "to tell a worker call's fixed cost from its cost per token"
        )
    return fit


def _check_times(batches: list[TimedBatch]) -> None:
    """`FitError` naming the rounds timed at 0 s or less (or at no finite time): a clock that did
    not advance over a worker call says nothing of its cost, and each round is weighed (and
    scored) relative to its time."""
    for model in sorted({b.model for b in batches}):
        mine = [b for b in batches if b.model == model]
        bad = sum(not 0 < b.seconds < math.inf for b in mine)
        if bad:
            raise FitError(
                f"{bad} of {len(mine)} rounds of {model} timed at 0 s or less (or at no finite time): "
                "the clock did not advance over a worker call"
            )


def fit_profile(
    name: str,
    batches: list[TimedBatch],
    shapes: dict[str, ModelShape],
    dtype_bytes: int,
    device: str,
) -> HardwareProfile:
    """Coefficients minimising the squared *relative* error of the fit rounds, all >= 0.

    Memory traffic is not a separate term here (``bandwidth`` None): on the devices this runs on
    it shows up in the per-call and per-FLOP coefficients. A compute term the fit rounds never
    exercise (e.g. ``mamba2`` when only DeltaNet models were timed) is charged at the matmul rate,
    or one split off a term they do exercise at that term's (``prefix_attention``, with no round
    after a cached prefix: attention's), and listed under ``calibration.unfitted_terms``.
    """
    fit = _fit_rounds(batches)
    rows = _rows(fit, shapes, dtype_bytes)
    weighted = [[v / b.seconds for v in row] for row, b in zip(rows, fit, strict=True)]
    coef = dict(zip(FIT_TERMS, nnls(weighted, [1.0] * len(fit)), strict=True))
    seen = {t for t in COMPUTE_TERMS if any(row[FIT_TERMS.index(t)] > 0 for row in rows)}
    unfitted = sorted(set(COMPUTE_TERMS) - seen)
    split = {t: SPLIT_FROM[t] for t in unfitted if SPLIT_FROM.get(t) in seen}  # priced as their source
    base = coef["matmul"] or statistics.mean([coef[t] for t in seen if coef[t] > 0] or [1e-12])
    reference = _reference(base, [coef[t] for t in seen])
    scale = {t: (coef[t] if t in seen else base) / reference for t in COMPUTE_TERMS if t not in split}
    profile = HardwareProfile(
        name=name,
        flops=1.0 / reference,
        bandwidth=None,
        round_overhead_s=coef["round"],
        per_request_s=coef["sequence"],
        layer_overhead_s=coef["layer"],
        token_pair_s=coef["token_pairs"],
        prefix_kv_s=coef["prefix_kv"],
        kind_scale=scale,
        weight_bytes=dtype_bytes,
        sources={"all": SRC_FITTED, **_unfitted_sources(unfitted, split)},
    )
    errors = score(profile, batches, shapes)
    calibration = {
        "device": device,
        "models": sorted(shapes),
        "unfitted_terms": unfitted,
        "errors": [e.__dict__ for e in errors],
        # the log-normal σ of one round's repeated timings (None: no round timed twice)
        "round_noise_sigma": round_noise_sigma(batches),
        "rounds": [b.to_dict() for b in batches],
    }
    return HardwareProfile(**{**profile.__dict__, "calibration": calibration})


def _unfitted_sources(unfitted: list[str], split: dict[str, str]) -> dict[str, str]:
    """Where each unfitted term's rate comes from (`HardwareProfile.sources`, "kind_scale.<term>")."""
    why = {t: SRC_UNFITTED_SPLIT.format(split[t]) if t in split else SRC_UNFITTED for t in unfitted}
    return {f"kind_scale.{t}": text for t, text in why.items()}


def _reference(base: float, fitted: list[float]) -> float:
    """The seconds per FLOP a profile's ``flops`` stands for: ``base`` (the matmul's), raised
    where it would put ``flops`` or a term's scale past a profile's bounds (a launch-bound device
    whose matmuls time as all but free); each term's seconds per FLOP stay as fitted."""
    return max(base, max(fitted, default=0.0) / MAX_KIND_SCALE, 1.0 / MAX_FLOPS)


def score(
    profile: HardwareProfile, batches: list[TimedBatch], shapes: dict[str, ModelShape]
) -> list[ModelError]:
    """Per model: relative error of predicted worker-call time on its held-out rounds."""
    out = []
    for model in sorted(shapes):
        cost = CostModel(shapes[model], profile)
        held = [b for b in batches if b.model == model and b.split == "held_out"]
        errs = [abs(cost.round_seconds(b.chunks) - b.seconds) / b.seconds for b in held]
        fit_n = sum(b.model == model and b.split == "fit" for b in batches)
        out.append(
            ModelError(
                model,
                fit_n,
                len(held),
                statistics.median(errs) if errs else float("nan"),
                max(errs) if errs else float("nan"),
            )
        )
    return out


FLAT = 0.01  # a largest fit round priced within this share of the smallest: a token priced at nothing


def flat_fits(
    profile: HardwareProfile, batches: list[TimedBatch], shapes: dict[str, ModelShape]
) -> list[str]:
    """One line per model whose fit rounds ``profile`` prices all but alike (the largest within
    `FLAT` of the smallest): their times did not grow with their size (a clock that missed the
    work, a device whose calls are all launch), so the profile prices a token at all but nothing,
    and its held-out error, of rounds timed alike too, cannot show it."""
    out = []
    for model in sorted(shapes):
        fit = [b for b in batches if b.model == model and b.split == "fit"]
        if not fit:
            continue
        cost = CostModel(shapes[model], profile)
        small, large = min(fit, key=_tokens), max(fit, key=_tokens)
        low, high = cost.round_seconds(small.chunks), cost.round_seconds(large.chunks)
        if high <= low * (1 + FLAT):
            out.append(
                f"{model}: the fitted profile prices a round of {_tokens(large)} tokens within {FLAT:.0%} of "
                f"one of {_tokens(small)} ({high * 1e3:.3g} ms against {low * 1e3:.3g} ms): the timed rounds "
                "did not grow with their size, so a token is priced at all but nothing"
            )
    return out


def _tokens(batch: TimedBatch) -> int:
    return sum(c.length for c in batch.chunks)
