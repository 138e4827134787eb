"""Nothing lower imports anything higher; the cache and scheduler never import torch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "radixflow"

# package -> radixflow packages it may import (besides itself)
ALLOWED = {
    "cache": set(),
    "scheduler": {"cache"},
    "engine": {"cache", "scheduler"},
    "models": set(),
    "costmodel": set(),
    "runners": {"cache", "scheduler", "engine", "models", "costmodel"},
    "workloads": {"scheduler"},
    # routers: pure Python over cache digests, shared by the fleet sim and the Ray Serve adapter
    "fleet": {"cache"},
    # one way in: options -> runner choice, cache, scheduler, engine (models only lazily, by name)
    "options": {"cache", "scheduler", "engine", "runners", "models", "costmodel"},
    "bench": {
        "cache",
        "scheduler",
        "engine",
        "runners",
        "models",
        "workloads",
        "costmodel",
        "options",
        "fleet",
    },
    # a command, like bench: its flags parse through the options' argument types (`path_arg`)
    "calibration": {"cache", "scheduler", "engine", "runners", "models", "costmodel", "options"},
    "experiments": {
        "cache",
        "scheduler",
        "engine",
        "runners",
        "models",
        "workloads",
        "costmodel",
        "bench",
        "options",
        "fleet",
    },
    "generation": {"scheduler", "engine", "runners", "models", "options"},
    # the server's settings are declared with the options' `OptionSpec` (options/spec.py)
    "server": {"scheduler", "engine", "generation", "options"},
    # replicas on Ray Serve: the server's pieces over many engines, routed by the fleet routers
    "cluster": {"cache", "scheduler", "engine", "generation", "server", "options", "fleet"},
    "cli": {
        "cache",
        "scheduler",
        "engine",
        "runners",
        "models",
        "workloads",
        "bench",
        "costmodel",
        "calibration",
        "experiments",
        "generation",
        "server",
        "options",
        "fleet",
        "cluster",
    },
}
# leaf modules at the top of the package: they import nothing from radixflow but other leaves, so
# any layer may import them
LEAVES = {
    "problems",
    "progress",
    "package",
    "jsonl",
    "files",
    "user_paths",
    "partial_lines",
    "sigterm_kept",
    "ray_start",
    "plugins",
    "plugin_digest",
    "plugin_errors",
}
# cli imports torch only lazily, for --runner torch (it must run without the torch extra); the
# server reaches the model only through the generation layer
NO_TORCH = {
    "cache",
    "fleet",
    "scheduler",
    "engine",
    "workloads",
    "bench",
    "costmodel",
    "generation",
    "server",
    "options",
    "cluster",
}

# Inside models/, bottom up: pure math, then mixers over packed batches, then the families that
# assemble them; io reads and writes checkpoints of any family; zoo names and builds them.
# part (a folder, or a module at the top of models/) -> parts it may import (besides itself)
MODELS_ALLOWED = {
    "kernels": set(),
    "decode_rows": set(),
    "pool_memory": set(),  # where the pools' tensors lie (huge pages)
    "state_pool": {"decode_rows", "pool_memory"},
    "seq_spec": set(),  # plain data: a round's sequences and their snapshots
    "kv_pool": {"pool_memory"},
    # kernels: the decode-step backend a round runs with
    "batch": {"decode_rows", "state_pool", "seq_spec", "kv_pool", "kernels"},
    "device": set(),
    "registry": set(),  # families are imported by name, lazily
    "config_types": set(),  # pure Python: the strict value types of config fields
    "config_schema": {"config_types"},  # what a family reads from config.json, and one validator
    "config_rules": {"config_schema", "config_types"},
    "config_view": set(),  # pure Python: a config.json dict as the code reads it (schemas need no torch)
    "presets": set(),  # the zoo's preset configs: plain data, so a preset's shape is read without torch
    "attention": {"batch", "decode_rows"},
    "layers": {"batch", "kernels", "config_view"},
    "mixers": {"batch", "seq_spec", "decode_rows", "attention", "layers", "kernels"},
    "families": {
        "batch",
        "decode_rows",
        "attention",
        "layers",
        "mixers",
        "kernels",
        "config_types",
        "config_schema",
        "config_rules",
        "config_view",
        "presets",
    },
    "io": {"batch", "layers", "device", "registry", "families", "config_types", "config_schema"},
    "zoo_record": set(),  # a build's record: its files' sizes and checksums, nothing of models
    "zoo_store": {"zoo_record"},  # the zoo's builds on disk: directories and records, nothing of models
    "zoo_catalogue": {"registry", "io"},  # names and preset configs; family modules by name, lazily
    "zoo_info": {"layers", "registry", "zoo_catalogue"},
    "zoo": {"layers", "registry", "io", "presets", "zoo_record", "zoo_store", "zoo_catalogue"},
}


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)  # modules imported by name
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_lower_layers(package):
    for path in (PKG / package).rglob("*.py"):
        for name in imports(path):
            parts = name.split(".")
            if parts[0] == "radixflow" and len(parts) > 1:
                assert parts[1] in ALLOWED[package] | LEAVES | {package}, f"{path.name} imports {name}"
            if package in NO_TORCH:
                assert parts[0] != "torch", f"{path.name} imports torch"


# Ray is an extra: only these modules import it (the cluster ones and experiments' --ray lazily),
# so one replica, the sim and the routers run without it.
RAY_MODULES = {"cluster/ray_router.py", "cluster/launch.py", "cluster/replica.py", "experiments/execute.py"}


def test_only_the_cluster_modules_import_ray():
    for path in PKG.rglob("*.py"):
        if any(name == "ray" or name.startswith("ray.") for name in imports(path)):
            assert str(path.relative_to(PKG)) in RAY_MODULES, f"{path.relative_to(PKG)} imports ray"


def test_one_replica_serving_never_imports_ray():
    import subprocess
    import sys

    code = (
        "import sys, radixflow.cli.serve, radixflow.server.serve, radixflow.fleet, radixflow.bench.fleet; "
        "print(any(m == 'ray' or m.startswith('ray.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaf_modules_import_nothing_from_radixflow_but_other_leaves(leaf):
    names = imports(PKG / f"{leaf}.py")
    assert not [n for n in names if n.startswith("radixflow") and n.split(".")[1] not in LEAVES]
    assert not [n for n in names if n.split(".")[0] == "torch"]


def test_every_models_part_has_a_layer():
    parts = {p.stem for p in (PKG / "models").glob("*.py")} | {
        p.name for p in (PKG / "models").iterdir() if (p / "__init__.py").is_file()
    }
    assert parts - {"__init__"} == set(MODELS_ALLOWED)


def test_the_zoo_presets_never_import_torch():
    """The sim reads a zoo name's shape from its preset: that must not need the torch extra."""
    for path in (PKG / "models" / "presets").rglob("*.py"):
        assert not [n for n in imports(path) if n.split(".")[0] == "torch"], f"{path.name} imports torch"


@pytest.mark.parametrize("part", sorted(MODELS_ALLOWED))
def test_models_parts_import_only_lower_parts(part):
    root = PKG / "models"
    paths = (root / part).rglob("*.py") if (root / part).is_dir() else [root / f"{part}.py"]
    for path in paths:
        for name in imports(path):
            parts = name.split(".")
            if parts[:2] == ["radixflow", "models"] and len(parts) > 2:
                assert parts[2] in MODELS_ALLOWED[part] | {part}, f"{path.relative_to(root)} imports {name}"


# The cache's parts: only the cache's own modules (and tests) name them; every other package sees
# `RadixCache` and the result types it hands out (`NodeHandle`, `Match`, `Extension`, `CacheUsage`).
CACHE_PARTS = {
    *("node", "tree", "evictable", "rounds", "views", "integrity"),
    *("demand", "lookup", "holdings", "publish"),
}
# RadixCache's fields holding its parts
CACHE_PART_ATTRIBUTES = {"tree", "evictor", "journal", "holdings", "publisher"}


def test_only_the_cache_reaches_its_parts():
    for path in PKG.rglob("*.py"):
        if path.relative_to(PKG).parts[0] == "cache":
            continue
        for name in imports(path):
            parts = name.split(".")
            assert parts[:2] != ["radixflow", "cache"] or len(parts) < 3 or parts[2] not in CACHE_PARTS, (
                f"{path.relative_to(PKG)} imports {name}"
            )
        attrs = {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
        assert not attrs & CACHE_PART_ATTRIBUTES, f"{path.relative_to(PKG)} reaches into the cache's parts"


# Inside costmodel/, bottom up: what a model is (shape), what one kernel call costs on one GPU
# (kernel_times; a GPU's figures reach it through its `Datasheet` protocol, never a profile),
# hardware profiles (which name their kernel-time source), and a round's cost over all three.
# sub-package -> sub-packages it may import (besides itself)
COSTMODEL_ALLOWED = {
    "shape": set(),
    "kernel_times": {"shape"},
    "hardware": {"kernel_times"},
    "round_cost": {"shape", "kernel_times", "hardware"},
}


def test_every_costmodel_module_sits_in_a_sub_package():
    root = PKG / "costmodel"
    loose = {p.stem for p in root.glob("*.py")} - {"__init__"}
    parts = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    assert not loose, f"costmodel modules outside a sub-package: {sorted(loose)}"
    assert parts == set(COSTMODEL_ALLOWED)


@pytest.mark.parametrize("part", sorted(COSTMODEL_ALLOWED))
def test_costmodel_parts_import_only_lower_parts(part):
    root = PKG / "costmodel"
    for path in (root / part).rglob("*.py"):
        for name in imports(path):
            parts = name.split(".")
            if parts[:2] == ["radixflow", "costmodel"] and len(parts) > 2:
                allowed = COSTMODEL_ALLOWED[part] | {part}
                assert parts[2] in allowed, f"{path.relative_to(root)} imports {name}"


# `adaptive` is one policy among the scheduler's: its package leans on the scheduler's core (scan,
# output, request, config, the cache), and only the policy registry names it, so the core never
# depends on one policy's parts.
ADAPTIVE_USERS = {"scheduler/policy.py"}


def test_only_the_policy_registry_reaches_the_adaptive_package():
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        if rel.parts[:2] == ("scheduler", "adaptive") or str(rel) in ADAPTIVE_USERS:
            continue
        for name in imports(path):
            assert not name.startswith("radixflow.scheduler.adaptive"), f"{rel} imports {name}"
