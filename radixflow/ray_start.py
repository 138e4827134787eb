"""What every Ray instance this process starts or joins is given, the same for `serve --replicas`
(`cluster/launch.py`) and `experiment --ray` (`experiments/execute.py`)."""

from __future__ import annotations

import os
import re
import socket

from radixflow.plugins import PLUGINS_ENV, plugin_modules

# ray.init's address where the user named none: a new instance on this machine. Ray's default
# (None) joins the cluster in $RAY_ADDRESS or one `ray start` left here instead.
LOCAL_RAY = "local"


def worker_pythonpath() -> str:
    """The workers' PYTHONPATH: this process's ahead of the one each node gives its own (Ray
    expands ``${PYTHONPATH}`` there), so this checkout runs where it exists and a node that finds
    radixflow through its own path (an image's) keeps it."""
    return os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), "${PYTHONPATH}") if p)


def worker_env() -> dict[str, str]:
    """The environment each Ray worker is given: `worker_pythonpath`, and the user's modules to
    import (a worker imports radixflow's modules, never theirs): those RADIXFLOW_PLUGINS names and
    those defining an entry this process registered (a script's own, `__main__`, no worker has)."""
    named = [m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",") if m.strip()]
    named += [m for m in plugin_modules() if m != "__main__" and m not in named]
    return {"PYTHONPATH": worker_pythonpath(), **({PLUGINS_ENV: ",".join(named)} if named else {})}


# seconds to wait for the cluster's address to take a connection before ray.init is called
CONNECT_TIMEOUT_S = 5.0
# seconds to wait for its first bytes: Ray's ports (gRPC) send their HTTP/2 settings at once
ANSWER_TIMEOUT_S = 2.0
# asked of whatever listens there: a web server answers it; Ray's ports drop it after their settings
HTTP_PROBE = b"GET / HTTP/1.0\r\n\r\n"
RAY_CLIENT_PORT = 10001  # where a ray:// address names no port
MAX_PORT = 65535
HEAD = (
    "give the address of the cluster's head (HOST:6379 unless `ray start` was told otherwise, "
    "or ray://HOST:10001)"
)


def unreachable(address: str) -> str | None:
    """Why nothing takes a connection at the cluster ``address`` (``host:port``, or a client's
    ``ray://host:port``); None where something does, or the address is no host and port ("auto",
    a malformed one: ray.init's to judge). Checked first because ray.init retries an address with
    nothing listening for minutes on end, printing a warning every few seconds, never an error;
    so it does one where a web server answers (Ray's dashboard, whose address Ray's job tools take).
    One that names no host is refused too (ray.init logs a traceback of it)."""
    if address.lower().startswith(("http://", "https://")):  # RAY_ADDRESS as Ray's job tools take it
        return f"an http address is Ray's dashboard (for Ray's job tools), not the cluster's: {HEAD}"
    bad_port = port_problem(address)
    if bad_port is not None:
        return bad_port
    named = host_and_port(address)
    if named is None:
        return None
    host, port = named
    if not host:  # ray.init logs a traceback first ("ray://": waits out Ray Client's 30 s)
        return f"it names no host: {HEAD}"
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=CONNECT_TIMEOUT_S) as conn:
            if _answers_http(conn):
                return f"{host}:{port} answers HTTP (a web server, such as Ray's dashboard), not Ray: {HEAD}"
            return None
    except OSError as e:
        return f"cannot connect to {host}:{port} ({e.strerror or e})"


def port_problem(address: str) -> str | None:
    """Why the port ``address`` names is none, in the words every door uses for a bad port (None:
    it names a good one, or none). A port out of range was refused as nothing listening there
    ("Connection refused"), and -1 or a word reached ray.init, which retried -1 for minutes. Pure."""
    rest = address.removeprefix("ray://")
    _, sep, port = rest.rpartition(":")
    if not sep or rest.endswith("]"):  # no port: "auto", "ray://head", "ray://[::1]"
        return None
    if not re.fullmatch(r"-?[0-9]+", port):  # int() takes " 80", "+80" and "8_0" too
        return f"its port must be an integer, got {port!r}"
    number = int(port)
    if number < 1:  # port 0 takes no connection
        return f"its port must be at least 1, got {number}"
    if number > MAX_PORT:
        return f"its port must be at most {MAX_PORT}, got {number}"
    return None


def host_and_port(address: str) -> tuple[str, int] | None:
    """The host and port ``address`` names (a ray:// one without a port: Ray Client's); None
    where it names no port ("auto", a malformed one). Pure."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if address.startswith("ray://") and (not sep or rest.endswith("]")):  # "[::1]" has colons too
        return rest, RAY_CLIENT_PORT
    return (host, int(port)) if sep and port.isdigit() else None


def _answers_http(conn: socket.socket) -> bool:
    """Whether what listens at ``conn`` answers as a web server (HTTP/1). Anything else, silence
    included (a port that waits for TLS), is left to ray.init."""
    conn.settimeout(ANSWER_TIMEOUT_S)
    try:
        conn.sendall(HTTP_PROBE)
        return conn.recv(5) == b"HTTP/"
    except OSError:
        return False
