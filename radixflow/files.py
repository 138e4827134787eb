"""A result file written whole (a leaf: any layer's writer may use it)."""

from __future__ import annotations

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
