"""Prefill throughput of RadixFlow's runner vs Hugging Face transformers, same weights, same batch.

For each family's ``-small`` zoo model: one batch of prompts with mixed lengths, prefilled from
scratch. Ours packs the prompts without padding into one forward; transformers gets the same
prompts right-padded with an attention mask (``transformers``), and also one prompt at a time
with no padding at all (``transformers_sequential``), so padding waste is visible separately.
Repeats are interleaved (each side first in turn) and medians reported with the spread of each
side's repeats (``cpu_s``: [min, median, max]; printed as ± of the median), since the machine is
shared and noisy; calls run on one torch thread (``--threads``) and are timed in thread CPU
seconds, written beside the machine's 1-minute load average before and after; each speedup also
repeat by repeat (``speedup_runs``, ``speedup_paired``: [min, median, max]; printed as each
side's change from ours, trial by trial). The every-mode
comparison (prefill, decode, scoring in one run) is generation_throughput.py.

    python benchmarks/runner_throughput.py --json results/runner_throughput.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_now, loads_now, loads_text, paired_lines, rotated
from radixflow.cli.args import positive_int
from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.io.loader import load_model
from radixflow.models.kernels.backend import Kernels
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS
from radixflow.models.kv_pool import KVPool
from radixflow.models.seq_spec import SeqSpec
from radixflow.models.zoo import ensure_model

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, run as a script
from scheduler_overhead import machine

FAMILIES = ["llama", "qwen3", "qwen3_5", "qwen3_next", "lfm2", "nemotron_h", "falcon_h1"]


def prompts(lengths: list[int], vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


def ours_forward(
    model, batch_prompts: list[list[int]], block: int = 16, kernels: Kernels = TORCH_KERNELS
) -> torch.Tensor:
    """One packed prefill of ``batch_prompts`` from scratch, its recurrent kernels ``kernels``
    (the runner's, `models.kernels.backend`); the last position's logits of each."""
    specs, nxt = [], 0
    for p in batch_prompts:
        n = -(-len(p) // block)
        specs.append((p, SeqSpec(0, len(p), list(range(nxt, nxt + n)))))
        nxt += n
    kv = KVPool(model.kv_layout(), nxt, block, torch.float32, "cpu")
    state = StatePool(model.state_layout(), 0, torch.float32, "cpu")
    fb = ForwardBatch.build(specs, kv, state, "cpu", kernels=kernels)
    with torch.inference_mode():
        hidden = model(fb)
        return model.compute_logits(hidden[fb.last_token_indices()])


def hf_forward(model, batch_prompts: list[list[int]]) -> torch.Tensor:
    width = max(map(len, batch_prompts))
    ids = torch.zeros(len(batch_prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(batch_prompts):
        ids[i, : len(p)] = torch.tensor(p)
        mask[i, : len(p)] = 1
    pos = torch.arange(width).expand_as(ids)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
    last = torch.tensor([len(p) - 1 for p in batch_prompts])
    return out.logits[torch.arange(len(batch_prompts)), last]


def hf_sequential(model, batch_prompts: list[list[int]]) -> torch.Tensor:
    return torch.cat([hf_forward(model, [p]) for p in batch_prompts])


def timed(fn, *args) -> tuple[float, torch.Tensor]:
    """CPU seconds of this thread (with one torch thread: what the call cost, however busy the
    shared machine was; see generation_throughput.py), and the call's result."""
    t0 = time.thread_time()
    out = fn(*args)
    return time.thread_time() - t0, out


def bench_family(family: str, lengths: list[int], repeats: int, size: str = "small") -> dict[str, object]:
    from transformers import AutoModelForCausalLM

    path = ensure_model(f"{family}-{size}")
    ours = load_model(path)
    theirs = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    batch = prompts(lengths, int(ours.config.vocab_size), seed=0)
    calls = {"ours": (ours_forward, ours), "transformers": (hf_forward, theirs)}
    calls["transformers_sequential"] = (hf_sequential, theirs)
    for fn, model in calls.values():  # warm-up, each call as it is timed: its one-time costs
        fn(model, batch)  # (oneDNN's primitives, the allocator) are made per shape
    sides: dict[str, list[float]] = {name: [] for name in calls}
    outs: dict[str, torch.Tensor] = {}
    for trial in range(repeats):
        for name in rotated(list(calls), trial):  # each first in turn: drift falls on each alike
            fn, model = calls[name]
            dt, outs[name] = timed(fn, model, batch)
            sides[name].append(dt)
    a, b = outs["ours"], outs["transformers"]
    tokens = sum(lengths)
    med_ours, med_hf, med_seq = (statistics.median(sides[name]) for name in calls)
    return {
        "family": family,
        "tokens": tokens,
        # [min, median, max] thread-CPU seconds of each side's repeats: the spread a speedup is read against
        "cpu_s": {name: [min(ts), statistics.median(ts), max(ts)] for name, ts in sides.items()},
        "ours_tokens_per_s": tokens / med_ours,
        "transformers_tokens_per_s": tokens / med_hf,
        "transformers_sequential_tokens_per_s": tokens / med_seq,
        "speedup": med_hf / med_ours,
        "speedup_vs_sequential": med_seq / med_ours,
        "cpu_runs_s": sides,  # every repeat's, in repeat order (repeat t of each side by side)
        **paired(sides, "transformers", "speedup"),
        **paired(sides, "transformers_sequential", "speedup_vs_sequential"),
        "same_greedy_tokens": bool((a.argmax(-1) == b.argmax(-1)).all()),
        "max_abs_logit_diff": float((a.float() - b.float()).abs().max()),
    }


def paired(sides: dict[str, list[float]], other: str, key: str) -> dict[str, list[float]]:
    """``other`` over ours repeat by repeat (the two ran side by side, under one load) as
    ``KEY_runs``, and their [min, median, max] as ``KEY_paired``: what the speedup of the
    medians is read against."""
    ratios = [o / u for o, u in zip(sides[other], sides["ours"], strict=True) if u > 0]
    spread = [min(ratios), statistics.median(ratios), max(ratios)] if ratios else []
    return {f"{key}_runs": ratios, f"{key}_paired": spread}


def print_paired(row: dict) -> None:
    """Each transformers side's CPU time against ours, repeat by repeat (`paired_lines`)."""
    for line in paired_lines(f"{row['family']}: CPU time", row["cpu_runs_s"], "ours"):
        print(line)


def spread(row: dict[str, object]) -> float:
    """The widest side's spread, (max - min) / median / 2: the ± its repeats moved by."""
    return max((hi - lo) / mid / 2 for lo, mid, hi in row["cpu_s"].values())  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="+", default=FAMILIES, choices=FAMILIES)
    ap.add_argument("--lengths", type=positive_int, nargs="+", default=[512, 128, 384, 256])
    ap.add_argument("--repeats", type=positive_int, default=3)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--json", type=Path, default=Path("results/runner_throughput.json"))
    ap.add_argument("--smoke", action="store_true", help="qwen3_5-tiny, two short prompts, one repeat (CI)")
    args = ap.parse_args()
    size = "tiny" if args.smoke else "small"
    if args.smoke:
        args.families, args.lengths, args.repeats = ["qwen3_5"], [16, 8], 1
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    print(f"threads={args.threads}; loadavg {loads_text(loads_now())}")
    load_before = load_now()
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    rows = []
    print(
        f"{'family':<12}{'ours tok/s':>12}{'hf padded':>11}{'ratio':>7}{'hf 1-by-1':>11}{'ratio':>7}"
        f"{'spread':>8}  greedy-equal  max|Δlogit|"
    )
    for family in args.families:
        row = bench_family(family, args.lengths, args.repeats, size)
        rows.append(row)
        print(
            f"{family:<12}{row['ours_tokens_per_s']:>12.0f}{row['transformers_tokens_per_s']:>11.0f}"
            f"{row['speedup']:>7.2f}{row['transformers_sequential_tokens_per_s']:>11.0f}"
            f"{row['speedup_vs_sequential']:>7.2f}{spread(row):>8.0%}  {row['same_greedy_tokens']!s:<12}"
            f"  {row['max_abs_logit_diff']:.2e}",
            flush=True,
        )
        print_paired(row)  # the speedups of medians above: their paired spread
    args.json.parent.mkdir(parents=True, exist_ok=True)
    doc = {"lengths": args.lengths, "repeats": args.repeats, "machine": machine(load_before), "results": rows}
    write_figures(args.json, doc)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
