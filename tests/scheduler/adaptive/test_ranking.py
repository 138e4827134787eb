"""The rank index: order by deadline, lazy removal, aging under newcomers, no rescans."""

from __future__ import annotations

from radixflow.scheduler.adaptive.ranking import RankIndex
from radixflow.scheduler.request import Request, RequestStatus


def req(i: int) -> Request:
    return Request(f"r{i}", (i + 1,))


def test_scan_goes_by_deadline_and_breaks_ties_by_arrival():
    index, reqs = RankIndex(), [req(i) for i in range(4)]
    for r, slack in zip(reqs, [5.0, 1.0, 1.0, 0.0], strict=True):
        index.add(r, 0, slack)
    assert [r.id for r in index.scan()] == ["r3", "r1", "r2", "r0"]


def test_rekey_supersedes_and_a_request_that_left_is_dropped_once():
    dropped: list[str] = []
    index, reqs = RankIndex(on_drop=lambda r: dropped.append(r.id)), [req(i) for i in range(3)]
    for r in reqs:
        index.add(r, 0, 1.0)
    index.rekey(reqs[2], 0.0)
    reqs[0].status = RequestStatus.RUNNING
    assert [r.id for r in index.scan()] == ["r2", "r1"]
    assert dropped == ["r0"] and len(index) == 2
    assert [r.id for r in index.scan()] == ["r2", "r1"]  # what a scan visited is put back
    assert dropped == ["r0"]


def test_aging_bounds_a_wait_under_a_stream_of_newcomers():
    """One admission per round, one newcomer with slack 1 per round: a request with slack S is
    admitted by round S + 1, however many newcomers with less work keep arriving."""
    for slack in (0.0, 3.0, 17.5, 40.0):
        index, old = RankIndex(), req(-1)
        index.add(old, 0, slack)
        admitted_in = None
        for round_index in range(200):
            index.add(req(round_index), round_index, 1.0)
            first = next(iter(index.scan()))
            first.status = RequestStatus.RUNNING
            if first is old:
                admitted_in = round_index
                break
        assert admitted_in is not None and admitted_in <= slack + 1, (slack, admitted_in)


def test_a_scan_visits_what_it_takes_not_the_queue():
    """10k waiting: a round that takes five pops a bounded number of entries, round after round."""
    index = RankIndex()
    for i in range(10_000):
        index.add(req(i), 0, float(i % 97))
    for _ in range(20):
        before = index.pops
        scan = index.scan()
        for _ in range(5):
            next(scan).status = RequestStatus.RUNNING
        assert index.pops - before <= 10  # the five taken, and the five dropped from the last round


def test_a_new_request_reusing_a_done_ones_id_is_ranked_whatever_its_deadline():
    """An engine takes an id again once the request that had it is forgotten; the index drops an
    admitted request's entry only at the next scan. A newcomer with that id and the same deadline
    found the old entry live and pushed none of its own; the next scan then dropped the old
    request and, with it, every book kept under the id: the newcomer waited unranked forever
    (a round with nothing else to run raised 'empty round')."""
    dropped: list[Request] = []
    index = RankIndex(on_drop=dropped.append)
    old = Request("x", (1, 2))
    index.add(old, 0, 2.0)
    assert [r.id for r in index.scan()] == ["x"]
    old.status = RequestStatus.FINISHED  # admitted, finished, forgotten by the engine
    new = Request("x", (3, 4))
    index.add(new, 1, 1.0)  # deadline 2.0, as the old one's
    assert list(index.scan()) == [new]
    assert dropped == [] and len(index) == 1
