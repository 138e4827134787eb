"""`radixflow/cli/args.py`: the help formatter, and the check that an output can be written."""

from __future__ import annotations

import argparse
import os
import re
import threading

import pytest

from radixflow.cli.app import build_parser
from radixflow.cli.args import check_output_paths
from radixflow.cli.command import UsageError


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_a_flag_whose_help_names_its_default_gets_no_second_one(name):
    """`--max-cells` read "(default: 10000; ...) (default: 10000)": the formatter appends a
    default only where the help does not already say it."""
    parser = _commands()[name]
    formatter = parser._get_formatter()
    for action in parser._actions:
        text = formatter._expand_help(action) if action.help else ""
        assert text.count("(default") <= 1, (action.option_strings, text)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_flag_has_help(name):
    """`generate --top-p` was listed with no help and no default."""
    assert [a.option_strings for a in _commands()[name]._actions if not a.help] == []


def test_an_output_that_is_a_link_to_a_file_not_made_yet_stays_a_link(tmp_path):
    """The check that --output can be written opened it through a link to a file not made yet,
    creating that file, then removed the new file by the link's name: the link went, so the run
    wrote a regular file in its place, and an empty file was left at the link's target."""
    from radixflow.cli.args import check_output_paths
    from radixflow.cli.command import UsageError

    link, target = tmp_path / "out.jsonl", tmp_path / "results" / "out.jsonl"
    target.parent.mkdir()
    link.symlink_to(target)
    check_output_paths({"--output": link}, {})
    assert link.is_symlink() and not target.exists()
    # a link into a directory that does not exist: that directory is named, not the link's
    gone = tmp_path / "gone" / "out.jsonl"
    link.unlink()
    link.symlink_to(gone)
    said = f"cannot write --output {link}: directory {gone.parent} does not exist"
    with pytest.raises(UsageError, match=re.escape(said)):
        check_output_paths({"--output": link}, {})


def test_a_flag_with_no_effect_in_run_batch_shows_no_default_there():
    """run-batch's --drain-timeout said it has no effect, then "(default: 30.0)"; its other server
    flags still show the default they run with."""
    parser = _commands()["run-batch"]
    formatter = parser._get_formatter()
    helps = {
        a.option_strings[0]: formatter._expand_help(a) for a in parser._actions if a.option_strings and a.help
    }
    assert "no effect in run-batch" in helps["--drain-timeout"] and "default" not in helps["--drain-timeout"]
    assert "(default: 256)" in helps["--max-pending"]


def test_a_named_pipe_given_for_an_output_is_not_opened_to_probe_it(tmp_path):
    """`mkfifo p; cat p & radixflow bench --json p`: the check that an output can be written
    opened and closed the pipe before the run, which blocks until a reader comes and then hands
    that reader an end of file (`cat` left), so the run's real write blocked for ever. A pipe
    is written in place: whether it may be written is asked without opening it."""
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    checked = threading.Thread(target=check_output_paths, args=({"--json": fifo}, {}), daemon=True)
    checked.start()
    checked.join(timeout=60)
    blocked = checked.is_alive()
    if blocked:  # a reader comes and goes, releasing the probe's open
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
    assert not blocked, "the probe opened the pipe"


def test_a_named_pipe_that_cannot_be_written_is_refused_in_one_line(tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo, 0o444)
    if os.access(fifo, os.W_OK):  # root may write anything
        pytest.skip("this user may write a read-only file")
    with pytest.raises(UsageError, match=r"cannot write --json .*p: Permission denied"):
        check_output_paths({"--json": fifo}, {})


@pytest.mark.parametrize("command", ["bench", "generate", "score", "serve", "run-batch"])
def test_a_dtype_the_device_refuses_is_one_error_with_no_warning_about_running_in_it(
    command, tmp_path, capsys
):
    """`--dtype float16` on a CPU printed "warning: dtype float16 (below float32): outputs are not
    exactly a no-cache run's ..." and then "error: --dtype: float16 runs on cuda only": a warning
    about a run that was refused the next line. `LLM(...)` and a TOML cell say the error alone."""
    from radixflow.cli import main

    batch = tmp_path / "in.jsonl"
    batch.write_text('{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {}}\n')
    inputs = {
        "bench": ["--groups", "1", "--candidates", "2", "--context-len", "32"],
        "generate": ["--prompt", "hi"],
        "score": ["--context", "hi", "--candidate", "a", "--candidate", "b"],
        "serve": ["--port", "0"],
        "run-batch": ["-i", str(batch)],
    }[command]
    assert main([command, "qwen3_5-tiny", "--dtype", "float16", *inputs]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "radixflow: error: --dtype: float16 runs on cuda only, not on cpu (use float32 or bfloat16)"
    ]


TINY = ["qwen3_5-tiny", "--hardware", "h200", "--cache-memory", "1KiB"]  # --hardware: warned of in a run
SMALL_BUDGET = "--cache-memory: 1KiB cannot hold one KV block"


@pytest.mark.parametrize(
    "argv, error",
    [
        (
            ["generate", "qwen3_5-tiny", "--hardware", "h200", "--temperature", "-1", "--prompt", "hi"],
            "--temperature: must be a number >= 0, got -1",
        ),
        (["bench", "qwen3_5-2b", "--device", "cpu", "--groups", "0"], "--groups: empty workload"),
        (
            ["bench", "qwen3_5-2b", "--clock", "cpu", "--context-len", "300000"],
            "does not fit qwen3_5-2b's context",
        ),
        # a budget below one entry of the model, refused before the model loads
        (["generate", *TINY, "--prompt", "hi"], SMALL_BUDGET),
        (["score", *TINY, "--context", "hi", "--candidate", "a"], SMALL_BUDGET),
        (["run-batch", *TINY, "-i", "{batch}"], SMALL_BUDGET),
        (["serve", *TINY, "--port", "0"], SMALL_BUDGET),
        (
            ["serve", "qwen3_5-tiny", "--hardware", "h200", "--host", "192.0.2.1"],
            "--host: '192.0.2.1' is not",
        ),
        # the long-text lane no body can take: a warning of a server that goes ahead
        (["serve", *TINY, "--long-body-bytes", "8MiB", "--port", "0"], SMALL_BUDGET),
        (["run-batch", *TINY, "--long-body-bytes", "8MiB", "-i", "{batch}"], SMALL_BUDGET),
    ],
)
def test_a_refused_run_is_one_error_line_with_no_warning_about_the_run(argv, error, capsys, tmp_path):
    """`generate --hardware h200 --temperature -1` warned that --hardware had no effect on the run,
    then refused the run; `bench --device cpu --groups 0` likewise. A refused run is its one
    error line (as `score` says a bad input of its own); warnings are for a run that goes ahead."""
    from radixflow.cli import main

    batch = tmp_path / "in.jsonl"
    batch.write_text('{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {}}\n')
    assert main([a.format(batch=batch) for a in argv]) == 2
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert out == "" and line.startswith("radixflow: error: ") and error in line, line


def test_a_fleet_refused_at_its_address_is_one_error_line(monkeypatch, capsys):
    """`serve --replicas 2 --hardware h200 --host 192.0.2.1` warned that --hardware had no effect
    and then refused the address, as one server did."""
    pytest.importorskip("ray.serve")
    pytest.importorskip("uvicorn")
    import radixflow.cluster.launch as launch
    from radixflow.cli import main

    def no_ray(spec: object) -> None:
        raise AssertionError("Ray was started")

    monkeypatch.setattr(launch, "ray_serve", no_ray)
    argv = ["serve", "qwen3_5-tiny", "--replicas", "2", "--hardware", "h200", "--host", "192.0.2.1"]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("radixflow: error: --host: '192.0.2.1' is not"), line
