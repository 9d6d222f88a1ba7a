"""Run one evaluation through the NeMo evaluator SDK (the reference) and print its aggregates.

This script is executed by the *reference* SDK's own Python (``/work/refvenv/bin/python``
by default), never by the project's virtual environment, and it must not import anything
from this project. ``bench/parity.py`` writes a JSON spec, runs this script on it and
reads the JSON it writes.

Usage::

    REFERENCE_PYTHON bench/reference_runner.py --probe            # prints the SDK version, exit 0
    REFERENCE_PYTHON bench/reference_runner.py SPEC.json OUT.json

The spec names the SDK's own classes, so this script stays a thin, generic adapter::

    {
      "dataset_jsonl": "/tmp/x/data.jsonl",       # read here into a list of dicts, used as is
      # or "dataset": a path (loaded by the SDK with pyarrow) or a list of rows
      "metrics": [{"class": "ExactMatchMetric", "kwargs": {"reference": "{{ item.answer }}"}}],
      "config": {"class": "RunConfig", "kwargs": {"parallelism": 8}},
      "target": null,                             # or {"class": "Model", "kwargs": {...}}
      "prompt_template": null                     # or a str / dict request template
    }

The output JSON holds ``aggregate_scores`` (the SDK's score objects as plain dicts, NaN
written as the JSON token ``NaN``), ``row_status`` (ok/error counts), ``rows`` and
``row_values`` (with ``"dump_rows": true`` in the spec: ``{score name: {row index: value}}``) and
``elapsed_s``: the wall time of ``Evaluator().run_sync(...)`` alone, measured in this
process, so interpreter start-up and imports are excluded.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import Counter
from typing import Any


def _build(spec: dict[str, Any] | None, namespace: Any) -> Any:
    """Instantiate ``{"class": name, "kwargs": {...}}`` from the SDK namespace (pydantic does the nesting)."""
    if spec is None:
        return None
    cls = getattr(namespace, spec["class"])
    return cls(**spec.get("kwargs", {}))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("nemo-platform-plugin", "nemo-evaluator-sdk"):
        try:
            return f"{dist}=={version(dist)}"
        except PackageNotFoundError:
            continue
    return "unknown"


def main(argv: list[str]) -> int:
    try:
        import nemo_platform.beta.evaluator as sdk
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        print(f"cannot import nemo_platform.beta.evaluator: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    if argv[:1] == ["--probe"]:
        print(_version())
        return 0
    if len(argv) != 2:
        print("usage: reference_runner.py SPEC.json OUT.json | --probe", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.ERROR)
    with open(argv[0], encoding="utf-8") as handle:
        spec = json.load(handle)

    metrics = [_build(m, sdk) for m in spec["metrics"]]
    config = _build(spec.get("config") or {"class": "RunConfig"}, sdk)
    target = _build(spec.get("target"), sdk)
    if "dataset_jsonl" in spec:  # rows as plain dicts: no pyarrow key union or type coercion
        with open(spec["dataset_jsonl"], encoding="utf-8") as handle:
            dataset: Any = [json.loads(line) for line in handle if line.strip()]
    else:
        dataset = spec["dataset"]
    kwargs: dict[str, Any] = {"metrics": metrics, "dataset": dataset, "config": config}
    if target is not None:
        kwargs["target"] = target
    if spec.get("prompt_template") is not None:
        kwargs["prompt_template"] = spec["prompt_template"]

    evaluator = sdk.Evaluator()
    started = time.perf_counter()
    result = evaluator.run_sync(**kwargs)
    elapsed = time.perf_counter() - started

    scores = [score.model_dump() for score in result.aggregate_scores.scores]
    failed = [row for row in result.row_scores if row.metric_errors]
    statuses = Counter({"ok": len(result.row_scores) - len(failed), "error": len(failed)})
    errors = [{"row_index": row.row_index, "error": row.error} for row in failed[:20]]
    row_values: dict[str, dict[str, Any]] = {}
    if spec.get("dump_rows"):
        for position, row in enumerate(result.row_scores):
            index = row.row_index if row.row_index is not None else position
            for key, outputs in (row.metrics or {}).items():
                for output in outputs:
                    row_values.setdefault(f"{key}.{output.name}", {})[str(index)] = output.value
    out = {
        "sdk": _version(),
        "row_values": row_values,
        "rows": len(result.row_scores),
        "elapsed_s": elapsed,
        "row_status": dict(statuses),
        "first_errors": errors,
        "aggregate_scores": scores,
    }
    with open(argv[1], "w", encoding="utf-8") as handle:
        json.dump(out, handle, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
