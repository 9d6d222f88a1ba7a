"""The judge's default prompt, written once per worker from its score definitions.

A chat request (a system message describing the scores, then a user message with what
to judge) unless the judge's URL contains ``/v1/completions``, in which case the two parts
are joined into one completions prompt. What is judged is the model's answer
(``sample.output_text``) in online runs and the whole dataset row, as JSON, in offline
runs (no target, so an empty sample).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from beameval.metrics.judge.scores import RangeScore, RubricScore, json_key

__all__ = ["DefaultPrompt", "instructions"]


def _describe(score: RangeScore | RubricScore) -> list[str]:
    if isinstance(score, RubricScore):
        head = f"- {score.name}: choose one of these labels"
        lines = [f"{head}. {score.description}" if score.description else f"{head}."]
        for level in score.rubric:
            detail = f": {level.description}" if level.description else ""
            lines.append(f'    - "{level.label}"{detail}')
        return lines
    kind = "a whole number" if score.is_integer else "a number"
    head = f"- {score.name}: {kind} from {score.minimum} to {score.maximum}"
    return [f"{head}. {score.description}" if score.description else f"{head}."]


def instructions(scores: Sequence[RangeScore | RubricScore]) -> str:
    """The system text: the judge's role, each score with its range or labels, and the answer format."""
    names = ", ".join(score.name for score in scores)
    lines = [f"You are an expert evaluator. Assess the text you are given and score it for: {names}."]
    if len(scores) > 1:
        lines += ["", "Scores:"]
    else:
        lines.append("")
    for score in scores:
        lines += _describe(score)
    keys = [key for key in (json_key(score) for score in scores) if key is not None]
    if keys:
        listed = ", ".join(f'"{key}"' for key in dict.fromkeys(keys))
        lines += [
            "",
            f"Answer with a single JSON object and nothing else, with these keys: {listed}. "
            "Give a rubric score as its label, exactly as written above.",
        ]
    return "\n".join(lines)


class DefaultPrompt:
    """Builds the default judge request for a row.

    Args:
        scores: the judge's score definitions.
        completions: build a completions prompt (a string) instead of chat messages.

    """

    __slots__ = ("completions", "system")

    def __init__(self, scores: Sequence[RangeScore | RubricScore], completions: bool) -> None:
        self.system = instructions(scores)
        self.completions = completions

    def render(self, item: Mapping[str, Any], sample: Mapping[str, Any]) -> dict[str, Any] | str:
        """The request for one row: ``{"messages": [...]}`` for chat, the prompt text for completions."""
        if sample:
            output = sample.get("output_text")
            subject = "Response to evaluate:\n\n" + (output if isinstance(output, str) else "")
        else:
            subject = "Data to evaluate:\n\n" + json.dumps(item, ensure_ascii=False, default=str)
        return self.render_subject(subject)

    def render_subject(self, subject: str) -> dict[str, Any] | str:
        """The request showing ``subject`` after the instructions (a pairwise judge's two answers)."""
        if self.completions:
            return f"{self.system}\n\n{subject}\n\nAnswer:"
        return {
            "messages": [
                {"role": "system", "content": self.system},
                {"role": "user", "content": subject},
            ]
        }
