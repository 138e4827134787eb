"""Each engine and server default is declared in exactly one place (issue 27): one literal in
radixflow/, and every door (the command-line flags, TOML cells, `LLM(...)`, `ServerConfig`,
`Engine`) reads that one declaration."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from radixflow.cli.app import build_parser
from radixflow.engine.engine import Engine
from radixflow.options import EngineOptions, option_fields
from radixflow.options.flags import from_args
from radixflow.scheduler.config import SchedulerConfig
from radixflow.server.config import Listen, ServerConfig

PKG = Path(__file__).resolve().parent.parent / "radixflow"
OPTION_CLASSES = (EngineOptions, ServerConfig, Listen)
# Not yet single: the torch runner's (and its sampler's) constructor keeps keyword defaults of its
# own for these, for runners built by hand in tests and benchmarks (the options always pass theirs).
TORCH_RUNNER_KWARGS = {"device", "dtype", "matmul", "kernels", "seed", "clock"}
NAMES = ({f.name for cls in OPTION_CLASSES for f in dataclasses.fields(cls)} - TORCH_RUNNER_KWARGS) | {
    "num_blocks",  # SchedulerConfig's capacities: the sim runner's defaults
    "num_state_slots",
}
# The same name for another thing, with a default of its own (not a copy of an option's):
HOMONYMS = {
    ("fleet/routers.py", "RouterConfig", "block_size"),  # the prefix router's hash granularity
    ("fleet/routers.py", "RouterConfig", "seed"),  # the router's random choices
    ("workloads/candidates.py", "WorkloadSpec", "seed"),  # a generated workload's draw
    ("calibration/run.py", "CalibrationPlan", "clock"),  # how calibration times a call (process/wall)
}


def _literal(node: ast.expr | None, consts: set[str]) -> bool:
    """A default written out as a value, or as a module constant that is one (None is "not given",
    not a default)."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("option", "field") and node.args:
        return _literal(node.args[0], consts)
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand, consts)
    if isinstance(node, ast.BinOp):
        return _literal(node.left, consts) and _literal(node.right, consts)
    if isinstance(node, ast.Name):
        return node.id in consts
    return isinstance(node, ast.Constant) and node.value is not None


def _constants(tree: ast.Module) -> set[str]:
    """Module-level names bound to a literal (``DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024``)."""
    return {
        t.id
        for stmt in tree.body
        if isinstance(stmt, ast.Assign) and _literal(stmt.value, set())
        for t in stmt.targets
        if isinstance(t, ast.Name)
    }


def _flag_name(call: ast.Call) -> str | None:
    first = call.args[0] if call.args else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("--"):
        return first.value[2:].replace("-", "_")
    return None


def declarations(tree: ast.Module, rel: str) -> list[tuple[str, str]]:
    """(option name, where) for every literal default of an option name in one module: a class
    field, a function parameter, or an argparse ``default=``."""
    found: list[tuple[str, str]] = []
    consts = _constants(tree)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                name = stmt.target.id
                if name in NAMES and _literal(stmt.value, consts) and (rel, cls.name, name) not in HOMONYMS:
                    found.append((name, f"{rel}:{stmt.lineno} {cls.name}.{name}"))
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        params = fn.args.args + fn.args.kwonlyargs
        positional = [None] * (len(fn.args.args) - len(fn.args.defaults)) + fn.args.defaults
        defaults = positional + fn.args.kw_defaults
        for arg, default in zip(params, defaults, strict=True):
            if arg.arg in NAMES and _literal(default, consts):
                found.append((arg.arg, f"{rel}:{fn.lineno} {fn.name}({arg.arg}=...)"))
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = _flag_name(call)
        default = next((k.value for k in call.keywords if k.arg == "default"), None)
        if name in NAMES and _literal(default, consts):
            found.append((name, f"{rel}:{call.lineno} --{name} default"))
    return found


def all_declarations(root: Path) -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for name, where in declarations(ast.parse(path.read_text(), str(path)), rel):
            by_name.setdefault(name, []).append(where)
    return by_name


def test_no_default_is_declared_twice():
    twice = {name: places for name, places in all_declarations(PKG).items() if len(places) > 1}
    assert twice == {}, f"declared in more than one place: {twice}"


def test_every_given_default_has_its_declaration():
    """Each non-None default of an engine or server option is found by the walk (it is a literal
    somewhere, once), so the walk above looks where the defaults are."""
    from radixflow.options import machine

    found = all_declarations(PKG)
    # declared as a constant another module shares (the server's thread plan uses it too)
    found["tokenizer_threads"] = [f"options/machine.py TOKENIZER_THREADS = {machine.TOKENIZER_THREADS}"]
    assert ServerConfig().tokenizer_threads == machine.TOKENIZER_THREADS
    for cls in OPTION_CLASSES:
        for f in dataclasses.fields(cls):
            if f.default is not None and f.name in NAMES:
                assert f.name in found, f"{cls.__name__}.{f.name}: no literal declaration found"


def test_a_copied_default_is_caught(tmp_path):
    """The walk fails on a duplicate: the round budget copied back into `EngineOptions`, a policy
    default back on `Engine`, a server default back on a flag."""
    copies = {
        "a.py": "class EngineOptions:\n    token_budget: int = option(2048, 'h', int)\n",
        "b.py": "class SchedulerConfig:\n    token_budget: int = 2048\n",
        "c.py": "def __init__(self, runner, config, policy: str = 'adaptive'): ...\n",
        "d.py": "class X:\n    policy: str = option('adaptive', 'h', str)\n",
        "e.py": "g.add_argument('--max-pending', type=int, default=256)\n",
        "f.py": "class ServerConfig:\n    max_pending: int = option(256, 'h', int)\n",
    }
    for name, text in copies.items():
        (tmp_path / name).write_text(text)
    assert {n: len(p) for n, p in all_declarations(tmp_path).items()} == {
        "token_budget": 2,
        "policy": 2,
        "max_pending": 2,
    }


def test_the_engine_has_no_defaults_of_its_own():
    params = inspect.signature(Engine).parameters
    for name in ("policy", "placement", "eviction", "admission"):
        assert params[name].default is inspect.Parameter.empty


@pytest.mark.parametrize("command", ["bench", "generate", "score", "serve", "run-batch"])
def test_every_door_reads_the_one_declaration(command):
    """The flags of each command (nothing given), a TOML cell's options and `LLM(...)` all give
    the declared defaults; `EngineOptions` gives the scheduler's budgets."""
    base = {
        "bench": [],
        "generate": ["m", "--prompt", "x"],
        "score": ["m", "--context", "x", "--candidate", "y"],
        "serve": ["m"],
        "run-batch": ["m", "-i", "f.jsonl"],
    }[command]
    args = build_parser().parse_args([command, *base])
    assert from_args(args).replace(model=None) == EngineOptions()
    scheduler = SchedulerConfig()
    for name in ("token_budget", "max_requests", "block_size"):
        assert getattr(EngineOptions(), name) == getattr(scheduler, name)
    if command == "serve":
        from radixflow.cli.serve_setup import server_settings

        assert server_settings(args) == (Listen(), ServerConfig())
    if command == "run-batch":  # the server's limits, declared once with serve's
        from radixflow.options.flags import given_values
        from radixflow.options.spec import checked

        assert checked(ServerConfig, given_values(args, ServerConfig)) == ServerConfig()


def test_generate_flags_not_given_are_the_sampling_params_defaults():
    """`radixflow generate` and `LLM.generate` sample alike where no flag is given (but
    --max-tokens, 32 by the docs, where `SamplingParams()` is one token)."""
    from radixflow.cli.generate_flags import sampling_params
    from radixflow.generation.params import SamplingParams

    args = build_parser().parse_args(["generate", "m", "--prompt", "x"])
    assert sampling_params(args) == SamplingParams(max_tokens=32)


def test_the_other_doors_take_no_defaults_of_their_own():
    from radixflow.experiments.config import ENGINE_KEYS
    from radixflow.generation.llm import LLM

    engine_names = {f.name for f in option_fields()}
    signature = inspect.signature(LLM)
    for name, param in signature.parameters.items():
        if name in engine_names:
            assert param.default in (None, inspect.Parameter.empty), f"LLM({name}=...) has its own default"
    defaults = {f.name: f.default for f in option_fields()}
    assert ENGINE_KEYS and all(ENGINE_KEYS[name] == defaults[name] for name in ENGINE_KEYS)  # TOML cells
