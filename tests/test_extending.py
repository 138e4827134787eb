"""A policy added from outside the package (docs/extending.md): what a registry entry that cannot
serve is told, where it is built, in one line naming the option; never a traceback mid-run."""

from __future__ import annotations

import json
import re
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
from engine_utils import new_engine

from radixflow.cache.eviction import EVICTION_POLICIES, LRU, EntrySizes
from radixflow.cache.eviction_checked import make_eviction_policy
from radixflow.cli.app import main
from radixflow.problems import ProblemError
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.scheduler.admission import ADMISSIONS, make_admission
from radixflow.scheduler.placement import PLACEMENTS, make_placement
from radixflow.scheduler.policy import FCFS, SCHEDULING_POLICIES, Native, default_placement, make_policy
from radixflow.scheduler.sampling import SamplingParams
from radixflow.scheduler.scan import ScanAction


class NoOnBlocked(FCFS):  # FCFS is a base: it has no `name` nor `on_blocked` of its own
    name = "no-on-blocked"


class NoPlacementAttr:
    name = "bare"


class TypoPlacement(Native):
    name = "typo"
    placement = "brnach"


class NoSizes(LRU):
    def __init__(self) -> None:  # an eviction factory is called with the entry sizes
        pass


class NoPositions:
    name = "no-positions"


class NoMayEvict:
    name = "no-may-evict"


def _refused(build, param: str, *words: str) -> None:
    with pytest.raises(ProblemError) as caught:
        build()
    assert caught.value.problem.param == param
    said = str(caught.value)
    assert "\n" not in said
    for word in words:
        assert word in said


def test_a_policy_lacking_a_protocol_method_is_refused_where_it_is_built(monkeypatch):
    monkeypatch.setitem(SCHEDULING_POLICIES, "nob", NoOnBlocked)
    _refused(lambda: make_policy("nob"), "policy", "'nob'", "NoOnBlocked", "on_blocked")


def test_a_policy_registered_as_an_instance_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(SCHEDULING_POLICIES, "inst", Native())
    _refused(lambda: make_policy("inst"), "policy", "'inst'", "not a class")


def test_a_policy_without_a_placement_of_its_own_is_refused(monkeypatch):
    monkeypatch.setitem(SCHEDULING_POLICIES, "bare", NoPlacementAttr)
    _refused(lambda: default_placement("bare"), "policy", "'bare'", "placement")


def test_a_policy_naming_an_unregistered_placement_is_refused(monkeypatch):
    monkeypatch.setitem(SCHEDULING_POLICIES, "typo", TypoPlacement)
    _refused(lambda: make_policy("typo"), "policy", "'brnach'", "branch")
    _refused(lambda: default_placement("typo"), "policy", "'brnach'")


def test_an_eviction_factory_that_takes_no_sizes_is_refused(monkeypatch):
    monkeypatch.setitem(EVICTION_POLICIES, "nosizes", NoSizes)
    _refused(lambda: make_eviction_policy("nosizes", EntrySizes()), "eviction", "'nosizes'", "sizes")


def test_an_eviction_policy_lacking_a_member_is_refused(monkeypatch):
    monkeypatch.setitem(EVICTION_POLICIES, "half", lambda sizes: NoPositions())
    _refused(lambda: make_eviction_policy("half"), "eviction", "'half'", "priority", "clock")


def test_a_placement_or_admission_lacking_its_method_is_refused(monkeypatch):
    monkeypatch.setitem(PLACEMENTS, "nop", NoPositions)
    monkeypatch.setitem(ADMISSIONS, "nom", NoMayEvict)
    _refused(lambda: make_placement("nop"), "placement", "'nop'", "positions")
    _refused(lambda: make_admission("nom"), "admission", "'nom'", "may_evict")


class NotCallable(Native):
    name = "not-callable"
    on_blocked = None  # a method the run would call: a TypeError's traceback mid-run


def test_an_entry_whose_protocol_method_is_no_method_is_refused(monkeypatch):
    monkeypatch.setitem(SCHEDULING_POLICIES, "nc", NotCallable)
    _refused(
        lambda: make_policy("nc"), "policy", "'nc' (NotCallable)", "its on_blocked is None, not a method"
    )


def test_the_built_in_entries_all_serve():
    for name in SCHEDULING_POLICIES:
        assert make_policy(name).placement == default_placement(name)
    for name in EVICTION_POLICIES:
        make_eviction_policy(name, EntrySizes())
    for name in PLACEMENTS:
        make_placement(name)
    for name in ADMISSIONS:
        make_admission(name)


EXTENDING = Path(__file__).resolve().parent.parent / "docs" / "extending.md"


def _python_blocks() -> list[str]:
    """The page's Python blocks, in order: the plug-in, its use from `LLM`, weights for the
    hand-written config, a family registered from outside."""
    return re.findall(r"```python\n(.*?)```", EXTENDING.read_text(), re.S)


def _write_config(directory: Path) -> None:
    """The page's hand-written config.json into ``directory``."""
    config = re.search(r"```\n(\{\"model_type\".*?)```", EXTENDING.read_text(), re.S)
    assert config is not None
    directory.mkdir()
    (directory / "config.json").write_text(config.group(1))


REGISTRIES = (SCHEDULING_POLICIES, EVICTION_POLICIES, PLACEMENTS, ADMISSIONS)


@pytest.fixture
def plugin(monkeypatch):
    """docs/extending.md's `fifo_plugin.py`, its first Python block, imported; the registries as
    they were afterwards."""
    saved = [dict(r) for r in REGISTRIES]
    module = types.ModuleType("fifo_plugin")
    monkeypatch.setitem(sys.modules, "fifo_plugin", module)
    try:
        exec(_python_blocks()[0], module.__dict__)
        yield module
    finally:
        for registry, was in zip(REGISTRIES, saved, strict=True):
            registry.clear()
            registry.update(was)


def test_the_docs_plugin_runs_in_the_bench_beside_native_with_the_same_outputs(plugin, tmp_path):
    out = tmp_path / "bench.json"
    flags = ["--policy", "native", "--policy", "fifo", "--eviction", "fifo", "--placement", "every-block"]
    assert main(["bench", "--runner", "sim", *flags, "--groups", "2", "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["results"]
    assert [r["policy"] for r in runs] == ["native", "fifo"]
    assert runs[0]["outputs_sha256"] == runs[1]["outputs_sha256"]
    assert runs[1]["tokens_computed"] > runs[0]["tokens_computed"]  # fifo recomputes, native waits


def test_the_docs_plugin_refuses_to_register_a_name_twice(plugin):
    with pytest.raises(ValueError, match="'fifo' is registered already"):
        exec(_python_blocks()[0], dict(plugin.__dict__))


def test_without_the_plugin_the_command_line_says_what_the_docs_quote(capsys):
    assert main(["bench", "--runner", "sim", "--policy", "fifo"]) == 2
    quoted = "radixflow: error: --policy: unknown policy 'fifo' (known: adaptive, native, radixflow)"
    assert quoted in " ".join(EXTENDING.read_text().split())
    assert capsys.readouterr().err.strip() == quoted


def test_the_docs_hand_written_config_is_a_model_the_sim_costs(tmp_path, capsys):
    model = tmp_path / "tiny-llama"
    _write_config(model)
    argv = ["bench", "--runner", "sim", "--model", str(model), "--groups", "2", "--candidates", "2"]
    assert main([*argv, "--json", str(tmp_path / "out.json")]) == 0
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert main(argv) == 2
    assert "config.json has no 'hidden_size'" in capsys.readouterr().err


def test_the_docs_family_registered_from_outside_is_a_model_type_the_sim_costs(monkeypatch, tmp_path):
    from radixflow.costmodel.shape.config_readers import READERS
    from radixflow.models.registry import FAMILIES

    for registry in (FAMILIES, READERS):  # absent now and after the test, whatever the block adds
        monkeypatch.setitem(registry, "my_llama", None)
        monkeypatch.delitem(registry, "my_llama")
    model = tmp_path / "mine"
    _write_config(model)
    text = (model / "config.json").read_text().replace('"llama"', '"my_llama"')
    (model / "config.json").write_text(text)
    assert main(["cost", str(model)]) == 2  # not registered yet
    exec(_python_blocks()[3], {})
    assert main(["cost", str(model)]) == 0


def test_the_docs_weights_for_the_hand_written_config_run_on_the_torch_runner(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    _write_config(tmp_path / "tiny-llama")
    exec(_python_blocks()[2], {})
    fast = ["--matmul", "mkl", "--kernels", "torch"]  # no startup measurement nor kernel build
    assert main(["generate", "--model", "tiny-llama", "--prompt", "hello", "--max-tokens", "2", *fast]) == 0


def test_the_docs_experiment_variants_name_the_plugins_entries(plugin, tmp_path):
    from radixflow.experiments.config_parse import load_config

    config = tmp_path / "my.toml"
    config.write_text(
        'name = "x"\npolicies = ["native", "fifo@every-block", "fifo@every-block+fifo"]\n'
        '[defaults]\nrunner = "sim"\neviction = "fifo"\n[[grid]]\nmodel = ["qwen3_5-2b"]\n'
    )
    variants = [(v.policy, v.placement, v.eviction) for v in load_config(config).variants]
    fifo = ("fifo", "every-block")
    assert variants == [("native", None, None), (*fifo, None), (*fifo, "fifo")]
    for quoted in ('policies = ["native", "fifo@every-block"]', '"fifo@every-block+fifo"'):
        assert quoted in EXTENDING.read_text()


class BlockedNone(Native):
    """A plugin mistake: `on_blocked` falls off its end (None) instead of returning SKIP."""

    name = "blocked-none"

    def on_blocked(self, request, match, draft):
        pass


class ReadyFalse(Native):
    """A plugin mistake: `on_ready` answers a bool instead of None / SKIP / STOP."""

    name = "ready-false"

    def on_ready(self, request, match, reuse, draft):
        return False


@pytest.mark.parametrize(
    ("entry", "said"), [(BlockedNone, "on_blocked returned None"), (ReadyFalse, "on_ready returned False")]
)
def test_a_policy_answering_outside_its_protocol_is_told_in_one_line_not_read_as_another_action(
    monkeypatch, capsys, entry, said
):
    # it was read silently: on_blocked's None as SKIP, on_ready's False as STOP
    monkeypatch.setitem(SCHEDULING_POLICIES, entry.name, entry)
    assert main(["bench", "--runner", "sim", "--policy", entry.name, "--groups", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("radixflow: error: ")
    assert f"'{entry.name}'" in err and said in err


class AlwaysFollow(Native):
    name = "always-follow"

    def on_blocked(self, request, match, draft):
        return ScanAction.FOLLOW


def test_a_policy_following_on_a_runner_that_cannot_is_told_in_one_line(monkeypatch):
    # a runner whose recurrent layers cannot restore a state saved in the same round
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    runner.model = replace(runner.model, same_round_state=False)
    monkeypatch.setitem(SCHEDULING_POLICIES, AlwaysFollow.name, AlwaysFollow)
    cfg = SchedulerConfig(token_budget=512, max_requests=8, block_size=8, num_blocks=512, num_state_slots=16)
    engine = new_engine(runner, cfg, policy=AlwaysFollow.name)
    stem = tuple(range(1, 193))
    for i in range(2):  # the second waits on the first's checkpoint at the stem's end
        engine.submit(Request(f"r{i}", stem + (500 + i,), sampling=SamplingParams(max_tokens=1)))
    with pytest.raises(ProblemError) as caught:
        while engine.has_work():
            engine.step()
    assert caught.value.problem.param == "policy"
    said = "'always-follow' (AlwaysFollow) on_blocked returned FOLLOW on a runner that cannot"
    assert said in str(caught.value)
