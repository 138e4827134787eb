"""benchmarks/fleet_serve.py: its flags are checked before any server starts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def fleet_serve():
    pytest.importorskip("openai")
    pytest.importorskip("httpx")
    spec = importlib.util.spec_from_file_location("fleet_serve", ROOT / "benchmarks" / "fleet_serve.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fleet_serve"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--routers", "pow2,round_robin"], "--routers: unknown router 'round_robin'"),
        (["--replicas", "1"], "--replicas: a fleet needs at least 2"),
    ],
)
def test_a_bad_flag_is_one_line_before_any_server_starts(fleet_serve, monkeypatch, capsys, argv, needle):
    # an unknown router was a RuntimeError traceback once its server had refused it (after the
    # routers before it had run); one replica (no Ray, no /fleet) a KeyError after the traffic
    def no_server(*_):
        raise AssertionError("a server was started")

    monkeypatch.setattr(fleet_serve, "one_router", no_server)
    monkeypatch.setattr(sys, "argv", ["fleet_serve.py", *argv])
    with pytest.raises(SystemExit) as e:
        fleet_serve.main()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert needle in err[-1] and "Traceback" not in "".join(err)
