"""The online round-time fit: it recovers known coefficients from noisy synthetic rounds, starting
from a prior far from them, keeps a bounded window, follows a change of machine, follows a
drifting machine speed within a few rounds without losing the shape of the curve, and prices a
token's growing cost in a large round."""

from __future__ import annotations

import math
import random
import re
import statistics

import pytest

from radixflow.costmodel.round_cost.fitted_rates import fit_feature_names
from radixflow.costmodel.round_cost.nnls import nnls, nnls_gram
from radixflow.costmodel.round_cost.online_fit import OnlineFit, Prior, nominal_prior, nominal_rates

NAMES = fit_feature_names()
# seconds per unit of each term: per call, per layer, per sequence, then per FLOP of each kind
TRUE = {
    "round": 0.020,
    "layer": 0.0,
    "sequence": 0.003,
    "matmul": 1 / 1.0e11,
    "attention": 2.0 / 1.0e11,
    "prefix_attention": 0.7 / 1.0e11,
    "gdn": 15.0 / 1.0e11,
    "mamba2": 0.0,
    "conv": 0.0,
    "lm_head": 1 / 1.0e11,
    "token_pairs": 0.0,
    "prefix_kv": 2e-9,
}
PARAMS = 5e6  # weights a token passes through (sizes chosen so every term has a real share)


def synthetic_round(rng: random.Random) -> list[float]:
    """Feature row of a random round, each term drawn on its own so that every term shows (in
    a model's real rounds some move together, e.g. matmul and recurrent FLOPs with the tokens;
    the fit then only needs their sum)."""
    row = dict.fromkeys(NAMES, 0.0)
    new, cached = rng.randint(1, 1024), rng.randint(0, 1536)
    row.update(
        round=1.0,
        layer=12.0,
        sequence=float(rng.randint(1, 16)),
        matmul=2 * PARAMS * rng.randint(1, 1024),
        attention=4 * 256 * new * (new + 1) / 2 * 3,
        prefix_attention=4 * 256 * new * cached * 3,
        prefix_kv=2 * 128 * cached * 3.0,
        gdn=2 * 128 * 128 * rng.randint(1, 1024) * 9,
        lm_head=2 * 256 * 32000 * rng.randint(1, 16),
        token_pairs=float(rng.randint(1, 2048)) ** 2,
    )
    return [row[n] for n in NAMES]


def seconds(row: list[float], truth: dict[str, float]) -> float:
    return sum(truth[n] * v for n, v in zip(NAMES, row, strict=True))


def test_nnls_on_normal_equations_matches_nnls_on_rows():
    rng = random.Random(3)
    rows = [[rng.uniform(0, 1) for _ in range(4)] for _ in range(30)]
    y = [2 * r[0] - 1.5 * r[1] + 0.5 * r[3] + rng.gauss(0, 0.01) for r in rows]  # one would be < 0
    gram = [[sum(r[i] * r[j] for r in rows) for j in range(4)] for i in range(4)]
    rhs = [sum(r[i] * t for r, t in zip(rows, y, strict=True)) for i in range(4)]
    assert nnls_gram(gram, rhs) == pytest.approx(nnls(rows, y), abs=1e-6)
    assert nnls_gram(gram, rhs)[1] == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_fit_recovers_known_terms_from_noisy_rounds(seed):
    rng = random.Random(seed)
    fit = OnlineFit(nominal_prior(threads=1), nominal_rates(threads=1))
    for _ in range(60):
        row = synthetic_round(rng)
        fit.observe(row, seconds(row, TRUE) * rng.uniform(0.98, 1.02))
    got = dict(zip(NAMES, fit.coefficients, strict=True))
    # within what 2% noise on a 32-round window allows for terms of a 10-40% share; the terms
    # these rounds tell apart (layer is a constant 12 here: it shares the call's cost)
    assert got["round"] + 12 * got["layer"] == pytest.approx(TRUE["round"], rel=0.2)
    for name in ("sequence", "matmul", "attention", "prefix_attention", "gdn"):
        assert got[name] == pytest.approx(TRUE[name], rel=0.2), name
    fresh = [synthetic_round(rng) for _ in range(50)]
    errors = [abs(fit.predict(r) - seconds(r, TRUE)) / seconds(r, TRUE) for r in fresh]
    assert statistics.median(errors) < 0.03


def test_a_fresh_fit_is_rough_then_converges_within_a_few_rounds():
    rng = random.Random(1)
    prior = nominal_prior(threads=1)
    fit = OnlineFit(prior, nominal_rates(threads=1))
    unseen = [synthetic_round(rng) for _ in range(50)]
    before = [abs(fit.predict(r) - seconds(r, TRUE)) / seconds(r, TRUE) for r in unseen]
    assert statistics.median(before) > 0.2  # the nominal prior is far from this machine
    errors = []
    for _ in range(40):
        row = synthetic_round(rng)
        truth = seconds(row, TRUE)
        errors.append(abs(fit.predict(row) - truth) / truth)
        fit.observe(row, truth * rng.uniform(0.97, 1.03))
    assert statistics.median(errors[10:]) < 0.1


def test_window_is_bounded_and_a_change_of_rates_is_followed():
    rng = random.Random(2)
    prior = nominal_prior(threads=1)
    fit = OnlineFit(prior, nominal_rates(threads=1), window=16)
    for _ in range(40):
        row = synthetic_round(rng)
        fit.observe(row, seconds(row, TRUE))
    slower = {k: 2 * v for k, v in TRUE.items()}  # the machine got busy: everything twice as slow
    for _ in range(20):
        row = synthetic_round(rng)
        fit.observe(row, seconds(row, slower))
    assert len(fit._rows) == 16 and fit.rounds == 60
    row = synthetic_round(rng)
    assert fit.predict(row) == pytest.approx(seconds(row, slower), rel=0.1)  # the old rates: 50% off


def test_a_term_the_prior_sets_to_zero_can_still_be_learned():
    scale = nominal_rates(threads=1)
    coef = tuple(0.0 if n == "matmul" else c for n, c in zip(NAMES, scale, strict=True))
    zero_matmul = Prior(coef, 2.0, "t")
    fit = OnlineFit(zero_matmul, scale)
    rng = random.Random(4)
    for _ in range(40):
        row = synthetic_round(rng)
        fit.observe(row, seconds(row, TRUE))
    assert fit.coefficients[NAMES.index("matmul")] > 0.5 * TRUE["matmul"]


def test_a_round_without_time_is_no_evidence():
    prior = nominal_prior(threads=1)
    fit = OnlineFit(prior, nominal_rates(threads=1))
    fit.observe(synthetic_round(random.Random(5)), 0.0)
    assert fit.rounds == 0 and fit.coefficients == pytest.approx(list(prior.coefficients))


def sized_round(tokens: int, attention: bool = True) -> list[float]:
    """Feature row of one chunk of ``tokens`` after 512 cached (every term consistent with it);
    ``attention`` False: a model without attention layers."""
    row = dict.fromkeys(NAMES, 0.0)
    row.update(
        round=1.0,
        layer=12.0,
        sequence=1.0,
        matmul=2 * PARAMS * tokens,
        attention=4 * 256 * tokens * (tokens + 1) / 2 * 3 * attention,
        prefix_attention=4 * 256 * tokens * 512 * 3 * attention,
        prefix_kv=2 * 128 * 512 * 3.0 * attention,
        gdn=2 * 128 * 128 * tokens * 9,
        lm_head=2 * 256 * 32000,
        token_pairs=float(tokens) ** 2,
    )
    return [row[n] for n in NAMES]


def relative_error(fit: OnlineFit, row: list[float], truth: dict[str, float]) -> float:
    return abs(fit.predict(row) - seconds(row, truth)) / seconds(row, truth)


def test_a_drifting_machine_speed_is_followed_within_a_few_rounds():
    """The machine gets 20% slower (a shared machine's load): every term at once. A window of
    rounds alone would take about half its length to follow; the speed follows in a few."""
    rng = random.Random(6)
    prior = nominal_prior(threads=1)
    fit = OnlineFit(prior, nominal_rates(threads=1))
    for _ in range(60):
        row = synthetic_round(rng)
        fit.observe(row, seconds(row, TRUE) * rng.uniform(0.98, 1.02))
    slower = {k: 1.2 * v for k, v in TRUE.items()}
    errors = []
    for _ in range(12):
        row = synthetic_round(rng)
        errors.append(relative_error(fit, row, slower))
        fit.observe(row, seconds(row, slower) * rng.uniform(0.98, 1.02))
    assert errors[0] > 0.1  # the step itself is news to any predictor
    assert statistics.median(errors[4:]) < 0.05


def test_the_curve_keeps_its_shape_while_the_speed_moves():
    """Small rounds run at one speed, then only large rounds while the machine is 20% slower:
    the next small round is priced at the new speed on the curve the small rounds showed (a fit
    over the window alone reads the large rounds' slowdown as the large rounds' price)."""
    rng = random.Random(7)
    prior = nominal_prior(threads=1)
    fit = OnlineFit(prior, nominal_rates(threads=1))
    for _ in range(40):
        row = sized_round(rng.choice([16, 32, 64, 1024, 2048]))  # the curve's shape: both ends
        fit.observe(row, seconds(row, TRUE) * rng.uniform(0.98, 1.02))
    for _ in range(30):
        row = sized_round(32)
        fit.observe(row, seconds(row, TRUE) * rng.uniform(0.98, 1.02))
    slower = {k: 1.2 * v for k, v in TRUE.items()}
    for _ in range(30):
        row = sized_round(2048)
        fit.observe(row, seconds(row, slower) * rng.uniform(0.98, 1.02))
    assert relative_error(fit, sized_round(32), slower) < 0.05
    assert relative_error(fit, sized_round(2048), slower) < 0.05


def test_a_token_costs_more_in_a_large_round_and_both_ends_are_priced():
    """A token's cost growing with the round's size (a quadratic term, as on a CPU whose caches a
    large round outgrows), on a model without attention (no other term grows faster than its
    tokens): rounds of 32 and of 2048 tokens both priced within a few percent."""
    superlinear = TRUE | {"token_pairs": 2e-8}
    share = 2e-8 * 2048**2 / seconds(sized_round(2048, attention=False), superlinear)
    assert 0.15 < share < 0.4
    rng = random.Random(8)
    prior = nominal_prior(threads=1)
    fit = OnlineFit(prior, nominal_rates(threads=1))
    for _ in range(60):
        row = sized_round(rng.randint(16, 2048), attention=False)
        fit.observe(row, seconds(row, superlinear) * rng.uniform(0.98, 1.02))
    for tokens in (32, 256, 2048):
        assert relative_error(fit, sized_round(tokens, attention=False), superlinear) < 0.04, tokens


@pytest.mark.parametrize("seed", range(12))
def test_a_warm_start_finds_the_cold_answer(seed: int) -> None:
    """Whatever set a previous answer suggests (the right one, a wrong one, an empty one), the
    warm-started solve ends at the same unique optimum as the cold one."""
    rng = random.Random(seed)
    n = 7
    rows = [[rng.random() for _ in range(n)] for _ in range(30)]
    truth = [rng.choice([0.0, rng.random()]) for _ in range(n)]
    y = [sum(r * t for r, t in zip(row, truth, strict=True)) + rng.gauss(0, 0.05) for row in rows]
    gram = [[sum(r[i] * r[j] for r in rows) + (1e-9 if i == j else 0.0) for j in range(n)] for i in range(n)]
    rhs = [sum(r[i] * yi for r, yi in zip(rows, y, strict=True)) for i in range(n)]
    cold = nnls_gram(gram, rhs)
    for start in (cold, [1.0] * n, [0.0] * n, [rng.choice([0.0, 1.0]) for _ in range(n)]):
        assert nnls_gram(gram, rhs, start=start) == pytest.approx(cold, abs=1e-9)


def test_noisy_rounds_do_not_drive_the_speed_and_curve_apart_until_they_overflow():
    """Only speed x curve is predicted; rounds of the same shapes measured far apart (here 10 ms
    and 1 s in turn) pushed the speed up and the curve down a little more every round, until
    the normal equations overflowed and every prediction was 0 (after ~350 rounds here; at a
    log-normal sigma of 0.5, within tens of thousands)."""
    rng = random.Random(3)
    rows = [synthetic_round(rng) for _ in range(8)]
    fit = OnlineFit(nominal_prior(threads=1), nominal_rates(threads=1))
    for i in range(1000):
        fit.observe(rows[i % 8], 1e-2 if i % 2 else 1.0)
        predictions = [fit.predict(row) for row in rows]
        assert all(1e-6 < p < 1e3 for p in predictions), (i, predictions)
    assert 1e-6 < fit.speed < 1e6


@pytest.mark.parametrize("outlier", [1.7e308, math.inf])
def test_a_round_of_absurd_length_leaves_the_predictions_finite(outlier: float):
    """A finite time whose ratio to the prediction overflows (seconds / curve) made the speed
    infinite, every prediction infinite and the next round a ZeroDivisionError; an infinite
    time (a clock that never stopped) is no evidence at all."""
    rng = random.Random(4)
    rows = [synthetic_round(rng) for _ in range(4)]
    fit = OnlineFit(nominal_prior(threads=1), nominal_rates(threads=1))
    for i, t in enumerate([0.05, 0.05, outlier, 0.05, 0.05]):
        fit.observe(rows[i % 4], t)
        assert all(math.isfinite(fit.predict(row)) and fit.predict(row) > 0 for row in rows), i


def errors_over(fit: OnlineFit, rng: random.Random, rounds: int) -> list[float]:
    """Each of ``rounds`` rounds' relative error as predicted, then observed at its true price
    within 5% (mutates ``fit``)."""
    errors = []
    for _ in range(rounds):
        row = synthetic_round(rng)
        errors.append(relative_error(fit, row, TRUE))
        fit.observe(row, seconds(row, TRUE) * rng.uniform(0.95, 1.05))
    return errors


def settled(rng: random.Random) -> OnlineFit:
    """A fit from the nominal prior after 150 rounds measured at their true price, within 5%."""
    fit = OnlineFit(nominal_prior(threads=1), nominal_rates(threads=1))
    for _ in range(150):
        row = synthetic_round(rng)
        fit.observe(row, seconds(row, TRUE) * rng.uniform(0.95, 1.05))
    return fit


@pytest.mark.parametrize("factor", [10.0, 0.1, 1e-300])
def test_one_round_measured_far_off_does_not_poison_the_window(factor: float):
    """One round measured 10x too short (a clock misread, a round that skipped its work) was
    weighed by its relative error, which has no bound for a round shorter than its price: it
    outweighed the whole window, and rounds were priced 30% off until it left the window 128
    rounds later (at 1e-300 s every prediction was 0). Past the speed's few rounds of recovery,
    a round measured far off either way is as good as gone."""
    rng = random.Random(9)
    fit = settled(rng)
    row = synthetic_round(rng)
    fit.observe(row, seconds(row, TRUE) * factor)
    errors = errors_over(fit, rng, 60)
    assert statistics.median(errors[20:]) < 0.05, statistics.median(errors[20:])


def stale_prior() -> Prior:
    """A stored profile of this model whose delta rule has since got 3x faster (a kernel change
    since calibrate), at the weight a stored profile's prior has (`profile_prior`)."""
    return Prior(tuple(TRUE[n] * (3.0 if n == "gdn" else 1.0) for n in NAMES), 2.0, "stale profile")


def test_the_fit_does_not_depend_on_the_unit_its_coefficients_are_fitted_in():
    """``scale`` is the unit of each coefficient, nothing more: the prior's pull was proportional
    to a term's mean row, not its square, so it grew as the unit shrank (and with a term's share)."""
    rng = random.Random(10)
    unit = nominal_rates(threads=1)
    fits = [OnlineFit(stale_prior(), unit), OnlineFit(stale_prior(), [u * 100 for u in unit])]
    for _ in range(40):
        row = synthetic_round(rng)
        t = seconds(row, TRUE) * rng.uniform(0.95, 1.05)
        for fit in fits:
            fit.observe(row, t)
    rows = [synthetic_round(rng) for _ in range(10)]
    assert [fits[0].predict(r) for r in rows] == pytest.approx([fits[1].predict(r) for r in rows], rel=1e-4)


def test_a_stored_profile_off_in_one_term_is_learned_out_within_the_window():
    """The prior counts as its weight in rounds of evidence: a window of rounds outweighs it
    (its pull held the predictions 6-7% off for good, on rounds of 5% noise)."""
    rng = random.Random(2)
    fit = OnlineFit(stale_prior(), nominal_rates(threads=1))
    errors = errors_over(fit, rng, 200)
    assert statistics.median(errors[100:]) < 0.03, statistics.median(errors[100:])


def test_one_round_stalled_far_past_its_price_moves_the_speed_by_a_bounded_step():
    """A round 100x its price (a worker call descheduled on a shared machine, on the wall clock)
    moved the speed by a quarter of log(100), x3.2: the next rounds were priced +215%, +134%,
    +96%, ... A genuine change of speed of up to 4x a round is followed as before."""
    rng = random.Random(11)
    fit = settled(rng)
    row = synthetic_round(rng)
    fit.observe(row, seconds(row, TRUE) * 100)
    errors = errors_over(fit, rng, 20)
    assert errors[0] < 0.5 and statistics.median(errors[3:]) < 0.1, errors[:6]


@pytest.mark.parametrize(
    ("window", "weight", "first", "says"),
    [
        (0, 2.0, 1e-3, "window must hold at least 12 rounds (one per term), got 0"),
        (8, 2.0, 1e-3, "window must hold at least 12 rounds (one per term), got 8"),
        (128, -1.0, 1e-3, "prior weight must be a finite number >= 0, got -1.0"),
        (128, math.nan, 1e-3, "prior weight must be a finite number >= 0, got nan"),
        (128, 2.0, -1e-3, "prior coefficient 'round' must be a finite number >= 0, got -0.001"),
        (128, 2.0, math.inf, "prior coefficient 'round' must be a finite number >= 0, got inf"),
    ],
)
def test_a_fit_that_would_divide_by_zero_or_go_negative_is_refused(window, weight, first, says):
    """A window of 0 rounds was taken, and the first measured round divided by the empty window
    (ZeroDivisionError on the first round observed); one of fewer rounds than the curve has
    terms cannot tell them apart (the curve fits each window exactly, so the speed learns
    nothing: a window of 8 priced rounds up to 90% off where 128 price them within 3%); a
    negative prior weight or coefficient was taken too, and predicted rounds of negative seconds
    before any evidence came."""
    scale = nominal_rates(threads=1)
    prior = Prior((first, *scale[1:]), weight, "t")
    with pytest.raises(ValueError, match=re.escape(says)):
        OnlineFit(prior, scale, window=window)
