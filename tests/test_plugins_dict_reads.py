"""A registry is a plain dict (docs/extending.md): every way of reading it imports RADIXFLOW_PLUGINS'
modules first, as `[]`, `get`, `in` and iteration do, so a plugin's name is never found absent
by one read and present by the next."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from radixflow.plugins import PLUGINS_ENV, forget_plugins
from radixflow.scheduler.policy import SCHEDULING_POLICIES

PLUGIN = """
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native


class Read(Native):
    name = "read"


SCHEDULING_POLICIES.register("read", Read)
"""

# each read, and whether what it answered holds the plugin's name
READS: dict[str, Callable[[dict], bool]] = {
    "len": lambda r: len(r) == len(dict.keys(r)),
    "copy": lambda r: "read" in dict.keys(r.copy()),
    "pop": lambda r: r.pop("read", None) is not None,
    "setdefault": lambda r: r.setdefault("read", None) is not None,
    "repr": lambda r: "'read'" in repr(r),
    "union": lambda r: "read" in dict.keys(r | {}),
    "reversed": lambda r: "read" in list(reversed(r)),
    "equal": lambda r: r != dict(dict.items(r)),  # the built-in entries, taken before the read
}


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """RADIXFLOW_PLUGINS naming a module registering `read`, not imported yet; undone afterwards."""
    (tmp_path / "read_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "read_plugin", raising=False)
    monkeypatch.setenv(PLUGINS_ENV, "read_plugin")
    forget_plugins()
    try:
        yield
    finally:
        dict.pop(SCHEDULING_POLICIES, "read", None)
        sys.modules.pop("read_plugin", None)
        forget_plugins()


@pytest.mark.parametrize("read", READS)
def test_each_read_of_a_registry_imports_the_plugins_first(plugin, read):
    # each was the built-in entries alone until another read imported the plugins: `pop` of a
    # plugin's name a KeyError, `len` and a `copy` short of it, `repr` without it
    assert READS[read](SCHEDULING_POLICIES)
    assert "read_plugin" in sys.modules
