"""The installed package's version, for `radixflow --version` and the server's ``GET /version``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    try:
        return version("radixflow")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown (not installed)"
