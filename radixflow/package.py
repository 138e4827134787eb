"""The installed package's version, for `radixflow --version` and the server's ``GET /version``;
a digest of the package's files, for what computed an experiment's cached results; and whether
the torch extra is installed, for every door that needs it."""

from __future__ import annotations

import hashlib
import importlib
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


# What `pip install -e '.[torch]'` brings (pyproject.toml, [project.optional-dependencies]).
TORCH_EXTRA = ("torch", "safetensors", "tokenizers", "numpy", "gguf", "jinja2")


def missing_torch_extra(what: str) -> ModuleNotFoundError | None:
    """Why ``what`` cannot run here, naming the install command (None: the torch extra is
    installed): one wording for the command line and the API."""
    for name in TORCH_EXTRA:
        try:
            importlib.import_module(name)
        except ImportError:
            said = f"{what} needs the torch extra (package {name!r} is missing): pip install -e '.[torch]'"
            return ModuleNotFoundError(said, name=name)
    return None
