"""Bad input at every door, generated: wrong types, zero, negative, huge, NaN, missing values.

Each door is driven from its own declaration (the parser's flags, the TOML cell keys, ...), so an
option added tomorrow is fed bad values the day it is added. The property: a refusal is one line
naming the option (exit 2), never a traceback or a hang; an acceptance used the value as given.
The server's token-id fields (found by their declared type) and chat roles: a 400 naming the field
exactly when an id is outside the vocabulary or a role unknown to the chat template.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from signal_utils import time_limit

from radixflow.cli import build_parser, main
from radixflow.cli.calibrate import ENGINE_OPTIONS as CALIBRATE_ENGINE
from radixflow.cli.command import UsageError
from radixflow.costmodel.hardware.profiles import HardwareProfile
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.experiments.analysis import distinct
from radixflow.experiments.config import CELL_KEYS, WORKLOAD_KEYS, ExperimentConfigError
from radixflow.experiments.config_parse import parse_config
from radixflow.options import EngineOptions, option_fields, plan_engine
from radixflow.options.flags import from_args
from radixflow.problems import ProblemError

SMALL = ["--groups", "1", "--candidates", "2", "--context-len", "16", "--candidate-len", "16"]
OUTPUT_FLAGS = {"--trace", "--write-trace", "--json", "--round-trace"}  # paths: tested apart
ENGINE = {f.name for f in option_fields()}

# command-line text a user might type where a number or a name belongs
BAD_TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "abc",
            "4.5",
            "32.0",
            "0",
            "-0",
            "-1",
            "1e30",
            "1e-300",
            "99999999999999999999",
            "nan",
            "inf",
            "-inf",
            "NaN",
            "1_000",
            "0x10",
            # digits of other scripts (Python's int() reads them), a float past any float, an
            # integer past the 4300 digits Python reads
            "\u0661\u0662",
            "\uff11.\uff15",
            "1e400",
            "9" * 5000,
            "true",
            "None",
            "qwen3_5-2b",
            "h200",
            # sizes (cache_memory): units, a budget too small for one request, a negative one
            "2GiB",
            "300M",
            "1KiB",
            "-2GiB",
            "5i",
            "1.5.5G",
            "4\x00GiB",
            "2 PiB",
        ]
    ),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
EXAMPLES = int(os.environ.get("RADIXFLOW_BAD_INPUT_EXAMPLES", "120"))  # raise it for a long hunt
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _command(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices[name]


def _flags(command: str) -> dict[str, argparse.Action]:
    """Every flag of a command that takes one value (the property feeds it)."""
    return {
        a.option_strings[0]: a
        for a in _command(command)._actions
        if a.option_strings
        and a.nargs is None
        and a.dest != "help"
        and a.option_strings[0] not in OUTPUT_FLAGS
    }


def _as_parsed(action: argparse.Action, text: str) -> Any:
    """What argparse makes of ``text`` for this flag (the value a run must have used)."""
    return action.type(text) if callable(action.type) else text


def _names(line: str, option: str) -> bool:
    return option in line or option.removeprefix("--").replace("-", "_") in line


# ------------------------------------------------------------------ radixflow bench (runs)
BENCH_FLAGS = _flags("bench")


class Accepted(Exception):
    """Raised in place of drawing the workload: every check of the inputs has passed by then."""


@SETTINGS
@given(option=st.sampled_from(sorted(BENCH_FLAGS)), text=BAD_TEXT, missing=st.booleans())
def test_bench_refuses_in_one_line_or_uses_the_value(option, text, missing, capsys, monkeypatch, tmp_path):
    import radixflow.cli.bench as bench

    capsys.readouterr()  # what an earlier example left behind
    seen: list[EngineOptions] = []
    # the fixture is not undone between examples: wrap the real function, not the last wrapper
    monkeypatch.setattr(bench, "plan_engine", lambda o: seen.append(o) or plan_engine(o))

    def accepted(*_: object) -> None:  # a valid huge workload is work, not a hang: stop before it
        raise Accepted

    monkeypatch.setattr(bench, "load_workload", accepted)
    monkeypatch.chdir(tmp_path)
    argv = ["bench", *SMALL, option] + ([] if missing else [text])
    try:
        with time_limit(60):
            code = main(argv)
    except Accepted:
        code = 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and code in (0, 2), (argv, code, err)
    if code == 2:
        errors = [line for line in err.splitlines() if line.startswith("radixflow: error:")]
        assert len(errors) == 1 and len(err.strip().splitlines()) == 1, err
        assert _names(errors[0], option), (argv, errors)
        return
    dest = BENCH_FLAGS[option].dest
    if dest in ENGINE and dest != "policy":
        assert getattr(seen[0], dest) == _as_parsed(BENCH_FLAGS[option], text), (argv, seen)


def test_bench_runs_what_it_accepts(capsys):
    """The property above stops before the run; the run of accepted small values goes through."""
    for extra in (
        ["--fixed-cost-ms", "0"],
        ["--state-slots", "0"],
        ["--kv-blocks", "4", "--block-size", "16"],
    ):
        code = main(["bench", *SMALL, *extra])
        err = capsys.readouterr().err
        assert code in (0, 1) and "Traceback" not in err, (extra, err)


# --------------------------------------------- generate, score, serve, run-batch, calibrate: flags -> options
# the least each command parses with (its model and required inputs)
BASE_ARGS = {
    "generate": ["m", "--prompt", "x"],
    "score": ["m", "--context", "x", "--candidate", "y"],
    "serve": ["m"],
    "run-batch": ["m", "-i", "f.jsonl"],
    "calibrate": ["--model", "m"],
}


@pytest.mark.parametrize("command", ["generate", "score", "serve", "run-batch", "calibrate"])
@SETTINGS
@given(data=st.data())
def test_engine_flags_of_every_command_refuse_in_one_line_or_keep_the_value(command, data):
    engine = ENGINE if command != "calibrate" else set(CALIBRATE_ENGINE)
    flags = {k: a for k, a in _flags(command).items() if a.dest in engine}
    option = data.draw(st.sampled_from(sorted(flags)))
    text, missing = data.draw(BAD_TEXT), data.draw(st.booleans())
    base = BASE_ARGS[command]
    argv = [command, *base, option] + ([] if missing else [text])
    dest = flags[option].dest
    try:
        args = build_parser().parse_args(argv)
        options = from_args(args, only=CALIBRATE_ENGINE if command == "calibrate" else None)
    except UsageError as e:
        assert _names(str(e), option) and "\n" not in str(e), (argv, e)
        return
    except ProblemError as e:
        # the option at fault, or one it conflicts with that names it (token_budget vs block_size)
        assert dest in str(e) and "\n" not in str(e), (argv, e)
        return
    assert getattr(options, dest) == _as_parsed(flags[option], text)


CALIBRATE_OWN = {k: a for k, a in _flags("calibrate").items() if a.dest not in CALIBRATE_ENGINE}


@SETTINGS
@example(option="--model", text="4\x00GiB")  # drawn once at random, when this test skipped the model check
@given(option=st.sampled_from(sorted(CALIBRATE_OWN)), text=BAD_TEXT)
def test_calibrate_plans_only_what_it_can_time(option, text):
    from radixflow.calibration.command import CalibrationUsageError, _plan
    from radixflow.cli.calibrate import refuse_unknown_models

    argv = ["calibrate", "--model", "qwen3_5-tiny", option, text]
    try:
        args = build_parser().parse_args(argv)
        args.device, args.threads = "cpu", 1
        refuse_unknown_models(args.model, from_args(args, only=CALIBRATE_ENGINE))  # as the program does first
        plan = _plan(args)
    except (UsageError, CalibrationUsageError, ProblemError) as e:
        assert _names(str(e), option) and "\n" not in str(e), (argv, e)
        return
    dest = CALIBRATE_OWN[option].dest
    value = _as_parsed(CALIBRATE_OWN[option], text)
    got = getattr(args, dest)
    assert got == value or got == ["qwen3_5-tiny", value], (argv, got)
    assert plan.repeats >= 1 and plan.max_tokens >= 256


def test_a_bad_flag_value_through_the_real_program_is_one_line(capsys):
    for argv in (
        ["generate", "qwen3_5-tiny", "--prompt", "x", "--kv-blocks", "0"],
        ["serve", "qwen3_5-tiny", "--torch-threads", "100000"],
        ["calibrate", "--model", "qwen3_5-tiny", "--torch-threads", "-3"],
        ["bench", "--state-slots", "nan"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("radixflow: error: "), err


# ------------------------------------------------------------------ experiment TOML cells
TOML_VALUES = st.one_of(
    st.sampled_from(
        [
            "0",
            "-1",
            "4.5",
            "32.0",
            "1e300",
            "1e400",
            "nan",
            "inf",
            "-inf",
            "true",
            '""',
            '"abc"',
            '"8"',
            "[]",
            "{}",
            "9223372036854775807",
            '"2GiB"',
            '"1KiB"',
            '"-1G"',
            '"4\\u0000G"',
            '"512 MB"',
        ]
    ),
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: "nan" if math.isnan(x) else repr(x)),
)
CELL_BASE = """
name = "t"
[defaults]
runner = "sim"
model = "qwen3_5-2b"
{line}
[defaults.workload]
{wline}
"""
BASE_WORKLOAD = {"groups": "2", "candidates": "2", "context_len": "64", "candidate_len": "16"}


def _toml_value(text: str) -> Any:
    """The value TOML makes of ``text`` (None: not TOML; TOML has no null)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return None


def _same(got: Any, want: Any) -> bool:
    return got == want or (isinstance(want, float) and math.isnan(want) and math.isnan(got))


@SETTINGS
@given(key=st.sampled_from(sorted([*CELL_KEYS, *(f"workload.{k}" for k in WORKLOAD_KEYS)])), text=TOML_VALUES)
def test_toml_cells_refuse_in_one_line_naming_the_key_or_keep_the_value(key, text, tmp_path_factory):
    value, name = _toml_value(text), key.removeprefix("workload.")
    if value is None or key in ("runner", "model"):
        return  # not TOML, or a key the base config sets itself
    work = dict(BASE_WORKLOAD)
    line = f"{name} = {text}"
    if key.startswith("workload."):
        work[name], line = text, ""
    data = tomllib.loads(CELL_BASE.format(line=line, wline="\n".join(f"{k} = {v}" for k, v in work.items())))
    try:
        with time_limit(30):
            config = parse_config(data, "t.toml", tmp_path_factory.mktemp("cfg"))
    except ExperimentConfigError as e:
        message = str(e)
        assert "\n" not in message and message.startswith("t.toml: ") and name in message, (
            key,
            text,
        )
        return
    got = [c.workload[name] if key.startswith("workload.") else c.settings[name] for c in config.cells]
    if name in ("hardware", "cost_profile", "trace_out"):
        return  # a file the cell names is kept as its absolute path (found beside the config)
    want = value if isinstance(value, list) else [value] * len(got)
    assert len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True)), (
        key,
        text,
        got,
    )


def test_the_toml_door_refuses_what_it_used_to_replace(tmp_path):
    for line, key in (
        ("kv_blocks = 0", "kv_blocks"),
        ("state_slots = -1", "state_slots"),
        ("kv_blocks = 1000000000000", "kv_blocks"),
        ("repetitions = 1000000000", "repetitions"),
        ("token_budget = 8", "token_budget"),
        ("torch_threads = 100000", "torch_threads"),
    ):
        with pytest.raises(ExperimentConfigError, match=f"defaults.{key}: "):
            work = "\n".join(f"{k} = {v}" for k, v in BASE_WORKLOAD.items())
            parse_config(tomllib.loads(CELL_BASE.format(line=line, wline=work)), "t.toml", Path(tmp_path))


# ------------------------------------------------------------------ hardware profile files
JSON_VALUES = st.one_of(
    st.sampled_from([0, -1, 4.5, 1e300, 1e-300, "abc", "", "1e12", True, False, None, [], {}, [1], {"x": 1}]),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
)


@SETTINGS
@given(key=st.sampled_from(sorted(HardwareProfile.__dataclass_fields__)), value=JSON_VALUES)
def test_profile_fields_refuse_naming_the_key_or_keep_the_value_and_finite_times(
    key, value, tmp_path_factory
):
    from radixflow.costmodel.hardware.profile_checks import ProfileError
    from radixflow.costmodel.hardware.profile_files import load_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE
    from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
    from radixflow.runners.sim import SimRunner

    data = {**HARDWARE["h100"].to_dict(), key: value}
    path = tmp_path_factory.mktemp("profile") / "p.json"
    path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
    try:
        profile = load_profile(path)
    except ProfileError as e:
        assert key in str(e) and "\n" not in str(e), (key, value, e)
        return
    # null stands for an optional key's absence (the profile's default); any other value is kept
    if value is not None and key not in ("sources", "calibration", "name", "kind_scale"):
        assert getattr(profile, key) == value, (key, value, getattr(profile, key))
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], profile)  # its time for a round must be finite
    seconds = runner.cost.round_seconds([ChunkShape(0, 2048, True, False, 1)])
    assert math.isfinite(seconds) and seconds >= 0, (key, value, seconds)


# ------------------------------------------------------------------ model config.json fields
FAMILY_PRESETS = [
    "llama-tiny",
    "qwen3-tiny",
    "qwen3_5-tiny",
    "qwen3_next-tiny",
    "lfm2-tiny",
    "nemotron_h-tiny",
    "falcon_h1-tiny",
]


def _schema_fields(zoo_name: str) -> list[str]:
    from radixflow.models.io.loader import read_config
    from radixflow.models.registry import model_class
    from radixflow.models.zoo import ensure_model

    config = read_config(ensure_model(zoo_name))
    return sorted(f.name for f in model_class(config.model_type).config_schema.fields)


@pytest.mark.parametrize("zoo_name", FAMILY_PRESETS)
@settings(max_examples=max(EXAMPLES // 3, 10), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_config_fields_refuse_naming_the_field_or_keep_the_value(zoo, zoo_name, data, tmp_path_factory):
    from radixflow.models.io.loader import CheckpointError, read_config
    from radixflow.models.zoo import ensure_model

    source = ensure_model(zoo_name)
    field = data.draw(st.sampled_from(_schema_fields(zoo_name)))
    value = data.draw(JSON_VALUES)
    config = json.loads((source / "config.json").read_text())
    config[field] = value
    path = tmp_path_factory.mktemp("ckpt")
    (path / "config.json").write_text(json.dumps(config))
    try:
        got = read_config(path)
    except CheckpointError as e:
        assert "\n" not in str(e) and (field in str(e) or (e.problem and e.problem.param)), (field, value, e)
        return
    kept = got.to_dict().get(field)
    assert kept == value or (isinstance(value, float) and math.isnan(value)), (field, value, kept)


# ------------------------------------------------------------------ experiment names and lists
# what a careless or hostile config might put where a name belongs (TOML has no null)
NAME_VALUES = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            ".",
            "..",
            "../x",
            "../../../x",
            "a/b",
            "/abs",
            "a\\b",
            ".hidden",
            "-dash",
            "a b",
            "a\nb",
            "tab\there",
            "nul\x00",
            "x" * 101,
            "ok-name_1.2",
            "C:x",
            "~",
            "é",
            "main",
            "a",
            "b",
            "grid[1]",
        ]
    ),
    st.text(max_size=12),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
NAMES_BASE: dict[str, Any] = {
    "name": "t",
    "defaults": {"runner": "sim", "model": "qwen3_5-2b", "workload": {"groups": 1, "candidates": 2}},
    "grid": [{"name": "a", "token_budget": 256}, {"name": "b", "token_budget": 512}],
}


def _with(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``data`` with ``value`` at ``path`` ("grid[1].workload.rate", "seeds")."""
    out = json.loads(json.dumps(data))
    *tables, last = path.split(".")
    here = out
    for part in tables:
        name, _, index = part.partition("[")
        here = here.setdefault(name, {})
        if index:
            here = here[int(index.rstrip("]"))]
    here[last] = value
    return out


def _refused(data: dict[str, Any], tmp: Path) -> str | None:
    """The one-line refusal of ``data`` (None: accepted), within a time limit."""
    try:
        with time_limit(30):
            parse_config(data, "t.toml", tmp)
    except ExperimentConfigError as e:
        assert "\n" not in str(e) and str(e).startswith("t.toml: "), e
        return str(e)
    return None


@SETTINGS
@given(where=st.sampled_from(["name", "description", "grid[0].name", "grid[1].name"]), value=NAME_VALUES)
def test_experiment_names_refuse_in_one_line_or_are_plain_names(where, value, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("names")
    data = _with(NAMES_BASE, where, value)
    refusal = _refused(data, tmp)
    if refusal is not None:
        # a grid name equal to the other grid's is refused where it repeats: at grid[1]
        clash = where.startswith("grid") and value in ("a", "b")
        named = "grid[1].name" if clash and value == data["grid"][0]["name"] else where
        assert f"t.toml: {named}: " in refusal, (where, value, refusal)
        return
    config = parse_config(data, "t.toml", tmp)
    assert isinstance(value, str), (where, value)
    if where == "name":  # it names a directory under results/: one plain component, inside it
        root = tmp / "results"
        assert config.name == value and len(Path(value).parts) == 1 and value not in (".", "..")
        assert (root / value).resolve().parent == root.resolve() and not value.startswith(".")
    elif where.startswith("grid"):  # it labels the report: one printable line, one grid's own
        assert value.strip() and value.isprintable(), value
        assert len({c.group for c in config.cells}) == 2, (value, [c.group for c in config.cells])


LIST_KEYS = [
    "policies",
    "seeds",
    "grid[0].seeds",
    *(f"defaults.{k}" for k in sorted(CELL_KEYS)),
    *(f"grid[0].{k}" for k in sorted(CELL_KEYS)),
    *(f"grid[0].workload.{k}" for k in sorted(WORKLOAD_KEYS)),
]
LIST_ITEMS = st.one_of(
    st.sampled_from(["native", "radixflow", "adaptive", "native@", "qwen3_5-2b", "h200", "sim", "pow2"]),
    st.sampled_from([0, 1, 2, 256, 512, 1.0, 2.5, True]),
    NAME_VALUES,
)


def _default_of(path: str) -> Any:
    key = path.rsplit(".", 1)[-1]
    if path.startswith("grid[0].workload."):
        return WORKLOAD_KEYS[key]
    return {"policies": "native", "seeds": 0}.get(key, CELL_KEYS.get(key))


def _exact_repeat(values: list[Any]) -> bool:
    """Two entries of one type and one value (NaN is never equal to itself)."""
    return any(type(a) is type(b) and a == b for i, a in enumerate(values) for b in values[i + 1 :])


@SETTINGS
@given(
    where=st.sampled_from(LIST_KEYS),
    items=st.lists(LIST_ITEMS, max_size=4),
    repeat=st.sampled_from(["none", "first", "default"]),
)
@example(where="grid[0].block_size", items=[512], repeat="none")  # a clash with the cell's budget
@example(where="grid[0].workload.candidate_len", items=[261120], repeat="none")  # past the context
@example(where="grid[0].token_budget", items=[512], repeat="none")  # grid b's cell: one key
@example(where="grid[0].workload.rate", items=[1.0, 2.5], repeat="none")  # batch arrivals: one key
def test_experiment_lists_refuse_empty_and_repeated_entries_in_one_line(
    where, items, repeat, tmp_path_factory
):
    default = _default_of(where)
    if repeat == "first" and items:
        items = [*items, items[0]]
    elif repeat == "default" and default is not None:
        items = [default, *items, default]
    tmp = tmp_path_factory.mktemp("lists")
    data = _with(NAMES_BASE, where, items)
    refusal = _refused(data, tmp)
    key = where.removeprefix("defaults.") if where.startswith("defaults.") else where
    if refusal is not None:
        # a valid entry may clash with another field of its cell (block_size 512 against that
        # grid's token_budget 256): the refusal names the cell's field and the entry's key
        place, _, field = key.rpartition(".")
        clash = f"{place}." in refusal and f"{field} " in refusal
        assert key in refusal or clash, (where, items, refusal)
        return
    assert items and not _exact_repeat(items), (where, items)
    config = parse_config(data, "t.toml", tmp)
    labels = [v.label for v in config.variants]
    # cells of one key are one cell to the report (grids sharing it, a rate beside batch arrivals)
    by_key: dict[str, list[dict[str, Any]]] = {}
    for c in config.cells:
        by_key.setdefault(c.key(config.variants), []).append({"cell": c.to_dict(), "hybrid": True})
    assert all(len(distinct(same)) == 1 for same in by_key.values()), (where, items)
    assert len(set(labels)) == len(labels), (where, items)


# ------------------------------------------------------------------ the server's ids and roles
def _server_routes() -> dict[str, tuple[Any, dict[str, Any]]]:
    from server_utils import MODEL

    from radixflow.server.protocol import ChatRequest, CompletionRequest
    from radixflow.server.protocol_tokens import DetokenizeRequest

    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    return {
        "/v1/completions": (CompletionRequest, {"model": MODEL, "prompt": "Hello", "max_tokens": 1}),
        "/v1/chat/completions": (ChatRequest, chat),
        "/detokenize": (DetokenizeRequest, {"tokens": [1, 2]}),
    }


def _id_fields() -> list[tuple[str, str]]:
    """Every request field that holds token ids, found by its declared type: a field added
    tomorrow as a list of ids is fed bad ids the day it is added."""
    return [
        (route, name)
        for route, (model, _) in _server_routes().items()
        for name, info in model.model_fields.items()
        if "list[int]" in str(info.annotation)
    ]


@pytest.fixture(scope="module")
def server(zoo) -> Iterator[Any]:
    from server_utils import running_server

    from radixflow.server.state import ServerConfig

    with running_server(ServerConfig(default_max_tokens=1)) as running, running.http(timeout=30) as http:
        yield running, http


def _vocab(http: Any) -> int:
    return int(http.get("/tokenizer_info").json()["vocab_size"])


def test_the_id_fields_are_found():
    assert set(_id_fields()) >= {
        ("/v1/completions", "prompt"),
        ("/v1/completions", "stop_token_ids"),
        ("/v1/chat/completions", "stop_token_ids"),
        ("/detokenize", "tokens"),
    }


SERVER_SETTINGS = settings(
    max_examples=max(EXAMPLES // 2, 10), deadline=None, suppress_health_check=list(HealthCheck)
)
IDS = st.one_of(st.integers(), st.sampled_from([-1, 0, 511, 512, 2**31, 2**63, 2**64, -(2**63)]))


@SERVER_SETTINGS
@given(field=st.sampled_from(_id_fields()), ids=st.lists(IDS, min_size=1, max_size=4))
def test_every_id_field_refuses_ids_outside_the_vocabulary_naming_it(server, field, ids):
    _, http = server
    route, name = field
    vocab = _vocab(http)
    body = {**_server_routes()[route][1], name: ids}
    r = http.post(route, json=body)
    inside = all(0 <= t < vocab for t in ids)
    if inside:
        assert r.status_code == 200, (field, ids, r.text)
        return
    assert r.status_code == 400, (field, ids, r.text)
    error = r.json()["error"]
    assert error["param"] == name and "\n" not in error["message"], (field, ids, error)


ROLES = st.one_of(
    st.sampled_from(["system", "user", "assistant", "tool", "developer", "function", "wizard", "User", ""]),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=10),  # surrogates: strict.py's
)


@SERVER_SETTINGS
@given(route=st.sampled_from(["/v1/chat/completions", "/tokenize"]), role=ROLES)
def test_chat_roles_are_those_the_template_knows_or_a_400_naming_the_message(server, route, role):
    running, http = server
    state = running.server.state
    known = state.tokenizer.chat.roles  # the template's, as the server reads it
    messages = [{"role": "user", "content": "hi"}, {"role": role, "content": "there"}]
    r = http.post(route, json={"model": state.model_name, "messages": messages, "max_tokens": 1})
    if role in known:
        assert r.status_code == 200, (role, r.text)
        return
    assert r.status_code == 400, (role, r.text)
    error = r.json()["error"]
    assert error["param"] == "messages[1].role" and "\n" not in error["message"], (role, error)


# ------------------------------------------------------------------ one check, one wording
# (field, the value, as typed on the command line, as written in JSON): each refused by every door
SAME_BAD_VALUE = [
    ("temperature", -1.0, "-1", "-1"),
    ("temperature", math.nan, "nan", "NaN"),
    ("temperature", "hot", "hot", '"hot"'),
    ("top_p", 1.5, "1.5", "1.5"),
    ("top_p", math.inf, "inf", "Infinity"),
    ("top_k", -2, "-2", "-2"),
    ("top_k", 1.5, "1.5", "1.5"),
    ("min_p", 2.0, "2", "2"),
    ("presence_penalty", math.nan, "nan", "NaN"),
    ("frequency_penalty", 3.0, "3", "3"),
    ("repetition_penalty", 0.0, "0", "0"),
    ("seed", 2**64, str(2**64), str(2**64)),
    ("seed", -(2**63) - 1, str(-(2**63) - 1), str(-(2**63) - 1)),
    ("seed", 1.5, "1.5", "1.5"),
    ("logprobs", 21, "21", "21"),
    ("logprobs", -1, "-1", "-1"),
    ("prompt_logprobs", 21, "21", "21"),
    ("n", 0, "0", "0"),
    ("n", 129, "129", "129"),
    ("n", 1.5, "1.5", "1.5"),
    ("truncate_prompt_tokens", 2.5, "2.5", "2.5"),
    ("max_tokens", -1, "-1", "-1"),
    ("min_tokens", 9, "9", "9"),
    ("truncate_prompt_tokens", 0, "0", "0"),
    # digits of another script: Python's int() reads them, a JSON body has them only as a string
    ("max_tokens", "\u0661\u0662", "\u0661\u0662", '"\u0661\u0662"'),
    ("top_p", "\uff11", "\uff11", '"\uff11"'),
]
# Where a door may word a field otherwise, and why: a chat reply is at least one token (OpenAI's rule)
OWN_RULE = {("chat", "max_tokens")}


def _core(message: str, name: str) -> str:
    """What a refusal says of the value, without the door's name for the field and the value as
    the door spells it: ``--top-p: must be in (0, 1], got 1.5`` -> ``must be in (0, 1]``."""
    said = message.removeprefix("radixflow: error: ")
    assert said.startswith(f"{name}: "), (name, message)
    return said.removeprefix(f"{name}: ").rpartition(", got ")[0]


def _cli_message(capsys: Any, monkeypatch: Any, flag: str, text: str) -> str:
    from radixflow.generation import LLM

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the sampling flags were checked")

    monkeypatch.setattr(LLM, "from_options", refuse)
    argv = ["generate", "qwen3_5-tiny", "--prompt", "hi", "--max-tokens", "4", f"{flag}={text}"]
    if flag == "--max-tokens":
        argv[-3:-1] = []
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _server_message(http: Any, route: str, field: str, raw: str) -> tuple[str, str | None]:
    from server_utils import MODEL

    body = {"model": MODEL, "max_tokens": 4}
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    body |= {"prompt": "Hello"} if route == "/v1/completions" else chat
    named = field
    if route == "/v1/chat/completions" and field == "logprobs":  # chat's count is top_logprobs
        body["logprobs"], named = True, "top_logprobs"
    text = json.dumps({k: v for k, v in body.items() if k != named})[:-1] + f', "{named}": {raw}}}'
    r = http.post(route, content=text.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400, (route, field, raw, r.text)
    error = r.json()["error"]
    assert error["param"] == named, (route, field, error)
    return _core(error["message"], named), error["message"]


@pytest.mark.parametrize(("field", "value", "typed", "raw"), SAME_BAD_VALUE)
def test_every_door_refuses_a_bad_sampling_value_in_the_same_words(
    server, capsys, monkeypatch, field, value, typed, raw
):
    """`LLM`'s `SamplingParams`, `radixflow generate`'s flags and the server's two generation
    routes (run-batch posts to the same ones) refuse the same bad value with the same core text:
    one check and one limit, each door naming the field and spelling the value its own way. The
    server said "logprobs must be between 0 and 20", "seed must fit in 64 bits" in words of its
    own, and SamplingParams "must be a number >= 0, got nan" where the others said "finite"."""
    from radixflow.generation import SamplingParams

    _, http = server
    problem = SamplingParams(**{"max_tokens": 4, field: value}).problem()
    assert problem is not None and problem.param == field
    cores = {"LLM": _core(str(problem), field)}
    if ("cli", field) not in OWN_RULE:
        cli = _core(_cli_message(capsys, monkeypatch, _flag_of(field), typed), _flag_of(field))
        for other in problem.mentions:  # another field the text names, spelled as a flag too
            cli = cli.replace(_flag_of(other), other)
        cores["cli"] = cli
    for door, route in (("completions", "/v1/completions"), ("chat", "/v1/chat/completions")):
        if (door, field) not in OWN_RULE:
            cores[door] = _server_message(http, route, field, raw)[0]
    assert len(set(cores.values())) == 1, cores


def test_a_min_tokens_past_any_max_tokens_is_refused_as_min_tokens_at_every_door(server, capsys, monkeypatch):
    """With no max_tokens given, the default is raised to min_tokens: one past the largest
    max_tokens was refused as ``--max-tokens: must be at most ...``, a field the user never gave."""
    from radixflow.generation import LLM, SamplingParams

    huge = 10**30
    problem = SamplingParams(max_tokens=2**63 - 1, min_tokens=huge).problem()
    assert problem is not None and problem.param == "min_tokens"
    monkeypatch.setattr(LLM, "from_options", None)  # never reached: the flags are refused first
    assert main(["generate", "qwen3_5-tiny", "--prompt", "hi", f"--min-tokens={huge}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"radixflow: error: {problem.render(_flag_of)}"], lines
    _, http = server
    for route, (_, body) in _server_routes().items():
        if route in ("/v1/completions", "/v1/chat/completions"):
            sent = {k: v for k, v in body.items() if k != "max_tokens"} | {"min_tokens": huge}
            r = http.post(route, json=sent)
            assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens", (route, r.text)


def _flag_of(field: str) -> str:
    from radixflow.cli.generate_flags import sampling_flag

    return sampling_flag(field)


@pytest.mark.parametrize("seed", [-1, -(2**63), 2**64 - 1])
def test_every_door_takes_the_seeds_the_others_take(server, capsys, monkeypatch, seed):
    """A seed is read mod 2^64, signed or unsigned: `generate --seed -1` was refused ("must be >=
    0", the engine option's own rule) while `LLM`'s request seed and the server's took it."""
    from radixflow.generation import LLM, SamplingParams
    from radixflow.options import EngineOptions

    assert SamplingParams(max_tokens=1, seed=seed).problem() is None
    assert EngineOptions(seed=seed).validate() is None

    class Accepted(Exception):
        pass

    def accepted(*args: object, **kwargs: object) -> None:
        raise Accepted  # the flags passed every check: the model would load now

    monkeypatch.setattr(LLM, "from_options", accepted)
    with pytest.raises(Accepted):
        main(["generate", "qwen3_5-tiny", "--prompt", "hi", "--max-tokens", "1", f"--seed={seed}"])
    assert capsys.readouterr().err == ""
    _, http = server
    for route, body in _server_routes().items():
        if route in ("/v1/completions", "/v1/chat/completions"):
            r = http.post(route, json={**body[1], "seed": seed, "max_tokens": 1})
            assert r.status_code == 200, (route, r.text)
