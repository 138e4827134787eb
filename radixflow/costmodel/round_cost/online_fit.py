"""A round-time model refitted online from measured rounds: a cost curve and the machine's speed.

A round's time is the machine's current *speed* times a *curve* linear in the terms
`fitted_rates.fit_features` counts (fixed per call, per layer, per sequence, seconds per FLOP of
each compute kind, the squared token count), as `radixflow calibrate` fits them offline. Both are
refitted after every measured round, so a machine with no stored profile starts from a rough prior
and converges to its own rates, and a shared machine whose speed drifts is followed without
refitting the curve's shape on a handful of rounds.

The two move on different time scales because the error signal has two parts. The speed of a
shared machine moves every term of every round alike, within minutes: a common factor, followed
from the last few rounds (each round moves its log by ``speed_gain`` times the log of measured /
predicted, the prediction on the curve refitted with that round; that log at most
`SPEED_STEP_LOG`). The shape (how a round's time splits between terms) needs rounds of many shapes
to tell the terms apart, and does not drift with the load: it is fitted over the last ``window``
rounds, each round's time first divided by the speed it was measured at, so the curve sees the
rounds as if the machine had kept one speed.
The level is shared by the two (a neutral split): only their product is predicted.

The curve: each coefficient is the prior's scale times a multiplier θ ≥ 0. The fit minimises the
squared *relative* error of the window's rounds (as calibration does: a long round is not worth
more than a short one; relative to the larger of a round's time and the curve's price of it when
it was measured, so that one round measured far short of its price cannot outweigh the window)
plus ``weight`` · Σⱼ qⱼ (θⱼ − g θ₀ⱼ)², g the factor that best scales the whole prior to the
window's rounds and qⱼ the mean over those rounds of the square of term j's row (what one
average round adds to the curvature of θⱼ). Weighted so, the prior counts as ``weight`` rounds
of evidence for the *shape* of the cost whatever a term's size, the machine's speed or the unit
θ is counted in, and pulls only where the rounds seen so far do not tell the terms apart; a
first round the prior misses by a factor rescales every term by that factor. A term no round has
shown stays at the prior, rescaled. The normal equations are kept up to date row by row
(O(terms²) per round, a row added and the oldest taken out) and solved by `nnls.nnls_gram`
(O(terms³), independent of the window).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from radixflow.costmodel.hardware.profile_checks import COMPUTE_TERMS
from radixflow.costmodel.hardware.profiles import HardwareProfile
from radixflow.costmodel.round_cost.fitted_rates import OVERHEAD_TERMS, fit_feature_names
from radixflow.costmodel.round_cost.nnls import nnls_gram

# the prior's pull on a term no round in the window has shown, against the largest term's (any
# positive pull holds such a term at the prior, rescaled)
UNSEEN_PULL = 1e-9
WINDOW = 128  # rounds the curve is fitted on: many shapes, so the terms are told apart
SPEED_GAIN = 0.25  # share of a round's unexplained log error the speed takes: a time constant of ~4 rounds
# The most log error one round gives the speed: a round stalled far past its price (descheduled on
# a shared machine) moves it by at most 4^0.25, x1.41; a machine whose speed changes by up to 4x
# between two rounds is followed as it would be without the bound.
SPEED_STEP_LOG = math.log(4.0)
# Only the product of speed and curve is predicted, so nothing holds their split: under noisy
# rounds the speed climbs and the curve's level falls round after round (~0.01 in log per round
# at a log-normal sigma of 0.5), and the normal equations, which grow with the speed squared,
# overflow within thousands of rounds (predictions fall to 0 first: NNLS drops coefficients below
# an absolute 1e-15). Past this factor the speed is folded into the curve (`OnlineFit._fold`):
# the fit is back at the scale it is written for (speed near 1, each row near its terms' shares
# of the round), and no prediction changes at the fold; any bound far from overflow does.
FOLD_LOG_SPEED = math.log(1e6)

# The prior for a machine with no stored profile. Not measured: an order-of-magnitude guess.
# A core's float32 FMA peak is ~100 GFLOP/s on AVX2 at 3 GHz; a GEMM at these small shapes gets
# a fraction of it, every other kind of work is priced the same way, and the per-call terms are
# a Python forward's usual few milliseconds. The online fit replaces all of it within a few rounds.
NOMINAL_FLOPS_PER_THREAD = 50e9
NOMINAL_ROUND_S = 2e-3
NOMINAL_LAYER_S = 2e-4
NOMINAL_SEQUENCE_S = 5e-4
# The unit of the token-pair term only (the nominal prior assumes no growth per token): a 2048-token
# round's pairs at this rate cost what ~10% of its tokens cost at ~1 ms a token.
NOMINAL_TOKEN_PAIR_S = 5e-8
# The unit of the cached-KV term: a float32 element read at ~10 GB/s (not measured for this: an
# order of magnitude; a core here streams memory at ~24-29 GB/s, docs/real-models.md, and a
# gather of paged KV runs slower).
NOMINAL_PREFIX_KV_S = 4e-10


@dataclass(frozen=True)
class Prior:
    """Coefficients (seconds per unit of each `fit_feature_names()` term) to start from and
    return to where the data is silent; ``weight``: how many rounds' worth of evidence it counts as."""

    coefficients: tuple[float, ...]
    weight: float
    source: str  # where the figures come from, for the record


def nominal_rates(threads: int) -> tuple[float, ...]:
    """A positive figure per term at the nominal figures above (unmeasured), for ``threads``
    intra-op threads: the unit each coefficient is fitted in."""
    per_flop = 1.0 / (NOMINAL_FLOPS_PER_THREAD * max(threads, 1))
    overhead = {"round": NOMINAL_ROUND_S, "layer": NOMINAL_LAYER_S, "sequence": NOMINAL_SEQUENCE_S}
    compute = [per_flop for _ in COMPUTE_TERMS]
    return (*[overhead[t] for t in OVERHEAD_TERMS], *compute, NOMINAL_TOKEN_PAIR_S, NOMINAL_PREFIX_KV_S)


def nominal_prior(threads: int, weight: float = 0.05) -> Prior:
    """`nominal_rates`, with no growth of a token's cost with the round's size."""
    *linear, _, prefix = nominal_rates(threads)
    coef = (*linear, 0.0, prefix)
    rate = f"{NOMINAL_FLOPS_PER_THREAD:.0e} FLOP/s a thread"
    return Prior(coef, weight, f"nominal, not measured ({rate})")


def profile_prior(profile: HardwareProfile, weight: float = 2.0) -> Prior:
    """A fitted-rates profile's coefficients (as `radixflow calibrate` writes them)."""
    overhead = [profile.round_overhead_s, profile.layer_overhead_s, profile.per_request_s]
    compute = [profile.seconds_per_flop(t) for t in COMPUTE_TERMS]
    coef = [*overhead, *compute, profile.token_pair_s, profile.prefix_kv_s]
    return Prior(tuple(coef), weight, f"profile {profile.name!r}")


def _check_prior(prior: Prior) -> None:
    """ValueError on a prior the fit cannot start from: one coefficient per feature, each finite
    and >= 0 (a negative one predicts rounds of negative seconds until the data outweighs it),
    and a finite weight >= 0 (a negative one takes curvature out of the normal equations)."""
    if len(prior.coefficients) != len(fit_feature_names()):
        raise ValueError("the prior needs one coefficient per feature")
    for name, c in zip(fit_feature_names(), prior.coefficients, strict=True):
        if not 0 <= c < math.inf:
            raise ValueError(f"prior coefficient {name!r} must be a finite number >= 0, got {c}")
    if not 0 <= prior.weight < math.inf:
        raise ValueError(f"prior weight must be a finite number >= 0, got {prior.weight}")


class OnlineFit:
    """The machine's speed times a curve fitted by windowed non-negative least squares of round
    seconds (each divided by the speed it was measured at) on feature rows, towards a prior."""

    def __init__(
        self,
        prior: Prior,
        scale: Sequence[float],
        window: int = WINDOW,
        speed_gain: float = SPEED_GAIN,
    ) -> None:
        """``scale``: a positive coefficient per term (`nominal_rates`), the unit of θ; a term the
        prior puts at 0 is then a θ₀ of 0, which the data can still raise. ``speed_gain`` in
        [0, 1): 0 keeps the speed at 1 (the curve alone follows the machine, over its window)."""
        if len(scale) != len(fit_feature_names()) or not min(scale) > 0:
            raise ValueError("scale needs one positive figure per feature")
        _check_prior(prior)
        # fewer rounds than terms cannot tell the terms apart: the curve fits every round of such a
        # window, so the speed never learns (and an empty window divides the prior's pull by 0)
        terms = len(fit_feature_names())
        if window < terms:
            raise ValueError(f"window must hold at least {terms} rounds (one per term), got {window}")
        if not 0 <= speed_gain < 1:
            raise ValueError("speed_gain must be in [0, 1)")
        self.prior = prior
        self._scale = list(scale)
        self._theta0 = [c / s for c, s in zip(prior.coefficients, scale, strict=True)]
        n = len(scale)
        self._gram = [[0.0] * n for _ in range(n)]
        self._rhs = [0.0] * n
        self._rows: deque[tuple[list[float], float]] = deque()  # (row, target)
        self._window = window
        self._gain = speed_gain
        self.log_speed = 0.0  # the machine's speed against the curve's, as a log factor
        self.rounds = 0  # measured rounds seen, all told
        self.theta = list(self._theta0)

    @property
    def speed(self) -> float:
        """The factor the curve is multiplied by: > 1 while the machine runs slower than the
        rounds the curve was fitted on."""
        return math.exp(self.log_speed)

    @property
    def coefficients(self) -> list[float]:
        """Seconds per unit of each `fit_feature_names()` term, as now fitted (speed included)."""
        return [self.speed * t * s for t, s in zip(self.theta, self._scale, strict=True)]

    def predict(self, features: Sequence[float]) -> float:
        return self.speed * self._curve(features)

    def _curve(self, features: Sequence[float]) -> float:
        return sum(t * s * f for t, s, f in zip(self.theta, self._scale, features, strict=True))

    def observe(self, features: Sequence[float], seconds: float) -> None:
        """Add a measured round (the oldest leaves past the window), refit the curve, then move
        the speed by what the curve leaves unexplained. A round with no positive, finite time is
        no evidence (a clock that did not tick, or never stopped)."""
        if not 0 < seconds < math.inf:
            return
        at_one_speed = seconds / self.speed
        # the error relative to the larger of the measured time and the curve's price: under 1
        # either way, so no one round outweighs the window (relative to the measured time alone, a
        # round measured 10x short of its price had an error of 9, one measured long always < 1)
        unit = max(at_one_speed, self._curve(features))
        row = [f * s / unit for f, s in zip(features, self._scale, strict=True)]
        target = at_one_speed / unit
        self._add(row, target, 1.0)
        self._rows.append((row, target))
        if len(self._rows) > self._window:
            self._add(*self._rows.popleft(), -1.0)
        self.rounds += 1
        self._refit()
        # The speed takes what the refitted curve leaves unexplained: while the window holds
        # fewer rounds than terms the curve explains each of them (a wrong prior's shape is not
        # read as a change of speed); over a full window one round barely moves the curve.
        curve = self.speed * self._curve(features)
        if curve > 0:
            # in logs: the ratio of a finite time to the curve can overflow (1e308 / 1e-3)
            error = math.log(seconds) - math.log(curve)
            self.log_speed += self._gain * max(-SPEED_STEP_LOG, min(SPEED_STEP_LOG, error))
        if abs(self.log_speed) > FOLD_LOG_SPEED:
            self._fold()

    def _fold(self) -> None:
        """Move the speed into the curve: the window's rows (each scaled by the speed it was
        measured at), the normal equations and θ as if every round had run at the speed now
        followed, and the speed back to 1. Every prediction stays as it was until the next refit."""
        c = self.speed
        for row, _ in self._rows:
            row[:] = [x / c for x in row]
        self._gram = [[x / (c * c) for x in r] for r in self._gram]
        self._rhs = [x / c for x in self._rhs]
        self.theta = [t * c for t in self.theta]
        self.log_speed = 0.0

    def _add(self, row: list[float], target: float, sign: float) -> None:
        n = len(row)
        for i in range(n):
            if row[i] == 0.0:
                continue
            self._rhs[i] += sign * row[i] * target  # measured / the row's unit
            for j in range(n):
                self._gram[i][j] += sign * row[i] * row[j]

    def _refit(self) -> None:
        gram = [r[:] for r in self._gram]
        rhs = self._rhs[:]
        g = self._prior_scale()
        mean_square = [self._gram[i][i] / len(self._rows) for i in range(len(rhs))]
        floor = UNSEEN_PULL * max(*mean_square, 1e-300)
        for i in range(len(rhs)):
            pull = self.prior.weight * max(mean_square[i], floor)  # `weight` average rounds
            gram[i][i] += pull
            rhs[i] += pull * g * self._theta0[i]
        self.theta = nnls_gram(gram, rhs, start=self.theta)  # the last answer: one solve, mostly

    def _prior_scale(self) -> float:
        """The one factor g that best scales the prior to the window's rounds (relative least
        squares, from the normal equations: O(terms²)). The prior pulls towards its own shape
        at this scale, so a machine many times slower or faster than the prior (a nominal
        guess, or a calibrated machine now loaded) is followed at once, not against the pull."""
        t0 = self._theta0
        n = len(t0)
        num = sum(self._rhs[i] * t0[i] for i in range(n))
        den = sum(t0[i] * self._gram[i][j] * t0[j] for i in range(n) for j in range(n))
        return num / den if num > 0 and den > 0 else 1.0
