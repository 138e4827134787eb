"""Bad input to `radixflow bench`: one line `radixflow: error: ...`, exit 2, before any work."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_utils import checkout_env, run_cli, run_reader_gone

from radixflow.cli import main
from radixflow.cli.app import COMMANDS, build_parser
from radixflow.cli.command import UsageError
from radixflow.workloads.candidates import WorkloadSpec


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``argv``; assert exit 2, nothing on stdout (no work was done), one stderr line."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "", "the run started before the error"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("radixflow: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--rate", "nan"),
        ("--rate", "inf"),
        ("--tflops", "nan"),
        ("--tflops", "inf"),
        ("--per-request-ms", "nan"),
        ("--fixed-cost-ms", "inf"),
        ("--fixed-cost-ms", "-inf"),
        ("--round-overhead-ms", "inf"),  # its older name, kept
    ],
)
def test_non_finite_numbers_are_refused(capsys, flag, value):
    err = one_line_error(capsys, ["bench", f"{flag}={value}"])
    assert flag in err and f"must be a finite number, got {value}" in err


@pytest.mark.parametrize(
    "argv, limit",
    [
        (["--groups", "100000000"], "the limit is 33554432"),
        (["--context-len", "1000000000"], "the limit is 33554432"),
        (["--independent", "100000000"], "the limit is 33554432"),
        (["--kv-blocks", "10000000000"], "must be at most 4194304"),
        (["--state-slots", "10000000000"], "must be at most 1048576"),
        (["--repeat", "1000000"], "must be at most 1000"),
        (["--rate", "1e-300", "--arrival", "poisson"], "must be at least 1e-06"),
        # a rate of 0 was "must be positive": 1e-07, positive, was then refused again
        (["--rate", "0", "--arrival", "poisson"], "--rate: must be at least 1e-06 requests/s, got 0"),
        (["--tflops", "1e-300"], "must be at least 0.001"),
        (["--per-request-ms", "1e300"], "must be at most 3600000"),
    ],
)
def test_absurd_sizes_are_refused_with_the_limit_named(capsys, argv, limit):
    assert limit in one_line_error(capsys, ["bench", *argv])


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--context-len", "30000000"], "(--context-len + --candidate-len)"),
        (
            ["--groups", "2000000", "--context-len", "0", "--candidate-len", "1"],
            "(--groups × --candidates + --independent)",
        ),
    ],
)
def test_a_workload_too_large_is_told_in_the_flags_typed_not_the_toml_keys(capsys, argv, says):
    # it said "(shared_prefix_len + context_len + candidate_len)": keys of an experiment TOML, one
    # of them no flag of bench's
    err = one_line_error(capsys, ["bench", *argv])
    assert "workload too large" in err and says in err and "_len" not in err


def test_a_negative_seed_is_refused_by_bench_naming_the_flag_and_why(capsys):
    # the engine takes any 64-bit seed, signed or not, as a request's own seed; a generated
    # workload cannot (random.Random(-s) draws what random.Random(s) draws): bench refused it as
    # "seed: must be at least 0", naming no flag and no reason
    err = one_line_error(capsys, ["bench", "--seed", "-1"])
    assert err.startswith("radixflow: error: --seed: ") and "workload" in err and "got -1" in err


def test_generated_prompt_longer_than_the_model_context_is_refused(capsys):
    err = one_line_error(capsys, ["bench", "--groups", "1", "--candidates", "1", "--context-len", "300000"])
    assert "300064 tokens" in err and "context of 262144 tokens" in err


def test_generated_prompt_larger_than_the_kv_cache_is_refused(capsys):
    err = one_line_error(capsys, ["bench", "--kv-blocks", "10"])
    assert "needs 68 KV blocks of 16 tokens; the cache has 10 (--kv-blocks)" in err


def test_generated_prompt_a_hybrid_model_cannot_run_without_state_slots_is_refused(capsys):
    # every prompt spans several rounds and no slot carries its state between them: each request
    # failed after the runner was built, and the tables showed 0 completed for every policy
    err = one_line_error(capsys, ["bench", "--state-slots", "0", "--token-budget", "256"])
    assert "a prompt of 1088 tokens" in err and "--token-budget 256" in err and "(--state-slots)" in err


def write_lines(path: Path, *rows: str) -> Path:
    path.write_text("".join(row + "\n" for row in rows))
    return path


@pytest.mark.parametrize(
    "fields, needle",
    [
        ('"arrival_s": NaN', "'arrival_s' must be a finite number >= 0, got NaN"),
        ('"arrival_s": Infinity', "'arrival_s' must be a finite number >= 0, got Infinity"),
        ('"arrival_s": 1e999', "'arrival_s' must be a finite number >= 0, got Infinity"),
        ('"arrival_s": true', "'arrival_s' must be a finite number >= 0, got true"),
        ('"namespace": null', "'namespace' must be a non-empty string, got null"),
        ('"namespace": 123', "'namespace' must be a non-empty string, got 123"),
        ('"namespace": ["x"]', "'namespace' must be a non-empty string, got [\"x\"]"),
        ('"kind": {"k": 1}', "'kind' must be a non-empty string, got {\"k\": 1}"),
        ('"arival_s": 3', "unknown field 'arival_s'"),
    ],
)
def test_trace_fields_of_the_wrong_type_are_refused_not_coerced(tmp_path, capsys, fields, needle):
    row = '{"id": "a", "prompt": [1, 2], ' + fields + "}"
    trace = write_lines(tmp_path / "t.jsonl", '{"id": "ok", "prompt": [1, 2]}', row)
    err = one_line_error(capsys, ["bench", "--trace", str(trace)])
    assert f"t.jsonl:2: {needle}" in err


def test_binary_trace_file_is_refused(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b'{"id": "a", "prompt": [1]}\n\x00\x9f\x92\x96 garbage\xff\n')
    assert "t.jsonl:2: not UTF-8 text" in one_line_error(capsys, ["bench", "--trace", str(trace)])


def test_utf16_trace_file_is_refused(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"id": "a", "prompt": [1, 2]}\n', encoding="utf-16")
    err = one_line_error(capsys, ["bench", "--trace", str(trace)])
    assert "t.jsonl:1: not UTF-8 text (UTF-16: save it as UTF-8)" in err


def _can_create_in(directory: Path) -> bool:
    probe = directory / "radixflow-probe"
    try:
        probe.touch()
    except OSError:
        return False
    probe.unlink()
    return True


@pytest.fixture
def unwritable_dir(tmp_path):
    """A directory this process cannot create files in (root ignores permission bits: /sys then)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    candidates = [ro, Path("/sys")]
    found = next((d for d in candidates if d.is_dir() and not _can_create_in(d)), None)
    yield found or pytest.skip("no directory here refuses new files")
    ro.chmod(0o700)


@pytest.mark.parametrize("flag", ["--json", "--write-trace", "--round-trace"])
def test_unwritable_output_is_refused_before_the_run(unwritable_dir, capsys, flag):
    err = one_line_error(capsys, ["bench", flag, str(unwritable_dir / "out")])
    assert f"cannot write {flag} {unwritable_dir / 'out'}" in err


def test_unwritable_existing_output_file_is_refused_and_kept(tmp_path, capsys):
    target = tmp_path / "out.json"
    target.write_text("keep me")
    target.chmod(0o400)
    try:
        if _writable(target):
            pytest.skip("running as root: permission bits do not stop writes")
        err = one_line_error(capsys, ["bench", "--json", str(target)])
        assert "cannot write --json" in err and "Permission denied" in err
        assert target.read_text() == "keep me"
    finally:
        target.chmod(0o600)


@pytest.fixture
def closed_folder(tmp_path: Path) -> Iterator[Path]:
    """A directory holding r.json, which may be written, where no file can be made (the temporary
    file a result is written into, beside it, then renamed over it): its permission bits, or for
    root, which they do not stop, its immutable flag."""
    folder = tmp_path / "closed"
    folder.mkdir()
    (folder / "r.json").write_text("old\n")
    folder.chmod(0o555)
    immutable = os.access(folder, os.W_OK)
    if immutable and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
        folder.chmod(0o755)
        pytest.skip("no way to close a directory to this user")
    try:
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def test_an_output_whose_directory_takes_no_new_file_is_refused_before_the_run(capsys, closed_folder):
    # the existing file could be opened, so the check passed; the run went through to its end, and
    # then writing the results whole (a file made beside it, renamed over it) failed, losing them
    out = closed_folder / "r.json"
    err = one_line_error(capsys, ["bench", "--groups", "1", "--candidates", "1", "--json", str(out)])
    assert err.startswith(f"radixflow: error: cannot write --json {out}: "), err
    assert out.read_text() == "old\n" and sorted(closed_folder.iterdir()) == [out]


def _writable(path: Path) -> bool:
    try:
        with open(path, "a"):
            return True
    except OSError:
        return False


def test_an_output_under_a_file_says_that_file_is_not_a_directory(tmp_path, capsys):
    # "directory .../notes.txt does not exist", where notes.txt exists: it is a file
    (tmp_path / "notes.txt").write_text("")
    out = tmp_path / "notes.txt" / "out.json"
    err = one_line_error(capsys, ["bench", "--json", str(out)])
    assert err.endswith(f"cannot write --json {out}: {tmp_path / 'notes.txt'} is a file, not a directory")


def test_output_checks_leave_no_file_behind(tmp_path, capsys):
    out = tmp_path / "out.json"
    one_line_error(capsys, ["bench", "--json", str(out), "--groups", "100000000"])
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--json", "x.json", "--round-trace", "x.json"], "--round-trace x.json: the same file as --json"),
        (["--json", "."], "--json: must be a file path, got '.' (a directory: name a file in it)"),
        (["--json", "d"], "cannot write --json d: it is a directory"),
    ],
)
def test_output_paths_that_collide_are_refused(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    assert needle in one_line_error(capsys, ["bench", *argv])


def test_output_path_equal_to_the_input_trace_is_refused(tmp_path, capsys):
    trace = write_lines(tmp_path / "t.jsonl", '{"id": "a", "prompt": [1, 2]}')
    err = one_line_error(capsys, ["bench", "--trace", str(trace), "--write-trace", str(trace)])
    assert "the same file as --trace" in err


def test_a_checkpoint_file_given_for_its_directory_is_one_line_naming_the_directory(tmp_path, capsys):
    # was "unknown torch model '.../config.json'" followed by the 15 zoo names
    (tmp_path / "config.json").write_text("{}")
    err = one_line_error(capsys, ["bench", "--runner", "torch", "--model", str(tmp_path / "config.json")])
    assert f"model path {tmp_path / 'config.json'} is a file" in err and f"did you mean {tmp_path}?" in err


@pytest.mark.parametrize("flag", ["--json", "--trace"])
def test_a_symlink_loop_as_a_path_is_one_line_naming_its_flag(tmp_path, monkeypatch, capsys, flag):
    """``--json loop`` (a link to a link back to it) was a RuntimeError traceback from resolving it."""
    monkeypatch.chdir(tmp_path)
    Path("a").symlink_to("b")
    Path("b").symlink_to("a")
    err = one_line_error(capsys, ["bench", "--runner", "sim", flag, "a"])
    named = "--json a" if flag == "--json" else "a: cannot read trace"
    assert "symbolic links" in err and named in err


@pytest.fixture
def without_torch(monkeypatch):
    """Simulate an install without the torch extra: `import torch` raises ImportError."""
    monkeypatch.setitem(sys.modules, "torch", None)


def test_models_without_the_torch_extra_names_the_install_command(without_torch, capsys):
    err = one_line_error(capsys, ["models"])
    assert "package 'torch' is missing" in err and "pip install -e '.[torch]'" in err


@pytest.mark.parametrize("command", [["cost"], ["bench", "--runner", "sim", "--model"]])
def test_smollm2_on_the_sim_without_the_torch_extra_names_the_install_command(
    without_torch, monkeypatch, capsys, command
):
    # the sim reads the zoo's shapes without torch, but smollm2-135m's from its GGUF file, whose
    # reader imports torch: without the extra that was a ModuleNotFoundError traceback
    import radixflow.models.io
    from radixflow.models import zoo_catalogue

    # imported or not before (as other tests leave it), the reader is imported afresh here
    monkeypatch.delattr(radixflow.models.io, "gguf", raising=False)
    monkeypatch.delitem(sys.modules, "radixflow.models.io.gguf", raising=False)
    zoo_catalogue._smollm2_config.cache_clear()  # read once per process: a failed read is not kept
    err = one_line_error(capsys, [*command, "smollm2-135m"])
    said = "--model" if "--model" in command else "model"  # as the command takes it
    assert err.startswith(f"radixflow: error: {said}: smollm2-135m") and "pip install -e '.[torch]'" in err


def test_torch_runner_without_the_torch_extra_names_the_install_command(without_torch, capsys):
    err = one_line_error(capsys, ["bench", "--runner", "torch", "--model", "qwen3_5-tiny"])
    assert "--runner torch needs the torch extra" in err and "pip install -e '.[torch]'" in err


def test_strict_json_has_no_nan(tmp_path):
    out = tmp_path / "out.json"
    assert main(["bench", "--groups", "2", "--candidates", "2", "--json", str(out)]) == 0

    def refuse(name: str) -> None:
        raise AssertionError(f"non-JSON constant {name}")

    data = json.loads(out.read_text(), parse_constant=refuse)
    assert data["results"][0]["failures"] == []


def test_replicas_without_the_cluster_extra_names_the_install_command(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray.serve", None)  # an install without ray[serve]
    err = one_line_error(capsys, ["serve", "qwen3_5-tiny", "--replicas", "2"])
    assert "--replicas needs the cluster extra" in err and "pip install -e '.[cluster]'" in err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--replicas", "0"], "--replicas"),
        (["--replicas", "2", "--router", "round_robin"], "--router"),
        (["--replicas", "2", "--trace-out", "t.json"], "--trace-out"),
    ],
)
def test_bad_fleet_flags_are_refused(capsys, argv, needle):
    assert needle in one_line_error(capsys, ["serve", "qwen3_5-tiny", *argv])


def test_an_unknown_router_is_named_as_the_experiment_key_names_it(capsys):
    # serve said "--router: invalid choice: 'round_robin' (choose from 'pow2', 'prefix',
    # 'checkpoint')" where an experiment's router key (and make_router) says "unknown router ..."
    from radixflow.fleet import router_problem

    err = one_line_error(capsys, ["serve", "qwen3_5-tiny", "--replicas", "2", "--router", "round_robin"])
    assert err == "radixflow: error: --router: " + router_problem("round_robin").message  # type: ignore[union-attr]
    assert err.endswith("unknown router 'round_robin' (known: pow2, prefix, checkpoint)")


def test_a_ray_address_ray_refuses_is_one_line(capsys):
    # ray.init's ValueError reached the user as a traceback (experiment --ray-address: one line)
    pytest.importorskip("ray.serve")
    argv = ["serve", "qwen3_5-tiny", "--replicas", "2", "--port", "0", "--ray-address", "x"]
    err = one_line_error(capsys, argv)
    assert err.startswith("radixflow: error: --ray-address x: ") and "Invalid address" in err


IN_USE = "is already in use on 127.0.0.1 (is another server running?)"


@pytest.fixture
def port_in_use() -> Iterator[int]:
    """A port another server is listening on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def _no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the model is what a bind error must come before."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the address was checked")

    monkeypatch.setattr("radixflow.generation.setup.load_model", refuse)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--host", "256.1.1.1"], "radixflow: error: --host: cannot resolve '256.1.1.1'"),
        (["--host", "not a host!"], "radixflow: error: --host: cannot resolve 'not a host!'"),
        (["--host", "192.0.2.1"], "radixflow: error: --host: '192.0.2.1' is not an address of this machine"),
    ],
)
def test_serve_refuses_a_bad_host_before_loading_the_model(monkeypatch, capsys, argv, expected):
    pytest.importorskip("uvicorn")
    _no_model_load(monkeypatch)
    assert one_line_error(capsys, ["serve", "qwen3_5-tiny", "--port", "0", *argv]).startswith(expected)


def test_serve_refuses_a_port_in_use_before_loading_the_model(monkeypatch, capsys, port_in_use):
    pytest.importorskip("uvicorn")
    _no_model_load(monkeypatch)
    err = one_line_error(capsys, ["serve", "qwen3_5-tiny", "--port", str(port_in_use)])
    assert err == f"radixflow: error: --port: {port_in_use} {IN_USE}"


def test_router_without_replicas_warns_on_stderr_as_every_warning_does(monkeypatch, capsys, port_in_use):
    """`--router` with one replica cannot change the run: a `radixflow: warning:` line on stderr,
    like bench's, not a line on stdout among the output."""
    pytest.importorskip("uvicorn")
    _no_model_load(monkeypatch)
    assert main(["serve", "qwen3_5-tiny", "--port", str(port_in_use), "--router", "pow2"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    warning = "radixflow: warning: --router has no effect with one replica (see --replicas)"
    assert err.splitlines()[0] == warning


class _Deployed(Exception):
    """Raised where `serve --replicas` would deploy its replicas: what a test reads came before."""


def _stop_at_deploy(monkeypatch, free: dict[str, float]) -> list:
    """`serve --replicas` up to its deployment, on a cluster with ``free`` resources; the fleet
    specs it asked Ray for, appended as it asks."""
    pytest.importorskip("ray.serve")
    pytest.importorskip("uvicorn")
    import contextlib

    import ray

    import radixflow.cluster.launch as launch

    specs: list = []

    def ray_serve(spec):
        specs.append(spec)
        return contextlib.nullcontext()

    def deploy(*args):
        raise _Deployed

    monkeypatch.setattr(launch, "ray_serve", ray_serve)
    monkeypatch.setattr(launch, "deploy", deploy)
    monkeypatch.setattr(ray, "available_resources", lambda: free)
    return specs


def test_router_with_one_replica_on_a_cluster_warns_too(monkeypatch, capsys):
    # `--replicas 1 --ray-address A` runs one replica on the cluster: any router sends it every
    # request, yet `--router` there said nothing (without --ray-address it warns, as above)
    _stop_at_deploy(monkeypatch, {"CPU": 4.0})
    argv = ["serve", "qwen3_5-tiny", "--port", "0", "--ray-address", "auto", "--router", "pow2"]
    with pytest.raises(_Deployed):
        main(argv)
    warning = "radixflow: warning: --router has no effect with one replica (see --replicas)"
    assert capsys.readouterr().err.splitlines() == [warning]
    with pytest.raises(_Deployed):
        main([*argv, "--replicas", "2"])
    assert capsys.readouterr().err == ""


def _no_tokenizer_here(*args):
    from radixflow.problems import Problem, ProblemError

    raise ProblemError(Problem("model", "no tokenizer.json in /models/x"))  # as `ingress_tokenizer`


class _Interrupted:
    def run(self, sockets) -> None:
        raise KeyboardInterrupt  # Ctrl-C: the ingress drained


@pytest.mark.parametrize("server, code", [(lambda *args: _Interrupted(), 130), (_no_tokenizer_here, 2)])
def test_a_fleet_stopped_by_ctrl_c_does_not_log_that_it_serves_nothing(monkeypatch, caplog, server, code):
    # past the drain Serve stops the replicas; the router then sees none running and the log said
    # "the fleet serves nothing: no replica is running: Ray Serve is starting replacements ...;
    # requests get a 503 until a replica serves" at every ordinary stop (and above the one line
    # of a fleet the ingress refused once the replicas were up)
    pytest.importorskip("ray.serve")
    pytest.importorskip("uvicorn")
    import contextlib
    import logging

    import radixflow.cluster.launch as launch

    deployed: list = []

    @contextlib.contextmanager
    def ray_serve(spec):
        try:
            yield
        finally:
            for figures in deployed:  # serve.shutdown(): the replicas leave the router's set
                figures.update({})

    def deploy(options, spec, config, figures):
        figures.update({"a": None, "b": None})
        deployed.append(figures)

    monkeypatch.setattr(launch, "ray_serve", ray_serve)
    monkeypatch.setattr(launch, "deploy", deploy)
    monkeypatch.setattr(launch, "fleet_server", server)
    with caplog.at_level(logging.INFO, logger="radixflow.cluster"):
        assert main(["serve", "qwen3_5-tiny", "--replicas", "2", "--port", "0"]) == code
    assert deployed and [r.getMessage() for r in caplog.records if r.name == "radixflow.cluster"] == []


def test_serve_on_a_port_in_use_is_one_line_from_the_installed_command(port_in_use, tmp_path: Path):
    """The real entry point, as its own process: one line, exit 2, and no model loaded (a zoo
    model in an empty cache: loading it would build it there)."""
    pytest.importorskip("uvicorn")
    env = checkout_env()
    env["RADIXFLOW_CACHE"] = str(tmp_path)
    argv = ["serve", "qwen3_5-tiny", "--port", str(port_in_use)]
    proc = subprocess.run(
        [sys.executable, "-m", "radixflow.cli", *argv], capture_output=True, text=True, timeout=120, env=env
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [f"radixflow: error: --port: {port_in_use} {IN_USE}"]
    assert not any(tmp_path.iterdir())


def test_serve_names_a_mistyped_model_before_the_port_it_would_listen_on(port_in_use, capsys):
    # the model was checked after the port was bound: with another server on the default port, a
    # mistyped model read "--port: 8000 is already in use"
    assert main(["serve", "gpt-17", "--port", str(port_in_use)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("radixflow: error: model: unknown torch model 'gpt-17'"), err


# a NUL in a path flag reached Path.resolve() as "ValueError: embedded null byte" (a traceback;
# found by test_bad_inputs' property test). argv from a shell never holds one; main(argv) can.
@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--json", "a\x00b"],
        ["bench", "--round-trace", "a\x00b"],
        ["bench", "--write-trace", "a\x00b"],
        ["bench", "--trace", "a\x00b"],
        ["bench", "--json", ""],
        ["bench", "--trace-out", "a\x00b"],  # an engine option: checked where the options are
        ["bench", "--trace-out", ""],
        ["experiment", "a\x00b.toml"],
        ["experiment", "experiments/paper.toml", "--out", "a\x00b"],
        ["calibrate", "--out", "a\x00b"],
        ["run-batch", "qwen3_5-small", "--input", "a\x00b"],
        ["run-batch", "qwen3_5-small", "--input", ""],  # was "cannot read .: Is a directory"
        ["run-batch", "qwen3_5-small", "--input", "in.jsonl", "--output", "a\x00b"],
        ["score", "qwen3_5-small", "--input", "a\x00b"],
        ["score", "qwen3_5-small", "--input", "in.jsonl", "--output", "a\x00b"],
        ["score", "qwen3_5-small", "--context", "a", "--candidates-file", "a\x00b"],
    ],
)
def test_a_nul_or_empty_path_is_one_line_naming_its_flag(capsys, argv):
    line = one_line_error(capsys, argv)
    named = argv[-2] if argv[-2].startswith("--") else "config"
    assert named in line, line


# bench probed its --trace-out as an output file before the options were checked: an empty one
# was "cannot write --trace-out .: it is a directory", where every other door says it is empty
@pytest.mark.parametrize("command", [["bench"], ["generate", "qwen3_5-small", "--prompt", "hi"]])
def test_an_empty_trace_out_is_refused_in_the_options_words_at_every_command(capsys, command):
    line = one_line_error(capsys, [*command, "--trace-out", ""])
    assert line == "radixflow: error: --trace-out: must not be empty"


# `bench --trace-out -` wrote a file named "-" where `--json -` writes to standard output: the trace
# is rewritten in place as it grows, which a pipe cannot take, so "-" is refused at every door
@pytest.mark.parametrize("command", [["bench"], ["generate", "qwen3_5-small", "--prompt", "hi"]])
def test_a_trace_out_of_dash_is_refused_not_written_to_a_file_named_dash(
    capsys, tmp_path, monkeypatch, command
):
    monkeypatch.chdir(tmp_path)
    line = one_line_error(capsys, [*command, "--trace-out", "-"])
    assert line.startswith("radixflow: error: --trace-out: - (standard output) cannot hold the trace")
    assert not (tmp_path / "-").exists()


# `calibrate --out -` wrote a file named "-" (and told the user to run `--hardware -`), and
# `experiment --out -` made a directory named "-", where every other output takes "-" as standard
# output: neither can go there, so "-" is refused, as for --trace-out
@pytest.mark.parametrize(
    "argv, said",
    [
        (["calibrate", "--model", "lfm2-tiny", "--out", "-"], "--out: - (standard output) cannot hold the"),
        (["experiment", "x.toml", "--out", "-"], "--out: - (standard output) cannot hold"),
    ],
    ids=["calibrate", "experiment"],
)
def test_an_output_that_cannot_go_to_standard_output_refuses_dash(capsys, tmp_path, monkeypatch, argv, said):
    monkeypatch.chdir(tmp_path)  # x.toml does not exist: refused before it is read
    line = one_line_error(capsys, argv)
    assert line.startswith(f"radixflow: error: {said}") and "./- for " in line, line
    assert not (tmp_path / "-").exists()


# the table went through rich's console, whose own broken-pipe handling exited 1 (a failure)
@pytest.mark.parametrize("output", [["--json"], []], ids=["json", "table"])
def test_a_reader_that_leaves_early_ends_the_command_quietly(output):
    """`radixflow cost ... | head -c 10`: the reader closes the pipe before the output is
    written. That ends the command as SIGPIPE ends a shell tool (status 141, nothing on stderr),
    not with a BrokenPipeError traceback."""
    env = checkout_env()
    proc = run_reader_gone(["cost", "qwen3_5-2b", *output], env)  # the reader left before any write
    assert (proc.returncode, proc.stderr) == (141, "")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["nosuchmodel"], "model: unknown torch model 'nosuchmodel'"),
        (["qwen3_5-2b", "--runner", "sim"], "model: 'qwen3_5-2b' on the sim runner has no weights"),
        (["{empty}"], "model: model directory {empty} holds no config.json"),
        (["qwen3_5-tiny", "--device", "bogus"], "--device: unknown device 'bogus'"),
        # the runner's own refusals of its dtype, matmul plan and kernels, as one engine says them
        (["qwen3_5-tiny", "--dtype", "float16"], "--dtype: float16 runs on cuda only, not on cpu"),
        (
            ["qwen3_5-tiny", "--matmul", "mkl", "--dtype", "bfloat16"],
            "--matmul: plans route CPU float32 matmuls only, not cpu in bfloat16",
        ),
        (
            ["qwen3_5-tiny", "--kernels", "native", "--dtype", "bfloat16"],
            "--kernels: native kernels run on a CPU in float32, not cpu in bfloat16",
        ),
        # a cluster's devices are not this machine's, but a device name torch cannot read is wrong
        # anywhere, and a plan for a GPU is refused whatever GPU it is
        (["qwen3_5-tiny", "--ray-address", "auto", "--device", "bogus"], "--device: unknown device 'bogus'"),
        (
            ["qwen3_5-tiny", "--ray-address", "auto", "--device", "cuda:x"],
            "--device: unknown device 'cuda:x'",
        ),
        (
            ["qwen3_5-tiny", "--ray-address", "auto", "--device", "meta"],
            "--device: device type 'meta' is not supported by the torch runner",
        ),
        (
            [
                "qwen3_5-tiny",
                "--ray-address",
                "auto",
                "--device",
                "cuda",
                "--dtype",
                "bfloat16",
                "--matmul",
                "mkl",
            ],
            "--matmul: plans route CPU float32 matmuls only, not cuda in bfloat16",
        ),
    ],
)
def test_a_model_no_replica_can_load_is_one_line_before_ray_starts(
    monkeypatch, capsys, tmp_path, argv, needle
):
    # each replica found the bad model: Ray started, then a RuntimeError traceback ("Deploying
    # application radixflow failed"), where one replica says it in one line
    pytest.importorskip("ray.serve")
    pytest.importorskip("uvicorn")
    import radixflow.cluster.launch as launch

    def no_ray(spec):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(launch, "ray_serve", no_ray)
    argv, needle = [a.format(empty=tmp_path) for a in argv], needle.format(empty=tmp_path)  # an empty dir
    err = one_line_error(capsys, ["serve", *argv, "--replicas", "2", "--port", "0"])
    assert err.startswith(f"radixflow: error: {needle}")


def test_native_kernels_that_cannot_be_built_are_one_line_before_ray_starts(monkeypatch, capsys):
    # one engine says "--kernels: native kernels could not be built: ..."; each local replica
    # failed its deployment with it in a Ray traceback
    pytest.importorskip("ray.serve")
    pytest.importorskip("uvicorn")
    import radixflow.cluster.launch as launch
    from radixflow.models.kernels import backend
    from radixflow.models.kernels.native.build import Built

    def no_ray(spec):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(launch, "ray_serve", no_ray)
    monkeypatch.setattr(backend, "native_library", lambda cache_dir, compiler: Built(None, "no C compiler"))
    argv = ["serve", "qwen3_5-tiny", "--replicas", "2", "--port", "0", "--kernels", "native"]
    err = one_line_error(capsys, argv)
    assert err == "radixflow: error: --kernels: native kernels could not be built: no C compiler"


def test_a_cluster_device_this_machine_lacks_is_not_refused_here(monkeypatch, capsys):
    # `--ray-address` runs the replicas on the cluster's machines: a GPU there is usable even
    # where this ingress has none, yet the flag check refused `--device cuda` as this machine's
    pytest.importorskip("ray.serve")
    pytest.importorskip("uvicorn")
    import radixflow.cluster.launch as launch

    class Started(Exception):
        pass

    def ray_serve(spec):
        raise Started

    monkeypatch.setattr(launch, "ray_serve", ray_serve)
    argv = ["serve", "qwen3_5-tiny", "--replicas", "2", "--port", "0", "--ray-address", "auto"]
    with pytest.raises(Started):
        main([*argv, "--device", "cuda"])


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, where no file can be made")
def test_calibrate_refuses_an_out_it_cannot_write_before_timing_anything(capsys, zoo):
    """The profile was written only once every batch was timed: an --out in a directory nothing
    can be written to (read-only, /proc) was a traceback then, the timings lost."""
    pytest.importorskip("torch")
    argv = ["calibrate", "--model", "lfm2-tiny", "--held-out", "2", "--repeats", "1", "--out", "/proc/p.json"]
    assert one_line_error(capsys, argv).startswith("radixflow: error: cannot write --out /proc/p.json: ")


@pytest.mark.parametrize("flag", ["--json", "--round-trace", "--write-trace", "--trace-out"])
def test_bench_refuses_to_write_over_its_hardware_profile(tmp_path, capsys, flag):
    """`--hardware p.json --json p.json` ran, then wrote the report over the calibrated profile."""
    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    profile = tmp_path / "p.json"
    save_profile(HARDWARE["h200"], profile)
    before = profile.read_text()
    line = one_line_error(capsys, ["bench", "--hardware", str(profile), "--groups", "2", flag, str(profile)])
    assert line == f"radixflow: error: {flag} {profile}: the same file as --hardware"
    assert profile.read_text() == before


# run-batch posts through httpx, which the serve extra did not install: a traceback
# (ModuleNotFoundError) where serve's own packages missing is one line
@pytest.mark.parametrize("package", ["httpx", "fastapi"])
def test_run_batch_without_a_package_of_the_serve_extra_names_the_install_command(
    monkeypatch, capsys, tmp_path, package
):
    monkeypatch.setitem(sys.modules, package, None)
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {}}\n')
    err = one_line_error(capsys, ["run-batch", "qwen3_5-tiny", "-i", str(batch)])
    assert f"radixflow run-batch needs the serve extra (package {package!r} is missing)" in err
    assert "pip install -e '.[serve]'" in err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--logit-bias", "3=200"], "--logit-bias: token 3's bias must be a number in [-100, 100]"),
        (["--truncate-prompt-tokens", "0"], "--truncate-prompt-tokens: must be an integer >= 1"),
        (["--guided-choice", " "], "--guided-choice: item 0 is only whitespace"),
        (["--bad-word", " "], "--bad-word: item 0 is only whitespace"),
        (["--guided-choice", "a", "--allowed-token-ids", "3"], "--allowed-token-ids: cannot be combined"),
        # in the words of LLM's SamplingParams and the server's body, not "must be an integer, got ''"
        (["--logit-bias", "x=1"], "--logit-bias: keys must be token ids, got 'x'"),
        (["--allowed-token-ids", ""], "--allowed-token-ids: must be a non-empty list of ids, got []"),
    ],
)
def test_generate_refuses_bad_sampling_flags_by_their_flag_before_loading_the_model(
    monkeypatch, capsys, argv, expected
):
    # these were checked only once the model had loaded (seconds to minutes) and named as
    # SamplingParams' fields (`logit_bias: ...`), where usage.md promises bad input named by its
    # flag, before any work wherever it can be
    from radixflow.generation import LLM

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the sampling flags were checked")

    monkeypatch.setattr(LLM, "from_options", refuse)
    err = one_line_error(capsys, ["generate", "qwen3_5-tiny", "--prompt", "hi", *argv])
    assert err.startswith(f"radixflow: error: {expected}"), err


# generate's sampling flags checked their ranges in argparse types of their own: "--top-p: must
# be at most 1" where the API says "top_p: must be in (0, 1]", "--n: must be at least 1" where it
# says "n: must be an integer between 1 and 128". One rule, one wording: the flag names the field.
@pytest.mark.parametrize(
    "flag, text, field, value",
    [
        ("--top-p", "0", "top_p", 0),  # quoted as typed, as LLM(top_p=0) is (it said 0.0)
        ("--top-p", "1.5", "top_p", 1.5),
        ("--n", "0", "n", 0),
        ("--n", "129", "n", 129),
        ("--temperature", "-1", "temperature", -1),
        ("--max-tokens", "-1", "max_tokens", -1),
        ("--min-tokens", "-1", "min_tokens", -1),
        ("--logprobs", "-1", "logprobs", -1),
        ("--logprobs", "21", "logprobs", 21),
        ("--prompt-logprobs", "21", "prompt_logprobs", 21),
        ("--stop", "", "stop", ("",)),  # it said "--stop strings must not be empty", a check of its own
    ],
)
def test_generate_refuses_a_sampling_flag_out_of_range_in_the_apis_words(
    monkeypatch, capsys, flag, text, field, value
):
    from radixflow.cli.generate_flags import DEFAULT_MAX_TOKENS, sampling_flag
    from radixflow.generation import LLM, SamplingParams

    monkeypatch.setattr(LLM, "from_options", _refuse_model_load)
    problem = SamplingParams(**{"max_tokens": DEFAULT_MAX_TOKENS, field: value}).problem()
    assert problem is not None and problem.param == field and sampling_flag(field) == flag
    err = one_line_error(capsys, ["generate", "qwen3_5-tiny", "--prompt", "hi", flag, text])
    assert err == f"radixflow: error: {problem.render(sampling_flag)}"  # another field named too


def _refuse_model_load(*args: object, **kwargs: object) -> None:
    raise AssertionError("the model was loaded before the sampling flags were checked")


@pytest.mark.parametrize(
    "command, lines",
    [
        (["score", "qwen3_5-tiny"], '{"context": "a b", "candidates": [" c"]}'),
        (
            ["run-batch", "qwen3_5-tiny"],
            '{"custom_id": "a", "method": "POST", "url": "/v1/score", "body": {}}',
        ),
    ],
    ids=["score", "run-batch"],
)
def test_a_trace_out_at_the_outputs_partial_file_is_refused_before_the_run(
    tmp_path, monkeypatch, capsys, command, lines
):
    # --output OUT streams into OUT.partial and renames it over OUT at the end: a --trace-out of
    # OUT.partial was written into the same file and renamed away, lost without a word (exit 0)
    pytest.importorskip("httpx")
    _no_model_load(monkeypatch)
    given = write_lines(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    argv = [*command, "--input", str(given), "--output", str(out), "--trace-out", f"{out}.partial"]
    err = one_line_error(capsys, argv)
    assert f"cannot write --output {out}: its partial file {out}.partial: the same file as --trace-out" in err


@pytest.mark.parametrize(
    "command, lines",
    [
        (["score", "qwen3_5-tiny"], '{"context": "a b", "candidates": [" c"]}'),
        (
            ["run-batch", "qwen3_5-tiny"],
            '{"custom_id": "a", "method": "POST", "url": "/v1/score", "body": {}}',
        ),
    ],
    ids=["score", "run-batch"],
)
def test_an_output_that_ends_in_a_slash_is_refused_not_written_as_a_file(
    tmp_path, monkeypatch, capsys, command, lines
):
    # `--output results/` where results/ did not exist yet ran, and wrote the results to a file
    # named `results` (the path read without its slash), where the user asked for a directory
    pytest.importorskip("httpx")
    _no_model_load(monkeypatch)
    given = write_lines(tmp_path / "in.jsonl", lines)
    out = f"{tmp_path}/results/"
    err = one_line_error(capsys, [*command, "--input", str(given), "--output", out])
    said = f"--output: must be a file path, got {out!r} (a directory: name a file in it)"
    assert err.startswith("radixflow: error: ") and err.endswith(said)  # run-batch: -o/--output
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "command, flag",
    [
        (["bench", "--groups", "1", "--candidates", "1"], "--json"),
        (["bench", "--groups", "1", "--candidates", "1"], "--round-trace"),
        (["bench", "--groups", "1", "--candidates", "1"], "--write-trace"),
        (["calibrate", "--model", "lfm2-tiny", "--held-out", "1", "--repeats", "1"], "--out"),
    ],
    ids=["json", "round-trace", "write-trace", "calibrate"],
)
@pytest.mark.parametrize("tail", ["/", "/."], ids=["slash", "slash-dot"])
def test_every_output_file_that_ends_in_a_slash_is_refused_before_the_run(
    tmp_path, capsys, command, flag, tail
):
    # `bench --json results/` (results/ not made yet) ran, then wrote the report to a file named
    # `results`; `calibrate --out results/` timed for minutes, then did the same; `results/.`,
    # which `Path` reads as `results`, did it after the slash was refused
    out = f"{tmp_path}/results{tail}"
    err = one_line_error(capsys, [*command, flag, out])
    said = f"{flag}: must be a file path, got {out!r} (a directory: name a file in it)"
    assert err.startswith("radixflow: error: ") and err.endswith(said)
    assert not (tmp_path / "results").exists()


PROFILE = Path(__file__).parents[2] / "experiments" / "profiles" / "cpu.json"


SCORE = ["score", "qwen3_5-tiny", "--context", "a"]
BATCH_LINE = '{"custom_id": "a", "method": "POST", "url": "/v1/score", "body": {}}'


@pytest.mark.parametrize(
    "argv, named",
    [
        ([*SCORE, "--candidates-file", "{c}", "--trace-out", "{c}"], "c"),
        ([*SCORE, "--candidate", " b", "--hardware", "{p}", "--trace-out", "{p}"], "p"),
        (["generate", "qwen3_5-tiny", "--prompt", "a", "--hardware", "{p}", "--trace-out", "{p}"], "p"),
        (["run-batch", "qwen3_5-tiny", "-i", "{b}", "--hardware", "{p}", "--trace-out", "{p}"], "p"),
        (["serve", "qwen3_5-tiny", "--port", "0", "--hardware", "{p}", "--trace-out", "{p}"], "p"),
    ],
    ids=["score-candidates-file", "score-hardware", "generate", "run-batch", "serve"],
)
def test_a_trace_out_that_names_an_input_file_is_refused_and_the_file_kept(
    tmp_path, monkeypatch, capsys, argv, named
):
    # bench refused --trace-out at its --trace or --hardware file; score, generate, serve and
    # run-batch read --candidates-file or a --hardware profile and then wrote the trace over it,
    # the input lost with exit 0
    pytest.importorskip("httpx")
    _no_model_load(monkeypatch)
    files = {"c": write_lines(tmp_path / "c.txt", " b"), "p": tmp_path / "p.json"}
    files["p"].write_text(PROFILE.read_text())
    files["b"] = write_lines(tmp_path / "b.jsonl", BATCH_LINE)
    before = files[named].read_text()
    argv = [a.format(**files) for a in argv]
    flag = {"c": "--candidates-file", "p": "--hardware"}[named]
    assert f"--trace-out {files[named]}: the same file as {flag}" in one_line_error(capsys, argv)
    assert files[named].read_text() == before


@pytest.mark.parametrize("order", ["mean", "total"])
def test_score_refuses_rank_by_beside_json_as_beside_input(monkeypatch, capsys, order):
    # --json prints the scores in the candidates' order, so --rank-by mean changed nothing there
    # without a word; beside --input, whose lines come in that order too, it is refused; the
    # default order given by name was let through, where usage.md says --rank-by is refused
    _no_model_load(monkeypatch)
    argv = ["score", "qwen3_5-tiny", "--context", "a", "--candidate", " b", "--json", "--rank-by", order]
    assert one_line_error(capsys, argv) == (
        "radixflow: error: --json: the scores come in the candidates' order; drop --rank-by"
    )


def test_a_fleet_over_a_model_directory_without_a_tokenizer_is_one_line_before_ray_starts(
    zoo, monkeypatch, capsys, tmp_path
):
    # the ingress tokenizes every request: it found out only once Ray and every replica were up
    pytest.importorskip("ray.serve")
    import shutil

    from radixflow.cluster import launch
    from radixflow.models.zoo import ensure_model

    model = tmp_path / "no-tokenizer"
    shutil.copytree(ensure_model("qwen3_5-tiny"), model, ignore=shutil.ignore_patterns("tokenizer*"))

    def refuse(spec: object) -> None:
        raise AssertionError("Ray started before the model's tokenizer was checked")

    monkeypatch.setattr(launch, "ray_serve", refuse)
    err = one_line_error(capsys, ["serve", str(model), "--replicas", "2", "--port", "0"])
    why = "has no tokenizer.json: text prompts need the model's tokenizer"
    assert err == f"radixflow: error: model: {model} {why}"


def test_a_generated_prompt_past_the_models_context_is_refused_before_the_workload_is_drawn(
    monkeypatch, capsys
):
    # the whole workload (64 prompts of 300,064 tokens: seconds of drawing) and the runner, its
    # pools sized to those prompts, were built first, and only then was the prompt refused
    from radixflow.cli import bench_setup
    from radixflow.options import EnginePlan

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("built before the prompt was checked against the model's context")

    monkeypatch.setattr(bench_setup, "build_workload", refuse)
    monkeypatch.setattr(EnginePlan, "build", refuse)
    err = one_line_error(capsys, ["bench", "--runner", "sim", "--context-len", "300000"])
    assert "a prompt of 300064 tokens" in err and "does not fit qwen3_5-2b's context of 262144 tokens" in err


# A command's own flag said "argument --repeat: must be at most 1000, got 1001" or "argument
# --repeat: not a valid integer: 'abc'" where an engine flag says "--kv-blocks: must be at least
# 1, got -1" and "--seed: must be an integer, got 'abc'": two wordings for one kind of mistake.
@pytest.mark.parametrize(
    "argv, expected",
    [
        (["bench", "--repeat", "1001"], "--repeat: must be at most 1000, got 1001"),
        (["bench", "--repeat", "abc"], "--repeat: must be an integer, got 'abc'"),
        (["bench", "--groups", "1e3"], "--groups: must be an integer, got '1e3'"),
        (["bench", "--rate", "x", "--arrival", "poisson"], "--rate: must be a number, got 'x'"),
        (
            ["bench", "--order", "x"],
            "--order: invalid choice: 'x' (choose from 'grouped', 'interleaved', 'shuffled')",
        ),
        (["cost", "qwen3-4b", "--prefill", "nan"], "--prefill: must be an integer, got 'nan'"),
        (
            ["generate", "qwen3_5-tiny", "--prompt", "hi", "--n", "0"],
            "--n: must be an integer between 1 and 128, got 0",
        ),
        (["run-batch", "qwen3_5-tiny", "-i", ""], "-i/--input: must be a path, got an empty string"),
    ],
)
def test_a_commands_own_flag_is_refused_in_the_engine_flags_words(capsys, argv, expected):
    assert one_line_error(capsys, argv) == f"radixflow: error: {expected}"


# calibrate's own counts were argparse's bare int: "argument --repeats: invalid int value: 'abc'",
# and a count out of range read "--repeats must be from 1 to 100, got 0", two more wordings than
# every other flag's
@pytest.mark.parametrize(
    "flag, text, expected",
    [
        ("--repeats", "abc", "--repeats: must be an integer, got 'abc'"),
        ("--held-out", "nan", "--held-out: must be an integer, got 'nan'"),
        ("--max-tokens", "1e3", "--max-tokens: must be an integer, got '1e3'"),
        ("--repeats", "0", "--repeats: must be from 1 to 100, got 0"),
        ("--held-out", "-1", "--held-out: must be from 1 to 1000, got -1"),
    ],
)
def test_calibrate_counts_are_refused_in_every_flags_words(capsys, flag, text, expected):
    pytest.importorskip("torch")
    argv = ["calibrate", "--model", "qwen3_5-tiny", flag, text]
    assert one_line_error(capsys, argv) == f"radixflow: error: {expected}"


# bench takes its model as a flag, yet its refusal read "model: unknown sim model 'gpt-9'", as
# the commands whose MODEL is an argument say it: the flag the user typed went unnamed
@pytest.mark.parametrize(
    "argv, expected",
    [
        (["bench", "--model", "gpt-9"], "--model: unknown "),
        (["bench", "--model", ""], "--model: must not be empty"),
        (["cost", "gpt-9"], "model: unknown sim model 'gpt-9'"),
    ],
)
def test_the_model_is_named_as_the_command_takes_it(capsys, argv, expected):
    assert one_line_error(capsys, argv).startswith(f"radixflow: error: {expected}")


def test_an_empty_candidates_file_is_named_not_taken_for_none_given(tmp_path, capsys):
    # it said "no candidates: give --candidate TEXT (repeatable) or --candidates-file PATH" to a
    # user who had given --candidates-file
    empty = tmp_path / "c.txt"
    empty.write_text("")
    argv = ["score", "qwen3_5-tiny", "--context", "hi", "--candidates-file", str(empty)]
    assert one_line_error(capsys, argv) == f"radixflow: error: --candidates-file: {empty} holds no candidates"


@pytest.mark.parametrize("content", [None, '{"x": 1}\n'])
def test_a_bad_trace_is_refused_naming_the_flag(tmp_path, capsys, content):
    # it said "d: cannot read trace (Is a directory)" and "t.jsonl:1: unknown field 'x'", where
    # every other file flag's refusal names the flag (--input: cannot read d: ...)
    path = tmp_path / "t.jsonl"
    path.mkdir() if content is None else path.write_text(content)
    err = one_line_error(capsys, ["bench", "--runner", "sim", "--trace", str(path)])
    assert err.startswith(f"radixflow: error: --trace {path}")


def test_a_replica_that_fails_to_start_ends_serve_with_one_line(monkeypatch, capsys):
    # Serve's RuntimeError ("Deploying application radixflow failed: ...") was a traceback
    pytest.importorskip("ray.serve")
    pytest.importorskip("uvicorn")
    import contextlib

    import radixflow.cluster.launch as launch

    def deploy(*args):
        raise launch.ReplicaStartError("a replica failed to start: MemoryError: out of memory")

    monkeypatch.setattr(launch, "ray_serve", lambda spec: contextlib.nullcontext())
    monkeypatch.setattr(launch, "deploy", deploy)
    err = one_line_error(capsys, ["serve", "qwen3_5-tiny", "--replicas", "2", "--port", "0"])
    assert err == "radixflow: error: --replicas 2: a replica failed to start: MemoryError: out of memory"


def test_a_fleet_stopped_by_sigterm_exits_143_as_one_server_does(monkeypatch, capsys):
    # ray.init's SIGTERM handler (kept: its sys.exit runs the fleet's teardown) ended the drained
    # server with status 15 and not a word, where one server's SIGTERM is 143 (docs/serving.md)
    pytest.importorskip("ray.serve")
    pytest.importorskip("uvicorn")
    import contextlib
    import signal

    import radixflow.cluster.launch as launch

    torn_down: list[str] = []

    @contextlib.contextmanager
    def ray_serve(spec):
        try:
            yield
        finally:
            torn_down.append("ray")

    def ray_sigterm(*_, **__):  # what Ray's handler does once uvicorn has drained and re-raised it
        raise SystemExit(signal.SIGTERM)

    server = SimpleNamespace(run=ray_sigterm)
    monkeypatch.setattr(launch, "ray_serve", ray_serve)
    monkeypatch.setattr(launch, "deploy", lambda *args: None)
    monkeypatch.setattr(launch, "fleet_server", lambda *args: server)
    code = main(["serve", "qwen3_5-tiny", "--replicas", "2", "--port", "0"])
    assert (code, torn_down) == (128 + signal.SIGTERM, ["ray"])
    assert capsys.readouterr().err.splitlines()[-1] == "radixflow: terminated"


def test_serve_replicas_and_a_fleet_cell_default_to_the_same_router(monkeypatch):
    # `serve --replicas 2` routed by checkpoint and an experiment cell with `replicas = 2` by pow2:
    # the same fleet, two doors, two defaults
    from radixflow.experiments.config import CELL_KEYS

    specs = _stop_at_deploy(monkeypatch, {"CPU": 4.0})
    with pytest.raises(_Deployed):
        main(["serve", "qwen3_5-tiny", "--port", "0", "--replicas", "2"])
    assert specs[-1].router == CELL_KEYS["router"]


def test_a_fleet_the_joined_cluster_has_no_cpus_for_is_warned_about(monkeypatch, capsys):
    # Serve waited, silently, for CPUs the cluster did not have: `serve` hung with no word
    _stop_at_deploy(monkeypatch, {"CPU": 2.0, "memory": 1e9})
    argv = ["serve", "qwen3_5-tiny", "--port", "0", "--ray-address", "auto"]
    with pytest.raises(_Deployed):
        main([*argv, "--replicas", "2"])
    assert "warning" not in capsys.readouterr().err
    with pytest.raises(_Deployed):
        main([*argv, "--replicas", "3"])
    assert capsys.readouterr().err.splitlines() == [
        "radixflow: warning: --replicas 3: the replicas take 3 CPUs (1 each) and the cluster at "
        "--ray-address auto has 2 free: serve waits for the rest (from its autoscaler, or other work ending)"
    ]


def test_a_replica_on_cuda_takes_a_gpu_of_its_own(monkeypatch, capsys):
    # replicas asked Ray for no GPU: on --device cuda every one of them landed on the one GPU all
    # of them see, each sizing its cache to the whole device
    specs = _stop_at_deploy(monkeypatch, {"CPU": 4.0, "GPU": 1.0})
    argv = [
        "serve",
        "qwen3_5-tiny",
        "--port",
        "0",
        "--ray-address",
        "auto",
        "--device",
        "cuda",
        "--dtype",
        "float32",
    ]
    with pytest.raises(_Deployed):
        main([*argv, "--replicas", "1"])
    assert specs[-1].gpus_per_replica == 1
    assert "warning" not in capsys.readouterr().err
    with pytest.raises(_Deployed):
        main([*argv, "--replicas", "2"])
    assert capsys.readouterr().err.splitlines() == [
        "radixflow: warning: --replicas 2: the replicas take 2 GPUs (1 each) and the cluster at "
        "--ray-address auto has 1 free: serve waits for the rest (from its autoscaler, or other work ending)"
    ]
    with pytest.raises(_Deployed):
        main(["serve", "qwen3_5-tiny", "--port", "0", "--ray-address", "auto", "--replicas", "2"])
    assert specs[-1].gpus_per_replica == 0  # a CPU device: none


def test_a_fleet_on_a_numbered_cuda_device_or_short_of_gpus_is_one_line(monkeypatch, capsys):
    _stop_at_deploy(monkeypatch, {"CPU": 4.0, "GPU": 4.0})
    argv = ["serve", "qwen3_5-tiny", "--port", "0", "--ray-address", "auto", "--replicas", "2"]
    assert main([*argv, "--device", "cuda:1"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "radixflow: error: --device cuda:1: with --replicas, Ray gives each replica a GPU of its own, "
        "which it sees as cuda; give --device cuda"
    )
    import torch

    import radixflow.cli.serve_fleet as serve_cli

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    args = SimpleNamespace(replicas=2, ray_address=None)
    with pytest.raises(
        UsageError,
        match=r"^--replicas 2: on --device cuda each replica takes a GPU of its own, and this machine has 1$",
    ):
        serve_cli._refuse_gpus(args, "cuda")
    serve_cli._refuse_gpus(SimpleNamespace(replicas=1, ray_address=None), "cuda")  # one GPU: fine


def test_a_replica_takes_a_cpu_for_each_of_its_torch_threads(monkeypatch, capsys):
    # every replica took one CPU whatever --torch-threads gave it: `--replicas 2 --torch-threads 4`
    # said "4 torch threads each" and ran 8 threads on the 2 CPUs Ray had (on a cluster, packed
    # 4 replicas' threads onto a 4-CPU node), and the CPU warning counted one each
    specs = _stop_at_deploy(monkeypatch, {"CPU": 4.0})
    with pytest.raises(_Deployed):
        main(["serve", "qwen3_5-tiny", "--port", "0", "--replicas", "2", "--torch-threads", "2"])
    assert specs[-1].cpus_per_replica == 2
    with pytest.raises(_Deployed):
        main(["serve", "qwen3_5-tiny", "--port", "0", "--replicas", "2"])
    assert specs[-1].cpus_per_replica == 1  # one torch thread by default
    capsys.readouterr()
    argv = ["serve", "qwen3_5-tiny", "--port", "0", "--ray-address", "auto", "--replicas", "3"]
    with pytest.raises(_Deployed):
        main([*argv, "--torch-threads", "2"])
    assert capsys.readouterr().err.splitlines() == [
        "radixflow: warning: --replicas 3: the replicas take 6 CPUs (2 each) and the cluster at "
        "--ray-address auto has 4 free: serve waits for the rest (from its autoscaler, or other work ending)"
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "qwen3_5-tiny", "--prompt", "hi"],
        ["score", "qwen3_5-tiny", "--context", "a", "--candidate", "b"],
        ["serve", "qwen3_5-tiny"],
    ],
    ids=lambda argv: argv[0],
)
def test_the_sim_runner_given_to_a_door_that_needs_weights_is_blamed_not_the_model(capsys, argv):
    # it said "model: 'qwen3_5-tiny' on the sim runner has no weights" of a zoo model with weights,
    # and "generation needs" to a user scoring: the runner the user gave is the mistake
    err = one_line_error(capsys, [*argv, "--runner", "sim"])
    assert err.startswith("radixflow: error: --runner: sim runs no weights"), err
    assert "'qwen3_5-tiny'" in err and "--runner torch" not in err  # a zoo name runs on torch by default


def test_a_prompt_refused_once_the_runner_is_built_leaves_the_old_trace_as_it_was(
    monkeypatch, capsys, tmp_path
):
    # a model whose context only its built runner knows (a checkpoint the cost model cannot read)
    # was refused after `plan.build` had opened --trace-out: the previous trace emptied for a run
    # that never ran
    from radixflow.cli import bench_setup

    monkeypatch.setattr(bench_setup, "model_context", lambda name: None)
    trace = tmp_path / "trace.json"
    trace.write_text("the previous trace\n")
    argv = ["bench", "--runner", "sim", "--groups", "1", "--candidates", "1", "--context-len", "300000"]
    err = one_line_error(capsys, [*argv, "--trace-out", str(trace)])
    assert "does not fit qwen3_5-2b's context of 262144 tokens" in err
    assert trace.read_text() == "the previous trace\n"


@pytest.mark.parametrize("spelling", [[], ["--model"]], ids=["MODEL", "--model"])
@pytest.mark.parametrize(
    "argv, way_in",
    [
        (["generate", "{model}", "--prompt", "hi"], "token-id prompts run through radixflow.LLM"),
        (["score", "{model}", "--context", "hi", "--candidate", " x"], "give token ids in an --input file"),
    ],
    ids=["generate", "score"],
)
def test_a_model_without_a_tokenizer_is_refused_with_a_way_in_the_command_line_has(
    zoo, capsys, tmp_path, argv, way_in, spelling
):
    # the API's own refusal was passed on: "give prompts as lists of token ids", which neither
    # --prompt nor --context can be; the model named as it was given ("model:" for --model too)
    import shutil

    from radixflow.models.zoo import ensure_model

    model = tmp_path / "no-tokenizer"
    shutil.copytree(ensure_model("qwen3_5-tiny"), model, ignore=shutil.ignore_patterns("tokenizer*"))
    given = [argv[0], *spelling, *argv[1:]]
    err = one_line_error(capsys, [a.format(model=model) for a in given])
    said = spelling[0] if spelling else "model"
    assert err.startswith(f"radixflow: error: {said}: {model} has no tokenizer.json: ") and way_in in err, err


def _run_to_full_disk(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``radixflow ARGV > /dev/full``: standard output on a disk with no space left."""
    with open("/dev/full", "w") as full:
        return run_cli(argv, full)


FULL_DISK = "radixflow: error: cannot write standard output: No space left on device\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "argv", [["cost", "qwen3_5-2b"], ["cost", "qwen3_5-2b", "--json"]], ids=["table", "json"]
)
def test_what_standard_output_cannot_take_is_one_line(argv):
    # `radixflow cost ... > out.txt` on a full disk was an OSError traceback and status 1, where
    # usage.md promises one line and 2 for an output that cannot be written
    proc = _run_to_full_disk(argv)
    assert (proc.returncode, proc.stderr) == (2, FULL_DISK)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("to_stdout", [[], ["--json", "-"]], ids=["table", "json"])
def test_a_bench_whose_standard_output_is_full_still_writes_its_files(tmp_path, to_stdout):
    files = {"--json": tmp_path / "out.json", "--round-trace": tmp_path / "rounds.jsonl"}
    argv = ["bench", "--groups", "1", "--candidates", "2", *to_stdout]
    argv += [a for flag, path in files.items() if flag not in to_stdout for a in (flag, str(path))]
    proc = _run_to_full_disk(argv)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.endswith(FULL_DISK)
    assert files["--round-trace"].read_text().count("\n") >= 3


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_no_command_takes_a_prefix_of_its_flag_for_the_flag(command):
    # `score --candidates " a"` was read as --candidates-file, blaming a file never named
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and command in a.choices]
    assert parser.allow_abbrev is False and sub.choices[command].allow_abbrev is False


def test_score_candidates_is_named_not_taken_for_candidates_file(capsys):
    err = one_line_error(capsys, ["score", "llama-tiny", "--candidates", " a", " b"])
    assert "unrecognized arguments: --candidates" in err and "--candidates-file" not in err


def _generate_flags() -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {o for a in sub.choices["generate"]._actions for o in a.option_strings}


def test_every_sampling_field_a_request_can_set_is_a_generate_flag():
    # the server's bodies and LLM's SamplingParams took stop_token_ids and skip_special_tokens;
    # `radixflow generate` had no flag for either
    from radixflow.cli.generate_flags import sampling_flag
    from radixflow.generation import SamplingParams
    from radixflow.server.protocol import CompletionRequest

    sent = [f.name for f in dataclasses.fields(SamplingParams) if f.name in CompletionRequest.model_fields]
    missing = [name for name in sent if sampling_flag(name) not in _generate_flags()]
    assert missing == [], missing


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--stop-token-ids", "3,17"], "stop_token_ids", (3, 17)),
        ([], "stop_token_ids", ()),
        (["--no-skip-special-tokens"], "skip_special_tokens", False),
        ([], "skip_special_tokens", True),
    ],
)
def test_generate_passes_stop_token_ids_and_skip_special_tokens_on(argv, field, value):
    from radixflow.cli.generate_flags import sampling_params

    args = build_parser().parse_args(["generate", "qwen3_5-tiny", "--prompt", "hi", *argv])
    assert getattr(sampling_params(args), field) == value


def test_a_bad_stop_token_id_is_one_line_naming_the_flag(monkeypatch, capsys):
    from radixflow.generation import LLM

    monkeypatch.setattr(LLM, "from_options", _refuse_model_load)
    err = one_line_error(capsys, ["generate", "qwen3_5-tiny", "--prompt", "hi", "--stop-token-ids", "3,x"])
    assert err == "radixflow: error: --stop-token-ids: must be an integer, got 'x'"


@pytest.mark.parametrize("command", ["serve", "run-batch"])
def test_a_drain_timeout_too_long_for_a_thread_wait_is_refused_naming_the_flag(
    monkeypatch, capsys, tmp_path, command
):
    # 1e10 s passed every check, then raised OverflowError inside threading's waits at shutdown
    pytest.importorskip("uvicorn")
    _no_model_load(monkeypatch)
    batch = tmp_path / "in.jsonl"
    body = {"model": "qwen3_5-tiny", "prompt": "hi", "max_tokens": 1}
    batch.write_text(
        json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": body}) + "\n"
    )
    extra = ["--port", "0"] if command == "serve" else ["-i", str(batch), "-o", str(tmp_path / "out.jsonl")]
    line = one_line_error(capsys, [command, "qwen3_5-tiny", *extra, "--drain-timeout", "1e10"])
    assert line == "radixflow: error: --drain-timeout: must be at most 604800, got 1e10"


# `bench --trace -`, `score --input -`, `--candidates-file -` and `run-batch -i -` read a file named
# "-" (a missing one: "cannot read -: No such file or directory"), where "-" is standard output for
# every output: no input reads standard input, so "-" is refused by its flag (`stdin_problem`)
@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--trace", "-"],
        ["score", "qwen3_5-tiny", "--input", "-"],
        ["score", "qwen3_5-tiny", "--context", "a", "--candidates-file", "-"],
        ["run-batch", "qwen3_5-tiny", "--input", "-"],
        ["bench", "--hardware", "-"],
    ],
    ids=["bench-trace", "score-input", "candidates-file", "run-batch-input", "hardware"],
)
def test_an_input_of_dash_is_refused_not_read_from_a_file_named_dash(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text("not what was meant\n")  # a file named "-" is not read for it either
    line = one_line_error(capsys, argv)
    flag = argv[-2]
    assert f"{flag}: - (standard input) is not read" in line, line  # run-batch's reads -i/--input
    assert "./- for a file named -" in line


# a MODEL that is a symlink loop (`ln -s ck ck`) raised RuntimeError out of Path.resolve where the
# commands key a checkpoint by its resolved path (a partial file's record): a traceback
@pytest.mark.parametrize(
    "argv",
    [
        ["score", "./ck", "--context", "a", "--candidate", " b"],
        ["score", "./ck", "--input", "in.jsonl", "--output", "out.jsonl"],
        ["run-batch", "./ck", "--input", "batch.jsonl"],
    ],
    ids=["score", "score-input", "run-batch"],
)
def test_a_model_that_is_a_symlink_loop_is_one_line_naming_it(capsys, tmp_path, monkeypatch, argv):
    pytest.importorskip("httpx")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ck").symlink_to("ck")
    write_lines(tmp_path / "in.jsonl", '{"context": "a", "candidates": [" b"]}')
    write_lines(tmp_path / "batch.jsonl", BATCH_LINE)
    line = one_line_error(capsys, argv)
    assert "model path ck is a symlink to ck, which cannot be reached" in line, line


def test_a_cluster_replicas_threads_are_not_held_to_this_machines_cpus(capsys, monkeypatch):
    # `serve --replicas 2 --ray-address A --torch-threads 8` on a 2-CPU ingress was refused
    # "--torch-threads: must be at most 2 (this machine's CPUs)": the replicas run on the
    # cluster's nodes, each checking its own CPUs where it builds its engine
    pytest.importorskip("ray.serve")
    from radixflow.options import machine

    monkeypatch.setattr(machine, "cpu_count", lambda: 2)
    fleet = ["serve", "qwen3_5-tiny", "--replicas", "2", "--port", "0", "--torch-threads", "8"]
    err = one_line_error(capsys, [*fleet, "--ray-address", "x"])
    assert err.startswith("radixflow: error: --ray-address x: "), err  # past the options, to Ray
    err = one_line_error(capsys, fleet)  # a local fleet's replicas are this machine's
    assert err == "radixflow: error: --torch-threads: must be at most 2 (this machine's CPUs), got 8"


@pytest.mark.parametrize(
    "flag, value, key, says",
    [
        ("--candidate-len", "0", "candidate_len", "must be at least 1, got 0"),
        ("--namespaces", "0", "namespaces", "must be at least 1, got 0"),
        ("--context-len", "-1", "context_len", "must be at least 0, got -1"),
        ("--groups", "-1", "groups", "must be at least 0, got -1"),
        ("--rate", "0", "rate", "must be at least 1e-06 requests/s, got 0"),
    ],
)
def test_a_workload_flag_is_refused_in_the_words_of_its_toml_key(capsys, flag, value, key, says):
    # one rule, worded two ways: --candidate-len 0 "must be positive" where the TOML's
    # candidate_len = 0 "must be at least 1"; --context-len -1 ">= 0"; --rate 0 "at least 1e-06"
    # where the TOML's was "a finite number >= 1e-06 requests/s". Refused as the flag is read:
    # before an unknown model is
    err = one_line_error(capsys, ["bench", "--model", "gpt-9", flag, value, "--arrival", "poisson"])
    assert err == f"radixflow: error: {flag}: {says}"
    typed = float(value) if key == "rate" else int(value)
    problem = WorkloadSpec(**{key: typed}).problem()
    assert problem is not None and problem.message.split(", got")[0] == says.split(", got")[0]
