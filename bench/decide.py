"""``--decide`` benchmark: rows (and dollars) an early decision uses against the full run, and its error rates.

Each scenario draws, per seeded run, a 0/1 score's paired differences on ``--rows`` rows
(``--discordant`` of the rows change, or |δ| + 0.02 when more is needed, split so the true mean difference is δ) and an
``ok_rate`` with no failed row, and runs them through the product's own decision code
(``beameval.compare.sequential.simulate_decisions``: the confidence sequence after every
wave of ``--wave`` rows, the GO / NO-GO rule at a = 0.025 with K = 2 gated scores). The
full run evaluates every row; ``--decide`` stops at the first decisive wave. Dollars are
rows × the cost of one row at ``--usd-per-row`` (default: 500 prompt and 200 completion
tokens at $2.50 / $10 per million tokens = $0.00325).

δ ∈ {−3m, −m, 0} for each margin m of ``--margins``: at −3m NO-GO is right, at 0 GO is
right, and at −m (the boundary) either verdict is an error.

Usage::

    python bench/decide.py                       # 3,000 rows, waves of 200, margins 0.05 and 0.02, 200 runs
    python bench/decide.py --runs 20 --smoke     # tiny, for CI

Prints a markdown table and writes JSON to ``bench/results/decide-<time>.json`` (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from beameval.compare.sequential import simulate_decisions  # noqa: E402

LEVEL = 0.95


def scenario(
    rows: int, wave: int, runs: int, margin: float, delta: float, discordant: float, seed: int, ok_margin: float | None
) -> dict:
    """One (margin, δ) cell: verdict shares and the rows used, mean over ``runs`` seeded runs."""
    rng = np.random.default_rng(seed)
    discordant = max(discordant, abs(delta) + 0.02)  # a drop of |δ| needs at least |δ| of the rows to change
    p_down, p_up = (discordant - delta) / 2, (discordant + delta) / 2
    d = rng.choice([-1.0, 0.0, 1.0], size=(runs, rows), p=[p_down, 1 - discordant, p_up])
    ok_rate = np.zeros((runs, rows))  # no failed row on either side
    codes, used = simulate_decisions([ok_rate, d], [ok_margin or margin, margin], [1.0, 1.0], wave, LEVEL)
    return {
        "margin": margin,
        "delta": delta,
        "discordant": discordant,
        "runs": runs,
        "go": float((codes == 0).mean()),
        "no_go": float((codes == 1).mean()),
        "inconclusive": float((codes == -1).mean()),
        "rows_mean": float(used.mean()),
        "rows_share": float(used.mean() / rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--wave", type=int, default=200)
    parser.add_argument("--runs", type=int, default=200, help="seeded runs per scenario (at least 20)")
    parser.add_argument("--margins", default="0.05,0.02")
    parser.add_argument("--discordant", type=float, default=0.10, help="share of rows whose score changes")
    parser.add_argument(
        "--ok-margin", type=float, default=None, help="ok_rate's margin (default: the score's; a policy names ok_rate)"
    )
    parser.add_argument("--usd-per-row", type=float, default=0.00325)
    parser.add_argument("--smoke", action="store_true", help="a small run (1,000 rows, waves of 100)")
    parser.add_argument("--json", default=None, help="where to write the JSON results")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.wave = 1000, 100
    started = time.time()
    cells = []
    for i, margin in enumerate(float(m) for m in args.margins.split(",")):
        for j, factor in enumerate((-3.0, -1.0, 0.0)):
            cell = scenario(
                args.rows, args.wave, args.runs, margin, factor * margin, args.discordant, 1000 * i + j, args.ok_margin
            )
            cell["delta_in_margins"] = factor
            cells.append(cell)
    print(
        f"{args.rows:,} rows, waves of {args.wave}, {args.discordant:.0%} of rows discordant, "
        f"{args.runs} seeded runs per row of the table, a = 0.025, K = 2 (the score and ok_rate, "
        f"ok_rate at {'the same margin' if args.ok_margin is None else args.ok_margin})\n"
    )
    print(
        "| margin m | true δ | right verdict | GO | NO-GO | INCONCLUSIVE | rows used (mean) | of the full run "
        "| $ used / full |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for c in cells:
        right = {-3.0: "NO-GO", -1.0: "either is an error", 0.0: "GO"}[c["delta_in_margins"]]
        usd, full = c["rows_mean"] * args.usd_per_row, args.rows * args.usd_per_row
        print(
            f"| {c['margin']} | {c['delta_in_margins']:+.0f}m | {right} | {c['go']:.3f} | {c['no_go']:.3f} | "
            f"{c['inconclusive']:.3f} | {c['rows_mean']:,.0f} | {c['rows_share']:.0%} | ${usd:.2f} / ${full:.2f} |"
        )
    print(f"\n({time.time() - started:.1f} s)")
    out = Path(args.json) if args.json else ROOT / "bench" / "results" / f"decide-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "cells": cells}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
