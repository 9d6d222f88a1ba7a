"""Comparison benchmark: ``python -m pipeline.compare`` over two generated runs of N rows each.

Two run directories are generated once into a cache (``rows/`` Parquet shards in the exact
schema ``transforms/write.py`` writes, 5,000-row row groups as the pipeline writes them, and a
minimal ``results.json``): an exact-match (0/1) and an F1-like (0, 0.5, 1) score, the
candidate about 1.5 points worse. The comparison runs as a subprocess on the default local
runner; the benchmark measures its wall time and the peak RSS of its whole process tree
(driver and workers, sampled from /proc every 50 ms), and checks the delta it reports
against numpy on the same arrays.

Usage::

    python bench/compare.py                         # 1,000,000 rows per side, keyed by row_index and by id
    python bench/compare.py --rows 200000 --keys id
    python bench/compare.py --smoke                 # 20,000 rows, for CI

Prints a markdown table and writes JSON to ``bench/results/compare-<time>.json`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.scale import TreeMemory  # noqa: E402  (needs the project root on sys.path)
from bench.sides import our_env  # noqa: E402

DEFAULT_ROWS = 1_000_000
SMOKE_ROWS = 20_000
ROWS_PER_FILE = 250_000
ROW_GROUP = 5_000
SCORES = ("exact-match.exact-match", "f1.f1")
MEMORY_LIMIT_MIB = 2048
TIME_LIMIT_S = 60.0


def _scores(n: int, seed: int, right: float) -> Any:
    """(exact-match, f1) per row: right, half right (f1 0.5) or wrong."""
    import numpy as np

    rng = np.random.default_rng(seed)
    roll = rng.random(n)
    em = (roll < right).astype(np.float64)
    f1 = np.where(roll < right, 1.0, np.where(roll < right + 0.1, 0.5, 0.0))
    return em, f1


def generate(cache: Path, n: int) -> tuple[Path, Path, dict[str, float]]:
    """The cached baseline and candidate run directories of ``n`` rows, and the true deltas (numpy)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from transforms.write import rows_schema

    base = _scores(n, 1, 0.80)
    # The candidate keeps most of the baseline's rows and flips about 3% of them, mostly for the worse.
    flip = np.random.default_rng(3).random(n)
    cand_em = np.where(flip < 0.02, 0.0, np.where(flip < 0.025, 1.0, base[0]))
    cand_f1 = np.where(flip < 0.02, 0.0, np.where(flip < 0.025, 1.0, base[1]))
    sides = {"baseline": base, "candidate": (cand_em, cand_f1)}
    truth = {name: float(np.mean(sides["candidate"][i] - sides["baseline"][i])) for i, name in enumerate(SCORES)}
    root = cache / f"compare-{n}"
    if not (root / "done").exists():
        schema = rows_schema(list(SCORES), [])
        for side, (em, f1) in sides.items():
            rows = root / side / "rows"
            rows.mkdir(parents=True, exist_ok=True)
            for start in range(0, n, ROWS_PER_FILE):
                stop = min(n, start + ROWS_PER_FILE)
                index = np.arange(start, stop)
                columns = {
                    "row_index": index,
                    "status": ["ok"] * (stop - start),
                    "item": [
                        f'{{"id": "q{i:07d}", "question": "What is {i} + 1?", "answer": "{i + 1}"}}' for i in index
                    ],
                    "output_text": ["right" if v == 1.0 else "wrong" for v in em[start:stop]],
                    SCORES[0]: em[start:stop],
                    SCORES[1]: f1[start:stop],
                }
                table = pa.table({f.name: _column(columns, f, stop - start) for f in schema}, schema=schema)
                pq.write_table(table, rows / f"rows-{start // ROWS_PER_FILE:05d}.parquet", row_group_size=ROW_GROUP)
            results = {
                "status": "completed",
                "counts": {"rows": n, "ok": n, "errors": 0},
                "aggregate_scores": {"scores": [{"name": name, "range": [0.0, 1.0]} for name in SCORES]},
                "provenance": {"eval_hash": "bench", "run_id": side},
            }
            (root / side / "results.json").write_text(json.dumps(results))
        (root / "done").write_text("")
    return root / "baseline", root / "candidate", truth


def _column(columns: dict[str, Any], field: Any, count: int) -> Any:
    """A generated column, or the schema's filler: null, or 0/False for non-nullable columns (sample_index)."""
    import pyarrow as pa

    if field.name in columns:
        return columns[field.name]
    if field.nullable:
        return pa.nulls(count, field.type)
    return pa.repeat(pa.scalar(0).cast(field.type), count)


def run_once(baseline: Path, candidate: Path, output: Path, key: str, truth: dict[str, float]) -> dict[str, Any]:
    """Run the comparison as a subprocess; return its measurements."""
    cmd = [sys.executable, "-m", "pipeline.compare", "--baseline", str(baseline), "--candidate", str(candidate)]
    cmd += ["--output", str(output), "--key", key]
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=PROJECT_ROOT, env=our_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with TreeMemory(proc.pid) as memory:
        _, stderr = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode not in (0, 1, 4):
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{stderr[-3000:]}")
    comparison = json.loads((output / "comparison.json").read_text())
    scores = {s["name"]: s for s in comparison["scores"]}
    return {
        "key": key,
        "rows": comparison["counts"]["paired"],
        "wall_s": round(wall, 2),
        "rows_per_s": round(comparison["counts"]["paired"] / wall, 1),
        "peak_rss_tree_mib": round(memory.peak_tree / 2**20, 1),
        "peak_rss_single_mib": round(memory.peak_single / 2**20, 1),
        "processes": memory.peak_processes,
        "verdict": comparison["verdict"],
        "exit_code": proc.returncode,
        "flips": comparison["flips"]["rows"],
        "deltas": {name: scores[name]["delta"] for name in SCORES},
        "delta_matches_numpy": all(abs(scores[name]["delta"] - truth[name]) < 1e-9 for name in SCORES),
    }


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| key | rows per side | wall s | rows/s | peak RSS tree MiB | processes | verdict | delta matches numpy |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['key']} | {r['rows']:,} | {r['wall_s']:.1f} | {r['rows_per_s']:,.0f} | "
            f"{r['peak_rss_tree_mib']:,.0f} | {r['processes']} | {r['verdict']} | {r['delta_matches_numpy']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=None, help=f"rows per side (default {DEFAULT_ROWS:,})")
    parser.add_argument("--keys", default="row_index,id", help="comma-separated --key values to measure")
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_ROWS:,} rows, for CI")
    parser.add_argument("--cache", type=Path, default=PROJECT_ROOT / "bench" / "results" / "data")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON report")
    args = parser.parse_args(argv)
    n = args.rows or (SMOKE_ROWS if args.smoke else DEFAULT_ROWS)
    baseline, candidate, truth = generate(args.cache, n)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as work:
        for key in filter(None, args.keys.split(",")):
            measured = run_once(baseline, candidate, Path(work) / f"cmp-{key}", key, truth)
            results.append(measured)
            print(
                f"--key {key:<10} {n:>9,} rows: {measured['wall_s']:.1f} s, {measured['peak_rss_tree_mib']:,.0f} MiB",
                file=sys.stderr,
            )
    report = {
        "rows": n,
        "targets": {"peak_rss_tree_mib": MEMORY_LIMIT_MIB, "wall_s": TIME_LIMIT_S},
        "results": results,
    }
    path = args.json or PROJECT_ROOT / "bench" / "results" / f"compare-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    print(markdown(results))
    within = all(r["peak_rss_tree_mib"] < MEMORY_LIMIT_MIB and r["delta_matches_numpy"] for r in results)
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
