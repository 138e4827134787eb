"""`radixflow serve` in a process of its own, for the benchmarks that measure it over HTTP
(benchmarks/salt_memory.py, per_candidate.py, score_route.py, serve_load.py): this is how a parent
learns the server's URL from its banner (`listen.announced_url`).

The server binds ``--port 0`` and its banner says which port it got: a port picked here and passed
on could be taken by another process (a parallel test's) before the server bound it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

import httpx

from radixflow.server.listen import announced_url


def serve_process(
    args: Sequence[str], ready_s: float, env: Mapping[str, str] | None = None, relay: bool = False
) -> tuple[subprocess.Popen[str], str]:
    """`radixflow serve ARGS` on a loopback port it chose, once it answers ``/health``: (process,
    base URL without ``/v1``). ``env``: its environment (default: this process's); ``relay``: its
    standard error written to ours as it comes, else read and kept to its last line. Exits with one
    line if the server exits first (ending, unrelayed, with the last line it wrote: why it could not
    start), or has not answered within ``ready_s`` seconds of its start (it is then killed: a
    benchmark that gives up leaves no server behind)."""
    cmd = [sys.executable, "-m", "radixflow.cli", "serve", *args]
    cmd += ["--host", "127.0.0.1", "--port", "0", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    urls: list[str] = []
    last: list[str] = []  # unrelayed: the last line it wrote
    reader = threading.Thread(target=_read_stderr, args=(proc, urls, relay, last), daemon=True)
    reader.start()
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            reader.join(5)  # its last words (why it exited) relayed or kept before ours
            why = f": {last[0]}" if last else ""
            raise SystemExit(f"the server exited with {proc.returncode} before it was ready{why}")
        if urls and healthy(urls[0]):  # it announces once its model has loaded
            return proc, urls[0]
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise SystemExit(f"the server did not come up within {ready_s:g} s")


def _read_stderr(proc: subprocess.Popen[str], urls: list[str], relay: bool, last: list[str]) -> None:
    """``proc``'s standard error read to its end (a full pipe would stall it): the URL its banner
    names appended to ``urls``, each line written to ours when ``relay``, else the last non-blank
    one kept as ``last[0]``."""
    for line in proc.stderr or ():
        if relay:
            sys.stderr.write(line)
        elif line.strip():
            last[:] = [line.strip()]
        if not urls and (url := announced_url(line)):
            urls.append(url)


def healthy(url: str, timeout_s: float = 5) -> bool:
    """Whether the server at ``url`` (without ``/v1``) answers ``/health`` with 200 now."""
    try:
        return httpx.get(f"{url}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False
