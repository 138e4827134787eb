"""The torch runner's round predictor: profiles stored by model and machine, found again only for
the same pair; a bad stored file is a one-line warning; the runner predicts each round and the
bench reports the error; the sim's results carry no predictor block."""

from __future__ import annotations

import json
import logging

import pytest

from radixflow.costmodel.hardware.profile_files import STORED_KEYS
from radixflow.costmodel.hardware.profiles import HardwareProfile
from radixflow.runners.profile_store import (
    RunnerSettings,
    StoreKey,
    load_stored,
    machine_identity,
    model_identity,
    save_stored,
    store_key,
)

MACHINE = {"cpu": "Test CPU", "cpus": 2, "threads": 1, "torch": "2.x", "device": "cpu", "accelerator": None}
PROFILE = HardwareProfile(
    "fitted", 1e11, None, 0.027, 0.003, kind_scale={"gdn": 16.0}, weight_bytes=4, sources={"all": "test"}
)


def test_a_stored_profile_is_found_again_by_model_and_machine(tmp_path):
    key = StoreKey("qwen3_5-small-abc-float32", MACHINE)
    path = save_stored(PROFILE, key, tmp_path)
    assert path.is_file() and path.is_relative_to(tmp_path)
    assert set(json.loads(path.read_text())) == STORED_KEYS  # what --hardware recognises and refuses
    loaded = load_stored(StoreKey(key.model, dict(MACHINE)), tmp_path)
    assert loaded is not None and loaded.round_overhead_s == PROFILE.round_overhead_s
    assert loaded.kind_scale["gdn"] == 16.0


def test_a_store_cut_short_leaves_the_old_profile_and_no_partial_file(tmp_path, monkeypatch):
    """A write that failed (a full disk, a Ctrl-C) left its ``<model>.tmp<pid>`` file beside the
    profile, one per failed run, never removed."""
    key = StoreKey("qwen3_5-small-abc-float32", MACHINE)
    path = save_stored(PROFILE, key, tmp_path)
    before = path.read_bytes()

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.replace", full_disk)
    with pytest.raises(OSError):
        save_stored(HardwareProfile("other", 2e11, None, 0.01, 0.001), key, tmp_path)
    assert [p.name for p in path.parent.iterdir()] == [path.name] and path.read_bytes() == before


@pytest.mark.parametrize(
    "other",
    [
        StoreKey("qwen3_5-small-abc-float32", {**MACHINE, "cpu": "Another CPU"}),
        StoreKey("qwen3_5-small-abc-float32", {**MACHINE, "threads": 2}),
        StoreKey("qwen3_5-small-abc-bfloat16", MACHINE),
        StoreKey("lfm2-small-abc-float32", MACHINE),
    ],
)
def test_another_machine_or_model_does_not_load_it(tmp_path, other):
    save_stored(PROFILE, StoreKey("qwen3_5-small-abc-float32", MACHINE), tmp_path)
    assert load_stored(other, tmp_path) is None


def test_a_file_claiming_another_machine_is_not_used(tmp_path, caplog):
    key = StoreKey("m-abc-float32", MACHINE)
    path = save_stored(PROFILE, key, tmp_path)
    data = json.loads(path.read_text())
    data["machine"]["cpu"] = "Another CPU"  # a hash collision, or a hand-copied file
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="radixflow.predictor"):
        assert load_stored(key, tmp_path) is None
    assert "another model or machine" in caplog.text


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not valid JSON"),
        ('{"model": "m-abc-float32", "machine": null}', "another model or machine"),
        (None, "'flops'"),  # a profile with a bad value
        (b"\xff\xfe", "not valid JSON"),
        ('{"flops": ' + "9" * 5000 + "}", "not valid JSON"),  # past Python's 4300-digit limit
        ("[" * 100_000 + "]" * 100_000, "not valid JSON"),  # raised RecursionError from the runner
    ],
)
def test_a_bad_stored_profile_is_a_one_line_warning(tmp_path, caplog, content, says):
    """A bad file is passed over with a line that names what it is about, as the command line's
    warnings do (it read "ignoring the stored round profile P: P: profile key ...", no source, the
    path twice), and what the runner does instead; a deeply nested one raised."""
    key = StoreKey("m-abc-float32", MACHINE)
    path = key.path(tmp_path)
    path.parent.mkdir(parents=True)
    if content is None:
        bad = {**PROFILE.to_dict(), "flops": -1.0}
        content = json.dumps({"model": key.model, "machine": MACHINE, "profile": bad})
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="radixflow.predictor"):
        assert load_stored(key, tmp_path) is None
    [record] = caplog.records
    message = record.getMessage()
    assert says in message and "\n" not in message
    assert record.exc_info is None
    assert message.startswith(f"radixflow: warning: ignoring the stored round profile {path}: ")
    assert message.count(str(path)) == 1
    assert message.endswith("; the round predictor starts from the nominal prior")


def test_a_checkpoint_is_one_model_however_its_path_is_spelled(tmp_path, monkeypatch):
    """``calibrate --model .`` in the checkpoint's directory stored its fit as "-<hash>-float32"
    (the name of "." is empty), which a runner given the directory's path never found."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"a": 1}')
    named = model_identity(tmp_path / "m", "float32")
    monkeypatch.chdir(tmp_path / "m")
    assert model_identity(".", "float32") == named and named.startswith("m-")
    assert model_identity(tmp_path / "m" / ".." / "m", "float32") == named


def test_a_store_that_cannot_be_searched_is_a_one_line_warning(tmp_path, caplog, monkeypatch):
    """A machine's directory another user made unsearchable (a shared $RADIXFLOW_CACHE) raised
    PermissionError from the look for the file: every torch runner of the model died of it."""
    import pathlib

    key = StoreKey("m-abc-float32", MACHINE)
    save_stored(PROFILE, key, tmp_path)

    def unsearchable(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(pathlib.Path, "is_file", unsearchable)
    with caplog.at_level(logging.WARNING, logger="radixflow.predictor"):
        assert load_stored(key, tmp_path) is None
    [record] = caplog.records
    assert "Permission denied" in record.getMessage() and "\n" not in record.getMessage()


def test_a_model_directory_of_a_long_name_has_its_profile_stored_and_found(tmp_path):
    """A directory name of over ~229 bytes made the store's file name (``<name>-<hash>-<dtype>.json``)
    longer than a file system allows: calibrate could not store the fit, and every torch runner of
    the model (bench, generate, serve) died looking for it (OSError: File name too long)."""
    from radixflow.runners.profile_store import stored_profiles

    checkpoint = tmp_path / ("m" * 250)
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text('{"a": 1}')
    key = StoreKey(model_identity(checkpoint, "bfloat16"), MACHINE)
    assert load_stored(key, tmp_path) is None
    path = save_stored(PROFILE, key, tmp_path)
    assert len(path.name.encode()) <= 255 and stored_profiles(checkpoint, tmp_path) == [path]
    loaded = load_stored(key, tmp_path)
    assert loaded is not None and loaded.round_overhead_s == PROFILE.round_overhead_s
    other = tmp_path / ("m" * 249 + "n")  # the same config under another long name: its own model
    other.mkdir()
    (other / "config.json").write_text('{"a": 1}')
    assert model_identity(other, "bfloat16") != key.model


def test_identities_name_model_config_dtype_and_machine(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"a": 1}')
    first = model_identity(tmp_path / "m", "float32")
    (tmp_path / "m" / "config.json").write_text('{"a": 2}')
    assert first.startswith("m-") and first.endswith("-float32")
    assert model_identity(tmp_path / "m", "float32") != first
    machine = machine_identity("cpu", 3, RunnerSettings("native", "single=native,decode=mkl,prefill=mkl"))
    assert machine["threads"] == 3 and machine["device"] == "cpu" and machine["cpu"]
    assert machine["kernels"] == "native" and machine["matmul"] == "single=native,decode=mkl,prefill=mkl"


def test_a_profile_stored_before_kernels_and_matmul_were_keyed_is_passed_over_quietly(tmp_path, caplog):
    """A file stored under the older key (no kernels, no matmul plan) is not where a runner looks
    now: it starts from the nominal prior, with no warning, until calibrate stores a new one."""
    save_stored(PROFILE, StoreKey("m-abc-float32", MACHINE), tmp_path)
    now = StoreKey("m-abc-float32", {**MACHINE, "kernels": "torch", "matmul": None})
    with caplog.at_level(logging.WARNING, logger="radixflow.predictor"):
        assert load_stored(now, tmp_path) is None
    assert caplog.records == []


def test_the_runner_starts_from_the_stored_profile_or_the_nominal_prior(tmp_path_factory, monkeypatch):
    torch = pytest.importorskip("torch")
    from model_utils import zoo_model

    from radixflow.runners.torch_runner import TorchRunner

    path = zoo_model(tmp_path_factory, "qwen3_5-tiny")
    root = tmp_path_factory.mktemp("store")
    monkeypatch.setenv("RADIXFLOW_CACHE", str(root))
    fresh = TorchRunner(path, 16, 16, 4)
    assert fresh.round_predictor is not None and fresh.round_predictor.source.startswith("nominal")
    save_stored(PROFILE, store_key(path, "float32", "cpu", torch.get_num_threads(), fresh.settings()))
    stored = TorchRunner(path, 16, 16, 4, matmul=fresh.settings().matmul or "auto")
    assert stored.round_predictor is not None and stored.round_predictor.source == "profile 'fitted'"
    assert TorchRunner(path, 16, 16, 4, predict_rounds=False).round_predictor is None


@pytest.mark.parametrize(
    ("stored", "run"),
    [
        ({"kernels": "torch", "matmul": "mkl"}, {"kernels": "native", "matmul": "mkl"}),
        ({"kernels": "torch", "matmul": "mkl"}, {"kernels": "torch", "matmul": "onednn"}),
    ],
    ids=["kernels", "matmul"],
)
def test_a_profile_timed_on_other_kernels_or_matmul_routes_is_no_prior(
    tmp_path_factory, monkeypatch, stored, run
):
    """The store's key had no kernels and no matmul plan: a profile timed on the torch kernels and
    MKL was the prior of a runner on the native kernels or oneDNN, whose rounds cost otherwise."""
    torch = pytest.importorskip("torch")
    from model_utils import zoo_model

    from radixflow.runners.torch_runner import TorchRunner

    path = zoo_model(tmp_path_factory, "qwen3_5-tiny")
    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path_factory.mktemp("store")))
    timed = TorchRunner(path, 16, 16, 4, predict_rounds=False, **stored)
    assert timed.settings() == RunnerSettings("torch", "single=mkl,decode=mkl,prefill=mkl")
    save_stored(PROFILE, store_key(path, "float32", "cpu", torch.get_num_threads(), timed.settings()))
    assert TorchRunner(path, 16, 16, 4, **stored).round_predictor.source == "profile 'fitted'"
    assert TorchRunner(path, 16, 16, 4, **run).round_predictor.source.startswith("nominal")


def test_rounds_carry_the_prediction_and_the_bench_reports_its_error(tmp_path_factory, monkeypatch):
    pytest.importorskip("torch")
    from engine_utils import Engines
    from model_utils import zoo_model

    from radixflow.bench.harness import run_policies
    from radixflow.runners.torch_runner import TorchRunner
    from radixflow.scheduler.request import Request
    from radixflow.scheduler.sampling import SamplingParams
    from radixflow.scheduler.scheduler import SchedulerConfig

    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path_factory.mktemp("store")))
    path = zoo_model(tmp_path_factory, "qwen3_5-tiny")
    cfg = SchedulerConfig(block_size=16, num_blocks=64, num_state_slots=16, token_budget=64)
    runner = TorchRunner(path, cfg.block_size, cfg.num_blocks, cfg.num_state_slots)
    greedy = SamplingParams(max_tokens=4)
    reqs = [Request(f"r{i}", tuple(range(1 + i, 40 + i)), sampling=greedy) for i in range(4)]
    [run] = run_policies(reqs, Engines(runner, cfg), ["adaptive"], None)
    assert all(r.predicted_s is not None and r.predicted_s > 0 for r in run.rounds)
    assert [r.predicted_from for r in run.rounds] == list(range(len(run.rounds)))
    error = run.result.predictor
    assert error is not None and error.rounds == len(run.rounds) - 5 > 0
    assert error.median is not None and error.p90 is not None and error.p90 >= error.median >= 0
    assert run.result.to_dict()["predictor"]["rounds"] == error.rounds


def test_a_repeated_bench_reports_the_error_over_every_trial(tmp_path_factory, monkeypatch):
    """With ``--repeat`` the predictor block came from each policy's first trial alone, where the
    runner's first rounds are: every policy read 0 rounds, though the later trials had them."""
    pytest.importorskip("torch")
    from engine_utils import Engines
    from model_utils import zoo_model

    from radixflow.bench.harness import run_policies
    from radixflow.runners.torch_runner import TorchRunner
    from radixflow.scheduler.request import Request
    from radixflow.scheduler.sampling import SamplingParams
    from radixflow.scheduler.scheduler import SchedulerConfig

    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path_factory.mktemp("store")))
    path = zoo_model(tmp_path_factory, "qwen3_5-tiny")
    cfg = SchedulerConfig(block_size=16, num_blocks=64, num_state_slots=16, token_budget=64)
    runner = TorchRunner(path, cfg.block_size, cfg.num_blocks, cfg.num_state_slots)
    reqs = [Request("r0", tuple(range(1, 20)), sampling=SamplingParams(max_tokens=2))]
    runs = run_policies(reqs, Engines(runner, cfg), ["native", "adaptive"], None, repeats=4)
    for run in runs:
        counted = [r for t in run.trials() for r in t if r.predicted_from >= 5]
        assert run.result.predictor is not None and run.result.predictor.rounds == len(counted) > 0


def test_the_trace_and_metrics_show_the_prediction(tmp_path, zoo):
    pytest.importorskip("torch")
    from radixflow.options import EngineOptions, plan_engine
    from radixflow.scheduler.request import Request
    from radixflow.server.metrics import ServerMetrics

    path = tmp_path / "trace.json"
    options = EngineOptions(model="qwen3_5-tiny", runner="torch", trace_out=str(path))
    setup = plan_engine(options).build([40, 40])
    engine = setup.engine(policy="adaptive")
    engine.run([Request("a", tuple(range(1, 40))), Request("b", tuple(range(2, 41)))])
    engine.flush_events()
    events = json.loads(path.read_text())["traceEvents"]
    rounds = [e for e in events if e.get("cat") == "round" and e["ph"] == "X"]
    assert len(rounds) == len(engine.rounds) > 0
    for event, record in zip(rounds, engine.rounds, strict=True):
        assert event["args"]["predicted_us"] == pytest.approx(record.predicted_s * 1e6, abs=1e-3)
    metrics = ServerMetrics()
    for record in engine.rounds:
        metrics.on_round(record)
    shown = metrics.render()[0].decode()
    assert f"radixflow_round_prediction_relative_error_count {float(len(engine.rounds))}" in shown
