"""Optional dependencies: a command that needs an extra says which one, in one line."""

from __future__ import annotations

from radixflow.cli.command import UsageError
from radixflow.package import missing_torch_extra


def require_torch_extra(what: str) -> None:
    """Raise a `UsageError` naming the install command when a package of the extra is missing."""
    missing = missing_torch_extra(what)
    if missing is not None:
        raise UsageError(str(missing))
