"""`benchmarks/serve_load.py` against servers from different source trees, interleaved.

Each variant is a server started from a source tree (``PYTHONPATH``) with extra server flags; the
load generator and its traffic are this tree's, so every variant gets the same requests. Runs are
interleaved, each variant first in turn (A B, B A, ...), so a change in the machine's load hits
every variant alike, and each figure is the median over ``--repeat`` runs, beside its spread
(min-max over the runs: printed for requests/s and TTFT, every timed figure's in the JSON as
``FIGURE_spread``), but lost requests and errors, which are totals over them (one run's loss
counts); ratios are against the first variant, of the medians and run by run (printed with their
range and median: the runs of one repeat ran side by side).

    git worktree add /tmp/c05b93d c05b93d   # the commit to compare against
    python benchmarks/serve_compare.py --variant old=/tmp/c05b93d --variant main=. \\
        --variant 'main-1t=.:--torch-threads 1' --repeat 3 --json results/serve_compare.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import paired_lines, rotated
from radixflow.cli.args import positive_int

LOAD = Path(__file__).with_name("serve_load.py")


@dataclass(frozen=True)
class Variant:
    label: str
    tree: Path
    flags: tuple[str, ...]


def parse_variant(text: str) -> Variant:
    label, sep, rest = text.partition("=")
    if not sep or not label or not rest:
        raise argparse.ArgumentTypeError(f"expected LABEL=TREE[:FLAGS], got {text!r}")
    tree, _, flags = rest.partition(":")
    path = Path(tree).resolve()
    if not (path / "radixflow" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{tree}: not a radixflow source tree (no radixflow/__init__.py)")
    return Variant(label, path, tuple(shlex.split(flags)))


def imported_tree(variant: Variant) -> Path:
    """Where a server process started as `serve_load.py` starts it imports radixflow from."""
    env = {**os.environ, "PYTHONPATH": str(variant.tree), "PYTHONSAFEPATH": "1"}
    code = "import radixflow; print(radixflow.__file__)"
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return Path(found.stdout.strip()).resolve().parent.parent


def run_once(variant: Variant, load_args: list[str], out: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(variant.tree)}
    cmd = [sys.executable, str(LOAD), *load_args, *variant.flags, "--json", str(out)]
    print(f"--- {variant.label}: {shlex.join(cmd[1:])}", flush=True)
    proc = subprocess.run(cmd, env=env, check=False)
    if not out.is_file():
        raise SystemExit(f"{variant.label}: serve_load.py wrote no result (exit {proc.returncode})")
    return json.loads(out.read_text())["summary"]


def figures(summary: dict[str, object]) -> dict[str, float | None]:
    chat = summary["by_kind"]["chat"]  # type: ignore[index]
    score = summary["by_kind"]["score"]  # type: ignore[index]
    return {
        "requests_per_s": summary["requests_per_s"],  # type: ignore[dict-item]
        "chat_ttft_p50_s": chat["ttft_s"]["p50"],
        "score_latency_p50_s": score["latency_s"]["p50"],
        "lost": summary["lost"],  # type: ignore[dict-item]
        "errors": float(sum(summary["errors"].values())),  # type: ignore[union-attr]
        "load_1min": summary["machine"]["load_1min_before"],  # type: ignore[index]
        "server_cpu_ms_per_request": 1e3 * summary["server_cpu_s_per_request"]  # type: ignore[operator]
        if "server_cpu_s_per_request" in summary
        else None,
    }


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def spread(values: list[float | None]) -> list[float] | None:
    """[min, max] of the known values; None: no run has the figure."""
    known = [v for v in values if v is not None]
    return [min(known), max(known)] if known else None


TOTALS = ("lost", "errors")  # summed over runs: a median would hide one run's failures
TIMED = ("requests_per_s", "chat_ttft_p50_s", "score_latency_p50_s", "server_cpu_ms_per_request")


def medians(runs: dict[str, list[dict[str, float | None]]]) -> dict[str, object]:
    """Per variant, each figure's median over its runs, `TIMED` ones with their spread beside
    (``FIGURE_spread``: a median alone cannot say whether a ratio is more than the runs' noise);
    `TOTALS` summed."""
    return {label: _summary(rs) for label, rs in runs.items()}


def _summary(rs: list[dict[str, float | None]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k in rs[0]:
        values = [r[k] for r in rs]
        out[k] = sum(v or 0.0 for v in values) if k in TOTALS else median(values)
        if k in TIMED:
            out[f"{k}_spread"] = spread(values)
    return out


def _range(bounds: list[float] | None, scale: float, fmt: str) -> str:
    return "-" if bounds is None else f"{scale * bounds[0]:{fmt}}-{scale * bounds[1]:{fmt}}"


def print_paired(runs: dict[str, list[dict[str, float | None]]], ref_label: str) -> None:
    """Each variant's requests/s and chat TTFT against ``ref_label``'s, run by run (run i of each
    ran side by side: `paired_lines`, the spread the table's ratios of medians are read against)."""
    for label, key in (("requests/s", "requests_per_s"), ("chat TTFT p50", "chat_ttft_p50_s")):
        trials = {variant: [r[key] for r in rs] for variant, rs in runs.items()}
        for line in paired_lines(label, trials, ref_label):
            print(line)


def arguments() -> tuple[argparse.Namespace, list[str]]:
    """This script's flags, and the rest (serve_load's)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--variant",
        type=parse_variant,
        action="append",
        help="LABEL=TREE[:SERVER FLAGS]; the first is the reference of the ratios (required)",
    )
    ap.add_argument(
        "--smoke", action="store_true", help="CI: this tree (unless --variant), once, serve_load --smoke"
    )
    ap.add_argument("--repeat", type=positive_int, default=3, help="interleaved runs per variant (medians)")
    ap.add_argument("--json", type=Path, default=Path("results/serve_compare.json"))
    args, load_args = ap.parse_known_args()
    if args.smoke:
        args.variant = args.variant or [parse_variant(f"this={LOAD.parent.parent}")]
        args.repeat, load_args = 1, [*load_args, "--smoke"]
    if not args.variant:
        ap.error("the following arguments are required: --variant")
    return args, load_args


def print_table(table: dict[str, dict], ref_label: str, repeat: int) -> None:
    ref = table[ref_label]
    print(f"\nmedians of {repeat} interleaved runs (lost, errors: totals); ratios against {ref_label}")
    head = ("variant", "req/s", "spread", "x", "TTFT p50", "spread", "x", "CPU/req", "lost", "errors", "load")
    print("{:14s} {:>8s} {:>13s} {:>6s} {:>10s} {:>11s} {:>6s} {:>9s} {:>5s} {:>7s} {:>5s}".format(*head))
    for label, row in table.items():
        rps, ttft = row["requests_per_s"], row["chat_ttft_p50_s"]
        rps_spread = _range(row["requests_per_s_spread"], 1.0, ".2f")
        ttft_spread = _range(row["chat_ttft_p50_s_spread"], 1e3, ".0f")
        x_rps = rps / ref["requests_per_s"] if rps and ref["requests_per_s"] else float("nan")
        x_ttft = ttft / ref["chat_ttft_p50_s"] if ttft and ref["chat_ttft_p50_s"] else float("nan")
        print(
            f"{label:14s} {rps:8.2f} {rps_spread:>13s} {x_rps:6.2f} {1e3 * (ttft or 0):8.0f}ms "
            f"{ttft_spread:>11s} {x_ttft:6.2f} "
            f"{row['server_cpu_ms_per_request'] or float('nan'):7.0f}ms "
            f"{row['lost']:5.0f} {row['errors']:7.0f} {row['load_1min']:5.1f}"
        )


def interleaved_runs(
    variants: list[Variant], load_args: list[str], tmp: Path, repeat: int
) -> dict[str, list[dict[str, float | None]]]:
    """Each variant's figures over ``repeat`` interleaved runs, in run order; each variant first in
    turn (`rotated`: whatever the run before left, a busy spell, a warm page cache, falls on each
    alike)."""
    runs: dict[str, list[dict[str, float | None]]] = {v.label: [] for v in variants}
    for i in range(repeat):
        for v in rotated(variants, i):
            runs[v.label].append(figures(run_once(v, load_args, tmp / f"{v.label}-{i}.json")))
    return runs


def main() -> None:
    args, load_args = arguments()
    for v in args.variant:  # a variant that ran another tree's server once made c05b93d look like main
        if (tree := imported_tree(v)) != v.tree:
            raise SystemExit(f"{v.label}: a server would import radixflow from {tree}, not {v.tree}")
    tmp = args.json.with_suffix(".runs")
    tmp.mkdir(parents=True, exist_ok=True)
    runs = interleaved_runs(args.variant, load_args, tmp, args.repeat)
    table = medians(runs)
    print_table(table, args.variant[0].label, args.repeat)
    print_paired(runs, args.variant[0].label)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    variants = [{"label": v.label, "tree": str(v.tree), "flags": list(v.flags)} for v in args.variant]
    write_figures(args.json, {"variants": variants, "load_args": load_args, "runs": runs, "medians": table})
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
