"""Checks run before the pipeline starts, so a misconfigured run fails in seconds.

The dataset's first file must open and parse, the templates must render against its first
row, and the endpoint must accept a TCP connection. Nothing here sends a paid request.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any
from urllib.parse import urlparse

import httpx
from apache_beam.io.filesystems import FileSystems

from core.errors import ConfigError, DatasetError, EndpointError, EvaluatorError
from core.formats import (
    detect_format,
    iter_records,
    parquet_row_group_sizes,
    read_parquet_row_group,
)
from core.records import EndpointReply, GeneratedRow
from core.scoring import RowScorer
from core.templates import Template
from inference.targets import make_handler
from metrics.base import EndpointMetric, MetricContext
from pipeline.config import EvalConfig

__all__ = ["preflight"]

CONNECT_TIMEOUT_S = 5.0


def preflight(config: EvalConfig, paths: list[str]) -> None:
    """Validate what can be validated without running the evaluation.

    Raises:
        DatasetError: the first file cannot be read.
        TemplateError: a template fails on the first row (strict mode only; a warning otherwise).
        EndpointError: the endpoint's host and port refuse connections.
    """
    first = _first_row(paths[0], config.dataset.format)
    scorer = RowScorer(config.metrics)  # compiles every metric template
    if first is not None:
        try:
            _render_first_row(config, scorer, first)
        except EvaluatorError as exc:
            if not config.params.ignore_request_failure:
                raise type(exc)(f"preflight: the first row of {paths[0]} fails: {exc.message}", hint=exc.hint) from None
            print(f"warning: preflight: the first row fails: {exc}", file=sys.stderr)
    if config.target is not None:
        _check_target(config)


def _first_row(path: str, configured_format: str) -> dict[str, Any] | None:
    fmt = detect_format(path, configured_format)
    try:
        with FileSystems.open(path) as stream:
            if fmt == "parquet":
                if not parquet_row_group_sizes(stream):
                    return None
                rows = read_parquet_row_group(stream, 0)
                return rows[0] if rows else None
            for item, _raw, _error in iter_records(stream, path, fmt):
                return item
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow and file systems raise many types
        raise DatasetError(f"cannot read dataset file {path!r}: {type(exc).__name__}: {exc}") from None
    return None


def _render_first_row(config: EvalConfig, scorer: RowScorer, item: dict[str, Any]) -> None:
    if config.target is not None:
        if config.prompt_template is not None:
            Template(config.prompt_template, "prompt_template").render({**item, "item": item})
        return
    replies = {}
    for key, metric in scorer.metrics:
        if isinstance(metric, EndpointMetric):
            metric.build_request(MetricContext(item, {}))  # renders its templates; sends nothing
            replies[key] = EndpointReply(sample={})  # an empty reply: NaN scores, not a failure
    scored = scorer.score(GeneratedRow(0, item, {}, metric_responses=replies or None))
    if scored.failure is not None:
        raise EvaluatorError(scored.failure.text)


def _check_target(config: EvalConfig) -> None:
    """The key's variable is set, the host accepts connections, and the credentials are accepted."""
    assert config.target is not None
    endpoint = config.target.endpoint
    key_env = endpoint.api_key_env
    if key_env and not os.environ.get(key_env):
        raise ConfigError(
            f"the target's api_key_env names the environment variable {key_env!r}, but it is not set; "
            "export it before running (the key itself never goes in the config)."
        )
    _check_reachable(endpoint.url)
    handler = make_handler(config.target, config.params, config.target.api_key())
    if handler.probe_url is None:
        return
    try:
        status = httpx.get(handler.probe_url, headers=dict(handler.headers), timeout=CONNECT_TIMEOUT_S).status_code
    except httpx.HTTPError:
        return  # reachable over TCP; an endpoint without a working models listing is fine
    if status in (401, 403):
        where = f"the key in ${key_env}" if key_env else "target.model.api_key_env (no key was sent)"
        raise EndpointError(
            f"preflight: {handler.probe_url} rejected the credentials (HTTP {status}).",
            hint=f"Check {where}.",
        )


def _check_reachable(url: str) -> None:
    parsed = urlparse(url)
    host = parsed.hostname or ""
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return
    except ConnectionRefusedError:
        cause = "the connection was refused (nothing is listening there)"
    except TimeoutError:
        cause = f"no answer within {CONNECT_TIMEOUT_S:.0f} s"
    except OSError as exc:
        cause = exc.strerror or str(exc)
    raise EndpointError(
        f"preflight: cannot reach the endpoint at {host}:{port}: {cause}.",
        hint="Start the server or fix target.url; pass --skip_preflight if it is only reachable from the workers.",
    )
