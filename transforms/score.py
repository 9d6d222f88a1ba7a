"""ScoreRows: score each row with every metric; failed rows also go to the ``errors`` output."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any, cast

import apache_beam as beam
from apache_beam.metrics import Metrics

from beameval.config.endpoints import TargetConfig
from beameval.core.records import GeneratedRow, InferenceInfo, InputRow, RowFailure, ScoredRow, item_json
from beameval.core.redaction import Redactor
from beameval.core.sanitize import clean_text
from beameval.core.scoring import RowScorer
from beameval.metrics.base import EndpointMetric, MetricConfig
from transforms import NAMESPACE
from transforms.generate import passthrough_offline
from transforms.guard import guarded
from transforms.row_batches import RowBatch
from transforms.worker_gc import freeze_startup_heap

__all__ = ["ERRORS", "ScoreRows", "error_record"]

ERRORS = "errors"


def _valid_text(text: str) -> str:
    return clean_text(text)[0]


def error_record(row: ScoredRow) -> dict[str, Any]:
    """The ``errors/`` record of a failed row (README "Outputs")."""
    assert row.failure is not None
    return {
        "row_index": row.row_index,
        "phase": row.failure.phase,
        "metric": row.failure.metric,
        "error": row.failure.text,
        "http_status": row.inference.http_status,
        "attempts": row.inference.attempts,
        "item": row.item_json,
    }


class ScoreRows(beam.DoFn):
    """Emit a ScoredRow per row on the main output and an error record per failed row.

    A batch of rows (``transforms.row_batches``) gives one list of ScoredRows instead.
    """

    def __init__(
        self,
        metric_configs: list[MetricConfig],
        id_field: str | None = None,
        target: TargetConfig | None = None,
        from_input: bool = False,
    ) -> None:
        self._configs = metric_configs
        self._id_field = id_field
        self._target = target
        self._from_input = from_input  # offline: rows arrive as read (InputRow) and pass through here

    def setup(self) -> None:
        freeze_startup_heap()  # every row of the run passes here, in whichever process runs this stage
        self._scorer = RowScorer(self._configs, self._id_field)
        # The target's, judges' and remote metrics' keys: masked in everything this stage emits, after scoring.
        endpoints = [metric.endpoint_access for _, metric in self._scorer.metrics if isinstance(metric, EndpointMetric)]
        if self._target is not None:
            endpoints.append(self._target.endpoint)
        self._redactor = Redactor(secret for endpoint in endpoints for secret in endpoint.secret_values())
        # With no configured secret there is nothing to mask (redaction removes configured secrets only).
        self._text = self._redacted if self._redactor.secrets else _valid_text
        self._scored = Metrics.counter(NAMESPACE, "rows_scored")
        self._failed = Metrics.counter(NAMESPACE, "rows_failed")
        self._counts = [0, 0]  # rows scored, rows failed: added to the counters at the end of each bundle

    def process(self, element: GeneratedRow | InputRow | list[InputRow]) -> Iterator[Any]:
        rows = element if isinstance(element, list) else [element]
        scored, errors = [], []
        for row in rows:
            done, error = self._score(row)
            scored.append(done)
            if error is not None:
                errors.append(beam.pvalue.TaggedOutput(ERRORS, error))
        # A batch of the offline path (transforms.row_batches) stays one element; a row comes before its error record.
        yield from [RowBatch(scored)] if isinstance(element, list) else scored
        yield from errors

    def _score(self, element: GeneratedRow | InputRow) -> tuple[ScoredRow, str | None]:
        """The row's ScoredRow, and its ``errors/`` record when it failed."""
        row = passthrough_offline(cast(InputRow, element)) if self._from_input else cast(GeneratedRow, element)
        scored = guarded(
            "ScoreRows",
            "scoring",
            row.row_index,
            lambda: self._writable(self._scorer.score(row), row),
            lambda failure: self._writable(self._failed_row(row, failure), row),
        )
        self._counts[0] += 1
        if scored.failure is None or scored.failure.skipped:
            return scored, None
        self._counts[1] += 1
        return scored, json.dumps(error_record(scored), ensure_ascii=False)

    def finish_bundle(self) -> None:
        scored, failed = self._counts
        self._counts = [0, 0]
        if scored:
            self._scored.inc(scored)
        if failed:
            self._failed.inc(failed)

    def _writable(self, scored: ScoredRow, row: GeneratedRow) -> ScoredRow:
        """The last check before writing: every text valid UTF-8 and free of configured secrets.

        Metrics have scored the answer as received; only what is written is masked.
        """
        text = self._text
        if row.notes:
            scored.notes = [*row.notes, *scored.notes]
        written = text(scored.item_json)
        if written != scored.item_json:  # cleaned or masked: the parsed row no longer matches what is written
            scored.item = None
        scored.item_json = written
        if scored.output_text is not None:
            scored.output_text = text(scored.output_text)
        if scored.labels:
            scored.labels = {name: text(value) for name, value in scored.labels.items()}
        if scored.details:
            scored.details = {name: None if value is None else text(value) for name, value in scored.details.items()}
        if scored.inference.request is not None:  # the request sent: the transcript's system and user turns
            scored.inference.request = text(scored.inference.request)
        if scored.failure is not None:
            scored.failure.messages = [text(message) for message in scored.failure.messages]
        return scored

    def _redacted(self, text: str) -> str:
        return self._redactor.text(clean_text(text)[0])

    def _failed_row(self, row: GeneratedRow, failure: RowFailure) -> ScoredRow:
        """A row whose scoring raised unexpectedly: NaN scores and the cause, like any failed row."""
        try:
            item = item_json(row.item, row.raw)
        except Exception:  # noqa: BLE001 - the row's item itself may be what broke
            item = "(not stored: the row could not be turned into JSON)"
        return ScoredRow(
            row_index=row.row_index,
            item_json=item,
            output_text=None,
            scores=dict.fromkeys(self._scorer.score_names, math.nan),
            failure=failure
            if row.failure is None
            else RowFailure(row.failure.phase, [*row.failure.messages, *failure.messages], row.failure.metric),
            inference=row.inference or InferenceInfo(),
            sample_index=row.sample_index,
        )
