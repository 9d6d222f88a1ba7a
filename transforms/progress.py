"""Progress of a run: workers count scored rows, the driver shows one bar (or periodic lines) for the whole run.

How the counts reach the driver, on every local mode (in-process, multi-threading,
``--direct_running_mode=multi_processing`` with separate worker processes): each
:class:`CountRows` instance (one per worker thread) keeps its own tally and rewrites a
tiny JSON file of its own, ``<tmp>/beameval-progress-<run_id>/<pid>-<uuid>``, at most
every ``FLUSH_S`` seconds and at the end of each bundle (atomically: write, then rename).
The driver's :class:`ProgressDisplay` polls that directory and sums the files. Beam's
metrics are not used because not every runner shows them before the job ends, and the
directory needs no network, no port and no extra process; it is removed at the end.

On a terminal the driver draws one tqdm bar, redrawn in place: rows done of total,
percentage, rows/s, ETA, errors (and responses from the cache, once there are any).
Otherwise it prints a plain line every ``--progress_interval`` seconds::

    progress: 120,000 rows scored (12.0% of 1,000,000), 3 errors, 41,000 rows/s, ETA 0:00:21

On remote runners (Dataflow, Flink) the driver cannot see the workers' disks: each
worker thread prints its own lines (with its pid) to the worker logs instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import apache_beam as beam

from beameval.core.records import ScoredRow
from transforms.row_batches import rows_of

__all__ = [
    "CountRows",
    "ProgressCounts",
    "ProgressDisplay",
    "ProgressLines",
    "format_progress",
    "progress_dir",
    "read_counts",
    "watch_progress",
]

#: Seconds between a worker's count-file rewrites (the bar lags the workers by at most this).
FLUSH_S = 0.2
#: Seconds between redraws of the terminal bar.
BAR_REFRESH_S = 0.2


def progress_dir(run_id: str) -> str:
    """The run-scoped directory of count files (on the machine running the local runner)."""
    return os.path.join(tempfile.gettempdir(), f"beameval-progress-{run_id}")


@dataclass(frozen=True)
class ProgressCounts:
    """The whole run's counts so far, summed over every worker's file."""

    rows: int = 0
    errors: int = 0
    cached: int = 0
    total: int | None = None
    #: Wall-clock time (``time.time()``) of the first scored row, None before it.
    started: float | None = None


def read_counts(directory: str) -> ProgressCounts:
    """Sum the count files in ``directory``; files being replaced or unreadable are skipped this time."""
    rows = errors = cached = 0
    total: int | None = None
    started: float | None = None
    try:
        names = os.listdir(directory)
    except OSError:
        return ProgressCounts()
    for name in names:
        if name.endswith(".tmp"):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            continue
        rows += int(record.get("rows", 0))
        errors += int(record.get("errors", 0))
        cached += int(record.get("cached", 0))
        if record.get("total") is not None:
            total = max(total or 0, int(record["total"]))
        if record.get("started") is not None:
            started = min(started or record["started"], record["started"])
    return ProgressCounts(rows, errors, cached, total, started)


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


class CountRows(beam.DoFn):
    """Count scored rows and publish the tally; emits nothing.

    Args:
        directory: the run's count-file directory (local runners), or None to print lines
            from this worker instead (remote runners, whose disks the driver cannot see).
        interval: seconds between this worker's lines when ``directory`` is None.
    """

    def __init__(self, directory: str | None, interval: float) -> None:
        self._directory = directory
        self._interval = interval

    def setup(self) -> None:
        self._rows = self._errors = self._cached = 0
        self._total: int | None = None
        self._started: float | None = None
        self._last = time.monotonic()
        self._path = (
            None if self._directory is None else os.path.join(self._directory, f"{os.getpid()}-{uuid.uuid4().hex}")
        )

    def process(self, element: ScoredRow | list[ScoredRow], total: int | None = None) -> Iterable[Any]:
        if self._started is None:
            self._started = time.time()
        self._total = total
        for row in rows_of(element):
            self._rows += 1
            if row.failure is not None:
                self._errors += 1
            if row.inference.cached:
                self._cached += 1
        now = time.monotonic()
        if now - self._last >= (FLUSH_S if self._path is not None else self._interval):
            self._last = now
            self._publish()
        return ()

    def finish_bundle(self) -> None:
        if self._path is not None:
            self._publish()

    def _publish(self) -> None:
        if self._path is None:
            elapsed = time.time() - (self._started or time.time())
            print(format_progress(self._rows, self._errors, elapsed, None, os.getpid()), file=sys.stderr, flush=True)
            return
        record = {
            "rows": self._rows,
            "errors": self._errors,
            "cached": self._cached,
            "total": self._total,
            "started": self._started,
        }
        temporary = f"{self._path}.tmp"
        with contextlib.suppress(OSError):  # the driver removed the directory: the run is over
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            os.replace(temporary, self._path)


class ProgressLines(beam.PTransform):
    """Scored rows -> nothing; publishes the counts the driver shows (``interval`` > 0).

    Args:
        run_id: unique per pipeline run (names the count-file directory).
        interval: seconds between plain lines (remote runners: between each worker's lines).
        splits: the reader's planned splits (``.rows`` each), for the total; None on remote
            runners, whose workers print their own lines.
        limit: the row limit, which caps the total.
    """

    def __init__(
        self, run_id: str, interval: float, splits: beam.PCollection[Any] | None = None, limit: int | None = None
    ) -> None:
        super().__init__()
        self._fn = CountRows(None if splits is None else progress_dir(run_id), interval)
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


class ProgressDisplay:
    """The driver's side: poll the count files and draw one bar (a terminal) or print lines.

    Args:
        directory: the run's count-file directory (created here, removed by ``stop``).
        interval: seconds between plain lines; the bar is redrawn every ``BAR_REFRESH_S``.
        stream: where to draw; defaults to ``sys.stderr``.
        bar: draw a tqdm bar; defaults to whether ``stream`` is a terminal.
    """

    def __init__(self, directory: str, interval: float, stream: Any = None, bar: bool | None = None) -> None:
        self.directory = directory
        self.interval = interval
        self.stream = stream or sys.stderr
        self.bar = bool(self.stream.isatty()) if bar is None else bar
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="progress-display", daemon=True)
        self._tqdm: Any = None
        self._finished = False

    def start(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; the bar shows the final counts (100% when every row was scored) and ends its line."""
        self._stopped.set()
        self._thread.join()
        if self._tqdm is not None:
            self._draw(read_counts(self.directory))
            self._tqdm.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _loop(self) -> None:
        period = min(self.interval, BAR_REFRESH_S) if self.bar else self.interval
        while not self._stopped.wait(period):
            counts = read_counts(self.directory)
            if self.bar:
                self._draw(counts)
            elif not self._finished:
                # Lines stop once every row is scored (the run is writing its outputs); until
                # then one comes every interval, so a run waiting on a slow endpoint still shows life.
                self._finished = counts.total is not None and counts.rows >= counts.total
                elapsed = time.time() - counts.started if counts.started is not None else 0.0
                print(format_progress(counts.rows, counts.errors, elapsed, counts.total), file=self.stream, flush=True)

    def _draw(self, counts: ProgressCounts) -> None:
        if self._tqdm is None:
            from tqdm import tqdm  # only a terminal needs it

            self._tqdm = tqdm(
                total=counts.total,
                desc="scored",
                unit=" rows",
                file=self.stream,
                dynamic_ncols=True,
                mininterval=0,
                smoothing=0.1,
                bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} rows "
                "[{elapsed}<{remaining}, {rate_fmt}{postfix}]",
            )
        bar = self._tqdm
        if counts.total is not None and bar.total != counts.total:
            bar.total = counts.total
        cached = f", {counts.cached:,} cached" if counts.cached else ""
        bar.set_postfix_str(f"{counts.errors:,} error{'' if counts.errors == 1 else 's'}{cached}", refresh=False)
        bar.update(max(0, counts.rows - bar.n))
        bar.refresh()


@contextlib.contextmanager
def watch_progress(run_id: str, interval: float, stream: Any = None) -> Iterator[ProgressDisplay | None]:
    """Show the run's progress while the block runs (the driver's pipeline run); ``interval`` 0: nothing."""
    if interval <= 0:
        yield None
        return
    display = ProgressDisplay(progress_dir(run_id), interval, stream)
    display.start()
    try:
        yield display
    finally:
        display.stop()
