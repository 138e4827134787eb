"""The pools' big tensors start on huge-page boundaries (where the OS has MADV_HUGEPAGE), read as
zeros, and behave as ordinary tensors; small ones and other dtypes too."""

from __future__ import annotations

import copy
import gc
import mmap
import os
import pickle
import subprocess
import sys

import pytest
import torch

from radixflow.models.kv_pool import KVPool
from radixflow.models.pool_memory import HUGE_PAGE, pool_zeros
from radixflow.models.state_pool import StatePool

huge_pages = pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no MADV_HUGEPAGE here")


@huge_pages
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_big_tensor_starts_on_a_huge_page_and_reads_as_zeros(dtype: torch.dtype) -> None:
    shape = (3 * HUGE_PAGE // 512 + 7, 4, 64)  # not a whole number of huge pages
    t = pool_zeros(shape, dtype, "cpu")
    assert t.shape == shape and t.dtype == dtype and t.is_contiguous()
    assert t.data_ptr() % HUGE_PAGE == 0
    assert not t.any()


def test_small_tensor_is_plain_zeros() -> None:
    t = pool_zeros((5, 2, 3), torch.float32, "cpu")
    assert torch.equal(t, torch.zeros(5, 2, 3))
    assert pool_zeros((0, 4, 8), torch.float32, "cpu").shape == (0, 4, 8)


def test_mapping_outlives_every_other_reference() -> None:
    t = pool_zeros((HUGE_PAGE // 4 + 1,), torch.float32, "cpu")
    view = t[-3:]
    del t
    gc.collect()
    view.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert view.tolist() == [1.0, 2.0, 3.0]


@huge_pages
def test_kv_pool_layers_start_on_huge_pages() -> None:
    kv = KVPool({0: (4, 128), 3: (4, 128)}, 160, 16, torch.float32, "cpu", hidden_size=512)
    for t in [*kv.k.values(), *kv.v.values(), kv.hidden]:
        assert t.data_ptr() % HUGE_PAGE == 0 and not t.any()
    kv.k[3][5] = 1.0  # an ordinary tensor: writes land where reads find them
    assert kv.k[3][5].sum() == 4 * 128 and kv.k[0].sum() == 0


@huge_pages
def test_state_pool_layers_start_on_huge_pages() -> None:
    pool = StatePool({1: ((16, 64, 64), (1536, 3))}, 64, torch.float32, "cpu")
    big, small = pool.tensors[1]
    assert big.shape == (64, 16, 64, 64) and big.data_ptr() % HUGE_PAGE == 0
    assert small.shape == (64, 1536, 3) and not small.any()


# the scripts import torch: 300 s bounds a hang, and a busy machine takes a while to import it
_NO_ROOM = """
import resource, sys
import torch
from radixflow.models.pool_memory import pool_zeros
status = open("/proc/self/status").read()
size = int(status.split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (64 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
try:
    pool_zeros((64 << 20,), torch.float32, "cpu")  # 256 MiB past a 64 MiB headroom
except MemoryError as e:
    print("MemoryError:", e)
"""


@huge_pages
def test_no_room_for_the_mapping_is_a_memory_error_naming_the_size() -> None:
    """mmap's ENOMEM (an OSError the engine would blame on the model) is the MemoryError the
    engine's build turns into "lower kv_blocks or state_slots"."""
    done = subprocess.run([sys.executable, "-c", _NO_ROOM], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.startswith("MemoryError:") and "268435456 bytes" in done.stdout, done.stdout


_NO_ROOM_UNMAPPED = _NO_ROOM.replace(
    "import torch\n", "import torch, mmap\nif hasattr(mmap, 'MADV_HUGEPAGE'): del mmap.MADV_HUGEPAGE\n"
)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="the script reads /proc")
def test_no_room_without_huge_pages_is_a_memory_error_too() -> None:
    """Where the OS offers no MADV_HUGEPAGE (or refuses the mapping) the tensor comes from
    torch's allocator, whose failure was a RuntimeError: a traceback past the engine's build,
    which turns only a MemoryError into "lower kv_blocks or state_slots"."""
    script = [sys.executable, "-c", _NO_ROOM_UNMAPPED]
    done = subprocess.run(script, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.startswith("MemoryError:") and "268435456 bytes" in done.stdout, done.stdout


@huge_pages
def test_a_mapping_refused_for_another_reason_falls_back_to_plain_zeros(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kwargs: object) -> mmap.mmap:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(mmap, "mmap", refuse)
    t = pool_zeros((HUGE_PAGE // 4 + 1,), torch.float32, "cpu")
    assert t.shape == (HUGE_PAGE // 4 + 1,) and not t.any()


@huge_pages
def test_a_pool_of_exactly_one_huge_page_is_mapped_and_copies_like_a_tensor() -> None:
    t = pool_zeros((HUGE_PAGE // 4,), torch.float32, "cpu")
    assert t.data_ptr() % HUGE_PAGE == 0 and not t.any()
    t[-1] = 2.0
    for twin in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t), t.clone()):
        assert torch.equal(twin, t) and twin.data_ptr() != t.data_ptr()


def _mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@huge_pages
def test_pools_dropped_give_their_mappings_back() -> None:
    gc.collect()
    before = _mappings()
    for i in range(50):
        kv = KVPool({0: (2, 64)}, HUGE_PAGE // 512 + i, 1, torch.float32, "cpu")
        kv.k[0][-1] = 1.0
    del kv
    gc.collect()
    assert _mappings() <= before
