"""The job's spend ledger: one folder that every worker process of a job on one machine shares.

``OUT_DIR/_responses/spend/`` (in the journal, so ``--resume`` keeps it and ``--overwrite``
removes it) holds two kinds of file:

* ``spent-<invocation>-<pid>-<random>.log``, one per process: each time one of its replies
  is settled, the process appends a line with its cumulative tokens and dollars. That is
  one ``write(2)`` on an ``O_APPEND`` descriptor, so a process killed with kill -9 has lost
  nothing it had settled; the last complete line of a file is that process's spend, and
  the job's spend is the sum over every file of every invocation (``spent_in``), which is
  what a ``--resume`` starts from.
* ``leases-<invocation>.json``: how much of this invocation's budget its processes have
  taken, changed under an exclusive ``flock``. A process spends only what it leased; when
  its next request does not fit, it leases at least what it lacks and up to 1/(2W) of
  what is left (so the chunks shrink as the budget runs out, and what an idle worker holds
  at the end is small), and it gives back what it holds when it stops. The processes
  together never lease more than the budget, and each stops only when the job's budget,
  not a fixed 1/W share of it, cannot pay for its next request.

Local folders only (``fcntl``): every local runner and worker pools on one machine. On a
remote OUT_DIR the run gives each of W workers 1/W of the budget instead.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import uuid
from pathlib import Path

__all__ = ["SPEND_DIR", "SpendLedger", "record_spent", "spent_in"]

#: The ledger's folder inside the journal (``OUT_DIR/_responses/``).
SPEND_DIR = "spend"
#: Dollars below this are rounding, not a shortfall.
_USD_EPSILON = 1e-12
#: Bytes read from the end of a spend log to find its last complete line.
_TAIL_BYTES = 4096


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

    def give_back(self, tokens: float, usd: float) -> None:
        """Return leased budget this process will not spend (it stopped)."""
        if tokens <= 0 and usd <= 0:
            return
        with _Locked(self._leases) as handle:
            taken = _read_pair(handle)
            _write_pair(handle, (taken[0] - max(tokens, 0.0), taken[1] - max(usd, 0.0)))

    def record(self, tokens: float, usd: float) -> None:
        """Append this process's cumulative spend (one write: a kill -9 never tears what was settled before)."""
        os.write(self._log, f"{tokens!r} {usd!r}\n".encode("ascii"))


def record_spent(folder: str, invocation: str, tokens: float, usd: float) -> None:
    """Record spend settled outside the workers (the preflight's request, paid by the driver) in a log of its own."""
    if tokens <= 0 and usd <= 0:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    path = os.path.join(folder, f"spent-{invocation}-driver-{uuid.uuid4().hex[:8]}.log")
    with open(path, "a", encoding="ascii") as handle:
        handle.write(f"{float(tokens)!r} {float(usd)!r}\n")


def spent_in(folder: str) -> tuple[float, float]:
    """The tokens and dollars recorded in the ledger ``folder``: every process of every invocation so far."""
    tokens = usd = 0.0
    if not os.path.isdir(folder):
        return tokens, usd
    for name in sorted(os.listdir(folder)):
        if name.startswith("spent-") and name.endswith(".log"):
            last = _last_pair(os.path.join(folder, name))
            tokens, usd = tokens + last[0], usd + last[1]
    return tokens, usd


def _last_pair(path: str) -> tuple[float, float]:
    """The last complete, well-formed line of a spend log (a kill may have cut the one being written)."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - _TAIL_BYTES))
        lines = handle.read().split(b"\n")
    for line in reversed(lines[:-1]):  # the part after the last newline is incomplete
        parts = line.split()
        if len(parts) == 2:
            try:
                pair = float(parts[0]), float(parts[1])
            except ValueError:
                continue
            if all(math.isfinite(value) for value in pair):
                return pair
    return 0.0, 0.0


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
