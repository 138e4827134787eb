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
