"""The texts a retrieval target sends: templates, the default written as Python, and truncation."""

from __future__ import annotations

import pytest

from beameval.config.retrieval import DEFAULT_DOCUMENT_TEMPLATE
from beameval.core.errors import TemplateError
from beameval.retrieval.beir import CorpusDocument
from beameval.retrieval.passages import Texts


@pytest.mark.parametrize("title", ["", "A title"])
def test_the_default_document_text_equals_its_template(title: str) -> None:
    document = CorpusDocument("d1", title, "Some text.")
    fast = Texts("{{ item.text }}", DEFAULT_DOCUMENT_TEMPLATE, "end", 100).passage(document)
    rendered = Texts("{{ item.text }}", DEFAULT_DOCUMENT_TEMPLATE + "{# any other template #}", "end", 100)
    assert fast == rendered.passage(document) == (f"{title} Some text." if title else "Some text.")


def test_truncation_keeps_the_start_or_the_end_or_refuses() -> None:
    document = CorpusDocument("d1", "", "abcdefghij")
    assert Texts("{{ item.text }}", "{{ doc.text }}", "end", 4).passage(document) == "abcd"
    assert Texts("{{ item.text }}", "{{ doc.text }}", "start", 4).passage(document) == "ghij"
    with pytest.raises(TemplateError, match="document 'd1' is 10 characters long, more than max_chars"):
        Texts("{{ item.text }}", "{{ doc.text }}", None, 4).passage(document)
    assert Texts("Q: {{ item.text }}", "{{ doc.text }}", None, 40).query({"text": "why"}) == "Q: why"
