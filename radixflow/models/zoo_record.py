"""A zoo build's record (`RECORD`, in the build's directory, written last): its provenance, the
digest of what built it, each file's size and CRC-32. Written (`write_record`), read
(`read_record`), held against the files (`built`, `damage`, `record_problem`) and stamped at each
use (`stamp_used`, `last_used`). Knows nothing of models or of the cache's places and lock
(`zoo_store`).
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from pathlib import Path
from typing import Any

from radixflow.jsonl import json_value

RECORD = "radixflow_zoo.json"  # the build's provenance and digest, written last


def write_record(build: Path, record: dict[str, Any]) -> None:
    """``record`` (provenance and digest) written into ``build`` beside the files the build made,
    with each one's size and CRC-32: last, so a build with a record is whole."""
    made = sorted(build.iterdir())
    files, sums = {f.name: f.stat().st_size for f in made}, {f.name: crc32(f) for f in made}
    (build / RECORD).write_text(json.dumps({**record, "files": files, "crc32": sums}, indent=2))


def built(target: Path, digest: str) -> bool:
    """Whether ``target`` is a whole zoo build whose record has ``digest``: every file the build
    wrote is there at the size it wrote it (a cut copy, a file lost to a disk error is rebuilt)
    and, where the record holds checksums (builds recorded before have none), with the CRC-32 it
    had (a bit flipped in place). The files are read whole: docs/real-models.md says what that
    costs."""
    record = read_record(target)
    return record.get("digest") == digest and _flaw(target, record) is None


def damage(target: Path, digest: str) -> str | None:
    """Why the build at ``target`` is no whole build of ``digest``, in a few words: its record
    cannot be read, or a file it lists is cut, missing or changed; None when nothing is there,
    or it is whole, or another digest's."""
    problem = record_problem(target)
    if problem is not None:
        return problem
    record = read_record(target)
    return _flaw(target, record) if record.get("digest") == digest else None


def record_problem(build: Path) -> str | None:
    """Why ``build``'s record cannot be read: unreadable, not JSON, not a JSON object; None when
    it reads, or there is none."""
    path = build / RECORD
    try:
        record = json_value(path.read_text())
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


def read_record(build: Path) -> dict[str, Any]:
    """``build``'s record; empty when there is none, or it is unreadable or no JSON object."""
    try:
        record = json_value((build / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def last_used(build: Path) -> float:
    """When ``build`` was last reused or made: its record's mtime (`stamp_used`); a record gone since
    it was listed counts as in use (never pruned for it)."""
    try:
        return (build / RECORD).stat().st_mtime
    except OSError:
        return float("inf")


def stamp_used(build: Path) -> None:
    """Stamp ``build`` as used now (its record's mtime); a cache it cannot write keeps its stamp."""
    with contextlib.suppress(OSError):
        os.utime(build / RECORD)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
