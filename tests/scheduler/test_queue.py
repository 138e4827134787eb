"""The waiting queue: FCFS order, O(1) removal, iteration that survives removal."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixflow.scheduler.queue import WaitingQueue
from radixflow.scheduler.request import Request


def queue_of(n: int) -> tuple[WaitingQueue, list[Request]]:
    q, reqs = WaitingQueue(), [Request(f"r{i}", (i + 1,)) for i in range(n)]
    for r in reqs:
        q.append(r)
    return q, reqs


def test_iteration_survives_removing_the_current_and_later_requests():
    q, r = queue_of(6)
    seen = []
    for req in q:
        seen.append(req.id)
        if req.id == "r1":
            q.remove(r[1])  # the one we stand on
            q.remove(r[3])  # one ahead of us
        if req.id == "r4":
            q.append(Request("late", (9,)))
    assert seen == ["r0", "r1", "r2", "r4", "r5", "late"]
    assert [x.id for x in q] == ["r0", "r2", "r4", "r5", "late"]
    assert len(q) == 5 and r[3] not in q and q.first() is r[0]


def test_iter_from_starts_at_the_given_request_and_duplicates_are_refused():
    q, r = queue_of(4)
    assert [x.id for x in q.iter_from(r[2])] == ["r2", "r3"]
    with pytest.raises(ValueError, match="already waiting"):
        q.append(r[0])


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30)), max_size=60))
def test_queue_matches_a_list_model(ops):
    q, model, n = WaitingQueue(), [], 0
    for add, pick in ops:
        if add or not model:
            req = Request(f"x{n}", (1,))
            n += 1
            q.append(req)
            model.append(req)
        else:
            victim = model.pop(pick % len(model))
            q.remove(victim)
        assert list(q) == model and len(q) == len(model) and q.first() is (model[0] if model else None)
