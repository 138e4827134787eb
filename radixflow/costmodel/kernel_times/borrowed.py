"""Kernels with no measurement, priced on their roofline at a measured kernel's efficiency.

aiconfigurator-core has no vLLM tables for Mamba2's conv and chunked SSD scan or for LFM2's
gated short conv. Their nearest measured relatives are Gated DeltaNet's kernels (gdn_perf):
the same causal depthwise conv (``causal_conv1d_fn`` / ``causal_conv1d_update``) and a chunked
linear recurrence over a per-head state (``chunk_gated_delta_rule`` / the fused recurrent decode
step). An unmeasured call costs its own roofline time divided by the efficiency (roofline time /
measured time) of that GDN kernel at the same batch and length, on the GDN shape nearest in
size (conv channels; state elements), and no less than the fastest call of that kernel measured
at all (its launch floor: a smaller shape does not launch faster). Sources say
``roofline: ...`` and name the borrowed kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from radixflow.costmodel.kernel_times import kernel_work as kw
from radixflow.costmodel.kernel_times.contract import TermCost
from radixflow.costmodel.kernel_times.measured_tables import MeasuredTable, Site


def gdn_site_channels(site: Site) -> float:
    k_heads, v_heads, head_k, head_v, _ = site
    return kw.gdn_channels(k_heads, v_heads, head_k, head_v)


def gdn_site_state(site: Site) -> float:
    _, v_heads, head_k, head_v, _ = site
    return v_heads * head_k * head_v


class Borrowed:
    """Rooflines for Mamba2 and the short conv at the efficiency of GDN's measured kernels."""

    def __init__(self, gdn_tables: dict[str, MeasuredTable], roofline: kw.Roofline) -> None:
        self.gdn = gdn_tables
        self.roofline = roofline
        self._nearest: dict[tuple[str, float], Site] = {}
        self._floor: dict[str, float] = {}

    def nearest(self, kernel: str, size: Callable[[Site], float], value: float) -> Site:
        """The GDN shape of ``kernel`` whose ``size`` is closest to ``value`` in log2."""
        key = (kernel, value)
        found = self._nearest.get(key)
        if found is None:
            sites = sorted(self.gdn[kernel].sites.tables)
            found = min(sites, key=lambda s: abs(math.log2(size(s) / value)))
            self._nearest[key] = found
        return found

    def borrow(self, kernel: str, site: Site, batch: float, seq_len: float, work: kw.Work) -> float:
        """Seconds of ``work`` at the efficiency GDN's ``kernel`` reaches at ``site`` and these axes,
        at least that kernel's launch floor."""
        table = self.gdn[kernel]
        ref_seconds, _ = table.lookup(site, (batch, seq_len))
        ref_work = table.spec.work(site, batch, seq_len)
        return max(ref_seconds * self.roofline.time(work) / self.roofline.time(ref_work), self.floor(kernel))

    def floor(self, kernel: str) -> float:
        """The fastest measured call of a GDN kernel, any shape."""
        if kernel not in self._floor:
            grids = self.gdn[kernel].sites.tables.values()
            self._floor[kernel] = min(min(c.ys) for g in grids for c in g.curves)
        return self._floor[kernel]

    def describe(self, kernel: str, site: Site, by: str) -> str:
        label = self.gdn[kernel].label
        return f"{label} (nearest by {by}: k/v heads {site[0]}/{site[1]})"

    def mamba2(
        self,
        phase: str,
        batch: int,
        seq_len: int,
        heads: int,
        head_dim: int,
        state: int,
        groups: int,
        conv: int,
    ) -> TermCost:
        """``phase`` "prefill": ``batch`` sequences' chunks of ``seq_len`` tokens (conv + chunked
        SSD scan); "decode": ``batch`` sequences of one token (conv update + state update)."""
        channels = kw.mamba2_channels(heads, head_dim, state, groups)
        n = batch * seq_len
        conv_work = kw.depthwise_conv(n, channels, conv, state_tokens=batch * (conv - 1))
        scan_work = SCAN_WORK[phase](batch, seq_len, heads, head_dim, state, groups)
        conv_kernel, scan_kernel = f"conv_{phase}", f"rule_{phase}"
        conv_site = self.nearest(conv_kernel, gdn_site_channels, channels)
        scan_site = self.nearest(scan_kernel, gdn_site_state, heads * head_dim * state)
        seconds = self.borrow(conv_kernel, conv_site, batch, seq_len, conv_work) + self.borrow(
            scan_kernel, scan_site, batch, seq_len, scan_work
        )
        source = (
            f"roofline: no Mamba2 measurement, so conv at the efficiency of "
            f"{self.describe(conv_kernel, conv_site, 'channels')}, "
            f"and {'SSD scan' if phase == 'prefill' else 'state update'} at that of "
            f"{self.describe(scan_kernel, scan_site, 'state size')}"
        )
        return TermCost(seconds, conv_work[0] + scan_work[0], conv_work[1] + scan_work[1], source)

    def short_conv(self, tokens: int, channels: int, kernel: int) -> TermCost:
        """LFM2's gated short conv over ``tokens`` tokens, at the efficiency GDN's prefill conv
        (causal_conv1d_fn) reaches on one sequence of as many tokens."""
        work = kw.short_conv(tokens, channels, kernel)
        site = self.nearest("conv_prefill", gdn_site_channels, channels)
        seconds = self.borrow("conv_prefill", site, 1, tokens, work)
        source = (
            "roofline: no short-conv measurement, so at the efficiency of "
            f"{self.describe('conv_prefill', site, 'channels')}"
        )
        return TermCost(seconds, work[0], work[1], source)


def _state_update(
    batch: float, seq_len: float, heads: int, head_dim: int, state: int, groups: int
) -> kw.Work:
    """One state-update step per sequence (``seq_len`` is 1 in the decode phase)."""
    return kw.mamba2_state_update(batch * seq_len, heads, head_dim, state, groups)


# phase -> the work of the scan over (batch, seq_len, heads, head_dim, state, groups)
SCAN_WORK: dict[str, Callable[[float, float, int, int, int, int], kw.Work]] = {
    "prefill": kw.mamba2_scan,
    "decode": _state_update,
}
