"""Checks run before the pipeline starts, so a misconfigured run fails in seconds.

The dataset's first file must open and parse, the templates must render against its first
row, and every endpoint the run calls (target, judges, remote metrics) must answer a free
request through the run's own client. Nothing here sends a paid request: the first row it
returns is then sent to the target exactly as the run will send it, once OUT_DIR is
locked (``pipeline.first_answer``: a wrong path, a model the endpoint does not serve or a
refused parameter stops the run with exit 2 after that one request, and its answer is
used, not paid twice). Judges and remote metrics keep the free probe only: their request
needs a model's answer first.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any
from urllib.parse import urlsplit

from apache_beam.io.filesystems import FileSystems

from beameval.config.access import EndpointAccess
from beameval.config.quota import RateLimit
from beameval.config.schema import EvalConfig
from beameval.core.console import printable
from beameval.core.errors import (
    ConfigError,
    DatasetError,
    EndpointError,
    EvaluatorError,
    TemplateBudgetError,
    TemplateError,
)
from beameval.core.formats import (
    detect_format,
    iter_records,
    parquet_row_group_sizes,
    read_parquet_table,
)
from beameval.core.records import EndpointReply, GeneratedRow
from beameval.core.scoring import RowScorer
from beameval.core.template_fields import item_fields, missing_fields
from beameval.core.templates import Template
from beameval.inference.classify import Failure
from beameval.inference.first_request import rejected_credentials
from beameval.inference.probe import probe
from beameval.inference.quota import endpoints_of, redis_password
from beameval.inference.targets import make_handler
from beameval.inference.targets.base import TargetHandler
from beameval.inference.targets.retrieval import RerankHandler
from beameval.metrics.base import EndpointMetric, MetricContext
from pipeline.first_answer import FirstRow
from transforms.read import read_beir_rows

__all__ = ["FIRST_ROWS", "preflight"]

#: Rows the preflight reads: a template field that none of them has is a typo, not an optional field.
FIRST_ROWS = 20


def preflight(config: EvalConfig, paths: list[str]) -> FirstRow | None:
    """Validate what can be validated without running the evaluation, sending nothing paid.

    Returns:
        The first row, for the first request (``pipeline.first_answer.first_answer``, sent
        once OUT_DIR is locked); None when the dataset is empty or that row fails to render.

    Raises:
        DatasetError: the first file cannot be read.
        TemplateError: a template fails on the first row (strict mode only; a warning otherwise).
        EndpointError: an endpoint cannot be reached or refuses the credentials.
        ConfigError: an endpoint's key variable is not set.
    """
    first_index, rows = _first_rows(paths[0], config.dataset.format, FIRST_ROWS)
    first = rows[0] if rows else None
    scorer = RowScorer(config.metrics)  # compiles every metric template
    if rows:
        # A field that none of the first rows has is a typo in both modes: every row would fail.
        uses = item_fields(config.model_dump(mode="json", exclude={"dataset"}))
        missing = missing_fields(uses, rows)
        if missing:
            raise TemplateError(
                f"preflight: a template reads a field the dataset {paths[0]} does not have: "
                + "; ".join(missing)
                + ".",
                hint="Fix the template or the dataset; nothing was sent.",
            )
    if first is not None:
        try:
            _render_first_row(config, scorer, first)
        except EvaluatorError as exc:
            # A template over its budget fails every row: the config is wrong in both modes.
            if not config.params.ignore_request_failure or isinstance(exc, TemplateBudgetError):
                raise type(exc)(f"preflight: the first row of {paths[0]} fails: {exc.message}", hint=exc.hint) from None
            print(printable(f"warning: preflight: the first row fails: {exc}"), file=sys.stderr)
            first = None  # its request would fail: nothing to learn from sending it
    _check_endpoints(config, scorer)
    _check_shared_limits(config)  # every rate_limit.shared Redis answers and runs the rate scripts
    return None if first is None else FirstRow(first_index, first)


def _first_rows(path: str, configured_format: str, count: int) -> tuple[int, list[dict[str, Any]]]:
    """Up to ``count`` readable rows from the start of ``path`` (unreadable records are skipped here).

    Returns:
        The first readable row's ``row_index`` (its position, as ``ReadRows`` numbers it), and the rows.
    """
    fmt = detect_format(path, configured_format)
    if fmt == "beir":
        return 0, read_beir_rows(path)[:count]
    try:
        with FileSystems.open(path) as stream:
            if fmt == "parquet":
                if not parquet_row_group_sizes(stream):
                    return 0, []
                return 0, read_parquet_table(stream, 0).slice(0, count).to_pylist()  # not the whole group as dicts
            rows: list[dict[str, Any]] = []
            first = 0
            for position, (item, _raw, _error) in enumerate(iter_records(stream, path, fmt)):
                if item is not None:
                    first = first if rows else position
                    rows.append(item)
                if len(rows) >= count:
                    break
            return first, rows
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow and file systems raise many types
        raise DatasetError(f"cannot read dataset file {path!r}: {type(exc).__name__}: {exc}") from None


def _render_first_row(config: EvalConfig, scorer: RowScorer, item: dict[str, Any]) -> None:
    if config.target is not None:
        if config.prompt_template is not None:
            Template(config.prompt_template, "prompt_template").render({**item, "item": item})
        if config.target.retrieval is not None:
            Template(config.target.retrieval.query_template, "query_template").render({**item, "item": item})
        return
    replies = {}
    for key, metric in scorer.metrics:
        if isinstance(metric, EndpointMetric):
            metric.build_request(MetricContext(item, {}))  # renders its templates; sends nothing
            replies[key] = EndpointReply(sample={})  # an empty reply: NaN scores, not a failure
    scored = scorer.score(GeneratedRow(0, item, {}, metric_responses=replies or None))
    if scored.failure is not None:
        raise EvaluatorError(scored.failure.text)


def _check_endpoints(config: EvalConfig, scorer: RowScorer) -> None:
    """Every endpoint the run will call (target, judges, remote metrics): its key is set and it answers."""
    endpoints: list[tuple[str, EndpointAccess, TargetHandler]] = []
    if config.target is not None:
        endpoint = config.target.endpoint
        endpoints.append(
            (config.target.where, endpoint, make_handler(config.target, config.params, endpoint.api_key()))
        )
        reranker = config.target.retrieval.reranker if config.target.retrieval is not None else None
        if reranker is not None:
            endpoints.append(("target.retrieval.reranker", reranker, RerankHandler(reranker, reranker.api_key())))
    for key, metric in scorer.metrics:
        if isinstance(metric, EndpointMetric):
            endpoints.append((f"metric '{key}'", metric.endpoint_access, metric.endpoint_handler()))
    seen: set[str] = set()
    for where, access, handler in endpoints:
        _check_key(where, access)
        if handler.endpoint_key not in seen:
            seen.add(handler.endpoint_key)
            asyncio.run(_check_answers(where, access, handler))


def _check_key(where: str, access: EndpointAccess) -> None:
    key_env = access.api_key_env
    if key_env and not os.environ.get(key_env) and not access.api_key_secret:  # the secret stands in for it
        raise ConfigError(
            f"the {where} api_key_env names the environment variable {key_env!r}, but it is not set; "
            "export it before running (the key itself never goes in the config)."
        )


async def _check_answers(where: str, access: EndpointAccess, handler: TargetHandler) -> None:
    """One probe through the run's own client: reachable, TLS verifies, and the key is accepted."""
    url = handler.probe_url
    if url is None:
        return
    result = await probe(handler, url)
    if result.failure is not None and result.status is None:
        parsed = urlsplit(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        if result.failure.tls:  # it answered: the network is fine, the certificate is not
            raise EndpointError(
                f"preflight: the endpoint at {parsed.hostname}:{port} answered, but its TLS certificate is not "
                f"trusted: {result.failure.message} ({where}).",
                hint=f"This is a certificate problem, not a network one: set {where}.ca_bundle to the PEM file of "
                "the CA that signed the server's certificate (a private or self-signed CA), or fix the certificate "
                "(its host name, its expiry).",
            )
        raise EndpointError(
            f"preflight: cannot reach the endpoint at {parsed.hostname}:{port}: {_cause(result.failure)} ({where}).",
            hint="Start the server or fix the URL; pass --skip_preflight if it is only reachable from the workers.",
        )
    if result.status in (401, 403):
        raise rejected_credentials(url, result.status, where, access)
    if result.failure is not None:
        print(
            printable(f"warning: preflight: the {where} endpoint is struggling: {result.failure.message}"),
            file=sys.stderr,
        )


def _cause(failure: Failure) -> str:
    message = failure.message
    if "refused" in message:
        return "the connection was refused (nothing is listening there)"
    return message


def _check_shared_limits(config: EvalConfig) -> None:
    """Every ``rate_limit.shared`` Redis answers and lets its user run the rate scripts, as each worker will.

    A worker that cannot run them sends nothing to the endpoint (it never falls back to a
    share of its own), so a refusal found here saves a run that would only wait and stop.

    Raises:
        ConfigError: naming the endpoint, the Redis address, the cause and the fix.
    """
    shared: dict[tuple[str, str | None], tuple[str, RateLimit]] = {}
    for path, access in endpoints_of(config):
        limit = access.rate_limit
        if limit is not None and limit.shared is not None:
            shared.setdefault((limit.shared, limit.shared_password_env), (path, limit))
    if not shared:
        return
    from redis import RedisError  # only runs that share a limit load Redis (about 0.4 s of start-up)

    from beameval.inference.shared_rate import check_shared

    for (url, password_env), (path, limit) in shared.items():
        if password_env and not os.environ.get(password_env):
            raise ConfigError(
                f"preflight: {path}.rate_limit.shared_password_env names the environment variable "
                f"{password_env!r}, but it is not set; export it before running."
            )
        try:
            check_shared(url, redis_password(limit))
        except (RedisError, OSError) as exc:
            raise _shared_refused(f"{path}.rate_limit.shared", url, password_env, exc) from None


def _shared_refused(where: str, url: str, password_env: str | None, exc: BaseException) -> ConfigError:
    """The preflight's message for a shared-limit Redis that failed its check: unreachable, or refusing."""
    from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

    from beameval.inference.shared_rate import ACL_RULES

    cause = f"{type(exc).__name__}: {exc}"
    user = urlsplit(url).username or "default"
    if isinstance(exc, NoPermissionError) or "can't run this command" in str(exc):  # the script's own calls
        return ConfigError(
            f"preflight: the Redis server that {where} names ({url}) refused the rate-limit script to user "
            f"{user!r} ({cause}). Every worker runs it before each request, so the run did not start.",
            hint=f"Allow that user the scripts, what they call and their keys: ACL SETUSER {user} {ACL_RULES}, "
            "or name another user in the URL (redis://USER@HOST:PORT/DB).",
        )
    if isinstance(exc, AuthenticationError):
        source = f"the variable {password_env}" if password_env else "none: rate_limit.shared_password_env is unset"
        return ConfigError(
            f"preflight: the Redis server that {where} names ({url}) refused the credentials of user {user!r} "
            f"(password from {source}): {cause}.",
            hint="Fix the password in the variable named by rate_limit.shared_password_env, or the user name in "
            "the URL (redis://USER@HOST:PORT/DB).",
        )
    if isinstance(exc, ResponseError):
        return ConfigError(
            f"preflight: the Redis server that {where} names ({url}) answered the rate-limit script with an error "
            f"({cause}); the workers could not draw their rate from it, so the run did not start.",
            hint="Point rate_limit.shared at a Redis 6 or later (or a Redis Cluster) that runs Lua scripts.",
        )
    return ConfigError(
        f"preflight: cannot reach the Redis server that {where} names ({url}): {cause}. Every worker draws its "
        "request and token rate from it, so the run did not start.",
        hint="Start Redis there (redis-server --port PORT), fix the URL, or remove rate_limit.shared "
        "to split the rate evenly between the workers instead.",
    )
