"""What a round costs besides its GEMMs: one decode round (8 and 32 requests) and one prefill
round per mixer kind, split into GEMM time and everything else.

The model is built as the engine builds it (a `TorchRunner`, so its Linear layers are routed to
the GEMM library the runner measured at startup, and decode rounds are marked as such). Each
round is run under a dispatch hook that records every GEMM call (``mm``, ``addmm``, ``bmm``,
``baddbmm``, ``linear``, ``matmul``, oneDNN's linear; and the native few-row product, a ctypes
call the dispatcher never sees, by wrapping its backend) with its very arguments; those calls are
then replayed alone, so the GEMM time is what the same GEMMs cost at the rate the library runs
them here, and the rest of the round (its thread CPU time minus that) is everything between
GEMMs. Rounds and replays are interleaved across repeats (each round first in turn) and medians
reported, since the machine is shared and noisy. A few profiled runs of each round
(torch.profiler, median self CPU time per op) name the largest non-GEMM ops. The recurrent state
updates (``baddbmm_``, ``mul_`` on the state in place) and the attention kernel are not GEMMs
here: they are in the rest.

Decode rounds restore every row from its slot and save back into it (the engine's working
slot, updated in place); the prefill round is one packed batch of prompts of ``--lengths``.
``--kernels torch native`` runs every round with each kernels backend
(`radixflow.models.kernels.backend`: the decode steps, and the Gated DeltaNet prefill's delta
rule) in the same process, interleaved, on the same GEMM plan. The native steps are single C
calls: a GEMM inside them (the delta rule's readout) is not a GEMM call here, so it counts in
the rest.

    python benchmarks/round_profile.py --json results/round_profile.json
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from decode_step import setup  # benchmarks/ is on sys.path when a script in it runs
from runner_throughput import prompts
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from radixflow.bench.provenance import git_commit, write_figures
from radixflow.bench.spread import load_now, load_text, rotated
from radixflow.cli.args import positive_int
from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.kernels.backend import CHOICES, Kernels, resolve_kernels
from radixflow.models.kv_pool import KVPool
from radixflow.models.seq_spec import SeqSpec
from radixflow.models.zoo import default_cache_dir, ensure_model
from radixflow.runners.linear_backends import BACKENDS
from radixflow.runners.torch_runner import TorchRunner

MODELS = {  # mixer kind -> model that has it
    "deltanet": "qwen3_5-small",
    "mamba2": "nemotron_h-small",
    "conv": "lfm2-small",
    "attention": "qwen3-small",
}
# aten::linear and aten::matmul reach the dispatcher whole under inference mode; replaying one
# replays the mm/addmm (and weight transpose) it runs
GEMM_OPS = (
    "aten::linear",
    "aten::matmul",
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "mkldnn::_linear_pointwise",
)

BLOCK = 16
SHORT = 12  # the "commit" key's length: the run block (`write_figures`) holds it whole


class GemmRecorder(TorchDispatchMode):
    """Records every GEMM call that passes the dispatcher, with its arguments, for replay."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Callable, tuple, dict]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.name().split(".")[0] in GEMM_OPS:  # any overload: bmm.out is the same GEMM
            self.calls.append((func, args, kwargs))
        return func(*args, **kwargs)


@contextlib.contextmanager
def native_rows_recorded(calls: list[tuple[Callable, tuple, dict]]) -> Iterator[None]:
    """Record the native matmul backend's calls into ``calls`` too (for the block's duration it
    is wrapped: an instance attribute over its method)."""
    backend = BACKENDS["native"]
    plain = backend.linear

    def recorded(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        calls.append((plain, (x, weight, bias), {}))
        return plain(x, weight, bias)

    backend.linear = recorded  # type: ignore[method-assign]
    try:
        yield
    finally:
        del backend.linear


@dataclass
class Round:
    """One round to measure: a name, the call that runs it, and its GEMMs once recorded."""

    name: str
    run: Callable[[], object]
    gemms: list[tuple[Callable, tuple, dict]] = field(default_factory=list)
    totals: list[float] = field(default_factory=list)
    gemm_times: list[float] = field(default_factory=list)

    def record(self) -> None:
        with GemmRecorder() as rec, native_rows_recorded(rec.calls):
            self.run()
        self.gemms = rec.calls

    def replay(self) -> None:
        with torch.inference_mode():
            for func, args, kwargs in self.gemms:
                func(*args, **kwargs)


def cpu_seconds(fn: Callable[[], object]) -> float:
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def decode_round(runner: TorchRunner, batch: int, context: int, kernels: Kernels) -> Callable[[], object]:
    """One decode round of ``batch`` rows at position ``context``, each updating its own slot."""
    kv, state, chunks = setup(runner.net, batch, context, seed=batch, own=True)
    return lambda: forward(runner, chunks, kv, state, decode_only=True, kernels=kernels)


def prefill_round(runner: TorchRunner, lengths: list[int], kernels: Kernels) -> Callable[[], object]:
    """One packed prefill round of fresh prompts of ``lengths`` tokens (no cache, no state)."""
    net = runner.net
    chunks, nxt = [], 0
    for p in prompts(lengths, int(net.config.vocab_size), seed=0):
        n = -(-len(p) // BLOCK)
        chunks.append((p, SeqSpec(0, len(p), list(range(nxt, nxt + n)))))
        nxt += n
    kv = KVPool(net.kv_layout(), nxt, BLOCK, torch.float32, "cpu")
    state = StatePool(net.state_layout(), 0, torch.float32, "cpu")
    return lambda: forward(runner, chunks, kv, state, decode_only=False, kernels=kernels)


def forward(
    runner: TorchRunner, chunks: list, kv: KVPool, state: StatePool, decode_only: bool, kernels: Kernels
) -> object:
    """The runner's work for one round: build the batch, forward, logits of every last token."""
    routed = runner.matmul.round(decode_only) if runner.matmul is not None else contextlib.nullcontext()
    with torch.inference_mode(), routed:
        fb = ForwardBatch.build(chunks, kv, state, "cpu", kernels=kernels)
        hidden = runner.net(fb)
        return runner.net.compute_logits(hidden[fb.last_token_indices()])


def top_non_gemm(run: Callable[[], object], n: int = 5, runs: int = 3) -> list[tuple[str, float]]:
    """The ``n`` non-GEMM ops with the most self CPU time, median over ``runs`` profiled runs
    (ms); ops run inside a GEMM op (its weight transpose, its mm) count as the GEMM's."""
    spent: dict[str, list[float]] = defaultdict(lambda: [0.0] * runs)
    for i in range(-1, runs):  # run -1: the first profiled run of a process bills start-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        for event in prof.events() if i >= 0 else ():
            if not in_gemm(event):
                spent[event.name][i] += event.self_cpu_time_total / 1e3
    medians = {name: statistics.median(ms) for name, ms in spent.items()}
    return sorted(medians.items(), key=lambda r: -r[1])[:n]


def in_gemm(event) -> bool:
    while event is not None:
        if event.name in GEMM_OPS:
            return True
        event = event.cpu_parent
    return False


def bench(kind: str, model: str, args: argparse.Namespace) -> dict:
    runner = TorchRunner(ensure_model(model), BLOCK, 8, 0, matmul=args.matmul, predict_rounds=False)
    batches, context, lengths, repeats = args.batches, args.context, args.lengths, args.repeats
    rounds = []
    for name in args.kernels:
        kernels = resolve_kernels(name, "cpu", torch.float32, default_cache_dir() / "kernels")
        tag = f" {kernels.name}" if len(args.kernels) > 1 else ""
        rounds += [Round(f"decode {b}{tag}", decode_round(runner, b, context, kernels)) for b in batches]
        # each backend's prefill too: the native one runs the Gated DeltaNet delta rule
        rounds.append(Round(f"prefill {sum(lengths)}{tag}", prefill_round(runner, lengths, kernels)))
    for r in rounds:
        r.run()  # warm-up
        r.record()
    for trial in range(repeats):
        for r in rotated(rounds, trial):  # each first in turn: drift falls on each alike
            r.totals.append(cpu_seconds(r.run))
            r.gemm_times.append(cpu_seconds(r.replay))
    rows = []
    for r in rounds:
        total, gemm = statistics.median(r.totals), statistics.median(r.gemm_times)
        rows.append(
            {
                "round": r.name,
                "total_ms": 1e3 * total,
                "gemm_ms": 1e3 * gemm,
                "gemm_calls": len(r.gemms),
                "non_gemm_share": max(0.0, 1 - gemm / total),
                "top_non_gemm_ms": top_non_gemm(r.run),
            }
        )
    plan = runner.matmul.plan.describe() if runner.matmul is not None else "none"
    return {"kind": kind, "model": model, "matmul_plan": plan, "rounds": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--batches", nargs="+", type=positive_int, default=[8, 32])
    ap.add_argument("--context", type=positive_int, default=64)
    ap.add_argument("--lengths", type=positive_int, nargs="+", default=[256, 64, 192, 128])
    ap.add_argument("--repeats", type=positive_int, default=7)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--matmul", default="auto", help="the runner's GEMM plan (auto: measured at startup)")
    ap.add_argument(
        "--kernels",
        nargs="+",
        default=["auto"],
        choices=CHOICES,
        help="kernels backends, each round run with each, interleaved (default: auto, the engine's)",
    )
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--smoke", action="store_true", help="qwen3_5-tiny, tiny rounds, one repeat (CI)")
    args = ap.parse_args()
    models = dict(MODELS)
    if args.smoke:
        models = {"deltanet": "qwen3_5-tiny"}
        args.kinds, args.batches, args.context, args.lengths, args.repeats = ["deltanet"], [2], 8, [8, 4], 1
    torch.set_num_threads(args.threads)
    meta = {
        "commit": (git_commit() or "unknown")[:SHORT],  # kept for older readers: run.commit whole
        "threads": args.threads,
        "kernels": args.kernels,
        "load_before": load_now(),
    }
    print(f"commit {meta['commit']}, threads={args.threads}, load={load_text(meta['load_before'])}")
    results = []
    for kind in args.kinds:
        res = bench(kind, models[kind], args)
        results.append(res)
        print(f"\n{kind} ({res['model']}, matmul {res['matmul_plan']})")
        print(f"  {'round':<20}{'total ms':>9}{'GEMM ms':>9}{'non-GEMM':>9}  top non-GEMM ops (ms, profiled)")
        for row in res["rounds"]:
            top = ", ".join(f"{k.removeprefix('aten::')} {ms:.2f}" for k, ms in row["top_non_gemm_ms"])
            print(
                f"  {row['round']:<20}{row['total_ms']:>9.2f}{row['gemm_ms']:>9.2f}"
                f"{row['non_gemm_share']:>9.0%}  {top}",
                flush=True,
            )
    meta["load_after"] = load_now()
    if args.json:
        write_figures(args.json, {**meta, "results": results})


if __name__ == "__main__":
    main()
