"""A round's time as named terms (each with its work and source), and the fixed terms every
profile charges the same way whatever costs the work.

Fixed terms: ``fixed`` (per worker call: a call with prefill and a decode-only call may differ),
``layers`` (per decoder layer and call, a fitted CPU figure), ``sequences`` (per scheduled chunk)
and ``scheduler`` (the scheduler's modelled CPU time: overlapped with the worker call, only the
part longer than the call shows; in series, all of it). The terms' seconds sum to the round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from radixflow.costmodel.hardware.profiles import HardwareProfile
from radixflow.costmodel.kernel_times.contract import TermCost
from radixflow.costmodel.shape.chunk import ChunkShape

SCHEDULER = "scheduler"


@dataclass(frozen=True)
class RoundBreakdown:
    """One round: term name -> its part of the round's time."""

    terms: dict[str, TermCost]
    tp: int = 1  # GPUs the model runs on (tensor parallelism)
    fits: bool = True  # False: the model does not fit even on ``tp`` GPUs

    @property
    def seconds(self) -> float:
        """How far the round advances the clock: every term."""
        return sum(t.seconds for t in self.terms.values())

    @property
    def worker_call_s(self) -> float:
        """The worker call alone: every term but the scheduler's."""
        return sum(t.seconds for name, t in self.terms.items() if name != SCHEDULER)

    def to_json(self) -> dict[str, Any]:
        terms = {
            name: {"seconds": t.seconds, "flops": t.flops, "bytes": t.bytes, "source": t.source}
            for name, t in self.terms.items()
        }
        return {"seconds": self.seconds, "tp": self.tp, "fits": self.fits, "terms": terms}


def times(term: TermCost, count: float) -> TermCost:
    """``count`` calls of the same kernel."""
    return TermCost(term.seconds * count, term.flops * count, term.bytes * count, term.source)


def add(terms: dict[str, TermCost], name: str, cost: TermCost) -> None:
    """Charge ``cost`` to term ``name`` (mutates ``terms``)."""
    terms[name] = terms[name] + cost if name in terms else cost


def source(profile: HardwareProfile, key: str) -> str:
    """Where the profile's figure ``key`` comes from."""
    return profile.sources.get(key) or profile.sources.get("all") or f"hardware profile {profile.name!r}"


def _fixed(seconds: float, why: str) -> TermCost:
    return TermCost(seconds, 0.0, 0.0, why)


def fixed_terms(profile: HardwareProfile, chunks: Sequence[ChunkShape], layers: int) -> dict[str, TermCost]:
    """The costs of a worker call computing ``chunks`` on a model of ``layers`` decoder layers
    that are not priced by FLOPs: per call, per layer, per sequence, and the growth of per-token
    cost with the round's size (terms of zero cost left out, but ``fixed`` always there)."""
    decode_only = all(c.decode_step for c in chunks)  # a follower makes it a call with prefill
    key = "decode_overhead_s" if decode_only and profile.decode_overhead_s is not None else "round_overhead_s"
    terms = {"fixed": _fixed(profile.fixed_call_s(decode_only), source(profile, key))}
    if profile.layer_overhead_s:
        terms["layers"] = _fixed(profile.layer_overhead_s * layers, source(profile, "layer_overhead_s"))
    if profile.per_request_s:
        terms["sequences"] = _fixed(profile.per_request_s * len(chunks), source(profile, "per_request_s"))
    if profile.token_pair_s:
        pairs = float(sum(c.length for c in chunks)) ** 2
        terms["token_pairs"] = _fixed(profile.token_pair_s * pairs, source(profile, "token_pair_s"))
    return terms


def scheduler_s(profile: HardwareProfile, chunks: Sequence[ChunkShape]) -> float:
    """The scheduler's modelled CPU time for the round that scheduled ``chunks``."""
    prefill = sum(not c.decode for c in chunks)
    return profile.scheduler_round_s + profile.scheduler_chunk_s * prefill


def charge_scheduler(
    profile: HardwareProfile, chunks: Sequence[ChunkShape], terms: dict[str, TermCost]
) -> None:
    """Add the part of the scheduler's time the round shows to ``terms``, the whole worker call
    (mutates ``terms``; nothing when the profile models no scheduler time)."""
    spent = scheduler_s(profile, chunks)
    if spent <= 0:
        return
    call = sum(t.seconds for t in terms.values())
    shown = max(0.0, spent - call) if profile.scheduler_overlap else spent
    how = "overlapped with the worker call" if profile.scheduler_overlap else "in series with the call"
    terms[SCHEDULER] = _fixed(shown, f"{source(profile, SCHEDULER)} [{how}; {spent * 1e3:.3g} ms spent]")
