"""The docs say what the code has: every module of `radixflow/` and every benchmark script is in
docs/architecture.md's module table and every module that table names exists; every command line
the docs show uses flags its command (or benchmark script) takes; every link lands on a file and
heading that exist; the metrics, routes, registered names and experiment sizes they give are the
code's; the README's install and test commands are what CI runs and what works."""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from radixflow.cli.app import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = (
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "experiments" / "profiles" / "README.md",
)
ARCHITECTURE = ROOT / "docs" / "architecture.md"

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
# an indented code line, with the lines a trailing backslash continues it onto
_INDENTED = re.compile(r"^ {4}(?:python|radixflow)[^\n]*(?:(?<=\\)\n[^\n]*)*", re.M)
_SPAN = re.compile(r"`([^`]+)`")
_FLAG = re.compile(r"(?<![^\s\[(])(--?[a-zA-Z][\w-]*)")  # after a space, a bracket or at the start
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_COMMAND = re.compile(r"(?<![\w./-])radixflow ([a-z][\w-]*)")
_SCRIPT = re.compile(r"(?<![\w-])python3? (benchmarks/\w+\.py)")
_HEADING = re.compile(r"^(#+) (.*)$", re.M)


def _code(text: str) -> Iterator[str]:
    """Each code span (a line break inside one read as a space) and each line of a fenced or
    indented block (a shell line continued with a backslash read as one line)."""
    for fence in _FENCE.findall(text):
        yield from fence.replace("\\\n", " ").splitlines()[1:-1]
    for line in _INDENTED.findall(_FENCE.sub("", text)):
        yield line.replace("\\\n", " ")
    for span in _SPAN.findall(_FENCE.sub("", text)):
        yield span.replace("\n", " ")


def test_an_indented_command_continued_with_a_backslash_is_read_as_one_line():
    """policies.md's `radixflow bench ... \\` and its next line `--candidate-len 32 ... --json M.json`:
    the flags after the break were never checked, the first line's backslash ending the match."""
    text = "Run:\n\n    radixflow bench --groups 2 \\\n        --json M.json\n\nThen.\n"
    assert [" ".join(code.split()) for code in _code(text)] == ["radixflow bench --groups 2 --json M.json"]


def _flags(code: str) -> set[str]:
    """The flags written in a piece of code; a quoted argument's contents are not flags."""
    return set(_FLAG.findall(_QUOTED.sub("", code)))


def _command_flags() -> dict[str, set[str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: set(p._option_string_actions) for name, p in sub.choices.items()}


def _shown_commands() -> Iterator[tuple[str, str, str]]:
    """(doc, command, its code) for every `radixflow CMD ...` the docs show."""
    names = {cmd.name for cmd in COMMANDS}
    for doc in DOCS:
        for code in _code(doc.read_text()):
            starts = [m for m in _COMMAND.finditer(code) if m.group(1) in names]
            for m, after in itertools.pairwise([*starts, None]):
                yield doc.name, m.group(1), code[m.end() : after.start() if after else None]


def _sections_of_a_command() -> Iterator[tuple[str, str, str]]:
    """(doc, command, code span) for every span that starts with a flag in a section whose heading
    names `radixflow CMD`: such a section's flags are that command's (`## \\`radixflow bench\\``
    lists bench's knobs)."""
    names = {cmd.name for cmd in COMMANDS}
    for doc in DOCS:
        text = _FENCE.sub("", doc.read_text())
        heads = list(_HEADING.finditer(text))
        for i, head in enumerate(heads):
            named = [m.group(1) for m in _COMMAND.finditer(head.group(2)) if m.group(1) in names]
            if not named:
                continue
            level = len(head.group(1))
            end = next((h.start() for h in heads[i + 1 :] if len(h.group(1)) <= level), len(text))
            for span in _SPAN.findall(text[head.end() : end]):
                if span.startswith("-"):
                    yield doc.name, named[0], span.replace("\n", " ")


def test_every_flag_of_a_command_line_in_the_docs_is_one_of_that_commands_flags():
    flags = _command_flags()
    shown = [*_shown_commands(), *_sections_of_a_command()]
    assert len({command for _, command, _ in shown}) == len(flags)  # every command is shown somewhere
    unknown = {
        f"{doc}: radixflow {command} {flag}"
        for doc, command, code in shown
        for flag in _flags(code) - flags[command]
    }
    assert not unknown


def test_every_flag_of_a_benchmark_command_in_the_docs_is_one_its_script_declares():
    unknown = set()
    for doc in DOCS:
        for code in _code(doc.read_text()):
            for m in _SCRIPT.finditer(code):
                source = (ROOT / m.group(1)).read_text()
                unknown |= {
                    f"{doc.name}: {m.group(1)} {flag}"
                    for flag in _flags(code[m.end() :].split(" python")[0])
                    if f'"{flag}"' not in source
                }
    assert not unknown


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    for head in _HEADING.finditer(_FENCE.sub("", doc.read_text())):
        slug = _slug(head.group(2))
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_link_lands_on_a_file_and_heading_that_exist(doc):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _FENCE.sub("", doc.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path) if path else doc
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
            broken.append(target)
    assert not broken


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


def _listed(module: str, rows: list[tuple[list[str], str]]) -> bool:
    """Named in the table, or under its directory (``models/presets/*.py``, or
    ``server/responses/`` with the module's own name in that row: `stem` or `stem.py`, not a
    longer name that starts with it)."""
    named = {path for _, row in rows for path in _SPAN.findall(row)}
    parent, stem = f"{Path(module).parent}/", Path(module).stem
    own_name = re.compile(rf"`{re.escape(stem)}(\.py)?`")
    return (
        module in named
        or f"{parent}*.py" in named
        or any(parent in paths and own_name.search(row) for paths, row in rows)
    )


def test_every_module_and_benchmark_is_in_the_architecture_table():
    rows = _module_rows()
    package = ROOT / "radixflow"
    modules = [str(p.relative_to(package)) for p in package.rglob("*.py") if p.name != "__init__.py"]
    scripts = [str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").glob("*.py")]
    assert len(modules) > 100 and len(scripts) > 10
    assert [m for m in [*modules, *scripts] if not _listed(m, rows)] == []


def test_a_module_whose_name_only_starts_a_listed_one_is_not_listed():
    rows = _module_rows()
    assert _listed("server/responses/stream.py", rows)
    assert not _listed("server/responses/stream_extra.py", rows)
    assert not _listed("server/responses/chat.py", rows)


def test_every_module_the_architecture_table_names_exists():
    missing = []
    for paths, _ in _module_rows():
        for path in paths:
            base = ROOT if path.startswith("benchmarks/") else ROOT / "radixflow"
            if not list(base.glob(path.rstrip("/"))):
                missing.append(path)
    assert not missing


def test_the_readme_test_command_is_the_one_ci_runs():
    readme = (ROOT / "README.md").read_text()
    command = readme[readme.index("## Run the tests") :].split("```bash\n")[1].split("\n")[0]
    venv = "python3 -m venv .venv && . .venv/bin/activate && "
    assert command.startswith(venv)
    assert command.removeprefix(venv) in (ROOT / ".ci" / "run").read_text().splitlines()


def test_every_metric_the_docs_name_is_one_the_server_exports():
    from radixflow.server.metrics import ServerMetrics

    exported = {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in ServerMetrics().registry.collect()
    }
    assert "radixflow_rounds_total" in exported
    # a name followed by ".json" and the like is a file (the zoo's radixflow_zoo.json), not a metric
    named = {m for doc in DOCS for m in re.findall(r"\bradixflow_[a-z0-9_]+\b(?!\.[a-z])", doc.read_text())}
    assert named - exported == set()


def test_the_serving_docs_list_every_metric_the_server_exports():
    """docs/serving.md is where /metrics is described: a series it leaves out (the cache's bytes
    and evictions, the tokens generated, the failed rounds) is one an operator never learns of."""
    from radixflow.server.metrics import ServerMetrics

    exported = {
        f"{family.name}_total" if family.type == "counter" else family.name
        for family in ServerMetrics().registry.collect()
    }
    listed = set(re.findall(r"\bradixflow_[a-z0-9_]+\b", (ROOT / "docs" / "serving.md").read_text()))
    assert exported - listed == set()


_ROUTE_DECLARED = re.compile(r"@\w+\.(get|post)\(\"([^\"]+)\"")
_ROUTE_SHOWN = re.compile(r"`(GET|POST) (/[^`\s]*)`")


def _route(method: str, path: str) -> str:
    """``GET /v1/models/{model:path}`` and ``GET /v1/models/{id}`` alike as ``GET /v1/models/{}``."""
    return method.upper() + " " + re.sub(r"\{[^}]*\}", "{}", path)


def test_the_docs_name_every_http_route_and_only_those():
    declared = {
        _route(*m)
        for package in ("server", "cluster")
        for module in (ROOT / "radixflow" / package).glob("*.py")
        for m in _ROUTE_DECLARED.findall(module.read_text())
    }
    assert "POST /v1/completions" in declared
    shown = {_route(*m) for doc in DOCS for m in _ROUTE_SHOWN.findall(doc.read_text())}
    assert (declared - shown, shown - declared) == (set(), set())


def test_usage_and_architecture_list_every_command():
    usage = (ROOT / "docs" / "usage.md").read_text()
    listed = usage[usage.index("## Commands") :].split("\n## ")[0]
    layers = ARCHITECTURE.read_text().split("```")[1]
    cli_line = next(line for line in layers.splitlines() if line.startswith("cli/"))
    for cmd in COMMANDS:
        assert f"`radixflow {cmd.name}" in listed
        assert re.search(rf"(?<![\w-]){cmd.name}(?![\w-])", cli_line), cmd.name


# every package an extra brings (and what those pull in that radixflow could import by mistake):
# the README's first command runs on `pip install -e .` alone, whose one dependency is rich
EXTRAS_PACKAGES = (
    "torch", "safetensors", "tokenizers", "numpy", "gguf", "jinja2", "fastapi", "starlette",
    "pydantic", "pydantic_core", "uvicorn", "httptools", "prometheus_client", "httpx", "matplotlib",
    "ray", "aiconfigurator_core", "pyarrow", "transformers", "openai", "hypothesis", "yaml",
)  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--runner", "sim", "--groups", "2", "--candidates", "2"],
        ["bench", "--runner", "sim", "--model", "qwen3_5-small", "--groups", "2", "--candidates", "2"],
        ["cost", "qwen3_5-2b", "--hardware", "h200", "--prefill", "8192"],
    ],
    ids=lambda argv: " ".join(argv[:4]),
)
def test_the_sim_commands_run_on_the_core_install(argv, tmp_path):
    """README: `pip install -e . && radixflow bench --runner sim`; usage.md: that install is enough
    for the sim runner and `radixflow cost`, a zoo name on the sim included."""
    code = (
        "import sys\n"
        f"for name in {EXTRAS_PACKAGES!r}: sys.modules[name] = None  # import raises ImportError\n"
        "from radixflow.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RADIXFLOW_CACHE": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


def test_usage_names_the_engine_options_the_other_commands_take():
    """usage.md: the engine options are every flag of bench, generate, score, serve and run-batch,
    "and --device, --torch-threads, --dtype in calibrate, --device in experiment", the cost flags in
    cost."""
    from radixflow.cli import calibrate
    from radixflow.experiments.command import OVERRIDES
    from radixflow.problems import flag

    usage = (ROOT / "docs" / "usage.md").read_text().replace("\n", " ")
    clause = re.search(r"\(and ([^()]*?) in `calibrate`, ([^()]*?) in `experiment`", usage)  # one bracket
    assert clause is not None
    for text, names in zip(clause.groups(), (calibrate.ENGINE_OPTIONS, OVERRIDES), strict=True):
        assert set(re.findall(r"`(--[\w-]+)`", text)) == {flag(name) for name in names}


def _registries() -> list[tuple[str, str, tuple[str, ...]]]:
    """(registry, the doc that lists its names, its names)."""
    from radixflow.cache.eviction import EVICTION_POLICIES
    from radixflow.costmodel.hardware.profiles import HARDWARE, SCHEDULER_MODES
    from radixflow.costmodel.shape.config_readers import READERS
    from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
    from radixflow.engine.clocks import ROUND_CLOCKS
    from radixflow.fleet.routers import ROUTERS
    from radixflow.models.zoo_catalogue import FAMILY_SOURCES
    from radixflow.options.model_options import KERNELS, RUNNERS
    from radixflow.scheduler.admission import ADMISSIONS
    from radixflow.scheduler.placement import PLACEMENTS
    from radixflow.scheduler.policy import SCHEDULING_POLICIES
    from radixflow.workloads.candidates import ARRIVALS, ORDERS

    registries = {
        "policies": ("policies.md", SCHEDULING_POLICIES),
        "placements": ("usage.md", PLACEMENTS),
        "evictions": ("memory.md", EVICTION_POLICIES),
        "admissions": ("memory.md", ADMISSIONS),
        "routers": ("fleet.md", ROUTERS),
        "hardware": ("usage.md", HARDWARE),
        "scheduler times": ("usage.md", SCHEDULER_MODES),
        "clocks": ("usage.md", ROUND_CLOCKS),
        "sim shapes": ("usage.md", SIM_MODELS),
        "config readers": ("usage.md", READERS),
        "orders": ("usage.md", ORDERS),
        "arrivals": ("usage.md", ARRIVALS),
        "zoo families": ("real-models.md", FAMILY_SOURCES),
        "runners": ("usage.md", RUNNERS),
        "kernels": ("status.md", KERNELS),
    }
    return [(name, doc, tuple(names)) for name, (doc, names) in registries.items()]


@pytest.mark.parametrize(("doc", "names"), [pytest.param(d, n, id=r) for r, d, n in _registries()])
def test_the_docs_name_every_registered_choice(doc, names):
    code = " ".join(_code((ROOT / "docs" / doc).read_text()))
    assert [n for n in names if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", code)] == []


_CELLS = re.compile(r"(?:experiments/|`)(\w+)\.toml`(?: runs | \()([\d,]+) (?:sim )?cells")
# a command line with its size as a comment: `radixflow experiment experiments/x.toml --seeds 0  # 144 cells`
_COMMENTED_CELLS = re.compile(r"experiments/(\w+)\.toml(?: --seeds (\d+)(?:-(\d+))?)?\s+# ([\d,]+) cells")


def test_the_cell_counts_the_docs_give_are_the_configs():
    """ "`radixflow experiment experiments/fleet.toml` (111 cells, ...)": what the config expands to."""
    import tomllib

    from radixflow.experiments import config_checks
    from radixflow.experiments.config_grids import parse_grids

    counted = {}
    for doc in (d for d in DOCS if d.name != "decisions.md"):  # its figures are of their day
        for name, cells in _CELLS.findall(doc.read_text()):
            path = ROOT / "experiments" / f"{name}.toml"
            data = tomllib.loads(path.read_text())
            seeds = config_checks.seeds(data.get("seeds", [0]), str(path), "seeds")
            counted[f"{doc.name}: {name}.toml"] = (
                int(cells.replace(",", "")),
                sum(grid.size for grid in parse_grids(data, str(path), seeds)),
            )
        for code in _code(doc.read_text()):
            for name, first, last, cells in _COMMENTED_CELLS.findall(code):
                path = ROOT / "experiments" / f"{name}.toml"
                data = tomllib.loads(path.read_text())
                given = list(range(int(first), int(last or first) + 1)) if first else data.get("seeds", [0])
                seeds = config_checks.seeds(given, str(path), "seeds")
                counted[f"{doc.name}: {code.strip()}"] = (
                    int(cells.replace(",", "")),
                    sum(grid.size for grid in parse_grids(data, str(path), seeds)),
                )
    assert len(counted) >= 7
    assert {k: v for k, v in counted.items() if v[0] != v[1]} == {}


def test_every_door_that_runs_one_policy_is_named_where_the_docs_give_adaptives_default():
    """ "`adaptive` (the default of `generate`, `score`, ...)": every command that takes --policy
    but bench (which runs all three side by side), and `LLM`."""
    from radixflow.options import EngineOptions

    assert EngineOptions().policy == "adaptive"
    doors = {name for name, flags in _command_flags().items() if "--policy" in flags} - {"bench"} | {"LLM"}
    lists = [
        set(re.findall(r"`([\w-]+)`", m))
        for doc in DOCS
        for m in re.findall(r"the default of ((?:`[\w-]+`,?\s+)+and\s+`[\w-]+`)", doc.read_text())
    ]
    assert len(lists) >= 4
    assert [names for names in lists if names != doors] == []


def _cost_rows() -> list[tuple[list[str], str, str, str]]:
    """cost-model.md's `radixflow cost` table (H200): each row's arguments, worker call, terms, tp."""
    text = (ROOT / "docs" / "cost-model.md").read_text()
    table = text[text.index("| `radixflow cost …` (H200)") :].split("\n\n")[0].splitlines()[2:]
    cells = [row.strip("| ").split(" | ") for row in table]
    return [(_SPAN.findall(args)[0].split(), call, terms, tp) for args, call, terms, tp in cells]


@pytest.mark.parametrize(
    ("args", "call", "terms", "tp"), [pytest.param(*r, id=" ".join(r[0])) for r in _cost_rows()]
)
def test_the_cost_table_is_what_radixflow_cost_prints(args, call, terms, tp, capsys):
    """The sim's prices are deterministic: the table shows what the command prints (ms to 0.1)."""
    import json

    from radixflow.cli import main

    assert main(["cost", *args, "--hardware", "h200", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    shown = {name.replace("-", ""): float(ms) for name, ms in re.findall(r"([a-z_-]+) (\d+\.\d)", terms)}
    assert len(shown) >= 3
    assert (f"{printed['seconds'] * 1e3:.1f} ms", str(printed["tp"])) == (call, tp)
    assert {name: round(printed["terms"][name]["seconds"] * 1e3, 1) for name in shown} == shown
    # and each rate a term's note quotes is the printed one: TFLOP/s to the unit, TB/s to 0.1, and
    # "at the bandwidth" within 10% of the H200's 4.8 TB/s
    for name, note in re.findall(r"([a-z_-]+) \d+\.\d ms \(([^)]*)\)", terms):
        term = printed["terms"][name.replace("-", "")]
        for tflops in re.findall(r"(\d+) TFLOP/s", note):
            assert round(term["flops"] / term["seconds"] / 1e12) == int(tflops), (name, note)
        for tbs in re.findall(r"(\d+\.\d) TB/s", note):
            assert round(term["bytes"] / term["seconds"] / 1e12, 1) == float(tbs), (name, note)
        if "at the bandwidth" in note:
            assert term["bytes"] / term["seconds"] == pytest.approx(4.8e12, rel=0.1), (name, note)


@pytest.mark.parametrize(
    "doc",
    [d for d in DOCS if d.name not in ("architecture.md", "decisions.md")],  # package-relative; history
    ids=lambda d: str(d.relative_to(ROOT)),
)
def test_every_repository_path_a_doc_names_exists(doc):
    named = re.findall(r"`((?:radixflow|benchmarks|experiments|tests|docs|\.ci)/[^`\s]*)`", doc.read_text())
    assert [path for path in named if not list(ROOT.glob(path.rstrip("/")))] == []


def test_architecture_names_every_shared_test_helper():
    """ "the shared helpers (`model_utils`, `server_utils`, ...)": the plain modules beside the tests."""
    text = ARCHITECTURE.read_text().replace("\n", " ")
    listed = set(
        re.findall(r"`(\w+)`", re.search(r"the shared helpers \((.*?)\) and `data/`", text).group(1))
    )
    helpers = {p.stem for p in (ROOT / "tests").glob("*.py") if not p.stem.startswith("test_")} - {"conftest"}
    assert listed == helpers


def test_trace_md_names_every_event_a_bench_trace_holds(tmp_path):
    """trace.md: what each track and event means. Every event a `bench` trace holds (a request's
    `arrived`, `prefill`, ..., a policy's decisions) is named there, but the rounds, named by
    number."""
    import json

    from radixflow.cli import main

    out = tmp_path / "trace.json"
    argv = ["bench", "--runner", "sim", "--groups", "2", "--candidates", "3", "--trace-out", str(out)]
    assert main(argv) == 0
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["name"] for e in events if e["ph"] in ("X", "i") and not re.fullmatch(r"round \d+", e["name"])}
    named = set(_SPAN.findall(_FENCE.sub("", (ROOT / "docs" / "trace.md").read_text())))
    assert {"prefill", "follow"} <= names  # the run holds chunks and adaptive's decisions
    assert names - named == set()


def test_the_docs_name_every_option_warned_about_on_a_full_attention_model_and_the_sim():
    """usage.md: "`--placement` or `--state-slots` on a full-attention model ... draws a warning",
    "the torch runner's `--device`, ... with the sim runner"; reproducing.md the same of an
    experiment's keys: the options those warnings cover (`RECURRENT_ONLY`, `TORCH_ONLY`)."""
    from radixflow.options.flag_warnings import RECURRENT_ONLY, TORCH_ONLY
    from radixflow.problems import flag

    def named(doc: str, start: str, end: str) -> set[str]:
        text = (ROOT / "docs" / doc).read_text().replace("\n", " ")
        at = text.index(end)
        return set(re.findall(r"`([\w-]+)`", text[text.rindex(start, 0, at) + len(start) : at]))

    assert named("usage.md", "`h200`), ", " on a full-attention model") == {flag(n) for n in RECURRENT_ONLY}
    assert named("usage.md", "the torch runner's ", " with the sim runner") == {flag(n) for n in TORCH_ONLY}
    assert named("reproducing.md", "on sim cells, ", " on a full-attention model") == set(RECURRENT_ONLY)


def test_usage_lists_every_extra_pyproject_declares():
    """usage.md's install table: one row per extra of pyproject.toml, and no other."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    usage = (ROOT / "docs" / "usage.md").read_text()
    table = usage[usage.index("| extra | for |") :].split("\n\n")[0].splitlines()[2:]
    assert [re.match(r"\| `([\w-]+)` \|", row).group(1) for row in table] == list(extras)


def test_the_readme_links_every_page_under_docs():
    readme = (ROOT / "README.md").read_text()
    assert [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"](docs/{p.name})" not in readme] == []


def test_every_test_a_doc_names_exists():
    """ "Tests: `tests/cache/test_eviction.py` (`test_a_one_off_tail_goes_before_...`)": a renamed or
    removed test leaves a doc citing evidence that is gone."""
    defined = {
        name
        for path in (ROOT / "tests").rglob("*.py")
        for name in re.findall(r"def (test_\w+)", path.read_text())
    }
    named = {(doc.name, name) for doc in DOCS for name in re.findall(r"`(test_\w+)`", doc.read_text())}
    assert len(named) >= 5
    assert {(doc, name) for doc, name in named if name not in defined} == set()


def test_serving_says_the_servers_default_temperature_and_the_offline_one():
    """A request with no temperature samples at OpenAI's 1.0 where `LLM` and `radixflow generate`
    are greedy; docs/serving.md did not say so, and the same prompt answered differently."""
    from radixflow.generation import SamplingParams
    from radixflow.server.protocol import CompletionRequest

    served = CompletionRequest(model="m", prompt="x").sampling(4, None, None).temperature
    offline = SamplingParams().temperature
    text = " ".join((ROOT / "docs" / "serving.md").read_text().split())
    assert f"names no `temperature` samples at {served:g}" in text
    assert f"greedy (`temperature` {offline:g})" in text


def test_usage_says_the_bytes_per_kv_element_each_built_in_profile_charges():
    """usage.md: the sim charges KV "at the profile's bytes per element (2 on `h100` and `h200`, 4
    on `cpu`)"; it said its entries weigh what the torch runner's do, where h100's weigh half a
    float32 runner's (`--cache-memory 1KiB` told of a 6KiB KV block on the sim, 12KiB on torch)."""
    from radixflow.costmodel.hardware.profiles import HARDWARE

    text = " ".join((ROOT / "docs" / "usage.md").read_text().split())
    pattern = r"KV at the profile's bytes per element \((\d) on `h100` and `h200`, (\d) on `cpu`\)"
    said = re.search(pattern, text)
    assert said is not None
    gpu, cpu = map(int, said.groups())
    charged = tuple(HARDWARE[name].weight_bytes for name in ("h100", "h200", "cpu"))
    assert charged == (gpu, gpu, cpu)


def test_status_gives_the_gpu_profiles_fixed_costs_as_their_sources_do():
    """status.md said the GPU cost model adds "fixed costs per worker call as measured elsewhere";
    the profiles' own sources (and cost-model.md) say those are assumed, not measured."""
    from radixflow.costmodel.hardware.profiles import HARDWARE

    text = " ".join((ROOT / "docs" / "status.md").read_text().split())
    assert "measured elsewhere" not in text
    for name in ("h100", "h200"):
        profile = HARDWARE[name]
        assert all("not measured" in profile.sources[k] for k in ("round_overhead_s", "decode_overhead_s"))
        prefill, decode = profile.round_overhead_s * 1e3, profile.decode_overhead_s * 1e3
        assert f"per worker call assumed, not measured ({prefill:g} ms with prefill, {decode:g} ms" in text


def test_usage_gives_the_least_rate_bench_takes():
    """usage.md: "`--rate` at least 1e-6 requests/s": `bench --rate 1e-8` is refused ("must be at
    least 1e-06") where the page named only the bound of requests / 2^32 (64 requests: 1.5e-8)."""
    from radixflow.workloads.candidates import MIN_RATE

    text = " ".join((ROOT / "docs" / "usage.md").read_text().split())
    assert f"(`--rate` at least {MIN_RATE:g} requests/s, and at least requests / 2^32" in text


def test_the_limits_usage_and_serving_give_are_the_codes():
    """The bounds the pages state in figures (a workload's tokens and requests, the capacities,
    --repeat, an arrival time, n, the stop, choice and bad-word characters, score --input's contexts
    a call, the sampling ranges: greedy temperature, logit bias, penalties, logprob counts) are the
    declared constants: a limit raised in code is one the docs still refuse."""
    from radixflow.cli.bench_flags import MAX_REPEAT
    from radixflow.cli.score_file import CONTEXTS_PER_CALL
    from radixflow.generation import params
    from radixflow.options.scheduler_options import MAX_KV_BLOCKS, MAX_STATE_SLOTS
    from radixflow.scheduler.sampling import GREEDY_BELOW
    from radixflow.scheduler.sampling_checks import MAX_LOGIT_BIAS, MAX_LOGPROBS, PENALTY_RANGE
    from radixflow.workloads import candidates as wl

    usage = " ".join((ROOT / "docs" / "usage.md").read_text().split())
    serving = " ".join((ROOT / "docs" / "serving.md").read_text().split())
    said = {
        f"holds at most {wl.MAX_WORKLOAD_TOKENS:,} (2^25) prompt tokens": usage,
        f"at most {wl.MAX_WORKLOAD_REQUESTS:,} (2^20) requests": usage,
        f"`--kv-blocks` is at most {MAX_KV_BLOCKS:,}, `--state-slots` at most {MAX_STATE_SLOTS:,}": usage,
        f"`--repeat` at most {MAX_REPEAT}": usage,
        f"at most {wl.MAX_ARRIVAL_S:,} (2^32 s)": usage,
        f"says `j`; at most {params.MAX_CHOICES})": usage,
        f"at most {params.MAX_STOP_CHARS:,} characters in all (`MAX_STOP_CHARS`": usage,
        f"(the choices hold at most {params.MAX_CHOICE_CHARS:,} characters in all, `MAX_CHOICE_CHARS`": usage,
        f"{params.MAX_BAD_WORD_CHARS:,}, `MAX_BAD_WORD_CHARS`": usage,
        f"Contexts then run {CONTEXTS_PER_CALL} at a time": usage,
        f"`stop` strings over {params.MAX_STOP_CHARS:,} characters": serving,
        f"`guided_choice` over {params.MAX_CHOICE_CHARS:,} and": serving,
        f"`bad_words` over {params.MAX_BAD_WORD_CHARS:,} characters": serving,
        f"`temperature` 0 or below {GREEDY_BELOW:.0e}".replace("e-0", "e-"): usage,  # 1e-5
        f"each in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]": usage,
        f"(in [-{PENALTY_RANGE:g}, {PENALTY_RANGE:g}], over the output so far": usage,
        f"`top_logprobs` and `prompt_logprobs` 0–{MAX_LOGPROBS};": serving,
        f"`prompt_logprobs: k` (0–{MAX_LOGPROBS})": serving,
    }
    assert [phrase for phrase, text in said.items() if phrase not in text] == []


def test_serving_gives_the_defaults_radixflow_serve_has():
    """serving.md states serve's defaults in its prose ("`--max-pending` (256)", "`--max-body-bytes`
    (4 MiB", ...): each is the one declared, and a completion's max_tokens is OpenAI's 16."""
    from radixflow.server.config import Listen, ServerConfig
    from radixflow.server.protocol import OPENAI_COMPLETION_MAX_TOKENS as OPENAI_16

    listen, c = Listen(), ServerConfig()
    assert c.max_body_bytes % 2**20 == 0 and c.long_body_bytes % 2**10 == 0
    text = " ".join((ROOT / "docs" / "serving.md").read_text().split())
    said = [
        f"`--host` ({listen.host}) and `--port` ({listen.port}; 0: any free port)",
        f"`--log-level` ({listen.log_level})",
        f"`--max-pending` ({c.max_pending}) accepted requests",
        f"`--max-body-bytes` ({c.max_body_bytes // 2**20} MiB;",
        f"`--long-body-bytes` ({c.long_body_bytes // 2**10} KiB;",
        f"(`--long-text-threads`, {c.long_text_threads})",
        f"`--drain-timeout` seconds ({c.drain_s:g})",
        f"`--default-max-tokens` ({c.default_max_tokens}), a completion OpenAI's {OPENAI_16}",
    ]
    assert [phrase for phrase in said if phrase not in text] == []


def test_fleet_gives_the_routers_thresholds_and_default_as_declared():
    """fleet.md: "overloaded (queue above max(1.5 × mean, mean + 2))", "at least 10% of the prompt"
    and "`checkpoint` when none is named, as with `serve --replicas`": RouterConfig's and the
    default router's figures, the one the cells and serve's --router take."""
    from radixflow.fleet import DEFAULT_ROUTER  # serve's and an experiment cell's
    from radixflow.fleet.routers import RouterConfig

    c = RouterConfig()
    text = " ".join((ROOT / "docs" / "fleet.md").read_text().split())
    said = [
        f"(queue above max({c.imbalance_ratio:g} × mean, mean + {c.imbalance_slack}))",
        f"(covering at least {c.match_threshold:.0%} of the prompt)",
        f"(less than {c.match_threshold:.0%} of its prompt resumable or sent anywhere",
        f"(`{DEFAULT_ROUTER}` when none is named, as with `serve --replicas`)",
    ]
    assert [phrase for phrase in said if phrase not in text] == []


def test_trace_md_names_every_method_of_the_observer_protocols():
    """trace.md: "`SchedulerEvents` (`parked`, `woken`, `decision`) and ... `EngineEvents` (plus
    `arrived`, ...)": it left out `ended` (a request aborted or refused between rounds), so an
    observer written from the page missed those requests' ends."""
    from radixflow.engine.events import EngineEvents
    from radixflow.scheduler.events import SchedulerEvents

    def methods(protocol: type, base: type = object) -> set[str]:
        return {n for n in vars(protocol) if not n.startswith("_") and callable(getattr(protocol, n))} - set(
            vars(base)
        )

    text = " ".join((ROOT / "docs" / "trace.md").read_text().split())
    said = re.search(r"SchedulerEvents` \(([^)]*)\) and `[\w.]*EngineEvents` \(plus ([^)]*)\)", text)
    assert said is not None
    named = [set(re.findall(r"`(\w+)`", group)) for group in said.groups()]
    assert named == [methods(SchedulerEvents), methods(EngineEvents, SchedulerEvents)]


def test_the_periods_trace_serving_and_fleet_give_are_the_codes():
    """The intervals the pages state ("flushed every 5 s", "/health": "max(30 s, 20 × the longest
    round", "10 minutes before any round", replicas polled "every 0.25 s", Serve's health check
    "every 1 s", a wait for a plugin's import told of "after 10 s") are the declared ones."""
    from radixflow.cluster.launch import HEALTH_CHECK_PERIOD_S, STATS_PERIOD_S
    from radixflow.engine.trace_file import FLUSH_EVERY_S
    from radixflow.plugins import SLOW_IMPORT_S
    from radixflow.server.liveness import STALL_FIRST_ROUND_S, STALL_FLOOR_S, STALL_ROUNDS

    def read(name: str) -> str:
        return " ".join((ROOT / "docs" / name).read_text().split())

    stall = f"max({STALL_FLOOR_S:g} s, {STALL_ROUNDS:g} × "
    said = {
        f"flushed every {FLUSH_EVERY_S:g} s": "trace.md",
        f"{stall}the longest round": "serving.md",
        f"{STALL_FIRST_ROUND_S / 60:g} minutes before any round": "serving.md",
        f"{stall}its longest round), {STALL_FIRST_ROUND_S / 60:g} minutes before its first": "fleet.md",
        f"digest every {STATS_PERIOD_S:g} s": "fleet.md",
        f"(within {STATS_PERIOD_S:g} s of its start)": "fleet.md",
        f"Serve's health check (every {HEALTH_CHECK_PERIOD_S:g} s": "fleet.md",
        f"until they are all in, and after {SLOW_IMPORT_S:g} s says so": "extending.md",
        f"waits for that import to end (after {SLOW_IMPORT_S:g} s saying so too)": "extending.md",
    }
    assert [phrase for phrase, doc in said.items() if phrase not in read(doc)] == []


def test_cost_model_gives_each_roofline_fraction_the_roofline_runs_at():
    """cost-model.md put "the recurrent mixers" at 7% of peak; LFM2's short conv, a recurrent mixer
    too, runs at the elementwise 10% (`roofline.ELEMENTWISE_EFFICIENCY`)."""
    from radixflow.costmodel.kernel_times import roofline as r

    text = " ".join((ROOT / "docs" / "cost-model.md").read_text().split())
    fractions = (
        f"(GEMMs {r.GEMM_EFFICIENCY:.0%}, attention {r.ATTENTION_EFFICIENCY:.0%}, Gated DeltaNet and "
        f"Mamba2 {r.RECURRENT_EFFICIENCY:.0%}, LFM2's short conv {r.ELEMENTWISE_EFFICIENCY:.0%}"
    )
    assert fractions in text


# the README headline table's rows: the `bench --json` figure each shows and how it is printed
_HEADLINE_ROWS = {
    "worker rounds": ("rounds", "{:d}"),
    "rounds lower bound": ("rounds_lower_bound", "{:d}"),
    "mean latency (s)": ("mean_latency_s", "{:.4f}"),
    "p50 latency (s)": ("p50_latency_s", "{:.4f}"),
    "p99 latency (s)": ("p99_latency_s", "{:.4f}"),
    "reuse rate": ("reuse_rate", "{:.2%}"),
    "bubble tokens": ("bubble_tokens", "{:d}"),
    "outputs sha256": ("outputs_sha256", "{:.12}"),
}


def test_the_readme_headline_table_is_what_the_default_bench_prints(tmp_path, capsys):
    """The README's headline figure is `radixflow bench --runner sim`, which is deterministic:
    every cell of its table (each policy's figure, and each change against `native`, to 0.1%) is
    what that command writes to `--json` now. The pinned rounds and bubble tokens held two rows
    of it; a change to the cost model moved the latencies with nothing to say the README was stale."""
    import json

    from radixflow.cli import main

    out = tmp_path / "bench.json"
    assert main(["bench", "--runner", "sim", "--json", str(out)]) == 0
    capsys.readouterr()
    results = {r["policy"]: r for r in json.loads(out.read_text())["results"]}
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## The headline figure") :].split("\n\n")[2].splitlines()
    assert table[0].split(" | ")[1:4] == list(results)  # native, radixflow, adaptive
    wrong = []
    for line in table[2:]:
        metric, *cells = (c.strip() for c in line.split("|")[1:-1])
        key, form = _HEADLINE_ROWS[metric]
        for policy, cell in zip(results, cells[:3], strict=True):
            if cell != form.format(results[policy][key]):
                wrong.append(f"{metric}, {policy}: README {cell}, bench {form.format(results[policy][key])}")
        for policy, cell in zip(("radixflow", "adaptive"), cells[3:], strict=True):
            new, old = results[policy][key], results["native"][key]
            if key == "outputs_sha256":
                said = "same" if new == old else "differs"
            elif cell:
                said = f"{(new / old - 1) * 100:+.1f}%".replace("-", "−")
                cell = cell if "." in cell else cell.replace("%", ".0%")  # "−100%"
            else:
                continue  # the lower bound's change is left blank
            if cell != said:
                wrong.append(f"{metric}, {policy} vs native: README {cell}, bench {said}")
    assert len(table) == 2 + len(_HEADLINE_ROWS)
    assert wrong == []


def test_the_readmes_real_model_command_is_the_one_real_models_md_runs():
    """The README's "Real models" line showed `radixflow bench --runner torch --model qwen3_5-small`
    on bench's default workload (64 requests of 1,088 tokens, a no-cache reference and three
    policies: past 10 minutes on this 2-core machine, and still running), where real-models.md,
    which it links, runs the real runner's benchmark shape. A newcomer's first real run is the
    page's."""
    readme = (ROOT / "README.md").read_text()
    line = readme[readme.index("- **Real models**") :].split("\n- ")[0].replace("\n", " ")
    shown = [span for span in _SPAN.findall(line) if span.startswith("radixflow bench")]
    pages = _code((ROOT / "docs" / "real-models.md").read_text())
    first = next(code.strip() for code in pages if code.startswith("radixflow bench --runner torch"))
    assert shown == [first]


def test_usage_says_radixflow_models_needs_the_torch_extra(tmp_path):
    """`radixflow models` builds each zoo model on torch's meta device to count its parameters, so
    the core install refuses it in one line; usage.md pointed a core-install user of the sim at it
    for the zoo names ("a zoo name (`radixflow models`)") without saying so."""
    code = (
        "import sys\n"
        f"for name in {EXTRAS_PACKAGES!r}: sys.modules[name] = None  # import raises ImportError\n"
        "from radixflow.cli import main\n"
        "sys.exit(main(['models']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RADIXFLOW_CACHE": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 2 and "radixflow models needs the torch extra" in done.stderr, done.stderr
    usage = (ROOT / "docs" / "usage.md").read_text()
    listed = next(line for line in usage.splitlines() if line.startswith("- `radixflow models`"))
    assert "needs the `torch` extra" in listed
