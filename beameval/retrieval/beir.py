"""Reading a BEIR folder: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

Beam-free parsers over open binary streams (``transforms.read`` opens the files on any
file system). ``dataset.format: beir`` makes one row per query that has judgements, in
the order the qrels file first names them: ``{"query_id", "text", "relevant": {doc_id:
grade}}``; the retrieval target reads the corpus with ``iter_corpus``. Every malformed
record is a ``DatasetError`` naming the file and the line, never a skipped record: a
BEIR folder is a test collection, and a silently dropped judgement changes every score.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any, NamedTuple

from beameval.core.errors import DatasetError

__all__ = [
    "CORPUS_FILE",
    "QRELS_HEADER",
    "QUERIES_FILE",
    "CorpusDocument",
    "iter_corpus",
    "qrels_file",
    "query_rows",
    "read_qrels",
    "read_queries",
]

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_HEADER = ("query-id", "corpus-id", "score")


def qrels_file(split: str) -> str:
    """The judgements file of ``split``, relative to the folder (``qrels/test.tsv``)."""
    return f"qrels/{split}.tsv"


class CorpusDocument(NamedTuple):
    """One ``corpus.jsonl`` record."""

    id: str
    title: str
    text: str


def read_queries(stream: IO[bytes], path: str) -> dict[str, dict[str, Any]]:
    """``queries.jsonl`` as ``{_id: record}`` (each record without its ``_id``, its ``text`` checked).

    Raises:
        DatasetError: a line is not a JSON object with a string ``_id`` and ``text``, or an id repeats.
    """
    queries: dict[str, dict[str, Any]] = {}
    for where, record in _jsonl(stream, path):
        query_id = _identifier(record, where)
        if query_id in queries:
            raise DatasetError(f"{where}: query id {query_id!r} appears twice; each query must appear once.")
        _text(record, "text", where, required=True)
        queries[query_id] = {key: value for key, value in record.items() if key != "_id"}
    return queries


def read_qrels(stream: IO[bytes], path: str) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """A qrels TSV (header ``query-id corpus-id score``) as ``{query_id: {doc_id: grade}}``.

    Returns:
        The judgements, queries in the order the file first names them, and the line of
        each query's first judgement (for messages about it).

    Raises:
        DatasetError: the header is not BEIR's, a line has not three fields, a grade is
            not an integer, or a (query, document) pair is judged twice.
    """
    qrels: dict[str, dict[str, int]] = {}
    first_line: dict[str, int] = {}
    header_seen = False
    for number, raw in enumerate(iter(stream.readline, b""), start=1):
        line = _decode(raw, path, number).rstrip("\r\n")
        if not line.strip():
            continue
        fields = line.split("\t")
        if not header_seen:
            header_seen = True
            if tuple(field.strip().lstrip("\ufeff") for field in fields) != QRELS_HEADER:
                raise DatasetError(
                    f"{path} line {number}: the header must be {' <TAB> '.join(QRELS_HEADER)} (BEIR's), "
                    f"got {line[:80]!r}."
                )
            continue
        if len(fields) != 3:
            raise DatasetError(
                f"{path} line {number}: expected 3 tab-separated fields (query-id, corpus-id, score), "
                f"got {len(fields)}: {line[:80]!r}."
            )
        query_id, doc_id, grade_text = (field.strip() for field in fields)
        if not query_id or not doc_id:
            raise DatasetError(f"{path} line {number}: query-id and corpus-id must not be empty.")
        try:
            grade = int(grade_text)
        except ValueError:
            raise DatasetError(f"{path} line {number}: score must be an integer, got {grade_text[:40]!r}.") from None
        judged = qrels.setdefault(query_id, {})
        first_line.setdefault(query_id, number)
        if doc_id in judged:
            raise DatasetError(
                f"{path} line {number}: query {query_id!r} judges document {doc_id!r} a second time; keep one line."
            )
        judged[doc_id] = grade
    if not header_seen:
        raise DatasetError(f"{path} is empty; a qrels file starts with the header {' <TAB> '.join(QRELS_HEADER)}.")
    return qrels, first_line


def query_rows(
    queries: dict[str, dict[str, Any]], qrels: dict[str, dict[str, int]], first_line: dict[str, int], qrels_path: str
) -> list[dict[str, Any]]:
    """One row per judged query: ``{query_id, text, relevant}``, in the qrels file's order.

    A query record's other fields (BEIR's ``metadata``, a stored run to score offline) are
    kept in its row as written; ``query_id``, ``text`` and ``relevant`` are always ours.

    Raises:
        DatasetError: the qrels judge a query that ``queries.jsonl`` does not have.
    """
    missing = [query_id for query_id in qrels if query_id not in queries]
    if missing:
        raise DatasetError(
            f"{qrels_path} line {first_line[missing[0]]}: query {missing[0]!r} is not in {QUERIES_FILE}"
            + (f" ({len(missing) - 1} more queries are missing too)" if len(missing) > 1 else "")
            + "; the qrels and the queries must come from the same collection."
        )
    return [
        {**queries[query_id], "query_id": query_id, "text": queries[query_id]["text"], "relevant": judged}
        for query_id, judged in qrels.items()
    ]


def iter_corpus(stream: IO[bytes], path: str) -> Iterator[CorpusDocument]:
    """The documents of ``corpus.jsonl`` in file order (``title`` defaults to ``""``).

    Raises:
        DatasetError: a line is not a JSON object with an ``_id`` and a string ``text``.
    """
    for where, record in _jsonl(stream, path):
        yield CorpusDocument(_identifier(record, where), _text(record, "title", where), _text(record, "text", where))


def _jsonl(stream: IO[bytes], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for number, raw in enumerate(iter(stream.readline, b""), start=1):
        if not raw.strip():
            continue
        where = f"{path} line {number}"
        text = _decode(raw, path, number)
        try:
            record = json.loads(text.lstrip("\ufeff") if number == 1 else text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}).") from None
        if not isinstance(record, dict):
            raise DatasetError(f"{where}: a JSON {type(record).__name__}, but each line must be a JSON object.")
        yield where, record


def _decode(raw: bytes, path: str, number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path} line {number}: not valid UTF-8 (byte {exc.start}); re-encode the file.") from None


def _identifier(record: dict[str, Any], where: str) -> str:
    value = record.get("_id")
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise DatasetError(f"{where}: '_id' must be a non-empty string, got {value!r:.60}.")
    return str(value)


def _text(record: dict[str, Any], field: str, where: str, required: bool = False) -> str:
    value = record.get(field)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise DatasetError(f"{where}: {field!r} must be a {'non-empty ' if required else ''}string, got {value!r:.60}.")
    return value
