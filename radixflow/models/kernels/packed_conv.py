"""The depthwise causal conv over the prefill chunks of several sequences in one call.

A round of a server carries many short prefill chunks (a candidate after a cached context, a
chat prompt): one ``conv1d`` per chunk and layer cost more in call overhead than in arithmetic.
`PackedConv` lays every chunk out behind its own conv window, ``[window_0, x_0, window_1, x_1,
...]`` (time along rows), runs one depthwise conv over the whole buffer and keeps the outputs
whose receptive field lies inside one sequence: those at the rows of the ``x`` parts. Windows
that straddle two sequences are computed and dropped (``K-1`` per sequence). `conv1d_runs` lays
them out the same way channel-major and runs one depthwise ``conv1d`` over them (the eager Mamba2
and short-conv prefill).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class PackedConv:
    """Where each sequence's window and inputs sit in the packed buffer (built once per round)."""

    window: int  # K - 1: conv-state columns in front of each sequence
    bases: tuple[int, ...]  # buffer row of each sequence's first window row
    input_rows: torch.Tensor  # [T] long: buffer row of every input token, in sequence order
    window_rows: torch.Tensor  # [B * window] long: buffer rows of the windows, sequence-major
    rows: int  # buffer rows in all

    @classmethod
    def build(cls, lengths: list[int], window: int, device: torch.device) -> PackedConv:
        """Layout for sequences of ``lengths`` tokens behind windows of ``window`` rows."""
        bases: list[int] = []
        inputs: list[int] = []
        windows: list[int] = []
        row = 0
        for length in lengths:
            bases.append(row)
            windows.extend(range(row, row + window))
            inputs.extend(range(row + window, row + window + length))
            row += window + length
        return cls(
            window=window,
            bases=tuple(bases),
            input_rows=torch.tensor(inputs, dtype=torch.long, device=device),
            window_rows=torch.tensor(windows, dtype=torch.long, device=device),
            rows=row,
        )

    def pack(
        self, x: torch.Tensor, windows: torch.Tensor, order: Sequence[int] | None = None
    ) -> torch.Tensor:
        """``x [T, C]`` (every sequence's inputs, in order) and ``windows [B, C, K-1]`` (conv states,
        oldest first; ``windows[p]`` is sequence ``order[p]``'s, sequence ``p``'s without
        ``order``) -> the packed buffer ``[rows, C]``."""
        buf = x.new_empty(self.rows, x.shape[1])
        buf[self.input_rows] = x
        rows = self.window_rows
        if order is not None:
            starts = [self.bases[b] + j for b in order for j in range(self.window)]
            rows = torch.tensor(starts, dtype=torch.long, device=x.device)
        buf[rows] = windows.transpose(1, 2).reshape(-1, x.shape[1]).to(x.dtype)
        return buf

    def conv(self, buf: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``silu(conv(x))`` of every input row, ``[T, C]``, from the packed ``buf`` and the depthwise
        ``weight [C, K]``. The output at input row ``r`` reads buffer rows ``r-K+1 .. r``."""
        # As K shifted multiply-adds over the rows: on CPU faster than a depthwise conv1d over
        # [1, C, rows] at a round's few rows, and equal to it.
        taps = weight.t().to(buf.dtype)  # [K, C]
        n = self.rows - self.window
        full = buf[:n] * taps[0]
        for j in range(1, self.window + 1):
            full.addcmul_(buf[j : j + n], taps[j])
        return F.silu(full.index_select(0, self.input_rows - self.window))

    def window_after(self, buf: torch.Tensor, seq: int, tokens: int) -> torch.Tensor:
        """Sequence ``seq``'s conv state after its first ``tokens`` inputs, ``[C, K-1]`` (a view
        of ``buf``)."""
        lo = self.bases[seq] + tokens
        return buf[lo : lo + self.window].t()


def window_after_inputs(
    x: torch.Tensor, rows: torch.Tensor, first: int, window: torch.Tensor, tokens: int
) -> torch.Tensor:
    """A sequence's conv state after its first ``tokens`` inputs, ``[C, K-1]`` (oldest first),
    read from its inputs where they lie: rows ``rows[first : first + tokens]`` of ``x [*, C]``,
    behind its restored ``window [C, K-1]`` (the state before them)."""
    keep = window.shape[1]
    if tokens >= keep:
        return x[rows[first + tokens - keep : first + tokens]].t()
    return torch.cat([window[:, tokens:], x[rows[first : first + tokens]].t().to(window.dtype)], dim=1)


def conv1d_runs(
    x: torch.Tensor,
    rows: torch.Tensor,
    lengths: list[int],
    windows: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
) -> tuple[torch.Tensor, Callable[[int, int], torch.Tensor]]:
    """``conv(x) + bias`` of several sequences' prefill tokens as one depthwise ``conv1d`` (the
    eager Mamba2 and short-conv prefill): token p reads row ``rows[p]`` of ``x [*, C]``, sequence
    b's ``lengths[b]`` tokens consecutive, behind its window ``windows[b] [C, K-1]``; ``weight
    [C, K]``. The sequences are laid out channel-major, ``[C, window_0 x_0 window_1 x_1 ...]``,
    as `ssd.causal_conv` lays out one (so a lone sequence is that op, to the bit, and the layout
    is the one conv1d runs fastest on a CPU), and the outputs straddling two sequences dropped.
    Returns ``([tokens, C]`` (a transposed view), the window of sequence b after its first t
    tokens ``[C, K-1]``)."""
    keep = weight.shape[1] - 1
    picked = x.index_select(0, rows)
    parts, bases, columns, lo = [], [], [], 0
    for b, n in enumerate(lengths):
        parts += [windows[b].to(x.dtype), picked[lo : lo + n].t()]
        bases.append(lo + b * keep)  # column of sequence b's first window column
        columns.extend(range(bases[-1], bases[-1] + n))  # its outputs' columns
        lo += n
    full = torch.cat(parts, dim=1)  # [C, sum(K-1 + n)]
    w = weight.to(x.dtype).unsqueeze(1)  # [C, 1, K]
    out = F.conv1d(full.unsqueeze(0), w, None if bias is None else bias.to(x.dtype), groups=full.shape[0])[0]
    if len(lengths) > 1:  # a lone sequence has no straddling outputs
        out = out.index_select(1, torch.tensor(columns, dtype=torch.long, device=out.device))

    def window_after(seq: int, tokens: int) -> torch.Tensor:
        return full[:, bases[seq] + tokens : bases[seq] + tokens + keep]

    return out.t(), window_after
