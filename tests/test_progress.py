"""`LoggedProgress`: rich's bar on a terminal, a plain line per 5% of a task elsewhere."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from radixflow.progress import LoggedProgress


def run(console: Console, total: float | None, steps: list[float]) -> list[str]:
    with LoggedProgress(console=console, quiet_s=0.0) as progress:
        task = progress.add_task("work", total=total)
        for n in steps:
            progress.advance(task, n)
    return [line for line in console.file.getvalue().splitlines() if line.startswith("work:")]


def test_a_log_gets_a_line_per_five_percent_and_the_last():
    lines = run(Console(file=io.StringIO(), force_terminal=False, width=200), 100, [1] * 100)
    assert len(lines) == 20
    assert lines[0].startswith("work: 5/100 (5%), ") and lines[-1].startswith("work: 100/100 (100%), ")
    assert lines[-1].endswith("ETA 0 s")


def test_big_advances_print_once_per_crossing_and_updates_count_too():
    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    with LoggedProgress(console=console, quiet_s=0.0) as progress:
        task = progress.add_task("work", total=None)
        progress.update(task, total=10)  # the total arrives later, as the experiment's does
        progress.update(task, advance=3)
        progress.advance(task, 7)
    lines = [line for line in console.file.getvalue().splitlines() if line.startswith("work:")]
    assert [line.split(",")[0] for line in lines] == ["work: 3/10 (30%)", "work: 10/10 (100%)"]


def test_a_short_task_prints_no_lines():
    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    with LoggedProgress(console=console, quiet_s=60.0) as progress:
        task = progress.add_task("work", total=10)
        progress.advance(task, 10)
    assert "work:" not in console.file.getvalue()


def test_a_terminal_or_a_task_without_a_total_prints_no_lines():
    assert run(Console(file=io.StringIO(), force_terminal=True, width=200), 100, [1] * 100) == []
    assert run(Console(file=io.StringIO(), force_terminal=False, width=200), None, [1] * 10) == []


def test_a_description_is_shown_as_given_never_read_as_markup():
    # a grid named "load [req/s]" lost its brackets, and one holding "[/x]" ended the run with a
    # MarkupError, in a log and on a terminal alike
    for terminal in (False, True):
        console = Console(file=io.StringIO(), force_terminal=terminal, width=200)
        with LoggedProgress(console=console, quiet_s=0.0) as progress:
            task = progress.add_task("grid [req/s]", total=2)
            progress.advance(task)
            progress.update(task, description="grid [/x]", advance=1)
        text = console.file.getvalue()
        if not terminal:
            assert "grid [req/s]: 1/2 (50%)" in text and "grid [/x]: 2/2 (100%)" in text


def test_a_line_in_a_log_is_one_line_however_long():
    # a log is read (and grepped) line by line: a long description is not wrapped at 80 columns
    console = Console(file=io.StringIO(), force_terminal=False, width=80)
    description = "experiment: grid " + "/very/long/checkpoint" * 5
    with LoggedProgress(console=console, quiet_s=0.0) as progress:
        task = progress.add_task(description, total=1)
        progress.advance(task)
    lines = console.file.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{description}: 1/1 (100%), ")


def test_standard_output_that_is_not_a_terminal_is_left_alone(capsys):
    """A bar drawn on a terminal (standard error) took over standard output as well, printing
    what was written there onto the terminal: `radixflow score --input F > out.jsonl` left
    out.jsonl empty and put every result line on the screen."""
    console = Console(file=io.StringIO(), force_terminal=True, width=80)  # the bar is drawn
    with LoggedProgress(console=console) as progress:
        progress.add_task("work", total=2)
        print('{"line": 1}')  # standard output here is pytest's capture, not a terminal
    assert capsys.readouterr().out == '{"line": 1}\n'
    assert '{"line": 1}' not in console.file.getvalue()


class GoneTerminal(io.StringIO):
    """A terminal that hung up: every write fails, as a tty's do once it is closed (EIO)."""

    gone = False

    def write(self, text: str) -> int:
        if self.gone:
            raise OSError(5, "Input/output error")
        return super().write(text)


def test_a_bar_on_a_terminal_gone_lets_the_interrupt_that_ended_it_through():
    """A hangup took the terminal, then (taken as a Ctrl-C) stopped the run: the bar, cleared as it
    ended, failed to write, and that OSError replaced the interrupt (bench's JSON said an error,
    the command ended in a traceback and exit 1). Now the interrupt goes on as it came."""
    file = GoneTerminal()
    console = Console(file=file, force_terminal=True, width=80)
    with pytest.raises(KeyboardInterrupt), LoggedProgress(console=console) as progress:
        progress.add_task("work", total=10)
        file.gone = True
        raise KeyboardInterrupt
    assert not progress.live.is_started


class LogGone(io.StringIO):
    """A log that takes no more lines: its reader left (a pipe), or its disk is full."""

    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error


@pytest.mark.parametrize("error", [BrokenPipeError(32, "Broken pipe"), OSError(28, "No space left")])
def test_a_progress_line_the_log_cannot_take_is_dropped_not_the_run(monkeypatch, error):
    """A log whose reader left (`2> >(head)`) or whose disk filled ended the run at its first
    progress line: rich exited with status 1 (pointing standard output at /dev/null first, so the
    table and --json - were lost too), or the OSError was a crash; bench wrote none of its files.
    Now the line is dropped and the run goes on."""
    redirected = []
    monkeypatch.setattr("os.dup2", lambda *fds: redirected.append(fds))
    console = Console(file=LogGone(error), force_terminal=False, width=200)
    with LoggedProgress(console=console, quiet_s=0.0) as progress:
        task = progress.add_task("work", total=4)
        for _ in range(4):
            progress.advance(task, 1)
    assert progress.tasks[0].completed == 4 and redirected == []
