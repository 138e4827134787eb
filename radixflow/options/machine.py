"""What this machine has: CPUs and available memory, and the checks of options against them."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from radixflow.problems import Problem
from radixflow.user_paths import file_path_problem, folder_problem, stdout_problem

# Python bookkeeping per KV block or state slot (id pools, tree nodes, block tables). Measured
# here: an IdPool of 1M ids takes 40 B per id free and 74 B (peak 90 B) with every id taken;
# tree nodes and request block tables add to that, so count 256 B per id as a safe bound.
BOOKKEEPING_BYTES_PER_ID = 256
MEMORY_SHARE = 0.9  # pools and bookkeeping may take at most this share of available memory
# Most threads any one pool may have, wherever it runs: Linux's largest CPU count (NR_CPUS under
# x86-64's MAXSMP). An engine built elsewhere is not held to this machine's CPUs, and a server's
# thread pools not to any, so past this a count is a mistake (10**12), refused by every door
MAX_THREADS = 8192


CGROUP = Path("/sys/fs/cgroup")  # where Linux mounts the control groups


def cpu_count(cgroup: Path = CGROUP, membership: str | None = None) -> int:
    """CPUs this process may run on (the affinity mask where there is one), at most its cgroup's
    CPU quota (`cpu_quota`: a container's ``--cpus``, which the mask does not show)."""
    cpus, quota = affinity_cpus(), cpu_quota(cgroup, membership)
    return cpus if quota is None else min(cpus, quota)


def affinity_cpus() -> int:
    """CPUs of this process's affinity mask (every CPU where there is none): torch's default
    thread count, which no CPU quota lowers."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_quota(cgroup: Path = CGROUP, membership: str | None = None) -> int | None:
    """The least CPU quota on this process's cgroup and its ancestors, in CPUs rounded up (cgroup
    v2's ``cpu.max``, v1's ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``); None where none is set."""
    quotas = []
    for folder in _groups(cgroup, membership, "cpu"):
        v2, v1 = _read(folder / "cpu.max").split(), _read(folder / "cpu.cfs_quota_us")
        quota, period = v2 if len(v2) == 2 else (v1, _read(folder / "cpu.cfs_period_us"))
        if quota.isdigit() and period.isdigit() and int(period) > 0:  # "max", -1: no quota here
            quotas.append(max(1, -(-int(quota) // int(period))))
    return min(quotas, default=None)


@dataclass(frozen=True)
class ThreadPlan:
    """How `radixflow serve` shares the CPUs: ``torch_threads`` run the forward passes (the
    engine thread is one of them); the HTTP side (the event loop, and ``tokenizer_threads``
    tokenizing prompts and building answers beside it) gets the rest."""

    torch_threads: int
    tokenizer_threads: int


HTTP_SHARE = 8  # the HTTP side gets one CPU per this many, at least one
TOKENIZER_THREADS = 2  # one long prompt being tokenized does not hold up the others


def server_thread_plan(cpus: int) -> ThreadPlan:
    """The server's threads on ``cpus`` CPUs. Pure. Forward passes get every CPU the HTTP side
    does not need. On 2 CPUs that is one torch thread, the setting that cannot collapse under
    contention: two threads spinning on two cores contend with the event loop, the tokenizer
    threads, the clients and other jobs. On a quiet machine `--torch-threads 2` can be faster;
    the measurements (`benchmarks/serve_compare.py`) are in docs/serving.md, "Against the server
    of c05b93d, and the thread default"."""
    http = max(1, cpus // HTTP_SHARE)
    return ThreadPlan(torch_threads=max(1, cpus - http), tokenizer_threads=max(TOKENIZER_THREADS, http))


def available_memory(cgroup: Path = CGROUP, membership: str | None = None) -> int | None:
    """MemAvailable from /proc/meminfo in bytes, at most this process's cgroup memory limit
    (`memory_limit`): MemAvailable is the host's figure, which a container's limit does not
    lower, and pools past the limit pass a check on it, then get the process killed as the
    cache fills them. None where neither is known."""
    figures = (_mem_available(), memory_limit(cgroup, membership))
    return min((n for n in figures if n is not None), default=None)


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            lines = f.readlines()
    except OSError:
        return None
    return next((int(line.split()[1]) * 1024 for line in lines if line.startswith("MemAvailable:")), None)


def memory_limit(cgroup: Path = CGROUP, membership: str | None = None) -> int | None:
    """The least memory limit in bytes on this process's cgroup and its ancestors (cgroup v2's
    ``memory.max``, v1's ``memory.limit_in_bytes``), or None where none is set or readable."""
    limits = []
    for folder in _groups(cgroup, membership, "memory"):
        for name in ("memory.max", "memory.limit_in_bytes"):
            if (text := _read(folder / name)).isdigit():  # "max": no limit at this level
                limits.append(int(text))
    return min(limits, default=None)


def _groups(cgroup: Path, membership: str | None, controller: str) -> list[Path]:
    """Each folder of ``controller`` from this process's cgroup up to the mount: v2's one
    hierarchy, or v1's of that controller. ``membership``: /proc/self/cgroup's text (read when
    None; unreadable: no folders)."""
    if membership is None:
        membership = _read(Path("/proc/self/cgroup"))
    out = []
    for line in membership.splitlines():
        if line.count(":") < 2:  # not an "id:controllers:path" line
            continue
        _, controllers, path = line.split(":", 2)
        if controllers != "" and controller not in controllers.split(","):
            continue
        base = cgroup if controllers == "" else cgroup / controller  # v1's "cpu,cpuacct" is linked as "cpu"
        parts = Path(path.lstrip("/")).parts
        out += [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return out


def _read(path: Path) -> str:
    """A cgroup or /proc file's text, stripped ("" where it cannot be read)."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def threads_problem(threads: int | None) -> Problem | None:
    if threads is not None and threads > cpu_count():
        return Problem("torch_threads", f"must be at most {cpu_count()} (this machine's CPUs), got {threads}")
    return None


def bookkeeping_problem(kv_blocks: int | None, state_slots: int | None) -> Problem | None:
    """The cache's Python bookkeeping for this many blocks and slots must fit in memory."""
    have = available_memory()
    need = BOOKKEEPING_BYTES_PER_ID * ((kv_blocks or 0) + (state_slots or 0))
    if have is None or need <= MEMORY_SHARE * have:
        return None
    param = "kv_blocks" if (kv_blocks or 0) >= (state_slots or 0) else "state_slots"
    given = [f"{n} {what}" for n, what in ((kv_blocks, "KV blocks"), (state_slots, "state slots")) if n]
    return Problem(
        param,
        f"{' and '.join(given)} need {need / 1e9:.1f} GB of bookkeeping; "
        f"{have / 1e9:.1f} GB of memory is available",
    )


def pools_problem(need: int | None, device: str, what: str, budgeted: bool = False) -> Problem | None:
    """The torch runner's pools (``need`` bytes, None: unknown) against available memory;
    ``budgeted``: their sizes are the caps of a ``cache_memory`` budget, which the problem names."""
    have = available_memory() if device.split(":")[0] == "cpu" else None  # "cpu:0" is the CPU too
    if need is None or have is None or need <= MEMORY_SHARE * have:
        return None
    why = f"the torch runner's cache needs {need / 1e9:.1f} GB ({what}) but {have / 1e9:.1f} GB of memory"
    why += " is available"
    return no_memory(why, budgeted, "kv_blocks, block_size or state_slots")


def no_memory(why: str, budgeted: bool, lower: str = "kv_blocks or state_slots") -> Problem:
    """The pools do not fit (``why``): lower ``lower``, or, where they are a ``cache_memory``
    budget's caps (``budgeted``), the budget, which is then the option at fault."""
    if budgeted:
        return Problem("cache_memory", f"{why}: lower cache_memory, or cap kv_blocks and state_slots")
    return Problem("kv_blocks", f"{why}: lower {lower}")


# Linux's limits on a path (NAME_MAX, and PATH_MAX less its NUL): an os call on a longer one
# raises OSError (ENAMETOOLONG) wherever the path is first looked at
NAME_MAX, PATH_MAX = 255, 4095


def path_length_problem(name: str, value: str | None) -> Problem | None:
    """Why ``value`` (option ``name``, which may name a file) cannot be a path on any file system
    here (None: it can, or it is not given). Pure."""
    if value is None:
        return None
    raw = os.fsencode(value)
    if len(raw) <= PATH_MAX and all(len(part) <= NAME_MAX for part in raw.split(b"/")):
        return None
    shown = value if len(value) <= 40 else value[:37] + "..."
    limits = f"parts up to {NAME_MAX} bytes, {PATH_MAX} in all (a file system's limits)"
    return Problem(name, f"must be a path of {limits}, got {shown!r} ({len(raw)} bytes)")


def output_problem(name: str, value: str | None) -> Problem | None:
    """An output file that can never be written: a directory, a device or a pipe (a trace file is
    rewritten in place), in a directory that does not exist, or ``-`` (standard output, as other
    outputs spell it, which a file rewritten in place cannot use). Reads the file system, writes
    nothing (the doors open the file before any work)."""
    if value is None:
        return None
    rewritten = "the trace: the file is rewritten in place as it grows"
    if (problem := stdout_problem(value, rewritten)) is not None:
        return Problem(name, problem)
    if (problem := file_path_problem(value)) is not None:  # "traces/": never a file named traces
        return Problem(name, problem)
    path = Path(value)
    if path.is_dir():
        return Problem(name, f"{value} is a directory")
    if path.exists() and not path.is_file():  # /dev/null cannot be truncated; a pipe cannot seek
        why = "the trace is rewritten in place as it grows, which a device or a pipe cannot hold"
        return Problem(name, f"{value} is not a regular file: {why}")
    if (stream := standard_stream(path)) is not None:  # /dev/stdout under `> out.txt`: a regular file
        why = "the trace would be written over what the process writes there: give a file of its own"
        return Problem(name, f"{value} is this process's {stream}: {why}")
    try:
        target = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        return Problem(name, f"cannot write {value}: {os.strerror(errno.ELOOP)}")
    if (problem := folder_problem(target)) is not None:  # a link's target's directory
        return Problem(name, f"cannot write {value}: {problem}")
    return None


STANDARD_STREAMS = {1: "standard output", 2: "standard error"}  # by file descriptor


def standard_stream(path: Path) -> str | None:
    """Which of this process's `STANDARD_STREAMS` ``path`` is (its file, by any name), or None."""
    try:
        target = os.stat(path)
    except OSError:  # not there yet: no stream's
        return None
    for fd, stream in STANDARD_STREAMS.items():
        try:
            held = os.fstat(fd)
        except OSError:  # closed
            continue
        if (held.st_dev, held.st_ino) == (target.st_dev, target.st_ino):
            return stream
    return None
