"""benchmarks/derive_kernel_tables.py: a data root without aiconfigurator's tables."""

from __future__ import annotations

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def derive():
    return load_benchmark("derive_kernel_tables")


def test_a_data_root_without_the_tables_is_one_line_naming_it(derive, tmp_path):
    # a wrong --data-root was pyarrow's FileNotFoundError traceback (or, without the extra,
    # ModuleNotFoundError: pyarrow) deep in the first table's read
    with pytest.raises(SystemExit) as exc:
        derive.main(["--data-root", str(tmp_path), "--check"])
    message = str(exc.value)
    assert message.startswith(f"--data-root {tmp_path}: no ") and ".parquet" in message
    assert "\n" not in message
