"""Building a workload from its `WorkloadSpec`: every request's tokens drawn from the spec's seed,
the requests put in queue order, and their arrival times."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

from radixflow.scheduler.request import Request
from radixflow.workloads.candidates import WorkloadSpec
from radixflow.workloads.workload import INDEPENDENT, RequestTag, Workload


def build_workload(spec: WorkloadSpec) -> Workload:
    """Requests in queue order with arrival times, and their tags; fully determined by ``spec``."""
    spec.validate()
    rng = random.Random(spec.seed)
    draw = lambda n: tuple(rng.randrange(spec.vocab_size) for _ in range(n))  # noqa: E731
    system = draw(spec.shared_prefix_len)  # empty (and no draw) unless nested sharing is asked for
    tags: dict[str, RequestTag] = {}
    groups: list[list[Request]] = []
    for g, size in enumerate(spec.group_sizes()):
        context = system + draw(spec.context_len)
        ns = f"ns{g % spec.namespaces}"
        prompts = (
            _chat_turns(context, size, spec.candidate_len, draw)
            if spec.kind == "chats"
            else [context + draw(spec.candidate_len) for _ in range(size)]
        )
        groups.append([Request(f"g{g}c{k}", p, ns) for k, p in enumerate(prompts)])
        tags.update((r.id, RequestTag(group=g)) for r in groups[-1])
    independent = [
        Request(f"i{j}", draw(spec.context_len + spec.candidate_len), "ns0") for j in range(spec.independent)
    ]
    tags.update((r.id, RequestTag(kind=INDEPENDENT)) for r in independent)
    queue = _queue(groups, independent, spec, rng)
    for req, t in zip(queue, _arrivals(spec, len(queue), rng), strict=True):
        req.arrival_s = t
    return Workload(queue, {r.id: tags[r.id] for r in queue})


def _chat_turns(
    context: tuple[int, ...], turns: int, step: int, draw: Callable[[int], tuple[int, ...]]
) -> list[tuple[int, ...]]:
    """A conversation's prompts: each turn is the previous one plus a reply and a new message."""
    prompts, prompt = [], context
    for _ in range(turns):
        prompt = prompt + draw(step)
        prompts.append(prompt)
    return prompts


def _queue(
    groups: list[list[Request]], independent: list[Request], spec: WorkloadSpec, rng: random.Random
) -> list[Request]:
    """The requests in queue order. Shuffled chats keep each conversation's turns in order (a turn
    extends the one before it, so it cannot come first): the conversations and the independent
    requests are merged at random."""
    if spec.kind == "chats" and spec.order == "shuffled":
        return _merge([*groups, *([r] for r in independent)], rng)
    return _mix(_order(groups, spec.order, rng), independent, spec.order == "shuffled", rng)


def _merge(sequences: list[list[Request]], rng: random.Random) -> list[Request]:
    """A random interleaving of ``sequences`` that keeps each one's own order."""
    picks = [i for i, seq in enumerate(sequences) for _ in seq]
    rng.shuffle(picks)
    heads = [iter(seq) for seq in sequences]
    return [next(heads[i]) for i in picks]


def _order(groups: list[list[Request]], order: str, rng: random.Random) -> list[Request]:
    if order == "interleaved":
        return _interleave(groups)
    flat = [r for g in groups for r in g]
    if order == "shuffled":
        rng.shuffle(flat)
    return flat


def _interleave(groups: list[list[Request]]) -> list[Request]:
    """Every group's first request in group order, then every second one, and so on; each turn
    walks only the groups that still have one (walking all of them up to the largest group's
    size was billions of steps for one large group among many small ones)."""
    out: list[Request] = []
    active, k = [g for g in groups if g], 0
    while active:
        out.extend(g[k] for g in active)
        k += 1
        active = [g for g in active if len(g) > k]
    return out


def _mix(queue: list[Request], extra: list[Request], shuffle: bool, rng: random.Random) -> list[Request]:
    """Insert independent requests through the queue (randomly when shuffled). Each goes in at its
    share of the queue as it stands by then, which already holds the ones before it, so they lie
    denser towards the front than evenly spread ones would. Kept so: the frozen grids' workloads
    and their figures in docs/ were made with it."""
    if shuffle:
        out = queue + extra
        rng.shuffle(out)
        return out
    # Where the j-th goes, (j + 1) * (len(queue) + j) // (len(extra) + 1), never decreases, so
    # nothing is inserted before it again: the requests ahead of it are final. Each request is
    # moved once (inserting into the whole list moved those after it each time: about 10 minutes at 2^20).
    final: list[Request] = []
    rest = deque(queue)  # after the final ones, in order
    for j, req in enumerate(extra):
        at = (j + 1) * (len(queue) + j) // (len(extra) + 1)
        final.extend(rest.popleft() for _ in range(at - len(final)))
        rest.appendleft(req)
    return final + list(rest)


def _arrivals(spec: WorkloadSpec, n: int, rng: random.Random) -> list[float]:
    if spec.arrival == "batch":
        return [0.0] * n
    if spec.arrival == "poisson":
        t, out = 0.0, []
        for _ in range(n):
            out.append(t)
            t += rng.expovariate(spec.rate)
        return out
    if spec.burst_size >= n:  # one burst (and no gap to compute: a huge burst overflowed a float)
        return [0.0] * n
    gap = spec.burst_size / spec.rate  # bursty: same mean rate, arriving in clumps
    return [(i // spec.burst_size) * gap for i in range(n)]
