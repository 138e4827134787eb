"""What the engine tells an observer of its run: the scheduler's events plus arrivals and rounds.

The engine holds ``events: EngineEvents | None`` and hands the same object to its scheduler;
None (the default) costs one ``is None`` test per arrival and per round. Times are engine seconds
(`Engine.now`): the sim runner's modelled clock, or on a real runner the measured worker calls
laid end to end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from radixflow.engine.records import RoundRecord
from radixflow.scheduler.events import SchedulerEvents
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.request import Request


class EngineEvents(SchedulerEvents, Protocol):
    def arrived(self, request: Request) -> None:
        """``request`` entered the waiting queue (it arrived at ``request.arrival_s``). Read only."""
        ...

    def ended(self, request: Request) -> None:
        """``request`` ended between rounds: aborted, stopped by its caller (a stop string), or
        refused at submit (FAILED, its error the refusal: ``arrived`` came just before); its
        status says which. Read only."""
        ...

    def round(self, record: RoundRecord, out: SchedulerOutput, finished: Sequence[str]) -> None:
        """A round ended: ``record`` (``record.error`` set when it was rolled back), the chunks it
        ran and the requests that finished in it. Called after the scheduler's update."""
        ...

    def flush(self) -> None:
        """Write out what was recorded so far (the engine's owner calls it at the end of a run)."""
        ...
