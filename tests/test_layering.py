"""Nothing lower imports anything higher; the cache and scheduler never import torch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "radixflow"

# package -> radixflow packages it may import (besides itself)
ALLOWED = {
    "cache": set(),
    "scheduler": {"cache"},
    "engine": {"cache", "scheduler"},
    "models": set(),
    "runners": {"cache", "scheduler", "engine", "models"},
    "workloads": {"scheduler"},
    "bench": {"cache", "scheduler", "engine", "runners", "models", "workloads"},
    "cli": {"cache", "scheduler", "engine", "runners", "models", "workloads", "bench"},
}
# cli imports torch only lazily, for --runner torch (it must run without the torch extra)
NO_TORCH = {"cache", "scheduler", "engine", "workloads", "bench"}


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package):
    for path in (PKG / package).glob("*.py"):
        for name in imports(path):
            parts = name.split(".")
            if parts[0] == "radixflow" and len(parts) > 1:
                assert parts[1] in ALLOWED[package] | {package}, f"{path.name} imports {name}"
            if package in NO_TORCH:
                assert parts[0] != "torch", f"{path.name} imports torch"
