"""One measured kernel table as a lookup: shipped rows -> seconds for any shape, and where from.

A table's rows are grouped by *site* (the shape a kernel was measured at: GEMM's (n, k),
attention's (heads, kv heads, head dim), ...) into a `Curve` along one axis or a `Grid2` over
(batch, axis). A lookup at a measured site interpolates along its axes. An unmeasured site
borrows measured efficiency (roofline time / measured time): where each of its coordinates lies
between measured values and every corner of that box was measured, the log efficiency is
interpolated log2-multilinearly between the corners (on GEMM's (n, k) grid this validates
better on held-out shapes than taking the nearest); otherwise the nearest site's efficiency is
taken. Sources read ``measured: <table> (<how>)``, e.g. ``(interpolated)``,
``(nearest (n, k)=(2560, 10240): exact)`` or ``(between measured (n, k)=(16384..51200, 2560): exact)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter

from radixflow.costmodel.kernel_times import kernel_work as kw
from radixflow.costmodel.kernel_times.curves import EXACT, EXTRAPOLATED, INTERPOLATED, Curve, Grid2, Sites
from radixflow.costmodel.kernel_times.table_files import Row

MS = 1e-3
KIND_ORDER = (EXACT, INTERPOLATED, EXTRAPOLATED)  # the least direct of several reads names them all
Site = tuple[int, ...]
WorkFn = Callable[..., kw.Work]  # (site, *axes) -> (FLOPs, bytes)
# (site, nearest site, axes) -> the nearest site's axes to read (same by default)
AxisMap = Callable[[Site, Site, tuple[float, ...]], tuple[float, ...]]


def same_axes(site: Site, near: Site, axes: tuple[float, ...]) -> tuple[float, ...]:
    return axes


@dataclass(frozen=True)
class TableSpec:
    """How one table's rows split into site and axes, and what a call at them does."""

    site_len: int  # leading key columns naming the site
    site_name: str  # for sources, e.g. "(n, k)"
    work: WorkFn
    mode: str = "linear"  # interpolation along the last axis (curves.INTERPOLATIONS)
    axis_map: AxisMap = same_axes
    site_order: tuple[int, ...] | None = None  # key columns of the site, if not the leading ones
    axes_order: tuple[int, ...] | None = None  # key columns of the axes, if not the rest


class MeasuredTable:
    """Rows of one kernel class, indexed by site; `lookup` answers (seconds, source)."""

    def __init__(self, spec: TableSpec, label: str, roofline: kw.Roofline, rows: Iterable[Row]) -> None:
        self.spec, self.label, self.roofline = spec, label, roofline
        # columns picked in C: a generator per row made the GEMM table's ~36k rows most of its build
        self._site_of, self._axes_of = _picker(spec.site_order), _picker(spec.axes_order)
        grouped: dict[Site, list[tuple[float, ...]]] = {}
        for row in rows:
            site, axes = self.split(row[:-1])
            grouped.setdefault(site, []).append((*axes, row[-1] * MS))
        if not grouped:
            raise ValueError(f"{label}: no rows")
        n_axes = len(next(iter(grouped.values()))[0]) - 1
        self.n_axes = n_axes
        make = Curve if n_axes == 1 else Grid2
        self.sites: Sites[Curve | Grid2] = Sites(
            {site: make(pts, spec.mode) for site, pts in grouped.items()}  # type: ignore[misc]
        )

    def split(self, key: Sequence) -> tuple[Site, tuple[float, ...]]:
        spec = self.spec
        if spec.site_order is None:
            return tuple(key[: spec.site_len]), tuple(key[spec.site_len :])
        return self._site_of(key), self._axes_of(key)

    def roof(self, site: Site, axes: Sequence[float]) -> float:
        return self.roofline.time(self.spec.work(site, *axes))

    def _read(self, site: Site, axes: tuple[float, ...]) -> tuple[float, str]:
        table = self.sites.tables[site]
        if self.n_axes == 1:
            return table.at(axes[0], lambda x: self.roof(site, (x,)))  # type: ignore[call-arg]
        return table.at(axes[0], axes[1], lambda a, x: self.roof(site, (a, x)))  # type: ignore[call-arg]

    def lookup(self, site: Site, axes: tuple[float, ...]) -> tuple[float, str]:
        """Seconds of one call at ``site`` and ``axes`` (in the table's axis order), and how they
        were found (``exact``, ``interpolated``, ``nearest <site>=(...): extrapolated``, ...)."""
        if site in self.sites.tables:
            return self._read(site, axes)
        corners = self.sites.corners(site)
        if corners is None:
            near = self.sites.nearest(site)
            seconds, how = self._borrow(site, axes, near)
            shown = ", ".join(map(str, near))
            return seconds, f"nearest {self.spec.site_name}=({shown}): {how}"
        # log-linear in each coordinate of the shape: the weighted mean of the corners' log times
        # at their efficiencies, i.e. of their log efficiencies
        log_seconds = 0.0
        hows = set()
        for corner, weight in corners:
            seconds, how = self._borrow(site, axes, corner)
            log_seconds += weight * math.log(seconds)
            hows.add(how)
        around = ", ".join("..".join(map(str, sorted({c[d] for c, _ in corners}))) for d in range(len(site)))
        how = max(hows, key=KIND_ORDER.index)
        return math.exp(log_seconds), f"between measured {self.spec.site_name}=({around}): {how}"

    def _borrow(self, site: Site, axes: tuple[float, ...], near: Site) -> tuple[float, str]:
        """Seconds at ``site`` at the efficiency measured at ``near`` (read at the axes the spec maps to)."""
        near_axes = self.spec.axis_map(site, near, axes)
        seconds, how = self._read(near, near_axes)
        return seconds * self.roof(site, axes) / self.roof(near, near_axes), how

    def source(self, how: str) -> str:
        return f"measured: {self.label} ({how})"

    def predict(self, key: Sequence) -> float:
        """Seconds at a row's key (the validation's question)."""
        site, axes = self.split(key)
        return self.lookup(site, axes)[0]


def _picker(columns: tuple[int, ...] | None) -> Callable[[Sequence], tuple]:
    """The key's ``columns`` as a tuple (`itemgetter` gives a lone column bare, and none at all
    for no columns)."""
    if not columns:
        return lambda key: ()
    if len(columns) == 1:
        (column,) = columns
        return lambda key: (key[column],)
    return itemgetter(*columns)


def _gemm(site: Site, m: float) -> kw.Work:
    n, k = site
    return kw.gemm(m, n, k)


def _context(site: Site, batch: float, isl: float) -> kw.Work:
    heads, kv_heads, head_dim = site
    return kw.prefill_attention(batch, isl, isl, heads, kv_heads, head_dim)


def _generation(site: Site, batch: float, context: float) -> kw.Work:
    heads, kv_heads, head_dim = site
    return kw.decode_attention(batch, context, heads, kv_heads, head_dim)


def _conv(site: Site, batch: float, seq_len: float) -> kw.Work:
    k_heads, v_heads, head_k, head_v, conv = site
    channels = kw.gdn_channels(k_heads, v_heads, head_k, head_v)
    return kw.depthwise_conv(batch * seq_len, channels, conv, state_tokens=batch * (conv - 1))


def _rule_prefill(site: Site, batch: float, seq_len: float) -> kw.Work:
    k_heads, v_heads, head_k, head_v, _ = site
    return kw.gdn_rule_prefill(batch, seq_len, k_heads, v_heads, head_k, head_v)


def _rule_decode(site: Site, batch: float, seq_len: float) -> kw.Work:
    k_heads, v_heads, head_k, head_v, _ = site
    return kw.gdn_rule_decode(batch * seq_len, k_heads, v_heads, head_k, head_v)


def _moe(site: Site, tokens: float) -> kw.Work:
    hidden, inter, experts, topk = site
    return kw.moe(tokens, hidden, inter, experts, topk)


def moe_equal_load(site: Site, near: Site, axes: tuple[float, ...]) -> tuple[float, ...]:
    """Read the nearest MoE shape at the same routed tokens per expert (tokens * topk / experts):
    that, not the token count, sets whether experts are weight-bound or compute-bound."""
    (tokens,) = axes
    return (tokens * site[3] / site[2] * near[2] / near[3],)


def equal_parallelism(column: int) -> AxisMap:
    """Read the nearest shape at the batch giving the same batch x heads (``column``: which
    heads): the kernels spread (sequence, head) pairs over the SMs, so a shape with half the
    heads at twice the batch fills the GPU alike. The held-out-shape validation
    (`benchmarks/costmodel_validation.py`) prefers this to reading the nearest shape at the same
    batch: context attention by query heads, GDN by value heads, decode attention by KV heads."""

    def axis_map(site: Site, near: Site, axes: tuple[float, ...]) -> tuple[float, ...]:
        batch, *rest = axes
        return (batch * site[column] / near[column], *rest)

    return axis_map


GEMM = TableSpec(2, "(n, k)", _gemm, site_order=(1, 2), axes_order=(0,))
# prefill time grows ~quadratically in isl: a power law between grid points fits it better than
# linear on held-out points; elsewhere linear interpolation validates as well or better
CONTEXT_ATTENTION = TableSpec(
    3, "(heads, kv_heads, head_dim)", _context, mode="loglog", axis_map=equal_parallelism(0)
)
GENERATION_ATTENTION = TableSpec(3, "(heads, kv_heads, head_dim)", _generation, axis_map=equal_parallelism(1))
GDN_SITE = "(k_heads, v_heads, head_k, head_v, conv)"
GDN = {
    name: TableSpec(5, GDN_SITE, work, axis_map=equal_parallelism(1))
    for name, work in (
        ("conv_prefill", _conv),
        ("rule_prefill", _rule_prefill),
        ("conv_decode", _conv),
        ("rule_decode", _rule_decode),
    )
}
MOE = TableSpec(4, "(hidden, inter, experts, topk)", _moe, axis_map=moe_equal_load)


def _allreduce(site: Site, message_bytes: float) -> kw.Work:
    # the table is built with the NVLink bandwidth in the roofline's bandwidth slot
    return 0.0, kw.allreduce_traffic(message_bytes, site[0])


ALLREDUCE = TableSpec(1, "gpus", _allreduce)
