"""The interface every endpoint kind implements, so the engine never branches on target kind."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from beameval.config.access import DEFAULT_MAX_RESPONSE_BYTES
from beameval.inference.prepared import PreparedRequest

__all__ = ["TargetHandler", "endpoint_key", "key_fingerprint"]


def key_fingerprint(api_key: str | None) -> str:
    """Return the first 16 hex digits of the key's SHA-256 (``-`` without a key): identifies, never reveals."""
    if not api_key:
        return "-"
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()[:16]


def endpoint_key(base_url: str, name: str, api_key: str | None) -> str:
    """Return ``<base url>|<name>|<key fingerprint>``: one limiter and connection pool per key."""
    return f"{base_url}|{name}|{key_fingerprint(api_key)}"


class TargetHandler(ABC):
    """Builds requests for one endpoint and turns its 2xx replies into samples.

    Handlers are immutable after construction and safe to share between threads, except
    for what ``revise`` learns: a one-way switch, so a race only costs one more refusal.

    Attributes:
        endpoint_key: identifies the endpoint (URL, model name, key fingerprint); engines
            are shared per key.
        headers: the headers sent with every request (may hold Authorization).
        secrets: literal strings (the API key) to mask in any message.
        probe_url: a free GET that checks reachability and credentials before a run (a
            models listing); None when the endpoint has none.
        ca_bundle: a PEM file of CA certificates to trust instead of the system's.
        max_response_bytes: the largest reply body the engine accepts.
        parse_nesting: how many levels deeper than the reply's own nesting a sample of
            ``parse`` can nest, when ``parse`` also puts no text in the sample but the
            reply's own (whole, cut or joined) and constants; None when that is not known.
            With it, a reply read from the store whose nesting and text are known
            (``cache.entry.StoredResponse.nesting``) skips ``sanitize.clean_value``.

    """

    endpoint_key: str
    headers: Mapping[str, str]
    secrets: tuple[str, ...] = ()
    probe_url: str | None = None
    ca_bundle: str | None = None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    parse_nesting: int | None = None

    @abstractmethod
    def prepare(self, rendered: Any, item: Mapping[str, Any] | None = None) -> PreparedRequest:
        """Build the request for one row.

        Args:
            rendered: the rendered ``prompt_template`` value: a mapping (request body,
                e.g. with ``messages``) or a string (a completions prompt).
            item: the dataset row, for handlers whose own templates refer to ``item``.

        Returns:
            The request to send.

        Raises:
            TemplateError: the rendered value has the wrong shape, or a handler template
                failed to render.

        """

    def revise(self, prepared: PreparedRequest, status: int, body: bytes) -> PreparedRequest | None:
        """Return a corrected request when a non-retryable reply says exactly what to change.

        The retry loop sends the corrected request once, without spending a retry. The
        default knows no corrections.

        Args:
            prepared: the request that was refused.
            status: the reply's HTTP status.
            body: the reply's body.

        Returns:
            The request to send instead, or None.

        """
        return None

    @abstractmethod
    def parse(self, status: int, json_body: Any) -> dict[str, Any]:
        """Turn a 2xx reply into a sample.

        Args:
            status: the HTTP status (2xx).
            json_body: the decoded JSON reply.

        Returns:
            ``{"output_text": str, "response": dict, "reasoning_content"?: str,
            "trajectory"?: Any, "usage"?: {"prompt_tokens", "completion_tokens"}}``.

        Raises:
            MalformedResponseError: the reply lacks the expected fields (retryable).
            EmptyAnswerError: the reply holds no answer (not retryable).
            UnusableResponseError: the reply cannot yield an answer (not retryable).

        """

    def parse_reply(self, status: int, content: bytes) -> dict[str, Any]:
        """Decode a 2xx reply body and ``parse`` it; the retry loop's entry point.

        A wrapper that also needs the body as received (the journal stores it without
        encoding it again) overrides this.

        Raises:
            ValueError: the body is not JSON (a malformed reply, retryable).

        """
        return self.parse(status, json.loads(content))

    @property
    def learned(self) -> bool:
        """True once ``revise`` has changed how this handler builds requests (see ``ModelHandler``)."""
        return False
