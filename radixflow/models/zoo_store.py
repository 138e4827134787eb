"""The zoo's builds on disk: a cache directory of model builds, each a directory with its record
(`zoo_record`: provenance, the digest of what built it, each file's size and CRC-32), written last.

Where a build of a name lives (``<root>/<name>``, or beside another digest's build there under a
name keyed by its own digest), whether it is whole, building one under the cache lock into a
temporary directory renamed into place, sweeping what builds cut short left, and removing builds
long unused. Knows nothing of models: a build is a function that writes files into a directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from radixflow.files import fsync_path
from radixflow.models.zoo_record import (
    RECORD,
    built,
    damage,
    last_used,
    read_record,
    record_problem,
    stamp_used,
    write_record,
)

T = TypeVar("T")
Build = Callable[[Path], dict[str, Any]]  # writes a model into a directory, returns its provenance

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
            stamp_used(found)
            self._prune_unused(name, found)
        return found

    def target(self, name: str, digest: str) -> Path:
        """Where to build ``name`` with ``digest``: ``<root>/<name>`` when free or holding a damaged
        build of that digest or one whose record cannot be read (the zoo wrote it, and what built
        it is unknown: nothing to keep it for), else its keyed place beside the other build
        (`_places`)."""
        home, keyed = self._places(name, digest)
        ours = read_record(home).get("digest") == digest or record_problem(home) is not None
        return home if not home.exists() or ours else keyed

    def last_record(self, name: str) -> dict[str, Any]:
        """The record of the build of ``name`` used last; empty when there is none."""
        builds = sorted(self._builds(name), key=last_used)
        return read_record(builds[-1]) if builds else {}

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
                    log.warning("radixflow: warning: rebuilding the zoo's %s in %s: %s", name, target, why)
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
        return [b for b in self._builds(name) if b != keep and now - last_used(b) > UNUSED_BUILD_S]

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


def _build_into(tmp: Path, target: Path, build: Build, record: dict[str, Any], digest: str) -> None:
    """``build`` run in ``tmp``, its record (``record``, the provenance, ``digest``, the files'
    sizes and CRC-32s) written last, and ``tmp`` renamed to ``target``; ``tmp`` is removed whatever
    happens."""
    try:
        write_record(tmp, {**record, **build(tmp), "digest": digest})
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        _sync(tmp)
        _install(tmp, target)
        fsync_path(target.parent)  # the rename itself
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
