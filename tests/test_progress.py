"""`LoggedProgress`: rich's bar on a terminal, a plain line per 5% of a task elsewhere."""

from __future__ import annotations

import io

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
