"""server/spawn.py: a server process that never answers is one line, with what it said relayed
(or not) and, when it is given up on, killed. A stand-in child takes the server's place (its
command replaced): each test runs in a fraction of a second."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from radixflow.server import spawn

SAYS_AND_EXITS = "import os, sys; sys.stderr.write(os.environ.get('RF_SAID', 'nothing') + '\\n'); sys.exit(3)"
HANGS = "import time; time.sleep(60)"


@pytest.fixture
def child(monkeypatch):
    """Sets the code the next `serve_process` child runs instead of `radixflow serve`; the
    processes it started are listed."""
    started: list[subprocess.Popen[str]] = []
    code: list[str] = []
    real = subprocess.Popen

    def popen(cmd: list[str], **kwargs: object) -> subprocess.Popen[str]:
        assert cmd[1:4] == ["-m", "radixflow.cli", "serve"] and cmd[-5:-2] == ["127.0.0.1", "--port", "0"]
        started.append(real([sys.executable, "-c", code[0]], **kwargs))
        return started[-1]

    monkeypatch.setattr(spawn.subprocess, "Popen", popen)
    yield code, started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_server_that_exits_is_one_line_after_its_relayed_words(child, capsys) -> None:
    code, _ = child
    code.append(SAYS_AND_EXITS)
    env = {**os.environ, "RF_SAID": "no such model"}  # its environment is the one given
    with pytest.raises(SystemExit, match=r"^the server exited with 3 before it was ready$"):
        spawn.serve_process(["m"], 60, env=env, relay=True)
    assert "no such model\n" in capsys.readouterr().err


def test_unrelayed_its_last_words_end_the_line(child, capsys) -> None:
    # a server not relayed still says why it could not start: its last line closes the message
    code, _ = child
    code.append(SAYS_AND_EXITS)
    env = {**os.environ, "RF_SAID": "radixflow: error: no such model"}
    said = r"^the server exited with 3 before it was ready: radixflow: error: no such model$"
    with pytest.raises(SystemExit, match=said):
        spawn.serve_process(["m"], 60, env=env)
    assert "no such model" not in capsys.readouterr().err  # said once, in the message


def test_a_silent_server_that_exits_is_the_bare_line(child) -> None:
    code, _ = child
    code.append("import sys; sys.exit(4)")
    with pytest.raises(SystemExit, match=r"^the server exited with 4 before it was ready$"):
        spawn.serve_process(["m"], 60)


def test_a_server_given_up_on_is_killed(child) -> None:
    code, started = child
    code.append(HANGS)
    with pytest.raises(SystemExit, match=r"^the server did not come up within 0.2 s$"):
        spawn.serve_process(["m"], 0.2)
    assert started[0].returncode is not None  # not left running behind the benchmark
