"""The texts a retrieval target sends: a document's passage and a row's query, rendered and cut to length."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from beameval.config.retrieval import DEFAULT_DOCUMENT_TEMPLATE
from beameval.core.errors import TemplateError
from beameval.core.templates import Template, render_text
from beameval.retrieval.beir import CorpusDocument

__all__ = ["Texts"]


class Texts:
    """Renders ``document_template`` over ``doc`` and ``query_template`` over the row, then applies ``truncate``.

    Args:
        query_template: the query's template (sees the row as ``item`` and its fields).
        document_template: the passage's template (sees ``doc.id``, ``doc.title``, ``doc.text``).
        truncate: ``end`` keeps a long text's first ``max_chars`` characters, ``start`` its
            last ones, None refuses it.
        max_chars: the longest text sent.
    """

    def __init__(
        self, query_template: str, document_template: str, truncate: Literal["end", "start"] | None, max_chars: int
    ) -> None:
        self._query = Template(query_template, "query_template")
        self._document = Template(document_template, "document_template")
        # The default template written as Python: a million Jinja renders cost more than the corpus's HTTP calls.
        self._default_document = document_template == DEFAULT_DOCUMENT_TEMPLATE
        self._truncate = truncate
        self._max_chars = max_chars

    def query(self, item: Mapping[str, Any]) -> str:
        """The text embedded for a row.

        Raises:
            TemplateError: the template failed, rendered no text, or the text is too long with ``truncate: null``.
        """
        return self._cut(render_text(self._query, {**item, "item": item}, "query"), "the query")

    def passage(self, document: CorpusDocument) -> str:
        """The text embedded (and reranked) for a document.

        Raises:
            TemplateError: as for ``query``.
        """
        if self._default_document:
            text = f"{document.title} {document.text}" if document.title else document.text
        else:
            context = {"doc": {"id": document.id, "title": document.title, "text": document.text}}
            text = render_text(self._document, context, "document")
        return self._cut(text, f"document {document.id!r}")

    def _cut(self, text: str, what: str) -> str:
        if len(text) <= self._max_chars:
            return text
        if self._truncate == "end":
            return text[: self._max_chars]
        if self._truncate == "start":
            return text[-self._max_chars :]
        raise TemplateError(
            f"{what} is {len(text):,} characters long, more than max_chars ({self._max_chars:,}); "
            "set target.retrieval.truncate to 'end' or 'start' to cut it."
        )
