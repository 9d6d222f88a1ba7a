"""Reading a BEIR folder: a row per judged query, the corpus, and errors naming file and line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from beameval.core.errors import DatasetError
from beameval.retrieval.beir import iter_corpus, query_rows, read_qrels, read_queries
from transforms.read import list_dataset_files, read_beir_rows

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "retrieval" / "minibeir"


def stream(text: str) -> io.BytesIO:
    return io.BytesIO(text.encode("utf-8"))


def test_the_example_folder_gives_one_row_per_judged_query_in_qrels_order() -> None:
    (qrels,) = list_dataset_files(str(EXAMPLE), "beir")
    assert qrels == str(EXAMPLE / "qrels" / "test.tsv")
    rows = read_beir_rows(qrels)
    assert [row["query_id"] for row in rows] == ["q1", "q2", "q3", "q4", "q5"]  # q6 has no judgement: no row
    assert rows[0] == {
        "query_id": "q1",
        "text": "which runners can run a beam pipeline",
        "relevant": {"d02": 2, "d01": 1},
    }
    assert rows[2]["relevant"] == {"d07": 2, "d08": 0}
    with (EXAMPLE / "corpus.jsonl").open("rb") as corpus:
        documents = list(iter_corpus(corpus, "corpus.jsonl"))
    assert len(documents) == 12 and documents[0].id == "d01" and documents[0].title == "Apache Beam"
    assert documents[11].title == ""


def test_other_query_fields_are_kept_and_ours_win() -> None:
    queries = read_queries(stream('{"_id": 7, "text": "t", "run": ["a"], "relevant": "theirs"}\n'), "queries.jsonl")
    qrels, lines = read_qrels(stream("query-id\tcorpus-id\tscore\n7\ta\t1\n"), "qrels/test.tsv")
    assert query_rows(queries, qrels, lines, "qrels/test.tsv") == [
        {"query_id": "7", "text": "t", "run": ["a"], "relevant": {"a": 1}}
    ]


def test_a_missing_folder_or_split_is_named(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"is not a BEIR folder for split 'dev'.*qrels/dev.tsv"):
        list_dataset_files(str(EXAMPLE), "beir", "dev")
    with pytest.raises(DatasetError, match="queries.jsonl"):
        list_dataset_files(str(tmp_path), "beir")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"_id": "q1", "text": "a"}\n{"_id": "q2", "text": \n', r"queries.jsonl line 2: not valid JSON"),
        ('["q1", "a"]\n', r"queries.jsonl line 1: a JSON list, but each line must be a JSON object"),
        ('{"_id": "q1"}\n', r"queries.jsonl line 1: 'text' must be a non-empty string"),
        ('{"_id": "", "text": "a"}\n', r"queries.jsonl line 1: '_id' must be a non-empty string"),
        (
            '{"_id": "q1", "text": "a"}\n\n{"_id": "q1", "text": "b"}\n',
            r"queries.jsonl line 3: query id 'q1' appears twice",
        ),
    ],
)
def test_malformed_queries(text: str, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        read_queries(stream(text), "queries.jsonl")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"qrels/test.tsv is empty"),
        ("qid\tdid\tscore\n", r"qrels/test.tsv line 1: the header must be query-id <TAB> corpus-id <TAB> score"),
        ("query-id\tcorpus-id\tscore\nq1\td1\n", r"line 2: expected 3 tab-separated fields"),
        ("query-id\tcorpus-id\tscore\nq1\td1\thigh\n", r"line 2: score must be an integer, got 'high'"),
        (
            "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t2\n",
            r"line 3: query 'q1' judges document 'd1' a second time",
        ),
        ("query-id\tcorpus-id\tscore\n\td1\t1\n", r"line 2: query-id and corpus-id must not be empty"),
    ],
)
def test_malformed_qrels(text: str, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        read_qrels(stream(text), "qrels/test.tsv")


def test_a_judged_query_missing_from_the_queries_is_named_with_its_qrels_line() -> None:
    qrels, lines = read_qrels(stream("query-id\tcorpus-id\tscore\nq1\ta\t1\nq9\tb\t1\n"), "qrels/test.tsv")
    with pytest.raises(DatasetError, match=r"qrels/test.tsv line 3: query 'q9' is not in queries.jsonl"):
        query_rows({"q1": {"text": "x"}}, qrels, lines, "qrels/test.tsv")


def test_malformed_corpus_records() -> None:
    with pytest.raises(DatasetError, match=r"corpus.jsonl line 2: 'text' must be a string"):
        list(iter_corpus(stream('{"_id": "a", "text": "x"}\n{"_id": "b", "text": 3}\n'), "corpus.jsonl"))
    with pytest.raises(DatasetError, match=r"corpus.jsonl line 1: '_id' must be a non-empty string"):
        list(iter_corpus(stream('{"text": "x"}\n'), "corpus.jsonl"))
