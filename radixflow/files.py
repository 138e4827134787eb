"""Result files written whole, and JSON Lines that end in a whole line (a leaf: any layer's writer may
use it)."""

from __future__ import annotations

import contextlib
import io
import os
import stat
from pathlib import Path


def write_whole(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader, or a run cut short (Ctrl-C, a full disk), finds
    the old file or the whole new one, never part of it: into a temporary file beside it, then
    renamed over it (keeping the old file's permissions; a symlink's target is replaced, not the
    link). A path that exists and is not a regular file (``/dev/stdout``, a pipe) is written in
    place. Raises OSError as the write does; the temporary file is removed first."""
    path = Path(path)
    if path.exists() and not path.is_file():
        path.write_text(text, encoding="utf-8")
        return
    target = path.resolve()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        if target.exists():
            os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class WholeLineFile(io.TextIOBase):
    """A text file (JSON Lines) that only ever ends in a whole line: `write` gathers text, `flush`
    writes it, and a flush that fails part way (a full disk) cuts the file back to where that
    flush began before its OSError is raised. Unbuffered below, so nothing half written is left
    to go out later. Closing flushes what was gathered."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self._file = open(path, "wb", buffering=0)  # noqa: SIM115 (closed by close())
        self._pending: list[str] = []

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending.append(text)
        return len(text)

    def flush(self) -> None:
        if not self._pending:
            return
        data = memoryview("".join(self._pending).encode("utf-8"))
        self._pending.clear()
        start = self._file.tell() if self._file.seekable() else None  # a pipe or a device is not cut
        try:
            while data:
                data = data[self._file.write(data) or 0 :]
        except OSError:
            if start is not None:
                with contextlib.suppress(OSError):  # the write's error is the one to report
                    self._file.truncate(start)
                    self._file.seek(start)
            raise

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()  # flushes what was gathered
        finally:
            self._file.close()
