"""SplitLinear: a large product's output columns on two threads, bit-identical to one MKL call."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from model_utils import ZOO_TINY, one_thread, prompt  # noqa: F401 (fixture)

from radixflow.runners import split_linear
from radixflow.runners.matmul import install, measure_plan, parse_plan
from radixflow.runners.split_linear import ColumnHelper, SplitLinear

pytestmark = pytest.mark.usefixtures("one_thread")
needs_two_cpus = pytest.mark.skipif(not SplitLinear().usable(), reason="one CPU: nothing to split onto")


@needs_two_cpus
@pytest.mark.parametrize(
    ("shape", "out_features", "bias"),
    [
        ((196, 512), 1536, False),
        ((196, 1536), 512, True),
        ((2, 40, 512), 1025, True),  # 3-D input, odd width
        ((4096, 512), 8, False),  # a narrow output head of many rows
    ],
)
def test_a_split_product_equals_one_call_bit_for_bit(shape, out_features, bias):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    w = torch.randn(out_features, shape[-1], generator=g)
    b = torch.randn(out_features, generator=g) if bias else None
    backend = SplitLinear()
    with torch.inference_mode():
        got, want = backend.linear(x, w, b), F.linear(x, w, b)
    assert backend._helper is not None  # it was large enough to split
    assert got.shape == want.shape and torch.equal(got, want) and got.is_inference()


def test_a_small_product_is_not_split():
    backend = SplitLinear()
    x, w = torch.randn(4, 64), torch.randn(64, 64)  # 16k multiply-adds
    assert torch.equal(backend.linear(x, w, None), F.linear(x, w))
    assert backend._helper is None  # no thread was ever started


class Asleep(ColumnHelper):
    """A helper whose thread never picks anything up: its core is busy elsewhere."""

    def _loop(self) -> None:
        return


def test_the_caller_takes_back_a_half_the_helper_has_not_started():
    helper = Asleep()
    helper.submit(lambda: torch.ones(3))
    assert torch.equal(helper.collect(), torch.ones(3))  # computed here, no wait
    helper.submit(lambda: torch.zeros(2))  # and the helper is free for the next product
    assert torch.equal(helper.collect(), torch.zeros(2))


def test_an_error_in_the_helper_reaches_the_caller():
    helper = ColumnHelper()
    started = threading.Event()

    def fails() -> torch.Tensor:
        started.set()
        raise RuntimeError("bad half")

    helper.submit(fails)
    assert started.wait(10)  # the helper thread has it: collect must wait, then re-raise
    with pytest.raises(RuntimeError, match="bad half"):
        helper.collect()
    helper.submit(lambda: torch.ones(1))  # still usable afterwards
    assert torch.equal(helper.collect(), torch.ones(1))


@needs_two_cpus
def test_threads_sharing_one_backend_each_get_their_own_product(monkeypatch):
    monkeypatch.setattr(split_linear, "MIN_MACS", 1)
    backend = SplitLinear()
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(8, 32, generator=g) for _ in range(4)]
    w = torch.randn(48, 32, generator=g)
    results: dict[int, list[bool]] = {i: [] for i in range(4)}

    def work(i: int) -> None:
        torch.set_num_threads(1)
        for _ in range(50):
            results[i].append(torch.equal(backend.linear(xs[i], w, None), F.linear(xs[i], w)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(len(r) == 50 and all(r) for r in results.values())


def test_auto_never_picks_split_and_a_plan_may_name_it():
    timings = measure_plan(torch.randn(256, 128), repeats=1).timings
    assert timings and all(n != "split" for _, times in timings for n, _ in times)
    assert parse_plan("prefill=split").choices == ("mkl", "mkl", "split")


@needs_two_cpus
@pytest.mark.parametrize("name", ZOO_TINY)
def test_every_family_computes_the_same_logits_split(name, monkeypatch):
    from test_matmul import logits  # the tiny-model forward the other backends are checked with

    from radixflow.models.layers import Config
    from radixflow.models.registry import model_class
    from radixflow.models.zoo import preset_config

    monkeypatch.setattr(split_linear, "MIN_MACS", 1)  # tiny models: split every product
    net = model_class(preset_config(name)["model_type"])(Config(preset_config(name))).eval()
    tokens = prompt(5, 40)
    want = logits(net, tokens)
    install(net, parse_plan("split"))
    assert torch.equal(logits(net, tokens), want)
