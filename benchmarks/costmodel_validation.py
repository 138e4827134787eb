"""How well the measured kernel tables predict measurements they were not given.

For each GPU and kernel class, the measured points are ordered by shape and then along the
interpolation axes, every k-th is held out, the lookup is rebuilt from the rest, and each
held-out point is predicted; the relative error |predicted / measured - 1| is summarised as
its median and 90th percentile (fractions). A second pass holds out whole shapes (every k-th
attention (heads, kv heads, head dim), GDN head count, MoE shape, GPU count; for GEMM every
k-th interior n and k of its (n, k) grid), so every prediction borrows measured shapes'
efficiency: the error of an unmeasured shape.

Data: the aiconfigurator-core package when it is installed (the ``gpu-tables`` extra), else the
tables shipped in radixflow/costmodel/kernel_times/data (the same rows, latencies to 6 significant digits).

    python benchmarks/costmodel_validation.py [--k 5] [--json results/costmodel_validation.json]

JSON: ``{"k", "mode", "source", "accepted", "gpus": {gpu: {class: {"median", "p90", "n",
"shapes": {"median", "p90", "n"}}}}}``, the class's top-level figures those of held-out points.
Acceptance (issue 14): median held-out point error <= 10% for GEMM, attention and GDN; the exit
status is 1 if it fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from radixflow.bench.provenance import write_figures
from radixflow.cli.args import int_arg
from radixflow.costmodel.kernel_times import measured_tables as mt
from radixflow.costmodel.kernel_times.measured import GPUS, MeasuredKernels
from radixflow.costmodel.kernel_times.table_files import SYSTEMS, Row, read_tables

ACCEPT = {"gemm": 0.10, "context_attention": 0.10, "generation_attention": 0.10, "gdn": 0.10}
Predictor = Callable[[Sequence], float]


def load_rows(gpu: str) -> tuple[dict[str, list[Row]], str]:
    """The full tables from the package if it (and pyarrow) is installed, else the shipped ones."""
    try:
        import pyarrow  # noqa: F401
        from derive_kernel_tables import derive, package_data_root

        return derive(package_data_root(), gpu), "aiconfigurator-core package"
    except (ImportError, SystemExit):
        return read_tables(gpu), "shipped tables"


def order(table: str, rows: list[Row]) -> list[Row]:
    """Rows by shape, then along the axes (GEMM's key is (m, n, k): its shape is (n, k))."""
    if table == "gemm":
        return sorted(rows, key=lambda r: (r[1], r[2], r[0]))
    return sorted(rows)


def shape_of(table: str, row: Row) -> tuple:
    lengths = {
        "gemm": None,
        "context_attention": 3,
        "generation_attention": 3,
        "gdn": 6,
        "moe": 4,
        "allreduce": 1,
    }
    n = lengths[table]
    return (row[1], row[2]) if n is None else tuple(row[:n])


def predictor(gpu: str, table: str, rows: list[Row], mode: str | None) -> Predictor:
    """A lookup built from ``rows`` only, answering seconds at a row's key."""
    kernels = MeasuredKernels(GPUS[gpu], rows={table: rows}, mode=mode)
    if table == "gdn":
        tables = kernels.gdn_tables
        return lambda key: tables[key[0]].predict(key[1:])
    lookup = {
        "gemm": lambda: kernels.gemm_table,
        "context_attention": lambda: kernels.context_table,
        "generation_attention": lambda: kernels.generation_table,
        "moe": lambda: kernels.moe_table,
        "allreduce": lambda: kernels.allreduce_table,
    }[table]()
    return lookup.predict


def errors(predict: Predictor, held: list[Row]) -> list[float]:
    return [abs(predict(r[:-1]) / (r[-1] * mt.MS) - 1.0) for r in held]


def summary(errs: list[float]) -> dict[str, float | None]:
    """Median and p90 of the errors; None (JSON null, never NaN) where no point was held out."""
    if not errs:
        return {"median": None, "p90": None, "n": 0}
    cuts = statistics.quantiles(errs, n=10, method="inclusive") if len(errs) > 1 else [errs[0]] * 9
    return {"median": statistics.median(errs), "p90": cuts[8], "n": len(errs)}


def hold_out_points(gpu: str, table: str, rows: list[Row], k: int, mode: str | None) -> dict:
    ordered = order(table, rows)
    held = ordered[k - 1 :: k]
    train = [r for i, r in enumerate(ordered) if i % k != k - 1]
    return summary(errors(predictor(gpu, table, train, mode), held))


def held_shapes(table: str, rows: list[Row], k: int) -> set:
    """Every k-th shape; the middle one where there are fewer than k (all-reduce: 2, 4, 8 GPUs).
    GEMM's (n, k) form a grid interpolated across: there every k-th interior n and k value is
    held out (all its shapes), so held shapes lie between measured ones as real ones do."""
    shapes = sorted({shape_of(table, r) for r in rows})
    if table != "gemm":
        return set(shapes[k - 1 :: k]) or {shapes[len(shapes) // 2]}
    lines = [sorted({s[d] for s in shapes})[1:-1][k - 1 :: k] for d in (0, 1)]
    return {s for s in shapes if s[0] in lines[0] or s[1] in lines[1]}


def hold_out_shapes(gpu: str, table: str, rows: list[Row], k: int, mode: str | None) -> dict:
    out = held_shapes(table, rows, k)
    held = [r for r in rows if shape_of(table, r) in out]
    train = [r for r in rows if shape_of(table, r) not in out]
    if not held or not train:
        return summary([])
    return summary(errors(predictor(gpu, table, train, mode), held))


def validate(k: int, mode: str | None) -> dict:
    result: dict = {"k": k, "mode": mode or "default", "gpus": {}}
    for gpu in SYSTEMS:
        tables, source = load_rows(gpu)
        result["source"] = source
        result["gpus"][gpu] = {
            table: {
                **hold_out_points(gpu, table, rows, k, mode),
                "shapes": hold_out_shapes(gpu, table, rows, k, mode),
            }
            for table, rows in tables.items()
        }
    result["accepted"] = all(  # a class with no point held out has shown nothing: not accepted
        _within(result["gpus"][gpu][table]["median"], limit)
        for gpu in SYSTEMS
        for table, limit in ACCEPT.items()
    )
    return result


def _within(error: float | None, limit: float) -> bool:
    return error is not None and error <= limit


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def show(result: dict) -> None:
    table = Table(title=f"held-out relative error (every {result['k']}th point; {result['source']})")
    for col in ("gpu", "class", "points out", "median", "p90", "shapes out", "median", "p90"):
        table.add_column(col, justify="left" if col in ("gpu", "class") else "right", no_wrap=True)
    for gpu, classes in result["gpus"].items():
        for name, r in classes.items():
            p, s = r, r["shapes"]
            table.add_row(
                gpu,
                name,
                str(p["n"]),
                _pct(p["median"]),
                _pct(p["p90"]),
                str(s["n"]),
                _pct(s["median"]),
                _pct(s["p90"]),
            )
    Console(width=120).print(table)
    print(
        "acceptance (median point error <= 10% for GEMM, attention, GDN):",
        "pass" if result["accepted"] else "FAIL",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int_arg(low=2), default=5, help="hold out every k-th point (k >= 2)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--smoke", action="store_true", help="accepted for CI: the full run takes seconds")
    parser.add_argument(
        "--mode",
        choices=["linear", "loglog"],
        default=None,
        help="interpolate every table this way (default: each table's own)",
    )
    args = parser.parse_args(argv)
    if args.k < 2:
        parser.error(f"--k: {args.k} holds out every point; use 2 or more")
    result = validate(args.k, args.mode)
    show(result)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_figures(args.json, result)
    return 0 if result["accepted"] else 1


if __name__ == "__main__":
    sys.exit(main())
