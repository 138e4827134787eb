"""Rollouts: what serving the head of the queue one way or another costs in mean latency.

An abstract model of the queue: jobs in scan order, each a prompt to compute that completes
one request and then releases consumers (its siblings, which reuse its checkpoint the round
after it completes). Rounds take released consumers first, then jobs in order, within the token
budget, and cost what the round-time model says. Two ways to end a round:

- whole: before the first job that does not fit (rounds stay short, as `native`'s do);
- full: that job starts anyway and the round is full (fewer rounds, as `radixflow`'s).

The cost is the sum of the completion times; the policy serves the queue the cheaper way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from radixflow.scheduler.shapes import Shape


@dataclass(frozen=True)
class Job:
    work: int  # prompt tokens to compute
    consumers: int = 0  # requests released when it completes
    consumer_work: int = 0  # what each of them computes then


@dataclass(frozen=True)
class Start:
    """The round as the scan finds it (running requests' chunks)."""

    tokens: int = 0
    completions: int = 0


@dataclass(frozen=True)
class Arrivals:
    """Requests still to come: ``count`` of them, ``rate`` per second, each a job of ``work``."""

    rate: float = 0.0
    work: int = 0
    count: int = 0


def jobs(shapes: Iterable[Shape]) -> list[Job]:
    """The queue as jobs, in scan order: a group's first member (its producer) stands for the
    group, releasing the others as consumers; everything else is a job of its own."""
    out: list[Job | None] = []
    groups: dict[int, list[int]] = {}  # group -> [job index, producer work, siblings, after]
    for shape in shapes:
        if shape.consumer or shape.dependents == 0 or shape.group is None:
            out.append(Job(shape.remaining))
        elif shape.group.node_id in groups:
            groups[shape.group.node_id][2] += 1
        else:
            groups[shape.group.node_id] = [len(out), shape.remaining, 0, shape.after]
            out.append(None)
    for index, work, siblings, after in groups.values():
        out[index] = Job(work, siblings, after)
    return [job for job in out if job is not None]


def cost(
    jobs: Sequence[Job],
    start: Start,
    budget: int,
    seconds: Callable[[int], float],
    full: bool,
    arrivals: Arrivals = Arrivals(),
) -> float:
    """Sum of completion times of ``jobs``, their consumers and the arrivals to come (from now),
    rounds ending the ``full`` way."""
    queue = deque([job.work, job] for job in jobs)
    released: deque[list[int]] = deque()  # [count, work each]
    clock = total = 0.0
    tokens, done = start.tokens, start.completions
    coming, gap = arrivals.count, 1.0 / arrivals.rate if arrivals.rate > 0 else 0.0
    due = gap  # when the next one arrives
    newcomer = Job(arrivals.work)
    while queue or released or (coming and gap):
        while coming and gap and due <= clock:
            queue.append([newcomer.work, newcomer])
            coming, due = coming - 1, due + gap
        if not queue and not released:
            clock = due  # idle until the next arrival
            continue
        tokens, done, freed = _fill_round(queue, released, budget, tokens, done, full)
        clock += seconds(tokens)
        total += done * clock
        released.extend(freed)
        tokens = done = 0
    return total


def _fill_round(
    queue: deque[list], released: deque[list[int]], budget: int, tokens: int, done: int, full: bool
) -> tuple[int, int, list[list[int]]]:
    while released and tokens < budget:
        count, each = released[0]
        fit = min(count, (budget - tokens) // max(each, 1))
        if fit == 0:
            break
        tokens, done = tokens + fit * each, done + fit
        if fit < count:
            released[0][0] -= fit
            break
        released.popleft()
    freed: list[list[int]] = []
    while queue and tokens < budget:
        left, job = queue[0]
        if left <= budget - tokens:
            tokens, done = tokens + left, done + 1
            queue.popleft()
            if job.consumers:
                freed.append([job.consumers, job.consumer_work])
        elif full or done == 0:  # a round of nothing but this chunk delays nobody
            queue[0][0] -= budget - tokens
            tokens = budget
        else:
            break
    if tokens == 0 and released:  # a consumer longer than the budget: it queues as a job
        released[0][0] -= 1
        each = released[0][1]
        if released[0][0] == 0:
            released.popleft()
        queue.appendleft([each, Job(each)])
    if tokens == 0 and queue:  # nothing fits: a job longer than the budget runs alone
        queue[0][0] -= budget
        tokens = budget
    return tokens, done, freed
