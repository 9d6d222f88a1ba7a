"""CallEndpoints with a judge's and an embeddings endpoint's plan, a bundle run twice in process: nothing paid twice.

Every endpoint kind goes through the one DoFn (``transforms.endpoint_calls``), so each
gets the send-time journal look-up: a bundle that Beam runs again (a later stage of the
fused stage failed) is answered from the journal. The DoFn is driven by hand as a runner
drives it, against the test server, which counts the requests it receives per prompt.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from beameval.cache.journal import JOURNAL_DIR
from beameval.config.params import Params
from beameval.config.retrieval import EmbeddingsEndpoint
from beameval.core.records import GeneratedRow
from beameval.inference.targets.retrieval import EmbeddingsHandler
from beameval.metrics.registry import config_model
from beameval.testserver.harness import ServerProcess
from beameval.testserver.retrieval import embed
from transforms.endpoint_calls import CallEndpoints
from transforms.metric_calls import CallMetricEndpoints
from transforms.retrieval_calls import Endpoint, _RetrievalCalls

ROWS = 12


def _bundle(dofn: CallEndpoints[Any, Any], elements: Iterable[Any]) -> list[Any]:
    dofn.start_bundle()
    out = [output for element in elements for output in dofn.process(element)]
    return out + [windowed.value for windowed in dofn.finish_bundle()]


def _twice(dofn: CallEndpoints[Any, Any], elements: list[Any]) -> tuple[list[Any], list[Any]]:
    """The bundle, then the same bundle again (as after a later stage failed), in one process."""
    dofn.setup()
    try:
        return _bundle(dofn, elements), _bundle(dofn, elements)
    finally:
        dofn.teardown()


def test_a_judge_s_bundle_run_again_is_answered_from_the_journal(clean_server: ServerProcess, tmp_path: Path) -> None:
    model = {"url": clean_server.base_url, "name": "judge", "format": "openai"}
    judge = config_model("llm-judge").model_validate(
        {"type": "llm-judge", "model": model, "scores": [{"name": "quality", "minimum": 1, "maximum": 5}]}
    )
    rows = [GeneratedRow(i, {"id": i}, {"output_text": f"answer {i}"}) for i in range(ROWS)]
    dofn = CallMetricEndpoints([judge], str(tmp_path / JOURNAL_DIR), Params(), "judge-again")
    first, again = _twice(dofn, rows)
    stats = clean_server.stats()
    assert stats["requests"] == ROWS and set(stats["per_prompt"].values()) == {1}
    assert sorted(row.row_index for row in again) == list(range(ROWS))
    in_order = sorted(first, key=lambda row: row.row_index), sorted(again, key=lambda row: row.row_index)
    for before, after in zip(*in_order, strict=True):
        reply, replayed = before.metric_responses["llm-judge"], after.metric_responses["llm-judge"]
        assert reply.error is None and replayed.sample == reply.sample
        assert (replayed.attempts, replayed.latency_s) == (1, 0.0)  # untimed: no request of this attempt


def test_an_embeddings_bundle_run_again_embeds_nothing_twice(clean_server: ServerProcess, tmp_path: Path) -> None:
    endpoint_config = EmbeddingsEndpoint(url=clean_server.base_url, name="embedder")
    endpoint = Endpoint(
        "embeddings",
        lambda key: EmbeddingsHandler(endpoint_config, key),
        endpoint_config,
        "embedder",
        Params(),
        "embed-again",
    )
    # A corpus batch (tagged by its number and ids) and two queries (tagged by their rows).
    corpus = ((0, ["d1", "d2"]), {"input": ["first passage", "second passage"], "input_type": "passage"}, None)
    queries = [((i, 0), {"input": [f"query {i}"], "input_type": "query"}, None) for i in range(2)]
    dofn = CallEndpoints(_RetrievalCalls(endpoint), str(tmp_path / JOURNAL_DIR))
    first, again = _twice(dofn, [corpus, *queries])
    assert clean_server.stats()["requests"] == 3
    samples = {repr(tag): reply.sample for tag, reply in first}
    assert {repr(tag): reply.sample for tag, reply in again} == samples
    assert samples[repr((0, ["d1", "d2"]))]["vectors"][1] == embed("second passage")
    assert samples[repr((1, 0))]["vectors"] == [embed("query 1")]
    assert all(reply.latency_s == 0.0 for _, reply in again)  # from the journal, untimed
