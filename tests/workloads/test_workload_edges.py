"""Workload specs and traces at their edges: sizes past a float's range, line numbers."""

from __future__ import annotations

import pytest

from radixflow.workloads.candidates import WorkloadSpec

HUGE = 10**400  # past a float's range: an integer a TOML key or a flag may still spell


@pytest.mark.parametrize(
    "key, refused",
    [("groups", True), ("candidates", True), ("independent", True), ("context_len", True),
     ("burst_size", False), ("seed", False)],  # a burst of them all at t=0, a seed: fine
)  # fmt: skip
def test_an_integer_past_a_float_s_range_is_a_problem_not_an_overflow(key, refused):
    # math.isfinite(10**400) raised OverflowError: a traceback from `bench --groups` and a TOML cell
    problem = WorkloadSpec(**{key: HUGE, "arrival": "bursty"}).problem()
    assert (problem.param, "too large" in problem.message) == (key, True) if refused else problem is None


def test_a_huge_group_count_is_refused_as_too_large():
    problem = WorkloadSpec(groups=HUGE).problem()
    assert problem is not None and problem.param == "groups" and "too large" in problem.message


@pytest.mark.parametrize("groups", [str(HUGE), "9" * 4300], ids=["1e400", "4300 digits"])
def test_bench_refuses_a_huge_group_count_in_one_short_line(capsys, groups):
    # 4300 digits: the message's request count, 8 x groups, was past what str() converts (ValueError)
    from radixflow.cli import main

    assert main(["bench", "--runner", "sim", "--groups", groups]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "--groups" in err and len(err) < 400
