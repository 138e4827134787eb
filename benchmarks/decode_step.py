"""Per-layer time of one decode round (every row one token) at batch 1, 8 and 32.

For each model: ``batch`` sequences of ``--context`` tokens are prefilled (each saving its state
into its own slot), then one decode round is timed: every row is one token at position
``context`` that restores from its slot and, with ``--saves other`` (the default), saves into a
second one (so every repeat computes the same thing; the states are gathered into scratch and
scattered back); with ``--saves own`` it saves back into the slot it restores, as the engine's
working slot does (the state is updated where it lies in the pool; each repeat advances it by
one more step of the same cost). Each mixer layer's forward is timed by a wrapper, and the median
per layer kind is reported in microseconds per layer, beside the whole round (wall and this
thread's CPU time, each with its spread, min-max over the repeats). Batch sizes are interleaved
across repeats (each first in turn) and medians reported, since the machine is shared and noisy.

    python benchmarks/decode_step.py --models qwen3_5-small lfm2-small nemotron_h-small

The script only uses the packed-batch API (`ForwardBatch`, `KVPool`, `StatePool`), so the same
file runs against an older checkout to give a before/after comparison.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

import torch
from torch import nn

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_now, load_text, rotated
from radixflow.cli.args import positive_int
from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.io.loader import load_model
from radixflow.models.kv_pool import KVPool
from radixflow.models.seq_spec import SeqSpec, Snapshot
from radixflow.models.zoo import ensure_model

BLOCK = 16
MIXER_NAMES = {  # class name -> reported kind
    "Qwen35GatedDeltaNet": "deltanet",
    "Qwen3NextGatedDeltaNet": "deltanet",
    "Mamba2Mixer": "mamba2",
    "Lfm2ShortConv": "conv",
    "GatedAttention": "attention",
    "Lfm2Attention": "attention",
    "NemotronHAttention": "attention",
    "Attention": "attention",  # llama / qwen3
    "FalconH1Attention": "attention",
}


class LayerTimer:
    """Wraps every mixer's forward and records its wall time per kind (mutates the modules)."""

    def __init__(self, model: nn.Module) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)
        self.counts: dict[str, int] = defaultdict(int)
        for module in model.modules():
            kind = MIXER_NAMES.get(type(module).__name__)
            if kind is not None:
                self.counts[kind] += 1
                module.forward = self._wrap(module.forward, kind)

    def _wrap(self, forward: Callable, kind: str) -> Callable:
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            out = forward(*args, **kwargs)
            self.times[kind].append(time.perf_counter() - t0)
            return out

        return timed

    def take(self) -> dict[str, float]:
        """Seconds per layer of each kind in the last round, then forget."""
        out = {kind: sum(ts) / self.counts[kind] for kind, ts in self.times.items()}
        self.times.clear()
        return out


def setup(
    model: nn.Module, batch: int, context: int, seed: int, own: bool = False
) -> tuple[KVPool, StatePool, list]:
    """Prefill ``batch`` sequences of ``context`` tokens; return the pools and the decode chunks
    (each saving into the slot it restores when ``own``)."""
    vocab = int(model.config.vocab_size)
    g = torch.Generator().manual_seed(seed)
    per_seq = -(-(context + 1) // BLOCK)
    kv = KVPool(model.kv_layout(), batch * per_seq, BLOCK, torch.float32, "cpu")
    state = StatePool(model.state_layout(), 2 * batch, torch.float32, "cpu")
    prefill, decode = [], []
    for i in range(batch):
        table = list(range(i * per_seq, (i + 1) * per_seq))
        tokens = torch.randint(0, vocab, (context + 1,), generator=g).tolist()
        prefill.append((tokens[:context], SeqSpec(0, context, table, None, [Snapshot(context, i)])))
        save = Snapshot(context + 1, i if own else batch + i)
        decode.append(([tokens[context]], SeqSpec(context, 1, table, i, [save])))
    with torch.inference_mode():
        model(ForwardBatch.build(prefill, kv, state, "cpu"))
    return kv, state, decode


def run_round(model: nn.Module, kv: KVPool, state: StatePool, chunks: list) -> tuple[float, float]:
    """Wall and thread-CPU seconds of one decode round."""
    t0, c0 = time.perf_counter(), time.thread_time()
    with torch.inference_mode():
        hidden = model(ForwardBatch.build(chunks, kv, state, "cpu"))
        model.compute_logits(hidden)
    return time.perf_counter() - t0, time.thread_time() - c0


def bench(name: str, batches: list[int], context: int, repeats: int, own: bool) -> dict[str, object]:
    model = load_model(ensure_model(name))
    timer = LayerTimer(model)
    setups = {b: setup(model, b, context, seed=b, own=own) for b in batches}
    rounds: dict[int, list[tuple[float, float]]] = defaultdict(list)
    layers: dict[int, dict[str, list[float]]] = {b: defaultdict(list) for b in batches}
    for b in batches:  # warm-up
        run_round(model, *setups[b])
    timer.take()
    for trial in range(repeats):
        for b in rotated(batches, trial):  # each first in turn: drift falls on each alike
            rounds[b].append(run_round(model, *setups[b]))
            for kind, t in timer.take().items():
                layers[b][kind].append(t)
    rows = {}
    for b in batches:
        walls, cpus = [1e3 * wall for wall, _ in rounds[b]], [1e3 * cpu for _, cpu in rounds[b]]
        rows[b] = {
            "round_ms": statistics.median(walls),
            "round_ms_spread": [min(walls), max(walls)],
            "round_cpu_ms": statistics.median(cpus),
            "round_cpu_ms_spread": [min(cpus), max(cpus)],
            **{f"{k}_us_per_layer": 1e6 * statistics.median(v) for k, v in sorted(layers[b].items())},
        }
    return {"model": name, "layers": dict(timer.counts), "batches": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen3_5-small", "lfm2-small", "nemotron_h-small"])
    ap.add_argument("--batches", nargs="+", type=positive_int, default=[1, 8, 32])
    ap.add_argument("--context", type=positive_int, default=64)
    ap.add_argument("--repeats", type=positive_int, default=15)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument(
        "--saves",
        choices=["other", "own"],
        default="other",
        help="each row saves into a second slot (gathered and scattered) or the one it restores (in place)",
    )
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--smoke", action="store_true", help="one tiny model, batch 1 and 2, one repeat (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.models, args.batches, args.context, args.repeats = ["qwen3_5-tiny"], [1, 2], 8, 1
    torch.set_num_threads(args.threads)
    results = []
    for name in args.models:
        load = load_now()
        res = bench(name, args.batches, args.context, args.repeats, args.saves == "own")
        res.update(saves=args.saves, load=[load, load_now()])
        results.append(res)
        print(f"{name} ({res['layers']}), saves={args.saves}, threads={args.threads}, load={load_text(load)}")
        for b, row in res["batches"].items():
            cells = "  ".join(
                f"{k}={v:8.1f}"
                + (" ({:.1f}-{:.1f})".format(*row[f"{k}_spread"]) if f"{k}_spread" in row else "")
                for k, v in row.items()
                if not k.endswith("_spread")
            )
            print(f"  batch {b:3d}: {cells}")
    if args.json:
        write_figures(args.json, {"models": results})


if __name__ == "__main__":
    main()
