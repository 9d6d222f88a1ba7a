"""Scale benchmark: offline exact-match over generated Parquet datasets of growing size.

Each size runs ``python -m pipeline.run`` as a subprocess on the default local runner and
measures wall time, rows/s and the peak resident memory of the whole process tree (the
sum of RSS over the driver and every worker it starts, sampled from /proc every 50 ms).
Datasets are generated once into a cache directory and reused.

Usage::

    python bench/scale.py                          # 10^4, 10^5, 10^6 rows
    python bench/scale.py --sizes 10000,100000
    python bench/scale.py --smoke                  # tiny sizes, for CI (< 30 s)
    python bench/scale.py --sizes '' --statistics 1000000  # group_by + cluster_by vs none, same data
    python bench/scale.py --online --sizes 20000   # also: rows/s against the local test server
                                                   # with 1 and 2 worker processes
    python bench/scale.py --sizes 100000,1000000 --baseline e91635f --repeat 3 --reference-rows 100000
        # each size also on an earlier release (git ref, run from a `git archive` copy) interleaved with
        # ours, 3 times each: best and median of both and their ratios; plus the reference SDK's offline
        # rate on 10^5 rows (REFERENCE_PYTHON), in the same run

Every measurement also records the CPU seconds (user + system) of the whole process tree,
which a shared machine's load inflates less than the wall time.

Prints a markdown table and writes JSON to ``bench/results/scale-<time>.json`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.cpu_sampler import children_cpu  # noqa: E402  (needs the project root on sys.path)
from bench.proctree import PeriodicSampler, descendants  # noqa: E402
from bench.sides import our_env, probe_reference, reference_python  # noqa: E402

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
SMOKE_SIZES = (200, 2_000)
ROW_GROUP_SIZE = 50_000
MEMORY_LIMIT_BYTES = 2 * 1024**3

_CAPITALS = [
    ("France", "Paris"),
    ("Japan", "Tokyo"),
    ("Kenya", "Nairobi"),
    ("Peru", "Lima"),
    ("Canada", "Ottawa"),
    ("Norway", "Oslo"),
    ("Egypt", "Cairo"),
    ("Chile", "Santiago"),
    ("India", "New Delhi"),
    ("Spain", "Madrid"),
    ("Ghana", "Accra"),
    ("Vietnam", "Hanoi"),
]
_WRONG = ["London", "Berlin", "I don't know", "Rome", "Sydney", "paris, France"]


def qa_rows(n: int, seed: int = 7) -> dict[str, list[Any]]:
    """``n`` short QA rows with model outputs, about 70% of them exactly right (columnar)."""
    rng = random.Random(seed)
    columns: dict[str, list[Any]] = {"id": [], "category": [], "question": [], "answer": [], "output": []}
    for i in range(n):
        country, capital = _CAPITALS[rng.randrange(len(_CAPITALS))]
        roll = rng.random()
        output = capital if roll < 0.7 else (capital.lower() if roll < 0.8 else rng.choice(_WRONG))
        columns["id"].append(f"q{i:07d}")
        columns["category"].append("geography")
        columns["question"].append(f"What is the capital of {country}? (variant {i % 97})")
        columns["answer"].append(capital)
        columns["output"].append(output)
    return columns


def dataset(cache: Path, n: int) -> Path:
    """The cached Parquet dataset of ``n`` rows, generated on first use."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = cache / f"qa-{n}.parquet"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        pq.write_table(pa.table(qa_rows(n)), partial, row_group_size=ROW_GROUP_SIZE)
        partial.rename(path)
    return path


def offline_config(path: Path, statistics: dict[str, Any] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "dataset": {"path": str(path)},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}],
    }
    if statistics:
        config["statistics"] = statistics
    return config


#: The statistics case: group_by a 1,000-value field and cluster_by a 100,000-value field.
STATISTICS = {"group_by": ["topic"], "cluster_by": "passage"}


def statistics_dataset(cache: Path, n: int) -> Path:
    """``dataset(n)`` plus ``topic`` (1,000 values) and ``passage`` (100,000 values, 10 rows each at 10^6)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = cache / f"qa-grouped-{n}.parquet"
    if not path.exists():
        columns = qa_rows(n)
        rng = random.Random(11)
        columns["topic"] = [f"t{rng.randrange(1000):03d}" for _ in range(n)]
        columns["passage"] = [f"p{i * 100_000 // max(n, 1):05d}" for i in range(n)]
        cache.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        pq.write_table(pa.table(columns), partial, row_group_size=ROW_GROUP_SIZE)
        partial.rename(path)
    return path


def run_statistics(n: int, cache: Path, work: Path, progress: str, repeat: int = 1) -> list[dict[str, Any]]:
    """The same grouped dataset without and with group_by + cluster_by: peak RSS and the wall-time ratio.

    With ``repeat`` > 1 the two runs alternate ``repeat`` times and the ratio is of the best
    run of each (the median of the pairs' ratios is printed too): on a shared machine one
    pair's ratio moves by ±20% with the neighbours' load.
    """
    path = statistics_dataset(cache, n)
    cases = (("offline, no statistics", None), ("offline, group_by + cluster_by", STATISTICS))
    runs: list[list[dict[str, Any]]] = [[], []]
    for attempt in range(repeat):
        for index, (label, statistics) in enumerate(cases):
            extra = [f"--progress_interval={progress}"]
            measured = run_once(offline_config(path, statistics), work, f"statistics-{index}", extra)
            measured.update(mode=label, size=n, workers=1)
            runs[index].append(measured)
            print(
                f"{label:<32} {n:>9,} rows [{attempt + 1}/{repeat}]: {measured['wall_s']:.1f} s, "
                f"{measured['peak_rss_tree_mib']:,.0f} MiB",
                file=sys.stderr,
            )
            shutil.rmtree(work / f"out-statistics-{index}", ignore_errors=True)
    results = [min(side, key=lambda measured: measured["wall_s"]) for side in runs]
    ratio = results[1]["wall_s"] / results[0]["wall_s"]
    pair_ratios = [stats["wall_s"] / base["wall_s"] for base, stats in zip(runs[0], runs[1], strict=True)]
    results[1].update(wall_ratio=round(ratio, 2), wall_ratio_median_of_pairs=round(median(pair_ratios), 2))
    print(
        f"group_by + cluster_by wall-time ratio, best runs: {ratio:.2f} (target <= 2); "
        f"median of the {repeat} pairs: {median(pair_ratios):.2f}",
        file=sys.stderr,
    )
    return results


def online_config(path: Path, base_url: str, parallelism: int) -> dict[str, Any]:
    return {
        "dataset": {"path": str(path)},
        "target": {"model": {"url": base_url, "name": "bench-model", "format": "openai"}},
        "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
        "params": {"parallelism": parallelism, "request_timeout": 30, "max_retries": 3},
        "metrics": [{"type": "exact-match", "reference": "{{ item.answer }}"}],
    }


class TreeMemory(PeriodicSampler):
    """Samples the summed RSS of a process and all its descendants until stopped."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(interval)
        self.pid = pid
        self.peak_tree = 0
        self.peak_single = 0
        self.peak_processes = 0
        self._page = os.sysconf("SC_PAGE_SIZE")

    def sample(self) -> None:
        sizes = [_rss_pages(pid) * self._page for pid in descendants(self.pid)]
        if sizes:
            self.peak_tree = max(self.peak_tree, sum(sizes))
            self.peak_single = max(self.peak_single, max(sizes))
            self.peak_processes = max(self.peak_processes, len(sizes))


def _rss_pages(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def run_once(
    config: dict[str, Any], work: Path, name: str, extra: list[str], root: Path = PROJECT_ROOT
) -> dict[str, Any]:
    """Run the evaluator (this checkout, or the release copied to ``root``) as a subprocess; its measurements."""
    import yaml

    config_path = work / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    output = work / f"out-{name}"
    cmd = [sys.executable, "-m", "pipeline.run", "--config", str(config_path), "--output", str(output)]
    cmd += ["--overwrite", *extra]
    env = our_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    cpu_before, _ = children_cpu()
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with TreeMemory(proc.pid) as memory:
        stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    cpu = children_cpu()[0] - cpu_before
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{stderr[-3000:]}")
    results = json.loads((output / "results.json").read_text())
    rows = results["counts"]["rows"]
    return {
        "rows": rows,
        "ok": results["counts"]["ok"],
        "errors": results["counts"]["errors"],
        "wall_s": round(wall, 3),
        "rows_per_s": round(rows / wall, 1),
        "cpu_s": round(cpu, 3),
        "pipeline_wall_s": results.get("run", {}).get("wall_time_s"),
        "peak_rss_tree_mib": round(memory.peak_tree / 2**20, 1),
        "peak_rss_single_mib": round(memory.peak_single / 2**20, 1),
        "processes": memory.peak_processes,
        "exact_match_mean": next(
            s["mean"] for s in results["aggregate_scores"]["scores"] if s["name"] == "exact-match.exact-match"
        ),
        "progress_lines": sum(1 for line in stderr.splitlines() if line.startswith("progress:")),
    }


def run_online(sizes: list[int], cache: Path, work: Path, parallelism: int, progress: str) -> list[dict[str, Any]]:
    """Rows/s against the local test server with 1 and 2 local worker processes."""
    from beameval.testserver.harness import ServerProcess

    results = []
    with ServerProcess(latency_ms=50) as server:
        for n in sizes:
            path = dataset(cache, n)
            for workers in (1, 2):
                extra = [f"--progress_interval={progress}"]
                if workers > 1:
                    extra += ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
                measured = run_once(
                    online_config(path, server.base_url, parallelism), work, f"online-{n}-{workers}", extra
                )
                measured.update(mode="online", size=n, workers=workers, parallelism=parallelism, server_latency_ms=50)
                results.append(measured)
                print(
                    f"online {n:>9,} rows, {workers} worker(s): {measured['rows_per_s']:,.0f} rows/s", file=sys.stderr
                )
    return results


def run_runners(n: int, cache: Path, work: Path) -> list[dict[str, Any]]:
    """The same offline config on the default runner, 2 local processes and the PortableRunner."""
    from beameval.testserver.harness import free_port

    port = free_port()
    service = subprocess.Popen(
        [sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    variants = {
        "FnApiRunner": [],
        "multi_processing x2": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
        "PortableRunner (LOOPBACK)": [
            "--runner=PortableRunner",
            f"--job_endpoint=localhost:{port}",
            "--environment_type=LOOPBACK",
        ],
    }
    results = []
    try:
        time.sleep(3)  # the job service takes a moment to listen
        for label, extra in variants.items():
            measured = run_once(offline_config(dataset(cache, n)), work, f"runner-{len(results)}", extra)
            measured.update(mode=f"offline, {label}", size=n, workers=2 if "x2" in label else 1)
            results.append(measured)
            print(f"{label:<28} {n:>9,} rows: {measured['rows_per_s']:,.0f} rows/s", file=sys.stderr)
    finally:
        service.terminate()
        service.wait(timeout=30)
    means = {r["exact_match_mean"] for r in results}
    if len(means) != 1:
        raise RuntimeError(f"the runners disagree on exact-match: {means}")
    return results


def release_copy(ref: str, cache: Path) -> Path:
    """An earlier release's tree (``git archive REF``), extracted once into the cache and reused."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    if commit.returncode != 0:
        raise SystemExit(f"--baseline {ref!r} is not a commit of this repository: {commit.stderr.strip()}")
    target = cache / f"release-{commit.stdout.strip()[:12]}"
    if not target.exists():
        partial = target.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", commit.stdout.strip()], cwd=PROJECT_ROOT, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(partial)], input=archive.stdout, check=True)
        partial.rename(target)
    return target


def spread(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Best and median rows/s (and CPU seconds) of repeated runs of one side."""
    rates = [r["rows_per_s"] for r in samples]
    cpus = [r["cpu_s"] for r in samples]
    return {
        "best_rows_per_s": max(rates),
        "median_rows_per_s": round(median(rates), 1),
        "best_cpu_s": min(cpus),
        "median_cpu_s": round(median(cpus), 3),
        "rows_per_s": rates,
        "cpu_s": cpus,
    }


def run_against_baseline(
    n: int, cache: Path, work: Path, root: Path, label: str, repeat: int, progress: str
) -> dict[str, Any]:
    """``n`` rows on this checkout and on the release at ``root``, interleaved ``repeat`` times; best, median, ratio."""
    path = dataset(cache, n)
    sides: dict[str, list[dict[str, Any]]] = {"ours": [], label: []}
    for attempt in range(repeat):
        for side, tree in (("ours", PROJECT_ROOT), (label, root)):
            measured = run_once(
                offline_config(path), work, f"vs-{n}-{attempt}", [f"--progress_interval={progress}"], tree
            )
            shutil.rmtree(work / f"out-vs-{n}-{attempt}", ignore_errors=True)
            if measured["rows"] != n:
                raise RuntimeError(f"{side}: expected {n} rows in results.json, got {measured['rows']}")
            sides[side].append(measured)
            print(
                f"{side:<10} {n:>9,} rows [{attempt + 1}/{repeat}]: {measured['rows_per_s']:,.0f} rows/s, "
                f"{measured['cpu_s']:.1f} CPU s, peak RSS {measured['peak_rss_tree_mib']:,.0f} MiB",
                file=sys.stderr,
            )
    ours, base = spread(sides["ours"]), spread(sides[label])
    return {
        "size": n,
        "baseline": label,
        "ours": {**ours, "peak_rss_tree_mib": max(r["peak_rss_tree_mib"] for r in sides["ours"])},
        label: {**base, "peak_rss_tree_mib": max(r["peak_rss_tree_mib"] for r in sides[label])},
        "ratio_best": round(ours["best_rows_per_s"] / base["best_rows_per_s"], 3),
        "ratio_median": round(ours["median_rows_per_s"] / base["median_rows_per_s"], 3),
        "cpu_ratio_best": round(base["best_cpu_s"] / ours["best_cpu_s"], 3),
    }


def run_reference_offline(n: int, cache: Path, work: Path, python: str, repeat: int) -> dict[str, Any] | None:
    """The reference SDK's offline exact-match over the same ``n`` rows (as JSONL), timed around ``run_sync``."""
    import pyarrow.parquet as pq

    from bench.parity_cases import Case
    from bench.parity_sides import run_reference

    version = probe_reference(python)
    if version is None:
        print(f"reference SDK not importable by {python}; skipped", file=sys.stderr)
        return None
    jsonl = work / f"reference-{n}.jsonl"
    with jsonl.open("w", encoding="utf-8") as handle:
        for row in pq.read_table(dataset(cache, n)).to_pylist():
            handle.write(json.dumps(row) + "\n")
    metric = offline_config(jsonl)["metrics"][0]
    spec = Case("scale-reference", [], [metric]).reference_spec(jsonl)
    rates = []
    for attempt in range(repeat):
        result = run_reference(python, spec, work, f"reference-{n}")
        if result["row_status"].get("ok") != n:
            raise RuntimeError(f"the reference reported {result['row_status']}, expected {n} ok rows")
        rates.append(round(n / result["elapsed_s"], 1))
        print(f"reference  {n:>9,} rows [{attempt + 1}/{repeat}]: {rates[-1]:,.0f} rows/s (run_sync)", file=sys.stderr)
    return {"size": n, "version": version, "best_rows_per_s": max(rates), "median_rows_per_s": median(rates)}


def baseline_markdown(comparisons: list[dict[str, Any]], reference: dict[str, Any] | None) -> str:
    lines = [
        "| rows | ours best / median rows/s | baseline | baseline best / median rows/s | ratio best | ratio median "
        "| CPU s best, ours / baseline | peak RSS ours MiB |",
        "|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for c in comparisons:
        ours, base = c["ours"], c[c["baseline"]]
        lines.append(
            f"| {c['size']:,} | {ours['best_rows_per_s']:,.0f} / {ours['median_rows_per_s']:,.0f} | {c['baseline']} | "
            f"{base['best_rows_per_s']:,.0f} / {base['median_rows_per_s']:,.0f} | {c['ratio_best']:.2f} | "
            f"{c['ratio_median']:.2f} | {ours['best_cpu_s']:.1f} / {base['best_cpu_s']:.1f} | "
            f"{ours['peak_rss_tree_mib']:,.0f} |"
        )
    if reference is not None:
        ours_at = next((c["ours"] for c in comparisons if c["size"] == reference["size"]), None)
        ratio = (
            ""
            if ours_at is None
            else f"; ours (whole command) / reference: {ours_at['best_rows_per_s'] / reference['best_rows_per_s']:.1f}x"
        )
        lines.append(
            f"\nreference SDK ({reference['version']}), {reference['size']:,} rows: best "
            f"{reference['best_rows_per_s']:,.0f} rows/s, median {reference['median_rows_per_s']:,.0f} "
            f"(run_sync){ratio}"
        )
    return "\n".join(lines)


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| mode | workers | rows | wall s | rows/s | peak RSS tree MiB | peak RSS 1 proc MiB | processes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['mode']} | {r['workers']} | {r['rows']:,} | {r['wall_s']:.1f} | {r['rows_per_s']:,.0f} | "
            f"{r['peak_rss_tree_mib']:,.0f} | {r['peak_rss_single_mib']:,.0f} | {r['processes']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="comma-separated row counts")
    parser.add_argument("--smoke", action="store_true", help=f"tiny sizes {SMOKE_SIZES} for CI")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "beam-llm-eval-bench")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON results")
    parser.add_argument("--online", action="store_true", help="also measure online rows/s (1 and 2 workers)")
    parser.add_argument("--online-sizes", default="20000", help="row counts for --online")
    parser.add_argument("--parallelism", type=int, default=64, help="params.parallelism for --online")
    parser.add_argument("--progress-interval", default="10", help="--progress_interval of the runs (0: none)")
    parser.add_argument(
        "--statistics",
        type=int,
        default=0,
        metavar="ROWS",
        help="also run ROWS rows with and without group_by (1,000 values) + cluster_by (100,000 values)",
    )
    parser.add_argument(
        "--runners",
        type=int,
        default=0,
        metavar="ROWS",
        help="also run ROWS rows on FnApiRunner, 2 local processes and the PortableRunner",
    )
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="REF",
        help="also run each size on this git ref (an earlier release), interleaved with ours --repeat times",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each side with --baseline or --statistics (best and median)"
    )
    parser.add_argument(
        "--reference-rows",
        type=int,
        default=0,
        metavar="ROWS",
        help="also time the reference SDK's offline path on ROWS rows (--reference-python or REFERENCE_PYTHON)",
    )
    parser.add_argument("--reference-python", default=None, help="the Python of a venv holding the reference SDK")
    args = parser.parse_args(argv)
    sizes = list(SMOKE_SIZES) if args.smoke else [int(s) for s in args.sizes.split(",") if s.strip()]

    results: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    reference = None
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        work = Path(tmp)
        if args.baseline:
            root = release_copy(args.baseline, args.cache)
            for n in sizes:
                comparisons.append(
                    run_against_baseline(
                        n, args.cache, work, root, args.baseline, max(args.repeat, 1), args.progress_interval
                    )
                )
            sizes = []  # measured above, against the baseline
        if args.reference_rows:
            python = reference_python(args.reference_python)
            reference = run_reference_offline(args.reference_rows, args.cache, work, python, max(args.repeat, 1))
        for n in sizes:
            measured = run_once(
                offline_config(dataset(args.cache, n)),
                work,
                f"offline-{n}",
                [f"--progress_interval={args.progress_interval}"],
            )
            if measured["rows"] != n:
                raise RuntimeError(f"expected {n} rows in results.json, got {measured['rows']}")
            measured.update(mode="offline", size=n, workers=1)
            results.append(measured)
            print(
                f"offline {n:>9,} rows: {measured['wall_s']:.1f} s, {measured['rows_per_s']:,.0f} rows/s, "
                f"peak RSS {measured['peak_rss_tree_mib']:,.0f} MiB",
                file=sys.stderr,
            )
            shutil.rmtree(work / f"out-offline-{n}", ignore_errors=True)
        if args.online:
            online_sizes = [200] if args.smoke else [int(s) for s in args.online_sizes.split(",") if s.strip()]
            results += run_online(online_sizes, args.cache, work, args.parallelism, args.progress_interval)
        if args.runners:
            results += run_runners(args.runners, args.cache, work)
        if args.statistics:
            results += run_statistics(args.statistics, args.cache, work, args.progress_interval, max(args.repeat, 1))

    report = {
        "benchmark": "scale",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "memory_limit_mib": MEMORY_LIMIT_BYTES // 2**20,
        "results": results,
        "against_baseline": comparisons,
        "reference": reference,
    }
    target = args.json or PROJECT_ROOT / "bench" / "results" / f"scale-{time.strftime('%Y%m%d-%H%M%S')}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report, indent=2) + "\n")
    if results:
        print(markdown(results))
    if comparisons or reference:
        print(baseline_markdown(comparisons, reference))
    print(f"\nJSON: {target}")
    over = [r for r in results if r["peak_rss_tree_mib"] * 2**20 > MEMORY_LIMIT_BYTES]
    for r in over:
        print(f"warning: {r['mode']} {r['rows']:,} rows peaked at {r['peak_rss_tree_mib']:,.0f} MiB (> 2 GiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
