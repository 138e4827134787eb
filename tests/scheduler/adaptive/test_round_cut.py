"""The round's cut from the cost curve: a pure dynamic program over the ranked units."""

from __future__ import annotations

import pytest

from radixflow.scheduler.adaptive.round_cut import Horizon, Unit, cut

# four contexts of 768 tokens, each with its 8 candidates following it (a unit of 8 requests)
CONTEXTS = [Unit(768, 8)] * 4


def horizon(
    units: list[Unit] = CONTEXTS, behind: float = 0.0, budget: int = 2048, slots: int = 256
) -> Horizon:
    return Horizon(units, budget, slots, budget, slots, 0, behind)


def affine(fixed: float, per_token: float):
    return lambda tokens, chunks=1: fixed + per_token * tokens if tokens > 0 else 0.0


def test_a_linear_curve_gives_one_unit_per_round_in_rank_order():
    linear = affine(0.0, 0.001)
    choice = cut(horizon(), linear, linear)
    assert (choice.units, choice.fill) == (1, False)
    # the whole partition: every round one unit, each unit waited by the ones behind it
    assert choice.cost_s == pytest.approx(0.768 * (32 + 24 + 16 + 8))


def test_a_pure_fixed_cost_packs_the_round_to_its_budget():
    fixed = affine(1.0, 0.0)
    choice = cut(horizon(), fixed, fixed)
    # two whole units and a budget-cut chunk of the third: the fewest rounds (two)
    assert (choice.units, choice.fill) == (2, True)
    assert choice.cost_s == pytest.approx(1.0 * 32 + 1.0 * 16)


def test_requests_waiting_behind_the_horizon_shift_the_cut_towards_packing():
    curve = affine(0.2, 0.001)
    assert cut(horizon(behind=0.0), curve, curve).units == 1
    assert cut(horizon(behind=16.0), curve, curve).units == 2
    # the more wait behind, the larger the cut, never the smaller
    sizes = [cut(horizon(behind=b), curve, curve).units for b in (0, 4, 16, 64, 256)]
    assert sizes == sorted(sizes)


def test_the_first_round_holds_what_its_running_chunks_leave():
    linear = affine(0.0, 0.001)
    # 500 tokens of budget left: the first unit's producer is cut there
    h = Horizon(CONTEXTS, 2048, 256, 500, 256, 1, 0.0)
    choice = cut(h, lambda x, n=1: linear(x + 1548), linear)
    assert (choice.units, choice.fill) == (0, True)
    # no room at all: nothing to decide
    full = Horizon(CONTEXTS, 2048, 256, 0, 256, 1, 0.0)
    assert (cut(full, linear, linear).units, cut(full, linear, linear).fill) == (0, False)


def test_a_round_holds_no_more_chunks_than_its_slots():
    fixed = affine(1.0, 0.0)
    lone = [Unit(16, 1)] * 10
    h = Horizon(lone, 2048, 4, 2048, 3, 1, 0.0)
    assert cut(h, fixed, fixed).units == 3  # the three slots left in this round


def test_a_unit_is_not_left_for_longer_than_its_allowance():
    """On a linear curve the cut takes one unit (0.768 s); a unit behind it that may be held only
    0.5 s more makes that cut infeasible, so the round takes it too; one that may wait 1 s does
    not."""
    linear = affine(0.0, 0.001)
    tight = Horizon(CONTEXTS, 2048, 256, 2048, 256, 0, 0.0, allow=[float("inf"), 0.5, 9.0, 9.0])
    assert cut(tight, linear, linear).units == 2
    loose = Horizon(CONTEXTS, 2048, 256, 2048, 256, 0, 0.0, allow=[float("inf"), 1.0, 9.0, 9.0])
    assert cut(loose, linear, linear).units == 1


def test_a_unit_no_cut_can_take_whole_does_not_force_a_budget_cut_chunk():
    """The third unit cannot complete in this round (two units fill 1536 of the 2048 tokens):
    whatever the cut, it completes in a later round, so its short allowance does not make the
    round compute a chunk of it that completes nothing; the cut follows the curve (one unit).
    A unit the round could take whole still binds."""
    linear = affine(0.0, 0.001)
    beyond = Horizon(CONTEXTS, 2048, 256, 2048, 256, 0, 0.0, allow=[float("inf"), float("inf"), 0.5, 9.0])
    choice = cut(beyond, linear, linear)
    assert (choice.units, choice.fill) == (1, False)
    within = Horizon(CONTEXTS, 2048, 256, 2048, 256, 0, 0.0, allow=[float("inf"), 0.5, 0.5, 9.0])
    assert (cut(within, linear, linear).units, cut(within, linear, linear).fill) == (2, False)


def test_a_unit_of_thousands_of_budgets_is_cut_without_deep_recursion():
    """The plan walks the horizon one round at a time; a unit spanning a thousand rounds took one
    Python frame per round and raised RecursionError out of `schedule`, stopping the engine: under
    the default budget, 1500 prompts sharing a 512-token system prompt with 1500 tokens each (one
    unit: the producer and its followers' work), or a 32k-token prompt under a 16-token budget.
    The plan is unchanged by the unit's length."""
    linear = affine(0.01, 0.001)
    for tokens in (16 * 8, 16 * 2000, 16 * 20_000):
        h = Horizon([Unit(tokens, 1), Unit(8, 1)], 16, 8, 16, 8, 0, 0.0, beyond=True)
        choice = cut(h, linear, linear)
        assert (choice.units, choice.fill) == (0, True)
    batch = Unit(512 + 1500 * 1500, 1500, lead=2012)
    choice = cut(horizon([batch], budget=2048, slots=32), linear, linear)
    assert (choice.units, choice.fill, choice.lead) == (0, False, True)  # the producer alone
