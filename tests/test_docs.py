"""The docs say what the code has: every module of `radixflow/` and every benchmark script is in
docs/architecture.md's module table, and every module that table names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"


_SPAN = re.compile(r"`([^`]+)`")


def _module_rows() -> list[tuple[list[str], str]]:
    """architecture.md's module table: each row's paths (first cell) and the whole row."""
    text = ARCHITECTURE.read_text()
    table = text[text.index("## Modules") :]
    rows = []
    for line in table.splitlines()[4:]:
        if not line.startswith("| "):
            break
        first = line.split(" | ")[0]
        rows.append((_SPAN.findall(first), line))
    return rows


def test_every_module_and_benchmark_is_in_the_architecture_table():
    rows = _module_rows()
    named = {path for _, row in rows for path in _SPAN.findall(row)}

    def listed(module: str) -> bool:
        """Named in the table, or under its directory (``models/presets/*.py``, ``server/responses/``
        with the module's name in that row)."""
        parent, stem = f"{Path(module).parent}/", Path(module).stem
        return (
            module in named
            or f"{parent}*.py" in named
            or any(parent in paths and f"`{stem}" in row for paths, row in rows)
        )

    package = ROOT / "radixflow"
    modules = [str(p.relative_to(package)) for p in package.rglob("*.py") if p.name != "__init__.py"]
    scripts = [str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").glob("*.py")]
    assert len(modules) > 100 and len(scripts) > 10
    assert [m for m in [*modules, *scripts] if not listed(m)] == []


def test_every_module_the_architecture_table_names_exists():
    missing = []
    for paths, _ in _module_rows():
        for path in paths:
            base = ROOT if path.startswith("benchmarks/") else ROOT / "radixflow"
            if not list(base.glob(path.rstrip("/"))):
                missing.append(path)
    assert not missing


def test_usage_names_the_engine_options_the_other_commands_take():
    """usage.md: the engine options are every flag of bench, generate, score, serve and run-batch,
    "and --device, --torch-threads, --dtype in calibrate, --device in experiment", the cost flags in
    cost."""
    from radixflow.cli import calibrate
    from radixflow.experiments.command import OVERRIDES
    from radixflow.problems import flag

    usage = (ROOT / "docs" / "usage.md").read_text().replace("\n", " ")
    clause = re.search(r"\(and (.*?) in `calibrate`, (.*?) in `experiment`", usage)
    assert clause is not None
    for text, names in zip(clause.groups(), (calibrate.ENGINE_OPTIONS, OVERRIDES), strict=True):
        assert set(re.findall(r"`(--[\w-]+)`", text)) == {flag(name) for name in names}
