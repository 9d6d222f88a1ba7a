"""Prism, Beam's portable runner written in Go: built once from the Go module proxy into a cache, reused after.

Prism is a Go module of Beam's (``github.com/apache/beam/sdks/v2/go/cmd/prism``), at the
same version as the installed ``apache-beam``; ``go install`` builds it in about 70 s on
2 cores (a 66 MB binary). It lives outside the repository, in ``PRISM_CACHE`` (default
``~/.cache/beameval/prism-vVERSION``). The binary is built into a scratch directory and
moved into place last, so an interrupted build is redone; a file lock keeps two pytest
processes from building it at once. Without a Go toolchain nothing is built and the Prism
tests are skipped, saying so.

Run it as a script to build (or check) the binary ahead of the tests:
``python tests/runners/prism_env.py``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import apache_beam

VERSION = apache_beam.__version__
MODULE = f"github.com/apache/beam/sdks/v2/go/cmd/prism@v{VERSION}"
CACHE = Path(os.environ.get("PRISM_CACHE") or Path.home() / ".cache" / "beameval" / f"prism-v{VERSION}")
BINARY = CACHE / "prism"


def go_toolchain() -> str | None:
    """The ``go`` executable, or None when this machine has no Go toolchain."""
    return shutil.which("go") or next((go for go in ["/usr/local/go/bin/go"] if os.access(go, os.X_OK)), None)


def ensure(log: Path | None = None) -> tuple[Path, float]:
    """Build the binary unless it is there; return its path and the build's seconds (0 if reused).

    Raises:
        RuntimeError: no Go toolchain, or ``go install`` failed (its output is in ``log``).
    """
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(BINARY, os.X_OK):
            return BINARY, 0.0
        go = go_toolchain()
        if go is None:
            raise RuntimeError("no Go toolchain (go) on PATH: Prism cannot be built")
        started = time.monotonic()
        scratch = CACHE / ".build"
        shutil.rmtree(scratch, ignore_errors=True)
        with open(log or os.devnull, "w") as out:
            done = subprocess.run(
                [go, "install", MODULE],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "GOBIN": str(scratch)},
                cwd=CACHE,  # outside any Go module, so the version above is the one built
            )
        if done.returncode != 0:
            raise RuntimeError(f"go install {MODULE} failed (exit {done.returncode}; log: {log})")
        os.replace(scratch / "prism", BINARY)
        shutil.rmtree(scratch, ignore_errors=True)
        return BINARY, time.monotonic() - started


if __name__ == "__main__":
    log = Path(f"{CACHE}.build.log")
    if go_toolchain() is None:
        print("no Go toolchain: Prism is not built and the Prism tests will be skipped", flush=True)
        sys.exit(0)
    if not os.access(BINARY, os.X_OK):
        print(
            f"building Prism v{VERSION} into {CACHE} (outside the repository; go install {MODULE}; "
            f"about 70 s and 66 MB; log: {log}) ...",
            flush=True,
        )
    binary, took = ensure(log=log)
    print(f"Prism: {binary}, {binary.stat().st_size / 1e6:.0f} MB ({f'built in {took:.0f} s' if took else 'reused'})")
