"""Scheduling policies behind one protocol and a registry."""

from __future__ import annotations

import pytest

from radixflow.cache.types import Match
from radixflow.scheduler import Request, ScanAction, make_policy
from radixflow.scheduler.output import SchedulerOutput

BLOCKED = Match(
    kv_tokens=64, checkpoint_tokens=64, checkpoint_ready=False, producer="p", checkpoint_slot=3, handle=None
)


def test_native_stops_and_radixflow_skips_at_a_blocked_consumer():
    req = Request("c", (1, 2, 3))
    assert make_policy("native").on_blocked(req, BLOCKED, SchedulerOutput(0)) is ScanAction.STOP
    assert make_policy("radixflow").on_blocked(req, BLOCKED, SchedulerOutput(0)) is ScanAction.SKIP


def test_both_keep_arrival_order():
    queue = [Request(str(i), (i,)) for i in range(5)]
    for name in ("native", "radixflow"):
        assert make_policy(name).order(queue) == queue


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        make_policy("shortest-first")


def test_each_policy_names_a_registered_placement_of_its_own():
    from radixflow.scheduler import PLACEMENTS, SCHEDULING_POLICIES
    from radixflow.scheduler.policy import default_placement

    assert {name: default_placement(name) for name in SCHEDULING_POLICIES} == {
        "native": "branch",
        "radixflow": "branch",
        "adaptive": "lone",
    }
    assert all(default_placement(name) in PLACEMENTS for name in SCHEDULING_POLICIES)
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        default_placement("shortest-first")
