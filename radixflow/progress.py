"""A progress bar that still reports when nobody watches a terminal.

rich draws a live bar on a terminal and nothing at all elsewhere, so a long `radixflow
experiment`, `bench` or `calibrate` whose output goes to a log file (nohup, CI, a pipe) said
nothing until it ended. `LoggedProgress` is rich's bar on a terminal; anywhere else it prints a
plain line each time a task crosses another 5% of its total, once the task has run a few
seconds (a run that short needs no progress report, and a log of it stays clean).
"""

from __future__ import annotations

import contextlib
import sys
from types import TracebackType
from typing import IO, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, ProgressColumn, TaskID
from rich.text import Text

LOG_STEPS = 20  # lines per task when the output is not a terminal: one every 5%
QUIET_S = 5.0  # seconds a task runs before its first line


class LoggedProgress(Progress):
    """rich's transient progress bar, plus a line per 5% of a task when not on a terminal."""

    def __init__(
        self, *columns: str | ProgressColumn, console: Console, quiet_s: float | None = None
    ) -> None:
        # no live display off a terminal: there it draws nothing but a stray blank line when it
        # stops. rich's display takes standard output over, to print what is written there above
        # the bar, on the bar's console: only where standard output is a terminal too, else it is
        # a command's results (`score --input F > out.jsonl`), which would go to the screen instead
        super().__init__(
            *columns,
            console=console,
            transient=True,
            disable=not console.is_terminal,
            redirect_stdout=_is_terminal(sys.stdout),
        )
        self._quiet_s = QUIET_S if quiet_s is None else quiet_s
        self._logged: dict[TaskID, int] = {}  # task -> the last step it printed

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        """As rich's; a bar that cannot be cleared (the terminal gone: a hangup, an ssh session
        dropped) is no failure of the command: whatever ended the block (the hangup's interrupt)
        goes on as it came, and the command's own writes say what cannot be written."""
        with contextlib.suppress(OSError):
            super().__exit__(kind, error, tb)

    def add_task(self, description: str, *args: Any, **kwargs: Any) -> TaskID:
        """As rich's; the description is shown as given (see `update`)."""
        return super().add_task(escape(description), *args, **kwargs)

    def update(self, task_id: TaskID, **kwargs: Any) -> None:
        """As rich's (mutates the task); may print a line. A description is shown as given, never
        read as markup: it holds names from the user (a grid's "load [req/s]" lost its brackets,
        and one holding "[/x]" raised a MarkupError)."""
        if isinstance(kwargs.get("description"), str):
            kwargs["description"] = escape(kwargs["description"])
        super().update(task_id, **kwargs)
        self._log(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        """As rich's (mutates the task); may print a line."""
        super().advance(task_id, advance)
        self._log(task_id)

    def _log(self, task_id: TaskID) -> None:
        if self.console.is_terminal:
            return
        task = next((t for t in self.tasks if t.id == task_id), None)
        if task is None or not task.total or task.completed <= 0:
            return
        step = int(min(task.completed / task.total, 1.0) * LOG_STEPS)
        elapsed = task.elapsed or 0.0
        if step <= self._logged.get(task_id, 0) or elapsed < self._quiet_s:
            return
        self._logged[task_id] = step
        eta = elapsed * (task.total - task.completed) / task.completed
        name = Text.from_markup(task.description).plain  # as given (`add_task` escaped it)
        line = (
            f"{name}: {task.completed:.0f}/{task.total:.0f} ({task.completed / task.total:.0%}), "
            f"{elapsed:.0f} s, ETA {max(eta, 0.0):.0f} s\n"
        )
        # one line in a log however long, written as it is: a log that cannot take it (its reader
        # gone, its disk full) loses the line, not the run (rich's console would exit with status 1,
        # standard output pointed at /dev/null, the command's results with it)
        with contextlib.suppress(OSError):
            self.console.file.write(line)
            self.console.file.flush()


class RequestBar:
    """A `LoggedProgress` task counting answered requests: the ``progress`` hook of `LLM` calls
    (``bar.hear(done, total)``), for the commands that run them."""

    def __init__(self, progress: LoggedProgress, description: str) -> None:
        self.progress, self.task = progress, progress.add_task(description, total=None)

    def hear(self, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=total)


def _is_terminal(stream: IO[str] | None) -> bool:
    """Whether ``stream`` writes to a terminal (not for None, a stream without ``isatty`` or a
    closed one)."""
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
