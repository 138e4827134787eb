"""The shipped kernel tables: schema, canonical bytes, attribution."""

from __future__ import annotations

import gzip

import pytest

from radixflow.costmodel.kernel_times.table_files import (
    COLUMNS,
    DATA_DIR,
    SYSTEMS,
    decode_table,
    encode_table,
    parse_row,
    read_table,
    table_label,
    table_path,
)


def test_encoding_is_deterministic_and_sorted():
    rows = [(3, 1, 1, 0.5), (1, 2, 2, 0.25)]
    once, twice = encode_table("gemm", rows), encode_table("gemm", list(reversed(rows)))
    assert once == twice
    assert decode_table("gemm", once) == sorted(rows)


def test_a_wrong_header_or_row_length_is_refused():
    with pytest.raises(ValueError, match="header"):
        decode_table("allreduce", encode_table("gemm", [(1, 1, 1, 1.0)]))
    with pytest.raises(ValueError, match="fields"):
        from radixflow.costmodel.kernel_times.table_files import parse_row

        parse_row("gemm", ["1", "2", "0.5"])


@pytest.mark.parametrize("gpu", sorted(SYSTEMS))
@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_shipped_tables_are_canonical(gpu, table):
    """Re-encoding the shipped rows gives the shipped bytes: the files are what
    derive_kernel_tables writes (sorted, 6 significant digits, no gzip timestamp)."""
    data = table_path(gpu, table).read_bytes()
    rows = decode_table(table, data)
    assert rows, f"{gpu}/{table} is empty"
    assert encode_table(table, rows) == data
    assert all(r[-1] > 0 for r in rows)


def test_every_table_names_its_source():
    assert table_label("h200", "gemm") == "h200_sxm/gemm/vllm/0.24.0/gemm_perf"
    assert table_label("h100", "allreduce") == "h100_sxm/comm/vllm/0.24.0/custom_allreduce_perf"


def test_the_data_carries_its_apache_notice():
    notice = (DATA_DIR / "NOTICE").read_text()
    assert "aiconfigurator-core 0.12.0" in notice and "Apache" in notice
    assert "NVIDIA CORPORATION" in notice
    assert "Apache License" in (DATA_DIR / "LICENSE").read_text()


def test_shipped_data_stays_small():
    total = sum(p.stat().st_size for p in DATA_DIR.rglob("*.csv.gz"))
    assert total < 3_000_000


def test_known_measurements_are_shipped():
    # H200, one 2k-token request (32 q / 8 kv heads, head dim 128): 87 us
    rows = read_table("h200", "context_attention")
    (latency,) = [r[-1] for r in rows if r[:-1] == (32, 8, 128, 1, 2048)]
    assert latency == pytest.approx(0.0874, rel=0.01)


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_decoding_gives_what_parse_row_gives(table):
    """decode_table's unrolled parser reads each row as parse_row does: the same values and types
    (gdn's kernel a str, sizes ints, the latency a float); a short row is refused the same way."""
    key = ["conv_decode" if c == "kernel" else "3" for c in COLUMNS[table][:-1]]
    rows = [(*key, "0.25"), (*key[:-1], "7", "1e-3")]
    text = "\n".join(",".join(r) for r in [COLUMNS[table], *rows]) + "\n"
    data = gzip.compress(text.encode())
    decoded = decode_table(table, data)
    assert decoded == [parse_row(table, list(r)) for r in rows]
    assert [tuple(map(type, r)) for r in decoded] == [
        tuple(map(type, parse_row(table, list(r)))) for r in rows
    ]
    with pytest.raises(ValueError, match="fields"):
        decode_table(table, gzip.compress(text.encode() + b"1,2\n"))
