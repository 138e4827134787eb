"""A RADIXFLOW_PLUGINS module whose import stops with no Exception: a `sys.exit` in its body (an
argparse parse at import time) is a plugin that cannot be imported, one line; a Ctrl-C goes on
as one. Either way the registries are left as they were, so the module fixed is imported."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from radixflow.cli.app import main
from radixflow.plugins import PLUGINS_ENV, PluginError, forget_plugins
from radixflow.scheduler.policy import SCHEDULING_POLICIES

PLUGIN = """
from radixflow.scheduler.policy import SCHEDULING_POLICIES, Native


class Quits(Native):
    name = "quits"


SCHEDULING_POLICIES.register("quits", Quits)
"""


@pytest.fixture
def quits(tmp_path, monkeypatch):
    """RADIXFLOW_PLUGINS naming `quits_plugin`, whose file the test writes; undone afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "quits_plugin", raising=False)
    monkeypatch.setenv(PLUGINS_ENV, "quits_plugin")
    forget_plugins()
    try:
        yield tmp_path / "quits_plugin.py"
    finally:
        dict.pop(SCHEDULING_POLICIES, "quits", None)
        sys.modules.pop("quits_plugin", None)
        forget_plugins()


@pytest.mark.parametrize(
    ("stop", "code"),
    [("raise SystemExit(0)", 0), ("import argparse; argparse.ArgumentParser().parse_args(['-x'])", 2)],
)
def test_a_plugin_exiting_as_it_is_imported_is_one_line_and_undone(quits, capsys, stop, code):
    # the command line exited 0 with no output (or argparse's usage line, as radixflow's own),
    # `quits` left registered: the next read was refused for it being registered already
    quits.write_text(PLUGIN + stop + "\n")
    assert main(["bench", "--runner", "sim", "--policy", "native", "--groups", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("radixflow: error: RADIXFLOW_PLUGINS: cannot import 'quits_plugin' (")
    assert err.endswith(f"(it exits as it is imported: sys.exit({code}))")
    assert "quits" not in dict.keys(SCHEDULING_POLICIES) and "quits_plugin" not in sys.modules
    quits.write_text(PLUGIN)
    assert "quits" in SCHEDULING_POLICIES


def test_a_plugin_import_interrupted_goes_on_as_an_interrupt_and_is_undone(quits):
    quits.write_text(PLUGIN + "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        "quits" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)
    assert "quits" not in dict.keys(SCHEDULING_POLICIES)
    quits.write_text(PLUGIN)
    assert "quits" in SCHEDULING_POLICIES  # was refused: 'quits' is registered already


def test_a_plugin_failing_is_still_a_plugin_error(quits):
    quits.write_text(PLUGIN + "raise RuntimeError('boom')\n")
    with pytest.raises(PluginError, match=r"cannot import 'quits_plugin' \(boom\)"):
        "quits" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)


# a helper module of the plugin's registering a built-in entry under a name of its own, as
# docs/extending.md registers a model family read as Llama
HELPER = """
from radixflow.costmodel.shape.config_readers import READERS
from radixflow.models.registry import FAMILIES

FAMILIES.register("quits_llama", "radixflow.models.families.llama:LlamaForCausalLM")
READERS.register("quits_llama", READERS["llama"])
"""


def test_a_helper_module_registering_for_a_plugin_that_failed_registers_again(quits, monkeypatch):
    # its entries went with the failed import, the helper itself stayed imported: the plugin,
    # fixed, imported it as done, and `quits_llama` was unknown without a word
    from radixflow.costmodel.shape.config_readers import READERS
    from radixflow.models.registry import FAMILIES

    (quits.parent / "quits_helper.py").write_text(HELPER)
    monkeypatch.delitem(sys.modules, "quits_helper", raising=False)
    quits.write_text("import quits_helper\nraise RuntimeError('boom')\n")
    try:
        with pytest.raises(PluginError, match=r"\(boom\)"):
            "quits" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)
        assert "quits_llama" not in dict.keys(FAMILIES)
        quits.write_text("import quits_helper\n")
        assert "quits_llama" in FAMILIES and "quits_llama" in READERS
    finally:
        dict.pop(FAMILIES, "quits_llama", None)
        dict.pop(READERS, "quits_llama", None)
        sys.modules.pop("quits_helper", None)


FRESH = """
from radixflow.scheduler.policy import SCHEDULING_POLICIES
from radixflow.plugins import PluginError

try:
    "quits" in SCHEDULING_POLICIES
except PluginError as e:
    print(e)
open("quits_plugin.py", "w").write("import quits_helper")
from radixflow.costmodel.shape.config_readers import READERS
print("quits_llama" in SCHEDULING_POLICIES or "quits_llama" in READERS)
"""


def test_a_registry_first_made_by_a_plugin_that_failed_is_put_back_too(tmp_path):
    # the config readers, first imported by the helper, were made after the registries were
    # saved, so kept `quits_llama`: the fixed plugin was refused it, 'registered already'
    (tmp_path / "quits_helper.py").write_text(HELPER)
    (tmp_path / "quits_plugin.py").write_text("import quits_helper\nraise RuntimeError('boom')\n")
    path = os.pathsep.join([str(tmp_path), *sys.path])
    env = {**os.environ, "PYTHONPATH": path, PLUGINS_ENV: "quits_plugin", "PYTHONDONTWRITEBYTECODE": "1"}
    ran = subprocess.run([sys.executable, "-c", FRESH], env=env, cwd=tmp_path, capture_output=True, text=True)
    said = "RADIXFLOW_PLUGINS: cannot import 'quits_plugin' (boom)"
    assert ran.stdout.splitlines() == [said, "True"], ran.stderr


@pytest.mark.parametrize("named", ["quits_plugin;other", "quits_plugin other", "quits_plugin:Quits", ".q"])
def test_a_value_naming_no_module_is_told_how_modules_are_named(monkeypatch, named):
    # was "No module named 'quits_plugin;other'", or a relative import's complaint about a
    # 'package' argument
    monkeypatch.setenv(PLUGINS_ENV, named)
    forget_plugins()
    try:
        with pytest.raises(PluginError) as caught:
            "native" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)
    finally:
        forget_plugins()
    why = "name modules, comma-separated, as in fifo_plugin,lab.policies"
    assert str(caught.value) == f"RADIXFLOW_PLUGINS: {named!r} is no module name: {why}"


def test_a_directory_named_for_a_module_is_told_it_is_a_path(monkeypatch, tmp_path):
    # was "... is a file: ..." of a directory
    monkeypatch.setenv(PLUGINS_ENV, str(tmp_path / "lab"))
    forget_plugins()
    try:
        with pytest.raises(PluginError) as caught:
            "native" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)
    finally:
        forget_plugins()
    said = f"RADIXFLOW_PLUGINS: {str(tmp_path / 'lab')!r} is a path: name its module ('lab'), with its "
    assert str(caught.value) == said + "directory on PYTHONPATH"


def test_a_failed_plugin_leaves_the_modules_imported_before_it(quits, monkeypatch):
    # a module defining an entry it registered left sys.modules, imported before or not: the
    # standard library's functools (of a partial), a module of the user's already in use
    (quits.parent / "quits_kept.py").write_text("class Kept:\n    pass\n")
    monkeypatch.delitem(sys.modules, "quits_kept", raising=False)
    import functools

    import quits_kept

    monkeypatch.setitem(sys.modules, "functools", functools)  # put back should the test fail
    quits.write_text(
        "import functools\nimport quits_kept\nfrom radixflow.scheduler.policy import SCHEDULING_POLICIES\n"
        "SCHEDULING_POLICIES.register('quits', functools.partial(quits_kept.Kept))\n"
        "SCHEDULING_POLICIES.register('kept', quits_kept.Kept)\nraise RuntimeError('boom')\n"
    )
    try:
        with pytest.raises(PluginError, match=r"\(boom\)"):
            "quits" in SCHEDULING_POLICIES  # noqa: B015 (the read is what is tested)
        assert sys.modules["functools"] is functools and sys.modules.get("quits_kept") is quits_kept
        assert "kept" not in dict.keys(SCHEDULING_POLICIES)
    finally:
        dict.pop(SCHEDULING_POLICIES, "kept", None)
        sys.modules.pop("quits_kept", None)
