"""ReportProgress: periodic ``progress:`` lines on stderr for long runs, one reporter per worker process.

A pass-through-free DoFn after scoring counts the rows it sees; a daemon thread of its
worker process prints, every ``--progress_interval`` seconds while rows are flowing::

    progress: 120,000 rows scored (12.0% of 1,000,000), 3 errors, 41,000 rows/s, ETA 0:00:21

Counting happens per DoFn instance (one per worker thread) without locks; the thread
only reads the tallies. With several worker processes (``--direct_num_workers``,
Dataflow, Flink) each process prints its own line about its own rows; the percentage and
ETA then assume the rows are shared evenly among ``workers`` processes. On the default
local runner the workers run inside the driver, so the lines appear on the command's
stderr; on remote runners they go to the worker logs.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from beameval.core.records import ScoredRow

__all__ = ["ProgressLines", "ProgressReporter", "ReportProgress", "format_progress"]


class _Tally:
    """Rows and errors seen by one DoFn instance; written only by that instance's thread."""

    __slots__ = ("errors", "rows")

    def __init__(self) -> None:
        self.rows = 0
        self.errors = 0


def format_progress(rows: int, errors: int, elapsed_s: float, total: int | None, pid: int | None = None) -> str:
    """One progress line: rows, share of the total, errors, rows/s, ETA (when the total is known), worker pid."""
    rate = rows / elapsed_s if elapsed_s > 0 else 0.0
    done = f"{rows:,} rows scored"
    eta = ""
    if total:
        done += f" ({100.0 * rows / total:.1f}% of {total:,})"
        if rate > 0:
            remaining = max(0.0, (total - rows) / rate)
            eta = f", ETA {int(remaining) // 3600}:{int(remaining) % 3600 // 60:02d}:{int(remaining) % 60:02d}"
    worker = f" [worker pid {pid}]" if pid is not None else ""
    return f"progress: {done}, {errors:,} error{'' if errors == 1 else 's'}, {rate:,.0f} rows/s{eta}{worker}"


class ProgressReporter:
    """The worker process's reporter: sums the tallies of one run and prints every ``interval`` seconds.

    Args:
        run_id: identifies the run; a new id (the next pipeline in the same process) starts from zero.
        interval: seconds between lines.
        stream: where lines go; ``None`` means the current ``sys.stderr`` at print time.
    """

    _lock = threading.Lock()
    _current: ProgressReporter | None = None

    def __init__(self, run_id: str, interval: float, stream: Any = None) -> None:
        self.run_id = run_id
        self.interval = interval
        self.stream = stream
        self.show_pid = False
        self.total: int | None = None
        self._tallies: list[_Tally] = []
        self._active_bundles = 0
        self._started: float | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @classmethod
    def shared(cls, run_id: str, interval: float) -> ProgressReporter:
        """The process-wide reporter for ``run_id`` (replacing, and stopping, one of an earlier run)."""
        with cls._lock:
            current = cls._current
            if current is None or current.run_id != run_id:
                if current is not None:
                    current.stop()
                current = cls._current = cls(run_id, interval)
            return current

    def tally(self) -> _Tally:
        """A new counter for one DoFn instance."""
        tally = _Tally()
        with self._lock:
            self._tallies.append(tally)
        return tally

    def bundle_started(self) -> None:
        """Note a bundle in progress; start the clock and the printing thread if needed."""
        with self._lock:
            self._active_bundles += 1
            if self._started is None:
                self._started = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="progress-reporter", daemon=True)
                self._thread.start()

    def bundle_finished(self) -> None:
        with self._lock:
            self._active_bundles = max(0, self._active_bundles - 1)

    def stop(self) -> None:
        self._stopped.set()

    def counts(self) -> tuple[int, int]:
        """Rows and errors seen so far in this process."""
        tallies = list(self._tallies)
        return sum(t.rows for t in tallies), sum(t.errors for t in tallies)

    def line(self) -> str:
        rows, errors = self.counts()
        elapsed = time.monotonic() - (self._started or time.monotonic())
        return format_progress(rows, errors, elapsed, self.total, os.getpid() if self.show_pid else None)

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval):
            with self._lock:
                if not self._active_bundles:
                    # No rows flowing here: this process's share of the stage is done. The next
                    # bundle starts a new thread, so no line is printed after the stage ends.
                    self._thread = None
                    return
            print(self.line(), file=self.stream or sys.stderr, flush=True)


class ReportProgress(beam.DoFn):
    """Count scored rows for the process's progress reporter; emits nothing.

    Args:
        run_id: unique per pipeline run.
        interval: seconds between progress lines (must be > 0).
        workers: worker processes sharing the rows (for the per-process share of ``total``).
        show_pid: end each line with the worker's pid (several processes print lines).
    """

    def __init__(self, run_id: str, interval: float, workers: int = 1, show_pid: bool = False) -> None:
        self._run_id = run_id
        self._interval = interval
        self._workers = max(1, workers)
        self._show_pid = show_pid

    def setup(self) -> None:
        self._reporter = ProgressReporter.shared(self._run_id, self._interval)
        self._reporter.show_pid = self._show_pid
        self._tally = self._reporter.tally()

    def start_bundle(self) -> None:
        self._reporter.bundle_started()

    def process(self, row: ScoredRow, total: int | None = None) -> Iterable[Any]:
        if total is not None and self._reporter.total is None:
            self._reporter.total = -(-total // self._workers)
        tally = self._tally
        tally.rows += 1
        if row.failure is not None:
            tally.errors += 1
        return ()

    def finish_bundle(self) -> None:
        self._reporter.bundle_finished()


class ProgressLines(beam.PTransform):
    """Scored rows -> nothing; prints progress lines from each worker process (``interval`` > 0).

    Args:
        run_id: unique per pipeline run.
        interval: seconds between lines.
        workers: worker processes sharing the rows.
        splits: the reader's planned splits (``.rows`` each), to know the total; None (remote
            runners, with an unknown number of processes) for lines without ETA but with the pid.
        limit: the row limit, which caps the total.
    """

    def __init__(
        self,
        run_id: str,
        interval: float,
        workers: int = 1,
        splits: beam.PCollection[Any] | None = None,
        limit: int | None = None,
    ) -> None:
        super().__init__()
        self._fn = ReportProgress(run_id, interval, workers, show_pid=workers > 1 or splits is None)
        self._splits = splits
        self._limit = limit

    def expand(self, rows: beam.PCollection[ScoredRow]) -> beam.PCollection[Any]:
        if self._splits is None:
            return rows | "Count" >> beam.ParDo(self._fn)
        limit = self._limit
        total = (
            self._splits
            | "SplitRows" >> beam.Map(lambda split: split.rows)
            | "Total" >> beam.CombineGlobally(sum)
            | "Limit" >> beam.Map(lambda n: n if limit is None else min(n, limit))
        )
        return rows | "Count" >> beam.ParDo(self._fn, total=beam.pvalue.AsSingleton(total))
