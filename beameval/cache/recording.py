"""Record each successful response in the journal the moment it is parsed, and answer requests from stored ones."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from beameval.cache.entry import StoredResponse
from beameval.cache.journal import JournalWriter
from beameval.core.redaction import Redactor
from beameval.core.sanitize import MAX_NESTING
from beameval.inference.prepared import PreparedRequest
from beameval.inference.targets.base import TargetHandler

__all__ = ["Recorder", "RecordingHandler", "clean_replies", "journal_answer", "sample_from_stored"]


class Recorder(Protocol):
    """Where a success is recorded: the run's ``JournalWriter``, or the preflight's answer kept in memory."""

    def record(self, key: str, response: Any, model: str | None) -> None:
        """Keep one successful response (the decoded reply, or its body as received) under ``key``."""
        ...


class RecordingHandler(TargetHandler):
    """One request's view of a handler: parsing a reply also records it under the request's key.

    The retry loop calls ``parse`` on the engine's thread as each 2xx reply arrives, and
    only a reply that ``parse`` accepts is a success; so the journal gets every success
    (none later than its row) and no error or empty answer. Everything else is delegated.

    Args:
        inner: the endpoint's handler.
        journal: the run's journal writer (or anything else that records, see ``Recorder``).
        key: the request's ``response_key``.
        model: the model name the request asked for, stored with the entry.
        redactor: masks the endpoint's key (and its 8+ character slices) in what is recorded.

    """

    def __init__(
        self, inner: TargetHandler, journal: Recorder, key: str, model: str | None, redactor: Redactor
    ) -> None:
        self._inner = inner
        self._redactor = redactor
        self._journal = journal
        self._key = key
        self._model = model
        self.endpoint_key = inner.endpoint_key
        self.headers = inner.headers
        self.secrets = inner.secrets

    def prepare(self, rendered: Any, item: Mapping[str, Any] | None = None) -> PreparedRequest:
        return self._inner.prepare(rendered, item)

    def revise(self, prepared: PreparedRequest, status: int, body: bytes) -> PreparedRequest | None:
        return self._inner.revise(prepared, status, body)

    def parse(self, status: int, json_body: Any) -> dict[str, Any]:
        sample = self._inner.parse(status, json_body)
        self._journal.record(self._key, self._redactor.value(json_body), self._model)  # an echoed key is never kept
        return sample

    def parse_reply(self, status: int, content: bytes) -> dict[str, Any]:
        """Parse, then record the body as received (masked): the journal writes it without encoding it again."""
        sample = self._inner.parse(status, json.loads(content))
        self._journal.record(self._key, self._redactor.bytes(content), self._model)
        return sample


def sample_from_stored(handler: TargetHandler, stored: StoredResponse | None) -> dict[str, Any] | None:
    """Parse a stored reply as if it had just arrived; None when there is none or it no longer parses.

    A reply can stop parsing when a setting outside the key changed (an agent's
    ``response_path``, a reasoning end token): that request is then a miss and is sent.
    """
    if stored is None:
        return None
    try:
        return handler.parse(200, stored.response)
    except Exception:  # noqa: BLE001 - any parse failure means "not usable": send the request instead
        return None


def clean_replies(handler: TargetHandler, entries: list[StoredResponse | None]) -> bool:
    """True when every entry's parsed reply surely holds no lone surrogate and nests within ``MAX_NESTING``.

    The entries' own ``nesting`` (known when read) and the handler's ``parse_nesting`` tell,
    so a batch of hits is built without ``sanitize.clean_value`` visiting every reply
    again: a third of what a cached row costs to build. Anything unknown says False, and
    those replies are checked as fresh ones are.
    """
    extra = handler.parse_nesting
    if extra is None:
        return False
    limit = MAX_NESTING - extra
    return all(entry is not None and entry.nesting is not None and entry.nesting <= limit for entry in entries)


def journal_answer(journal: JournalWriter, handler: TargetHandler, key: str, row: str) -> dict[str, Any] | None:
    """The answer the run recorded to ``key`` sent for ``row``, parsed as if it had just arrived; None: send it.

    Only the row's own earlier call counts (a bundle Beam ran again): another row asking
    the same is sent, as in a run no runner retried.

    Args:
        journal: the run's journal writer in this process (its index covers every shard).
        handler: parses the stored reply.
        key: the request's response key.
        row: the asking row (``journal_index.row_token``).

    """
    return sample_from_stored(handler, journal.answered(key, row))
