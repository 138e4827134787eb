"""Two versions of the model code on the same rounds, in one process, alternated: a before/after
that a loaded machine cannot skew the way two separate processes are skewed.

``--base`` names another checkout (or a ``git archive`` of one); its ``radixflow`` package is
copied under the name ``radixflow_base`` (imports rewritten) and loaded beside this tree's. Both
sides build the model from the same checkpoint with the same weights and GEMM library, run the
same decode rounds (``--batches`` rows at context 64, each updating its own state slot in place,
as the engine does) and one packed prefill round, old and new one after the other for
``--repeats`` rounds, which of them goes first alternating from one repeat to the next (ABBA:
a machine that slows within a repeat does not weigh on one side only); thread CPU time,
medians and minima, the ratio new/base repeat by repeat (the two side by side: its range and
median, printed and written), and the largest logit difference of the first round (the logits of the
last token of every row).

    git archive c60a733 | tar -x -C /tmp/base
    python benchmarks/round_ab.py --base /tmp/base --models qwen3_5-small --json results/round_ab.json
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import torch

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_now, paired_lines
from radixflow.cli.args import positive_int

HERE = Path(__file__).resolve().parents[1]
BLOCK = 16
MODELS = ["qwen3_5-small", "nemotron_h-small", "lfm2-small", "qwen3-small"]  # one per mixer kind


def base_package(base: Path, into: Path) -> None:
    """Copy ``base``'s radixflow package to ``into/radixflow_base``, its imports renamed."""
    dst = into / "radixflow_base"
    shutil.copytree(base / "radixflow", dst)
    for path in dst.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"\bradixflow\.", "radixflow_base.", text)
        text = text.replace("from radixflow import", "from radixflow_base import")
        path.write_text(text, encoding="utf-8")


Names = SimpleNamespace  # `ROUND_NAMES` as attributes
ROUND_NAMES = ("ForwardBatch", "SeqSpec", "Snapshot", "KVPool", "StatePool")


def side(pkg: str, model: str) -> tuple[torch.nn.Module, Names]:
    """The model as the engine builds it (GEMMs on MKL) and the package's round-building names."""
    zoo = importlib.import_module(f"{pkg}.models.zoo")
    runner = importlib.import_module(f"{pkg}.runners.torch_runner")
    built = runner.TorchRunner(zoo.ensure_model(model), BLOCK, 8, 0, matmul="mkl", predict_rounds=False)
    return built.net, round_names(pkg)


def round_names(pkg: str) -> Names:
    """`ROUND_NAMES` from wherever ``pkg`` keeps them: a base tree may predate the modules they
    moved to from `models.batch` (`seq_spec`, `kv_pool`)."""
    found: dict[str, object] = {}
    for module in ("batch", "seq_spec", "kv_pool", "state_pool"):
        try:
            m = importlib.import_module(f"{pkg}.models.{module}")
        except ModuleNotFoundError:
            continue
        found.update({n: getattr(m, n) for n in ROUND_NAMES if hasattr(m, n) and n not in found})
    return SimpleNamespace(**found)


def decode_round(net: torch.nn.Module, b: Names, rows: int, context: int) -> Callable[[], torch.Tensor]:
    """Prefill ``rows`` prompts, then a decode round of one token each, saving in place."""
    gen = torch.Generator().manual_seed(rows)
    per = -(-(context + 1) // BLOCK)
    kv = b.KVPool(net.kv_layout(), rows * per, BLOCK, torch.float32, "cpu")
    state = b.StatePool(net.state_layout(), 2 * rows, torch.float32, "cpu")
    prefill, decode = [], []
    for i in range(rows):
        table = list(range(i * per, (i + 1) * per))
        tokens = torch.randint(0, int(net.config.vocab_size), (context + 1,), generator=gen).tolist()
        prefill.append((tokens[:context], b.SeqSpec(0, context, table, None, [b.Snapshot(context, i)])))
        decode.append(([tokens[context]], b.SeqSpec(context, 1, table, i, [b.Snapshot(context + 1, i)])))
    with torch.inference_mode():
        net(b.ForwardBatch.build(prefill, kv, state, "cpu"))
    return lambda: forward(net, b, decode, kv, state)


def prefill_round(net: torch.nn.Module, b: Names, lengths: list[int]) -> Callable[[], torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    chunks, nxt = [], 0
    for n in lengths:
        tokens = torch.randint(0, int(net.config.vocab_size), (n,), generator=gen).tolist()
        blocks = -(-n // BLOCK)
        chunks.append((tokens, b.SeqSpec(0, n, list(range(nxt, nxt + blocks)))))
        nxt += blocks
    kv = b.KVPool(net.kv_layout(), nxt, BLOCK, torch.float32, "cpu")
    state = b.StatePool(net.state_layout(), 0, torch.float32, "cpu")
    return lambda: forward(net, b, chunks, kv, state)


def forward(net: torch.nn.Module, b: Names, chunks: list, kv: object, state: object) -> torch.Tensor:
    with torch.inference_mode():
        fb = b.ForwardBatch.build(chunks, kv, state, "cpu")
        return net.compute_logits(net(fb)[fb.last_token_indices()])


def compare(name: str, runs: dict[str, Callable[[], torch.Tensor]], repeats: int) -> dict:
    first = {pkg: run() for pkg, run in runs.items()}
    times: dict[str, list[float]] = {pkg: [] for pkg in runs}
    for i in range(repeats):
        order = list(runs.items())
        for pkg, run in order if i % 2 == 0 else reversed(order):  # ABBA: neither side always first
            t0 = time.thread_time()
            run()
            times[pkg].append(time.thread_time() - t0)
    old, new = times["radixflow_base"], times["radixflow"]
    paired = [n / o for n, o in zip(new, old, strict=True) if o > 0]  # repeat by repeat: side by side
    return {
        "round": name,
        "base_ms_median": 1e3 * statistics.median(old),
        "new_ms_median": 1e3 * statistics.median(new),
        "base_ms_runs": [1e3 * t for t in old],
        "new_ms_runs": [1e3 * t for t in new],
        "ratio_median": statistics.median(new) / statistics.median(old),
        "ratio_min": min(new) / min(old),
        # new/base of each repeat (the two ran side by side, under one load) and their median:
        # the spread the ratios of medians and minima are read against
        "ratio_runs": paired,
        "ratio_paired_median": statistics.median(paired) if paired else None,
        "max_dlogit": (first["radixflow"] - first["radixflow_base"]).abs().max().item(),
    }


def print_paired(model: str, row: dict) -> None:
    """``row``'s new against base, repeat by repeat (`paired_lines`)."""
    trials = {"base": row["base_ms_runs"], "new": row["new_ms_runs"]}
    for line in paired_lines(f"{model} {row['round']}: CPU time", trials, "base"):
        print(line)


def measure(model: str, args: argparse.Namespace) -> list[dict]:
    """Every round of ``model``, both versions, one row each (printed as it is measured)."""
    sides = {pkg: side(pkg, model) for pkg in ("radixflow_base", "radixflow")}
    sides["radixflow"][0].load_state_dict(sides["radixflow_base"][0].state_dict())
    cases = {
        f"decode {n}": {p: decode_round(net, b, n, 64) for p, (net, b) in sides.items()} for n in args.batches
    }
    prefill = {p: prefill_round(net, b, args.lengths) for p, (net, b) in sides.items()}
    cases[f"prefill {sum(args.lengths)}"] = prefill
    rows = []
    for name, runs in cases.items():
        row = {"model": model, **compare(name, runs, args.repeats)}
        rows.append(row)
        print(
            f"{model:<18}{name:<13} base {row['base_ms_median']:7.1f} ms"
            f"  new {row['new_ms_median']:7.1f} ms"
            f"  new/base {row['ratio_median']:.3f} (minima {row['ratio_min']:.3f})"
            f"  max|dlogit| {row['max_dlogit']:.1e}",
            flush=True,
        )
        print_paired(model, row)  # the ratios of medians and minima above: their paired spread
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, default=HERE, help="the other checkout (default: this one)")
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--batches", nargs="+", type=positive_int, default=[8, 32])
    ap.add_argument("--lengths", type=positive_int, nargs="+", default=[256, 64, 192, 128])
    ap.add_argument("--repeats", type=positive_int, default=11)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--smoke", action="store_true", help="qwen3_5-tiny, tiny rounds, two repeats (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.models, args.batches, args.lengths, args.repeats = ["qwen3_5-tiny"], [2], [8, 4], 2
    if not (args.base / "radixflow").is_dir():  # a typo, or the archive's parent: before any copy
        ap.error(f"--base: {args.base} has no radixflow package (a checkout, or a git archive of one)")
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="round_ab_"))
    try:  # a failed run must not leave a whole radixflow copy behind, nor on sys.path
        base_package(args.base, tmp)
        sys.path.insert(0, str(tmp))
        results = {"base": str(args.base), "load_before": load_now(), "rows": []}
        for model in args.models:
            results["rows"] += measure(model, args)
        results["load_after"] = load_now()
    finally:
        if str(tmp) in sys.path:
            sys.path.remove(str(tmp))
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        write_figures(Path(args.json), results)


if __name__ == "__main__":
    main()
