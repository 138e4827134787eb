"""``--matmul auto`` and the profile store: the routes "auto" measures at each runner start vary
from start to start on a busy machine (three plans in six starts of one weight here), and a stored
profile is keyed by the routes it was timed on, so the profile calibrate stored was found again
only by the runs that happened to measure the same plan. A predicting runner on ``auto`` runs the
routes of the newest profile stored for its model and machine instead of measuring."""

from __future__ import annotations

import os

import pytest

from radixflow.costmodel.hardware.profiles import HardwareProfile

torch = pytest.importorskip("torch")

from radixflow.runners import torch_runner  # noqa: E402
from radixflow.runners.linear_backends import BACKENDS  # noqa: E402
from radixflow.runners.matmul import MatmulPlan  # noqa: E402
from radixflow.runners.profile_store import (  # noqa: E402
    RunnerSettings,
    StoreKey,
    save_stored,
    store_key,
    stored_routes,
)

PROFILE = HardwareProfile("fitted", 1e11, None, 0.027, 0.003, weight_bytes=4, sources={"all": "test"})
ALL_MKL = MatmulPlan(("mkl", "mkl", "mkl"), "measured")


def _other_backend() -> str:
    """A backend other than MKL that runs here (what a plan timed on it names)."""
    other = next((n for n, b in BACKENDS.items() if n != "mkl" and b.problem() is None), None)
    if other is None:
        pytest.skip("no GEMM backend but MKL runs here")
    return other


def _checkpoint(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"a": 1}')
    return tmp_path / "m"


def _store(checkpoint, routes: str, root, kernels: str = "torch", **machine) -> os.PathLike:
    key = store_key(checkpoint, "float32", "cpu", 1, RunnerSettings(kernels, routes))
    return save_stored(PROFILE, StoreKey(key.model, {**key.machine, **machine}), root)


def test_an_auto_runner_runs_the_routes_its_stored_profile_was_timed_on(tmp_path_factory, monkeypatch):
    from model_utils import zoo_model

    path = zoo_model(tmp_path_factory, "qwen3_5-tiny")
    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path_factory.mktemp("store")))
    other = _other_backend()
    timed = f"single={other},decode={other},prefill=mkl"
    settings = RunnerSettings("torch", timed)
    save_stored(PROFILE, store_key(path, "float32", "cpu", torch.get_num_threads(), settings))
    monkeypatch.setattr(torch_runner, "measure_plan", lambda weight: ALL_MKL)  # this start measured another
    runner = torch_runner.TorchRunner(path, 16, 16, 4, kernels="torch")
    assert runner.settings() == settings
    assert runner.round_predictor is not None and runner.round_predictor.source == "profile 'fitted'"
    assert runner.resolved()["matmul"] == f"single={other} decode={other} prefill=mkl (calibrated)"
    # calibrate's runner predicts nothing: it measures, so a new calibration may time a better plan
    timing = torch_runner.TorchRunner(path, 16, 16, 4, kernels="torch", predict_rounds=False)
    assert timing.settings().matmul == ALL_MKL.routes()


def test_the_newest_usable_profile_of_this_model_and_machine_names_the_routes(tmp_path):
    other = _other_backend()
    checkpoint = _checkpoint(tmp_path)
    root = tmp_path / "store"

    def found(kernels: str = "torch") -> str | None:
        return stored_routes(checkpoint, "float32", "cpu", 1, kernels, root)

    assert found() is None
    older = _store(checkpoint, "mkl", root)
    newer = _store(checkpoint, f"single={other},decode=mkl,prefill=mkl", root)
    os.utime(older, (1, 1))
    assert found() == f"single={other},decode=mkl,prefill=mkl"
    assert found("native") is None  # timed on other kernels: its routes cost otherwise there
    newer.write_text('{"model": "cut sh')  # a corrupt file names nothing
    assert found() == "mkl"
    _store(checkpoint, f"single={other},decode={other},prefill=mkl", root, cpu="Another CPU")
    assert found() == "mkl"  # another machine's routes are not this one's


def test_auto_takes_only_a_stored_plan_it_could_have_measured():
    """ "auto" keeps prefill rounds (the prompt logprobs) on MKL: a stored file naming another
    backend there, or one that does not run here, or no plan, is measured over instead."""
    from radixflow.runners.matmul_measure import calibrated_plan

    other = _other_backend()
    assert calibrated_plan(f"single=mkl,decode={other},prefill=mkl") == MatmulPlan(
        ("mkl", other, "mkl"), "calibrated"
    )
    assert calibrated_plan(f"single=mkl,decode=mkl,prefill={other}") is None
    assert calibrated_plan("single=quantum") is None and calibrated_plan(None) is None
