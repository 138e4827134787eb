"""The ceiling under memory pressure: what a cache that knows the future would reuse on the same
request trace, against LRU in the same model and the engine's own `lru` and `cost-per-byte`.

An analysis tool, not a policy: the oracle reads the whole trace. The model is a sequential one
(requests served one at a time in arrival order, no concurrency, no decode), over whole blocks:

- a request resumes at the deepest cached checkpoint whose KV above it is all cached (a model
  without recurrent layers: at the end of its cached KV), at most up to the last whole block
  before its final token (that token's logits are computed);
- it then caches its prompt's KV and a checkpoint at its tail and at the deepest prefix a later
  request shares (the best placement: the oracle knows where later requests fork);
- the cache then evicts down to the same byte budget the engine cell has (`under_pressure`). A KV
  block takes every cached entry below it (checkpoints included) with it.

Eviction orders: ``belady`` evicts the entry whose next use is farthest (deeper first on ties),
``belady-bytes`` the one with the largest distance-to-next-use x bytes, ``lru`` the least
recently used (deeper first). Neither Belady order is optimal with entries of two sizes, so the
ceiling is the better of the two; the model's lru shows how far the model is from the engine.

    python benchmarks/memory_oracle.py --models qwen3_5-2b nemotron_h-8b --fractions 0.1 0.25
"""

from __future__ import annotations

import argparse
import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from memory_pressure import WORKLOADS, run

from radixflow.bench.pressure import measure_working_set, under_pressure
from radixflow.bench.provenance import write_figures
from radixflow.cli.args import non_negative_int, positive_float
from radixflow.options import EngineOptions
from radixflow.problems import ProblemError, flag
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

RATES = {"qwen3_next-80b-a3b": 12.0, "nemotron_h-8b": 12.0, "lfm2-1.2b": 55.0, "qwen3-4b": 20.0}
INF = float("inf")


@dataclass(frozen=True)
class Trace:
    """A workload's prompts as chains of block-prefix ids, in arrival order."""

    block: int  # tokens per block
    paths: list[list[int]]  # prefix id of each whole block of each prompt
    limits: list[int]  # blocks each request may resume from at most
    tokens: list[int]  # prompt lengths
    children: dict[int, set[int]]  # prefix id -> the ids one block longer
    depth: dict[int, int]
    uses: dict[int, list[int]]  # prefix id -> indices of the requests whose prompt holds it

    def next_use(self, pid: int, t: int) -> float:
        """The first request after ``t`` whose prompt holds prefix ``pid``; INF if none. Pure."""
        uses = self.uses[pid]
        i = bisect.bisect_right(uses, t)
        return uses[i] if i < len(uses) else INF


def build_trace(spec: WorkloadSpec, block: int) -> Trace:
    ids: dict[tuple[int, tuple[int, ...]], int] = {}
    paths, limits, tokens = [], [], []
    children: dict[int, set[int]] = {}
    depth: dict[int, int] = {}
    uses: dict[int, list[int]] = {}
    for t, req in enumerate(build_workload(spec).requests):
        path, prev = [], -hash(req.namespace)
        for i in range(len(req.prompt) // block):
            key = (prev, req.prompt[i * block : (i + 1) * block])
            pid = ids.setdefault(key, len(ids))
            if i:
                children.setdefault(prev, set()).add(pid)
            depth[pid] = i
            uses.setdefault(pid, []).append(t)
            path.append(pid)
            prev = pid
        paths.append(path)
        limits.append((len(req.prompt) - 1) // block)
        tokens.append(len(req.prompt))
    return Trace(block, paths, limits, tokens, children, depth, uses)


@dataclass
class ModelCache:
    """Cached entries of the sequential model: ("kv" | "ck", prefix id) -> bytes."""

    trace: Trace
    block_bytes: int
    checkpoint_bytes: int
    recurrent: bool
    budget: int
    entries: dict[tuple[str, int], int] = field(default_factory=dict)
    last: dict[tuple[str, int], int] = field(default_factory=dict)  # last request that used it
    used: int = 0

    def serve(self, t: int) -> int:
        """Request ``t``'s reused tokens; touches what it matched."""
        path, best, held = self.trace.paths[t], 0, 0
        for i, pid in enumerate(path[: self.trace.limits[t]]):
            if ("kv", pid) not in self.entries:
                break
            held = i + 1
            self.last[("kv", pid)] = t
            if ("ck", pid) in self.entries:
                best = i + 1
                self.last[("ck", pid)] = t
        return self.trace.block * (held if not self.recurrent else best)

    def insert(self, t: int) -> None:
        """Request ``t``'s KV and its checkpoints: at the tail and where a later request forks."""
        path = self.trace.paths[t]
        for pid in path:
            self._add(("kv", pid), self.block_bytes, t)
        if not self.recurrent or not path:
            return
        self._add(("ck", path[-1]), self.checkpoint_bytes, t)
        shared = [pid for pid in path if self.trace.next_use(pid, t) < INF]
        if shared:
            self._add(("ck", shared[-1]), self.checkpoint_bytes, t)

    def _add(self, entry: tuple[str, int], size: int, t: int) -> None:
        if entry not in self.entries:
            self.entries[entry] = size
            self.used += size
        self.last[entry] = t

    def evict(self, order: Callable[[tuple[str, int]], tuple[float, ...]]) -> None:
        """Drop entries, largest ``order`` first, until the budget holds them."""
        if self.used <= self.budget:
            return
        for entry in sorted(self.entries, key=order, reverse=True):
            if self.used <= self.budget:
                return
            if entry in self.entries:
                self._drop(entry)

    def _drop(self, entry: tuple[str, int]) -> None:
        self.used -= self.entries.pop(entry)
        kind, pid = entry
        if kind == "ck":
            return
        self._drop_if(("ck", pid))
        # KV below a dropped block is unreachable: it goes too (prefix-closed)
        for child in self.trace.children.get(pid, ()):
            if ("kv", child) in self.entries:
                self._drop(("kv", child))

    def _drop_if(self, entry: tuple[str, int]) -> None:
        if entry in self.entries:
            self.used -= self.entries.pop(entry)


def orders(cache: ModelCache, t: int) -> dict[str, Callable[[tuple[str, int]], tuple[float, ...]]]:
    """Eviction orders at request ``t`` (largest evicted first)."""
    tr = cache.trace

    def belady(e: tuple[str, int]) -> tuple[float, ...]:
        return (tr.next_use(e[1], t), tr.depth[e[1]], e[0] == "ck")

    def belady_bytes(e: tuple[str, int]) -> tuple[float, ...]:
        return ((tr.next_use(e[1], t) - t) * cache.entries[e], tr.depth[e[1]])

    def lru(e: tuple[str, int]) -> tuple[float, ...]:
        return (-cache.last[e], tr.depth[e[1]])

    return {"belady": belady, "belady-bytes": belady_bytes, "lru": lru}


def model_hit_rate(trace: Trace, order: str, sizes: tuple[int, int, bool], budget: int) -> float:
    cache = ModelCache(trace, *sizes, budget)
    reused = 0
    for t in range(len(trace.paths)):
        reused += cache.serve(t)
        cache.insert(t)
        cache.evict(orders(cache, t)[order])
    return reused / sum(trace.tokens) if trace.tokens else 0.0


def cell(
    model: str, hardware: str, name: str, seed: int, fraction: float, shapes: dict | None = None
) -> dict:
    shape = (shapes or WORKLOADS)[name]
    spec = replace(shape, seed=seed, rate=RATES.get(model, shape.rate))
    base = EngineOptions(model=model, runner="sim", hardware=hardware, policy="adaptive")
    requests = build_workload(spec).requests
    ws = measure_working_set(base, requests)
    capped = under_pressure(base, ws, fraction, spec.prompt_len)
    budget = int(capped.cache_memory or 0)
    trace = build_trace(spec, base.block_size)
    recurrent = ws.checkpoint_bytes > 1
    sizes = (ws.block_bytes, ws.checkpoint_bytes, recurrent)
    row = {"model": model, "hardware": hardware, "workload": name, "seed": seed, "capacity": fraction}
    for order in ("belady", "belady-bytes", "lru"):
        row[f"model_{order}"] = model_hit_rate(trace, order, sizes, budget)
    for eviction, admission in (("lru", "all"), ("cost-per-byte", "all"), ("cost-per-byte", "likely")):
        figures = run(capped.replace(eviction=eviction, admission=admission), spec)
        name = eviction if admission == "all" else f"{eviction}+{admission}"
        row[f"engine_{name}"] = figures["hit_rate"]
        row[f"engine_{name}_p95_ms"] = figures["ttft_p95_ms"]
    # nothing evicted (the whole working set fits): the TTFT of the misses no cache can avoid
    whole = under_pressure(base, ws, 1.0, spec.prompt_len)
    row["no_eviction_p95_ms"] = run(whole.replace(eviction="lru", admission="all"), spec)["ttft_p95_ms"]
    row["p95_floor_vs_engine_lru"] = row["no_eviction_p95_ms"] / row["engine_lru_p95_ms"]
    row["unbounded"] = model_hit_rate(trace, "lru", sizes, 1 << 62)  # only first uses miss
    row["oracle"] = max(row["model_belady"], row["model_belady-bytes"])
    row["oracle_vs_engine_lru"] = row["oracle"] / row["engine_lru"]
    row["oracle_vs_model_lru"] = row["oracle"] / row["model_lru"]
    row["unbounded_vs_engine_lru"] = row["unbounded"] / row["engine_lru"]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["qwen3_5-2b", "nemotron_h-8b"])
    p.add_argument("--hardware", default="h100")
    p.add_argument("--workloads", nargs="+", default=["chat", "mixed"], choices=list(WORKLOADS))
    p.add_argument("--fractions", type=positive_float, nargs="+", default=[0.1, 0.25])
    p.add_argument("--seeds", type=non_negative_int, nargs="+", default=[0])
    p.add_argument("--json", type=Path)
    p.add_argument("--smoke", action="store_true", help="CI: one small chat, one model, one capacity")
    args = p.parse_args()
    try:
        run_from_args(args)
    except ProblemError as e:  # an unknown model, hardware or policy: one line, as radixflow's own flags
        p.error(e.problem.render(flag))


def run_from_args(args: argparse.Namespace) -> None:
    shapes = dict(WORKLOADS)
    if args.smoke:
        shapes["chat"] = replace(WORKLOADS["chat"], groups=4, candidates=3, context_len=128)
        args.models, args.workloads, args.fractions, args.seeds = ["qwen3_5-2b"], ["chat"], [0.25], [0]
    rows = []
    grid = itertools.product(args.models, args.workloads, args.seeds, args.fractions)
    for model, name, seed, fraction in grid:
        row = cell(model, args.hardware, name, seed, fraction, shapes)
        rows.append(row)
        print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    if args.json:
        write_figures(args.json, {"cells": rows})


if __name__ == "__main__":
    main()
