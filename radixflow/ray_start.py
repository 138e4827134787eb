"""What every Ray instance this process starts or joins is given, the same for `serve --replicas`
(`cluster/launch.py`) and `experiment --ray` (`experiments/execute.py`)."""

from __future__ import annotations

import os

# ray.init's address where the user named none: a new instance on this machine. Ray's default
# (None) joins the cluster in $RAY_ADDRESS or one `ray start` left here instead.
LOCAL_RAY = "local"


def worker_pythonpath() -> str:
    """The workers' PYTHONPATH: this process's ahead of the one each node gives its own (Ray
    expands ``${PYTHONPATH}`` there), so this checkout runs where it exists and a node that finds
    radixflow through its own path (an image's) keeps it."""
    return os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), "${PYTHONPATH}") if p)
