"""`radixflow serve MODEL --replicas N --router R` in a process of its own, with a Ray session of
its own, for benchmarks/fleet_serve.py: started on a port it binds itself and reached where its
banner (in its log file) says, as `spawn` does for one replica; its Ray processes counted by their
session directory, so other Ray instances on the machine are never mistaken for this run's; and,
however the run ends, the server killed and its session directory removed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from radixflow.server.listen import announced_url
from radixflow.server.spawn import healthy


@dataclass(frozen=True)
class FleetLaunch:
    """How each router's server starts (the benchmark's flags): its model and replicas, how long
    it may take to answer ``/health``, and the directory its log goes to."""

    model: str
    replicas: int
    start_timeout: float
    log_dir: str


@dataclass(frozen=True)
class FleetServer:
    """One router's server, ready, its Ray session under ``ray_dir``."""

    router: str
    proc: subprocess.Popen
    port: int
    ray_dir: str


def ray_processes(ray_dir: str) -> int:
    """This run's Ray processes: those whose session lives under ``ray_dir`` (the server's
    ``RAY_TMPDIR``), whatever other Ray instances share the machine (another run's, a test's)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    ours = (line for line in out.splitlines() if f"{ray_dir}/" in line)
    return sum(("raylet" in line or "gcs_server" in line) for line in ours)


def ray_settled(ray_dir: str, timeout_s: float = 120.0) -> int:
    """This run's Ray processes left, once they stop shutting down (or at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while (left := ray_processes(ray_dir)) > 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def start(model: str, replicas: int, router: str, log: Path, ray_dir: str) -> subprocess.Popen:
    """The server on a port it picks (``--port 0``, bound before Ray starts), said in its banner."""
    cmd = [sys.executable, "-m", "radixflow.cli", "serve", model, "--replicas", str(replicas)]
    cmd += ["--router", router, "--host", "127.0.0.1", "--port", "0", "--log-level", "warning"]
    cmd += ["--policy", "radixflow"]  # the policy of docs/fleet.md's figures (adaptive is the default now)
    env = {**os.environ, "RAY_TMPDIR": ray_dir}  # its Ray session under a directory of its own
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def announced_port(log: Path) -> int | None:
    """The port the server's banner in its ``log`` names; None before the banner is out."""
    urls = (announced_url(line) for line in log.read_text(errors="replace").splitlines())
    url = next(filter(None, urls), None)
    return None if url is None else urlsplit(url).port


class NotReady(RuntimeError):
    """A router's server exited, or did not answer, before it was ready: one line saying why."""


def last_line(log: Path) -> str:
    """The last non-blank line of ``log`` (a server that exits says why last), stripped."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "it wrote nothing"


def wait_ready(proc: subprocess.Popen, log: Path, timeout_s: float) -> int:
    """The server's port, once it answers ``/health`` there; `NotReady` naming why (its log's
    last line) and the log, if it exits or has not answered within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = f"exited with {proc.returncode} before it was ready: {last_line(log)}"
            raise NotReady(f"{said} (log: {log})")
        port = announced_port(log)
        if port is not None and healthy(f"http://127.0.0.1:{port}", timeout_s=1):
            return port
        time.sleep(1)
    raise NotReady(f"was not ready within {timeout_s:.0f} s (log: {log})")


def started(launch: FleetLaunch, router: str, log: Path, ray_dir: str) -> tuple[subprocess.Popen, int]:
    """The server, ready, and its port: the one it bound itself before Ray started, so neither a
    parallel run nor Ray's own processes can take it between its choice and its bind."""
    proc = start(launch.model, launch.replicas, router, log, ray_dir)
    try:
        return proc, wait_ready(proc, log, launch.start_timeout)
    except NotReady as e:
        proc.kill()
        proc.wait()  # reaped: its Ray processes (fate-shared) go with it
        raise NotReady(f"the {router} server {e}") from None


@contextmanager
def fleet_servers(launch: FleetLaunch, routers: list[str]) -> Iterator[dict[str, FleetServer]]:
    """A ready server for each router, all running side by side (started one after another: Ray's
    ports are taken as each starts); however the run ends, each is killed if still running and its
    Ray session directory removed."""
    with ExitStack() as stack:
        servers = {router: stack.enter_context(fleet_server(launch, router)) for router in routers}
        yield servers


@contextmanager
def fleet_server(launch: FleetLaunch, router: str) -> Iterator[FleetServer]:
    log = Path(launch.log_dir) / f"fleet_serve_{router}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # short: Ray's socket paths under it must stay within the 107 bytes a Unix socket allows
    ray_dir = tempfile.mkdtemp(prefix="rf-ray-", dir="/tmp")
    try:  # removed however the run ends: a server that never got ready included
        proc, port = started(launch, router, log, ray_dir)
        try:
            yield FleetServer(router, proc, port, ray_dir)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()  # reaped: its Ray processes (fate-shared) go with it
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
