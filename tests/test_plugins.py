"""Registering an entry from outside the package (docs/extending.md): `register` refuses a name
the registry has, in one line, where assigning it would replace the built-in entry silently."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from radixflow.cache.eviction import EVICTION_POLICIES
from radixflow.cli.app import main
from radixflow.costmodel.shape.config_readers import READERS
from radixflow.fleet.routers import ROUTERS
from radixflow.models.registry import FAMILIES
from radixflow.package import source_digest
from radixflow.plugin_digest import code_digest
from radixflow.plugins import PLUGINS_ENV, forget_plugins, plugin_modules
from radixflow.ray_start import worker_env
from radixflow.scheduler.admission import ADMISSIONS
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native

REGISTRIES = (SCHEDULING_POLICIES, PLACEMENTS, ADMISSIONS, EVICTION_POLICIES, ROUTERS, FAMILIES, READERS)


class Mine(Native):
    name = "mine"


def test_registering_a_taken_name_is_refused_in_one_line_and_the_entry_kept():
    with pytest.raises(ValueError) as caught:
        SCHEDULING_POLICIES.register("native", Mine)
    said = str(caught.value)
    assert "\n" not in said
    assert "scheduling policy 'native' is registered already (Native)" in said
    assert SCHEDULING_POLICIES["native"] is Native


def test_every_registry_registers_a_new_name_and_refuses_it_twice():
    for registry in REGISTRIES:
        saved = dict(registry)
        try:
            assert registry.register("mine", Mine) is Mine
            assert registry["mine"] is Mine
            with pytest.raises(ValueError, match="'mine' is registered already"):
                registry.register("mine", Native)
            assert registry["mine"] is Mine
        finally:
            registry.clear()
            registry.update(saved)


@pytest.mark.parametrize("name", ["", "a@b", "a+b", 3])
def test_a_name_no_door_can_spell_is_refused(name):
    # an experiment's variant is `policy@placement+eviction+admission`: a name holding '@' or '+'
    # could never be named there
    with pytest.raises(ValueError) as caught:
        SCHEDULING_POLICIES.register(name, Mine)
    assert "\n" not in str(caught.value)
    assert name not in SCHEDULING_POLICIES


def test_the_registries_stay_plain_dicts():
    for registry in REGISTRIES:
        assert isinstance(registry, dict)


PLUGIN = """
from radixflow.scheduler.policy import SCHEDULING_POLICIES, RadixFlow


class Waits(RadixFlow):
    name = "waits"


SCHEDULING_POLICIES.register("waits", Waits)
"""
EXPERIMENT = """
name = "plugin"
policies = ["native", "waits"]
[defaults]
runner = "sim"
token_budget = 256
[defaults.workload]
groups = 2
candidates = 2
context_len = 64
candidate_len = 8
[[grid]]
model = "qwen3_5-2b"
"""


@pytest.fixture
def waits_plugin(tmp_path, monkeypatch):
    """A plugin module imported from its file, as a user's is; unregistered afterwards."""
    path = tmp_path / "waits_plugin.py"
    path.write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "waits_plugin", raising=False)
    try:
        yield importlib.import_module("waits_plugin"), path
    finally:
        dict.pop(SCHEDULING_POLICIES, "waits", None)
        sys.modules.pop("waits_plugin", None)


def test_the_code_digest_follows_a_registered_plugins_module(waits_plugin):
    _, path = waits_plugin
    assert plugin_modules() == ["waits_plugin"]
    with_plugin = code_digest()
    assert with_plugin != source_digest()
    path.write_text(PLUGIN + "# changed\n")
    assert code_digest() != with_plugin
    SCHEDULING_POLICIES.pop("waits")
    assert plugin_modules() == [] and code_digest() == source_digest()


def test_a_rerun_after_the_plugin_changed_warns_its_cells_came_from_other_code(waits_plugin, tmp_path):
    # a cell's key covers its settings, and `code` the package only: a changed plugin's cells
    # were read back as this code's, without a word
    from radixflow.experiments.config_parse import load_config
    from radixflow.experiments.execute import ExecutionOptions, execute
    from radixflow.experiments.report import other_code_note

    _, path = waits_plugin
    config, out = tmp_path / "plugin.toml", tmp_path / "out"
    config.write_text(EXPERIMENT)
    (first,) = execute(load_config(config), out, ExecutionOptions())
    assert first["code"] == code_digest() and other_code_note([first], code_digest()) is None
    path.write_text(PLUGIN + "# changed\n")
    ran: list[str] = []
    (again,) = execute(load_config(config), out, ExecutionOptions(), on_cell=lambda p, _: ran.append(p.key))
    assert not ran and again["code"] == first["code"] != code_digest()
    assert "1 of 1 cell came from the cache of other code" in str(other_code_note([again], code_digest()))


@pytest.fixture
def plugins_env(waits_plugin, monkeypatch):
    """RADIXFLOW_PLUGINS naming the waits plugin, not imported yet; forgotten afterwards."""
    SCHEDULING_POLICIES.pop("waits")
    sys.modules.pop("waits_plugin")
    monkeypatch.setenv(PLUGINS_ENV, "waits_plugin")
    try:
        yield
    finally:
        forget_plugins()


def test_the_command_line_imports_the_modules_radixflow_plugins_names(plugins_env, capsys):
    # the command line loaded no module of the user's: a plugin's name was unknown there, and in
    # every Ray worker (experiment --ray, serve --replicas), whoever imported it first
    assert main(["bench", "--runner", "sim", "--policy", "waits", "--groups", "2", "--candidates", "2"]) == 0
    assert "waits" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "--policy {adaptive,native,radixflow,waits}" in capsys.readouterr().out


def test_a_fresh_process_knows_the_plugins_names_as_a_ray_worker_would(plugins_env, tmp_path):
    # a worker imports radixflow's modules, never the user's: the environment names them
    code = "from radixflow.scheduler.policy import SCHEDULING_POLICIES as P; print('waits' in P)"
    path = os.pathsep.join([str(tmp_path), *sys.path])
    env = {**os.environ, "PYTHONPATH": path}
    ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "True"


def test_ray_workers_are_given_the_plugins_named(plugins_env):
    assert worker_env()[PLUGINS_ENV] == "waits_plugin"


def test_a_plugin_that_cannot_be_imported_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv(PLUGINS_ENV, " no_such_plugin ")
    try:
        assert main(["bench", "--runner", "sim", "--policy", "native", "--groups", "2"]) == 2
    finally:
        forget_plugins()
    said = "radixflow: error: RADIXFLOW_PLUGINS: cannot import 'no_such_plugin' "
    said += "(No module named 'no_such_plugin')"
    assert capsys.readouterr().err.strip() == said


def test_a_plugin_a_ray_worker_cannot_import_fails_its_cell_in_one_line(monkeypatch):
    # the worker reads RADIXFLOW_PLUGINS as its cell first reads a registry: a module it cannot
    # import (not on that node's path) failed the cell with a traceback, only a ProblemError
    # being one line
    from types import SimpleNamespace

    from radixflow.experiments import execute
    from radixflow.plugins import import_plugins

    monkeypatch.setenv(PLUGINS_ENV, "no_such_plugin")
    monkeypatch.setattr(execute, "run_cell", lambda cell, variants: import_plugins())
    cell = SimpleNamespace(group="g", settings={"model": "qwen3_5-9b"}, workload={"seed": 0})
    try:
        said = execute._run_one(execute.Pending("k1", cell), [])  # type: ignore[arg-type]
    finally:
        forget_plugins()
    why = "RADIXFLOW_PLUGINS: cannot import 'no_such_plugin' (No module named 'no_such_plugin')"
    assert said == f"cell 'g' (qwen3_5-9b, seed 0, key k1): {why}"


class Placed:
    """A plugin placement answering ``answer(ctx)``."""

    name = "placed"
    answer = staticmethod(lambda ctx: [])

    def positions(self, ctx):
        return self.answer(ctx)


def _every(ctx):
    first = ctx.start // ctx.block_size * ctx.block_size + ctx.block_size
    return list(range(first, ctx.end + 1, ctx.block_size))


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (lambda ctx: [ctx.start + 1], "not a block boundary"),  # was a ValueError's traceback
        (lambda ctx: [*_every(ctx), ctx.end + 64], "not in the chunk"),  # was dropped silently
        (lambda ctx: None, "returned None"),  # was a TypeError's traceback
        (lambda ctx: [float(p) for p in _every(ctx)], "not an integer"),  # was a TypeError's
    ],
)
def test_a_placement_answering_outside_its_protocol_is_told_in_one_line(monkeypatch, capsys, answer, said):
    monkeypatch.setattr(Placed, "answer", staticmethod(answer))
    monkeypatch.setitem(PLACEMENTS, "placed", Placed)
    argv = ["bench", "--runner", "sim", "--policy", "native", "--placement", "placed", "--groups", "2"]
    assert main([*argv, "--candidates", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(
        "radixflow: error: --placement: 'placed' (Placed) positions"
    )
    assert said in err


def test_a_placement_answering_within_its_protocol_runs(monkeypatch, capsys):
    monkeypatch.setattr(Placed, "answer", staticmethod(_every))
    monkeypatch.setitem(PLACEMENTS, "placed", Placed)
    argv = ["bench", "--runner", "sim", "--policy", "native", "--placement", "placed", "--groups", "2"]
    assert main([*argv, "--candidates", "2"]) == 0


class Admits:
    """A plugin admission answering ``answer(ctx)``."""

    name = "admits"
    answer = staticmethod(lambda ctx: [])

    def may_evict(self, ctx):
        return self.answer(ctx)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (lambda ctx: None, "returned None: not a list of positions"),  # was a TypeError's traceback
        (lambda ctx: [*ctx.wanted, 3], "3 is not one of the wanted"),  # was the cache's ValueError
    ],
)
def test_an_admission_answering_outside_its_protocol_is_told_in_one_line(monkeypatch, capsys, answer, said):
    monkeypatch.setattr(Admits, "answer", staticmethod(answer))
    monkeypatch.setitem(ADMISSIONS, "admits", Admits)
    argv = ["bench", "--runner", "sim", "--policy", "native", "--admission", "admits", "--state-slots", "4"]
    assert main([*argv, "--kv-blocks", "200"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("radixflow: error: --admission: 'admits' (Admits) may_evict returned")
    assert said in err


def test_ray_workers_are_given_the_plugins_this_process_imported_itself(waits_plugin, monkeypatch):
    # `python -c "import waits_plugin; ..." experiment --ray`: its workers never knew `waits`
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    assert worker_env()[PLUGINS_ENV] == "waits_plugin"
    (waits_plugin[1].parent / "other_plugin.py").write_text("")
    monkeypatch.setitem(sys.modules, "other_plugin", None)  # its import, undone afterwards
    monkeypatch.delitem(sys.modules, "other_plugin")
    monkeypatch.setenv(PLUGINS_ENV, "other_plugin, waits_plugin")
    try:
        assert worker_env()[PLUGINS_ENV] == "other_plugin,waits_plugin"
    finally:
        forget_plugins()
