"""A real headless Chromium driven over the DevTools protocol (aiohttp's websocket client, no Playwright).

The browser runs with networking blocked twice over (a dead proxy for everything but
loopback, and a host resolver that resolves nothing), and the page records every request
it makes, every console message and every uncaught exception, so tests can assert that
the report fetched nothing and logged no error. ``scripts/test.sh`` installs Debian's ``chromium``
when missing; without it these tests fail and say so.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
]


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "the browser tests need Debian's 'chromium' package and it is not installed: "
            "run 'apt-get install -y chromium' (scripts/test.sh installs it when missing).",
            pytrace=False,
        )
    return found


@dataclass
class PageLog:
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)


class Browser:
    """One Chromium process and one page session; ``open`` loads a file, ``eval`` runs JavaScript."""

    def __init__(self) -> None:
        self._profile = tempfile.mkdtemp(prefix="chromium-profile-")
        self._process = subprocess.Popen(
            [chromium_path(), *CHROMIUM_FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._url = self._wait_for_endpoint()
        self._loop = asyncio.new_event_loop()
        self._ids = itertools.count(1)
        self._session_id = ""
        self._events: list[dict[str, Any]] = []
        self._loop.run_until_complete(self._connect())

    def _wait_for_endpoint(self) -> str:
        assert self._process.stderr is not None
        seen = []
        for line in self._process.stderr:
            seen.append(line)
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                return match.group(1)
        raise RuntimeError("chromium exited before opening its DevTools endpoint:\n" + "".join(seen[-20:]))

    async def _connect(self) -> None:
        self._http = aiohttp.ClientSession()
        self._ws = await self._http.ws_connect(self._url, max_msg_size=64 * 1024 * 1024)
        target = await self._send("Target.createTarget", {"url": "about:blank"})
        attached = await self._send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        self._session_id = attached["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            await self._send(f"{domain}.enable")

    async def _send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        number = next(self._ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if self._session_id:
            message["sessionId"] = self._session_id
        await self._ws.send_str(json.dumps(message))
        while True:
            reply = await asyncio.wait_for(self._ws.receive_json(), timeout=30)
            if reply.get("id") == number:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    async def _until(self, method: str, timeout: float = 30) -> None:
        if any(e.get("method") == method for e in self._events):
            return
        while True:
            event = await asyncio.wait_for(self._ws.receive_json(), timeout=timeout)
            self._events.append(event)
            if event.get("method") == method:
                return

    def open(self, path: Path) -> None:
        """Load ``path`` from disk and wait for its load event (events of earlier pages are dropped)."""
        self._events.clear()
        self._loop.run_until_complete(self._send("Page.navigate", {"url": path.resolve().as_uri()}))
        self._loop.run_until_complete(self._until("Page.loadEventFired"))

    def eval(self, expression: str) -> Any:
        result = self._loop.run_until_complete(
            self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"JavaScript failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def type_into(self, selector: str, text: str) -> None:
        """Focus an input and type ``text`` as keyboard input (fires the page's own input events)."""
        assert self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.focus(); "
            "return document.activeElement === e; })()"
        )
        self._loop.run_until_complete(self._send("Input.insertText", {"text": text}))

    def screenshot(self, width: int = 1280, height: int = 1800, scale: float = 1.0) -> bytes:
        """A PNG of the top ``width`` x ``height`` CSS pixels of the page, scaled by ``scale``."""
        self._loop.run_until_complete(
            self._send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            )
        )
        clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": scale}
        shot = self._loop.run_until_complete(self._send("Page.captureScreenshot", {"format": "png", "clip": clip}))
        return base64.b64decode(shot["data"])

    def log(self) -> PageLog:
        """Requests, console errors and exceptions since the last ``open``."""
        self._loop.run_until_complete(self._send("Runtime.evaluate", {"expression": "0"}))  # flush events
        log = PageLog()
        for event in self._events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Network.requestWillBeSent":
                log.requests.append(params["request"]["url"])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                log.console_errors.append(json.dumps(params.get("args")))
            elif method == "Runtime.exceptionThrown":
                log.console_errors.append(json.dumps(params.get("exceptionDetails")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                log.console_errors.append(params["entry"].get("text", ""))
        return log

    def close(self) -> None:
        async def shutdown() -> None:
            await self._ws.close()
            await self._http.close()

        self._loop.run_until_complete(shutdown())
        self._loop.close()
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
        shutil.rmtree(self._profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    instance = Browser()
    try:
        yield instance
    finally:
        instance.close()


@pytest.fixture
def decode_png():
    return png_pixels


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit, non-interlaced RGB or RGBA PNG: ``(width, height, rows of pixel bytes)``."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, idat, header = 8, b"", b""
    while position < len(data):
        (length,), kind = struct.unpack(">I", data[position : position + 4]), data[position + 4 : position + 8]
        chunk = data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            header = chunk
        elif kind == b"IDAT":
            idat += chunk
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, previous = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = previous[i], previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, [bytes(r) if bpp == 3 else bytes(_drop_alpha(r)) for r in rows]


def _drop_alpha(row: bytes) -> bytearray:
    out = bytearray()
    for i in range(0, len(row), 4):
        out += row[i : i + 3]
    return out


os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
