"""The measured kernel tables shipped with the package: their schema, where they live, how they read.

Each GPU has one gzip'd CSV per kernel class under ``radixflow/costmodel/kernel_times/data/<gpu>/``, derived
from NVIDIA's aiconfigurator-core 0.12.0 (Apache-2.0; see ``data/NOTICE``) by
``benchmarks/derive_kernel_tables.py``: bf16 rows (bf16 KV cache) of the vLLM 0.24.0 tables,
latencies in milliseconds. Every column but ``latency_ms`` (and GDN's ``kernel``) is an integer.

Pure Python (csv + gzip): the package reads its tables without pyarrow or pandas.
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
from collections.abc import Callable, Iterable
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
SOURCE_PACKAGE = "aiconfigurator-core 0.12.0"
BACKEND = "vllm"
BACKEND_VERSION = "0.24.0"

# GPU name in radixflow -> aiconfigurator's system directory
SYSTEMS = {"h100": "h100_sxm", "h200": "h200_sxm"}

# table -> (aiconfigurator family, parquet file) it is derived from
ORIGINS = {
    "gemm": ("gemm", "gemm_perf"),
    "context_attention": ("attention", "context_attention_perf"),
    "generation_attention": ("attention", "generation_attention_perf"),
    "gdn": ("linear_attention", "gdn_perf"),
    "moe": ("moe", "moe_perf"),
    "allreduce": ("comm", "custom_allreduce_perf"),
}

# table -> its columns; the last is always latency_ms, the ones before it the row's key
COLUMNS = {
    "gemm": ("m", "n", "k", "latency_ms"),
    "context_attention": ("heads", "kv_heads", "head_dim", "batch", "isl", "latency_ms"),
    # context: keys each sequence attends over (aiconfigurator's isl + step)
    "generation_attention": ("heads", "kv_heads", "head_dim", "batch", "context", "latency_ms"),
    # kernel: conv_prefill | rule_prefill | conv_decode | rule_decode (see GDN_KERNELS)
    "gdn": ("kernel", "k_heads", "v_heads", "head_k", "head_v", "conv", "batch", "seq_len", "latency_ms"),
    # inter: each GPU's share of the expert's intermediate size (the model's / moe_tp_size)
    "moe": ("hidden", "inter", "experts", "topk", "tokens", "latency_ms"),
    "allreduce": ("gpus", "bytes", "latency_ms"),
}

# gdn_perf's kernel_source -> our kernel name; a layer runs conv + rule in each phase
GDN_KERNELS = {
    "causal_conv1d_fn": "conv_prefill",
    "chunk_gated_delta_rule_flashinfer": "rule_prefill",
    "causal_conv1d_update": "conv_decode",
    "fused_recurrent_gated_delta_rule_packed_decode": "rule_decode",
}

Row = tuple  # key columns (int, or str for gdn's kernel) then latency_ms (float)


def table_label(gpu: str, table: str) -> str:
    """Where a table's figures come from, e.g. ``h200_sxm/gemm/vllm/0.24.0/gemm_perf``."""
    family, name = ORIGINS[table]
    return f"{SYSTEMS[gpu]}/{family}/{BACKEND}/{BACKEND_VERSION}/{name}"


def table_path(gpu: str, table: str, root: Path = DATA_DIR) -> Path:
    return root / gpu / f"{table}.csv.gz"


def format_row(row: Row) -> list[str]:
    # 6 significant digits: far below the run-to-run noise of a kernel timing
    return [str(v) if isinstance(v, int | str) else f"{v:.6g}" for v in row]


def encode_table(table: str, rows: Iterable[Row]) -> bytes:
    """The file's bytes: sorted rows under a header, gzip'd with no timestamp or name (so the
    same rows always give the same bytes)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS[table])
    writer.writerows(format_row(r) for r in sorted(rows))
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as out:
        out.write(text.getvalue().encode())
    return raw.getvalue()


def parse_row(table: str, fields: list[str]) -> Row:
    columns = COLUMNS[table]
    if len(fields) != len(columns):
        raise ValueError(f"{table}: row {fields!r} has {len(fields)} fields, expected {len(columns)}")
    key = tuple(f if c == "kernel" else int(f) for c, f in zip(columns[:-1], fields[:-1], strict=True))
    return (*key, float(fields[-1]))


def _row_parser(table: str) -> Callable[[list[str]], Row]:
    """`parse_row` for ``table``, unrolled: every process that prices a GPU call reads ~70k rows,
    and the generic per-column loop made that most of a `radixflow bench` run's cost model time.
    The same rows (a wrong field count still refused by `parse_row`'s message)."""
    columns = COLUMNS[table]
    texts = sum(1 for c in columns[:-1] if c == "kernel")  # only ever the first column (gdn's)
    if columns[:texts] != ("kernel",) * texts:
        return functools.partial(parse_row, table)

    def parse(fields: list[str]) -> Row:
        if len(fields) != len(columns):
            return parse_row(table, fields)  # raises, naming the row
        return (*fields[:texts], *map(int, fields[texts:-1]), float(fields[-1]))

    return parse


def decode_table(table: str, data: bytes) -> list[Row]:
    reader = csv.reader(io.StringIO(gzip.decompress(data).decode()))
    header = tuple(next(reader))
    if header != COLUMNS[table]:
        raise ValueError(f"{table}: header {header!r}, expected {COLUMNS[table]!r}")
    return list(map(_row_parser(table), reader))


def read_table(gpu: str, table: str, root: Path = DATA_DIR) -> list[Row]:
    """The shipped rows of one table for one GPU (``gpu`` in SYSTEMS, ``table`` in COLUMNS)."""
    return decode_table(table, table_path(gpu, table, root).read_bytes())


def read_tables(gpu: str, root: Path = DATA_DIR) -> dict[str, list[Row]]:
    return {table: read_table(gpu, table, root) for table in COLUMNS}
