"""RADIXFLOW_PLUGINS (`plugins.py`) and what is said of a module it names that cannot be imported:
`PluginError`, one line naming it and why."""

from __future__ import annotations

# modules to import before a registry is read, comma-separated: what a process of radixflow's own
# (the command line, experiment --ray's workers, serve --replicas' replicas) knows of the user's
PLUGINS_ENV = "RADIXFLOW_PLUGINS"


class PluginError(ValueError):
    """A module PLUGINS_ENV names cannot be imported: one line naming it and why."""


def import_failure(module: str, e: BaseException) -> str:
    """One line: why ``module`` could not be imported (``e``); a path named for it is told to
    name its module (the path's import fails, or runs the file as a package), a name no module
    has ("a;b", "mod:Class", ".rel") how modules are named. Pure."""
    if module.endswith(".py") or any(sep in module for sep in "/\\"):
        stem = module.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py")
        named = f"name its module ({stem!r}), with its directory on PYTHONPATH"
        return f"{PLUGINS_ENV}: {module!r} is a path: {named}"
    missing = (isinstance(e, ModuleNotFoundError) and e.name == module) or module.startswith(".")
    if missing and not all(part.isidentifier() for part in module.split(".")):
        how = "name modules, comma-separated, as in fifo_plugin,lab.policies"
        return f"{PLUGINS_ENV}: {module!r} is no module name: {how}"
    said = (str(e).splitlines() or [type(e).__name__])[0]
    if isinstance(e, SystemExit):  # an argparse parse at import time: its usage line is above
        said = f"it exits as it is imported: sys.exit({e.code!r})"
    return f"{PLUGINS_ENV}: cannot import {module!r} ({said})"
