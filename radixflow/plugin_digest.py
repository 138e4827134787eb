"""`code_digest`: what computes a result (an experiment cell's `code`, a bench's provenance), the
package's source and, once a plugin's entries are registered (`plugins.py`), their modules' too."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from radixflow.package import source_digest
from radixflow.plugins import plugin_modules


def code_digest() -> str:
    """What computes a result: the package's `source_digest`, and for each module in
    `plugin_modules` its source: its own file, or, in a package of the user's, every module's
    source in that package (what it imports from it, now or lazily, computes results too)."""
    package, modules = source_digest(), plugin_modules()
    if not modules:  # the package's digest as it always was: results cached before stay its own
        return package
    digest = hashlib.sha256(package.encode())
    for name in modules:
        digest.update(f"{name}\0".encode())
        root = _package_root(name)
        if root is not None:  # each file named, so a module moved or added is another code
            for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
                digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
                digest.update(hashlib.sha256(path.read_bytes()).digest())
            continue
        path = _file_of(name)  # as it always was for a module in no package
        if path is not None:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _package_root(module: str) -> Path | None:
    """The directory of the package at the top of ``module`` (``lab`` of ``lab.policies``, or
    ``module`` itself); None where it is in none (a file of its own, a namespace package)."""
    path = _file_of(module.partition(".")[0])
    return path.parent if path is not None and path.name == "__init__.py" else None


def _file_of(module: str) -> Path | None:
    """The source file of ``module`` (imported or not); None where it has none (`python -c`)."""
    loaded = sys.modules.get(module)
    try:
        origin = getattr(loaded, "__file__", None) if loaded else importlib.util.find_spec(module).origin
    except (ImportError, AttributeError, ValueError):  # no such module: the name alone is hashed
        return None
    path = Path(origin) if origin else None
    return path if path is not None and path.is_file() else None
