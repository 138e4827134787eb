"""`cache_memory`: one byte budget, parsed and checked the same through every door (flags, TOML
cells, `LLM(...)`, serve): a bad size, or a budget that cannot hold one request, is one line
naming it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from radixflow.cli import main
from radixflow.experiments.config import ExperimentConfigError
from radixflow.experiments.config_parse import parse_config
from radixflow.options import EngineOptions, plan_engine
from radixflow.options.sizes import exact_size, parse_size, show_size
from radixflow.problems import Problem, ProblemError

SMALL = ["--groups", "1", "--candidates", "2", "--context-len", "16", "--candidate-len", "16"]
TINY = "qwen3_5-tiny"


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2GiB", 2 << 30),
        ("512MB", 512 * 10**6),
        ("300M", 300 * 10**6),
        ("1073741824", 1 << 30),
        ("1.5 KiB", 1536),
        ("64k", 64000),
        ("7b", 7),
        ("1.0", 1),
        ("1.5k", 1500),
    ],
)
def test_sizes_with_units(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("-1G", "positive"),
        ("0", "at least one byte"),
        ("0.5", "at least one byte"),
        ("1.5", "a whole number of bytes"),  # was 1 byte, shown back as "1B"
        ("4096.25B", "a whole number of bytes"),
        ("abc", "like 2GiB"),
        ("GiB", "like 2GiB"),
        ("5i", "like 2GiB"),
        ("1e9", "like 2GiB"),
        ("2PiB", "at most 1PiB"),
        ("9" * 400, "at most 1PiB"),
        ("٣G", "like 2GiB"),
    ],
)
def test_bad_sizes_are_one_line_problems(text, says):
    problem = parse_size(text)
    assert isinstance(problem, Problem) and says in problem.message and "\n" not in problem.message


def _bench_error(capsys, *extra: str) -> str:
    code = main(["bench", *SMALL, *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


def test_the_command_line_refuses_in_one_line_naming_the_flag(capsys):
    assert _bench_error(capsys, "--cache-memory=-2GiB").startswith("radixflow: error: --cache-memory: ")
    assert _bench_error(capsys, "--cache-memory", "4\x00GiB").startswith("radixflow: error: --cache-memory: ")
    line = _bench_error(capsys, "--cache-memory", "1KiB")  # below one block and one checkpoint
    assert line.startswith("radixflow: error: --cache-memory: 1KiB cannot hold one KV block")
    line = _bench_error(capsys, "--cache-memory", "1500")  # shown as given, not as 1.46KiB
    assert line.startswith("radixflow: error: --cache-memory: 1.46KiB (1500 bytes) cannot hold one KV block")
    line = _bench_error(capsys, "--cache-memory", "1.5")
    assert line.startswith("radixflow: error: --cache-memory: must be a whole number of bytes"), line
    line = _bench_error(capsys, "--cache-memory", "19.6MiB")  # one block and a slot, not the prompt
    assert "--cache-memory: " in line and "cannot hold one request" in line


def test_the_least_budget_an_error_asks_for_is_enough(capsys):
    # qwen3_5-2b at block size 32 needs 20594688 bytes (19.64MiB): "give at least 19.6MiB" was
    # rounded down, and 19.6MiB was refused again with the same advice
    line = _bench_error(capsys, "--block-size", "32", "--cache-memory", "1KiB")
    least = line.rsplit("give at least ", 1)[1]
    assert least == "19.7MiB", line
    assert main(["bench", *SMALL, "--block-size", "32", "--cache-memory", least]) == 0


def test_without_state_slots_the_working_set_is_the_prompts_kv(capsys):
    # --state-slots 0: no state is ever held, yet the check charged the longest prompt a slot
    # (19.3MiB) and refused a budget that holds its KV; the engine runs it
    entry = plan_engine(EngineOptions(model="qwen3_5-2b", runner="sim")).choice.entry_bytes(16)
    kv = 2 * entry.block  # the longest prompt: 32 tokens, 2 blocks
    assert main(["bench", *SMALL, "--state-slots", "0", "--cache-memory", str(kv)]) == 0
    line = _bench_error(capsys, "--state-slots", "0", "--cache-memory", str(kv - 1))
    assert "cannot hold one request" in line and f"needs {kv} bytes of KV" in line, line


def test_a_size_shown_as_a_least_rounds_up():
    for n in [1, 1023, 1024, 1025, 20594688, 65884160, 10**9 + 7, (1 << 30) - 1, 999 * 1024 + 1]:
        shown = show_size(n, at_least=True)
        assert parse_size(shown) >= n, (n, shown)
        assert len(shown.rstrip("KMGTiB").replace(".", "")) <= 4, shown
    assert show_size(20594688, at_least=True) == "19.7MiB" and show_size(20594688) == "19.6MiB"


def test_an_exact_size_reads_back_as_the_same_bytes():
    for n in [1, 500, 1023, 1024, 1536, 4 << 20, 8_000_000, 10**9 + 7, 3 << 30]:
        assert parse_size(exact_size(n)) == n, n
    assert [exact_size(n) for n in (4 << 20, 1536, 8_000_000, 500)] == ["4MiB", "1.5KiB", "8000000", "500B"]


def test_a_budget_caps_the_pools_within_what_it_holds():
    plan = plan_engine(EngineOptions(model="qwen3_5-2b", runner="sim", cache_memory="2GiB"))
    entry, config = plan.choice.entry_bytes(16), plan.scheduler_config()
    assert config.cache_memory == 2 << 30
    held = config.num_blocks * entry.block + entry.slot  # all KV, beside one checkpoint
    assert held <= 2 << 30 < held + entry.block
    assert config.num_state_slots * entry.slot + entry.block <= 2 << 30
    capped = plan_engine(EngineOptions(model="qwen3_5-2b", runner="sim", cache_memory="2GiB", kv_blocks=100))
    assert capped.scheduler_config().num_blocks == 100  # an explicit cap stays a cap
    attention = plan_engine(EngineOptions(model="qwen3-4b", runner="sim", cache_memory="1GiB"))
    assert attention.scheduler_config().num_state_slots == 0


CELL = """
name = "t"
[defaults]
runner = "sim"
model = "qwen3_5-2b"
cache_memory = {value}
[defaults.workload]
groups = 1
candidates = 2
context_len = 16
candidate_len = 16
"""


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('"-1G"', "positive"),
        ('"1KiB"', "cannot hold one KV block"),
        ('"2\\u0000G"', "like 2GiB"),  # as --max-body-bytes says it
        ('"abc"', "like 2GiB"),
    ],
)
def test_a_toml_cell_refuses_in_one_line_naming_the_key(value, says, tmp_path: Path):
    data = tomllib.loads(CELL.format(value=value))
    with pytest.raises(ExperimentConfigError) as e:
        parse_config(data, "t.toml", tmp_path)
    assert str(e.value).startswith("t.toml: defaults.cache_memory: ") and says in str(e.value)
    assert "\n" not in str(e.value)


def test_a_toml_cell_keeps_a_good_budget(tmp_path: Path):
    config = parse_config(tomllib.loads(CELL.format(value='"1GiB"')), "t.toml", tmp_path)
    assert [c.settings["cache_memory"] for c in config.cells] == ["1GiB"]


def test_llm_and_serve_refuse_in_one_line_naming_it(zoo, capsys):
    from radixflow.generation import LLM

    with pytest.raises(ProblemError, match=r"^cache_memory: must be a positive size"):
        LLM(TINY, cache_memory="-5M")
    with pytest.raises(ProblemError, match=r"^cache_memory: .* cannot hold one KV block"):
        LLM(TINY, cache_memory="10b")
    code = main(["serve", TINY, "--cache-memory", "10b"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("radixflow: error: --cache-memory: "), err


def test_serve_with_replicas_refuses_in_one_line_before_ray_starts(zoo, capsys):
    # each replica checked the budget as it loaded the model: the deployment failed, and the
    # driver ended in Ray's traceback ("Deploying application radixflow failed")
    code = main(["serve", TINY, "--replicas", "2", "--cache-memory", "10b"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("radixflow: error: --cache-memory: "), err


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_torch_plan_sizes_entries_as_the_runner_allocates_them(zoo, dtype):
    """The caps are sized from the plan's entry bytes before the runner exists; the ledger charges
    the runner's real tensors: they agree."""
    plan = plan_engine(EngineOptions(model=TINY, dtype=dtype, cache_memory="4MiB"))
    entry = plan.choice.entry_bytes(16)
    setup = plan.build()
    model = setup.runner.model
    assert (entry.block, entry.slot) == (model.kv_bytes_per_token * 16, model.checkpoint_bytes)
    engine = setup.engine()
    assert engine.cache.ledger.budget == 4 << 20 and engine.cache.ledger.block_bytes == entry.block


def test_torch_pools_at_the_budgets_caps_beyond_memory_name_cache_memory(zoo, monkeypatch):
    from radixflow.options import machine

    monkeypatch.setattr(machine, "available_memory", lambda: 1 << 20)
    with pytest.raises(ProblemError, match=r"^cache_memory: the torch runner.s cache .* lower cache_memory"):
        plan_engine(EngineOptions(model=TINY, cache_memory="64MiB")).build()


def test_a_size_of_a_thousand_units_or_more_is_not_said_in_exponent_notation():
    # 1023KiB was said "1.02e+03KiB" (a KV block of this size in "cannot hold one KV block (...)"),
    # and 1PiB, the largest budget, "1.02e+03TiB"
    assert show_size(1023 * 1024) == "1023KiB" and show_size(1000 * 1024) == "1000KiB"
    assert show_size(1 << 50) == "1024TiB" and exact_size(1 << 50) == "1024TiB"
    for n in [1023 * 1024 + 1000, 1000 * 1024, (1 << 50) - 1, 1023 * (1 << 30) + 7]:
        said, least = show_size(n), show_size(n, at_least=True)
        assert "e" not in said + least and parse_size(least) >= n, (n, said, least)


def test_a_budget_in_bytes_is_taken_as_an_integer_at_every_door(tmp_path: Path):
    # LLM(cache_memory=2**31) and a TOML cell's cache_memory = 2147483648 were refused ("must be
    # a string"), where ServerConfig(max_body_bytes=4194304) takes an integer of bytes
    for value in (2 << 30, "2GiB", "2147483648"):
        options = EngineOptions.from_mapping({"cache_memory": value}, model="qwen3_5-2b", runner="sim")
        plan = plan_engine(options)
        assert plan.scheduler_config().cache_memory == 2 << 30, value
    config = parse_config(tomllib.loads(CELL.format(value="2147483648")), "t.toml", tmp_path)
    assert [c.settings["cache_memory"] for c in config.cells] == [2 << 30]
    for value, says in ((0, "must be from 1B to 1024TiB, got 0"), (True, "must be a size like 2GiB")):
        with pytest.raises(ProblemError) as e:
            EngineOptions.from_mapping({"cache_memory": value})
        assert e.value.problem.param == "cache_memory" and e.value.problem.message.startswith(says)
