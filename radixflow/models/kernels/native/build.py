"""Compile `steps.c` with the system C compiler at first use and load it with ctypes.

No Python or torch headers are involved, so a build takes about a second. The shared library is
cached on disk under ``<cache>/kernels/<hash>.so`` (``<cache>``: the zoo's cache directory,
`radixflow.models.zoo.default_cache_dir`, passed in by the caller), the hash covering the
source, the compiler (path and version), its flags, this CPU's instruction-set flags as the OS
lists them and as the compiler reads them under those flags (its predefined macros): a machine of
another kind (AVX2-only against AVX-512) never loads a library built for another.
A build writes a temporary file beside the target and renames it into place, so processes
building at the same time never load a half-written library; a cached library that will not
load (cut short, another ABI version) is built again, and the temporary file of a build killed
long ago is swept.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("steps.c")
# -march=native: the hash includes the CPU flags. No -ffast-math: NaN/inf behave as in eager
# torch; -ffp-contract=off keeps a*b+c two roundings, as torch's separate ops are.
NATIVE_ARCH = "-march=native"
FLAGS = (
    "-O3",
    NATIVE_ARCH,
    "-fPIC",
    "-shared",
    "-std=c11",
    "-fopenmp-simd",
    "-ffp-contract=off",
    "-fno-math-errno",
)
# for a compiler that refuses -march=native (gcc on POWER, older clang on Apple silicon): the
# same library for the architecture's baseline, under the same cache key (this compiler, this CPU)
PORTABLE_FLAGS = tuple(f for f in FLAGS if f != NATIVE_ARCH)
COMPILERS = ("gcc", "cc", "clang")  # looked for on PATH in this order, unless $CC names one
# the compiler's identity in the cache key: flags gcc and clang both answer (clang refuses gcc's
# -dumpfullversion, and its -dumpversion long said 4.2.1 whatever its version)
VERSION_QUERIES = ("--version", "-dumpmachine")
ABI_VERSION = 13  # rf_abi_version() of the source this module's signatures describe
BUILD_TIMEOUT_S = 120

_P, _I = ctypes.c_void_p, ctypes.c_int64
SIGNATURES: dict[str, tuple[type, list[type]]] = {
    "rf_abi_version": (ctypes.c_int, []),
    "rf_gated_delta_step": (ctypes.c_int, [_I, _I, _I, _I, _P, _P, _P, _P, _P, _P, _P]),
    "rf_deltanet_decode": (
        ctypes.c_int,
        [_I, _I, _I, _I, _I, _I, _P, _I, _P, _P, _P, _P, _I, _P, _P, _P, _P],
    ),
    "rf_gated_delta_scan": (
        ctypes.c_int,
        [_I, _I, _I, _I, _I, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P],
    ),
    "rf_mamba2_scan": (
        ctypes.c_int,
        [_I, _I, _I, _I, _I, _P, _P, _I, _P, _P, _P, ctypes.c_float, ctypes.c_float]
        + [_P, _P, _P, _P, _P, _P, _P],
    ),
    "rf_conv_runs": (ctypes.c_int, [_I, _I, _I, _P, _I, _P, _P, _P, _P, _P, _P, _I, _P]),
    "rf_rms_norm": (None, [_I, _I, _P, _P, ctypes.c_float, ctypes.c_float, _P]),  # type: ignore[dict-item]
    "rf_add_rms_norm": (None, [_I, _I, _P, _P, _P, ctypes.c_float, ctypes.c_float, _P, _P]),  # type: ignore[dict-item]
    "rf_gated_rms_norm": (None, [_I, _I, _P, _P, _P, ctypes.c_float, _P]),  # type: ignore[dict-item]
    "rf_ssd_step": (None, [_I, _I, _I, _I, _I, _P, _P, _P, _P, _P, _P, _P]),  # type: ignore[dict-item]
    "rf_conv_step": (None, [_I, _I, _I, _P, _I, _P, _P, _P, _P]),  # type: ignore[dict-item]
    "rf_decode_attention": (ctypes.c_int, [_I, _I, _I, _I, _I, _P, _P, _P, _P, _P, ctypes.c_float, _P]),
    "rf_mamba2_decode": (
        ctypes.c_int,
        [
            _I,
            _I,
            _I,
            _I,
            _I,
            _I,
            _P,
            _I,
            _P,
            _I,
            _P,
            _P,
            _P,
            _P,
            _P,
            _P,
            ctypes.c_float,
            ctypes.c_float,
            _P,
            _P,
        ],
    ),
    "rf_kv_write": (None, [_I, _I, _P, _P, _P, _P, _P]),  # type: ignore[dict-item]
    "rf_rotary": (None, [_I, _I, _I, _I, _P, _I, _P, _P, _P]),  # type: ignore[dict-item]
    "rf_rms_norm_rotary": (
        ctypes.c_int,
        [_I, _I, _I, _I, _P, _I, _I, _P, ctypes.c_float, ctypes.c_float, _P, _P, _P],
    ),
    "rf_group_gated_rms_norm": (None, [_I, _I, _I, ctypes.c_int, _P, _P, _I, _P, ctypes.c_float, _P]),  # type: ignore[dict-item]
    "rf_linear_rows": (None, [_I, _I, _I, _P, _I, _P, _P, _P]),  # type: ignore[dict-item]
    "rf_relu2": (None, [_I, _P]),  # type: ignore[dict-item]
}


@dataclass(frozen=True)
class Built:
    """The loaded library, or why there is none (one line, for the log)."""

    library: ctypes.CDLL | None
    problem: str | None = None


def find_compiler() -> str | None:
    """The C compiler's path: the one ``$CC`` names (a name on PATH or a path), as make takes it,
    else the first of `COMPILERS` on PATH (None: none found)."""
    for name in _candidates():
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def _candidates() -> tuple[str, ...]:
    """What `find_compiler` looks for, in order: ``$CC`` first where set (one that is not a single
    executable, ``ccache gcc``, falls through to the usual names, as before it was read)."""
    given = os.environ.get("CC", "").strip()
    return (given, *COMPILERS) if given else COMPILERS


def _no_compiler() -> str:
    """Why `find_compiler` found none, in one line."""
    return f"no C compiler on PATH (looked for {', '.join(_candidates())})"


def build(cache_dir: Path, compiler: str | None) -> Built:
    """The kernels library for this machine: loaded from ``cache_dir`` if built before, else
    compiled with ``compiler`` (a path; None: no compiler) into it first. Never raises for a
    missing compiler, a failed build or a library that will not load: `Built.problem` says why."""
    if compiler is None:
        return Built(None, _no_compiler())
    try:
        target = cache_dir / f"{_digest(compiler)}.so"
        _sweep(cache_dir)
        cached = _load_cached(target)
        return Built(cached if cached is not None else _compile(compiler, target))
    except (OSError, subprocess.SubprocessError, ValueError, AttributeError) as e:
        return Built(None, _one_line(str(e)) or type(e).__name__)


def _sweep(cache_dir: Path) -> None:
    """Remove the temporary files of builds killed mid-compile (Ctrl-C, the OOM killer): each
    kill left one, forever. A file younger than twice a build's timeout may be a build running
    now in another process, and is left to it."""
    old = time.time() - 2 * BUILD_TIMEOUT_S
    for tmp in cache_dir.glob("*.so.*.tmp"):
        try:
            if tmp.stat().st_mtime < old:
                tmp.unlink()
        except OSError:  # gone already (another process swept it), or not ours to remove
            pass


def _load_cached(target: Path) -> ctypes.CDLL | None:
    """The library built before at ``target`` (None: none there, or one that will not load,
    cut short or of another ABI: it is built again, not given up on in every later process)."""
    if not target.is_file():
        return None
    try:
        return _load(target)
    except (OSError, ValueError, AttributeError):
        return None


def _digest(compiler: str) -> str:
    version = "".join(_ask(compiler, flag) for flag in VERSION_QUERIES)
    parts = [SOURCE.read_bytes(), compiler.encode(), version.encode(), " ".join(FLAGS).encode()]
    parts += [platform.machine().encode(), _cpu_flags().encode(), _target(compiler).encode()]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:24]


def _target(compiler: str) -> str:
    """The macros ``compiler`` predefines under `FLAGS` (``__AVX512F__``, ``__ARM_FEATURE_...``):
    the instruction sets -march=native picks on this CPU, on every OS (macOS has no
    /proc/cpuinfo), sorted (their order is the compiler's hash table's)."""
    said = _ask(compiler, *FLAGS, "-E", "-dM", "-x", "c", os.devnull)
    return "\n".join(sorted(said.splitlines()))


def _ask(compiler: str, *args: str) -> str:
    """What ``compiler args`` prints, an error included: a compiler that refuses the query (or
    fails at all) is reported by its build, which says why in its own words."""
    done = subprocess.run([compiler, *args], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    return done.stdout + done.stderr


def _cpu_flags() -> str:
    """This CPU's instruction-set flags (what -march=native compiles for), as the OS lists them."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def _compile(compiler: str, target: Path) -> ctypes.CDLL:
    """``steps.c`` built into ``target`` and loaded. Loaded from its temporary file, before the
    rename: a stale library once loaded from ``target`` stays this process's for that path."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # a name of this build's own, the file left to the compiler to create: it gives it the
    # umask's modes, where a file made first (mkstemp: 0600) stays unreadable to other users
    tmp = target.with_name(f"{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        failed = _run_compiler(compiler, tmp, FLAGS)
        if failed is not None and NATIVE_ARCH in failed:  # this compiler has no -march=native
            failed = _run_compiler(compiler, tmp, PORTABLE_FLAGS)
        if failed is not None:
            raise ValueError(f"{Path(compiler).name} failed: {_one_line(failed)}")
        library = _load(tmp)
        os.replace(tmp, target)  # atomic: another process sees the old state or the whole library
        return library
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _run_compiler(compiler: str, out: Path, flags: tuple[str, ...]) -> str | None:
    """``steps.c`` compiled into ``out`` with ``flags``: None, or what the compiler said when it
    failed; a timeout raised as `ValueError`."""
    try:
        done = subprocess.run(
            [compiler, *flags, "-o", str(out), str(SOURCE), "-lm"],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        # its own message quotes the whole command line first: cut to one line, the cause went
        raise ValueError(f"{Path(compiler).name} timed out after {BUILD_TIMEOUT_S} s") from None
    if done.returncode == 0:
        return None
    return done.stderr if done.stderr.strip() else f"exit status {done.returncode}, nothing on stderr"


def _load(path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.rf_abi_version.restype, lib.rf_abi_version.argtypes = ctypes.c_int, []
    if lib.rf_abi_version() != ABI_VERSION:  # before the signatures: it may lack a function
        raise ValueError(f"{path.name}: ABI version {lib.rf_abi_version()}, expected {ABI_VERSION}")
    for name, (restype, argtypes) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def _one_line(text: str) -> str:
    """The line of a compiler's output that says why it failed: its first error; where that is
    collect2's summary ("ld returned 1 exit status"), the linker's own line before it."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    at = next((i for i, line in enumerate(lines) if "error" in line), 0)
    if at > 0 and lines[at].startswith("collect2:"):
        at -= 1
    return lines[at][:300] if lines else ""
