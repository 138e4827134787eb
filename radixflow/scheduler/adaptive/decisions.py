"""The adaptive policy's decisions about the request a scan is at (follow its producer, recompute,
promote a producer, wait, defer): a decision is counted and noted in the trace once its request
gets its chunk; a wait once per request, a defer at once."""

from __future__ import annotations

from collections.abc import Callable

# the counter of each decision noted once the request got its chunk
COUNTED = {"follow": "follows", "recompute": "recomputes", "promote": "promotions"}

Note = Callable[..., None]  # `PolicyContext.note`: (kind, request_id, **details)


class Decisions:
    """The counts of the policy's decisions (`counters`), the decision about the request the scan
    is at until it is scheduled, and the consumers following their producer in this round."""

    def __init__(self) -> None:
        self._counts = {"waits": 0, "follows": 0, "recomputes": 0, "promotions": 0, "deferred": 0}
        # the decision about the request the scan is at, counted and noted if it gets its chunk
        self._decided: tuple[str, str, dict[str, object]] | None = None
        self._waited: set[str] = set()  # consumers counted as waiting once
        self.followers: set[str] = set()  # consumers following their producer in this round

    def counters(self) -> dict[str, int]:
        return dict(self._counts)

    def new_round(self) -> None:
        self.followers.clear()

    def decide(self, request_id: str, kind: str, details: dict[str, object]) -> None:
        """``kind`` (a key of `COUNTED`) decided about the request the scan is at."""
        self._decided = (request_id, kind, details)

    def clear(self) -> None:
        """Nothing decided yet about the request the scan is at."""
        self._decided = None

    def scheduled(self, request_id: str, note: Note) -> None:
        """The request decided about last got its chunk: count and note the decision."""
        decided, self._decided = self._decided, None
        if decided is None or decided[0] != request_id:
            return
        _, kind, details = decided
        if kind == "follow":
            self.followers.add(request_id)
        self._counts[COUNTED[kind]] += 1
        note(kind, request_id, **details)

    def waited(self, request_id: str) -> None:
        """A blocked consumer left waiting: counted once per request."""
        if request_id not in self._waited:
            self._waited.add(request_id)
            self._counts["waits"] += 1

    def deferred(self, request_id: str, note: Note) -> None:
        """The scan ended at a request whose unit the round's cut leaves."""
        self._counts["deferred"] += 1
        note("defer", request_id)

    def forget(self, request_id: str) -> None:
        self._waited.discard(request_id)
