"""What a command's start imports: its own module, no other command's (`cli/commands.py`).

Pinned by the modules a fresh interpreter holds, not by timing: the imports of every command
module together were most of `radixflow bench --runner sim`'s start.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_utils import checkout_env

from radixflow.cli.app import COMMANDS, omp_wait_default
from radixflow.cli.commands import module_of

# what no command's start should pay for unless it runs with it (the torch and server extras)
EXTRAS = ("torch", "numpy", "transformers", "fastapi", "uvicorn", "ray")
# the machinery of commands' runs: the engine's harness, the server, the experiment runner
RUN_MODULES = ("radixflow.bench.harness", "radixflow.server.app", "radixflow.experiments.command")


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=checkout_env(), check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_importing_the_cli_imports_no_command_module():
    held = _modules_after("import radixflow.cli")
    commands = {module_of(cmd.name) for cmd in COMMANDS}
    assert held & commands == set()
    assert held & {*EXTRAS, *RUN_MODULES} == set()


@pytest.mark.parametrize("command", ["bench", "generate"])
def test_a_commands_help_imports_its_flags_not_its_run(command):
    # the parser `radixflow COMMAND --help` builds: its flags declared, nothing run
    code = (
        "from radixflow.cli.app import build_parser, named_command\n"
        f"parser = build_parser(named_command([{command!r}, '--help']))\n"
        "sub = next(a for a in parser._actions if a.dest == 'command')\n"
        f"assert sub.choices[{command!r}].format_help()"
    )
    held = _modules_after(code)
    assert held & {module_of(cmd.name) for cmd in COMMANDS} == set()
    assert held & {*EXTRAS, *RUN_MODULES} == set()


def test_the_command_argv_names_has_its_flags_and_no_other():
    from radixflow.cli.app import build_parser, named_command

    assert [named_command(a) for a in (["bench", "--runner", "sim"], ["--help"], ["--version"], [])] == [
        "bench",
        "",
        "",
        "",
    ]
    sub = next(a for a in build_parser("score")._actions if a.dest == "command")
    declared = [name for name, parser in sub.choices.items() if len(parser._actions) > 1]  # past -h
    assert declared == ["score"]
    every = next(a for a in build_parser()._actions if a.dest == "command")
    assert [name for name, parser in every.choices.items() if len(parser._actions) < 2] == []


def test_the_command_line_sets_passive_openmp_waits_only_where_none_was_given():
    given = {"OMP_WAIT_POLICY": "active"}
    spins = {"GOMP_SPINCOUNT": "1000"}
    unset: dict[str, str] = {}
    for environ in (given, spins, unset):
        omp_wait_default(environ, modules={})
    assert given == {"OMP_WAIT_POLICY": "active"}  # the user's own, kept
    assert spins == {"GOMP_SPINCOUNT": "1000"}  # a spin count of the user's is a policy too
    assert unset == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_no_wait_default_once_torch_is_loaded():
    # libgomp read its policy when torch loaded it: one set now would only silence `spin_warning`
    environ: dict[str, str] = {}
    omp_wait_default(environ, modules={"torch": object()})
    assert environ == {}


def test_the_process_command_line_starts_torch_with_passive_waits():
    env = {k: v for k, v in checkout_env().items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    probe = "import os, sys\nsys.argv = ['radixflow', '--version']\nfrom radixflow.cli import main\n"
    probe += "try:\n    main()\nexcept SystemExit:\n    pass\nprint(os.environ.get('OMP_WAIT_POLICY'))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.splitlines()[-1] == "PASSIVE"
