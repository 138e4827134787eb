"""Binding the server's socket before anything slow happens, so a bad ``--host`` or a port in use
is one line naming the flag, not uvicorn's traceback after the model has loaded.

The socket listens from then on and is handed to uvicorn (`uvicorn.Server.run(sockets=...)`), so
nothing can take the port between this check and its use: bound alone, with address reuse on (as
uvicorn sets it), a second server bound the port too while the first loaded its model, and both
listened on it. A connection made while the model loads waits in the backlog for its answer.
"""

from __future__ import annotations

import errno
import re
import socket

from radixflow.problems import Problem, ProblemError

LISTEN_BACKLOG = 2048  # uvicorn's default backlog: the connections waiting to be accepted


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port``, listening. Raises `ProblemError` naming
    ``host`` (cannot be resolved, or is not an address of this machine) or ``port`` (in use, or
    not ours to take)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as e:
        reason = e.strerror if isinstance(e, socket.gaierror) else str(e)
        raise ProblemError(Problem("host", f"cannot resolve {host!r}: {reason}")) from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart binds
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)  # now: a port only bound is one another such socket may bind
    except OSError as e:
        sock.close()
        raise ProblemError(_bind_problem(host, port, e)) from None
    sock.set_inheritable(True)
    return sock


def _bind_problem(host: str, port: int, e: OSError) -> Problem:
    if e.errno == errno.EADDRINUSE:
        return Problem("port", f"{port} is already in use on {host} (is another server running?)")
    if e.errno == errno.EACCES:
        return Problem("port", f"no permission to listen on {port} (ports below 1024 need privileges)")
    if e.errno == errno.EADDRNOTAVAIL:
        return Problem("host", f"{host!r} is not an address of this machine")
    return Problem("host", f"cannot listen on {host}:{port}: {e.strerror or e}")


def bound_port(sock: socket.socket) -> int:
    """The port ``sock`` is bound to (the one the system chose for port 0)."""
    return int(sock.getsockname()[1])


def base_url(host: str, port: int) -> str:
    """The API's base URL on ``host``:``port``, an IPv6 literal in brackets (``http://[::1]:8000/v1``:
    unbracketed, the port reads as part of the address and no client can open it)."""
    shown = f"[{host}]" if ":" in host else host  # no host name holds a colon
    return f"http://{shown}:{port}/v1"


# the line `radixflow serve` writes to standard error once it is about to answer (cli/serve.py,
# cli/serve_fleet.py): ``radixflow: serving MODEL on BASE_URL (threads, ...)``
_BANNER = re.compile(r"radixflow: serving .* on (http://\S+)/v1 ")


def announced_url(line: str) -> str | None:
    """The server's URL (``http://HOST:PORT``, without ``/v1``) that a banner line names, or None
    for any other line: with ``--port 0`` the banner is where the port the system chose is said.
    The last `` on http://`` in the line is taken: a model's name may hold one, the rest may not."""
    found = _BANNER.match(line)
    return found.group(1) if found else None
