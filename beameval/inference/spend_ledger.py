"""The job's spend ledger: one folder that every worker process of a job on one machine shares.

``OUT_DIR/_responses/spend/`` (in the journal, so ``--resume`` keeps it and ``--overwrite``
removes it) holds two kinds of file:

* ``spent-<invocation>-<pid>-<random>.log``, one per process: as its replies are settled,
  the process appends a JSON line with its cumulative tokens, dollars and, per endpoint
  (``endpoint_label``), requests, prompt and completion tokens: one ``write(2)`` on an
  ``O_APPEND`` descriptor per reply when the job has a budget (so a process killed with
  kill -9 has lost nothing it had settled), else at most every ``FLUSH_S`` seconds and at
  exit (usage only, so a kill may lose its last tenth of a second); the last complete
  line of a file is that process's spend, and the job's spend is the sum over every file
  of every invocation (``spent_in``), which is what a ``--resume`` starts from and what
  its ``results.json`` adds to its own usage (``usage_before``).
* ``leases-<invocation>.json``: how much of this invocation's budget its processes have
  taken, and what the batches submitted and not yet collected hold of it (their estimates:
  ``hold``, and ``hold_for_invocation`` for those a ``--resume`` finds running), changed
  under an exclusive ``flock``. A collected batch's hold is settled by whichever process
  collects it (``settle_hold``): what its answers used stays taken, the rest is free. A
  process spends only what it leased; when its next request does not fit, it leases at
  least what it lacks and up to 1/(2W) of what is left (so the chunks shrink as the budget
  runs out, and what an idle worker holds at the end is small), and it gives back what it
  holds when it stops. The processes
  together never lease more than the budget, and each stops only when the job's budget,
  not a fixed 1/W share of it, cannot pay for its next request.

Local folders only (``fcntl``): every local runner and worker pools on one machine. On a
remote OUT_DIR the run gives each of W workers 1/W of the budget instead.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import math
import os
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any

__all__ = [
    "SPEND_DIR",
    "SpendLedger",
    "endpoint_label",
    "hold_for_invocation",
    "record_spent",
    "spent_in",
    "usage_before",
]

#: The ledger's folder inside the journal (``OUT_DIR/_responses/``).
SPEND_DIR = "spend"
#: Dollars below this are rounding, not a shortfall.
_USD_EPSILON = 1e-12
#: Bytes read from the end of a spend log to find its last complete line.
_TAIL_BYTES = 65536
#: The longest a settled reply waits to be written to the spend log.
FLUSH_S = 0.1
#: Per endpoint label: [requests, prompt tokens, completion tokens].
EndpointUsage = dict[str, list[int]]
_OPEN: weakref.WeakSet[SpendLedger] = weakref.WeakSet()


def endpoint_label(endpoint_key: str) -> str:
    """How the ledger names an endpoint: a digest of its key (URL, model, key fingerprint), so no URL is written."""
    return hashlib.sha256(endpoint_key.encode("utf-8")).hexdigest()[:16]


class SpendLedger:
    """One process's view of the job's ledger: its own spend log and this invocation's leases.

    Args:
        folder: the ledger's folder (created if missing).
        invocation: this invocation's id (its leases are its own; spend logs of earlier
            invocations count in ``spent_in``).
        workers: W, the worker processes sharing the leases (sizes the chunks).
        max_tokens: the tokens this invocation may lease in all (None: no token cap).
        max_usd: the dollars it may lease in all (None: no dollar cap).

    """

    def __init__(
        self, folder: str, invocation: str, workers: int, max_tokens: float | None, max_usd: float | None
    ) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        self._workers = max(1, workers)
        self._caps = (max_tokens, max_usd)
        self._leases = os.path.join(folder, f"leases-{invocation}.json")
        name = f"spent-{invocation}-{os.getpid()}-{uuid.uuid4().hex[:8]}.log"
        self._log = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._write_lock = threading.Lock()
        self._pending: tuple[float, float, EndpointUsage] | None = None  # the last spend noted, not yet written
        self._written_at = 0.0
        self._timer: threading.Timer | None = None
        _OPEN.add(self)

    def lease(self, need_tokens: float, need_usd: float) -> tuple[float, float] | None:
        """Take at least ``need_*`` of what the budget has not leased yet; None (nothing taken) when it lacks it."""
        with _Locked(self._leases) as handle:
            taken = _read_pair(handle)
            grant = []
            for cap, need, already in zip(self._caps, (need_tokens, need_usd), taken, strict=True):
                if cap is None:
                    grant.append(0.0)
                    continue
                left = cap - already
                if need > left + _USD_EPSILON:
                    return None
                grant.append(min(left, max(need, left / (2 * self._workers))) if left > 0 else 0.0)
            _write_pair(handle, (taken[0] + grant[0], taken[1] + grant[1]))
        return grant[0], grant[1]

    def hold(self, tokens: float, usd: float) -> bool:
        """Take exactly ``tokens`` and ``usd`` (a batch's estimate) if they are not leased yet; False: they are."""
        with _Locked(self._leases) as handle:
            taken = _read_pair(handle)
            need = (tokens if self._caps[0] is not None else 0.0, usd if self._caps[1] is not None else 0.0)
            for cap, wanted, already in zip(self._caps, need, taken, strict=True):
                if cap is not None and already + wanted > cap + _USD_EPSILON:
                    return False
            _write_pair(handle, (taken[0] + need[0], taken[1] + need[1]))
        return True

    def settle_hold(self, held: tuple[float, float], used: tuple[float, float]) -> None:
        """A held batch was collected: what it ``used`` stays taken (its collector spent it), the rest is free."""
        delta = [u - h if cap is not None else 0.0 for cap, h, u in zip(self._caps, held, used, strict=True)]
        _add_taken(self._leases, delta[0], delta[1])

    def give_back(self, tokens: float, usd: float) -> None:
        """Return leased budget this process will not spend (it stopped)."""
        _add_taken(self._leases, -max(tokens, 0.0), -max(usd, 0.0))

    def record(self, tokens: float, usd: float, endpoints: EndpointUsage, *, now: bool) -> None:
        """Note this process's cumulative spend: appended at once with ``now``, else within ``FLUSH_S`` seconds.

        A budget needs every settled reply on disk before the next request (``now``); usage
        alone can lose the last tenth of a second to a kill.
        """
        # A copy, encoded when written: without a budget most replies are superseded by the next one
        # within FLUSH_S, and encoding each as it was settled was most of a reply's ledger work.
        snapshot = (tokens, usd, {label: counts[:] for label, counts in endpoints.items()})
        with self._write_lock:
            self._pending = snapshot
            wait = self._written_at + FLUSH_S - time.monotonic()
            if now or wait <= 0:
                self._write()
            elif self._timer is None:
                self._timer = threading.Timer(wait, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        """Append what was noted and not written yet."""
        with self._write_lock:
            self._timer = None
            self._write()

    def close(self) -> None:
        """Append what is pending and close the spend log (the run is over in this process)."""
        with self._write_lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._write()
            if self._log >= 0:
                os.close(self._log)
                self._log = -1
        _OPEN.discard(self)

    def _write(self) -> None:
        if self._pending is not None and self._log >= 0:
            tokens, usd, endpoints = self._pending
            line = json.dumps({"tokens": tokens, "usd": usd, "endpoints": endpoints}, separators=(",", ":")) + "\n"
            os.write(self._log, line.encode("ascii"))
            self._pending = None
            self._written_at = time.monotonic()


@atexit.register
def _flush_open() -> None:
    """A worker process that ends normally writes what its last replies spent."""
    for ledger in list(_OPEN):
        ledger.flush()


def record_spent(folder: str, invocation: str, tokens: float, usd: float, endpoints: EndpointUsage) -> None:
    """Record spend settled outside the workers (the preflight's request, paid by the driver) in a log of its own."""
    if tokens <= 0 and usd <= 0 and not endpoints:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    path = os.path.join(folder, f"spent-{invocation}-driver-{uuid.uuid4().hex[:8]}.log")
    with open(path, "a", encoding="ascii") as handle:
        handle.write(json.dumps({"tokens": float(tokens), "usd": float(usd), "endpoints": endpoints}) + "\n")


def hold_for_invocation(folder: str, invocation: str, tokens: float, usd: float) -> None:
    """Take ``tokens`` and ``usd`` of ``invocation``'s budget before its workers start (its caps unchecked).

    What the batches still running hold when a ``--resume`` starts: the process that
    collects one settles its hold (``SpendLedger.settle_hold``) as it would its own.
    """
    Path(folder).mkdir(parents=True, exist_ok=True)
    _add_taken(os.path.join(folder, f"leases-{invocation}.json"), max(tokens, 0.0), max(usd, 0.0))


def spent_in(folder: str) -> tuple[float, float]:
    """The tokens and dollars recorded in the ledger ``folder``: every process of every invocation so far."""
    tokens = usd = 0.0
    for _, last in _last_lines(folder):
        tokens, usd = tokens + float(last["tokens"]), usd + float(last["usd"])
    return tokens, usd


def usage_before(folder: str, invocation: str) -> EndpointUsage:
    """Requests, prompt and completion tokens per endpoint label, of every invocation but ``invocation``."""
    total: EndpointUsage = {}
    for name, last in _last_lines(folder):
        if name.startswith(f"spent-{invocation}-"):
            continue
        for label, counts in (last.get("endpoints") or {}).items():
            mine = total.setdefault(label, [0, 0, 0])
            for index, count in enumerate(counts[:3]):
                mine[index] += int(count)
    return total


def _last_lines(folder: str) -> list[tuple[str, dict[str, Any]]]:
    """Each spend log's name and last complete line (a kill may have cut the one being written)."""
    if not os.path.isdir(folder):
        return []
    found = []
    for name in sorted(os.listdir(folder)):
        if name.startswith("spent-") and name.endswith(".log"):
            last = _last_line(os.path.join(folder, name))
            if last is not None:
                found.append((name, last))
    return found


def _last_line(path: str) -> dict[str, Any] | None:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - _TAIL_BYTES))
        lines = handle.read().split(b"\n")
    for line in reversed(lines[:-1]):  # the part after the last newline is incomplete
        try:
            value = json.loads(line)
            if math.isfinite(float(value["tokens"])) and math.isfinite(float(value["usd"])):
                return dict(value)
        except (ValueError, KeyError, TypeError):
            continue
    return None


class _Locked:
    """The leases file, opened and held under an exclusive ``flock`` (every process of the job waits its turn)."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __enter__(self) -> int:
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self._fd

    def __exit__(self, *_: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def _add_taken(leases: str, tokens: float, usd: float) -> None:
    """Add ``tokens`` and ``usd`` (either may be negative) to what the leases file says is taken, never below 0."""
    if not tokens and not usd:
        return
    with _Locked(leases) as handle:
        taken = _read_pair(handle)
        _write_pair(handle, (max(taken[0] + tokens, 0.0), max(taken[1] + usd, 0.0)))


def _read_pair(fd: int) -> tuple[float, float]:
    os.lseek(fd, 0, os.SEEK_SET)
    data = os.read(fd, 256)
    if not data.strip():
        return 0.0, 0.0
    values = json.loads(data)
    return float(values["tokens"]), float(values["usd"])


def _write_pair(fd: int, pair: tuple[float, float]) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"tokens": pair[0], "usd": pair[1]}).encode("ascii"))
