"""JSONL traces: one request per line, written and read back exactly."""

from __future__ import annotations

import json
from pathlib import Path

from radixflow.scheduler.request import Request


class TraceError(ValueError):
    pass


def write_trace(path: str | Path, requests: list[Request]) -> None:
    with open(path, "w") as f:
        for r in requests:
            row = {
                "id": r.id,
                "namespace": r.namespace,
                "arrival_s": r.arrival_s,
                "group": r.group,
                "kind": r.kind,
                "prompt": list(r.prompt),
            }
            f.write(json.dumps(row) + "\n")


def read_trace(path: str | Path) -> list[Request]:
    """Parse a trace; a malformed line raises `TraceError` naming the file and line number."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise TraceError(f"{path}: cannot read trace ({e.strerror})") from None
    out: list[Request] = []
    seen: set[str] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        req = _parse(line, f"{path}:{lineno}")
        if req.id in seen:
            raise TraceError(f"{path}:{lineno}: duplicate request id {req.id!r}")
        seen.add(req.id)
        out.append(req)
    if not out:
        raise TraceError(f"{path}: trace has no requests")
    return out


def _parse(line: str, where: str) -> Request:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise TraceError(f"{where}: not valid JSON ({e.msg})") from None
    if not isinstance(row, dict):
        raise TraceError(f"{where}: expected a JSON object")
    prompt = row.get("prompt")
    if not isinstance(prompt, list) or not prompt or not all(type(t) is int for t in prompt):
        raise TraceError(f"{where}: 'prompt' must be a non-empty list of integer token ids")
    arrival = row.get("arrival_s", 0.0)
    if not isinstance(arrival, int | float) or arrival < 0:
        raise TraceError(f"{where}: 'arrival_s' must be a number >= 0")
    rid = row.get("id")
    if not isinstance(rid, str) or not rid:
        raise TraceError(f"{where}: 'id' must be a non-empty string")
    group = row.get("group")
    if group is not None and type(group) is not int:
        raise TraceError(f"{where}: 'group' must be an integer or null")
    return Request(
        id=rid,
        prompt=tuple(prompt),
        namespace=str(row.get("namespace", "default")),
        arrival_s=float(arrival),
        group=group,
        kind=str(row.get("kind", "candidate")),
    )
