"""Start the stub server as a subprocess and drive its control API, for tests and benchmarks."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from beameval.testserver.faults import FaultConfig

__all__ = ["PROJECT_ROOT", "ServerProcess", "free_port"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the beameval package
HOST = "127.0.0.1"


def free_port() -> int:
    """Return a loopback port that was free a moment ago (for ``down_for_s``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


#: Seconds a control request may take: ``GET /_batches`` after 2 x 10^6 batch lines lists each batch's ids.
CONTROL_TIMEOUT_S = 120.0


class ServerProcess:
    """``python -m beameval.testserver`` in a subprocess, as a context manager.

    Example::

        with ServerProcess(latency_ms=50, capacity=4) as server:
            client = OpenAI(base_url=server.base_url, api_key="x")
            ...
            assert server.stats()["peak_in_flight"] <= 4

    Args:
        port: port to bind; 0 lets the server pick (a free port is chosen here
            when ``down_for_s`` is set, since the server then needs one).
        answers: JSONL file for ``answers`` mode; None echoes prompts.
        down_for_s: the server binds only after this many seconds; :meth:`start`
            then returns at once and :meth:`wait_listening` waits for the bind.
        startup_timeout: seconds to wait for ``LISTENING``.
        extra_args: more command-line arguments for the server.
        **faults: :class:`~beameval.testserver.faults.FaultConfig` fields (``rules`` may be
            dicts or ``Rule`` objects).
    """

    def __init__(
        self,
        *,
        port: int = 0,
        answers: str | Path | None = None,
        down_for_s: float | None = None,
        startup_timeout: float = 15.0,
        extra_args: Sequence[str] = (),
        **faults: Any,
    ) -> None:
        self.config = FaultConfig.model_validate(faults)
        self.answers = answers
        self.down_for_s = down_for_s
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args)
        self._requested_port = port or (free_port() if down_for_s else 0)
        self._port: int | None = None
        self._listening = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._tmpdir: str | None = None
        self._stderr_path: str | None = None
        self._client: http.client.HTTPConnection | None = None

    @property
    def port(self) -> int:
        """The server's port (known before the bind when it was chosen here)."""
        port = self._port or self._requested_port
        if not port:
            raise RuntimeError("the server has not reported its port yet")
        return port

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>``, where the control endpoints live."""
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``, the OpenAI base URL."""
        return f"{self.root_url}/v1"

    def start(self) -> ServerProcess:
        """Launch the process; wait for ``LISTENING`` unless ``down_for_s`` is set.

        Raises:
            RuntimeError: the server exited or did not listen in time (its stderr is included).
        """
        self._tmpdir = tempfile.mkdtemp(prefix="testserver-")
        config_path = os.path.join(self._tmpdir, "faults.json")
        with open(config_path, "w", encoding="utf-8") as handle:
            json.dump(self.config.model_dump(), handle)
        cmd = [sys.executable, "-m", "beameval.testserver", "--host", HOST, "--port", str(self._requested_port)]
        cmd += ["--config", config_path]
        if self.answers is not None:
            cmd += ["--answers", str(self.answers)]
        if self.down_for_s:
            cmd += ["--down-for", str(self.down_for_s)]
        cmd += self.extra_args
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
        self._stderr_path = os.path.join(self._tmpdir, "stderr.log")
        with open(self._stderr_path, "w", encoding="utf-8") as stderr:
            self._proc = subprocess.Popen(
                cmd,
                cwd=PROJECT_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        threading.Thread(target=self._read_stdout, args=(self._proc,), daemon=True).start()
        if not self.down_for_s:
            self.wait_listening(self.startup_timeout)
        return self

    def _read_stdout(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("LISTENING "):
                self._port = int(line.split()[1])
                self._listening.set()
        self._listening.set()  # EOF: wake waiters so they see the exit

    def wait_listening(self, timeout: float | None = None) -> None:
        """Block until the server reported ``LISTENING``.

        Args:
            timeout: seconds; defaults to ``startup_timeout`` (plus ``down_for_s``).

        Raises:
            RuntimeError: the process exited or the line did not come in time.
        """
        if timeout is None:
            timeout = self.startup_timeout + (self.down_for_s or 0.0)
        if not self._listening.wait(timeout) or self._port is None:
            stderr = self.stderr()
            self.stop()
            raise RuntimeError(f"testserver did not print LISTENING within {timeout:g} s; stderr:\n{stderr}")

    def stderr(self) -> str:
        """What the server wrote to stderr so far."""
        if not self._stderr_path or not os.path.exists(self._stderr_path):
            return ""
        with open(self._stderr_path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    @property
    def pid(self) -> int | None:
        """The server's process id, once started."""
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit status, or None while running."""
        return None if self._proc is None else self._proc.poll()

    def stop(self) -> None:
        """Send SIGTERM, then SIGKILL after 5 s; remove temporary files."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = self._stderr_path = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _control(self, method: str, path: str, payload: Any = None) -> Any:
        """One control request on a kept-alive connection (so tests that count connections see one)."""
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json"} if body is not None else {}
        for attempt in (1, 2):  # the server may have closed an idle connection: reconnect once
            if self._client is None:
                self._client = http.client.HTTPConnection(HOST, self.port, timeout=CONTROL_TIMEOUT_S)
            try:
                self._client.request(method, path, body=body, headers=headers)
                response = self._client.getresponse()
                text = response.read().decode("utf-8")
                break
            except (ConnectionError, http.client.HTTPException):
                self._client.close()
                self._client = None
                if attempt == 2:
                    raise
        if response.status >= 400:
            raise RuntimeError(f"{method} {path} -> {response.status}: {text}")
        return json.loads(text)

    def stats(self) -> dict[str, Any]:
        """``GET /_stats``: requests, by_status, in_flight, peak_in_flight, per_prompt."""
        return self._control("GET", "/_stats")

    def configure(self, **faults: Any) -> dict[str, Any]:
        """``POST /_config``: replace the given fault fields; return the whole new config."""
        patch = self.config.updated(faults).model_dump(include=set(faults))
        return self._control("POST", "/_config", patch)

    def reset(self, config: bool = False) -> None:
        """``POST /_reset``: clear stats and fail counters; ``config=True`` also restores the start config."""
        self._control("POST", "/_reset", {"config": config})

    def batches(self, **settings: Any) -> dict[str, Any]:
        """``POST /_batches`` (with ``BatchConfig`` fields) or ``GET`` (without): config, counts and every batch."""
        return self._control("POST", "/_batches", settings) if settings else self._control("GET", "/_batches")

    def last_request(self) -> dict[str, Any] | None:
        """``GET /_last_request``: path, method, headers (lower-cased) and JSON body of the last request."""
        return self._control("GET", "/_last_request")
