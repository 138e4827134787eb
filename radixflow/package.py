"""The installed package's version, for `radixflow --version` and the server's ``GET /version``;
and a digest of the package's files, for what computed an experiment's cached results."""

from __future__ import annotations

import hashlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def package_version() -> str:
    try:
        return version("radixflow")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown (not installed)"


PACKAGE = Path(__file__).resolve().parent  # the package as it is imported


def source_digest(root: Path = PACKAGE) -> str:
    """A hash of every file under ``root``, the package's code and its data (the sim's kernel
    tables): what computes a result, where the version, one for every commit, cannot say."""
    digest = hashlib.sha256()
    # not a hidden file (an editor's swap file) nor bytecode, which follow the code
    files = (p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    for path in sorted(p for p in files if "__pycache__" not in p.parts):
        digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]
