"""The evaluator's inference engine without Beam, run as a child process of the inference benchmark.

Usage: ``python bench/engine_loop.py BASE_URL DATASET.jsonl`` prints
``{"rows", "ok", "matches", "elapsed_s"}`` as JSON, like ``bench/bare_loops.py`` (whose
model name and parallelism it uses). Each row's request is built by the target's handler
and handed to ``InferenceEngine.send`` from the main thread through ``PendingCalls``, with
at most twice ``parallelism`` pending, as ``GenerateSamples`` does.
What it leaves out is Beam (reading, the shuffle, scoring, writing) and the journal: the
gap between this and the bare aiohttp loop is the engine's own cost, the gap between this
and the pipeline is Beam's.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from typing import Any

from beameval.config import ModelTarget, Params, TargetConfig
from beameval.inference.engine import InferenceEngine, Outcome
from beameval.inference.targets import make_handler
from bench.bare_loops import MODEL, PARALLELISM, read_rows  # the project root is on PYTHONPATH (our_env)
from transforms.async_calls import PendingCalls


def engine_loop(base_url: str, rows: list[dict[str, str]]) -> dict[str, Any]:
    """Send every row's prompt through one engine; count successes and exact matches."""
    target = TargetConfig(model=ModelTarget(url=base_url, name=MODEL, format="openai"))
    handler = make_handler(target, Params(parallelism=PARALLELISM), None)
    engine = InferenceEngine(handler, PARALLELISM, 3, 60.0)
    pending: PendingCalls[dict[str, str]] = PendingCalls(2 * PARALLELISM)
    tally = {"ok": 0, "matches": 0}

    def finish(finished: Iterable[tuple[dict[str, str], Outcome]]) -> None:
        for row, outcome in finished:
            if outcome.sample is not None:
                tally["ok"] += 1
                tally["matches"] += outcome.sample["output_text"].strip() == row["answer"].strip()

    started = time.perf_counter()
    for row in rows:
        prepared = handler.prepare({"messages": [{"role": "user", "content": row["question"]}]})
        engine.send(prepared, handler, pending.add(row))
        finish(pending.drain(block=pending.full))
    finish(pending.drain(block=True, until_empty=True))
    elapsed = time.perf_counter() - started
    engine.close()
    return {"rows": len(rows), "elapsed_s": elapsed, **tally}


def main(base_url: str, dataset: str) -> int:
    print(json.dumps(engine_loop(base_url, read_rows(dataset))))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
