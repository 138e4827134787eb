"""The zoo's builds on disk: a cache directory of model builds, each a directory with its record
(`RECORD`: provenance, the digest of what built it, each file's size and CRC-32), written last.

Where a build of a name lives (``<root>/<name>``, or beside another digest's build there under a
name keyed by its own digest), whether it is whole, building one under the cache lock into a
temporary directory renamed into place, sweeping what builds cut short left, and removing builds
long unused. Knows nothing of models: a build is a function that writes files into a directory.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
import zlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from radixflow.files import fsync_path

T = TypeVar("T")
Build = Callable[[Path], dict[str, Any]]  # writes a model into a directory, returns its provenance

RECORD = "radixflow_zoo.json"  # the build's provenance and digest, written last
# a build of a name other than the one a caller uses, unused this long, is removed: the build of a
# radixflow version (or a preset) no longer run; builds in use by versions sharing a cache stay
UNUSED_BUILD_S = 7 * 24 * 3600
log = logging.getLogger("radixflow.models")


class CacheDirError(OSError):
    """The zoo's cache directory cannot hold a model (a file, not writable): one line naming it
    and where it came from (an OSError, as the failure it replaces was)."""


@dataclass(frozen=True)
class BuildStore:
    root: Path
    source: str  # where ``root`` came from, for messages about it
    names: Collection[str]  # every name built here: what builds of them cut short left is swept

    def find(self, name: str, digest: str) -> Path | None:
        """The whole build of ``name`` with ``digest`` (`built`), stamped as used, the other builds
        of the name long unused removed if the cache lock is free; None when there is none."""
        found = next((place for place in self._places(name, digest) if built(place, digest)), None)
        if found is not None:
            _used(found)
            self._prune_unused(name, found)
        return found

    def target(self, name: str, digest: str) -> Path:
        """Where to build ``name`` with ``digest``: ``<root>/<name>`` when free or holding a damaged
        build of that digest or one whose record cannot be read (the zoo wrote it, and what built
        it is unknown: nothing to keep it for), else its keyed place beside the other build
        (`_places`)."""
        home, keyed = self._places(name, digest)
        ours = _record(home).get("digest") == digest or record_problem(home) is not None
        return home if not home.exists() or ours else keyed

    def last_record(self, name: str) -> dict[str, Any]:
        """The record of the build of ``name`` used last; empty when there is none."""
        builds = sorted(self._builds(name), key=_last_used)
        return _record(builds[-1]) if builds else {}

    def build(self, name: str, build: Build, record: dict[str, Any], digest: str) -> Path:
        """Where ``name`` with ``digest`` is built under the cache lock (`target`, chosen once the
        lock is held: a build of another digest made there while this caller waited, another
        version's starting at once, is kept), its record ``record`` with the build's provenance,
        ``digest`` and files, unless another caller built it while this one waited; then the builds
        of ``name`` long unused are removed."""
        with self._lock() as locked:
            target = self.target(name, digest)
            if not built(target, digest):
                why = damage(target, digest)
                if why is not None:  # a cache rebuilt without a word looks like a slow start
                    log.warning("rebuilding the zoo's %s in %s: %s", name, target, why)
                if locked:  # unlocked, a temporary directory may be a build under way elsewhere
                    self._sweep()
                tmp = self._build_dir(name)  # the name, not the target's: `_sweep` finds what a kill leaves
                self._in_cache(lambda: _build_into(tmp, target, build, record, digest))
            if locked:  # unlocked, a build unused this long may be one another caller just chose
                self._prune(name, target)
        return target

    # ----------------------------------------------------------------- places
    def _places(self, name: str, digest: str) -> tuple[Path, Path]:
        """Where a build of ``name`` with ``digest`` may be: ``<root>/<name>``, or, where that held
        another's build when it was made (another radixflow version's, another preset's), beside it
        under a name keyed by its digest, so that the two are not rebuilt over each other in turn."""
        return self.root / name, self.root / f"{name}.{digest[:12]}"

    def _builds(self, name: str) -> list[Path]:
        """Every build of ``name`` (a directory here with a record), keyed ones too."""
        keyed = re.compile(re.escape(name) + r"\.[0-9a-f]{12}")
        places = [self.root / name, *(p for p in self.root.glob(f"{name}.*") if keyed.fullmatch(p.name))]
        return [p for p in places if (p / RECORD).is_file()]

    # ----------------------------------------------------------------- clearing up
    def _unused(self, name: str, keep: Path) -> list[Path]:
        """The builds of ``name`` but ``keep`` unused for `UNUSED_BUILD_S`: a version no longer run."""
        now = time.time()
        return [b for b in self._builds(name) if b != keep and now - _last_used(b) > UNUSED_BUILD_S]

    def _prune(self, name: str, keep: Path) -> None:
        """Remove the builds of ``name`` but ``keep`` long unused; each is first renamed to a
        temporary name (`_sweep` removes what a cut-short removal leaves), so no half-removed build
        is ever found under its name. Only under the cache lock; a cache it cannot write keeps them."""
        for build in self._unused(name, keep):
            aside = self.root / f".{name}.tmp-unused-{build.name}"
            with contextlib.suppress(OSError):
                os.rename(build, aside)
            shutil.rmtree(aside, ignore_errors=True)

    def _prune_unused(self, name: str, keep: Path) -> None:
        """`_prune` on reuse, where there is something to remove and the cache lock is free now: a
        caller never waits for a build of another model under way only to remove an old one."""
        with contextlib.suppress(OSError):
            if not self._unused(name, keep):
                return
            with self._lock(wait=False) as locked:
                if locked:
                    self._prune(name, keep)

    def _sweep(self) -> None:
        """Remove the temporary directories (``.<zoo name>.tmp-*``) that builds cut short (killed, a
        power cut) left. Only under the cache lock, where no build is under way."""
        for name in self.names:
            for leftover in self.root.glob(f".{name}.tmp-*"):
                shutil.rmtree(leftover, ignore_errors=True)

    # ----------------------------------------------------------------- the directory
    @contextlib.contextmanager
    def _lock(self, wait: bool = True) -> Iterator[bool]:
        """The cache locked against builds into it by other callers, in this process or another: one
        model is built once while the others wait, and no build's temporary directory is swept
        while it is under way. A flock on the directory itself: no lock file to create or clean up,
        and the lock goes with a process that dies. Yields whether it is held: a filesystem without
        locks (NFS without its lock daemon, some FUSE mounts) still builds, as it did before there
        was one; without ``wait``, not held either while another caller holds it."""
        import fcntl  # POSIX only: imported here, so that the presets read anywhere

        fd = self._in_cache(lambda: _open_dir(self.root))
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                yield False
            else:
                yield True
        finally:
            os.close(fd)

    def _build_dir(self, name: str) -> Path:
        """A fresh private directory here to build ``name`` in."""
        return self._in_cache(lambda: Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=self.root)))

    def _in_cache(self, make: Callable[[], T]) -> T:
        """``make()``, with an OSError from a cache that is a file, not writable or full a
        `CacheDirError` naming it and where it came from (not a bare errno naming some path,
        perhaps a temporary one already removed)."""
        root = self.root
        try:
            return make()
        except OSError as e:
            why = "not a directory" if root.exists() and not root.is_dir() else (e.strerror or str(e))
            cannot = f"model cache directory {root} ({self.source}) cannot hold models: {why}"
            raise CacheDirError(cannot) from None


def built(target: Path, digest: str) -> bool:
    """Whether ``target`` is a whole zoo build whose record has ``digest``: every file the build
    wrote is there at the size it wrote it (a cut copy, a file lost to a disk error is rebuilt)
    and, where the record holds checksums (builds recorded before have none), with the CRC-32 it
    had (a bit flipped in place). The files are read whole: docs/real-models.md says what that
    costs."""
    record = _record(target)
    return record.get("digest") == digest and _flaw(target, record) is None


def damage(target: Path, digest: str) -> str | None:
    """Why the build at ``target`` is no whole build of ``digest``, in a few words: its record
    cannot be read, or a file it lists is cut, missing or changed; None when nothing is there,
    or it is whole, or another digest's."""
    problem = record_problem(target)
    if problem is not None:
        return problem
    record = _record(target)
    return _flaw(target, record) if record.get("digest") == digest else None


def record_problem(build: Path) -> str | None:
    """Why ``build``'s record cannot be read: unreadable, not JSON, not a JSON object; None when
    it reads, or there is none."""
    path = build / RECORD
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:  # bad UTF-8 is a ValueError too
        return f"its {RECORD} cannot be read ({getattr(e, 'strerror', None) or e})"
    return None if isinstance(record, dict) else f"its {RECORD} holds no JSON object"


def _flaw(target: Path, record: dict[str, Any]) -> str | None:
    """What of ``target``'s files is not as its ``record`` says they were built; None: whole."""
    files, sums = record.get("files"), record.get("crc32", {})
    if not isinstance(files, dict) or not files:
        return f"its {RECORD} lists no files"
    for file, size in files.items():
        if _size(target / file) != size:
            return f"{file} is missing or not the {size} bytes it was built with"
    if not isinstance(sums, dict):
        return f"its {RECORD} holds no checksums it can read"
    changed = next((file for file, crc in sums.items() if crc32(target / file) != crc), None)
    return None if changed is None else f"{changed} changed since it was built (its CRC-32 differs)"


def crc32(path: Path) -> int | None:
    """CRC-32 of ``path``'s bytes (None: unreadable); a few MiB held at a time. Not a defence
    against tampering, only against accidents: it catches every single-bit flip and burst error
    up to 32 bits, at about twice SHA-256's speed."""
    crc = 0
    try:
        with path.open("rb") as f:
            while chunk := f.read(1 << 22):
                crc = zlib.crc32(chunk, crc)
    except OSError:
        return None
    return crc


def _build_into(tmp: Path, target: Path, build: Build, record: dict[str, Any], digest: str) -> None:
    """``build`` run in ``tmp``, its record (``record``, the provenance, ``digest``, the files'
    sizes and CRC-32s) written last, and ``tmp`` renamed to ``target``; ``tmp`` is removed whatever
    happens."""
    try:
        provenance = build(tmp)
        made = sorted(tmp.iterdir())
        files, sums = {f.name: f.stat().st_size for f in made}, {f.name: crc32(f) for f in made}
        whole = {**record, **provenance, "digest": digest, "files": files, "crc32": sums}
        (tmp / RECORD).write_text(json.dumps(whole, indent=2))
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        _sync(tmp)
        _install(tmp, target)
        fsync_path(target.parent)  # the rename itself
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _record(build: Path) -> dict[str, Any]:
    """``build``'s record; empty when there is none, or it is unreadable or no JSON object."""
    try:
        record = json.loads((build / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _last_used(build: Path) -> float:
    """When ``build`` was last reused or made: its record's mtime (`_used`); a record gone since
    it was listed counts as in use (never pruned for it)."""
    try:
        return (build / RECORD).stat().st_mtime
    except OSError:
        return float("inf")


def _used(build: Path) -> None:
    """Stamp ``build`` as used now (its record's mtime); a cache it cannot write keeps its stamp."""
    with contextlib.suppress(OSError):
        os.utime(build / RECORD)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _install(tmp: Path, target: Path) -> None:
    """The finished build ``tmp`` renamed to ``target``; a stale build there is first renamed aside
    (under ``tmp``'s name, so a cut-short install leaves only temporary names) and removed after."""
    aside = tmp.with_name(tmp.name + ".old")
    with contextlib.suppress(FileNotFoundError):  # nothing built there before
        os.rename(target, aside)
    os.rename(tmp, target)
    shutil.rmtree(aside, ignore_errors=True)


def _sync(tmp: Path) -> None:
    """Every file in ``tmp``, then ``tmp`` itself, flushed to disk: renamed into place before that,
    a crash could leave the final name holding empty or partial files."""
    for file in tmp.iterdir():
        fsync_path(file)
    fsync_path(tmp)


def _open_dir(root: Path) -> int:
    root.mkdir(parents=True, exist_ok=True)
    return os.open(root, os.O_RDONLY)
