"""`max_body_bytes`: a size as `cache_memory` takes one (``8MiB``, ``512KB``, ``1048576``), read
by the one parser (`options.sizes.parse_size`) through every door (serve's and run-batch's flags,
`ServerConfig(...)`), with the same default and the same one-line error."""

from __future__ import annotations

import pytest
from server_utils import MODEL

from radixflow.cli import build_parser, main
from radixflow.cli.serve_setup import server_settings
from radixflow.options.sizes import parse_size
from radixflow.options.spec import checked
from radixflow.problems import Problem, ProblemError
from radixflow.server.config import DEFAULT_MAX_BODY_BYTES, ServerConfig

SIZES = [("8MiB", 8 << 20), ("512KB", 512_000), ("1.5 MiB", 3 << 19), ("1048576", 1 << 20)]


@pytest.mark.parametrize(("text", "size"), SIZES)
def test_the_flag_takes_a_size_with_units(text, size):
    """``--max-body-bytes 8MiB`` was "must be an integer, got '8MiB'" where ``--cache-memory``
    takes it."""
    for command in (["serve", MODEL], ["run-batch", MODEL, "-i", "in.jsonl", "-o", "out.jsonl"]):
        args = build_parser().parse_args([*command, "--max-body-bytes", text])
        assert checked(ServerConfig, {"max_body_bytes": args.max_body_bytes}).max_body_bytes == size
    _, config = server_settings(build_parser().parse_args(["serve", MODEL, "--max-body-bytes", text]))
    assert config.max_body_bytes == size


@pytest.mark.parametrize(("given", "size"), [*SIZES, (1 << 20, 1 << 20), (DEFAULT_MAX_BODY_BYTES, 4 << 20)])
def test_server_config_takes_a_size_or_bytes(given, size):
    assert ServerConfig(max_body_bytes=given).max_body_bytes == size
    assert ServerConfig().max_body_bytes == DEFAULT_MAX_BODY_BYTES  # one default, every door


@pytest.mark.parametrize("text", ["abc", "-1MiB", "4e6", " "])
def test_a_bad_size_is_the_cache_memory_line_naming_the_flag(capsys, text):
    said = parse_size(text)
    assert isinstance(said, Problem)
    assert main(["serve", MODEL, f"--max-body-bytes={text}"]) == 2
    err = capsys.readouterr().err
    assert err == f"radixflow: error: --max-body-bytes: {said.message}\n", err
    with pytest.raises(ProblemError) as refused:
        ServerConfig(max_body_bytes=text)
    assert refused.value.problem == Problem("max_body_bytes", said.message)


# "2PiB" was "must be at most 1PiB" (the size parser's own cap, which 1PiB then passed to be
# "must be at most 1099511627776, got 1125899906842624"): a limit the option does not have, and
# bytes the user never typed
@pytest.mark.parametrize("given", ["1000", "0", "0.5", "2TiB", "2PiB", "9" * 400])
def test_a_size_outside_the_limits_is_the_help_s_range_and_the_value_given(capsys, given):
    assert main(["serve", MODEL, "--max-body-bytes", given]) == 2
    said = f"must be from 1KiB to 1TiB, got {given!r}" if len(given) < 40 else "must be from 1KiB to 1TiB"
    err = capsys.readouterr().err
    assert err.startswith(f"radixflow: error: --max-body-bytes: {said}") and err.count("\n") == 1


def test_a_bare_byte_count_with_a_fraction_is_refused_as_one(capsys):
    # 1023.9 bytes was read as 1023 (a byte budget is whole bytes; a unit may carry a fraction)
    assert main(["serve", MODEL, "--max-body-bytes", "1023.9"]) == 2
    said = "must be a whole number of bytes (or a size with a unit), got '1023.9'"
    err = capsys.readouterr().err
    assert err.startswith(f"radixflow: error: --max-body-bytes: {said}") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("field", "given", "says"),
    [
        ("max_body_bytes", 1023, "from 1KiB to 1TiB, got 1023"),
        ("max_body_bytes", 2**41, f"from 1KiB to 1TiB, got {2**41}"),
        ("long_body_bytes", 0, "from 1B to 1TiB, got 0"),
        ("long_body_bytes", "0", "from 1B to 1TiB, got '0'"),
        ("long_body_bytes", "1.5TiB", "from 1B to 1TiB, got '1.5TiB'"),
    ],
)
def test_server_config_says_the_range_in_sizes(field, given, says):
    with pytest.raises(ProblemError) as refused:
        ServerConfig(**{field: given})
    assert refused.value.problem == Problem(field, f"must be {says}")


@pytest.mark.parametrize("given", [True, 4.5, [1]])
def test_a_value_neither_size_nor_bytes_is_refused(given):
    with pytest.raises(ProblemError) as refused:
        ServerConfig(max_body_bytes=given)
    problem = refused.value.problem
    assert problem.param == "max_body_bytes" and "size like 2GiB" in problem.message


def test_the_help_says_it_takes_units(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "[--max-body-bytes SIZE]" in shown  # the usage line
    assert "as --cache-memory takes it, e.g. 8MiB" in shown.rsplit("--max-body-bytes SIZE", 1)[1][:200]


@pytest.mark.parametrize(("text", "size"), SIZES)
def test_long_body_bytes_takes_a_size_as_max_body_bytes_does(capsys, text, size):
    """``--long-body-bytes 64KiB`` was "must be an integer" where ``--max-body-bytes`` took it."""
    for command in (["serve", MODEL], ["run-batch", MODEL, "-i", "in.jsonl", "-o", "out.jsonl"]):
        args = build_parser().parse_args([*command, "--long-body-bytes", text])
        assert checked(ServerConfig, {"long_body_bytes": args.long_body_bytes}).long_body_bytes == size
    assert ServerConfig(long_body_bytes=text).long_body_bytes == size
    assert main(["serve", MODEL, "--long-body-bytes=abc"]) == 2
    said = parse_size("abc")
    assert isinstance(said, Problem)
    assert capsys.readouterr().err == f"radixflow: error: --long-body-bytes: {said.message}\n"
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "[--long-body-bytes SIZE]" in shown
    assert "a size with a unit as" in shown.rsplit("--long-body-bytes SIZE", 1)[1][:200]
