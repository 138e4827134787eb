"""`native` vs `radixflow` on the real PyTorch runner, for every hybrid `-small` zoo model.

Runs `radixflow bench --runner torch` once per model on the same candidate-scoring workload and
collects the figures into one JSON file and one table: rounds, latency, reuse, agreement with the
no-cache reference, top-1 margin, and whether both policies produced identical outputs.

    python benchmarks/policies_torch.py --json results/policies_torch.json
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
from pathlib import Path

from rich.console import Console

from radixflow.cli import main as radixflow_main

MODELS = [
    "qwen3_5-small",
    "qwen3_next-small",
    "lfm2-small",
    "nemotron_h-small",
    "falcon_h1-small",
    "qwen3-small",
]
WORKLOAD = ["--groups", "4", "--candidates", "8", "--context-len", "512", "--candidate-len", "32"]


def run_model(model: str, extra: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        argv = ["bench", "--runner", "torch", "--model", model, *WORKLOAD, *extra, "--json", str(out)]
        quiet = Console(file=io.StringIO())
        code = radixflow_main(argv, console=quiet)
        if code != 0:
            raise SystemExit(f"radixflow bench failed for {model} (exit {code})")
        return json.loads(out.read_text())


def row(model: str, data: dict[str, object]) -> dict[str, object]:
    native, flow = data["results"]  # type: ignore[misc]
    return {
        "model": model,
        "rounds": [native["rounds"], flow["rounds"]],
        "mean_latency_s": [native["mean_latency_s"], flow["mean_latency_s"]],
        "p99_latency_s": [native["p99_latency_s"], flow["p99_latency_s"]],
        "worker_call_s": [native["worker_call_s"], flow["worker_call_s"]],
        "reuse_rate": [native["reuse_rate"], flow["reuse_rate"]],
        "agreement": [native["agreement"], flow["agreement"]],
        "median_top1_margin": native.get("median_top1_margin"),
        "same_outputs": native["outputs_sha256"] == flow["outputs_sha256"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--repeat", type=int, default=1, help="runs per policy (medians)")
    ap.add_argument("--json", type=Path, default=Path("results/policies_torch.json"))
    args = ap.parse_args()
    rows = []
    print(f"{'model':<18}{'rounds n→r':>12}{'mean lat n→r (s)':>20}{'agreement':>11}{'margin':>8}  same")
    for model in args.models:
        r = row(model, run_model(model, ["--repeat", str(args.repeat)]))
        rows.append(r)
        rounds, lat = r["rounds"], r["mean_latency_s"]
        print(
            f"{model:<18}{f'{rounds[0]}→{rounds[1]}':>12}{f'{lat[0]:.2f}→{lat[1]:.2f}':>20}"
            f"{min(r['agreement']):>11.3f}{r['median_top1_margin']:>8.3f}  {r['same_outputs']}",
            flush=True,
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"workload": WORKLOAD, "results": rows}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
