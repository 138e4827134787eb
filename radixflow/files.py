"""Result files written whole, and JSON Lines that end in a whole line and replace their file only
once complete (a leaf: any layer's writer may use it)."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TypeVar

T = TypeVar("T")


STDOUT = "-"  # standard output, wherever an output can go there; refused by one that cannot


def expand_home(text: str) -> str:
    """``text``, a path a user gave, with a leading ``~`` as the home directory: as the shell
    expands it (but not in ``--flag=~/x``, a TOML key or a Python option), and as a model path is
    read. Anything else as it is (a trailing separator kept, for `file_path_problem`)."""
    return os.path.expanduser(text)


def user_path(text: str) -> Path:
    """``text``, a path a user gave, as a `Path` (`expand_home`); ``./-`` (a file named ``-``)
    kept apart from `STDOUT`, which `Path`, dropping the ``./``, would make it."""
    path = Path(expand_home(text))
    return Path.cwd() / path if str(path) == STDOUT and text != STDOUT else path


def stdout_problem(text: str, holds: str) -> str | None:
    """Why ``text`` cannot be given to an output that cannot go to standard output (``holds``:
    what it holds, and why not): `STDOUT`, which the others take as standard output, never
    writes a file or directory of that name (None: it is not ``-``)."""
    if text != STDOUT:
        return None
    return f"- (standard output) cannot hold {holds}; give a path (./- for one named -)"


def file_path_problem(text: str) -> str | None:
    """Why ``text``, a path a user gives (a flag, a TOML key, an option), cannot name a file to
    write (None: it can): one that ends in a separator names a directory, which `Path` would
    drop, writing a file of the directory's name. The one rule for every output file."""
    if text.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)):
        return f"must be a file path, got {text!r} (a directory: name a file in it)"
    return None


def folder_problem(path: Path) -> str | None:
    """Why no file can be made at ``path`` for want of its directory (None: there is one): it
    does not exist, or it is a file (``notes.txt/out.json``), which "does not exist" misnamed."""
    folder = path.parent
    if folder.is_dir():
        return None
    if folder.exists():
        return f"{folder} is {'a file' if folder.is_file() else 'not a directory'}, not a directory"
    return f"directory {folder} does not exist"


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


@dataclass(frozen=True)
class KeptLines:
    """The whole lines a run cut short left in its partial file, and the bytes they take: a
    last line without its newline (the run killed as it wrote it) is not one of them."""

    lines: list[str]
    size: int
    torn: bool  # whether a last line cut short followed them
    in_file: bool = True  # whether the file's first `size` bytes are `lines` (else rewritten)

    def only(self, keep: list[bool]) -> KeptLines:
        """These lines but those ``keep`` (one flag a line) drops, for `PartialLines` to write
        anew (rows to run again: an answer of a server error)."""
        lines = [line for line, kept in zip(self.lines, keep, strict=True) if kept]
        size = sum(len(line.encode("utf-8")) + 1 for line in lines)
        return KeptLines(lines, size, self.torn, in_file=self.in_file and lines == self.lines)


def kept_lines(path: Path) -> KeptLines:
    """``path``'s whole lines (`KeptLines`). Raises OSError as the read does, and
    UnicodeDecodeError for a whole line that is not UTF-8 (not a file this wrote)."""
    data = path.read_bytes()
    size = data.rfind(b"\n") + 1
    # split at newlines alone, as they were written: JSON escapes every other line break
    return KeptLines(data[:size].decode("utf-8").split("\n")[:-1], size, size < len(data))


def record_path(partial: Path) -> Path:
    """The file beside ``partial`` that records what its rows were computed under (`PartialLines`)."""
    return partial.with_name(f"{partial.name}.meta")


def recorded(partial: Path) -> str | None:
    """What ``partial``'s rows were computed under, as `PartialLines` recorded it (None: no
    record, or one that cannot be read). Raises nothing."""
    try:
        return record_path(partial).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


class PartialHeld(Exception):
    """Another run holds a partial file's `PartialLock`: it is writing the same output."""


class PartialLock:
    """``partial``'s record file (`record_path`) held locked while a run writes ``partial``, so
    that a second run for the same output is refused (`PartialHeld`) rather than reading and
    writing the same file: a flock, which the kernel drops with the process, so a run killed
    (even by SIGKILL) leaves no lock behind, only the file. A filesystem without locks (NFS
    without its lock daemon) runs unlocked, as before there was one. Leaving, the record file
    is removed where this made it and no partial file came of it (a run that failed first)."""

    def __init__(self, partial: Path) -> None:
        self.partial = partial
        self.path = record_path(partial)
        self._fd: int | None = None
        self._made = False

    def __enter__(self) -> PartialLock:
        import fcntl  # POSIX only: imported here, so that the module reads anywhere

        while self._fd is None:
            fd, made = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise PartialHeld(str(self.path)) from None
            except OSError:  # no locks here: unlocked
                pass
            if self._is(fd):
                self._fd, self._made = fd, made
            else:  # the holder removed it as it ended, after this opened it: lock the new one
                os.close(fd)
        return self

    def _open(self) -> tuple[int, bool]:
        """The record file opened (made where there is none), and whether this made it."""
        while True:
            try:
                return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), True
            except FileExistsError:
                pass
            try:
                return os.open(self.path, os.O_RDWR), False
            except FileNotFoundError:  # removed in between: make it
                continue

    def _is(self, fd: int) -> bool:
        """Whether ``fd`` is the file at the record's path still."""
        try:
            here, held = os.stat(self.path), os.fstat(fd)
        except FileNotFoundError:
            return False
        return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)

    def __exit__(self, *exc: object) -> None:
        assert self._fd is not None
        try:
            if self._made and not self.partial.exists() and self._is(self._fd):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)  # the lock goes with it
            self._fd = None


class PartialLines:
    """JSON Lines for ``path`` that replace it only once they are all written: entered, a
    `WholeLineFile` at ``path.partial`` (created fresh, or, given ``keep``, cut back to the
    kept lines, or written anew with them where `KeptLines.only` dropped some, and written after
    them), renamed over ``path`` when the block
    ends (keeping the old file's permissions; a symlink's target is replaced, not the link;
    one that cannot be renamed over is copied into: `replace`). Cut short by an exception (a
    Ctrl-C, a failure), ``path`` is left as it was and the exception
    gets a note saying how many rows ``path.partial`` holds (none: it is removed), ended by
    ``what_next``. ``record``: what the rows are computed under (the caller's text), kept in
    ``path.partial.meta`` (`record_path`) while ``path.partial`` is, so a run that goes on from
    it can tell whether it computes what they were computed under (`recorded`)."""

    def __init__(
        self, path: str | Path, keep: KeptLines | None = None, what_next: str = "", record: str = ""
    ) -> None:
        path = Path(path)
        self.target = path.resolve() if path.is_symlink() else path
        self.partial = self.target.with_name(f"{self.target.name}.partial")
        self._keep = keep
        self._what_next = what_next  # the note's end: what a user can do with the rows kept
        self._record = record
        self._file: WholeLineFile | None = None

    def __enter__(self) -> WholeLineFile:
        if self._keep is None:
            self.partial.unlink(missing_ok=True)  # an earlier run's, or one of another owner
            self._write_record()  # before the first row: no row is left under another's record
            self._file = WholeLineFile(self.partial)
            return self._file
        if self._keep.in_file:
            os.truncate(self.partial, self._keep.size)  # a torn last line goes: its row runs again
        else:  # lines dropped: the rest written anew, whole (a Ctrl-C leaves the old file)
            write_whole(self.partial, "".join(f"{line}\n" for line in self._keep.lines))
        self._write_record()
        self._file = WholeLineFile(self.partial, append=True)
        self._file.lines = len(self._keep.lines)
        return self._file

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._file is not None
        try:
            self._file.close()  # flushes what was gathered
            if error is None:
                if self.target.exists():
                    os.chmod(self.partial, stat.S_IMODE(self.target.stat().st_mode))
                synced_into_place(self.partial, self.target)
                record_path(self.partial).unlink(missing_ok=True)
                return
        except BaseException as e:
            self._kept(e)
            raise
        self._kept(error)

    def _write_record(self) -> None:
        """Record what the rows are computed under."""
        with open(record_path(self.partial), "w", encoding="utf-8") as out:
            out.write(self._record)

    def _kept(self, error: BaseException) -> None:
        """Say where the rows written so far are, or remove a partial file without any."""
        rows = self._file.lines if self._file is not None else 0
        if not rows:
            self.partial.unlink(missing_ok=True)
            record_path(self.partial).unlink(missing_ok=True)
            return
        said = "1 row written so far is" if rows == 1 else f"{rows} rows written so far are"
        error.add_note(f"the {said} in {self.partial}{self._what_next}")
