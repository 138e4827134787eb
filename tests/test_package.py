"""The package's version and the digest of its files."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from radixflow.package import PACKAGE, source_digest


def test_the_source_digest_follows_every_file_but_bytecode_and_hidden_ones(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub" / "table.csv").write_text("1,2\n")
    before = source_digest(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\x00")
    (tmp_path / ".a.py.swp").write_bytes(b"\x00")
    assert source_digest(tmp_path) == before
    (tmp_path / "sub" / "table.csv").write_text("1,3\n")
    assert source_digest(tmp_path) != before
    assert len(source_digest()) == 16 and source_digest() == source_digest(PACKAGE)


def test_the_checkout_tracks_no_model_the_zoo_built():
    """A run with `RADIXFLOW_CACHE=~nosuchuser/x`, before that value was refused, built the zoo's
    qwen3_5-tiny under a literal `~nosuchuser/` in the working directory, and that build (800 kB of
    weights) was committed at the repository's root: what a newcomer's clone lists first. Weights
    are built into the cache at run time (a zoo build leaves its `radixflow_zoo.json`), never kept
    in the repository."""
    root = PACKAGE.parent
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    tracked = [Path(p) for p in listed.stdout.split("\0") if p]
    assert len(tracked) > 100
    built = [
        str(p)
        for p in tracked
        if p.parts[0].startswith("~") or p.name == "radixflow_zoo.json" or p.suffix == ".safetensors"
    ]
    assert built == []
