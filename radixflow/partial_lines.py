"""JSON Lines that replace their file only once complete: `PartialLines` writes ``OUT.partial``
(going on after the whole lines an earlier run left: `kept_lines`), records what its rows are
computed under beside it (`recorded`), and one run at a time holds it (`PartialLock`) (a leaf
beside `files`, whose writers it uses)."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from radixflow.files import WholeLineFile, synced_into_place, write_whole


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
        """The record file opened (made where there is none), and whether this made it. A broken
        symbolic link in its place is an OSError: it can be neither made (the link exists) nor
        opened (what it names does not), which was tried forever."""
        while True:
            try:
                return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), True
            except FileExistsError:
                pass
            try:
                return os.open(self.path, os.O_RDWR), False
            except FileNotFoundError:  # removed in between: make it
                if os.path.islink(self.path):
                    raise OSError(errno.ENOENT, "a broken symbolic link", str(self.path)) from None

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
        finished = None  # the finished file, once it goes in the target's place
        try:
            self._file.close()  # flushes what was gathered
            if error is None:
                if self.target.exists():
                    os.chmod(self.partial, stat.S_IMODE(self.target.stat().st_mode))
                finished = os.stat(self.partial)
                synced_into_place(self.partial, self.target)
                record_path(self.partial).unlink(missing_ok=True)
                return
        except BaseException as e:
            if not self._placed(finished, e):
                self._kept(e)
            raise
        self._kept(error)

    def _placed(self, finished: os.stat_result | None, error: BaseException) -> bool:
        """Whether ``finished`` is in the target's place already (an interrupt came as the
        rename was synced, or as the record went), said on ``error``: the run had ended, and
        the partial file it would name is no longer there."""
        try:
            placed = finished is not None and os.path.samestat(os.stat(self.target), finished)
        except OSError:
            return False
        if placed:
            record_path(self.partial).unlink(missing_ok=True)
            rows = self._file.lines if self._file is not None else 0
            said = "its 1 row is" if rows == 1 else f"all {rows} rows are"
            error.add_note(f"the run had ended: {said} in {self.target}")
        return placed

    def _write_record(self) -> None:
        """Record what the rows are computed under. Going on from kept rows, a record that says
        so already is left as it is: opened for writing, it is emptied first, and a full disk or
        a kill right then left the kept rows beside an empty record, which no run goes on from.
        (Written in place: it is the file `PartialLock` holds locked.)"""
        if self._keep is not None and recorded(self.partial) == self._record:
            return
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
