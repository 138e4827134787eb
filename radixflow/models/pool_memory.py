"""The pools' big tensors on transparent huge pages, where the OS offers them.

A decode round streams each layer's KV and recurrent state from memory. On 4 KiB pages such a
stream crosses a page, a TLB walk and a restart of the core's hardware prefetchers, every 4 KiB;
on 2 MiB pages the decode kernels alone ran 10-13% faster (docs/real-models.md, "Memory-level
changes to the decode kernels"). A CPU tensor of at least one huge page therefore comes from an
anonymous mapping advised ``MADV_HUGEPAGE`` before anything touches it (Linux with transparent
huge pages in ``madvise`` or ``always`` mode); any other tensor, device or OS gets
``torch.zeros``. Either way the tensor starts as zeros (a fresh mapping reads as zeros) and the
arithmetic on it is the same: only where its bytes lie changes.
"""

from __future__ import annotations

import contextlib
import errno
import math
import mmap

import torch

HUGE_PAGE = 2 << 20  # bytes: x86-64's and aarch64's (4 KiB base pages) transparent huge page


def pool_zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A zero tensor of ``shape``, on huge pages where it is a CPU tensor of at least one."""
    nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if torch.device(device).type != "cpu" or advice is None or nbytes < HUGE_PAGE:
        return _zeros(shape, dtype, device, nbytes)
    size = nbytes + HUGE_PAGE  # room to start on a huge-page boundary
    try:
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as e:
        # ENOMEM is the MemoryError the engine's build turns into "lower kv_blocks or
        # state_slots" (a bare OSError would be blamed on the model); any other refusal of the
        # mapping leaves the tensor to torch's allocator
        if e.errno == errno.ENOMEM:
            raise _no_memory(shape, nbytes) from None
        return _zeros(shape, dtype, device, nbytes)
    whole = torch.frombuffer(region, dtype=torch.uint8)  # keeps the mapping alive; touches nothing
    start = -whole.data_ptr() % HUGE_PAGE
    # a kernel without transparent huge pages refuses the advice: the mapping serves on small pages
    with contextlib.suppress(OSError):
        region.madvise(advice, start, size - start)
    return whole[start : start + nbytes].view(dtype).view(shape)


def _zeros(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, nbytes: int
) -> torch.Tensor:
    """``torch.zeros``, its allocator's refusal as the `MemoryError` a mapping's ENOMEM is: torch
    raises a bare RuntimeError for a CPU allocation that fails (a GPU's is torch.OutOfMemoryError),
    which the engine's build would pass on as a traceback."""
    try:
        return torch.zeros(shape, dtype=dtype, device=device)
    except RuntimeError as e:
        if isinstance(e, torch.OutOfMemoryError) or "DefaultCPUAllocator" in str(e):
            raise _no_memory(shape, nbytes) from None
        raise


def _no_memory(shape: tuple[int, ...], nbytes: int) -> MemoryError:
    return MemoryError(f"no memory for a pool tensor of {nbytes} bytes {tuple(shape)}")
