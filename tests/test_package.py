"""The package's version and the digest of its files."""

from __future__ import annotations

from pathlib import Path

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
