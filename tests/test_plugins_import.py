"""Importing RADIXFLOW_PLUGINS' modules. Read by two threads at once (a server's handlers, a
user's thread pool): the modules are imported once, and a thread that reads a registry while
another imports them waits for the registries to be whole instead of finding a plugin's name
missing. A failed import is said to each reader, and leaves the registries as they were."""

from __future__ import annotations

import sys
import threading
import types

import pytest
from thread_utils import gated_plugin

from radixflow import plugins
from radixflow.plugins import PLUGINS_ENV, forget_plugins
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native

# a plugin whose import stops half-way until the test lets it go on: it registers `late` only then
SLOW_PLUGIN = """
import slow_gate
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native

slow_gate.imports.append(__name__)
slow_gate.started.set()
slow_gate.proceed.wait(timeout=30)  # a safety net for a broken test, never the synchronisation


class Late(Native):
    name = "late"


SCHEDULING_POLICIES.register("late", Late)
if getattr(slow_gate, "fail", False):  # what the test asks of it: to fail after registering
    raise RuntimeError("boom")
"""


class WatchedLock:
    """The plugins' lock, saying (``waiting``) when a thread finds it held and waits for it."""

    def __init__(self, waiting: threading.Event) -> None:
        self.lock = threading.RLock()
        self.waiting = waiting

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self.lock.acquire(blocking=False):
            self.waiting.set()
            return blocking and self.lock.acquire(timeout=timeout)
        return True

    def release(self) -> None:
        self.lock.release()


@pytest.fixture
def gate(tmp_path, monkeypatch):
    with gated_plugin(tmp_path, monkeypatch, "slow_plugin", SLOW_PLUGIN, imports=[]) as gate:
        yield gate


def test_a_thread_reading_a_registry_while_another_imports_the_plugins_waits_for_them(gate, monkeypatch):
    # the second thread found the variable marked imported as the first began, and the plugin's
    # name missing: `unknown policy 'late'` to a request that came a moment too early
    waiting = threading.Event()
    monkeypatch.setattr(plugins, "_lock", WatchedLock(waiting), raising=False)
    first = threading.Thread(target=lambda: "native" in SCHEDULING_POLICIES)
    first.start()
    assert gate.started.wait(timeout=30)
    seen: list[bool] = []

    def second() -> None:
        seen.append("late" in SCHEDULING_POLICIES)
        waiting.set()  # before the fix it never waits: it answers at once

    other = threading.Thread(target=second)
    other.start()
    assert waiting.wait(timeout=30)
    gate.proceed.set()
    first.join(timeout=30)
    other.join(timeout=30)
    assert seen == [True]
    assert gate.imports == ["slow_plugin"]


def test_a_failed_import_is_told_to_the_thread_that_waited_for_it_too(gate, monkeypatch):
    monkeypatch.setenv(PLUGINS_ENV, "slow_plugin, no_such_plugin")
    gate.proceed.set()
    for _ in range(2):  # each read tries again, and says so again
        with pytest.raises(plugins.PluginError, match="cannot import 'no_such_plugin'"):
            "late" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)
    assert gate.imports == ["slow_plugin"]


HALF_PLUGIN = """
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native


class Half(Native):
    name = "half"


SCHEDULING_POLICIES.register("half", Half)
"""


def test_a_plugin_fixed_after_failing_half_way_is_imported_on_the_next_read(tmp_path, monkeypatch):
    # its first import registered `half` before it failed: the next read, the module fixed, was
    # refused for `half` being registered already, by the half of it that had run
    path = tmp_path / "half_plugin.py"
    path.write_text(HALF_PLUGIN + "raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(PLUGINS_ENV, "half_plugin")
    forget_plugins()
    try:
        with pytest.raises(plugins.PluginError, match=r"cannot import 'half_plugin' \(boom\)"):
            "half" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)
        assert "half" not in dict.keys(SCHEDULING_POLICIES)  # the registries as they were
        path.write_text(HALF_PLUGIN + "# fixed\n")
        assert "half" in SCHEDULING_POLICIES
    finally:
        dict.pop(SCHEDULING_POLICIES, "half", None)
        sys.modules.pop("half_plugin", None)
        forget_plugins()


@pytest.mark.parametrize(
    "named", ["waits_plugin.py", "./plugins/waits_plugin.py", "plugins\\waits_plugin.py"]
)
def test_a_file_named_for_a_module_is_told_to_name_its_module(monkeypatch, named):
    # was "No module named 'waits_plugin.py'; 'waits_plugin' is not a package", or a relative
    # import's complaint about a 'package' argument
    monkeypatch.setenv(PLUGINS_ENV, named)
    forget_plugins()
    try:
        with pytest.raises(plugins.PluginError) as caught:
            "native" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)
    finally:
        forget_plugins()
    said = f"RADIXFLOW_PLUGINS: {named!r} is a path: name its module ('waits_plugin'), with its "
    assert str(caught.value) == said + "directory on PYTHONPATH"


def test_a_plugin_named_by_its_file_then_by_its_module_registers_its_entries(tmp_path, monkeypatch):
    # `waits_plugin.py` imports `waits_plugin` (its entries registered), then fails: the entries
    # go, and so must the module, or naming it right next found it imported and registered nothing
    (tmp_path / "waits_plugin.py").write_text(HALF_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(PLUGINS_ENV, "waits_plugin.py")
    forget_plugins()
    try:
        with pytest.raises(plugins.PluginError, match="is a path: name its module"):
            "half" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)
        monkeypatch.setenv(PLUGINS_ENV, "waits_plugin")
        assert "half" in SCHEDULING_POLICIES
    finally:
        dict.pop(SCHEDULING_POLICIES, "half", None)
        sys.modules.pop("waits_plugin", None)
        forget_plugins()


class TakenLock(WatchedLock):
    """The plugins' lock, saying (``taken``) when a thread has it."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        taken = super().acquire(blocking, timeout)
        if taken:
            self.waiting.set()
        return taken


# a plugin reading a registry as it is imported, after the test lets it
READING_PLUGIN = SLOW_PLUGIN.replace(
    "slow_gate.proceed.wait(timeout=30)",
    "slow_gate.proceed.wait(timeout=30)\n'native' in SCHEDULING_POLICIES",
)


@pytest.mark.parametrize("source", [SLOW_PLUGIN, READING_PLUGIN])
def test_a_thread_importing_a_plugin_while_another_imports_it_for_a_registry_read_both_go_on(
    gate, monkeypatch, tmp_path, source
):
    # `import slow_plugin` in one thread (its module lock held), a first registry read in another
    # (the plugins' lock held, waiting for that module lock): the plugin's `register`, or a read
    # of its own, read the registry, so waited for the plugins' lock: each thread held what the
    # other waited for
    (tmp_path / "slow_plugin.py").write_text(source)
    taken = threading.Event()
    monkeypatch.setattr(plugins, "_lock", TakenLock(taken), raising=False)
    importer = threading.Thread(target=lambda: __import__("slow_plugin"), daemon=True)
    importer.start()
    assert gate.started.wait(timeout=30)
    seen: list[bool] = []
    reader = threading.Thread(target=lambda: seen.append("late" in SCHEDULING_POLICIES), daemon=True)
    reader.start()
    assert taken.wait(timeout=30)
    gate.proceed.set()
    importer.join(timeout=10)  # a safety net: before the fix both threads waited for ever
    reader.join(timeout=10)
    assert not importer.is_alive() and not reader.is_alive()
    assert seen == [True]
    assert gate.imports == ["slow_plugin"]


# a plugin whose import starts a thread reading a registry and waits for it (for what the test
# lets it: a plugin waiting for ever hangs with no word of why)
WAITING_PLUGIN = """
import threading

import slow_gate
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native


class Early(Native):
    name = "early"


SCHEDULING_POLICIES.register("early", Early)
reader = threading.Thread(target=lambda: slow_gate.seen.append("early" in SCHEDULING_POLICIES))
reader.start()
slow_gate.told.wait(timeout=10)  # a safety net for a broken test, never the synchronisation
"""


def test_a_thread_waiting_for_the_import_of_a_plugin_that_waits_for_it_says_so_in_one_line(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "waiting_plugin.py").write_text(WAITING_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    gate = types.SimpleNamespace(told=threading.Event(), seen=[])
    monkeypatch.setitem(sys.modules, "slow_gate", gate)
    monkeypatch.setenv(PLUGINS_ENV, "waiting_plugin")
    monkeypatch.setattr(plugins, "SLOW_IMPORT_S", 0.0)  # the import holds the lock: no wait is short
    said = plugins.warn
    monkeypatch.setattr(plugins, "warn", lambda line: (said(line), gate.told.set()))
    forget_plugins()
    try:
        assert "early" in SCHEDULING_POLICIES
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
    assert gate.seen == [True]  # it waits on: every plugin's name is in when it reads


class Aside(Native):
    name = "aside"


def test_a_name_registered_by_another_thread_while_a_plugin_fails_to_import_stays(gate):
    # a failed import puts the registries back as they were before it: a name another thread's
    # `register` added meanwhile (it imports no plugin, so it does not wait) went with it
    failed: list[Exception] = []

    def read() -> None:
        try:
            "late" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)
        except plugins.PluginError as e:
            failed.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert gate.started.wait(timeout=30)
    try:
        SCHEDULING_POLICIES.register("aside", Aside)
        gate.fail = True
        gate.proceed.set()
        reader.join(timeout=10)
        assert failed and "cannot import 'slow_plugin' (boom)" in str(failed[0])
        assert dict.get(SCHEDULING_POLICIES, "aside") is Aside
        assert "late" not in dict.keys(SCHEDULING_POLICIES)  # the plugin's half goes
    finally:
        dict.pop(SCHEDULING_POLICIES, "aside", None)
