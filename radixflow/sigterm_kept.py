"""`sigterm_kept`: a SIGTERM handler that outlives a library installing its own (Ray's ``ray.init``)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sigterm_kept() -> Iterator[None]:
    """While entered, a library may set SIGTERM's handler; on leaving, the one found on entry is
    back. ``ray.init`` installs ``sys.exit(15)``: a SIGTERM then skipped what the command's own
    handler does (the CLI's: taken as a Ctrl-C, the finished work said, exit 143) and ended the
    process with status 15. Off the main thread (where no handler can be set) a
    no-op; a handler set outside Python (`signal.getsignal` None) is left as the library set it."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGTERM, before)
