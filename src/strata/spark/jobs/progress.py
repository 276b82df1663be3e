"""Progress of a maintenance job: what phase it is in and how far its Spark tasks are.

Jobs call ``phase(description, total)`` and ``advance(done)`` on whatever progress object they
are given (``NullProgress`` by default). ``SparkTaskProgress`` (used by the CLI) shows a rich
progress bar on a terminal — fed by the phases and, while Spark runs, by the session's status
tracker (tasks done / tasks of the running stages) — and otherwise prints a line every
``every_s`` seconds, so a long job always shows it is alive.
"""

from __future__ import annotations

import threading
import time


class NullProgress:
    """Reports nothing."""

    def phase(self, description: str, total: int | None = None) -> None:
        pass

    def advance(self, done: int) -> None:
        pass


class SparkTaskProgress:
    """A context manager that shows job phases and Spark task counts on ``console``."""

    def __init__(self, spark, console, title: str, *, every_s: float = 10.0,
                 poll_s: float = 0.25) -> None:
        self.spark = spark
        self.console = console
        self.title = title
        self.every_s = every_s
        self.poll_s = poll_s
        self._desc = title
        self._total: int | None = None
        self._done = 0
        self._driver_phase = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar = None
        self._task = None
        self._t0 = time.monotonic()

    # ------------------------------------------------------------------ job side

    def phase(self, description: str, total: int | None = None) -> None:
        """A new phase; with ``total`` the job reports its own progress via ``advance``,
        without it the bar follows the Spark tasks of the running stages."""
        self._desc = f"{self.title}: {description}"
        self._total = total
        self._done = 0
        self._driver_phase = total is not None
        self._show()

    def advance(self, done: int) -> None:
        self._done = done
        self._show()

    # ------------------------------------------------------------------ display

    def _spark_tasks(self) -> tuple[int, int] | None:
        try:
            tracker = self.spark.sparkContext.statusTracker()
            done = total = 0
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
        except Exception:       # the session is stopping: nothing to show
            return None
        return (done, total) if total else None

    def _show(self) -> None:
        if not self._driver_phase:
            tasks = self._spark_tasks()
            if tasks is not None:
                self._done, self._total = tasks
        if self._bar is not None:
            self._bar.update(self._task, description=self._desc, completed=self._done,
                             total=self._total)

    def _run(self) -> None:
        last_line = time.monotonic()
        while not self._stop.wait(self.poll_s):
            self._show()
            if self._bar is None and time.monotonic() - last_line >= self.every_s:
                last_line = time.monotonic()
                what = f"{self._done}/{self._total}" if self._total else "working"
                unit = "" if self._driver_phase or not self._total else " tasks"
                self.console.print(f"{self._desc}: {what}{unit}, "
                                   f"{time.monotonic() - self._t0:.0f} s", highlight=False)

    def __enter__(self) -> "SparkTaskProgress":
        if self.console.is_terminal:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                       TextColumn, TimeElapsedColumn)
            self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=self.console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self._desc, total=None)
        else:
            self.console.print(f"{self.title}: started", highlight=False)
        self._thread = threading.Thread(target=self._run, name="strata-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.stop()
