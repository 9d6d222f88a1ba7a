"""Command line of the stub server, so tests, benchmarks and run_local.sh can start it as a process.

Usage::

    python -m beameval.testserver --host 127.0.0.1 --port 0 [--latency-ms X] [--jitter-ms J]
        [--capacity K] [--retry-after S] [--error-rate R --error-status S]
        [--answers FILE] [--config FAULTS.json] [--seed N] [--down-for S]
        [--requests-per-minute R] [--tokens-per-minute T] [--ratelimit-headers]

Prints exactly one line, ``LISTENING <port>``, once the port is bound; nothing per request
(on stderr neither: aiohttp's traceback for a request it cannot parse is filtered out).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from aiohttp.http import HttpProcessingError

from beameval.testserver.app import StubServer
from beameval.testserver.faults import FaultConfig
from beameval.testserver.replies import Replier

# argparse destinations that are also FaultConfig field names
_FAULT_FLAGS = ("latency_ms", "jitter_ms", "capacity", "retry_after", "error_rate", "error_status", "seed")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m beameval.testserver``."""
    parser = argparse.ArgumentParser(prog="python -m beameval.testserver", description="OpenAI-compatible stub server.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    parser.add_argument("--latency-ms", type=float, help="fixed delay before each answer")
    parser.add_argument("--jitter-ms", type=float, help="extra delay drawn from [0, J]")
    parser.add_argument("--capacity", type=int, help="answer 429 when this many requests are in flight")
    parser.add_argument("--retry-after", type=float, help="Retry-After seconds on error and 429 answers")
    parser.add_argument("--error-rate", type=float, help="probability of answering --error-status")
    parser.add_argument("--error-status", type=int, help="status of injected errors (default 503)")
    parser.add_argument("--seed", type=int, help="seed of the fault random generator")
    parser.add_argument("--answers", help="JSONL with question/model_answer: reply by lookup, not echo")
    parser.add_argument("--config", help="JSON file with a FaultConfig; flags override its fields")
    parser.add_argument("--requests-per-minute", type=float, help="provider-style request limit (429 past it)")
    parser.add_argument("--tokens-per-minute", type=float, help="provider-style token limit (429 past it)")
    parser.add_argument("--ratelimit-headers", action="store_true", help="send x-ratelimit-* headers")
    parser.add_argument("--down-for", type=float, default=0.0, help="bind only after S seconds (needs --port)")
    return parser


def load_config(args: argparse.Namespace) -> FaultConfig:
    """Merge ``--config`` and the fault flags into one validated configuration.

    Raises:
        OSError, ValueError, ValidationError: the file or a value is invalid.
    """
    data: dict[str, Any] = {}
    if args.config:
        with open(args.config, encoding="utf-8") as handle:
            data = json.load(handle)
        if not isinstance(data, dict):
            raise ValueError(f"{args.config}: expected a JSON object")
    for field in _FAULT_FLAGS:
        value = getattr(args, field)
        if value is not None:
            data[field] = value
    if args.requests_per_minute or args.tokens_per_minute or args.ratelimit_headers:
        data["quota"] = {
            **(data.get("quota") or {}),
            "requests_per_minute": args.requests_per_minute,
            "tokens_per_minute": args.tokens_per_minute,
            "headers": args.ratelimit_headers,
        }
    return FaultConfig.model_validate(data)


class _QuietBadRequests(logging.Filter):
    """Drops aiohttp's traceback for a request it cannot parse: answered 400, a client's doing, and tests send them.

    Any other error of a handler (a bug of ours) is still logged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, HttpProcessingError)


async def serve(server: StubServer) -> None:
    """Run ``server`` until SIGTERM or SIGINT, printing ``LISTENING <port>`` once bound."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    starting = asyncio.create_task(server.start())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            port = starting.result()
            sys.stdout.write(f"LISTENING {port}\n")
            sys.stdout.flush()
            await stopping
    finally:
        for task in (starting, stopping):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await server.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    args = build_parser().parse_args(argv)
    if args.down_for > 0 and args.port == 0:
        print("error: --down-for needs an explicit --port", file=sys.stderr)
        return 2
    try:
        config = load_config(args)
        replier = Replier.from_jsonl(args.answers) if args.answers else Replier()
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("aiohttp.server").addFilter(_QuietBadRequests())
    server = StubServer(config, host=args.host, port=args.port, replier=replier, down_for_s=args.down_for)
    try:
        asyncio.run(serve(server))
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
