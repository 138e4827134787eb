"""The CPU GEMM plan: parsing, measuring, routing by shape class, and exactness of each backend."""

from __future__ import annotations

import gc
import importlib
import weakref
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from model_utils import ZOO_TINY, assert_same_top1, one_thread, prompt, zoo_model  # noqa: F401 (fixture)
from torch import nn

from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.kernels.native.build import Built
from radixflow.models.kv_pool import KVPool
from radixflow.models.layers import Config
from radixflow.models.registry import model_class
from radixflow.models.seq_spec import SeqSpec
from radixflow.models.zoo_catalogue import FAMILY_SOURCES, preset_config
from radixflow.problems import Problem, ProblemError
from radixflow.runners import linear_backends, matmul_measure
from radixflow.runners.linear_backends import BACKENDS, OneDnnLinear
from radixflow.runners.matmul import MatmulPlan, install, parse_plan
from radixflow.runners.matmul_measure import dominant_weight, measure_plan
from radixflow.runners.matmul_plan import BACKEND_NAMES, SHAPE_CLASSES
from radixflow.runners.torch_runner import TorchRunner
from radixflow.runners.torch_settings import settings_problem

pytestmark = pytest.mark.usefixtures("one_thread")
needs_onednn = pytest.mark.skipif(OneDnnLinear().problem() is not None, reason="no oneDNN float32 linear")


def test_plans_parse_from_one_name_or_class_pairs():
    assert tuple(BACKENDS) == BACKEND_NAMES  # the names the torch-free syntax check accepts
    assert parse_plan("auto") is None
    assert parse_plan("onednn") == MatmulPlan(("onednn",) * len(SHAPE_CLASSES), "given")
    assert parse_plan(" decode=onednn, prefill = onednn ").choices == ("mkl", "onednn", "onednn")
    for bad in ("fast", "decode=blas", "huge=mkl", "decode", ""):
        problem = parse_plan(bad)
        assert isinstance(problem, Problem) and problem.param == "matmul" and repr(bad) in problem.message
    twice = parse_plan("single=mkl,single=onednn")  # which one would it be?
    assert isinstance(twice, Problem) and "single is given twice" in twice.message


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("single=mkl,decode=onedn", "'onedn' is not a backend (mkl, onednn, native)"),
        ("singel=mkl", "'singel' is not a class (single, decode, prefill)"),
        ("single=mkl,", "'' is not a class=backend pair"),
        ("mkl,decode=onednn", "'mkl' is not a class=backend pair"),
        ("single=mkl decode=onednn", "'mkl decode=onednn' is not a backend"),
    ],
)
def test_a_plan_with_one_bad_pair_names_that_pair(spec, says):
    """A long plan with one typo said only that the whole of it was not a plan: which part is
    wrong, and what it may be, is what fixes it."""
    problem = parse_plan(spec)
    assert isinstance(problem, Problem) and problem.param == "matmul"
    assert problem.message.startswith(repr(spec)) and says in problem.message and "\n" not in problem.message


def test_a_bad_plan_is_refused_before_the_model_loads(tmp_path):
    with pytest.raises(ProblemError) as err:
        TorchRunner(tmp_path / "missing", 16, 4, 1, matmul="decode=gpu")
    assert err.value.problem.param == "matmul" and "\n" not in str(err.value)


def test_a_given_plan_off_cpu_float32_is_refused_not_ignored(tmp_path):
    # the plan routes CPU float32 Linear layers only: elsewhere torch's own GEMM would run instead
    for plan in ("native", "onednn", "mkl", "prefill=onednn"):
        with pytest.raises(ProblemError) as err:
            TorchRunner(tmp_path / "missing", 16, 4, 1, dtype=torch.bfloat16, matmul=plan)
        assert err.value.problem.param == "matmul" and "CPU float32" in str(err.value)
        assert "\n" not in str(err.value)
        # a GPU (a fleet's replica's: its name alone is checked here) in float32
        problem = settings_problem(plan, "auto", "cuda:0", torch.float32, local=False)
        assert problem is not None and problem.param == "matmul" and "CPU float32" in problem.message


def test_calls_route_by_round_kind_and_rows():
    plan = MatmulPlan(("mkl", "onednn", "mkl"), "given")
    assert [plan.backend_for(rows, True).name for rows in (1, 4, 5, 64, 65)] == [
        "mkl",
        "mkl",
        "onednn",
        "onednn",
        "mkl",  # a decode round this large counts as prefill
    ]
    assert {plan.backend_for(rows, False).name for rows in (1, 16, 5000)} == {"mkl"}
    assert plan.describe() == "single=mkl decode=onednn prefill=mkl (given)"


def test_auto_measures_the_decode_classes_only():
    plan = measure_plan(torch.randn(256, 128), repeats=2)
    assert plan.source == "measured" and plan.choices[-1] == "mkl"  # prefill keeps MKL
    assert [name for name, _ in plan.timings] == ["single", "decode"]
    usable = {name for name, b in BACKENDS.items() if b.problem() is None}
    for (_, times), choice in zip(plan.timings, plan.choices, strict=False):
        assert {n for n, _ in times} == usable and choice in usable


def test_a_lowered_float32_precision_rules_onednn_out():
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        assert OneDnnLinear().problem().startswith("float32 matmuls run at a lowered precision here")
        assert "onednn" not in measure_plan(torch.randn(64, 32), repeats=1).choices
    finally:
        torch.set_float32_matmul_precision(before)


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 48, bias=True)
        self.b = nn.Linear(32, 48, bias=False)
        self.b.weight = self.a.weight  # one tensor, two modules


@needs_onednn
def test_install_routes_every_linear_and_keeps_the_parameters():
    net = Tied()
    names = [n for n, _ in net.named_parameters()]
    router = install(net, parse_plan("single=onednn,decode=mkl"))
    assert [n for n, _ in net.named_parameters()] == names
    assert net.a.forward.prepared["onednn"] is net.b.forward.prepared["onednn"]  # packed once
    x = torch.randn(3, 32)
    with torch.inference_mode():
        plain = F.linear(x, net.a.weight, net.a.bias)
        with router.round(decode_only=True):  # 3 rows of a decode round: the oneDNN class
            routed = net.a(x)
            assert router.decode_only
        assert not router.decode_only  # restored after the round
        assert (routed - plain).abs().max() < 1e-5
        assert torch.equal(net.a(x), plain)  # outside a decode round: MKL, the plain result


@pytest.fixture(scope="module", params=ZOO_TINY)
def model(request: pytest.FixtureRequest) -> Iterator[nn.Module]:
    family = request.param.removesuffix("-tiny")
    config = preset_config(request.param)
    net = model_class(config["model_type"])(Config(config))
    importlib.import_module(FAMILY_SOURCES[family][0]).init_weights(net, torch.Generator().manual_seed(0))
    return net.eval()


def logits(net: nn.Module, tokens: list[int]) -> torch.Tensor:
    n = len(tokens)
    kv = KVPool(net.kv_layout(), -(-n // 16), 16, torch.float32, "cpu")
    state = StatePool(net.state_layout(), 0, torch.float32, "cpu")
    with torch.inference_mode():
        spec = SeqSpec(0, n, list(range(-(-n // 16))))
        return net.compute_logits(net(ForwardBatch.build([(tokens, spec)], kv, state, "cpu")))


@pytest.mark.parametrize("backend", ["onednn", "native"])
def test_every_backend_everywhere_stays_within_the_parity_bar(model: nn.Module, backend: str):
    # Every family's tiny preset with all its Linears on one backend against the MKL path (which
    # is transformers' own GEMM): within the 1e-4 bar the parity tests hold against transformers.
    if BACKENDS[backend].problem() is not None:
        pytest.skip(f"{backend} cannot run here")
    tokens = prompt(3, 40)
    want = logits(model, tokens)
    install(model, parse_plan(backend))
    try:
        got = logits(model, tokens)
    finally:
        for module in model.modules():
            module.__dict__.pop("forward", None)  # back to nn.Linear.forward for the other tests
    assert (got - want).abs().max() <= 1e-4
    assert_same_top1(got, want, 1e-4)


def test_the_dominant_weight_carries_the_most_parameters():
    net = nn.Sequential(nn.Linear(8, 100), nn.Linear(100, 8), nn.Linear(8, 100), nn.Linear(300, 2))
    assert dominant_weight(net).shape == (100, 8)  # 1600 parameters over two modules beat 800 + 600
    assert dominant_weight(nn.Sequential(nn.ReLU())) is None


def test_a_plan_naming_a_backend_that_cannot_run_is_refused(tmp_path, monkeypatch):
    # as on a machine with no C compiler: the refusal said only "native cannot run on this machine"
    why = "no C compiler on PATH (looked for gcc, cc, clang)"
    monkeypatch.setattr(linear_backends, "_native_built", lambda: Built(None, why))
    assert BACKENDS["native"].problem() == f"native kernels could not be built: {why}"
    assert "native" not in measure_plan(torch.randn(64, 32), 1).choices
    with pytest.raises(ProblemError) as err:
        TorchRunner(tmp_path / "missing", 16, 4, 1, matmul="single=native")
    assert err.value.problem.param == "matmul"
    said = "matmul: native cannot run on this machine: native kernels could not be built: "
    assert str(err.value) == said + why


def test_a_cold_class_empties_the_caches_before_each_timed_call():
    order: list[str] = []
    calls = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    times = matmul_measure._interleaved(calls, 2, before=lambda: order.append("evict"))
    assert set(times) == {"a", "b"}
    assert order == ["a", "b"] + ["evict", "a", "evict", "b"] * 2  # warm-up first, untimed
    assert [c.name for c in SHAPE_CLASSES if c.cold] == ["single"]


def test_the_runner_reports_its_plan(tmp_path_factory: pytest.TempPathFactory):
    runner = TorchRunner(zoo_model(tmp_path_factory, "qwen3_5-tiny"), 16, 8, 2, matmul="mkl")
    assert runner.matmul is not None
    assert runner.matmul.plan.describe() == "single=mkl decode=mkl prefill=mkl (given)"


def test_a_routed_net_dropped_frees_its_weights_without_the_cycle_collector():
    # each routed Linear's forward held the module itself: a reference cycle, so the weights of a
    # dropped runner (nearly all of its memory) stayed until the cycle collector next ran
    net = Tied()
    install(net, parse_plan("mkl"))
    weight = weakref.ref(net.a.weight)
    gc.collect()
    gc.disable()
    try:
        del net
        assert weight() is None
    finally:
        gc.enable()
