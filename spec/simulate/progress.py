"""The progress bar: requests replayed, requests per second, time left.

A rich progress bar over every request of every point of the sweep. It is off
when the output is not a terminal (pipes, CI logs, tests) or with ``--quiet``;
then :func:`progress_bar` yields a function that does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """Requests per second, as rich measures it over the last updates."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f} req/s", style="progress.data.speed")


@contextmanager
def progress_bar(
    total: int, description: str, console: Console, *, quiet: bool = False
) -> Iterator[Callable[[int], None]]:
    """A bar of ``total`` requests; yields ``advance(k)``. No bar off a terminal or quiet."""
    if quiet or not console.is_terminal:
        yield lambda done: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.advance(task, done)
