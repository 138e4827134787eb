"""Tensors as the native library takes them: CPU float32, contiguous (or rows with a stride
passed along), by ``data_ptr()``; and a state stepped in a contiguous copy written back where
the caller's tensor lies, so the caller's tensor always holds the new state."""

from __future__ import annotations

import torch


def dense(t: torch.Tensor) -> torch.Tensor:
    # `is_cpu`, not `device.type`: a decode round checks ~180 tensors, and building a
    # torch.device for each costs more than the check itself
    if t.dtype != torch.float32 or not t.is_cpu:
        raise TypeError(f"native kernels take CPU float32 tensors, got {t.dtype} on {t.device}")
    return t.contiguous()


def float_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as rows of contiguous floats (a row stride is passed along: a view of a
    projection's columns is not copied)."""
    return t if t.stride(-1) == 1 and t.dtype == torch.float32 and t.is_cpu else dense(t)


def ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def written_back(target: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
    """``target`` holding ``work``'s values (nothing to do when the step ran on it directly)."""
    if work.data_ptr() != target.data_ptr():
        target.copy_(work)
    return target
