"""What every Ray instance this process starts or joins is given, the same for `serve --replicas`
(`cluster/launch.py`) and `experiment --ray` (`experiments/execute.py`)."""

from __future__ import annotations

import os
import socket

# ray.init's address where the user named none: a new instance on this machine. Ray's default
# (None) joins the cluster in $RAY_ADDRESS or one `ray start` left here instead.
LOCAL_RAY = "local"


def worker_pythonpath() -> str:
    """The workers' PYTHONPATH: this process's ahead of the one each node gives its own (Ray
    expands ``${PYTHONPATH}`` there), so this checkout runs where it exists and a node that finds
    radixflow through its own path (an image's) keeps it."""
    return os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), "${PYTHONPATH}") if p)


# seconds to wait for the cluster's address to take a connection before ray.init is called
CONNECT_TIMEOUT_S = 5.0


def unreachable(address: str) -> str | None:
    """Why nothing takes a connection at the cluster ``address`` (``host:port``, or a client's
    ``ray://host:port``); None where something does, or the address is no host and port ("auto",
    a malformed one: ray.init's to judge). Checked first because ray.init retries an address with
    nothing listening for minutes on end, printing a warning every few seconds, never an error."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            return None
    except OSError as e:
        return f"cannot connect to {host}:{port} ({e.strerror or e})"
