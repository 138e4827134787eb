"""Every norm of every family in bfloat16, to the bit against transformers' module of the same
name: the plain norms (alone and fused with the residual add before them), the Gated DeltaNet
output norm and the Mamba2 gated norms.

In float32 the families' orders of the weight multiply and the cast back agree; in bfloat16
they are one rounding apart (Llama, Qwen3, LFM2 and Falcon-H1 cast the normed value to bfloat16
and then multiply by the weight; Nemotron-H and the ``1 + w`` norms multiply in float32 and
cast the product), so only a bfloat16 comparison tells them apart. The full-attention families' whole bfloat16
prefill then equals transformers' to the bit; the hybrids' does not (their scans round apart
from transformers' by more than a norm's rounding), so their norms are compared one by one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hf_configs import CONFIGS, VOCAB, save_reference
from model_utils import BLOCK, Pools, one_thread, prompt, run  # noqa: F401 (fixture)

from radixflow.models.families.falcon_h1 import FalconH1ForCausalLM, falcon_mamba_spec
from radixflow.models.io.loader import load_model
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS
from radixflow.models.kv_pool import KVPool
from radixflow.models.layers import Config, RMSNorm
from radixflow.models.mixers.gated_deltanet import GatedRMSNorm
from radixflow.models.mixers.mamba2 import Mamba2Mixer
from radixflow.models.seq_spec import SeqSpec

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")
BF16 = torch.bfloat16
EXACT_PREFILL = ("llama-gqa3", "qwen3-untied", "lfm2-k2")  # no scan in bfloat16


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """(ours, transformers') in bfloat16, from the checkpoint transformers saved."""
    path: Path = tmp_path_factory.mktemp(request.param)
    save_reference(request.param, path)
    # loaded, not `.to(BF16)`: that would round the rotary tables' float32 buffers too
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=BF16)
    return load_model(path, "cpu", BF16), ref.eval()


def ref_module(ref: torch.nn.Module, name: str) -> torch.nn.Module:
    # Nemotron-H's checkpoint names its stack `backbone`, transformers' module `model`
    return ref.get_submodule(name.replace("backbone.", "model.", 1))


def rows(dim: int, seed: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    """Rows of spread-out values (the norm rounds differently on most of them)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(9, dim, generator=gen) * 3).to(dtype)


def named(model: torch.nn.Module, kind: type) -> list[tuple[str, torch.nn.Module]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, kind)]


@torch.no_grad()
def test_plain_norms(pair) -> None:
    ours, ref = pair
    norms = named(ours, RMSNorm)
    assert norms
    for name, norm in norms:
        want = ref_module(ref, name)
        dim = norm.weight.numel()
        x, delta = rows(dim, 1), rows(dim, 2)
        assert torch.equal(norm(x), want(x)), name
        assert torch.equal(norm.residual(x, delta)[1], want(x + delta)), name


@torch.no_grad()
def test_gated_deltanet_norms(pair) -> None:
    ours, ref = pair
    norms = named(ours, GatedRMSNorm) or pytest.skip("no Gated DeltaNet layer")
    for name, norm in norms:  # the mixer runs the kernels' form
        dim = norm.weight.numel()
        x, gate = rows(dim, 3), rows(dim, 4)
        got = TORCH_KERNELS.gated_rms_norm(x, gate, norm.weight, norm.eps)
        assert torch.equal(got, ref_module(ref, name)(x, gate)), name


@torch.no_grad()
def test_mamba2_gated_norms(pair) -> None:
    """The scan output is float32 on both sides; the out projection reads the gated norm cast
    to the model's dtype."""
    ours, ref = pair
    mixers = [(n, m) for n, m in named(ours, Mamba2Mixer) if m.spec.norm != "none"]
    for name, mixer in mixers or pytest.skip("no Mamba2 layer with a gated norm"):
        y, z = rows(mixer.spec.inner, 5, torch.float32), rows(mixer.spec.inner, 6)
        want = ref_module(ref, f"{name}.norm")(y, z)
        assert torch.equal(mixer.gate(y, z, TORCH_KERNELS).to(BF16), want.to(BF16)), name


def test_falcon_mamba2_gate_without_a_norm() -> None:
    """Falcon-H1 without ``mamba_rms_norm``: transformers' torch forward multiplies the float32
    scan output by ``silu(gate)`` taken in the model's dtype (``FalconH1Mixer.torch_forward``)."""
    _, fields = CONFIGS["falcon_h1-mup"]
    config = Config({**FalconH1ForCausalLM.config_defaults, **fields, "mamba_rms_norm": False})
    mixer = Mamba2Mixer(falcon_mamba_spec(config), 0).to(BF16)
    y, z = rows(mixer.spec.inner, 5, torch.float32), rows(mixer.spec.inner, 6)
    assert torch.equal(mixer.gate(y, z, TORCH_KERNELS), y * F.silu(z))


@pytest.mark.parametrize("pair", EXACT_PREFILL, indirect=True)
def test_full_attention_prefill_logits(pair) -> None:
    ours, ref = pair
    tokens = [t % VOCAB for t in prompt(1, 33)]
    pools = Pools(ours)
    pools.kv = KVPool(ours.kv_layout(), pools.NUM_BLOCKS, BLOCK, BF16, "cpu")  # the runner's KV dtype
    (got,) = run(ours, pools, [(tokens, SeqSpec(0, len(tokens), pools.blocks(len(tokens))))])
    with torch.no_grad():
        want = ref(input_ids=torch.tensor([tokens]), use_cache=False).logits[0].float()
    assert torch.equal(got, want)


def test_a_cast_first_norm_has_a_plain_weight() -> None:
    # no transformers family casts before a `1 + w` multiply: such a norm is a family's mistake
    with pytest.raises(ValueError, match="plain weight"):
        RMSNorm(4, offset=1.0, cast_first=True)
