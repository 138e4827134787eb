"""`code_digest` of a plugin that is a module of a package of the user's: a module it imports
from that package computes the results too, so a change there is another code's result."""

from __future__ import annotations

import functools
import importlib
import sys

import pytest

from radixflow.plugin_digest import code_digest
from radixflow.plugins import plugin_modules
from radixflow.scheduler.policy import SCHEDULING_POLICIES

POLICIES = """
from labpkg.helpers import NAME
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native


class Lab(Native):
    name = NAME


SCHEDULING_POLICIES.register(NAME, Lab)
"""


@pytest.fixture
def labpkg(tmp_path, monkeypatch):
    """A package `labpkg` whose `policies` registers `lab`, named in its `helpers`; undone after."""
    root = tmp_path / "labpkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "helpers.py").write_text('NAME = "lab"\n')
    (root / "policies.py").write_text(POLICIES)
    (root / "later.py").write_text("")  # imported by nothing yet: a lazy import's module
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ("labpkg", "labpkg.helpers", "labpkg.policies")
    try:
        importlib.import_module("labpkg.policies")
        yield root
    finally:
        dict.pop(SCHEDULING_POLICIES, "lab", None)
        for name in names:
            sys.modules.pop(name, None)


def test_the_code_digest_follows_the_modules_a_plugin_imports_from_its_package(labpkg):
    # only `policies.py` was read: a changed helper's cells were read back as this code's
    assert plugin_modules() == ["labpkg.policies"]
    before = code_digest()
    (labpkg / "helpers.py").write_text('NAME = "lab"  # changed\n')
    assert code_digest() != before
    changed = code_digest()
    (labpkg / "later.py").write_text("WEIGHT = 2\n")
    lazy = code_digest()
    assert lazy != changed
    # what is no module's source is not read (bytecode follows the code; data may be large)
    (labpkg / "notes.txt").write_text("not code")
    (labpkg / "__pycache__").mkdir()
    (labpkg / "__pycache__" / "helpers.cpython-312.pyc").write_bytes(b"\0")
    assert code_digest() == lazy


def test_a_plugin_outside_any_package_is_digested_by_its_own_file_as_before(tmp_path, monkeypatch):
    # results cached under a single-file plugin before stay its own
    import hashlib

    from radixflow.package import source_digest

    path = tmp_path / "solo_plugin.py"
    path.write_text(POLICIES.replace("from labpkg.helpers import NAME", 'NAME = "solo"'))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module("solo_plugin")
        was = hashlib.sha256(source_digest().encode())
        was.update(b"solo_plugin\0")
        was.update(hashlib.sha256(path.read_bytes()).digest())
        assert code_digest() == was.hexdigest()[:16]
    finally:
        dict.pop(SCHEDULING_POLICIES, "solo", None)
        sys.modules.pop("solo_plugin", None)


def test_a_factory_registered_as_a_partial_is_the_module_of_what_it_wraps(tmp_path, monkeypatch):
    # `functools.partial(Tuned, alpha=0.5)`, an eviction factory with a setting: its module was
    # `functools`, so the code digest read functools.py, and Ray workers were told to import it
    from radixflow.cache.eviction import EVICTION_POLICIES
    from radixflow.plugins import PLUGINS_ENV
    from radixflow.ray_start import worker_env

    (tmp_path / "tuned_plugin.py").write_text("class Tuned:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    tuned = importlib.import_module("tuned_plugin").Tuned
    try:
        EVICTION_POLICIES.register("tuned", functools.partial(functools.partial(tuned), alpha=0.5))
        assert plugin_modules() == ["tuned_plugin"]
        assert worker_env()[PLUGINS_ENV] == "tuned_plugin"
    finally:
        dict.pop(EVICTION_POLICIES, "tuned", None)
        sys.modules.pop("tuned_plugin", None)
