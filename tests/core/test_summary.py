"""RunSummary: counts, usage (target and metric calls) and the first failure, independent of merge order."""

from __future__ import annotations

import itertools

from beameval.core.records import CallUsage, EndpointReply, InferenceInfo, RowFailure, ScoredRow
from beameval.core.summary import RunSummary


def scored(index: int, score: float, *, failure: RowFailure | None = None, calls: CallUsage | None = None) -> ScoredRow:
    """A scored row whose target call took ``index + 1`` attempts and used ``index`` tokens each way."""
    info = InferenceInfo(latency_s=0.1 * (index + 1), attempts=index + 1, prompt_tokens=index, completion_tokens=index)
    return ScoredRow(index, "{}", "x", {"m.s": score}, failure=failure, inference=info, metric_calls=calls)


def summary_of(rows: list[ScoredRow]) -> RunSummary:
    summary = RunSummary()
    for row in rows:
        summary.add(row)
    return summary


def test_call_usage_counts_only_calls_that_reached_the_endpoint() -> None:
    replies = {
        "judge": EndpointReply(sample={"output_text": "ok"}, attempts=2, prompt_tokens=7, completion_tokens=3),
        "remote": EndpointReply(error="HTTP 503", error_kind="endpoint", attempts=4),
        "judge_2": EndpointReply(error="template error", error_kind="request", attempts=0),
    }
    usage = CallUsage.of_replies(replies)
    by_metric = {"judge": [1, 7, 3], "remote": [1, 0, 0]}  # per metric key, for costs per endpoint
    assert usage == CallUsage(requests=2, attempts=6, prompt_tokens=7, completion_tokens=3, by_metric=by_metric)
    assert CallUsage.of_replies(None) is None and CallUsage.of_replies({}) is None


def test_merge_in_any_order_gives_the_same_usage_and_first_failure() -> None:
    late = RowFailure("scoring", ["late"], metric="m")
    early = RowFailure("sample_generation", ["early"])
    rows = [
        scored(0, 1.0, calls=CallUsage(1, 1, 10, 2)),
        scored(1, 0.0, failure=late),
        scored(2, 1.0, calls=CallUsage(1, 3, 5, 1)),
        scored(3, 0.5, failure=early),
    ]
    expected = None
    for order in itertools.permutations(range(4)):
        parts = [summary_of([rows[i]]) for i in order[:2]] + [summary_of([rows[i] for i in order[2:]])]
        data = RunSummary.merge(parts).to_dict()
        data["usage"]["latency_ms"]["mean"] = round(data["usage"]["latency_ms"]["mean"], 9)
        if expected is None:
            expected = data
        assert data == expected
    assert expected is not None
    assert expected["counts"] == {"rows": 4, "ok": 2, "errors": 2}
    assert expected["first_failure"]["message"] == "late"  # row 1 is the lowest failed row_index
    usage = expected["usage"]
    assert (usage["requests"], usage["attempts"], usage["prompt_tokens"], usage["completion_tokens"]) == (4, 10, 6, 6)
    assert usage["metric_calls"] == {
        "requests": 2,
        "attempts": 4,
        "prompt_tokens": 15,
        "completion_tokens": 3,
        "cache": {"hits": 0, "misses": 2},
    }
    assert (usage["latency_ms"]["min"], usage["latency_ms"]["max"]) == (100.0, 400.0)
