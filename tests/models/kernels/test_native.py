"""The native (C) decode kernels against the eager torch steps, at the edges; and the fallback.

Each native step must give the eager step's outputs and new state within float32 rounding (the
native kernels reassociate dot products, so not to the bit) for one row, many rows, odd head
sizes, grouped heads and inputs that are views; a NaN in one row stays in that row. The library
is built once per test process into a temporary cache. Without a working compiler ``auto``
falls back to the eager kernels with one log line, and ``native`` is refused in one line.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import stat
import subprocess
import time

import pytest
import torch
import torch.nn.functional as F

from radixflow.models.kernels.backend import KernelsError, native_library, resolve_kernels
from radixflow.models.kernels.native import build as native_build
from radixflow.models.kernels.native import layer_ops
from radixflow.models.kernels.native.build import (
    ABI_VERSION,
    BUILD_TIMEOUT_S,
    SIGNATURES,
    SOURCE,
    _digest,
    build,
    find_compiler,
)
from radixflow.models.kernels.step import NormSpec
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS

TOL = 2e-6


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = TOL) -> bool:
    return a.shape == b.shape and bool(((a - b).abs() <= tol * (1 + b.abs())).all())


def _delta_inputs(g: torch.Generator, rows: int, heads: int, dk: int, dv: int) -> list[torch.Tensor]:
    q = F.normalize(torch.randn(rows, heads, dk, generator=g), dim=-1) * dk**-0.5
    k = F.normalize(torch.randn(rows, heads, dk, generator=g), dim=-1)
    v = torch.randn(rows, heads, dv, generator=g)
    gate, beta = -torch.rand(rows, heads, generator=g) * 2, torch.rand(rows, heads, generator=g)
    return [q, k, v, gate, beta, torch.randn(rows, heads, dk, dv, generator=g)]


@pytest.mark.parametrize(("rows", "heads", "dk", "dv"), [(1, 2, 8, 8), (32, 4, 16, 16), (3, 3, 7, 5)])
def test_the_delta_rule_step_matches_the_eager_step(native, rows, heads, dk, dv) -> None:
    *inputs, state = _delta_inputs(torch.Generator().manual_seed(rows), rows, heads, dk, dv)
    want_o, want_s = TORCH_KERNELS.gated_delta_step(*inputs, state.clone())
    pooled = state.clone()
    got_o, got_s = native.gated_delta_step(*inputs, pooled)
    assert got_s is pooled  # updated where it lies
    assert _close(got_o, want_o) and _close(got_s, want_s)


@pytest.mark.parametrize(
    ("rows", "key_heads", "heads", "dk", "dv"), [(1, 2, 2, 8, 8), (32, 2, 4, 16, 16), (3, 1, 3, 7, 5)]
)
def test_the_fused_deltanet_decode_matches_the_eager_chain(native, rows, key_heads, heads, dk, dv) -> None:
    g = torch.Generator().manual_seed(rows + heads)
    conv_dim, taps = 2 * key_heads * dk + heads * dv, 4
    projected = torch.randn(rows, conv_dim + 3, generator=g)
    qkv = projected[:, 1 : 1 + conv_dim]  # a view of the projection, as the mixer passes it
    weight = torch.randn(conv_dim, taps, generator=g) * 0.5
    window = torch.randn(rows, conv_dim, taps - 1, generator=g)
    raw = torch.randn(rows, 2 * heads, generator=g) * 3  # b and a, as views of one projection
    gates = (raw[:, :heads], raw[:, heads:], torch.randn(heads, generator=g), torch.randn(heads, generator=g))
    state = torch.randn(rows, heads, dk, dv, generator=g)
    args = (weight, key_heads, dk, gates)
    w_window, w_state = window.clone(), state.clone()
    want_o, want_s = TORCH_KERNELS.deltanet_decode(qkv, w_window, *args, w_state)
    got_o, got_s = native.deltanet_decode(qkv, window, *args, state)
    assert got_s is state and _close(got_o, want_o, 1e-5) and _close(got_s, want_s, 1e-5)
    assert torch.equal(window, w_window)  # the conv window shifted in place, by copies only


@pytest.mark.parametrize(
    ("rows", "heads", "groups", "p", "n"), [(1, 2, 1, 4, 8), (32, 4, 2, 8, 16), (5, 3, 3, 5, 7)]
)
def test_the_mamba2_step_matches_the_eager_step(native, rows, heads, groups, p, n) -> None:
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, heads, p, generator=g)
    dt, a = torch.rand(rows, heads, generator=g), -torch.rand(heads, generator=g) * 3
    b, c = torch.randn(rows, groups, n, generator=g), torch.randn(rows, groups, n, generator=g)
    h = torch.randn(rows, heads, p, n, generator=g)
    want_y, want_h = TORCH_KERNELS.ssd_step(x, dt, a, b, c, h.clone())
    got_y, got_h = native.ssd_step(x, dt, a, b, c, h)
    assert got_h is h and _close(got_y, want_y) and _close(got_h, want_h)


@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize(("vectors", "dim"), [(1, 8), (32, 512), (3, 5)])
def test_the_rms_norm_matches_the_eager_norm(native, vectors, dim, offset) -> None:
    g = torch.Generator().manual_seed(dim)
    x = torch.randn(vectors, dim + 2, generator=g)[:, 1:-1]  # a view, as a head split passes it
    weight = torch.randn(dim, generator=g)
    want = TORCH_KERNELS.rms_norm(x, weight, NormSpec(1e-6, offset))
    assert _close(native.rms_norm(x, weight, NormSpec(1e-6, offset)), want, 1e-5)


@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize(("vectors", "dim"), [(1, 8), (32, 512), (3, 5)])
def test_the_fused_residual_add_and_norm_equal_the_two_steps_to_the_bit(native, vectors, dim, offset) -> None:
    g = torch.Generator().manual_seed(dim)
    x = torch.randn(vectors, dim + 2, generator=g)[:, 1:-1]  # a view: copied first
    delta, weight = torch.randn(vectors, dim, generator=g), torch.randn(dim, generator=g)
    total, normed = native.add_rms_norm(x, delta, weight, NormSpec(1e-6, offset))
    assert torch.equal(total, x + delta)
    assert torch.equal(normed, native.rms_norm(x + delta, weight, NormSpec(1e-6, offset)))
    eager_total, eager_normed = TORCH_KERNELS.add_rms_norm(x, delta, weight, NormSpec(1e-6, offset))
    assert torch.equal(eager_total, x + delta) and _close(normed, eager_normed, 1e-5)


@pytest.mark.parametrize("n", [1, 7, 15, 16, 17, 33, 32 * 2048])
def test_relu2_is_written_in_place_equal_to_the_bit_to_relu_then_square(native, n) -> None:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g) * 1e19  # squares past float32's range: inf, as in torch
    nan, inf = float("nan"), float("inf")
    specials = torch.tensor([0.0, -0.0, nan, -nan, inf, -inf, 1e-45, -1e-45])
    x[: min(n, 8)] = specials[: min(n, 8)]
    x.view(torch.int32)[n // 2] = 0x7FC12345  # a NaN with a payload: kept, as clamp_min keeps it
    want = F.relu_(x.clone()).square_()
    got = native.relu2_(x)
    assert got.data_ptr() == x.data_ptr()
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_relu2_of_a_view_gives_the_same_values(native) -> None:
    x = torch.randn(3, 10, generator=torch.Generator().manual_seed(1))[:, 1:-1]  # not contiguous
    want = F.relu(x).square()
    assert torch.equal(native.relu2_(x.clone()), want) and torch.equal(native.relu2_(x), want)


@pytest.mark.parametrize(("vectors", "dim"), [(1, 8), (32, 512), (3, 5)])
def test_the_residual_add_and_norm_into_its_inputs_equal_new_tensors_to_the_bit(native, vectors, dim) -> None:
    g = torch.Generator().manual_seed(dim)
    x, delta, weight = (torch.randn(vectors, dim, generator=g) for _ in range(3))
    weight = weight[0]
    want_total, want_normed = native.add_rms_norm(x, delta, weight, NormSpec(1e-6))
    for kernels in (native, TORCH_KERNELS):
        x2, delta2 = x.clone(), delta.clone()
        total, normed = kernels.add_rms_norm_(x2, delta2, weight, NormSpec(1e-6))
        assert total.data_ptr() == x2.data_ptr()  # the sum is written into x
        assert torch.equal(total, want_total) and _close(normed, want_normed, 1e-5)
        if kernels is native:
            assert normed.data_ptr() == delta2.data_ptr() and torch.equal(normed, want_normed)


def test_the_residual_add_and_norm_of_mixed_dtypes_promotes_as_the_plain_sum() -> None:
    g = torch.Generator().manual_seed(0)
    x, delta, weight = (
        torch.randn(3, 8, generator=g).to(torch.bfloat16),
        torch.randn(3, 8, generator=g),
        torch.ones(8),
    )
    before = x.clone()
    total, normed = TORCH_KERNELS.add_rms_norm_(x, delta, weight, NormSpec(1e-6))
    want = TORCH_KERNELS.add_rms_norm(before, delta, weight, NormSpec(1e-6))
    assert total.dtype == torch.float32 and torch.equal(total, want[0]) and torch.equal(normed, want[1])
    assert torch.equal(x, before)


def test_the_residual_add_and_norm_of_views_gives_new_tensors(native) -> None:
    g = torch.Generator().manual_seed(0)
    x, delta = torch.randn(3, 10, generator=g)[:, 1:-1], torch.randn(3, 8, generator=g)
    weight, before = torch.randn(8, generator=g), x.clone()
    total, normed = native.add_rms_norm_(x, delta, weight, NormSpec(1e-6))
    assert torch.equal(x, before)  # a view is not written: the results are new tensors
    want = native.add_rms_norm(x, delta, weight, NormSpec(1e-6))
    assert torch.equal(total, want[0]) and torch.equal(normed, want[1])


@pytest.mark.parametrize(("vectors", "dim"), [(1, 8), (32 * 4, 16), (3, 5)])
def test_the_gated_norm_matches_the_eager_norm(native, vectors, dim) -> None:
    g = torch.Generator().manual_seed(dim)
    x, gate = torch.randn(vectors, 2, dim, generator=g), torch.randn(vectors, 2, dim, generator=g) * 4
    weight = torch.randn(dim, generator=g)
    want = TORCH_KERNELS.gated_rms_norm(x, gate, weight, 1e-6)
    assert _close(native.gated_rms_norm(x, gate, weight, 1e-6), want, 1e-5)


@pytest.mark.parametrize("taps", [1, 2, 4])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_conv_step_equals_the_eager_step(native, taps, with_bias) -> None:
    g = torch.Generator().manual_seed(taps)
    rows, channels = 6, 11
    wide = torch.randn(rows, channels + 5, generator=g)
    x = wide[:, 2 : 2 + channels]  # a view of a projection's columns, as the mixers pass it
    window = torch.randn(rows, channels, taps - 1, generator=g)
    weight, bias = torch.randn(channels, taps, generator=g), torch.randn(channels, generator=g)
    bias = bias if with_bias else None
    want_out, want_w = TORCH_KERNELS.conv_step(x, window.clone(), weight, bias)
    got_out, got_w = native.conv_step(x, window, weight, bias)
    # the same products added in the same order, each rounded once: equal to the bit
    assert got_w is window and torch.equal(got_out, want_out) and torch.equal(got_w, want_w)


class _Context:
    def __init__(self, slots: torch.Tensor, valid: torch.Tensor) -> None:
        self.slots, self.valid, self.ends = slots, valid, valid.sum(1)
        self.ragged = not bool(valid.all())


def _gather(cache: torch.Tensor, slots: torch.Tensor, which: int) -> torch.Tensor:
    return cache.index_select(0, slots)


@pytest.mark.parametrize(
    ("lengths", "heads", "kv_heads", "dim"), [([1], 2, 2, 8), ([9] * 32, 8, 2, 16), ([7, 3, 1], 6, 3, 5)]
)
def test_decode_attention_reads_the_pool_where_it_lies(native, lengths, heads, kv_heads, dim) -> None:
    g = torch.Generator().manual_seed(len(lengths))
    pool = 64
    kc, vc = torch.randn(pool, kv_heads, dim, generator=g), torch.randn(pool, kv_heads, dim, generator=g)
    width = max(lengths)
    slots = torch.randint(0, pool, (len(lengths), width), generator=g)
    valid = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    q = torch.randn(len(lengths), heads, dim, generator=g)
    context = _Context(slots.where(valid, 0), valid)
    want = TORCH_KERNELS.decode_attention(q, kc, vc, context, dim**-0.5, _gather)
    got = native.decode_attention(q, kc, vc, context, dim**-0.5, _gather)
    assert _close(got, want)


def test_a_nan_stays_in_its_own_row(native) -> None:
    *inputs, state = _delta_inputs(torch.Generator().manual_seed(9), 4, 2, 8, 8)
    state[2, 1, 3, 3] = float("nan")
    out, new = native.gated_delta_step(*inputs, state)
    assert out[2, 1].isnan().any() and new[2, 1].isnan().any()
    assert not out[[0, 1, 3]].isnan().any() and not new[[0, 1, 3]].isnan().any()


def test_a_state_that_is_not_contiguous_gets_its_new_values(native) -> None:
    *inputs, state = _delta_inputs(torch.Generator().manual_seed(3), 3, 2, 4, 4)
    want_o, want_s = TORCH_KERNELS.gated_delta_step(*inputs, state.clone())
    strided = state.transpose(2, 3).clone().transpose(2, 3)  # same values, other strides
    got_o, got_s = native.gated_delta_step(*inputs, strided)
    assert got_s is strided and _close(got_s, want_s) and _close(got_o, want_o)


def _compiler(tmp_path, script: str) -> str:
    """A stand-in C compiler: the shell ``script`` (after its ``#!/bin/sh`` line) as an executable."""
    path = tmp_path / "cc"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _refusing(tmp_path, flag: str, says: str) -> str:
    """The system compiler, but one that refuses ``flag``, saying ``says`` as a compiler does."""
    refuse = f'for a in "$@"; do if [ "$a" = {flag} ]; then\n  echo "{says}" >&2; exit 1; fi; done\n'
    return _compiler(tmp_path, refuse + f'exec {find_compiler()} "$@"\n')


def _failing_compiler(tmp_path) -> str:
    # answers the version query (part of the cache key), fails the build
    return _compiler(
        tmp_path,
        'if [ "$1" = --version ]; then echo 12; exit 0; fi\n'
        "echo 'steps.c:1: error: this compiler is broken' >&2\nexit 1\n",
    )


def test_without_a_compiler_auto_runs_the_eager_kernels_with_one_log_line(tmp_path, caplog) -> None:
    missing = str(tmp_path / "no-such-cc")
    with caplog.at_level(logging.WARNING, logger="radixflow.kernels"):
        for _ in range(3):  # three runners, one line
            assert resolve_kernels("auto", "cpu", torch.float32, tmp_path, compiler=missing) is TORCH_KERNELS
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("radixflow: warning: native kernels unavailable")
    assert "\n" not in lines[0]
    with pytest.raises(KernelsError, match="could not be built"):
        resolve_kernels("native", "cpu", torch.float32, tmp_path, compiler=missing)


def test_the_compiler_named_by_cc_is_the_one_used(tmp_path, monkeypatch) -> None:
    # $CC (a clang, a cross or versioned gcc) was ignored: gcc or cc on PATH was used, or none found
    cc = _compiler(tmp_path, 'exec true "$@"\n')
    monkeypatch.setenv("CC", cc)
    assert find_compiler() == cc
    monkeypatch.setenv("CC", "ccache no-such-cc")  # no single executable: the usual names, as before
    assert find_compiler() == next(filter(None, map(shutil.which, ("gcc", "cc", "clang"))), None)
    assert build(tmp_path / "cache", None).problem == (
        "no C compiler on PATH (looked for ccache no-such-cc, gcc, cc, clang)"
    )
    monkeypatch.delenv("CC")
    assert build(tmp_path / "cache", None).problem == "no C compiler on PATH (looked for gcc, cc, clang)"


def test_a_failed_build_is_one_line_and_leaves_no_library_behind(tmp_path, caplog) -> None:
    compiler = _failing_compiler(tmp_path)
    built = build(tmp_path / "cache", compiler)
    assert built.library is None and built.problem is not None
    assert "error: this compiler is broken" in built.problem and "\n" not in built.problem
    assert not list((tmp_path / "cache").iterdir())  # nor a half-written temporary file
    with caplog.at_level(logging.WARNING, logger="radixflow.kernels"):
        assert resolve_kernels("auto", "cpu", torch.float32, tmp_path / "cache", compiler) is TORCH_KERNELS
    assert len(caplog.records) == 1


def test_a_build_sweeps_the_temporary_files_of_builds_killed_long_ago(tmp_path) -> None:
    # a build killed mid-compile (Ctrl-C, the OOM killer) left its .tmp beside the libraries,
    # and every later kill another, forever; one of a build running now is its own and is kept
    cache = tmp_path / "cache"
    cache.mkdir()
    old, live = cache / "abc.so.123.deadbeef.tmp", cache / "abc.so.456.cafef00d.tmp"
    for f in (old, live):
        f.write_bytes(b"half a library")
    long_ago = time.time() - 3 * BUILD_TIMEOUT_S
    os.utime(old, (long_ago, long_ago))
    build(cache, _failing_compiler(tmp_path))
    assert sorted(p.name for p in cache.iterdir()) == [live.name]


def test_a_compiler_without_gccs_version_flags_builds_the_library(native_here, tmp_path) -> None:
    # clang has no -dumpfullversion (an error there); --version and -dumpmachine it answers
    clang = _refusing(tmp_path, "-dumpfullversion", "clang: error: unknown argument: '-dumpfullversion'")
    built = build(tmp_path / "cache", clang)
    assert built.problem is None and built.library is not None


def test_a_compiler_that_refuses_march_native_builds_a_portable_library(native_here, tmp_path) -> None:
    # gcc on POWER (-mcpu=native there) and older clang on Apple silicon refuse -march=native
    cc = _refusing(tmp_path, "-march=native", "cc: error: unrecognized command-line option '-march=native'")
    built = build(tmp_path / "cache", cc)
    assert built.problem is None and built.library is not None
    assert built.library.rf_abi_version() == ABI_VERSION


def test_a_build_that_times_out_says_so_in_its_one_line(native_here, tmp_path, monkeypatch) -> None:
    run = subprocess.run

    def stuck_compile(command, **kwargs):  # the version queries answer, the compile never ends
        if "-o" in command:
            raise subprocess.TimeoutExpired(command, kwargs["timeout"])
        return run(command, **kwargs)

    monkeypatch.setattr(subprocess, "run", stuck_compile)
    long_cache = tmp_path / ("a-long-home-directory" * 8) / "kernels"  # the command line is long
    built = build(long_cache, find_compiler())
    assert built.library is None
    assert f"timed out after {BUILD_TIMEOUT_S} s" in built.problem and "\n" not in built.problem
    assert not list(long_cache.iterdir())


def test_a_built_library_is_readable_by_whoever_the_umask_lets_read_it(native_here, tmp_path) -> None:
    # a cache filled by one user (an image's build step as root) and read by another
    before = os.umask(0o022)
    try:
        built = build(tmp_path / "cache", find_compiler())
    finally:
        os.umask(before)
    (library,) = (tmp_path / "cache").iterdir()
    assert built.library is not None and stat.S_IMODE(library.stat().st_mode) == 0o755


C_TYPES = {"int64_t": ctypes.c_int64, "float": ctypes.c_float, "int": ctypes.c_int}


def test_every_binding_has_the_c_functions_own_argument_types() -> None:
    # a binding off by one argument, or an int for an int64_t, passes garbage without an error
    # (and a changed signature must bump rf_abi_version: the library checks that number)
    source = SOURCE.read_text()
    defined = re.findall(r"^(int|void) (rf_\w+)\(([^)]*)\) \{", source, re.MULTILINE)
    assert {name for _, name, _ in defined} == set(SIGNATURES)
    for returns, name, params in defined:
        kinds = [
            ctypes.c_void_p if "*" in p else C_TYPES[p.split()[-2]]
            for p in (" ".join(part.split()) for part in params.split(","))
            if p and p != "void"
        ]
        restype, argtypes = SIGNATURES[name]
        assert (restype, argtypes) == (ctypes.c_int if returns == "int" else None, kinds), name


def _stale_library(path, compiler: str) -> None:
    """An older build's library at ``path``: another ABI version, a function it lacks."""
    source = path.with_suffix(".c")
    source.write_text("int rf_abi_version(void) { return 1; }\n")
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(path), str(source)], check=True)


@pytest.mark.parametrize("cached", ["stale", "corrupt"])
def test_an_unusable_cached_library_is_built_again(native_here, tmp_path, cached) -> None:
    compiler = find_compiler()
    cache = tmp_path / "cache"
    cache.mkdir()
    target = cache / f"{_digest(compiler)}.so"
    if cached == "stale":
        _stale_library(target, compiler)
    else:
        target.write_bytes(b"\x7fELF cut short")  # a copy cut off by a full disk
    built = build(cache, compiler)
    assert built.problem is None and built.library is not None
    assert built.library.rf_abi_version() == ABI_VERSION


def test_a_link_that_fails_says_why_not_just_that_the_linker_failed(tmp_path) -> None:
    # gcc's words when the cache directory is another user's (or the disk is full): the cause is
    # the linker's line, collect2's summary after it says only that ld failed
    cc = _compiler(
        tmp_path,
        'if [ "$1" = --version ]; then echo 12; exit 0; fi\n'
        "echo '/usr/bin/ld: cannot open output file k.so: Permission denied' >&2\n"
        "echo 'collect2: error: ld returned 1 exit status' >&2\nexit 1\n",
    )
    built = build(tmp_path / "cache", cc)
    assert built.library is None and "cannot open output file k.so: Permission denied" in built.problem


def test_two_cpus_the_os_lists_alike_get_libraries_of_their_own(tmp_path, monkeypatch) -> None:
    # macOS has no /proc/cpuinfo (every Intel Mac, AVX-512 or not, is "i386" there): the cache key
    # holds what the compiler makes of -march=native, so a cache moved to another CPU is never
    # loaded there (an instruction it lacks kills the process)
    cc = _compiler(tmp_path, 'echo "cc 12"\ncase "$*" in *-dM*) echo "#define __${CPU_KIND}__ 1";; esac\n')
    monkeypatch.setattr(native_build, "_cpu_flags", lambda: "i386")
    monkeypatch.setenv("CPU_KIND", "AVX512F")
    avx512 = _digest(cc)
    monkeypatch.setenv("CPU_KIND", "AVX2")
    assert _digest(cc) != avx512


def test_a_built_library_is_reused_from_the_disk_cache(native_here, tmp_path_factory) -> None:
    cache = tmp_path_factory.getbasetemp() / "kernels"
    (library,) = cache.glob("*.so")  # built once by the fixture
    before = library.stat().st_mtime_ns
    again = build(cache, find_compiler())  # a fresh process would call this
    assert again.library is not None and library.stat().st_mtime_ns == before
    assert native_library(cache, find_compiler()).library is native_here.lib  # once per process


def test_a_cache_directory_given_as_a_string_is_a_path(native_here, tmp_path_factory, tmp_path) -> None:
    cache = str(tmp_path_factory.getbasetemp() / "kernels")  # as a CLI or config file gives it
    kernels = resolve_kernels("native", "cpu", torch.float32, cache)
    assert kernels.name == "native"
    missing = str(tmp_path / "no-such-cc")
    assert resolve_kernels("auto", "cpu", torch.float32, str(tmp_path), compiler=missing) is TORCH_KERNELS


def test_the_eager_kernels_run_where_the_native_ones_cannot(tmp_path) -> None:
    assert resolve_kernels("torch", "cpu", torch.float32, tmp_path) is TORCH_KERNELS
    assert resolve_kernels("auto", "cpu", torch.bfloat16, tmp_path) is TORCH_KERNELS
    assert resolve_kernels("auto", "cuda", torch.float32, tmp_path) is TORCH_KERNELS
    with pytest.raises(KernelsError, match=r"CPU in float32, not cpu in bfloat16$"):  # as users write it
        resolve_kernels("native", "cpu", torch.bfloat16, tmp_path)
    with pytest.raises(KernelsError, match="unknown kernels 'fast'"):
        resolve_kernels("fast", "cpu", torch.float32, tmp_path)
    assert not os.listdir(tmp_path)  # nothing was built for them


@pytest.mark.parametrize("rows", [0, 1, 2, 4, 5])
@pytest.mark.parametrize(("n", "k"), [(1, 1), (7, 3), (16, 8), (33, 45), (64, 96), (5, 0)])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_rows_is_f_linear(native, rows, n, k, bias) -> None:
    # k off the register width and its 4-register blocks, a row count past the few it is for,
    # no rows, an empty dot product
    g = torch.Generator().manual_seed(rows * 1000 + n * 10 + k)
    x, w = torch.randn(rows, k, generator=g), torch.randn(n, k, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    got = layer_ops.linear_rows(native.lib, x, w, b)
    assert _close(got, F.linear(x, w, b), tol=1e-5)


def test_linear_rows_reads_rows_where_they_lie_and_keeps_leading_dims(native) -> None:
    g = torch.Generator().manual_seed(5)
    w = torch.randn(24, 40, generator=g)
    view = torch.randn(3, 100, generator=g)[:, 7:47]  # rows 100 floats apart
    assert _close(layer_ops.linear_rows(native.lib, view, w, None), F.linear(view, w), tol=1e-5)
    x3 = torch.randn(2, 1, 40, generator=g)
    got = layer_ops.linear_rows(native.lib, x3, w, None)
    assert got.shape == (2, 1, 24) and _close(got, F.linear(x3, w), tol=1e-5)
    x = torch.randn(2, 40, generator=g)
    x[1, 3] = float("nan")
    out = layer_ops.linear_rows(native.lib, x, w, None)
    assert out[1].isnan().all() and not out[0].isnan().any()  # a NaN stays in its row


def test_linear_rows_gives_each_row_what_it_gets_alone(native) -> None:
    # a decode row's logits must not depend on the rows sharing its round (pairs share loads)
    g = torch.Generator().manual_seed(8)
    for k in (45, 96, 512):
        w, b = torch.randn(19, k, generator=g), torch.randn(19, generator=g)
        x = torch.randn(5, k, generator=g)
        together = layer_ops.linear_rows(native.lib, x, w, b)
        alone = torch.cat([layer_ops.linear_rows(native.lib, x[i : i + 1], w, b) for i in range(5)])
        assert torch.equal(together, alone)
