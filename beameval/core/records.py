"""The records that flow between pipeline stages, and the row-failure record.

Plain slotted dataclasses: cheap to create per row and picklable by Beam's coders. Each
pickles as its class and its field values (``_pickled_by_fields``), not by the state dict
``dataclass(slots=True)`` gives: rows cross every shuffle and batch pickled, and that
takes about half the time.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, Literal, TypeVar

__all__ = [
    "EndpointReply",
    "GeneratedRow",
    "InferenceInfo",
    "InputRow",
    "Phase",
    "RowFailure",
    "ScoredRow",
    "item_json",
    "replaced",
]

Phase = Literal["input", "sample_generation", "scoring"]
ReplyErrorKind = Literal["request", "endpoint"]
Item = dict[str, Any]


@dataclass(slots=True)
class RowFailure:
    """Why a row failed: the phase, the first failing metric (scoring only), and messages."""

    phase: Phase
    messages: list[str]
    metric: str | None = None
    #: True for rows never sent because a strict run was already stopping; they are
    #: failed rows like any other, but never reported as the cause of the failure.
    not_sent: bool = False
    #: True for rows never sent because the run's budget was reached (``params.budget``): status
    #: ``skipped`` in rows/, not in errors/ and not in the aggregates; ``--resume`` sends them.
    skipped: bool = False

    @property
    def text(self) -> str:
        """Every message, separated by ``; ``."""
        return "; ".join(self.messages)


@dataclass(slots=True)
class InputRow:
    """A dataset row with its stable position; ``item`` is None when it failed to parse."""

    row_index: int
    item: Item | None
    raw: str | None = None
    failure: RowFailure | None = None
    #: Which of the row's ``params.repeats`` samples this is (0 without repeats).
    sample_index: int = 0
    #: What was changed to make the row writable (text made valid UTF-8, ...): the ``notes`` column.
    notes: list[str] = field(default_factory=list)
    #: The request body built for the row (see ``InferenceInfo.request``), carried while its call is in flight.
    request: str | None = None
    #: What ``prompt_template`` rendered for the row (the row itself without a template), set once for every
    #: target by ``transforms.render.RenderPrompts``; the targets build their requests from it.
    prompt: Any = None
    #: Why the template did not render for the row (then ``prompt`` is None): each target fails the row with it.
    prompt_error: str | None = None


@dataclass(slots=True)
class InferenceInfo:
    """What the endpoint call cost and returned, recorded per row in ``rows/``."""

    latency_s: float | None = None
    attempts: int | None = None
    http_status: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    request_hash: str | None = None
    #: True when the response came from the response store or the run's journal, not the endpoint.
    cached: bool = False
    #: The body sent (its messages or prompt, system prompt included) as JSON, configured secrets masked:
    #: the ``request`` column, which the report shows as the row's transcript. None when not recorded.
    request: str | None = None


@dataclass(slots=True)
class EndpointReply:
    """One metric endpoint call of a row (an LLM judge, a remote scorer), for the metric to parse.

    Attributes:
        sample: the handler's parsed reply (``output_text``, ``response``, …) on success.
        error: why there is no reply: the message, hint included; None on success.
        error_kind: ``"request"`` when the request could not be built (a template error:
            always a row failure), ``"endpoint"`` when the endpoint failed after retries.
        status: the last HTTP status seen.
        attempts: HTTP attempts made.
        latency_s: seconds until the final answer, back-off included.
        prompt_tokens: from the reply's usage, when reported.
        completion_tokens: from the reply's usage, when reported.
        failure_class: the classifier's name for the final failure (``fatal``, …).
        cached: the reply came from the response store or the journal (no request sent).
    """

    sample: dict[str, Any] | None = None
    error: str | None = None
    error_kind: ReplyErrorKind | None = None
    status: int | None = None
    attempts: int = 0
    latency_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    failure_class: str | None = None
    cached: bool = False


@dataclass(slots=True)
class CallUsage:
    """What endpoint calls cost (the target's, or a row's LLM-judge and remote calls), summed for ``results.json``."""

    requests: int = 0
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Calls answered from the response store or the journal (not sent, so not in ``requests``).
    cache_hits: int = 0
    #: Metric calls only: [requests, prompt tokens, completion tokens] per metric key, for costs per endpoint.
    by_metric: dict[str, list[int]] = field(default_factory=dict)

    @classmethod
    def of_replies(cls, replies: dict[str, EndpointReply] | None) -> CallUsage | None:
        """Sum the calls that reached the endpoint (a request that could not be built made none) and the cache hits."""
        if not replies:
            return None
        usage = cls()
        for key, reply in replies.items():
            if reply.cached:
                usage.cache_hits += 1
            elif reply.attempts:
                usage.record(reply.attempts, reply.prompt_tokens, reply.completion_tokens)
                # A pairwise judge's swapped call (``<key>.swapped``) counts as its judge's.
                counts = usage.by_metric.setdefault(key.partition(".")[0], [0, 0, 0])
                counts[0] += 1
                counts[1] += reply.prompt_tokens or 0
                counts[2] += reply.completion_tokens or 0
        return usage

    def record(self, attempts: int, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        """Count one request that reached the endpoint (token counts as the reply reported them)."""
        self.requests += 1
        self.attempts += attempts
        self.prompt_tokens += prompt_tokens or 0
        self.completion_tokens += completion_tokens or 0

    def add(self, other: CallUsage) -> None:
        """Fold ``other`` in."""
        self.requests += other.requests
        self.attempts += other.attempts
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cache_hits += other.cache_hits
        for key, counts in other.by_metric.items():
            mine = self.by_metric.setdefault(key, [0, 0, 0])
            for index, count in enumerate(counts):
                mine[index] += count

    def as_dict(self) -> dict[str, Any]:
        """The ``results.json`` usage fields; ``cache.misses`` are the requests sent."""
        return {
            "requests": self.requests,
            "attempts": self.attempts,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cache": {"hits": self.cache_hits, "misses": self.requests},
            **(
                {
                    "by_metric": {
                        key: {"requests": r, "prompt_tokens": p, "completion_tokens": c}
                        for key, (r, p, c) in sorted(self.by_metric.items())
                    }
                }
                if self.by_metric
                else {}
            ),
        }


@dataclass(slots=True)
class GeneratedRow:
    """A row after sample generation (or offline pass-through), with any metric endpoint replies."""

    row_index: int
    item: Item | None
    sample: dict[str, Any]
    raw: str | None = None
    failure: RowFailure | None = None
    inference: InferenceInfo | None = None
    metric_responses: dict[str, EndpointReply] | None = None
    notes: list[str] = field(default_factory=list)
    sample_index: int = 0
    #: The first target's sample of this row, for a pairwise judge (``transforms.baseline``); None without one.
    baseline: dict[str, Any] | None = None


@dataclass(slots=True)
class ScoredRow:
    """A row with every per-row score (NaN where it failed), ready to write."""

    row_index: int
    item_json: str
    output_text: str | None
    scores: dict[str, float]
    failure: RowFailure | None = None
    inference: InferenceInfo = field(default_factory=InferenceInfo)
    labels: dict[str, str] = field(default_factory=dict)
    corpus_stats: dict[str, list[float]] | None = None
    metric_calls: CallUsage | None = None
    notes: list[str] = field(default_factory=list)
    sample_index: int = 0
    #: text columns for debugging: ``id`` (with ``dataset.id_field``) and each metric's details.
    details: dict[str, str | None] = field(default_factory=dict)
    #: The parsed row, not written: set only while ``item_json`` is exactly its encoding (no text was
    #: cleaned or masked), so the statistics keys can read it instead of parsing ``item_json`` again.
    item: Item | None = field(default=None, repr=False, compare=False)


#: Each record class's field values in order, as its constructor takes them (``_pickled_by_fields``).
_FIELD_VALUES: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _pickled_by_fields(cls: type) -> None:
    """Pickle ``cls`` as ``(cls, (its field values in order))``: unpickling calls ``cls(*values)``, the same object.

    None of these classes has a ``__post_init__`` or a field outside ``__init__``, so the
    constructor gives back exactly the fields pickled.
    """
    values: Callable[[Any], tuple[Any, ...]] = operator.attrgetter(*(f.name for f in fields(cls)))
    _FIELD_VALUES[cls] = values

    def __reduce__(self: Any) -> tuple[type, tuple[Any, ...]]:  # noqa: N807 - the pickle protocol's name
        return cls, values(self)

    cls.__reduce__ = __reduce__  # type: ignore[assignment,method-assign]


for _record in (RowFailure, InputRow, InferenceInfo, EndpointReply, CallUsage, GeneratedRow, ScoredRow):
    _pickled_by_fields(_record)

R = TypeVar("R")


def replaced(record: R, **changes: Any) -> R:
    """``dataclasses.replace(record, **changes)`` for the records here, in about half the time.

    A copy built from its field values in order (``_pickled_by_fields``), then the changed
    fields set: the same object, as none of these classes has a ``__post_init__`` or a field
    outside ``__init__``. Rows pass through it on every hot path.

    Raises:
        TypeError: ``record`` is not one of the records here.
        AttributeError: a change names no field.
    """
    cls = type(record)
    if cls not in _FIELD_VALUES:
        raise TypeError(f"replaced() takes a row record, not a {cls.__name__}")
    copy: R = cls(*_FIELD_VALUES[cls](record))
    for name, value in changes.items():
        setattr(copy, name, value)
    return copy


#: ``json.dumps(..., ensure_ascii=False, default=str)`` built once: ``dumps`` with options builds an encoder per call.
_ITEM_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
#: The C encoder behind it, also built once (``JSONEncoder.encode`` builds one per call: half
#: its time for a small row). No circular-reference check: a row parsed from a file has no cycles.
_ITEM_CHUNKS = (
    None
    if c_make_encoder is None
    else c_make_encoder(None, str, encode_basestring, None, ": ", ", ", False, False, True)
)


def item_json(item: Item | None, raw: str | None) -> str:
    """The row as a JSON string for outputs; unparseable rows keep their raw text."""
    if item is None:
        return raw if raw is not None else ""
    if _ITEM_CHUNKS is None:
        return _ITEM_ENCODER.encode(item)
    return "".join(_ITEM_CHUNKS(item, 0))
