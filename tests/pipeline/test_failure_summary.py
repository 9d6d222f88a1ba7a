"""Failures are visible at the end of a run: causes with counts, errors/ path, max_error_rate, judge warnings."""

from __future__ import annotations

QA = [{"question": f"question {i}", "answer": f"question {i}"} for i in range(40)]


def config(path, target, **params):
    return {
        "dataset": {"path": str(path)},
        "target": target,
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"ignore_request_failure": True, "max_retries": 0, **params},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }


def test_the_summary_names_the_most_common_causes_and_where_the_rows_are(
    clean_server, model_target, write_jsonl, run_eval
) -> None:
    # The last rows fail (the first one the preflight sends: a refusal there would stop the run before it starts).
    rows = [{"question": f"{row['question']}{' bad' if i >= 34 else ''}", "answer": row["answer"]} for i, row in
            enumerate(QA)]  # fmt: skip
    clean_server.configure(rules=[{"match": " bad", "status": 400}])
    result = run_eval(config(write_jsonl(rows), model_target()))
    assert result.code == 0, result.stderr
    failures = result.results["failures"]
    assert failures["by_phase"] == {"sample_generation": 6}
    top = failures["top_causes"][0]
    assert top["count"] == 6 and top["phase"] == "sample_generation" and "HTTP 400" in top["cause"]
    assert "most common failures:" in result.stdout and "      6 of 40  [sample_generation]" in result.stdout
    assert f"every failed row is in {result.output / 'errors'}" in result.stdout


def test_more_failures_than_max_error_rate_exit_1_after_writing_outputs(
    clean_server, model_target, write_jsonl, run_eval
) -> None:
    rows = [{"question": f"{row['question']}{' bad' if i >= 30 else ''}", "answer": row["answer"]} for i, row in
            enumerate(QA)]  # fmt: skip
    clean_server.configure(rules=[{"match": " bad", "status": 400}])
    over = run_eval(config(write_jsonl(rows, "over.jsonl"), model_target(), max_error_rate=0.2))
    assert over.code == 1
    assert "10 of 40 rows failed (25.0%), more than params.max_error_rate (20.0%)" in over.stderr
    assert over.results["status"] == "failed" and len(over.rows) == 40 and len(over.errors) == 10
    within = run_eval(config(write_jsonl(rows, "within.jsonl"), model_target(), max_error_rate=0.25))
    assert within.code == 0 and within.results["status"] == "completed"


def test_a_judge_whose_replies_never_parse_is_a_warning(clean_server, model_target, write_jsonl, run_eval) -> None:
    judge = {
        "type": "llm-judge",
        "model": {"url": clean_server.base_url, "name": "judge", "format": "openai"},
        "scores": [
            {"name": "quality", "minimum": 0, "maximum": 10, "parser": {"type": "regex", "pattern": "SCORE=(\\d+)"}}
        ],  # fmt: skip
        "prompt_template": {"messages": [{"role": "user", "content": "rate {{ sample.output_text }}"}]},
    }
    cfg = config(write_jsonl(QA[:5]), model_target())
    cfg["metrics"] = [judge]
    result = run_eval(cfg)
    assert result.code == 0, result.stderr
    assert "warning: the judge 'llm-judge' gave no score that could be parsed, in 5 row(s)" in result.stderr
