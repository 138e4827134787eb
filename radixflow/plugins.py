"""Entries added from outside the package (docs/extending.md): `Registry`, the dict each option's
entries are found in by name, whose `register` refuses a name it has (assigning one replaces the
built-in entry without a word); the modules named by RADIXFLOW_PLUGINS, imported before a registry
is first read in any process (the command line, a Ray worker); the modules the entries come from
(`plugin_digest.py`: what computes a result once they are part of it)."""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import ClassVar, TypeVar

from radixflow.plugin_errors import PLUGINS_ENV, PluginError, import_failure
from radixflow.problems import warn

V = TypeVar("V")

# an experiment's variant is `policy@placement+eviction+admission`: a name holding one of these
# could never be named there
SEPARATORS = ("@", "+")
_imported: str | None = None  # the PLUGINS_ENV whose modules are imported (None: not yet)
_importing: str | None = None  # the PLUGINS_ENV whose modules the thread holding `_lock` imports
_importer = ""  # the name of the thread that imports them
_importer_id = 0  # and its ident
# (registry id, name) `register`ed by another thread during the import: a failed one keeps them
_aside: set[tuple[int, str]] = set()
# the modules whose bodies ran a `register` of the importing thread (a plugin's helper module
# registering a built-in entry under a name of its own): those new to a failed import leave too
_registrars: set[str] = set()
_told = False  # whether a thread waiting for this import said so (once an import)
# one thread imports the modules while the others wait (a server's handlers reading a registry
# first at once); re-entrant: a plugin reads a registry as it is imported
_lock = threading.RLock()
# held from a name's check to its write: two threads registering one name at once would both pass
# the check, and the second replace the first without a word
_register_lock = threading.Lock()
# a thread waiting longer for another's import of the plugins says so, and waits on: a plugin
# whose import waits for a thread that reads a registry (one it started) waits for ever
SLOW_IMPORT_S = 10.0
_POLL_S = 0.005  # how often a waiting thread looks whether the import waits for it instead
_IMPORT_WAITS = ("_find_and_load", "_lock_unlock_module")  # Python's waits on a module's `name`


def import_plugins() -> None:
    """Imports each module PLUGINS_ENV names, once per value; `PluginError` for one that fails.
    One thread imports them; another reading a registry meanwhile waits until they are all in."""
    global _imported, _importing, _importer, _importer_id, _told
    named = os.environ.get(PLUGINS_ENV, "")
    if named == _imported:  # set once every module is in: a reader never finds them half made
        return
    if not _wait_for_lock(named):
        return
    try:
        # imported while this thread waited; or this thread's own import, a plugin reading a
        # registry as it is imported (only the lock's holder sees it)
        if named in (_imported, _importing):
            return
        _importing, _importer, _told = named, threading.current_thread().name, False
        _importer_id = threading.get_ident()
        _aside.clear()
        try:
            _import_each(named)
        finally:
            _importing = None
        # a module this thread's stack is importing (a read in its body) is half made: another
        # thread's read must wait for it, as its import does (Python's lock on the module)
        _imported = None if any(_half_made(m) for m in _modules(named)) else named
    finally:
        _lock.release()


def _wait_for_lock(named: str) -> bool:
    """Takes `_lock` (True). False, without it, for a thread running the import of a module
    ``named`` names while another thread holds it: that one waits for this import to end
    (Python's lock on the module), so this one is served what is registered so far, as the
    importing thread's plugins are. A thread that waits `SLOW_IMPORT_S` for another's import
    says so in one line (the first of them, once an import) and waits on: a slow import is no
    error. False too where the importing thread waits for a module whose body this one runs."""
    global _told
    if _lock.acquire(blocking=False):
        return True
    if _running_import_of(named):
        return False
    start = time.monotonic()
    while not _lock.acquire(timeout=_POLL_S):
        if _importer_waits_on(_importing_here()):  # a plugin's helper imported here: for ever
            return False
        if not _told and _importing is not None and time.monotonic() - start >= SLOW_IMPORT_S:
            _told = True
            _say_waited(_importer, _importing)
    return True


def _importer_waits_on(mine: set[str]) -> bool:
    """Whether the plugins' importing thread waits for Python's import of one of ``mine``."""
    frame = sys._current_frames().get(_importer_id) if _importing is not None else None  # noqa: SLF001
    while frame is not None:
        if frame.f_code.co_name in _IMPORT_WAITS and frame.f_locals.get("name") in mine:
            return True
        frame = frame.f_back
    return False


def _say_waited(thread: str, importing: str) -> None:
    """One line on stderr: this thread waited `SLOW_IMPORT_S` for ``thread``'s import of ``importing``."""
    why = "a plugin's import that waits for a thread reading a registry waits for ever"
    waited = f"waited {SLOW_IMPORT_S:g} s for thread {thread!r} importing {importing!r}"
    warn(f"{PLUGINS_ENV}: {waited}; waiting on ({why})")


def _await_import_elsewhere(module: str) -> None:
    """Waits while another thread runs ``module``'s body (the user's own `import` of it), where
    importing it would wait on Python's lock on the module without a word: says so after
    `SLOW_IMPORT_S`, as a wait for the plugins' lock does, and waits on."""
    start, told = time.monotonic(), False
    while _half_made(module) and module not in _importing_here():
        if not told and time.monotonic() - start >= SLOW_IMPORT_S:
            told = True
            _say_waited(_thread_importing(module), module)
        time.sleep(0.005)


def _thread_importing(module: str) -> str:
    """The name of the thread whose stack runs ``module``'s body ("" where none does)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    frames = sys._current_frames()  # noqa: SLF001 (the one way to read another thread's stack)
    return next((names.get(i, "") for i, f in frames.items() if module in _importing_here(f)), "")


def _running_import_of(named: str) -> bool:
    """Whether this thread runs the body of a module ``named`` names (or of one it imports):
    a frame of its own stack."""
    return not _importing_here().isdisjoint(_modules(named))


def _importing_here(frame: FrameType | None = None) -> set[str]:
    """The modules whose bodies run on this thread's stack, or ``frame``'s (being imported, or
    `__main__`)."""
    names, frame = set(), frame or inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            names.add(str(frame.f_globals.get("__name__")))
        frame = frame.f_back
    return names


def _modules(named: str) -> list[str]:
    """The module names in ``named`` (PLUGINS_ENV's value), in order. Pure."""
    return [m.strip() for m in named.split(",") if m.strip()]


def _half_made(module: str) -> bool:
    """Whether ``module`` is in `sys.modules` with its body still running."""
    return bool(getattr(getattr(sys.modules.get(module), "__spec__", None), "_initializing", False))


def _import_each(named: str) -> None:
    """Imports each of ``named``'s comma-separated modules; `PluginError` for the first that fails."""
    for module in _modules(named):
        # what a module that fails half-way registered goes with it: the next read, the module
        # fixed, imports it again, and its `register` would refuse the names its first half took
        saved = [dict.copy(registry) for registry in Registry.made]  # no read: no plugin import
        before = set(sys.modules)  # a module mid-import (`__main__`, this plugin's) is in it
        _registrars.clear()
        try:
            _await_import_elsewhere(module)
            importlib.import_module(module)
        except BaseException as e:  # its syntax, its `register` refusing a name, its sys.exit
            # the modules new to it that defined an entry dropped or registered one leave, so that
            # their next import registers them again (one imported before, functools, stays)
            for registering in (_restore(saved) | _registrars) - before:
                sys.modules.pop(registering, None)
            if not isinstance(e, Exception | SystemExit):
                raise  # a Ctrl-C goes on as one, the registries as they were
            raise PluginError(import_failure(module, e)) from e


def _restore(saved: list[dict[str, object]]) -> set[str]:
    """Each registry as ``saved`` (one made since, a module of the package the import imported
    first, as it was made), but for the names another thread registered meanwhile (`_aside`);
    returns the modules outside the package that define the entries dropped."""
    saved = saved + [registry.built_in for registry in Registry.made[len(saved) :]]
    defining: set[str] = set()
    for registry, was in zip(Registry.made, saved, strict=True):
        kept = {n: e for n, e in dict.items(registry) if (id(registry), n) in _aside}
        added = [entry for name, entry in dict.items(registry) if name not in was and name not in kept]
        defining |= {_module_of(entry) for entry in added if from_outside(entry)}
        dict.clear(registry)
        dict.update(registry, was | kept)
    return defining


def forget_plugins() -> None:
    """The next registry read imports PLUGINS_ENV's modules again (tests)."""
    global _imported
    _imported = None


class Registry(dict[str, V]):
    """A plain dict of ``what``'s entries by name (read, iterated and assigned as any dict);
    `register` adds one under a name of its own. Every registry made is in `Registry.made`."""

    made: ClassVar[list[Registry[object]]] = []

    def __init__(self, what: str, entries: dict[str, V], read_on_import: bool = False) -> None:
        """``read_on_import``: the package reads it as it is imported (the sim's zoo shapes read
        the config readers), when a plugin importing the package would find it half made, so a
        read of it imports no plugin: the policies' registries, read first, do."""
        super().__init__(entries)
        self.what = what
        self.built_in = dict(entries)  # what a failed plugin import that made it puts back
        self.imports_plugins = not read_on_import
        Registry.made.append(self)  # type: ignore[arg-type]

    def _plugins(self) -> None:
        if self.imports_plugins:
            import_plugins()

    def register(self, name: str, entry: V) -> V:
        """Adds ``entry`` as ``name`` and returns it; a ValueError, the registry unchanged, for a
        name it has already or one no door can spell. Imports no plugin: one registering a name
        that a plugin imported later takes is refused at that plugin's import instead."""
        with _register_lock:  # takes no other lock: the check reads no registry through a read
            why = self._refused(name)
            if why is not None:
                raise ValueError(f"{self.what} {name!r}{why}")
            self[name] = entry
        # checked after the write: another thread's import that began after it saved it already;
        # the importing thread's own, made by the modules being imported (a failed one drops them)
        if _importing is not None and threading.get_ident() != _importer_id:
            _aside.add((id(self), name))
        elif _importing is not None:
            _registrars.update(_importing_here())
        return entry

    def _refused(self, name: object) -> str | None:
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            return ": a name is a non-empty string without spaces at its ends"
        if any(s in name for s in SEPARATORS):
            return ": a name holds no '@' nor '+' (an experiment's variant splits on them)"
        # the names it has now, no plugin imported: a plugin registers as another thread's first
        # read imports it (waiting for the import lock this thread holds, under the plugins' one)
        if dict.__contains__(self, name):
            was = dict.__getitem__(self, name)
            called = getattr(was, "__qualname__", was if isinstance(was, str) else type(was).__qualname__)
            return f" is registered already ({called}): register yours under another name"
        return None


# every read of a registry imports PLUGINS_ENV's modules first (once), so that no read finds a
# plugin's name missing; writes (`register`, assigning, `update`, `del`) import none
_READS = ("__contains__", "__iter__", "__reversed__", "__len__", "__getitem__", "__eq__", "__ne__")
_READS += ("__repr__", "__or__", "__ror__", "get", "keys", "values", "items", "copy", "pop")
_READS += ("popitem", "setdefault")


def _reading(name: str) -> Callable[..., object]:
    """dict's ``name``, importing the plugins first."""
    read = getattr(dict, name)

    def imported_first(self: Registry[object], *args: object) -> object:
        self._plugins()
        return read(self, *args)

    imported_first.__name__, imported_first.__qualname__ = name, f"Registry.{name}"
    imported_first.__doc__ = read.__doc__
    return imported_first


for _name in _READS:
    setattr(Registry, _name, _reading(_name))


def _module_of(entry: object) -> str:
    """The module that defines ``entry`` (a class, a factory, a partial of one: of what it wraps;
    a model family's "module:Class")."""
    if isinstance(entry, str):
        return entry.partition(":")[0]
    while isinstance(entry, functools.partial):  # an eviction factory with a setting of its own
        entry = entry.func
    return str(getattr(entry, "__module__", None) or type(entry).__module__)


def from_outside(entry: object) -> bool:
    """Whether ``entry`` (or what it built) is defined outside the package: a plugin's."""
    module = _module_of(entry)
    return module != "radixflow" and not module.startswith("radixflow.")


def plugin_modules() -> list[str]:
    """The modules outside the package that define an entry of a registry, sorted."""
    entries = [entry for registry in Registry.made for entry in registry.values()]
    return sorted({_module_of(entry) for entry in entries if from_outside(entry)})
