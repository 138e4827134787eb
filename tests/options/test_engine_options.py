"""EngineOptions: one declaration, strict types, every range and this machine's limits checked."""

from __future__ import annotations

import dataclasses
import errno
import math
import os

import pytest

from radixflow.options import EngineOptions, option_fields
from radixflow.options import machine as machine_module
from radixflow.options.engine_options import spec_of
from radixflow.options.scheduler_options import MAX_KV_BLOCKS, MAX_STATE_SLOTS
from radixflow.options.sizes import Bytes
from radixflow.problems import Problem, ProblemError


def test_defaults_are_valid_and_every_field_is_declared_with_help():
    assert EngineOptions().validate() is None
    for f in option_fields():
        spec = spec_of(f)
        assert spec.help and spec.kind in (int, float, str, Bytes), f.name
        if spec.choices is not None and f.default is not None:  # a registry's names, default among them
            assert f.default in spec.choices(), f.name


@pytest.mark.parametrize(
    ("changes", "param", "words"),
    [
        ({"kv_blocks": 0}, "kv_blocks", "must be at least 1, got 0"),
        ({"kv_blocks": MAX_KV_BLOCKS + 1}, "kv_blocks", f"must be at most {MAX_KV_BLOCKS}"),
        ({"state_slots": -1}, "state_slots", "must be at least 0, got -1"),
        ({"state_slots": MAX_STATE_SLOTS + 1}, "state_slots", f"must be at most {MAX_STATE_SLOTS}"),
        ({"token_budget": 8}, "token_budget", "8 is smaller than one block (block_size 16 tokens)"),
        ({"token_budget": 16, "block_size": 16}, None, None),  # exactly one block is enough
        ({"max_requests": 0}, "max_requests", "must be at least 1"),
        ({"block_size": 0}, "block_size", "must be at least 1"),
        ({"policy": "fastest"}, "policy", "unknown policy 'fastest' (known: adaptive, native, radixflow)"),
        ({"placement": "everywhere"}, "placement", "unknown placement"),
        ({"eviction": "random"}, "eviction", "unknown eviction 'random' (known: cost-per-byte, lru)"),
        ({"runner": "gpu"}, "runner", "unknown runner 'gpu' (known: sim, torch)"),
        ({"clock": "gpu"}, "clock", "unknown clock 'gpu' (known: wall, cpu)"),
        ({"kernels": "fast"}, "kernels", "unknown kernels 'fast' (known: auto, native, torch)"),
        ({"tflops": 1e-300}, "tflops", "must be at least 0.001"),
        ({"fixed_cost_ms": math.nan}, "fixed_cost_ms", "must be a finite number, got nan"),
        ({"fixed_cost_ms": math.inf}, "fixed_cost_ms", "must be a finite number, got inf"),
        ({"per_request_ms": -1.0}, "per_request_ms", "must be at least 0"),
        # a seed is read mod 2^64, signed or unsigned, as a request's own seed is (sampling's words):
        # -1 was refused here while LLM's and the server's request seeds took it
        ({"seed": -1}, None, None),
        ({"seed": -(2**63)}, None, None),
        # an integer limit is shown as it is: 2**64 - 1 was "1.84467e+19", which is not the limit
        (
            {"seed": 2**64},
            "seed",
            "must fit in 64 bits (-9223372036854775808 to 18446744073709551615), got 18446744073709551616",
        ),
        (
            {"seed": -(2**63) - 1},
            "seed",
            "must fit in 64 bits (-9223372036854775808 to 18446744073709551615)",
        ),
        ({"model": ""}, "model", "must not be empty"),
        ({"torch_threads": 0}, "torch_threads", "must be at least 1"),
    ],
)
def test_validate_names_the_option_and_the_value(changes, param, words):
    problem = EngineOptions(**changes).validate()
    if param is None:
        assert problem is None
        return
    assert isinstance(problem, Problem) and problem.param == param and words in problem.message, problem


def test_threads_beyond_this_machines_cpus_are_refused(monkeypatch):
    monkeypatch.setattr(machine_module, "cpu_count", lambda: 2)
    assert EngineOptions(torch_threads=2).validate() is None
    problem = EngineOptions(torch_threads=1000).validate()
    assert problem == Problem("torch_threads", "must be at most 2 (this machine's CPUs), got 1000")


def test_thread_counts_and_the_queue_past_any_machine_are_refused_at_every_door():
    # an engine built elsewhere (serve --ray-address) was not held to any count (10**12 torch
    # threads went to each replica), nor were the server's pools and queue (--max-pending 10**12)
    from radixflow.options.spec import checked
    from radixflow.server.config import ServerConfig

    said = "must be at most 8192, got 1000000000000"
    for local in (True, False):
        with pytest.raises(ProblemError, match=f"^torch_threads: {said}$"):
            EngineOptions.from_mapping({"torch_threads": 10**12}, local=local)
    for name in ("tokenizer_threads", "long_text_threads"):
        with pytest.raises(ProblemError, match=f"^{name}: {said}$"):
            checked(ServerConfig, {name: 10**12})  # the flags' door (serve, run-batch)
        with pytest.raises(ProblemError, match=f"^{name}: {said}$"):
            ServerConfig(**{name: 10**12})  # the fleet's and the tests' door
    with pytest.raises(ProblemError, match=r"^max_pending: must be at most 1000000, got 1000000000000$"):
        checked(ServerConfig, {"max_pending": 10**12})
    assert ServerConfig(max_pending=1_000_000, tokenizer_threads=8192).max_pending == 1_000_000


def test_cache_bookkeeping_beyond_available_memory_is_refused(monkeypatch):
    # 4M blocks are within the static limit; on a machine with 100 MB free they are not
    monkeypatch.setattr(machine_module, "available_memory", lambda: 100_000_000)
    problem = EngineOptions(kv_blocks=MAX_KV_BLOCKS).validate()
    assert problem is not None and problem.param == "kv_blocks" and "GB of bookkeeping" in problem.message
    assert EngineOptions(kv_blocks=1024).validate() is None


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("kv_blocks", 4.5, "must be an integer, got 4.5"),
        ("kv_blocks", 32.0, "must be an integer, got 32.0"),  # no silent cast of a float
        ("kv_blocks", "32", "must be an integer, got '32'"),
        ("kv_blocks", True, "must be an integer, got True"),  # a bool is not a count
        # None reads as any other value of the wrong kind does (the sampling door's "must be an
        # integer, got None"): "must be given, got nothing" denied what the user passed
        ("token_budget", None, "must be an integer, got None"),
        ("dtype", None, "must be a string, got None"),
        ("fixed_cost_ms", "3", "must be a number, got '3'"),
        ("policy", 1, "must be a string, got 1"),  # it said "must be a str", Python's name
        ("cache_memory", True, "must be a size like 2GiB, 512MB, 300M or 1073741824 (bytes), got True"),
        ("colour", "blue", "unknown option"),
    ],
)
def test_from_mapping_refuses_wrong_types_instead_of_casting(key, value, words):
    with pytest.raises(ProblemError) as info:
        EngineOptions.from_mapping({key: value})
    assert info.value.problem.param == key and words in info.value.problem.message


def test_from_mapping_accepts_an_int_for_a_float_and_validates_ranges():
    options = EngineOptions.from_mapping({"fixed_cost_ms": 3, "kv_blocks": 64}, model="qwen3_5-2b")
    assert options.fixed_cost_ms == 3 and options.kv_blocks == 64 and options.model == "qwen3_5-2b"
    with pytest.raises(ProblemError, match="kv_blocks: must be at least 1, got 0"):
        EngineOptions.from_mapping({"kv_blocks": 0})  # never silently replaced by a default


def test_options_are_frozen_and_replace_keeps_the_rest():
    options = EngineOptions(kv_blocks=64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.kv_blocks = 1  # type: ignore[misc]
    assert options.replace(policy="native") == EngineOptions(kv_blocks=64, policy="native")


def test_an_unknown_hardware_profile_is_refused_whatever_the_runner():
    # the sim refused it, a TOML cell refused it on either runner, but on the torch runner the
    # command line only warned that it had no effect and LLM(model, hardware=...) took it silently
    for model in ("qwen3_5-2b", "qwen3_5-small"):
        problem = EngineOptions(model=model, hardware="tpu-v9").validate()
        assert problem is not None and problem.param == "hardware", model
        assert problem.message.startswith("unknown hardware 'tpu-v9': not one of h100, h200, cpu")
    assert EngineOptions(model="qwen3_5-small", hardware="h200").validate() is None


@pytest.mark.parametrize("model", ["qwen3_5-2b", "qwen3_5-tiny"])  # the sim runner and the torch runner
def test_a_matmul_plan_that_does_not_parse_is_refused_at_every_door(model):
    problem = EngineOptions(model=model, matmul="decode=gpu").validate()
    assert problem is not None and problem.param == "matmul" and "'decode=gpu'" in problem.message
    assert EngineOptions(model=model, matmul="single=native,prefill=onednn").validate() is None


@pytest.mark.parametrize("tail", ["/", "/.", "/./"], ids=["slash", "slash-dot", "slash-dot-slash"])
def test_a_trace_out_that_ends_in_a_slash_is_refused_at_every_door(tmp_path, tail):
    # `--trace-out traces/`, `LLM(trace_out="traces/")` or a TOML `trace_out = "traces/"` (traces/
    # not made yet) passed, and the run wrote the trace to a file named `traces` (`traces/.` too,
    # which `Path` reads as `traces`)
    given = f"{tmp_path}/traces{tail}"
    problem = EngineOptions(trace_out=given).validate()
    assert problem is not None and problem.param == "trace_out", problem
    assert problem.message == f"must be a file path, got {given!r} (a directory: name a file in it)"
    assert EngineOptions(trace_out=f"{tmp_path}/traces").validate() is None


def test_a_profile_file_and_a_trace_out_under_home_are_read_with_the_tilde_expanded(tmp_path, monkeypatch):
    # LLM(hardware="~/p.json") was "unknown hardware ...: not one of h100, h200, cpu", and
    # trace_out="~/t.json" "directory ~ does not exist", where a model path's ~ is the home directory
    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)  # it would move the cache past HOME

    monkeypatch.setenv("HOME", str(tmp_path))
    save_profile(HARDWARE["h200"], tmp_path / "p.json")
    options = EngineOptions(hardware="~/p.json", trace_out="~/t.json")
    assert options.validate() is None
    assert (options.hardware, options.trace_out) == (str(tmp_path / "p.json"), str(tmp_path / "t.json"))


def test_a_profile_that_is_a_pipe_or_a_device_is_refused_not_read_twice(tmp_path):
    # `--hardware <(jq . p.json)`: the options' check read the pipe, the sim read it again and got
    # nothing, "hardware profile /dev/fd/63 is not valid JSON: Expecting value" of a valid profile;
    # a named pipe no one writes hung the command for good; /dev/null was "not valid JSON" too
    import contextlib
    import threading

    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    save_profile(HARDWARE["h200"], tmp_path / "p.json")
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)

    def write() -> None:  # as a shell's process substitution: the profile, once
        with contextlib.suppress(OSError):
            fifo.write_text((tmp_path / "p.json").read_text())

    writer = threading.Thread(target=write)
    writer.start()
    try:
        problems = [EngineOptions(hardware=h).validate() for h in (str(fifo), "/dev/null")]
    finally:  # a reader, for a writer still waiting for one; again until it is done, since on a
        # loaded machine the writer may reach its open only after a reader came and went (it then
        # waited for good: the suite hung under .ci/busy)
        while writer.is_alive():
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
            writer.join(0.05)
    for problem, path in zip(problems, (fifo, "/dev/null"), strict=True):
        assert problem is not None and problem.param == "hardware", problem
        assert problem.message.startswith(f"hardware profile {path} is not a regular file"), problem
    assert EngineOptions(hardware=str(tmp_path / "p.json")).validate() is None


def test_a_trace_out_under_a_file_says_that_file_is_not_a_directory(tmp_path):
    # "directory .../notes.txt does not exist", where notes.txt exists: it is a file
    (tmp_path / "notes.txt").write_text("")
    problem = EngineOptions(trace_out=str(tmp_path / "notes.txt" / "t.json")).validate()
    assert problem is not None and problem.param == "trace_out", problem
    assert problem.message.endswith(f"{tmp_path / 'notes.txt'} is a file, not a directory"), problem


def test_a_trace_out_that_is_a_symlink_loop_is_a_problem_not_a_traceback(tmp_path):
    # `--trace-out loop` (LLM(trace_out=...), a TOML cell) raised RuntimeError("Symlink loop")
    # out of the options' check, where `--json loop` is one line
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    problem = EngineOptions(trace_out=str(tmp_path / "a")).validate()
    assert problem is not None and problem.param == "trace_out", problem
    assert problem.message == f"cannot write {tmp_path / 'a'}: {os.strerror(errno.ELOOP)}"


def _three_doors(name: str, value: int, capsys: pytest.CaptureFixture[str], tmp_path) -> dict[str, str]:
    """What `LLM(...)`'s mapping, `radixflow bench`'s flag and an experiment cell's key say of one
    bad value of option ``name``, each without its own spelling of the option."""
    from radixflow.cli import main
    from radixflow.experiments.config_parse import parse_config
    from radixflow.problems import flag

    with pytest.raises(ProblemError) as info:
        EngineOptions.from_mapping({name: value})
    said = {"LLM": str(info.value).removeprefix(f"{name}: ")}
    assert main(["bench", f"{flag(name)}={value}"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    said["cli"] = line.removeprefix(f"radixflow: error: {flag(name)}: ")
    cell = {"runner": "sim", "model": "qwen3_5-2b"}
    # a cell's seed is one of the experiment's `seeds`; every other option is a cell's key
    key, config = (f"defaults.{name}", {"defaults": {**cell, name: value}})
    if name == "seed":
        key, config = ("seeds", {"seeds": [value], "defaults": cell})
    with pytest.raises(ValueError) as toml:
        parse_config({"name": "t", **config}, "t.toml", tmp_path)
    said["toml"] = str(toml.value).removeprefix(f"t.toml: {key}: ")
    return said


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("kv_blocks", f"must be at most {MAX_KV_BLOCKS}"),
        ("seed", "must fit in 64 bits (-9223372036854775808 to 18446744073709551615)"),
        ("tflops", "must be a finite number"),  # the command line's float("9" * 400) is inf
    ],
)
def test_a_value_too_large_for_a_float_is_one_line_at_every_door(name, words, capsys, tmp_path):
    # math.isfinite overflowed on an int of 400 digits: a traceback at all three doors
    said = _three_doors(name, int("9" * 400), capsys, tmp_path)
    assert {text.rpartition(", got ")[0] for text in said.values()} == {words}, said


def test_this_machines_limits_are_not_checked_for_an_engine_built_elsewhere(monkeypatch):
    # a Ray cluster's replica builds its engine on its own node, which checks its own CPUs and memory
    monkeypatch.setattr(machine_module, "cpu_count", lambda: 2)
    monkeypatch.setattr(machine_module, "available_memory", lambda: 100_000_000)
    for options in (EngineOptions(torch_threads=8), EngineOptions(kv_blocks=MAX_KV_BLOCKS)):
        assert options.validate() is not None
        assert options.validate(local=False) is None
    problem = EngineOptions(torch_threads=0).validate(local=False)  # its declaration holds anywhere
    assert problem is not None and problem.param == "torch_threads"


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("model", 7, 'must be a string, got 7 (quote it: "7")'),  # a directory may be named 7
        # quoted, each is still refused ("unknown dtype '16'"): the hint led nowhere
        ("dtype", 16, "must be a string, got 16"),
        ("runner", 0, "must be a string, got 0"),
        ("policy", 1, "must be a string, got 1"),
    ],
)
def test_a_number_for_a_string_option_is_told_to_quote_it_only_where_quoted_it_could_do(key, value, words):
    with pytest.raises(ProblemError) as info:
        EngineOptions.from_mapping({key: value})
    assert info.value.problem.message == words, info.value


@pytest.mark.parametrize("name", ["model", "hardware", "trace_out"])
def test_a_name_too_long_for_a_file_system_is_one_line_at_every_door(name, capsys, tmp_path):
    # `bench --model <300 characters>` (or --hardware, --trace-out; a TOML cell's, LLM's) was
    # "OSError: [Errno 36] File name too long" and a traceback, from the first look at the path
    said = _three_doors(name, "a" * 300, capsys, tmp_path)
    words = "must be a path of parts up to 255 bytes, 4095 in all (a file system's limits)"
    assert {text.rpartition(", got ")[0] for text in said.values()} == {words}, said


def test_numbers_of_numpy_are_the_numbers_they_are_at_the_mapping_door():
    # LLM(kv_blocks=np.int64(64)) (a value from a sweep's np.arange) was refused as
    # "kv_blocks: must be an integer, got np.int64(64)", as SamplingParams takes them
    np = pytest.importorskip("numpy")
    given = {"kv_blocks": np.int64(64), "seed": np.uint64(2**63), "fixed_cost_ms": np.float32(1.5)}
    options = EngineOptions.from_mapping(given, runner="sim")
    assert (options.kv_blocks, options.seed, options.fixed_cost_ms) == (64, 2**63, 1.5)
    assert type(options.kv_blocks) is int and type(options.fixed_cost_ms) is float
    with pytest.raises(ProblemError, match=r"^kv_blocks: must be an integer, got 4\.5$"):
        EngineOptions.from_mapping({"kv_blocks": np.float64(4.5)})
    with pytest.raises(ProblemError, match=r"^kv_blocks: must be an integer"):
        EngineOptions.from_mapping({"kv_blocks": np.bool_(True)})  # a bool is no count, numpy's neither


def test_a_float_option_given_an_integer_holds_a_float_at_every_door():
    # LLM(tflops=100), a TOML cell's tflops = 100 and ServerConfig(drain_s=30) held the int, where
    # --tflops 100 holds 100.0: a record or JSON said 100 at one door and 100.0 at another
    from radixflow.server.config import ServerConfig

    for made in (EngineOptions.from_mapping({"tflops": 100}), EngineOptions(tflops=100)):
        assert type(made.tflops) is float and made.tflops == 100.0
        assert made.validate() is None
    drain = ServerConfig(drain_s=30).drain_s
    assert type(drain) is float and drain == 30.0
    huge = EngineOptions(tflops=10**400)  # no float holds it: kept, for the check to refuse as typed
    assert huge.tflops == 10**400 and "must be a finite number" in str(huge.validate())
    assert EngineOptions(tflops=True).validate() is not None  # a bool is still no number


def test_numpy_numbers_are_taken_where_the_dataclass_is_made_directly():
    # LLM(kv_blocks=np.int64(64)) and a TOML sweep took them (the mapping door reads them as
    # Python's); ServerConfig(max_pending=np.int64(5)) and EngineOptions(...) refused them
    import numpy as np

    from radixflow.server.config import ServerConfig

    config = ServerConfig(max_pending=np.int64(5), drain_s=np.float32(1.5), max_body_bytes=np.int64(4096))
    assert (config.max_pending, config.drain_s, config.max_body_bytes) == (5, 1.5, 4096)
    assert [type(v) for v in (config.max_pending, config.drain_s, config.max_body_bytes)] == [int, float, int]
    options = EngineOptions(kv_blocks=np.int64(64), tflops=np.float64(100))
    assert options.validate() is None and type(options.kv_blocks) is int and type(options.tflops) is float
    with pytest.raises(ProblemError, match=r"^max_pending: must be an integer, got 5.0$"):
        ServerConfig(max_pending=np.float64(5))  # a float for a count, refused as every door does
