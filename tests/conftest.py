"""Suite-wide settings.

Torch runs on one thread: the test models are tiny, so a second thread buys little on two cores
and costs a great deal when the machine is shared (measured here: 54 s -> 14 s for three model
test modules under load).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

try:
    import torch
except ImportError:  # the cache/scheduler tests run without the torch extra
    torch = None

if torch is not None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Iterator[None]:
    """Zoo models built into this session's temporary cache, not the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RADIXFLOW_CACHE", str(tmp_path_factory.getbasetemp() / "zoo"))
        yield
