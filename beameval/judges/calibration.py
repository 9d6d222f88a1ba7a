"""A judge's calibration: its config, the per-row counts it adds to the run, and what results.json reports.

Each row contributes, per judge score with K categories, a vector of ``K·K + K`` counts
summed over the run like a corpus metric's statistics: the confusion matrix of the
labelled rows (``human·K + judge``) then the judge's categories on the unlabelled rows.
Sums of counts merge exactly across workers, and they hold everything kappa, alpha, the
confusion matrix, the means and the prediction-powered mean need. A judge value that is
NaN (unparsed, failed call) or not one of the categories (3.5 on a 1-5 scale) counts
nowhere. Calibration therefore needs a finite, small category set: rubric scores, and
range scores whose bounds are whole numbers, at most ``MAX_CATEGORIES`` of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from beameval.judges.agreement import agreement
from beameval.judges.labels import Categories, read_labels
from beameval.judges.ppi import PPIMean, ppi_mean
from beameval.metrics.judge.scores import RangeScore, RubricScore

__all__ = ["MAX_CATEGORIES", "MIN_LABELLED", "Calibration", "CalibrationConfig", "categories_of", "judge_results"]

MAX_CATEGORIES = 32
MIN_LABELLED = 30  # fewer labelled rows than this never calibrate a judge, whatever its agreement


class CalibrationConfig(BaseModel):
    """``calibration:`` of an llm-judge.

    Attributes:
        labels: a local JSONL or CSV file of human labels.
        key: the field joining a label to a dataset row (the dataset's field of that name).
        min_agreement: the least value of ``statistic`` that calibrates the judge.
        statistic: ``kappa`` (quadratically weighted Cohen's kappa) or ``alpha`` (Krippendorff's).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    labels: str = Field(min_length=1)
    key: str = Field(default="id", min_length=1)
    min_agreement: Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False)] = 0.6
    statistic: Literal["kappa", "alpha"] = "kappa"


def categories_of(score: RangeScore | RubricScore) -> Categories:
    """A score's ordered categories.

    Raises:
        ValueError: a range score with fractional bounds, or more than ``MAX_CATEGORIES`` categories.
    """
    if isinstance(score, RubricScore):
        levels = sorted(score.rubric, key=lambda level: float(level.value))  # stable: ties keep their order
        found = Categories(score.name, tuple(float(x.value) for x in levels), tuple(x.label for x in levels))
    else:
        if score.minimum != round(score.minimum) or score.maximum != round(score.maximum):
            raise ValueError(
                f"score {score.name!r}: calibration needs whole-number bounds (a range score's human labels and "
                "judge values are compared as categories); use a rubric for other scales"
            )
        low, high = round(score.minimum), round(score.maximum)
        found = Categories(score.name, tuple(float(v) for v in range(low, high + 1)), None)
    if len(found.values) > MAX_CATEGORIES:
        raise ValueError(f"score {score.name!r}: calibration supports at most {MAX_CATEGORIES} levels")
    return found


class Calibration:
    """One judge's labels and the counting of its rows (built on the driver and on every worker).

    Args:
        config: the ``calibration:`` section.
        scores: the judge's scores, in output order.
    """

    def __init__(self, config: CalibrationConfig, scores: Sequence[RangeScore | RubricScore]) -> None:
        self.config = config
        self._categories = [categories_of(score) for score in scores]
        self._labels = read_labels(config.labels, config.key, self._categories)
        self._offsets = []
        offset = 0
        for categories in self._categories:
            self._offsets.append(offset)
            offset += len(categories.values) ** 2 + len(categories.values)
        self.size = offset

    def row_counts(self, item: Mapping[str, Any], judged: Mapping[str, tuple[float, str | None]]) -> list[float]:
        """This row's counts: ``judged`` maps each score to the judge's (value, rubric label or None)."""
        counts = [0.0] * self.size
        key = item.get(self.config.key)
        human = self._labels.get(str(key)) if key is not None else None
        for position, categories in enumerate(self._categories):
            judge = self._judge_index(categories, *judged[categories.name])
            if judge is None:
                continue
            size = len(categories.values)
            label = None if human is None else human[position]
            if label is None:
                counts[self._offsets[position] + size * size + judge] += 1.0
            else:
                counts[self._offsets[position] + label * size + judge] += 1.0
        return counts

    @staticmethod
    def _judge_index(categories: Categories, value: float, label: str | None) -> int | None:
        if math.isnan(value):
            return None
        if categories.labels is not None:
            return categories.labels.index(label) if label in categories.labels else None
        return categories.index_of_value(value)

    def results(self, key: str, totals: Sequence[float], level: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The ``judge_agreement`` records and the ``ppi`` of each score (by output name) from summed counts."""
        records = []
        ppis = {}
        for position, categories in enumerate(self._categories):
            size = len(categories.values)
            start = self._offsets[position]
            confusion = [list(totals[start + h * size : start + (h + 1) * size]) for h in range(size)]
            unlabelled = totals[start + size * size : start + size * size + size]
            records.append(self._record(f"{key}.{categories.name}", categories, confusion, level))
            ppis[f"{key}.{categories.name}"] = self._ppi(categories, confusion, unlabelled, level).as_dict()
        return records, ppis

    def _record(self, name: str, categories: Categories, confusion: list[list[float]], level: float) -> dict[str, Any]:
        found = agreement(
            confusion, categories.values, "ordinal" if categories.labels is not None else "interval", level
        )
        names = categories.labels or tuple(f"{value:g}" for value in categories.values)
        chosen = found.kappa if self.config.statistic == "kappa" else found.alpha
        return {
            "score": name,
            "n": found.n,
            "kappa": _finite(found.kappa),
            "kappa_ci_low": _finite(found.kappa_ci_low),
            "kappa_ci_high": _finite(found.kappa_ci_high),
            "alpha": _finite(found.alpha),
            "accuracy": _finite(found.accuracy),
            "confusion": {
                names[h]: {names[j]: round(confusion[h][j]) for j in range(len(names))} for h in range(len(names))
            },
            "mean_human": _finite(found.mean_human),
            "mean_judge": _finite(found.mean_judge),
            "bias": _finite(found.bias),
            "statistic": self.config.statistic,
            "min_agreement": self.config.min_agreement,
            "calibrated": found.n >= MIN_LABELLED and not math.isnan(chosen) and chosen >= self.config.min_agreement,
        }

    @staticmethod
    def _ppi(
        categories: Categories, confusion: list[list[float]], unlabelled: Sequence[float], level: float
    ) -> PPIMean:
        values = categories.values
        size = len(values)
        return ppi_mean(
            [(values[h], values[j], confusion[h][j]) for h in range(size) for j in range(size)],
            [(values[j], unlabelled[j]) for j in range(size)],
            level,
        )


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def judge_results(
    metrics: Sequence[tuple[str, Any]], corpus: Mapping[str, Sequence[float]], level: float
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every calibrated judge's ``judge_agreement`` records and ``ppi`` by score name, from a summary's sums.

    Args:
        metrics: the run's ``(key, metric)`` pairs; those with a ``calibration`` count.
        corpus: the summary's summed corpus statistics by metric key (none when no row was scored).
        level: the confidence level of the intervals.
    """
    records: list[dict[str, Any]] = []
    ppis: dict[str, dict[str, Any]] = {}
    for key, metric in metrics:
        calibration = getattr(metric, "calibration", None)
        if isinstance(calibration, Calibration):
            found, by_name = calibration.results(key, corpus.get(key) or [0.0] * calibration.size, level)
            records.extend(found)
            ppis.update(by_name)
    return records, ppis
