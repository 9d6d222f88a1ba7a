"""An online run with an LLM judge: one target call and one judge call per row, rubric aggregates."""

ROWS = [
    {"question": "capital of France?", "answer": "Paris"},
    {"question": "capital of Japan?", "answer": "Tokyo"},
    {"question": "capital of Italy?", "answer": "Rome"},
    {"question": "capital of Spain?", "answer": "Madrid"},
]
REPLIES = {
    "capital of France?": "Paris",
    "capital of Japan?": "Tokyo",
    "capital of Italy?": "Milan",
    "capital of Spain?": "Madrid, I think",
}


def judge_metric(model: dict) -> dict:
    """The judge of these tests on ``model``: "JUDGE: <answer> vs <reference>", a rubric and a 1-5 range score."""
    return {
        "type": "llm-judge",
        "model": model,
        "prompt_template": {
            "messages": [{"role": "user", "content": "JUDGE: {{ sample.output_text }} vs {{ item.answer }}"}]
        },
        "scores": [
            {"name": "quality", "rubric": [{"label": "bad", "value": 0}, {"label": "good", "value": 1}]},
            {"name": "confidence", "minimum": 1, "maximum": 5},
        ],
    }


def judge_run_config(server, model_target, write_jsonl) -> dict:
    """Scripted target and judge replies on one server: exact-match plus a rubric and a range judge score."""
    server.configure(
        rules=[
            {"match": "JUDGE: Paris vs Paris", "reply": '```json\n{"quality": "good", "confidence": 5}\n```'},
            {"match": "JUDGE: Tokyo vs Tokyo", "reply": '{"quality": "good", "confidence": 4}'},
            {"match": "JUDGE: Milan vs Rome", "reply": 'Verdict: {"quality": "bad", "confidence": 5}'},
            {"match": "JUDGE:", "reply": '{"quality": "so-so", "confidence": 9}'},
            *({"match": q, "reply": a} for q, a in REPLIES.items()),
        ]
    )
    judge = judge_metric({"url": server.base_url, "name": "judge", "format": "openai"})
    return {
        "dataset": {"path": str(write_jsonl(ROWS))},
        "target": model_target(),
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}, judge],
    }


def test_judge_scores_each_row_once_and_aggregates_rubrics(clean_server, model_target, write_jsonl, run_eval):
    config = judge_run_config(clean_server, model_target, write_jsonl)
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 4, "ok": 4, "errors": 0}
    per_prompt = clean_server.stats()["per_prompt"]
    assert clean_server.stats()["requests"] == 8 and set(per_prompt.values()) == {1}
    # The judge's calls are costed apart: prompts of 4+4+4+6 words ("Madrid, I think"), replies of 6+4+5+4.
    usage = result.results["usage"]
    assert (usage["requests"], usage["attempts"]) == (4, 4)
    assert usage["metric_calls"] == {
        "requests": 4,
        "attempts": 4,
        "prompt_tokens": 18,
        "completion_tokens": 19,
        "cache": {"hits": 0, "misses": 4},
        # per metric key, so each endpoint's pricing applies to its own tokens (usage.cost_usd)
        "by_metric": {"llm-judge": {"requests": 4, "prompt_tokens": 18, "completion_tokens": 19}},
    }
    quality = result.score("llm-judge.quality")
    assert quality["score_type"] == "rubric"
    assert (quality["count"], quality["nan_count"], quality["mean"]) == (3, 1, 2 / 3)
    assert [(d["label"], d["count"]) for d in quality["rubric_distribution"]] == [("bad", 1), ("good", 2)]
    assert quality["mode_category"] == "good"
    confidence = result.score("llm-judge.confidence")
    assert (confidence["count"], confidence["nan_count"], confidence["sum"]) == (3, 1, 14.0)  # 9 is out of range
    rows = result.rows
    assert [r["llm-judge.quality.label"] for r in rows] == ["good", "good", "bad", ""]


def test_judge_on_a_model_that_refuses_max_tokens_switches_to_max_completion_tokens(
    clean_server, model_target, write_jsonl, run_eval
):
    """The judge adds max_tokens=1024 itself; an OpenAI reasoning model refuses it with a 400 naming the fix."""
    config = judge_run_config(clean_server, model_target, write_jsonl)
    clean_server.configure(unsupported_params=["max_tokens"])
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert result.results["counts"] == {"rows": 4, "ok": 4, "errors": 0}
    quality = result.score("llm-judge.quality")
    assert (quality["count"], quality["nan_count"], quality["mean"]) == (3, 1, 2 / 3)
    # The server answers 200 only to bodies without max_tokens, so 8 answers = 4 target + 4 resent judge calls;
    # judge requests built before the first refusal came back are each refused once.
    by_status = clean_server.stats()["by_status"]
    assert by_status["200"] == 8 and 1 <= by_status["400"] <= 4
    calls = result.results["usage"]["metric_calls"]
    assert calls["requests"] == 4 and calls["attempts"] == 4 + by_status["400"]
