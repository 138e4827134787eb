"""Result files written whole: a temporary file synced and renamed over the old one
(`write_whole`, `write_through`), JSON Lines that only ever end in a whole line (`WholeLineFile`),
and devices or pipes written in place (`written_in_place`) (a leaf: any layer's writer may use
it)."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def write_whole(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader, or a run cut short (Ctrl-C, a full disk), finds
    the old file or the whole new one, never part of it: into a temporary file beside it, then
    renamed over it (keeping the old file's permissions; a symlink's target is replaced, not the
    link; one that cannot be renamed over is copied into: `replace`). A device or pipe
    (`written_in_place`: ``/dev/stdout``, even where the shell sent it to a file) is written in
    place, after what it holds. Raises OSError as the write does; the
    temporary file is removed first."""
    path = Path(path)
    if written_in_place(path):  # appended: `>>` behind /dev/stdout asks it (`>` truncated already)
        with open(path, "a", encoding="utf-8") as out:
            out.write(text)
        return
    target = path.resolve()

    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")
        if target.exists():
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))

    write_through(target, write)


def write_through(path: str | Path, write: Callable[[Path], T]) -> T:
    """``write(tmp)`` into a temporary file beside ``path`` (named with ``path``'s suffix, for
    writers that read the format from it), renamed over ``path`` once ``write`` returns (`replace`),
    so a writer that fails part way (a plot on a full disk) leaves the old file or none, never a
    half-written one; nothing is renamed where ``write`` wrote nothing. Returns what ``write``
    returns; raises what it raises, the temporary file removed first."""
    target = Path(path).resolve()
    tmp = temporary_beside(target)
    try:
        made = write(tmp)
        if tmp.exists():
            synced_into_place(tmp, target)
        return made
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


NAME_MAX = 255  # bytes a file name may hold (Linux, macOS)


def temporary_beside(target: Path) -> Path:
    """``.STEM.PID.tmpSUFFIX`` beside ``target``, the suffix kept for writers that read the format
    from it, the stem cut so the name stays within `NAME_MAX` bytes: a name near the limit, which
    the up-front checks pass, made it too long, and the write failed once the run was done."""
    suffix = _cut(target.suffix, NAME_MAX // 2)  # a "suffix" this long is no format
    tail = f".{os.getpid()}.tmp{suffix}"
    stem = _cut(target.stem, NAME_MAX - 1 - len(os.fsencode(tail)))
    return target.with_name(f".{stem}{tail}")


def _cut(text: str, size: int) -> str:
    """``text``'s first ``size`` bytes as the file system holds them (a character cut in two
    is bytes a name may hold all the same)."""
    return os.fsdecode(os.fsencode(text)[:size])


def synced_into_place(done: Path, target: Path) -> None:
    """``done`` put in ``target``'s place (`replace`) once its data is on disk, and the rename
    synced after: else a power cut soon after could leave ``target`` renamed but empty or short,
    its data still in the page cache, where the old file (or the whole new one) should be."""
    fsync_path(done)
    replace(done, target)
    with contextlib.suppress(OSError):  # a directory some filesystems cannot sync: renamed all the same
        fsync_path(target.parent)


def fsync_path(path: Path) -> None:
    """Flush ``path`` (a file or a directory: its entries, a rename in it) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(done: Path, target: Path) -> None:
    """``done`` (a finished file beside ``target``) put in ``target``'s place: renamed over it, or,
    where ``target`` cannot be renamed over (a file bind-mounted into a container: EBUSY; one on
    another filesystem: EXDEV), copied into it in place and then removed."""
    try:
        os.replace(done, target)
    except OSError as e:
        if e.errno not in (errno.EBUSY, errno.EXDEV):
            raise
        shutil.copyfile(done, target)
        done.unlink()


class WholeLineFile(io.TextIOBase):
    """A text file (JSON Lines) that only ever ends in a whole line: `write` gathers text, `flush`
    writes it, and a flush that fails part way (a full disk, a Ctrl-C) cuts the file back to where
    that flush began before its error is raised. Unbuffered below, so nothing half written is left
    to go out later. Closing flushes what was gathered. ``append``: the file is not truncated
    but written after what it holds (a device such as /dev/stdout, behind which the shell may
    have opened a file to append to)."""

    def __init__(self, path: str | Path, append: bool = False) -> None:
        super().__init__()
        self._file = open(path, "ab" if append else "wb", buffering=0)  # noqa: SIM115 (closed by close())
        self._pending: list[str] = []
        self.lines = 0  # lines written out whole so far

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending.append(text)
        return len(text)

    def flush(self) -> None:
        if not self._pending:
            return
        text = "".join(self._pending)
        data = memoryview(text.encode("utf-8"))
        self._pending.clear()
        start = self._file.tell() if self._file.seekable() else None  # a pipe or a device is not cut
        try:
            while data:
                data = data[self._file.write(data) or 0 :]
        except BaseException:  # a full disk, or a Ctrl-C between two writes of one flush
            if start is not None:
                with contextlib.suppress(OSError):  # the write's error is the one to report
                    self._file.truncate(start)
                    self._file.seek(start)
            raise
        self.lines += text.count("\n")

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()  # flushes what was gathered
        finally:
            self._file.close()


def written_in_place(path: Path) -> bool:
    """Whether results for ``path`` go straight into it rather than into a file renamed over it:
    a path that exists and is not a regular file (a pipe, a terminal) or leads to a file
    descriptor (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``: the file behind it is the one
    the shell opened). A regular file that merely lies under ``/dev`` (``/dev/shm``) is not."""
    return _names_a_descriptor(path) or (path.exists() and not path.is_file())


def _names_a_descriptor(path: Path) -> bool:
    """Whether ``path``, its links followed one by one, is an entry of a file-descriptor
    directory (``/dev/fd``, ``/proc/PID/fd``; ``/dev/stdout`` links to ``/proc/self/fd/1``)."""
    here = os.path.abspath(path)
    for _ in range(40):  # as many links as the system follows
        folder = os.path.realpath(os.path.dirname(here))
        if folder == "/dev/fd" or re.fullmatch(r"/proc/[^/]+/fd", folder):
            return True
        if not os.path.islink(here):
            return False
        here = os.path.normpath(os.path.join(folder, os.readlink(here)))
    return False
