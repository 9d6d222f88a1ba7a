"""One path for every answer: a reply from the network, the run's journal or the response store becomes a row here.

A resumed or cached run must write the rows a clean run writes, so an answer is checked,
cleaned and noted the same way whatever its source. Sources differ only in how they get
the handler's parsed reply and what they know about the call (latency, attempts,
``cached``); each hands both to ``answered_row`` (and a metric call's reply to
``checked_reply``), which decide everything else:

* the reply's text made valid UTF-8 (lone surrogates become U+FFFD, and a note says so);
* its token counts read from the parsed reply's ``usage`` and kept only when they are
  64-bit integers (else null, and a note);
* a reply nested deeper than ``sanitize.MAX_NESTING`` fails its row, with one message;
* the row's own notes (from reading it) kept in front of the reply's.

Nothing here masks secrets: what metrics score is the answer as received; redaction
happens where rows are written (``transforms.score``) and where replies are recorded.
A new source (a batch-results file, say) parses its reply with the target's handler
(``beameval.cache.recording.sample_from_stored`` for anything kept as the endpoint's JSON
body) and calls ``answered_row``; it needs nothing else to stay consistent.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from beameval.core.records import EndpointReply, GeneratedRow, InferenceInfo, InputRow, RowFailure
from beameval.core.sanitize import RowTooLarge, writable_reply

__all__ = ["CheckedReply", "answered_row", "checked_reply", "endpoint_reply", "reply_usage"]


class CheckedReply(NamedTuple):
    """A parsed reply made writable, with its token counts and the notes on what was changed.

    A named tuple: one is made for every answer, and a tuple is built in a fraction of a frozen dataclass's time.
    """

    sample: dict[str, Any]
    prompt_tokens: int | None
    completion_tokens: int | None
    notes: list[str]


def reply_usage(sample: dict[str, Any]) -> tuple[Any, Any]:
    """The token counts a parsed reply reports under ``usage`` (as reported: ``checked_reply`` vets them)."""
    usage = sample.get("usage")
    if not isinstance(usage, dict):
        return None, None
    return usage.get("prompt_tokens"), usage.get("completion_tokens")


def checked_reply(sample: dict[str, Any], known_clean: bool = False) -> CheckedReply:
    """Check and clean one parsed reply (a target's or a metric endpoint's), whatever its source.

    ``known_clean``: its text and nesting are known to be clean (``sanitize.clean_value``).

    Raises:
        RowTooLarge: the reply is nested deeper than ``sanitize.MAX_NESTING``.
    """
    cleaned, prompt, completion, notes = writable_reply(sample, *reply_usage(sample), known_clean)
    return CheckedReply(cleaned, prompt, completion, notes)


def answered_row(row: InputRow, sample: dict[str, Any], info: InferenceInfo, known_clean: bool = False) -> GeneratedRow:
    """The row a target's parsed reply makes, the same for a fresh, a journaled and a stored reply.

    Args:
        row: the input row the request was built from.
        sample: the handler's parsed reply (``TargetHandler.parse``).
        info: what the source knows of the call, made for this row: the row takes it,
            with its token counts set to the reply's own, checked, and its request to the
            one sent (not a copy: a cached rerun builds little else per row).
        known_clean: the source knows the reply holds no lone surrogate and is not nested
            too deep (``TargetHandler.parse_nesting``), so its text and nesting are not
            looked at again; its token counts are checked all the same.

    Returns:
        An ok row, or a failed one (phase ``sample_generation``) when the reply cannot
        be written; ``info`` is kept on both.
    """
    info.request = info.request or row.request  # the request sent, whatever the source
    try:
        checked = checked_reply(sample, known_clean)
    except RowTooLarge as exc:
        failure = RowFailure("sample_generation", [f"row {row.row_index}: the model's reply {exc}."])
        return GeneratedRow(
            row.row_index, row.item, {}, row.raw, failure, info, sample_index=row.sample_index, notes=row.notes
        )
    info.prompt_tokens, info.completion_tokens = checked.prompt_tokens, checked.completion_tokens
    return GeneratedRow(
        row.row_index,
        row.item,
        checked.sample,
        inference=info,
        sample_index=row.sample_index,
        notes=[*row.notes, *checked.notes],
    )


def endpoint_reply(
    sample: dict[str, Any], *, status: int | None, attempts: int = 0, latency_s: float = 0.0, cached: bool = False
) -> EndpointReply:
    """A metric endpoint's parsed reply (an LLM judge's, a remote scorer's) as the row records it, from any source.

    A reply that cannot be written is an endpoint failure with one message, fresh or stored.
    """
    try:
        checked = checked_reply(sample)
    except RowTooLarge as exc:
        return EndpointReply(
            error=f"the endpoint's reply {exc}",
            error_kind="endpoint",
            status=status,
            attempts=attempts,
            latency_s=latency_s,
            cached=cached,
        )
    return EndpointReply(
        sample=checked.sample,
        status=status,
        attempts=attempts,
        latency_s=latency_s,
        prompt_tokens=checked.prompt_tokens,
        completion_tokens=checked.completion_tokens,
        cached=cached,
    )
