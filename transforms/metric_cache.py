"""The response-store stage of endpoint metrics (LLM judge, remote scorer): answer their calls from the store.

``LookupMetricResponses`` keys each row's endpoint-metric requests, joins the keys with the
store in the same bucketed join as the target's (``store_join.JoinStored``), and puts the
hits into the row's ``metric_responses`` before ``CallMetricEndpoints``, which sends only
what is missing. The hits go back to their rows by a second join on the row's token
(``row_index/sample_index``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from beameval.cache.entry import StoredResponse
from beameval.cache.key import prepared_key
from beameval.cache.recording import sample_from_stored
from beameval.core.records import GeneratedRow
from beameval.core.scoring import metric_keys
from beameval.inference.answers import endpoint_reply
from beameval.metrics.base import EndpointMetric, MetricConfig, MetricContext
from beameval.metrics.registry import metric_class, resolve
from transforms import NAMESPACE
from transforms.store_join import BatchByBucket, JoinStored

__all__ = ["LookupMetricResponses", "endpoint_metrics", "row_token"]


def endpoint_metrics(configs: Sequence[MetricConfig]) -> list[tuple[str, EndpointMetric[Any]]]:
    """The run's endpoint metric calls (LLM judge, remote) with their call keys, freshly built."""
    found: list[tuple[str, EndpointMetric[Any]]] = []
    for key, config in zip(metric_keys(configs), configs, strict=True):
        if issubclass(metric_class(config.type), EndpointMetric):
            metric = resolve(config, key)
            assert isinstance(metric, EndpointMetric)
            found.extend((call.key, call) for call in metric.endpoint_calls())  # a pairwise judge: both orders
    return found


def row_token(row: GeneratedRow) -> str:
    """A row's identity in the metric join: ``row_index/sample_index``."""
    return f"{row.row_index}/{row.sample_index}"


class _KeyMetricRequests(beam.DoFn):
    """GeneratedRow -> ``(token, row)``, and ``(key, (token, metric key))`` on ``requests`` per endpoint metric."""

    def __init__(self, configs: Sequence[MetricConfig]) -> None:
        self._configs = list(configs)

    def setup(self) -> None:
        self._endpoints = endpoint_metrics(self._configs)

    def process(self, row: GeneratedRow) -> Iterator[Any]:
        token = row_token(row)
        yield token, row
        failed = row.failure is not None or row.item is None
        ctx = MetricContext(row.item or {}, row.sample, baseline=row.baseline)
        for metric_key, metric in () if failed else self._endpoints:
            if not metric.needs_call(ctx):
                continue
            try:
                key = prepared_key(metric.build_request(ctx), row.sample_index, metric.endpoint_handler().secrets)
            except Exception:  # noqa: BLE001 - CallMetricEndpoints builds it again and reports the failure
                continue
            yield beam.pvalue.TaggedOutput("requests", (bytes.fromhex(key), (token, metric_key)))


def _hits_by_token(
    joined: tuple[tuple[str, str], StoredResponse | None],
) -> Iterator[tuple[str, tuple[str, StoredResponse]]]:
    """A joined metric request -> ``(token, (metric key, stored response))`` when the store has its key."""
    (token, metric_key), best = joined
    if best is not None:
        yield token, (metric_key, best)


class _AttachMetricHits(beam.DoFn):
    """``(token, {row, hits})`` -> the row, with a cached ``EndpointReply`` for every hit that parses."""

    def __init__(self, configs: Sequence[MetricConfig]) -> None:
        self._configs = list(configs)

    def setup(self) -> None:
        self._handlers = {key: metric.endpoint_handler() for key, metric in endpoint_metrics(self._configs)}
        self._hits = Metrics.counter(NAMESPACE, "metric_cache_hits")

    def process(self, joined: tuple[str, dict[str, Iterable[Any]]]) -> Iterator[GeneratedRow]:
        _token, groups = joined
        for row in groups["row"]:
            replies = dict(row.metric_responses or {})
            for metric_key, stored in groups["hits"]:
                sample = sample_from_stored(self._handlers[metric_key], stored)
                if sample is None:
                    continue
                replies[metric_key] = endpoint_reply(sample, status=200, cached=True)  # as a fresh reply
                self._hits.inc()
            yield dataclasses.replace(row, metric_responses=replies) if replies else row


class LookupMetricResponses(beam.PTransform):
    """GeneratedRow -> the same rows, with the stored replies of their endpoint-metric requests filled in.

    Args:
        configs: every metric config of the run, in config order.
        stored: the store's and journal's entries (``store_join.ReadResponses``).
    """

    def __init__(self, configs: Sequence[MetricConfig], stored: beam.PCollection[Any]) -> None:
        super().__init__()
        self._configs = list(configs)
        self._stored = stored

    def expand(self, rows: beam.PCollection[GeneratedRow]) -> beam.PCollection[GeneratedRow]:
        keyed = rows | "KeyMetricRequests" >> beam.ParDo(_KeyMetricRequests(self._configs)).with_outputs(
            "requests", main="rows"
        )
        hits = (
            keyed.requests
            | "Batch" >> beam.ParDo(BatchByBucket())
            | "JoinMetricResponses" >> JoinStored(self._stored)
            | "HitsByToken" >> beam.FlatMap(_hits_by_token)
        )
        return (
            {"row": keyed.rows, "hits": hits}
            | "JoinRows" >> beam.CoGroupByKey()
            | "AttachHits" >> beam.ParDo(_AttachMetricHits(self._configs))
        )
