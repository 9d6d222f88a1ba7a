"""The parity cases: one metric list per case, translated into our config and the reference's spec.

Each metric is written once, in our config's form; :class:`Case` derives the reference
SDK's spec from it (class names and keyword arguments), so the two sides cannot drift
apart. :func:`expected_score_names` states which scores both sides must report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.parity_data import RUBRIC, offline_rows, online_rows

REFERENCE_CLASSES = {
    "exact-match": "ExactMatchMetric",
    "f1": "F1Metric",
    "bleu": "BLEUMetric",
    "rouge": "ROUGEMetric",
    "string-check": "StringCheckMetric",
    "number-check": "NumberCheckMetric",
    "tool-calling": "ToolCallingMetric",
    "llm-judge": "LLMJudgeMetric",
}


def offline_metrics() -> list[dict[str, Any]]:
    ref, cand = "{{ item.answer }}", "{{ item.output }}"
    out = "{{ item.output }}"
    metrics: list[dict[str, Any]] = [
        {"type": "exact-match", "reference": ref, "candidate": cand},
        {"type": "f1", "reference": ref, "candidate": cand},
        {"type": "bleu", "references": [ref], "candidate": cand},
        {"type": "rouge", "reference": ref, "candidate": cand},
        {"type": "string-check", "left_template": out, "operation": "contains", "right_template": "{{ item.keyword }}"},
        {
            "type": "string-check",
            "left_template": out,
            "operation": "not contains",
            "right_template": "{{ item.keyword }}",
        },
        {
            "type": "string-check",
            "left_template": out,
            "operation": "startswith",
            "right_template": "{{ item.prefix }}",
        },
        {"type": "string-check", "left_template": out, "operation": "endswith", "right_template": "{{ item.suffix }}"},
        {"type": "string-check", "left_template": out, "operation": "equals", "right_template": ref},
        {"type": "string-check", "left_template": out, "operation": "!=", "right_template": ref},
    ]
    left, right = "{{ item.number_text }}", "{{ item.number_expected }}"
    for operation in ("equals", "not equals", ">=", "lt"):
        metrics.append({"type": "number-check", "left_template": left, "operation": operation, "right_template": right})
    metrics.append(
        {
            "type": "number-check",
            "left_template": left,
            "operation": "absolute difference",
            "right_template": right,
            "epsilon": 0.01,
        }
    )
    metrics.append({"type": "tool-calling", "reference": "{{ item.tool_calls | tojson }}"})
    return metrics


CHAT_TEMPLATE = {
    "messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "[[{{ item.id }}]] {{ item.question }}"},
    ]
}
JUDGE_TEMPLATE = {
    "messages": [
        {"role": "system", "content": "You grade answers. Reply with JSON only."},
        {
            "role": "user",
            "content": "<<{{ item.id }}>> Question: {{ item.question }}\nReference: {{ item.answer }}\n"
            "Answer: {{ sample.output_text }}",
        },
    ]
}


def online_metrics(base_url: str) -> list[dict[str, Any]]:
    judge_model = {"url": base_url, "name": "parity-judge", "format": "openai"}
    return [
        {"type": "exact-match", "reference": "{{ item.answer }}"},
        {"type": "f1", "reference": "{{ item.answer }}"},
        {
            "type": "llm-judge",
            "model": judge_model,
            "prompt_template": JUDGE_TEMPLATE,
            "scores": [
                {
                    "name": "quality",
                    "description": "overall answer quality",
                    "rubric": RUBRIC,
                    "parser": {"type": "json", "json_path": "quality"},
                },
                {
                    "name": "accuracy",
                    "description": "factual accuracy",
                    "minimum": 1,
                    "maximum": 5,
                    "parser": {"type": "json", "json_path": "accuracy"},
                },
            ],
        },
    ]


def expected_score_names(metrics: list[dict[str, Any]]) -> list[str]:
    """Score names both sides should report: ``<metric key>.<output>`` with ``_2``.. for repeats."""
    outputs = {
        "exact-match": ["exact-match"],
        "f1": ["f1"],
        "bleu": ["sentence", "corpus"],
        "rouge": ["rouge_1_score", "rouge_2_score", "rouge_3_score", "rouge_L_score"],
        "string-check": ["string-check"],
        "number-check": ["number-check"],
        "tool-calling": ["function_name_accuracy", "function_name_and_args_accuracy"],
    }
    seen: dict[str, int] = {}
    names = []
    for metric in metrics:
        kind = metric["type"]
        seen[kind] = seen.get(kind, 0) + 1
        key = kind if seen[kind] == 1 else f"{kind}_{seen[kind]}"
        outs = [s["name"] for s in metric["scores"]] if kind == "llm-judge" else outputs[kind]
        names += [f"{key}.{o}" for o in outs]
    return names


def reference_metric(metric: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: v for k, v in metric.items() if k != "type"}
    return {"class": REFERENCE_CLASSES[metric["type"]], "kwargs": kwargs}


@dataclass
class Case:
    """One case's rows and metrics (in our config's form), and how each side is configured to run them."""

    name: str
    rows: list[dict[str, Any]]
    metrics: list[dict[str, Any]]
    target: dict[str, Any] | None = None  # our config's target.model
    prompt_template: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def our_config(self, dataset: Path) -> dict[str, Any]:
        config: dict[str, Any] = {"dataset": {"path": str(dataset)}, "metrics": self.metrics}
        if self.target is not None:
            config["target"] = {"model": self.target}
        if self.prompt_template is not None:
            config["prompt_template"] = self.prompt_template
        if self.params:
            config["params"] = self.params
        return config

    def reference_spec(self, dataset: Path) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "dataset_jsonl": str(dataset),
            "metrics": [reference_metric(m) for m in self.metrics],
            "config": {"class": "RunConfig", "kwargs": {"parallelism": self.params.get("parallelism", 8)}},
            "target": None,
            "prompt_template": self.prompt_template,
        }
        if self.target is not None:
            spec["target"] = {"class": "Model", "kwargs": self.target}
            spec["config"] = {
                "class": "RunConfigOnlineModel",
                "kwargs": {
                    "parallelism": self.params.get("parallelism", 8),
                    "max_retries": self.params.get("max_retries", 3),
                    "request_timeout": int(self.params.get("request_timeout", 60)),
                },
            }
        return spec


def build_offline_case(n: int) -> Case:
    return Case("offline", offline_rows(n), offline_metrics())


def build_online_case(n: int, base_url: str) -> tuple[Case, list[dict[str, str]]]:
    rows, rules = online_rows(n)
    params = {"parallelism": 16, "max_retries": 3, "request_timeout": 60}
    target = {"url": base_url, "name": "parity-model", "format": "openai"}
    return Case("online", rows, online_metrics(base_url), target, CHAT_TEMPLATE, params), rules
