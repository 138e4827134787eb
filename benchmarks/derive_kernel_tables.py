"""Derive the kernel tables the GPU cost model ships from NVIDIA's aiconfigurator-core package.

Reads the vLLM 0.24.0 parquet tables of h100_sxm and h200_sxm (latency in ms) and writes the
subset the default needs to ``radixflow/costmodel/kernel_times/data/<gpu>/<table>.csv.gz`` (schema in
``radixflow/costmodel/kernel_times/table_files.py``). Kept: bf16 weights and activations, bf16 KV cache, full
attention (no sliding window), balanced MoE routing without expert parallelism, vLLM's
CUDA-graph custom all-reduce. Where several rows share a key (GDN shapes measured for several
models) the fastest is kept. The output is byte-identical from run to run.

    pip install '.[gpu-tables]'          # aiconfigurator-core, pyarrow
    python benchmarks/derive_kernel_tables.py [--data-root DIR] [--out DIR] [--check]

``--data-root``: aiconfigurator's ``systems/data`` directory (default: the installed package's).
``--check``: compare with what is there instead of writing; exit 1 on any difference.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from radixflow.bench.provenance import write_figures
from radixflow.costmodel.kernel_times.table_files import (
    BACKEND,
    BACKEND_VERSION,
    COLUMNS,
    DATA_DIR,
    GDN_KERNELS,
    ORIGINS,
    SYSTEMS,
    Row,
    encode_table,
    table_path,
)

BF16 = "bfloat16"
# Nemotron-3 Nano / Ultra experts (relu^2, no gate): two matrices, not the gated three the cost
# model's moe() prices, so their rows would read as 1.5x too efficient. (hidden, inter, experts, topk)
UNGATED_MOE = {(2688, 1856, 128, 6), (2048, 5120, 512, 22)}


def package_data_root() -> Path:
    """aiconfigurator-core's ``systems/data``, found without importing the package (and its
    compiled engine): only the data files are read."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "aiconfigurator-core is not installed: pip install '.[gpu-tables]' or pass --data-root"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"


def read_parquet(data_root: Path, gpu: str, table: str) -> list[dict]:
    family, name = ORIGINS[table]
    path = data_root / SYSTEMS[gpu] / family / BACKEND / BACKEND_VERSION / f"{name}.parquet"
    if not path.is_file():  # a wrong --data-root: say which, not the reader's traceback
        where = path.relative_to(data_root)
        raise SystemExit(f"--data-root {data_root}: no {where} (is it aiconfigurator's systems/data?)")
    try:
        import pyarrow.parquet as pq  # the gpu-tables extra: only this script and the validation need it
    except ModuleNotFoundError:
        raise SystemExit("pyarrow is not installed: pip install '.[gpu-tables]'") from None
    return pq.read_table(path).to_pylist()


def fastest(rows: Iterable[Row]) -> list[Row]:
    """One row per key, the lowest latency (duplicates are the same kernel timed twice)."""
    best: dict[tuple, float] = {}
    for *key, latency in rows:
        k = tuple(key)
        best[k] = min(latency, best.get(k, latency))
    return [(*k, v) for k, v in best.items()]


def full_attention(r: dict) -> bool:
    return (
        r["attn_dtype"] == BF16
        and r["kv_cache_dtype"] == BF16
        and r["window_size"] == 0
        and r["beam_width"] == 1
    )


def gemm(rows: list[dict]) -> list[Row]:
    return [(r["m"], r["n"], r["k"], r["latency"]) for r in rows if r["gemm_dtype"] == BF16]


def context_attention(rows: list[dict]) -> list[Row]:
    return [
        (r["num_heads"], r["num_key_value_heads"], r["head_dim"], r["batch_size"], r["isl"], r["latency"])
        for r in rows
        if full_attention(r) and r["step"] == 0
    ]


def generation_attention(rows: list[dict]) -> list[Row]:
    # one new token per sequence over isl + step keys (aiconfigurator's s = isl + step)
    return [
        (
            r["num_heads"],
            r["num_key_value_heads"],
            r["head_dim"],
            r["batch_size"],
            r["isl"] + r["step"],
            r["latency"],
        )
        for r in rows
        if full_attention(r)
    ]


def gdn(rows: list[dict]) -> list[Row]:
    return [
        (
            GDN_KERNELS[r["kernel_source"]],
            r["num_k_heads"],
            r["num_v_heads"],
            r["head_k_dim"],
            r["head_v_dim"],
            r["d_conv"],
            r["batch_size"],
            r["seq_len"],
            r["latency"],
        )
        for r in rows
        if r["kernel_source"] in GDN_KERNELS
    ]


def moe(rows: list[dict]) -> list[Row]:
    # moe_tp_size splits each expert's intermediate size across GPUs: a row with tp t times
    # the kernel one GPU runs with inter / t
    return [
        (
            r["hidden_size"],
            r["inter_size"] // r["moe_tp_size"],
            r["num_experts"],
            r["topk"],
            r["num_tokens"],
            r["latency"],
        )
        for r in rows
        if r["moe_dtype"] == BF16
        and r["distribution"] == "balanced"
        and r["moe_ep_size"] == 1
        and r["inter_size"] % r["moe_tp_size"] == 0
        and (r["hidden_size"], r["inter_size"], r["num_experts"], r["topk"]) not in UNGATED_MOE
    ]


def allreduce(rows: list[dict]) -> list[Row]:
    return [
        (r["num_gpus"], r["message_size"], r["latency"])
        for r in rows
        if r["backend"] == "vllm_graph" and r["allreduce_dtype"] == BF16
    ]


EXTRACT: dict[str, Callable[[list[dict]], list[Row]]] = {
    "gemm": gemm,
    "context_attention": context_attention,
    "generation_attention": generation_attention,
    "gdn": gdn,
    "moe": moe,
    "allreduce": allreduce,
}
assert set(EXTRACT) == set(COLUMNS)


def derive(data_root: Path, gpu: str) -> dict[str, list[Row]]:
    """Every table of one GPU, as rows of the shipped schema (unrounded)."""
    return {table: fastest(EXTRACT[table](read_parquet(data_root, gpu, table))) for table in COLUMNS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", type=Path, default=None, help="aiconfigurator's systems/data")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="where the tables go")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--json", type=Path, default=None, help="also write the tables' row counts here")
    parser.add_argument("--smoke", action="store_true", help="CI: --check, nothing written but --json")
    args = parser.parse_args(argv)
    args.check = args.check or args.smoke
    data_root = args.data_root or package_data_root()
    differ, counts = [], {}
    for gpu in SYSTEMS:
        for table, rows in derive(data_root, gpu).items():
            path = table_path(gpu, table, args.out)
            data = encode_table(table, rows)
            counts[f"{gpu}/{table}"] = len(rows)
            if args.check:
                if not path.exists() or path.read_bytes() != data:
                    differ.append(str(path))
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"{path}: {len(rows)} rows, {len(data)} bytes")
    for path in differ:
        print(f"differs: {path}", file=sys.stderr)
    if args.check:
        print(f"checked {len(counts)} tables: {len(differ)} differ")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_figures(args.json, {"rows": counts, "differ": differ})
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
