"""Throughput of both sides (rows/s) for offline and online exact-match, and the ratios ours / reference.

Each side is timed several ways (whole command, the Beam pipeline alone, and ours as a
marginal rate over a small baseline run) because start-up costs differ so much between a
Beam subprocess and the reference's in-process ``run_sync`` that one number would mislead.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from bench.parity_cases import Case
from bench.parity_data import throughput_rows, write_jsonl
from bench.parity_sides import RunError, run_ours, run_reference


def _rate(rows: int, seconds: float | None) -> float | None:
    return round(rows / seconds, 1) if seconds else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def _server_stats(server: Any) -> dict[str, Any] | None:
    if server is None:
        return None
    stats = server.stats()
    return {k: stats.get(k) for k in ("requests", "connections", "peak_in_flight", "by_status")}


def _mean(scores: list[dict[str, Any]], name: str) -> Any:
    return next((s.get("mean") for s in scores if s.get("name") == name), None)


def measure(
    name: str,
    rows: list[dict[str, Any]],
    case: Case,
    work: Path,
    ref_python: str | None,
    baseline_rows: int,
    repeat: int = 1,
    server: Any = None,
) -> dict[str, Any]:
    """Rows/s of both sides for one case; ours also as a marginal rate over a small baseline run.

    Each run is repeated ``repeat`` times and the fastest kept (best of k: the machine is
    shared, and slower samples measure other load, not the evaluator); every sample is
    kept in the result. With a test ``server``, its counters are reset before and read
    after each measured run.
    """
    n = len(rows)
    dataset = write_jsonl(work / f"{name}.jsonl", rows)
    small = write_jsonl(work / f"{name}-baseline.jsonl", rows[:baseline_rows])
    ours_samples: list[dict[str, Any]] = []
    ref_samples: list[dict[str, Any]] = []
    for attempt in range(1, repeat + 1):
        print(f"throughput {name} [{attempt}/{repeat}]: ours, {baseline_rows:,} rows (baseline)", file=sys.stderr)
        base = run_ours(case.our_config(small), work, f"{name}-baseline")
        print(f"throughput {name} [{attempt}/{repeat}]: ours, {n:,} rows", file=sys.stderr)
        if server is not None:
            server.reset()
        full = run_ours(case.our_config(dataset), work, name)
        if full["counts"]["rows"] != n or full["counts"]["ok"] != n:
            raise RunError(f"{name}: our run reported {full['counts']}, expected {n} ok rows")
        ours_cmd, ours_pipe = full["_command_wall_s"], full["run"]["wall_time_s"]
        marginal_s = ours_pipe - base["run"]["wall_time_s"]
        ours_samples.append(
            {
                "command_wall_s": round(ours_cmd, 3),
                "pipeline_wall_s": ours_pipe,
                "baseline_rows": baseline_rows,
                "baseline_pipeline_wall_s": base["run"]["wall_time_s"],
                "rows_per_s_command": _rate(n, ours_cmd),
                "rows_per_s_pipeline": _rate(n, ours_pipe),
                "rows_per_s_marginal": _rate(n - baseline_rows, marginal_s) if marginal_s > 0 else None,
                "exact_match_mean": _mean(full["aggregate_scores"]["scores"], "exact-match.exact-match"),
                "server": _server_stats(server),
                "load_average": os.getloadavg()[0],
            }
        )
        if ref_python is None:
            continue
        print(f"throughput {name} [{attempt}/{repeat}]: reference, {n:,} rows", file=sys.stderr)
        if server is not None:
            server.reset()
        ref = run_reference(ref_python, case.reference_spec(dataset), work, name)
        if ref["row_status"].get("ok") != n:
            raise RunError(f"{name}: the reference reported {ref['row_status']}, expected {n} ok rows")
        ref_samples.append(
            {
                "run_sync_s": round(ref["elapsed_s"], 3),
                "command_wall_s": round(ref["_command_wall_s"], 3),
                "rows_per_s_run_sync": _rate(n, ref["elapsed_s"]),
                "rows_per_s_command": _rate(n, ref["_command_wall_s"]),
                "exact_match_mean": _mean(ref["aggregate_scores"], "exact-match.exact-match"),
                "server": _server_stats(server),
                "load_average": os.getloadavg()[0],
            }
        )

    def best(samples: list[dict[str, Any]], key: str) -> Any:
        values = [x[key] for x in samples if x.get(key)]
        return max(values) if values else None

    ours = {
        key: best(ours_samples, key) for key in ("rows_per_s_command", "rows_per_s_pipeline", "rows_per_s_marginal")
    }
    result: dict[str, Any] = {"rows": n, "repeat": repeat, "ours": {**ours, "samples": ours_samples}}
    if ref_samples:
        ref_best = {key: best(ref_samples, key) for key in ("rows_per_s_run_sync", "rows_per_s_command")}
        result["reference"] = {**ref_best, "samples": ref_samples}
        ref_rate = ref_best["rows_per_s_run_sync"]
        result["ratios_ours_over_reference_run_sync"] = {
            "command": _ratio(ours["rows_per_s_command"], ref_rate),
            "pipeline": _ratio(ours["rows_per_s_pipeline"], ref_rate),
            "marginal": _ratio(ours["rows_per_s_marginal"], ref_rate),
            "command_vs_reference_command": _ratio(ours["rows_per_s_command"], ref_best["rows_per_s_command"]),
        }
    return result


def run_throughput(args: argparse.Namespace, work: Path, ref_python: str | None) -> dict[str, Any]:
    from beameval.testserver.harness import ServerProcess

    metric = {"type": "exact-match", "reference": "{{ item.answer }}", "candidate": "{{ item.output }}"}
    offline = Case("tp-offline", [], [metric])
    results = {
        "offline": measure(
            "tp-offline", throughput_rows(args.offline_rows), offline, work, ref_python, 1000, args.repeat
        )
    }
    results["offline"]["setup"] = "offline exact-match, candidate template, no target"
    params = {"parallelism": args.parallelism, "max_retries": 3, "request_timeout": 60}
    with ServerProcess(latency_ms=args.latency_ms) as server:
        target = {"url": server.base_url, "name": "tp-model", "format": "openai"}
        template = {"messages": [{"role": "user", "content": "{{ item.output }}"}]}  # echoed back by the server
        online = Case(
            "tp-online", [], [{"type": "exact-match", "reference": "{{ item.answer }}"}], target, template, params
        )
        results["online"] = measure(
            "tp-online", throughput_rows(args.online_rows), online, work, ref_python, 100, args.repeat, server
        )
        results["online"]["setup"] = (
            f"online exact-match, the test server echoes each row's output, latency {args.latency_ms} ms, "
            f"parallelism {args.parallelism}"
        )
    return results


def _cell(v: Any, w: int) -> str:
    return f"{v:>{w},.1f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"


def print_throughput(results: dict[str, Any]) -> None:
    print("\n== throughput (rows/s) ==")
    print(
        f"{'case':<8} {'rows':>8}  {'ours cmd':>9} {'ours pipe':>9} {'ours marg':>9}  "
        f"{'ref run_sync':>12} {'ref cmd':>8}  {'ratio cmd':>9} {'ratio pipe':>10} {'ratio marg':>10}"
    )
    for name, r in results.items():
        ours, ref = r["ours"], r.get("reference", {})
        ratios = r.get("ratios_ours_over_reference_run_sync", {})
        print(
            f"{name:<8} {r['rows']:>8,}  {_cell(ours['rows_per_s_command'], 9)} "
            f"{_cell(ours['rows_per_s_pipeline'], 9)} {_cell(ours['rows_per_s_marginal'], 9)}  "
            f"{_cell(ref.get('rows_per_s_run_sync'), 12)} "
            f"{_cell(ref.get('rows_per_s_command'), 8)}  {_cell(ratios.get('command'), 9)} "
            f"{_cell(ratios.get('pipeline'), 10)} {_cell(ratios.get('marginal'), 10)}"
        )
    print(
        "ours cmd = rows / wall time of `python -m pipeline.run` (interpreter, imports, Beam start-up included); "
        "ours pipe = rows / results.json run.wall_time_s (the Beam pipeline only); ours marg = extra rows / extra "
        "pipeline time over a small baseline run (Beam start-up excluded); ref run_sync = rows / time inside "
        "Evaluator().run_sync (in-process); ratios = ours / ref run_sync."
    )
