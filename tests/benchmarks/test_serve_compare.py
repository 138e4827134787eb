"""benchmarks/serve_compare.py: every variant's server runs the variant's own source tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_utils import load_benchmark

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def compare():
    return load_benchmark("serve_compare")


def _fake_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "old"
    (tree / "radixflow" / "cli").mkdir(parents=True)
    (tree / "radixflow" / "__init__.py").write_text("")
    (tree / "radixflow" / "cli" / "__init__.py").write_text("")
    (tree / "radixflow" / "cli" / "__main__.py").write_text("print('old tree')\n")
    return tree


def test_a_variant_imports_its_own_tree_from_this_checkout(compare, tmp_path, monkeypatch):
    tree = _fake_tree(tmp_path)
    monkeypatch.chdir(ROOT)  # where `python -m` once put this tree first on sys.path
    assert compare.imported_tree(compare.parse_variant(f"old={tree}")) == tree.resolve()
    assert compare.imported_tree(compare.parse_variant(f"main={ROOT}")) == ROOT.resolve()


def test_the_server_serve_load_starts_runs_the_variant_tree(tmp_path, monkeypatch):
    """`python -m radixflow.cli` in `serve_load.server_env()`, run from this checkout."""
    tree = _fake_tree(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tree))
    env = load_benchmark("serve_load").server_env()
    cmd = [sys.executable, "-m", "radixflow.cli"]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "old tree"


def test_a_variant_that_is_no_source_tree_is_refused(compare, tmp_path):
    with pytest.raises(Exception, match="not a radixflow source tree"):
        compare.parse_variant(f"old={tmp_path}")
