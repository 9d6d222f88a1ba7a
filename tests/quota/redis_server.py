"""A real redis-server for the tests: started on 127.0.0.1 on a free port, paused or killed by the test."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from beameval.testserver.harness import free_port


class RedisServer:
    """One redis-server process without persistence; ``url`` is its ``redis://127.0.0.1:PORT/0``."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._directory = directory
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed (Debian package redis-server; .ci/run installs it)")
        self._proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self._directory,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis.from_url(self.url, socket_timeout=1).ping()
                return self
            except redis.RedisError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def kill(self) -> None:
        """Stop the server at once (SIGKILL), as a crash would."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)  # a paused server dies too
            self._proc.wait(timeout=10)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open and nothing answers, as a hung Redis."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server go on (SIGCONT)."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def admin(self) -> redis.Redis:
        """A client as the default user (no password), e.g. to create ACL users."""
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def keys(self) -> list[str]:
        return sorted(key.decode() for key in self.admin().keys("*"))

    def run_keys(self) -> list[str]:
        """The keys runs drew from: every key but the one the preflight checks the scripts on."""
        return [key for key in self.keys() if "{preflight}" not in key]


@contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    server = RedisServer(directory).start()
    try:
        yield server
    finally:
        server.kill()
