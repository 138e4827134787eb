"""Hardware profiles (`costmodel.hardware.profiles`): every key checked, so no profile makes the sim's times
(or `bench --json`) infinite or NaN."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from radixflow.cli import main
from radixflow.costmodel.hardware.profile_checks import (
    COMPUTE_TERMS,
    MAX_BANDWIDTH,
    MAX_FLOPS,
    MAX_KIND_SCALE,
    MAX_OVERHEAD_S,
    MAX_WEIGHT_BYTES,
    MIN_RATE,
    ProfileError,
)
from radixflow.costmodel.hardware.profile_files import (
    load_profile,
    profile_from_dict,
    resolve_hardware,
    save_profile,
)
from radixflow.costmodel.hardware.profiles import HARDWARE

GOOD = HARDWARE["h200"].to_dict()


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("flops", 1e-300, "got 1e-300"),
        ("flops", 0, "got 0"),
        ("flops", -1e12, "got -1000000000000.0"),
        ("flops", 1e19, "got 1e+19"),
        ("flops", math.nan, "got NaN"),
        ("flops", math.inf, "got Infinity"),
        ("flops", "1e12", 'got "1e12"'),
        ("flops", True, "got true"),
        ("flops", 10**400, "got 1000"),  # beyond a float: no OverflowError
        ("kind_scale", {"gdn": 10**400}, "entry gdn: must be a number from 0"),
        ("bandwidth", 0, "or null, got 0"),
        ("bandwidth", 1e16, "got 1e+16"),
        ("round_overhead_s", -0.001, "got -0.001"),
        ("per_request_s", 1e9, "got 1000000000.0"),
        ("layer_overhead_s", "fast", 'got "fast"'),
        ("token_pair_s", -1e-9, "got -1e-09"),
        ("memory_bytes", -1, "got -1"),
        # 80 (GB) ran every model tensor-parallel on 64 GPUs that it still did not fit, bench silent
        ("memory_bytes", 80, "must be a number from 1e+08 to 1e+15 (bytes), or null, got 80"),
        ("kind_scale", [], "must be a JSON object of cost terms to numbers, got []"),
        ("kind_scale", {"tensor_cores": 1.0}, "unknown term 'tensor_cores'"),
        ("kind_scale", {"gdn": -1.0}, "entry gdn: must be a number from 0"),
        (
            "kind_scale",
            {"gdn": "2"},
            'entry gdn: must be a number from 0 to 1e+06 (times the flops rate\'s cost), got "2"',
        ),
        ("kind_scale", {"gdn": math.nan}, "entry gdn:"),
        ("sources", "abc", 'must be a JSON object of figures to strings, got "abc"'),
        ("sources", {"flops": 3}, "entry 'flops' must be a string, got 3"),
        ("weight_bytes", 2.0, "must be an integer from 1 to 8, got 2.0"),
        ("weight_bytes", 0, "got 0"),
        ("weight_bytes", True, "got true"),
        ("name", 5, "must be a non-empty string, got 5"),
        ("calibration", "yes", 'must be a JSON object or null, got "yes"'),
        ("speed", 1, "is not a profile key"),
        (
            "kernels",
            "measured-b200",
            'must be one of measured-h100, measured-h200, roofline, or null, got "measured-b200"',
        ),
        ("kernels", 1, "got 1"),
        ("scheduler_overlap", "yes", 'must be true or false, got "yes"'),
        ("scheduler_overlap", 1, "got 1"),
        ("decode_overhead_s", -1, "got -1"),
        ("request_overhead_s", math.inf, "got Infinity"),
        ("scheduler_chunk_s", "50us", 'got "50us"'),
    ],
)
def test_a_bad_profile_value_is_one_line_naming_key_and_value(
    tmp_path: Path, key: str, value, says: str
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**GOOD, key: value}))  # NaN and Infinity as JSON's extensions
    with pytest.raises(ProfileError) as info:
        resolve_hardware(str(path))
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{path}: profile key '{key}' ") and says in text, text
    assert info.value.problem.param == key


@pytest.mark.parametrize(("key", "value"), [("bandwidth", 2e12), ("memory_bytes", 94e9), ("flops", 756e12)])
def test_a_file_of_measured_kernels_with_other_datasheet_figures_is_refused(
    tmp_path: Path, key: str, value: float
) -> None:
    """An H100 PCIe written as the h100 profile with its own 2 TB/s: the measured kernels timed
    the SXM part at 3.35 TB/s all the same, and the file's figure changed nothing."""
    path = tmp_path / "h100-pcie.json"
    path.write_text(json.dumps({**HARDWARE["h100"].to_dict(), key: value}))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    text = str(info.value)
    assert text.startswith(f"{path}: profile key '{key}' is {value:g} "), text
    assert "but kernels 'measured-h100' time" in text and "'roofline'" in text and "\n" not in text
    assert load_profile(_saved(tmp_path, HARDWARE["h100"])) == HARDWARE["h100"]
    roofline = {**HARDWARE["h100"].to_dict(), key: value, "kernels": "roofline"}
    assert getattr(profile_from_dict(roofline), key) == value


def _saved(tmp_path: Path, profile) -> Path:
    path = tmp_path / "saved.json"
    save_profile(profile, path)
    return path


def test_a_stored_round_profile_given_as_hardware_says_what_it_is(tmp_path: Path) -> None:
    """calibrate prints where it stored each model's round profile; given to --hardware, that
    file was refused with "profile key 'model' is not a profile key"."""
    path = tmp_path / "qwen3_5-small-abc-float32.json"
    stored = {"model": "qwen3_5-small-abc-float32", "machine": {"cpu": "x"}, "profile": GOOD}
    path.write_text(json.dumps(stored))
    with pytest.raises(ProfileError) as info:
        resolve_hardware(str(path))
    text = str(info.value)
    assert text.startswith(f"{path}: a round profile of the torch runner's store") and "'profile'" in text
    assert "--out" in text and "\n" not in text


def test_an_integer_too_long_to_read_is_one_line(tmp_path: Path) -> None:
    """Python refuses to read an integer of more than 4300 digits with a ValueError that is no
    JSONDecodeError: it escaped as a traceback."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(GOOD).replace('"weight_bytes": 2', '"weight_bytes": 1' + "0" * 5000))
    with pytest.raises(ProfileError) as info:
        resolve_hardware(str(path))
    assert str(info.value).startswith(f"hardware profile {path} is not valid JSON: ")
    assert "\n" not in str(info.value)


def test_a_file_nested_too_deeply_is_one_line(tmp_path: Path) -> None:
    """json.loads raises RecursionError for it: `bench --runner sim --hardware deep.json` ended in
    a traceback."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ProfileError) as info:
        resolve_hardware(str(path))
    assert str(info.value) == f"hardware profile {path} is not valid JSON: nested too deeply"


def test_a_profile_saved_with_a_byte_order_mark_reads_as_without_one(tmp_path: Path) -> None:
    """An editor that saves UTF-8 with a byte order mark (Windows Notepad) made a good profile
    "not valid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig)", advice for Python code; every
    other JSON file a user gives drops it."""
    path = tmp_path / "p.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode())
    assert resolve_hardware(str(path)) == profile_from_dict(GOOD, str(path))


def test_a_profile_that_is_not_utf8_names_its_line_and_byte(tmp_path: Path) -> None:
    """It was "not valid JSON: 'utf-8' codec can't decode byte 0xe9 in position 14"."""
    path = tmp_path / "p.json"
    path.write_bytes(b'{\n"name": "caf\xe9"}')
    with pytest.raises(ProfileError) as info:
        resolve_hardware(str(path))
    said = f"hardware profile {path}: line 2: not UTF-8 text (byte 0xe9 at column 13)"
    assert str(info.value) == said


@pytest.mark.parametrize("key", ["flops", "round_overhead_s", "per_request_s"])
def test_required_keys(key: str) -> None:
    data = {k: v for k, v in GOOD.items() if k not in (key, "kernels")}  # fitted per-term rates
    with pytest.raises(ProfileError, match=rf"profile key '{key}' missing"):
        profile_from_dict(data, "p.json")


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_a_file_of_measured_kernels_may_leave_out_the_figures_its_gpu_fixes(tmp_path: Path, gpu: str) -> None:
    """A file naming measured kernels was told 'flops' missing without it, and with any other
    figure than the datasheet's, to leave the key out: it takes the GPU's own figures."""
    path = tmp_path / "slow-call.json"
    path.write_text(json.dumps({"kernels": f"measured-{gpu}", "round_overhead_s": 0.005, "per_request_s": 0}))
    profile = load_profile(path)
    own = HARDWARE[gpu]
    assert (profile.flops, profile.bandwidth, profile.memory_bytes) == (
        own.flops,
        own.bandwidth,
        own.memory_bytes,
    )
    assert profile.round_overhead_s == 0.005 and profile.kernels == f"measured-{gpu}"


@pytest.mark.parametrize("kernels", ["measured-H100", "measured-h300", ["measured-h100"]])
def test_a_file_naming_no_known_kernels_is_told_so_before_any_figure_they_would_fix(kernels: object) -> None:
    """A typo in ``kernels`` was told "profile key 'flops' missing": the figures a measured GPU
    fixes were not filled in, and the kernels' own refusal came last of the keys."""
    data = {"kernels": kernels, "round_overhead_s": 0.005, "per_request_s": 0}
    with pytest.raises(ProfileError) as info:
        profile_from_dict(data, "p.json")
    assert str(info.value).startswith("p.json: profile key 'kernels' must be one of "), str(info.value)


def test_optional_keys_may_be_null_or_absent_and_a_file_round_trips(tmp_path: Path) -> None:
    minimal = profile_from_dict({"flops": 1e12, "round_overhead_s": 0, "per_request_s": 0}, "dir/mine.json")
    assert minimal.name == "mine" and minimal.bandwidth is None and minimal.weight_bytes == 2
    assert isinstance(minimal.round_overhead_s, float)
    nulls = {**GOOD, "bandwidth": None, "memory_bytes": None, "calibration": None, "layer_overhead_s": None}
    assert profile_from_dict(nulls).layer_overhead_s == 0.0
    save_profile(HARDWARE["cpu"], tmp_path / "cpu.json")
    assert load_profile(tmp_path / "cpu.json") == HARDWARE["cpu"]


@pytest.mark.parametrize("key", ["kind_scale", "weight_bytes", "sources", "scheduler_overlap", "name"])
def test_null_for_a_key_with_a_default_value_is_refused(tmp_path: Path, capsys, key: str) -> None:
    """A null ``kind_scale`` once became {} (every term's scale 1.0) without a word."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**GOOD, key: None}))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    says = "must not be null (leave the key out for its default)"
    assert str(info.value) == f"{path}: profile key {key!r} {says}"
    assert main(["bench", "--hardware", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("radixflow: error: ") and f"{key!r} must not be null" in err and "\n" not in err


def test_a_profile_made_in_code_is_checked_too() -> None:
    with pytest.raises(ProfileError, match=r"hardware profile 'h200': profile key 'flops' .* got NaN"):
        replace(HARDWARE["h200"], flops=math.nan)
    with pytest.raises(ProfileError, match="'round_overhead_s'"):
        HARDWARE["h200"].with_fixed_round_cost(-1.0)
    assert HARDWARE["h200"].with_fixed_round_cost(MAX_OVERHEAD_S).round_overhead_s == MAX_OVERHEAD_S


def test_a_broken_profile_is_a_one_line_bench_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**GOOD, "sources": "abc"}))
    assert main(["bench", "--hardware", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("radixflow: error: ") and "'sources'" in err and "\n" not in err


def _no_constant(name: str) -> float:
    raise AssertionError(f"bench --json wrote {name}")


def _all_finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_all_finite(v) for v in value)
    return True


SLOWEST = {
    "name": "slowest",
    "flops": MIN_RATE,
    "bandwidth": MIN_RATE,
    "round_overhead_s": MAX_OVERHEAD_S,
    "per_request_s": MAX_OVERHEAD_S,
    "layer_overhead_s": MAX_OVERHEAD_S,
    "token_pair_s": MAX_OVERHEAD_S,
    "kind_scale": dict.fromkeys(COMPUTE_TERMS, MAX_KIND_SCALE),
    "weight_bytes": MAX_WEIGHT_BYTES,
}
FASTEST = {
    "name": "fastest",
    "flops": MAX_FLOPS,
    "bandwidth": MAX_BANDWIDTH,
    "round_overhead_s": 0.0,
    "per_request_s": 0.0,
    "kind_scale": dict.fromkeys(COMPUTE_TERMS, 0.0),  # every round free
    "weight_bytes": 1,
}


@pytest.mark.parametrize("profile", [SLOWEST, FASTEST], ids=["slowest", "fastest"])
@pytest.mark.parametrize("model", ["qwen3_5-2b", "qwen3_next-80b-a3b"])
def test_a_profile_at_its_bounds_gives_finite_json(tmp_path: Path, profile: dict, model: str) -> None:
    path, out = tmp_path / "p.json", tmp_path / "r.json"
    path.write_text(json.dumps(profile))
    argv = ["bench", "--model", model, "--hardware", str(path), "--groups", "2", "--context-len", "2048"]
    assert main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text(), parse_constant=_no_constant)
    assert _all_finite(report)
    assert report["config"]["hardware"]["name"] == profile["name"]


@pytest.mark.parametrize("kernels", ["measured-h200", "roofline"])
@pytest.mark.parametrize(("key", "value"), [("kind_scale", {"attention": 3.0}), ("prefix_kv_s", 1e-9)])
def test_a_file_naming_kernels_with_a_fitted_rate_is_refused(
    tmp_path: Path, kernels: str, key: str, value: object
) -> None:
    """A profile that names a kernel source times every kernel by it: a per-term scale or a cached-KV
    rate in it changed no round (the sim priced attention the same at a scale of 3 as at 1)."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**HARDWARE["h200"].to_dict(), "kernels": kernels, key: value}))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    text = str(info.value)
    assert text.startswith(f"{path}: profile key '{key}' ") and f"kernels '{kernels}'" in text, text
    assert "\n" not in text and info.value.problem.param == key
    # at its default (no scale, no rate) the key is no figure: the built-in profiles write it so
    assert load_profile(_saved(tmp_path, replace(HARDWARE["h200"], kernels=kernels))).kernels == kernels


def test_a_key_given_twice_is_refused_not_read_as_its_last_value(tmp_path: Path) -> None:
    """JSON keeps an object's last value for a key given twice: a profile edited by adding a
    second "flops" line ran on one of the two unsaid (a JSONL trace line refuses it)."""
    path = tmp_path / "p.json"
    text = json.dumps(GOOD)
    path.write_text(text.replace('{"', '{"flops": 1e12, "', 1))
    with pytest.raises(ProfileError) as info:
        resolve_hardware(str(path))
    assert str(info.value) == f"hardware profile {path}: key 'flops' given twice"
    nested = {**GOOD, "kind_scale": {"attention": 1.0}}
    path.write_text(json.dumps(nested).replace('{"attention"', '{"attention": 2.0, "attention"'))
    with pytest.raises(ProfileError, match="key 'attention' given twice"):
        resolve_hardware(str(path))


@pytest.mark.parametrize("typed", ["1e400", "-1E+999"])
def test_a_number_past_a_float_is_quoted_as_written(tmp_path: Path, typed: str) -> None:
    """``1e400`` in a file was said as "got Infinity", a word the file never held."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**GOOD, "flops": 1.0}).replace('"flops": 1.0', f'"flops": {typed}'))
    with pytest.raises(ProfileError) as info:
        resolve_hardware(str(path))
    assert str(info.value).startswith(f"{path}: profile key 'flops' "), info.value
    assert str(info.value).endswith(f"got {typed}"), info.value


def test_a_profile_built_in_code_reads_numpys_numbers_and_bools_as_pythons():
    # "weight_bytes must be an integer from 1 to 8, got np.int64(2)" said 2 is none, where
    # `EngineOptions` and `SamplingParams` read numpy's values (a fit's, an array's) as Python's
    import numpy as np

    made = replace(
        HARDWARE["cpu"],
        scheduler_overlap=np.False_,
        weight_bytes=np.int64(2),
        round_overhead_s=np.float32(0.5),
        kind_scale={"matmul": np.float32(2.0)},
    )
    assert made.scheduler_overlap is False and made.weight_bytes == 2 and type(made.weight_bytes) is int
    assert type(made.round_overhead_s) is float and made.kind_scale == {"matmul": 2.0}
    assert json.loads(json.dumps(made.to_dict()))["kind_scale"] == {"matmul": 2.0}
