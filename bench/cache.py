"""Response-store benchmark: a fully cached rerun against an offline run of the same rows, and kill -9 + --resume.

1. ``--sizes``: for each size, a Parquet QA dataset with model outputs (``bench/scale.py``'s)
   is scored offline (no target, the outputs read from the rows), then a store is filled
   with one chat-completion response per row, keyed exactly as the pipeline keys the
   rows' requests, and the same rows are run online against an endpoint that does not
   exist (``127.0.0.1:9``) with ``--cache``: every request must be answered from the
   store (a miss would fail its row). Both are whole ``python -m pipeline.run`` commands;
   the table gives wall time, the ratio (target <= 2) and the peak RSS of the process tree
   (target < 2 GiB), and checks both runs give the same exact-match mean. ``--repeat K``
   runs the pair K times, interleaved, and reports the median walls and the largest RSS.
2. ``--kill N``: N rows against the project's test server at ``--latency-ms``; the run's
   process group is killed (SIGKILL) when about half are answered, then ``--resume`` runs;
   reports answered before the kill, recorded in the journal, sent by the resume, and the
   bound (unanswered + in flight + one second's worth).

Usage::

    python bench/cache.py --sizes 100000,1000000 --kill 3000 --latency-ms 200
    python bench/cache.py --sizes 100000 --repeat 3   # interleaved pairs on a shared machine
    python bench/cache.py --smoke                 # tiny sizes, for CI

Prints a markdown table and writes JSON to ``bench/results/cache-<time>.json`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.scale import dataset, offline_config, run_once  # noqa: E402  (needs the project root on sys.path)
from bench.sides import our_env  # noqa: E402

UNREACHABLE = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, so any miss fails its row
SHARD_LINES = 100_000


def cached_config(path: Path, url: str = UNREACHABLE, parallelism: int = 64) -> dict[str, Any]:
    return {
        "dataset": {"path": str(path)},
        "target": {"model": {"url": url, "name": "bench-model", "format": "openai"}},
        # The id makes every prompt unique: rows asking the same question would share one stored answer.
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.id }}: {{ item.question }}"}]},
        "params": {"parallelism": parallelism, "max_retries": 0, "request_timeout": 30, "ignore_request_failure": True},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }


def fill_store(path: Path, store: Path, config: dict[str, Any]) -> int:
    """One stored response per row (the row's ``output`` as the answer), keyed as KeyRequests keys them."""
    import pyarrow.parquet as pq

    from beameval.cache.entry import encode_entry
    from beameval.cache.key import prepared_key
    from beameval.config.schema import parse_config
    from beameval.core.prompt import render_prompt
    from beameval.core.records import InputRow
    from beameval.core.templates import Template
    from beameval.inference.targets import make_handler
    from transforms.cache import target_request

    parsed = parse_config(config)
    assert parsed.target is not None and parsed.prompt_template is not None
    handler = make_handler(parsed.target, parsed.params, None)
    prompt = Template(parsed.prompt_template, "prompt_template")
    entries = store / "entries"
    entries.mkdir(parents=True, exist_ok=True)
    table = pq.read_table(path, columns=["id", "question", "answer", "output"])
    now = time.time()
    written, shard, lines = 0, 0, []
    for index, row in enumerate(table.to_pylist()):
        key = prepared_key(target_request(handler, render_prompt(prompt, InputRow(index, row))))
        reply = {
            "id": f"bench-{index}",
            "object": "chat.completion",
            "model": "bench-model",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": row["output"]}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10},
        }
        lines.append(encode_entry(key, reply, "bench-model", now))
        if len(lines) >= SHARD_LINES:
            (entries / f"bench-{shard:05d}.jsonl").write_bytes(b"".join(lines))
            written, shard, lines = written + len(lines), shard + 1, []
    if lines:
        (entries / f"bench-{shard:05d}.jsonl").write_bytes(b"".join(lines))
        written += len(lines)
    return written


def run_cached_vs_offline(n: int, data: Path, work: Path, repeat: int = 1) -> dict[str, Any]:
    """Fill a store for ``n`` rows, then run offline and cached back to back ``repeat`` times (medians, max RSS).

    Interleaving the two puts both under the same background load, so the ratio holds
    on a shared machine even when the absolute times drift.
    """
    path = dataset(data, n)
    store = work / f"store-{n}"
    config = cached_config(path)
    started = time.perf_counter()
    filled = fill_store(path, store, config)
    fill_s = time.perf_counter() - started
    offline_runs, cached_runs = [], []
    for _ in range(repeat):
        offline = run_once(offline_config(path), work, f"offline-{n}", ["--progress_interval=0"])
        extra = ["--progress_interval=0", "--skip_preflight", f"--cache={store}"]
        cached = run_once(config, work, f"cached-{n}", extra)
        if cached["ok"] != n or abs(cached["exact_match_mean"] - offline["exact_match_mean"]) > 1e-12:
            raise RuntimeError(f"the cached run did not answer every row from the store: {cached}")
        offline_runs.append(offline)
        cached_runs.append(cached)
    offline_wall = statistics.median(r["wall_s"] for r in offline_runs)
    cached_wall = statistics.median(r["wall_s"] for r in cached_runs)
    result = {
        "size": n,
        "store_entries": filled,
        "fill_s": round(fill_s, 1),
        "repeat": repeat,
        "offline_walls_s": [r["wall_s"] for r in offline_runs],
        "cached_walls_s": [r["wall_s"] for r in cached_runs],
        "offline_wall_s": offline_wall,
        "cached_wall_s": cached_wall,
        "ratio": round(cached_wall / offline_wall, 2),
        "offline_peak_rss_tree_mib": max(r["peak_rss_tree_mib"] for r in offline_runs),
        "cached_peak_rss_tree_mib": max(r["peak_rss_tree_mib"] for r in cached_runs),
        "exact_match_mean": cached_runs[-1]["exact_match_mean"],
    }
    print(f"{n:>9,} rows: {result}", file=sys.stderr)
    return result


def run_kill(n: int, latency_ms: float, parallelism: int, work: Path) -> dict[str, Any]:
    """Kill -9 a run at about half, resume it, count what each part sent."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from beameval.cache.entry import line_key
    from beameval.testserver.harness import ServerProcess

    path = work / f"kill-{n}.parquet"
    columns = {"id": [f"k{i}" for i in range(n)], "question": ["kill question"] * n, "answer": ["x"] * n}
    pq.write_table(pa.table(columns), path)
    output = work / "out-kill"
    with ServerProcess(latency_ms=latency_ms) as server:
        config_path = work / "kill.yaml"
        config_path.write_text(yaml.safe_dump(cached_config(path, server.base_url, parallelism)))
        base = [sys.executable, "-m", "pipeline.run", "--config", str(config_path), "--output", str(output)]
        base.append("--progress_interval=0")
        proc = subprocess.Popen(
            base,
            cwd=PROJECT_ROOT,
            env=our_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        while server.stats()["by_status"].get("200", 0) < n // 2:
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended before it was killed: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)
        at_kill = server.stats()
        proc.wait()
        recorded = {
            key
            for shard in (output / "_responses").glob("*.jsonl")
            for key in map(line_key, shard.read_bytes().splitlines())
            if key is not None
        }
        server.reset()
        done = subprocess.run([*base, "--resume"], cwd=PROJECT_ROOT, env=our_env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"--resume failed: {done.stderr[-3000:]}")
        sent = server.stats()["requests"]
    answered = at_kill["by_status"]["200"]
    rate = parallelism / (latency_ms / 1000.0)
    result = {
        "rows": n,
        "latency_ms": latency_ms,
        "parallelism": parallelism,
        "answered_before_kill": answered,
        "in_flight_at_kill": at_kill["in_flight"],
        "recorded_in_journal": len(recorded),
        "lost_by_the_kill": answered - len(recorded),
        "sent_by_resume": sent,
        "bound": int(n - answered + parallelism + rate),
        "resumed_ok": json.loads((output / "results.json").read_text())["counts"]["ok"],
    }
    print(f"kill -9: {result}", file=sys.stderr)
    return result


def markdown(sizes: list[dict[str, Any]], kill: dict[str, Any] | None) -> str:
    lines = [
        "| rows | offline wall | cached rerun wall | ratio | offline peak RSS | cached peak RSS |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sizes:
        lines.append(
            f"| {r['size']:,} | {r['offline_wall_s']:.1f} s | {r['cached_wall_s']:.1f} s | {r['ratio']:.2f} "
            f"| {r['offline_peak_rss_tree_mib']:,.0f} MiB | {r['cached_peak_rss_tree_mib']:,.0f} MiB |"
        )
    if kill:
        lines += [
            "",
            "| kill -9 at half | answered before | recorded | lost | sent by --resume | bound |",
            "|---|---:|---:|---:|---:|---:|",
            f"| {kill['rows']:,} rows, {kill['latency_ms']:g} ms, parallelism {kill['parallelism']} "
            f"| {kill['answered_before_kill']:,} | {kill['recorded_in_journal']:,} | {kill['lost_by_the_kill']:,} "
            f"| {kill['sent_by_resume']:,} | {kill['bound']:,} |",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000", help="comma-separated row counts ('' for none)")
    parser.add_argument("--repeat", type=int, default=1, help="offline + cached pairs per size (medians reported)")
    parser.add_argument("--kill", type=int, default=0, help="rows of the kill -9 scenario (0: skip it)")
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--parallelism", type=int, default=64)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and a short kill scenario, for CI")
    parser.add_argument("--cache", default=str(PROJECT_ROOT / "bench" / "results" / "data"), help="dataset cache")
    parser.add_argument("--json", help="where to write the JSON report")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.kill, args.latency_ms, args.parallelism = "1000", 120, 20.0, 4
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as scratch:
        work = Path(scratch)
        results = [run_cached_vs_offline(n, Path(args.cache), work, args.repeat) for n in sizes]
        kill = run_kill(args.kill, args.latency_ms, args.parallelism, work) if args.kill else None
    report = {"sizes": results, "kill": kill}
    json_path = Path(args.json) if args.json else PROJECT_ROOT / "bench" / "results" / f"cache-{int(time.time())}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2))
    print(markdown(results, kill))
    return 0


if __name__ == "__main__":
    sys.exit(main())
