"""Batch-mode benchmark: N requests through the test server's Batch API, with the peak memory of the run.

One ``python -m pipeline.run`` with the target in ``mode: batch`` (``max_requests`` 50,000,
the provider's limit) over the scale benchmark's QA dataset, against the project's test
server (batches complete at their first poll). It measures wall time, CPU seconds and
the peak resident memory of the evaluator's whole process tree (``bench.scale.TreeMemory``;
the test server is a separate process and not counted), and checks that every row was
answered once: the server's batch lines equal the rows, and no request was in two batches.

Batch mode spreads its requests over many keys (about one batch each), so no worker of a
distributed runner holds them all; on the local runner, which holds a GroupByKey's whole
input in memory, requests and answered rows travel in compressed packs. The target is
under 2 GiB at 10^6 requests (README, "Batch mode").

Usage::

    python bench/batch.py                  # 10^6 requests
    python bench/batch.py --rows 100000
    python bench/batch.py --smoke          # 2,000 requests in batches of 500, for CI
    python bench/batch.py --judge          # and an LLM judge in batch mode: 2 x 10^6 requests

Prints a markdown table and writes JSON to ``bench/results/batch-<time>.json`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from beameval.testserver.harness import ServerProcess  # noqa: E402  (needs the project root on sys.path)
from bench.scale import MEMORY_LIMIT_BYTES, dataset, online_config, run_once  # noqa: E402

#: OpenAI's limit of one batch; the smoke run uses smaller batches so it has several keys.
MAX_REQUESTS = 50_000


#: The judge's prompt and the test server's reply to it (a valid verdict, so every row is scored).
JUDGE_PROMPT = "JUDGE: {{ sample.output_text }} vs {{ item.answer }}"
JUDGE_REPLY = {"match": "JUDGE:", "reply": '{"quality": "good"}'}
RUBRIC = [{"label": "bad", "value": 0}, {"label": "good", "value": 1}]


def batch_config(path: Path, base_url: str, max_requests: int, judge: bool = False) -> dict[str, Any]:
    config = online_config(path, base_url, parallelism=4)
    batch = {"max_requests": max_requests, "poll_interval": 1.0}
    config["target"]["model"].update(mode="batch", batch=batch)
    if judge:
        model = {"url": base_url, "name": "bench-judge", "format": "openai", "mode": "batch", "batch": batch}
        config["metrics"].append(
            {
                "type": "llm-judge",
                "model": model,
                "prompt_template": {"messages": [{"role": "user", "content": JUDGE_PROMPT}]},
                "scores": [{"name": "quality", "rubric": RUBRIC}],
            }
        )
    return config


def measure(rows: int, max_requests: int, cache: Path, work: Path, judge: bool = False) -> dict[str, Any]:
    with ServerProcess() as server:
        server.batches(validating_s=0.0, completion_s=0.0, outcomes=[])
        if judge:
            server.configure(rules=[JUDGE_REPLY])
        config = batch_config(dataset(cache, rows), server.base_url, max_requests, judge)
        measured = run_once(config, work, f"batch-{rows}", ["--progress_interval=0"])
        state = server.batches()
        seen = [cid for batch in state["batches"] for cid in batch["custom_ids"]]
        measured.update(
            mode="batch" + (" + batch judge" if judge else ""),
            max_requests=max_requests,
            batches=state["batches_created"],
            lines_answered=state["lines_answered"],
            chat_requests=server.stats()["requests"],
            in_two_batches=len(seen) - len(set(seen)),
            under_2_gib=measured["peak_rss_tree_mib"] * 2**20 < MEMORY_LIMIT_BYTES,
        )
    return measured


def table(result: dict[str, Any]) -> str:
    return "\n".join(
        [
            "| mode | rows | batches | wall s | CPU s | peak RSS tree MiB | peak RSS 1 proc MiB | lines answered |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            f"| {result['mode']} | {result['rows']:,} | {result['batches']} | {result['wall_s']:.1f} | "
            f"{result['cpu_s']:.1f} | "
            f"{result['peak_rss_tree_mib']:,.0f} | {result['peak_rss_single_mib']:,.0f} | "
            f"{result['lines_answered']:,} |",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--smoke", action="store_true", help="2,000 requests in batches of 500")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "beam-llm-eval-bench")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--judge", action="store_true", help="add an LLM judge in batch mode (a request per row)")
    args = parser.parse_args()
    rows, max_requests = (2_000, 500) if args.smoke else (args.rows, MAX_REQUESTS)
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as work:
        result = measure(rows, max_requests, args.cache, Path(work), args.judge)
    print(table(result))
    path = args.json or PROJECT_ROOT / "bench" / "results" / f"batch-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    lines = result["rows"] * (2 if args.judge else 1)
    answered = result["ok"] == result["rows"] and result["lines_answered"] == lines
    return 0 if result["under_2_gib"] and answered and result["in_two_batches"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
