"""``render_run_report``: one run's ``results.json`` and sampled rows as a self-contained HTML page.

Older results lack fields added later (score intervals, ``groups``, ``provenance``,
``usage.cache``); every section renders what is there and skips what is not, so the
page can be regenerated for any run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from beameval.outputs.groups import GROUPS_FILE, largest_groups
from beameval.report.charts import histogram, interval_bar, rubric_bars, value_domain
from beameval.report.decision import decision_section
from beameval.report.html import attr, breakable, esc, interval, num, page, table
from beameval.report.judge_panel import judge_section
from beameval.report.pairwise_panel import pairwise_section
from beameval.report.rows import group_token, reference_fields, row_columns, rows_browser
from beameval.report.run_sections import models_seen, provenance_section, total_tokens, usage_section
from beameval.report.sample import FailureBreakdown, SampleInfo

__all__ = ["GROUP_CAP", "render_run_report", "run_title"]

#: Groups drawn per ``group_by`` field, largest first; the rest are summarised in one line.
#: 100,000 distinct values drawn in full made a 57 MB page that took 96 s to render.
GROUP_CAP = 50


def _scores(results: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    scores = ((results.get("aggregate_scores") or {}).get("scores")) or []
    return [s for s in scores if isinstance(s, Mapping) and s.get("name")]


def render_run_report(
    results: Mapping[str, Any],
    rows: Sequence[dict[str, Any]],
    *,
    sample: SampleInfo | None = None,
    failures: FailureBreakdown | None = None,
) -> str:
    """The run report, top to bottom: headline, histograms, groups, failures, rows, usage, provenance.

    Args:
        results: the run's ``results.json`` document.
        rows: the ``rows/`` records to embed (``RowSampler`` bounds them for large runs); rows
            may carry ``failure`` (a group id of ``failures``), ``phase`` and ``metric``.
        sample: how ``rows`` were chosen, said on the page; None when they are the whole run.
        failures: the breakdown of every failure (from ``errors/``); None to count the given rows.

    Returns:
        The HTML document.
    """
    rows = list(rows)
    if failures is None:
        failures = FailureBreakdown.from_rows(rows)
    scores = _scores(results)
    all_groups = [g for g in results.get("groups") or [] if isinstance(g, Mapping)]
    group_fields = list(dict.fromkeys(str(g.get("by")) for g in all_groups))
    groups = {by: largest_groups([g for g in all_groups if str(g.get("by")) == by], GROUP_CAP) for by in group_fields}
    drawn = [g for shown, _ in groups.values() for g in shown]
    title = run_title(results)
    run_id = (results.get("provenance") or {}).get("run_id")
    body = [
        "<main>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="sub">status: {esc(results.get("status", "unknown"))} · {esc(_when(results))}'
        + (f" · run {esc(run_id)}" if run_id else "")
        + "</p>",
        _headline(results, scores),
        decision_section(results.get("decision")),
        _histograms(scores),
        judge_section(results),
        pairwise_section(results),
        _groups(groups, [str(s["name"]) for s in scores], _every_group_in(results)),
        _failures(results, failures),
        _rows_section(results, rows, scores, group_fields, drawn, failures, sample),
        usage_section(results.get("usage") or {}),
        provenance_section(results),
        "</main>",
    ]
    return page(title, "".join(body))


def run_title(results: Mapping[str, Any]) -> str:
    """``MODEL(S) on DATASET, DATE``: what a reader looks for first (the run id is in the line below)."""
    provenance = results.get("provenance") or {}
    config = results.get("config") or {}
    seen = provenance.get("models_seen")
    models = (
        [str(m["model"]) for m in seen if isinstance(m, Mapping) and m.get("model")] if isinstance(seen, list) else []
    )
    if not models and isinstance(seen, Mapping):
        models = [str(k) for k in seen]
    if not models:
        model = ((config.get("target") or {}).get("model")) or {}
        models = [str(model["name"])] if isinstance(model, Mapping) and model.get("name") else []
    if not models and config.get("target") is None and config:
        models = ["offline"]
    paths = (provenance.get("dataset") or {}).get("paths") or [((config.get("dataset") or {}).get("path"))]
    datasets = [str(p).rstrip("/").rsplit("/", 1)[-1] for p in paths if p]
    date = str(provenance.get("started_at") or "")[:10]
    title = " vs ".join(dict.fromkeys(models)) or "Evaluation"
    if datasets:
        title += " on " + ", ".join(datasets[:3]) + (f" (+{len(datasets) - 3})" if len(datasets) > 3 else "")
    return f"{title}, {date}" if date else title


def _every_group_in(results: Mapping[str, Any]) -> str:
    """The file that lists every group: results.json, or groups.parquet when results.json lists only the largest."""
    return GROUPS_FILE if results.get("groups_summary") else "results.json"


def _when(results: Mapping[str, Any]) -> str:
    provenance = results.get("provenance") or {}
    wall = (results.get("run") or {}).get("wall_time_s")
    parts = []
    if provenance.get("started_at"):
        parts.append(f"started {provenance['started_at']}")
    if provenance.get("finished_at"):
        parts.append(f"finished {provenance['finished_at']}")
    if isinstance(wall, int | float):
        parts.append(f"wall time {wall:,.1f} s")
    return ", ".join(parts) or "time not recorded"


def _level(score: Mapping[str, Any]) -> str:
    level = score.get("confidence_level")
    return f"{round(float(level) * 100, 2):g}% CI" if isinstance(level, int | float) else "CI"


def _headline(results: Mapping[str, Any], scores: Sequence[Mapping[str, Any]]) -> str:
    cards = []
    for score in scores:
        ci = interval(score.get("ci_low"), score.get("ci_high"))
        method = f" ({esc(score['ci_method'])})" if score.get("ci_method") else ""
        cards.append(
            f'<div class="card score" data-score="{attr(score["name"])}"><div class="name">{esc(score["name"])}</div>'
            f'<div class="mean">{num(score.get("mean"))}</div>'
            + (f'<div class="ci">{_level(score)} <span class="interval">{ci}</span>{method}</div>' if ci else "")
            + f'<div class="n">n = {num(score.get("count"))}'
            + (f", NaN {num(score.get('nan_count'))}" if score.get("nan_count") else "")
            + "</div></div>"
        )
    counts = results.get("counts") or {}
    usage = results.get("usage") or {}
    cached = counts.get("cached", ((usage.get("cache") or {}).get("hits")))
    facts = [("rows", counts.get("rows")), ("ok", counts.get("ok")), ("errors", counts.get("errors"))]
    if counts.get("samples") is not None:
        facts.append(("samples", counts["samples"]))
    if counts.get("skipped"):  # stopped at its budget (params.budget)
        facts.append(("skipped", counts["skipped"]))
    facts.append(("cached", cached))
    tokens = total_tokens(usage)
    facts.append(("tokens", tokens))
    wall = (results.get("run") or {}).get("wall_time_s")
    shown = [(k, num(v)) for k, v in facts]
    shown.append(("wall time", f"{wall:,.1f} s" if isinstance(wall, int | float) else "–"))
    fact_html = "".join(f'<span class="fact" data-fact="{attr(k)}">{esc(k)}: <b>{v}</b></span>' for k, v in shown)
    return (
        f'<section id="headline"><h2>Headline</h2><div class="cards">{"".join(cards) or "no scores"}</div>'
        f'<div class="facts">{fact_html}</div><p>models seen: {models_seen(results)}</p></section>'
    )


def _histograms(scores: Sequence[Mapping[str, Any]]) -> str:
    figures = []
    for score in scores:
        chart = histogram(str(score["name"]), score) or rubric_bars(str(score["name"]), score)
        if not chart:
            chart = '<p class="sub">no values to plot</p>'
        figures.append(f"<figure><figcaption>{esc(score['name'])}</figcaption>{chart}</figure>")
    return f'<section id="histograms"><h2>Distributions</h2><div class="charts">{"".join(figures)}</div></section>'


def _groups(
    groups: Mapping[str, tuple[list[Mapping[str, Any]], dict[str, int]]], score_names: Sequence[str], every: str
) -> str:
    if not groups:
        return ""
    out = ['<section id="groups"><h2>Groups</h2><p class="sub">Click a column head to sort.</p>']
    for by, (entries, rest) in groups.items():
        per_name = {name: [_score_of(g, name) for g in entries] for name in score_names}
        names = [n for n in score_names if any(s for s in per_name[n])]
        domains = {
            n: value_domain([v for s in per_name[n] if s for v in (s.get("ci_low"), s.get("ci_high"), s.get("mean"))])
            for n in names
        }
        head = '<th data-sort="n">rows</th><th>errors</th>' + "".join(
            f'<th data-sort="s{i}">{breakable(n)}</th>' for i, n in enumerate(names)
        )
        body = []
        for entry in entries:
            counts = entry.get("counts") or {}
            cells, keys = [], []
            for i, n in enumerate(names):
                s = _score_of(entry, n) or {}
                mean = s.get("mean")
                keys.append(f'data-s{i}="{attr(mean if isinstance(mean, int | float) else "")}"')
                ci = interval(s.get("ci_low"), s.get("ci_high"))
                cells.append(
                    f'<td class="num">{num(mean)} <span class="interval">{ci}</span><br>'
                    f"{interval_bar(mean, s.get('ci_low'), s.get('ci_high'), domains[n], width=120)}</td>"
                )
            token = group_token(by, entry.get("value"))
            body.append(
                f'<tr data-group="{attr(token)}" data-n="{attr(counts.get("rows", ""))}" {" ".join(keys)}>'
                f'<th scope="row">{esc(token.split("=", 1)[1])}</th><td class="num">{num(counts.get("rows"))}</td>'
                f'<td class="num">{num(counts.get("errors"))}</td>{"".join(cells)}</tr>'
            )
        total = len(entries) + rest["groups"]
        note = ""
        if rest["groups"]:
            note = (
                f'<p class="note groups-rest" data-by="{attr(by)}">The {len(entries):,} largest of {total:,} groups '
                f"are drawn. The other {rest['groups']:,} groups hold {rest['rows']:,} rows ({rest['errors']:,} "
                f"failed), at most {rest['largest']:,} rows each; {esc(every)} holds every group.</p>"
            )
        out.append(
            f'<h3>by {esc(by)} ({total:,} groups)</h3>{note}<div class="scroll">'
            f'<table class="sortable sticky" data-by="{attr(by)}">'
            f"<thead><tr><th>{esc(by)}</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        )
    out.append("</section>")
    return "".join(out)


def _score_of(group: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for score in group.get("scores") or []:
        if isinstance(score, Mapping) and score.get("name") == name:
            return score
    return None


def _failures(results: Mapping[str, Any], failures: FailureBreakdown) -> str:
    errors = (results.get("counts") or {}).get("errors")
    head = f'<section id="failures"><h2>Failures</h2><p>failed rows: <b class="errors">{num(errors)}</b></p>'
    if not failures.total:
        return head + ("<p>No failure records.</p>" if errors else "<p>No row failed.</p>") + "</section>"
    phase = table(["phase", "rows"], [(esc(k), num(v)) for k, v in failures.by_phase.most_common()])
    metric = table(["metric", "rows"], [(esc(k), num(v)) for k, v in failures.by_metric.most_common()])
    causes = table(
        ["phase", "metric", "cause", "rows", ""],
        [
            (
                esc(g.phase),
                esc(g.metric or ""),
                esc(g.cause),
                num(g.count),
                f'<a href="#rows" data-failure="{g.id}">show rows</a>',
            )
            for g in failures.groups
        ],
    )
    return (
        f'{head}<div class="side"><div><h3>by phase</h3>{phase}</div><div><h3>by metric</h3>{metric}</div></div>'
        f"<h3>by cause</h3>{causes}</section>"
    )


def _rows_section(
    results: Mapping[str, Any],
    rows: Sequence[dict[str, Any]],
    scores: Sequence[Mapping[str, Any]],
    group_fields: Sequence[str],
    groups: Sequence[Mapping[str, Any]],
    failures: FailureBreakdown,
    sample: SampleInfo | None,
) -> str:
    names = [str(s["name"]) for s in scores]
    row_scores = [n for n in names if any(n in row for row in rows[:50])]
    note = ""
    if sample is not None and not sample.complete:
        note = (
            f'<p class="note sample">This page holds {sample.kept:,} of the run\'s {sample.total_rows:,} rows: '
            f"{sample.kept_failed:,} of {sample.failed_rows:,} failed rows"
            + (f", {sample.kept_flipped:,} of {sample.flipped_rows:,} flipped rows" if sample.flipped_rows else "")
            + f", and {sample.kept_random:,} drawn at random (seed {sample.seed}) from the rest. "
            "Every statistic above covers all rows; rows/ holds every row.</p>"
        )
    options = "".join(
        f'<option value="{attr(group_token(str(g.get("by")), g.get("value")))}">'
        f"{esc(group_token(str(g.get('by')), g.get('value')))}</option>"
        for g in groups
    )
    failure_options = "".join(
        f'<option value="{g.id}">{esc(g.phase)} {esc(g.metric or "")}: {esc(g.cause[:60])}</option>'
        for g in failures.groups
    )
    score_options = "".join(f'<option value="{i}">{esc(n)}</option>' for i, n in enumerate(row_scores))
    bar = (
        '<div class="filters" data-target="rows-table">'
        '<input type="search" data-filter="q" id="rows-search" placeholder="search prompts, outputs, errors">'
        '<select data-filter="status"><option value="">any status</option><option value="ok">ok</option>'
        '<option value="error">error</option></select>'
        + (f'<select data-filter="group"><option value="">any group</option>{options}</select>' if options else "")
        + (
            f'<select data-filter="failure"><option value="">any failure</option>{failure_options}</select>'
            if failure_options
            else ""
        )
        + (
            f'<select data-filter="score"><option value="">score range…</option>{score_options}</select>'
            '<input type="number" step="any" data-filter="min" placeholder="min">'
            '<input type="number" step="any" data-filter="max" placeholder="max">'
            if score_options
            else ""
        )
        + '<span class="shown"></span></div>'
    )
    references = reference_fields(results.get("config"))
    outputs = reference_fields(results.get("config"), keys=("candidate",))
    browser = rows_browser(rows, row_scores, group_fields, references, outputs=outputs, columns=row_columns(results))
    return (
        f'<section id="rows"><h2>Rows</h2>{note}{bar}<div class="scroll">{browser}</div>'
        '<button class="more" data-for="rows-table" hidden>show more</button></section>'
    )
