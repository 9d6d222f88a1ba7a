"""A multi-target run's ``results.json``: the leaderboard, built from each target's own results.json.

The numbers are copied from ``OUT_DIR/targets/NAME/results.json`` (the same CombineFns made
them as in a single-target run), so the leaderboard can never disagree with a target's run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LEADERBOARD_FIELDS", "build_leaderboard", "format_leaderboard"]

#: The statistics of each score the leaderboard shows.
LEADERBOARD_FIELDS = ("name", "mean", "ci_low", "ci_high", "count")


def build_leaderboard(
    per_target: dict[str, dict[str, Any]], config_dump: dict[str, Any], run_info: dict[str, Any]
) -> dict[str, Any]:
    """The top-level results document: the targets in config order, each one's scores (and groups), the config."""
    leaderboard = []
    for name, results in per_target.items():
        entry: dict[str, Any] = {
            "target": name,
            "status": results.get("status"),
            "counts": results.get("counts"),
            "scores": _scores(results.get("aggregate_scores", {}).get("scores", [])),
        }
        if "groups" in results:
            entry["groups"] = [
                {"by": group["by"], "value": group["value"], "scores": _scores(group["scores"])}
                for group in results["groups"]
            ]
        leaderboard.append(entry)
    return {
        "status": "completed",
        "targets": list(per_target),
        "leaderboard": leaderboard,
        "run": run_info,
        "config": config_dump,
    }


def _scores(scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{field: score.get(field) for field in LEADERBOARD_FIELDS} for score in scores]


def format_leaderboard(results: dict[str, Any], comparison: dict[str, Any] | None) -> str:
    """The terminal summary: one line per target and score (mean, interval, n), then each comparison's verdict."""
    names = [score["name"] for entry in results["leaderboard"] for score in entry["scores"]]
    targets = results["targets"]
    width = max([len("score"), *map(len, names)])
    target_width = max([len("target"), *map(len, targets)])
    lines = [
        f"{len(targets)} targets, wall time {results['run']['wall_time_s']:.1f} s",
        "",
        f"{'target':<{target_width}} {'score':<{width}} {'count':>7} {'mean':>9} {'95% interval':>21}",
        "-" * (target_width + width + 41),
    ]
    for entry in results["leaderboard"]:
        for score in entry["scores"]:
            low, high = score["ci_low"], score["ci_high"]
            interval = "-" if low is None or high is None else f"[{low:.4f}, {high:.4f}]"
            mean = "-" if score["mean"] is None else f"{score['mean']:.4f}"
            lines.append(
                f"{entry['target']:<{target_width}} {score['name']:<{width}} {score['count'] or 0:>7} "
                f"{mean:>9} {interval:>21}"
            )
    if comparison is not None:
        lines.append("")
        correction = comparison["correction"]
        lines.append(
            f"compared with {comparison['baseline_target']} ({correction['method']} across the "
            f"{correction['gated_scores']} gated scores of {correction['comparisons']} comparisons):"
        )
        lines += [f"  {c['target']}: {c['verdict']}" for c in comparison["comparisons"]]
    return "\n".join(lines)
