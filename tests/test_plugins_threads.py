"""A thread importing a RADIXFLOW_PLUGINS module itself (`import early_plugin`) whose body reads
a registry before it registers its entries is served what is registered so far; another thread
reading a registry meanwhile waits for the module to be whole, as it waits for an import through
the variable (tests/test_plugins_import.py). Two threads registering one name at once: the second
is refused."""

from __future__ import annotations

import sys
import threading
import types

import pytest
from thread_utils import AskedLock, gated_plugin

from radixflow import plugins
from radixflow.plugins import PLUGINS_ENV, forget_plugins
from radixflow.scheduler.policy import SCHEDULING_POLICIES

# a plugin reading a registry first, then stopping half-way until the test lets it go on
EARLY_PLUGIN = """
import slow_gate
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native

"native" in SCHEDULING_POLICIES
slow_gate.started.set()
slow_gate.proceed.wait(timeout=30)  # a safety net for a broken test, never the synchronisation


class Late(Native):
    name = "late"


SCHEDULING_POLICIES.register("late", Late)
"""


class SeenLock:
    """The plugins' lock, saying (``seen``) when a thread other than ``quiet`` asks for it."""

    def __init__(self, seen: threading.Event) -> None:
        self.lock = threading.RLock()
        self.seen = seen
        self.quiet = threading.get_ident()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if threading.get_ident() != self.quiet:
            self.seen.set()
        return self.lock.acquire(blocking, timeout)

    def release(self) -> None:
        self.lock.release()


@pytest.fixture
def gate(tmp_path, monkeypatch):
    with gated_plugin(tmp_path, monkeypatch, "early_plugin", EARLY_PLUGIN) as gate:
        yield gate


def test_a_thread_reading_while_another_imports_a_plugin_itself_waits_for_the_plugin(gate, monkeypatch):
    # the importing thread's read, its plugin half made, marked the variable imported: a read in
    # another thread then answered at once, the plugin's `late` missing
    importer = threading.Thread(target=lambda: __import__("early_plugin"), daemon=True)
    importer.start()
    assert gate.started.wait(timeout=30)
    asked = threading.Event()
    monkeypatch.setattr(plugins, "_lock", SeenLock(asked))
    seen: list[bool] = []

    def read() -> None:
        seen.append("late" in SCHEDULING_POLICIES)
        asked.set()  # before the fix it never asks for the lock: it answers at once

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert asked.wait(timeout=30)
    gate.proceed.set()
    importer.join(timeout=10)
    reader.join(timeout=10)
    assert seen == [True]
    assert "late" in SCHEDULING_POLICIES


# read as it is imported, then starting a thread that reads a registry and waiting for it (for
# what the test lets it: a plugin waiting for ever hangs with no word of why)
WAITING_PLUGIN = """
import threading

import slow_gate
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native

"native" in SCHEDULING_POLICIES


class Early(Native):
    name = "early"


SCHEDULING_POLICIES.register("early", Early)
reader = threading.Thread(target=lambda: slow_gate.seen.append("early" in SCHEDULING_POLICIES))
reader.start()
slow_gate.told.wait(timeout=5)  # a safety net for a broken test, never the synchronisation
"""


def test_a_plugin_imported_itself_that_waits_for_a_thread_reading_a_registry_is_told(
    tmp_path, monkeypatch, capsys
):
    # the thread waited, with no word, on Python's lock on the module the plugin's import held
    (tmp_path / "waiting_plugin.py").write_text(WAITING_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    gate = types.SimpleNamespace(told=threading.Event(), seen=[])
    monkeypatch.setitem(sys.modules, "slow_gate", gate)
    monkeypatch.setenv(PLUGINS_ENV, "waiting_plugin")
    monkeypatch.setattr(plugins, "SLOW_IMPORT_S", 0.0)  # the import holds the module: no wait is short
    said = plugins.warn
    monkeypatch.setattr(plugins, "warn", lambda line: (said(line), gate.told.set()))
    forget_plugins()
    try:
        __import__("waiting_plugin")
        sys.modules["waiting_plugin"].reader.join(timeout=10)
    finally:
        dict.pop(SCHEDULING_POLICIES, "early", None)
        sys.modules.pop("waiting_plugin", None)
        forget_plugins()
    assert gate.told.is_set()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("radixflow: warning: RADIXFLOW_PLUGINS: waited 0 s for thread 'MainThread'")
    assert "importing 'waiting_plugin'" in err
    assert gate.seen == [True]


def test_two_threads_registering_one_name_at_once_refuse_the_second(monkeypatch):
    # both passed the check before either wrote: the second replaced the first without a word
    checked, proceed, second_on = threading.Event(), threading.Event(), threading.Event()
    monkeypatch.setattr(plugins, "_register_lock", AskedLock("second", second_on), raising=False)
    refused = plugins.Registry._refused

    def check(self, name):  # the first thread stops between its check and its write
        why = refused(self, name)
        if threading.current_thread().name == "first":
            checked.set()
            proceed.wait(timeout=30)  # a safety net for a broken test, never the synchronisation
        return why

    monkeypatch.setattr(plugins.Registry, "_refused", check)
    registry = plugins.Registry("test entry", {})
    plugins.Registry.made.remove(registry)  # no plugin's import puts it back
    said: dict[str, str] = {}

    def register(entry: str) -> None:
        try:
            registry.register("same", entry)
            said[entry] = "registered"
        except ValueError as e:
            said[entry] = str(e)
        second_on.set()  # ended without asking for the lock (before the fix): it ran its check

    first = threading.Thread(target=register, args=("first",), name="first", daemon=True)
    second = threading.Thread(target=register, args=("second",), name="second", daemon=True)
    first.start()
    assert checked.wait(timeout=30)
    second.start()
    assert second_on.wait(timeout=30)  # it waits for the lock, or it has registered
    proceed.set()
    first.join(timeout=30)
    second.join(timeout=30)
    assert said["first"] == "registered"
    taken = "test entry 'same' is registered already (first): register yours under another name"
    assert said["second"] == taken
    assert dict(registry) == {"same": "first"}


# a plugin importing a helper module of its own, whose body reads a registry
HELPED_PLUGIN = """
import slow_gate

slow_gate.plugin_started.set()
import plugin_helper
from radixflow.scheduler.policy import SCHEDULING_POLICIES


class Late(plugin_helper.Native):
    name = "late"


SCHEDULING_POLICIES.register("late", Late)
"""
PLUGIN_HELPER = """
import slow_gate
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native

slow_gate.started.set()
slow_gate.proceed.wait(timeout=30)  # a safety net for a broken test, never the synchronisation
slow_gate.seen.append("native" in SCHEDULING_POLICIES)
"""


def test_a_helper_imported_by_a_thread_while_another_imports_the_plugin_needing_it_ends(
    tmp_path, monkeypatch, capsys
):
    # the helper's read waited for the plugins' lock, whose holder waited for the helper (Python's
    # lock on the module): both for ever, told after SLOW_IMPORT_S only
    (tmp_path / "plugin_helper.py").write_text(PLUGIN_HELPER)
    monkeypatch.delitem(sys.modules, "plugin_helper", raising=False)
    monkeypatch.setattr(plugins, "SLOW_IMPORT_S", 60.0)  # no line may settle it
    more = {"plugin_started": threading.Event(), "seen": []}
    with gated_plugin(tmp_path, monkeypatch, "helped_plugin", HELPED_PLUGIN, **more) as gate:
        helper = threading.Thread(target=lambda: __import__("plugin_helper"), daemon=True)
        helper.start()
        assert gate.started.wait(timeout=30)
        reader = threading.Thread(target=lambda: gate.seen.append("late" in SCHEDULING_POLICIES))
        reader.daemon = True
        reader.start()
        assert gate.plugin_started.wait(timeout=30)  # the reader holds the plugins' lock
        gate.proceed.set()
        helper.join(timeout=30)
        reader.join(timeout=30)
        assert not helper.is_alive() and not reader.is_alive()
        assert gate.seen == [True, True]
        sys.modules.pop("plugin_helper", None)
    assert "waited" not in capsys.readouterr().err
