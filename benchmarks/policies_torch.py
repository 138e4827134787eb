"""`native`, `radixflow` and `adaptive` on the real PyTorch runner, for every hybrid `-small` zoo model.

Runs `radixflow bench --runner torch` once per model on the same candidate-scoring workload and
collects the figures into one JSON file and one table: rounds, latency, reuse, agreement with the
no-cache reference, top-1 margin, and whether every policy produced identical outputs.

    python benchmarks/policies_torch.py --json results/policies_torch.json
    python benchmarks/policies_torch.py --smoke --json /tmp/p.json   # seconds: one tiny model
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
from pathlib import Path

from rich.console import Console

from radixflow.cli import main as radixflow_main

POLICIES = ["native", "radixflow", "adaptive"]
MODELS = [
    "qwen3_5-small",
    "qwen3_next-small",
    "lfm2-small",
    "nemotron_h-small",
    "falcon_h1-small",
    "qwen3-small",
]
WORKLOAD = ["--groups", "4", "--candidates", "8", "--context-len", "512", "--candidate-len", "32"]
SMOKE_WORKLOAD = ["--groups", "2", "--candidates", "2", "--context-len", "32", "--candidate-len", "4"]
FIGURES = ("rounds", "mean_latency_s", "p99_latency_s", "worker_call_s", "reuse_rate", "agreement")


def run_model(model: str, workload: list[str], extra: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        chosen = [flag for p in POLICIES for flag in ("--policy", p)]
        argv = ["bench", "--runner", "torch", "--model", model, *workload, *chosen, *extra]
        quiet = Console(file=io.StringIO())
        code = radixflow_main([*argv, "--json", str(out)], console=quiet)
        if code != 0:
            raise SystemExit(f"radixflow bench failed for {model} (exit {code})")
        return json.loads(out.read_text())


def row(model: str, data: dict[str, object]) -> dict[str, object]:
    """One model's figures, each a list in `POLICIES` order."""
    by_policy = {r["policy"]: r for r in data["results"]}  # type: ignore[attr-defined]
    runs = [by_policy[p] for p in POLICIES]
    figures = {name: [r[name] for r in runs] for name in FIGURES}
    return {
        "model": model,
        "policies": POLICIES,
        **figures,
        "median_top1_margin": runs[0].get("median_top1_margin"),
        "same_outputs": len({r["outputs_sha256"] for r in runs}) == 1,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--repeat", type=int, default=1, help="runs per policy (medians)")
    ap.add_argument("--smoke", action="store_true", help="one tiny model, a tiny workload (CI)")
    ap.add_argument("--json", type=Path, default=Path("results/policies_torch.json"))
    args = ap.parse_args()
    workload = SMOKE_WORKLOAD if args.smoke else WORKLOAD
    models = ["qwen3_5-tiny"] if args.smoke else args.models
    rows = []
    print(f"{'model':<18}{'rounds n/r/a':>14}{'mean lat n/r/a (s)':>24}{'agreement':>11}{'margin':>8}  same")
    for model in models:
        r = row(model, run_model(model, workload, ["--repeat", str(args.repeat)]))
        rows.append(r)
        rounds = "/".join(str(n) for n in r["rounds"])
        lat = "/".join(f"{x:.2f}" for x in r["mean_latency_s"])
        margin = r["median_top1_margin"]
        print(
            f"{model:<18}{rounds:>14}{lat:>24}{min(r['agreement']):>11.3f}"
            f"{'-' if margin is None else f'{margin:.3f}':>8}  {r['same_outputs']}",
            flush=True,
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"workload": workload, "results": rows}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
