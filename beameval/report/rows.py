"""The rows browser: sampled ``rows/`` records as a filterable table, each row opening to its transcript.

A row opens to what happened to it, in order, as inspect's viewer shows a sample: the
request sent to the target (its ``system``, ``user``, … messages, or its prompt, from the
``request`` column), the ``assistant``'s answer, and each LLM judge's prompt and reply
(from the judge's ``<key>.reply`` column) with the scores it gave; then the reference,
the scores and facts, and the error. Rows written before ``rows/`` had a ``request``
column show the item instead, and say so.

Every value is escaped here, in Python; the page's script only hides and shows what is
already there (see ``assets.py``). Long texts are cut so the page stays small however
large the outputs are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from beameval.report.html import attr, breakable, data_json, esc, num, redact

__all__ = [
    "RowColumns",
    "row_columns",
    "STANDARD_COLUMNS",
    "TEXT_BUDGET",
    "as_text",
    "cut_text",
    "group_token",
    "item_of",
    "lookup",
    "reference_fields",
    "rows_browser",
]

#: ``rows/`` columns shown in their own place; any other column (labels, judge replies) is listed too.
STANDARD_COLUMNS = frozenset(
    {
        "row_index", "sample_index", "status", "item", "output_text", "error", "latency_ms", "attempts",
        "http_status", "prompt_tokens", "completion_tokens", "request_hash", "cached",
        "failure", "phase", "metric", "request", "notes",
    }
)  # fmt: skip
#: A judge's detail column (``llm-judge.reply``): ``{"text", "model", "request"?}`` as JSON.
_JUDGE_REPLY = ".reply"
#: Request fields shown as the transcript's turns; the others (model, temperature, …) as one facts line.
_TURN_FIELDS = ("messages", "prompt", "input")
_REFERENCE_KEYS = ("reference", "answer", "expected", "expected_output", "target", "ground_truth", "gold")
_ITEM_FIELD = re.compile(r"\{\{\s*item\.([A-Za-z_][\w.]*)")
#: Characters of all embedded row text, so 2,000 long rows cannot make a page of tens of MB.
TEXT_BUDGET = 3_000_000


def item_of(row: Mapping[str, Any]) -> Any:
    """The row's ``item`` decoded from JSON (the raw text when it is not JSON, e.g. an input failure)."""
    raw = row.get("item")
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def lookup(item: Any, path: str) -> tuple[bool, Any]:
    """``(found, value)`` of a dotted path (``meta.source``) in an item."""
    current = item
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return False, None
        current = current[part]
    return True, current


def group_token(by: str, value: Any) -> str:
    """How a group is named in filters: ``field=value`` (``null`` for a missing field)."""
    shown = "null" if value is None else json.dumps(value) if isinstance(value, bool) else str(value)
    return f"{by}={shown}"


def reference_fields(
    config: Mapping[str, Any] | None, keys: Sequence[str] = ("reference", "references", "right_template")
) -> list[str]:
    """Item fields the metrics read through ``keys`` templates (``{{ item.answer }}``), when the config shows them.

    With ``keys=("candidate",)`` these are where an offline run's outputs live.
    """
    found: list[str] = []
    for metric in (config or {}).get("metrics") or []:
        if not isinstance(metric, Mapping):
            continue
        for key in keys:
            for match in _ITEM_FIELD.finditer(json.dumps(metric.get(key) or "")):
                if match.group(1) not in found:
                    found.append(match.group(1))
    return found


def cut_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def as_text(value: Any) -> str:
    """A value as display text: strings as they are, anything else as indented JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=1, ensure_ascii=False, default=str)


def rows_browser(
    rows: Sequence[Mapping[str, Any]],
    score_names: Sequence[str],
    group_fields: Sequence[str] = (),
    references: Sequence[str] = (),
    table_id: str = "rows-table",
    outputs: Sequence[str] = (),
    columns: RowColumns | None = None,
) -> str:
    """The table of rows, one ``<tbody>`` per row: a summary line and a hidden detail line.

    Args:
        rows: ``rows/`` records, with ``failure`` (a failure group id), ``phase`` and ``metric`` when known.
        score_names: the per-row score columns, in results.json order.
        group_fields: ``statistics.group_by`` fields; each row is tagged with its groups.
        references: item fields to show as the reference (``reference_fields``); else common names.
        table_id: the element id the filter bar points at.
        outputs: item fields holding the output when ``output_text`` is empty (offline runs).
        columns: the id field and the prompt's input fields shown beside the row number.

    Returns:
        The table's HTML.
    """
    # A transcript has up to ~6 blocks (system, user, assistant, judge prompt and reply, reference) plus markup.
    limit = max(120, min(2000, TEXT_BUDGET // max(1, 10 * len(rows))))
    scores = [name for name in score_names if any(name in row for row in rows[:50])] or list(score_names)
    shown = (columns or RowColumns()).present(rows[:50], references)
    head = "".join(f"<th>{breakable(name)}</th>" for name in scores)
    parts = [
        f'<table class="browse" id="{attr(table_id)}"><thead><tr><th>row</th>{shown.head()}<th>status</th>{head}'
        "<th>output</th><th>error</th></tr></thead>"
    ]
    for row in rows:
        parts.append(_row(row, scores, group_fields, references, outputs, limit, shown))
    parts.append("</table>")
    return "".join(parts)


def _row(
    row: Mapping[str, Any],
    scores: Sequence[str],
    group_fields: Sequence[str],
    references: Sequence[str],
    outputs: Sequence[str],
    limit: int,
    shown: RowColumns,
) -> str:
    item = item_of(row)
    if row.get("output_text") is None and outputs:
        # Offline: the output is a field of the row, read by the metrics' candidate template.
        found = [value for path in outputs for ok, value in [lookup(item, path)] if ok]
        row = {**row, "output_text": found[0] if found else None}
    status = str(row.get("status") or "")
    groups = [group_token(by, lookup(item, by)[1]) for by in group_fields]
    values = [row.get(name) for name in scores]
    index = f"{row.get('row_index')}" + (f".{row['sample_index']}" if row.get("sample_index") else "")
    cells = "".join(f'<td class="num">{num(v)}</td>' for v in values)
    failure = row.get("failure")
    output = esc(cut_text(as_text(row.get("output_text")), 140))
    summary = (
        f'<tr class="sum"><td class="num">{esc(index)}</td>{shown.cells(row, item, references)}'
        f'<td class="status-{attr(status)}">{esc(status)}</td>{cells}<td class="txt">{output}</td>'
        f'<td class="txt">{esc(cut_text(as_text(row.get("error")), 140))}</td></tr>'
    )
    colspan = 4 + len(scores) + shown.width
    return (
        f'<tbody class="r" data-status="{attr(status)}" data-f="{"" if failure is None else attr(failure)}" '
        f'data-g="{data_json(groups)}" data-s="{data_json(values)}">{summary}'
        f'<tr class="det" hidden><td colspan="{colspan}">{_details(row, item, references, limit)}</td></tr></tbody>'
    )


@dataclass(frozen=True)
class RowColumns:
    """What a rows table shows beside the row number: the row's id and the template's inputs.

    ``id_field``: ``dataset.id_field`` (else an ``id`` item field when rows have one);
    ``inputs``: the item fields the prompt template reads (the question). The reference is
    the first of the metrics' reference fields. Each is shown only when some row has it.
    """

    id_field: str | None = None
    inputs: tuple[str, ...] = ()
    reference: bool = True

    def present(self, rows: Sequence[Mapping[str, Any]], references: Sequence[str]) -> RowColumns:
        """The columns that some of ``rows`` (a prefix of the table) actually fill."""
        items = [item_of(row) for row in rows]
        id_field = self.id_field or ("id" if any(lookup(item, "id")[0] for item in items) else None)
        inputs = tuple(field for field in self.inputs if any(lookup(item, field)[0] for item in items))
        reference = bool(references) and any(lookup(item, references[0])[0] for item in items)
        if id_field is not None and not any(lookup(item, id_field)[0] for item in items):
            id_field = None
        return RowColumns(id_field, inputs, reference)

    @property
    def width(self) -> int:
        return (self.id_field is not None) + len(self.inputs) + self.reference

    def head(self) -> str:
        names = (
            ([self.id_field] if self.id_field else []) + list(self.inputs) + (["reference"] if self.reference else [])
        )
        return "".join(f"<th>{breakable(name)}</th>" for name in names)

    def cells(self, row: Mapping[str, Any], item: Any, references: Sequence[str]) -> str:
        fields = ([self.id_field] if self.id_field else []) + list(self.inputs)
        if self.reference:
            fields.append(references[0])
        values = [lookup(item, field)[1] for field in fields]
        return "".join(f'<td class="txt">{esc(cut_text(as_text(value), 140))}</td>' for value in values)


def row_columns(results: Mapping[str, Any]) -> RowColumns:
    """The id field and the prompt's input fields of a run, from its config in results.json."""
    config = results.get("config") or {}
    dataset = config.get("dataset") if isinstance(config, Mapping) else None
    id_field = dataset.get("id_field") if isinstance(dataset, Mapping) else None
    prompt = json.dumps(config.get("prompt_template") or "") if isinstance(config, Mapping) else ""
    inputs = tuple(dict.fromkeys(match.group(1) for match in _ITEM_FIELD.finditer(prompt)))
    return RowColumns(str(id_field) if id_field else None, inputs[:2])


def _turn(role: str, text: str, limit: int, titles: dict[str, int], cls: str = "") -> str:
    """One titled block of the transcript; a repeated title is numbered, so no two blocks share one."""
    titles[role] = titles.get(role, 0) + 1
    title = role if titles[role] == 1 else f"{role} {titles[role]}"
    kind = cls or role.split(" ", 1)[0]
    shown = redact(cut_text(text, limit))  # URL credentials and key parameters; cut first: regexes cost per character
    return f'<div class="turn {attr(kind)}"><div class="label">{esc(title)}</div><pre>{esc(shown)}</pre></div>'


def _content(value: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts, else JSON."""
    if isinstance(value, list) and all(isinstance(p, Mapping) for p in value):
        texts = [str(p["text"]) for p in value if isinstance(p.get("text"), str)]
        if len(texts) == len(value):
            return "\n".join(texts)
    return as_text(value)


def _request_turns(request: Any, limit: int, titles: dict[str, int], prefix: str = "") -> list[str]:
    """The turns of a request body: its messages by role, or its prompt / input, then its other fields."""
    body = _decoded(request)
    if not isinstance(body, Mapping):
        return [_turn(f"{prefix}request", as_text(body), limit, titles, "request")] if body else []
    turns = []
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            role = str(message.get("role") or "message")
            text = _content(message.get("content"))
            if message.get("tool_calls"):
                text += ("\n" if text else "") + as_text(redact(message["tool_calls"]))
            turns.append(_turn(f"{prefix}{role}", text, limit, titles, role))
    for key in ("prompt", "input"):
        if key in body:
            turns.append(_turn(f"{prefix}{key}", _content(body[key]), limit, titles, "user"))
    rest = redact({k: v for k, v in body.items() if k not in _TURN_FIELDS})
    if rest:
        facts = " · ".join(
            f"{esc(k)}: <b>{esc(as_text(v) if not isinstance(v, str) else v)}</b>" for k, v in rest.items()
        )
        turns.append(f'<p class="request-params">{esc(prefix)}request parameters: {facts}</p>')
    return turns


def _decoded(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _judges(row: Mapping[str, Any]) -> list[str]:
    """The metric keys of the row's LLM judges (those with a ``<key>.reply`` column)."""
    return [k[: -len(_JUDGE_REPLY)] for k in row if k.endswith(_JUDGE_REPLY) and k not in STANDARD_COLUMNS]


def _judge_turns(row: Mapping[str, Any], key: str, limit: int, titles: dict[str, int]) -> list[str]:
    """A judge's prompt (when its reply records it), its reply and the scores and labels it gave."""
    reply = _decoded(row.get(f"{key}{_JUDGE_REPLY}"))
    turns = []
    if isinstance(reply, Mapping):
        if reply.get("request") is not None:
            turns += _request_turns(reply["request"], limit, titles, prefix=f"judge {key} · ")
        model = f" ({reply['model']})" if reply.get("model") else ""
        turns.append(_turn(f"judge {key}{model}", as_text(reply.get("text")), limit, titles, "judge"))
    elif reply:
        turns.append(_turn(f"judge {key}", as_text(reply), limit, titles, "judge"))
    gave = [
        f"{esc(name[len(key) + 1 :])}: <b>{num(value) if isinstance(value, float | int) else esc(value)}</b>"
        for name, value in row.items()
        if name.startswith(f"{key}.") and name != f"{key}{_JUDGE_REPLY}" and value not in (None, "")
    ]
    if gave:
        turns.append(f'<p class="judge-scores">judge {esc(key)} gave: {" · ".join(gave)}</p>')
    return turns


def _details(row: Mapping[str, Any], item: Any, references: Sequence[str], limit: int) -> str:
    titles: dict[str, int] = {}
    parts = ['<div class="transcript">']
    if row.get("request") is not None:
        parts += _request_turns(row["request"], limit, titles)
    else:
        if row.get("output_text") is not None or row.get("http_status") is not None:
            parts.append(
                '<p class="sub">The request sent is not recorded in this run\'s rows/; the row it was built from:</p>'
            )
        parts.append(_turn("row (item)", as_text(item), limit, titles, "item"))
    if row.get("output_text") is not None:
        parts.append(_turn("assistant", as_text(row.get("output_text")), limit, titles))
    judges = _judges(row)
    for key in judges:
        parts += _judge_turns(row, key, limit, titles)
    parts.append("</div>")
    reference = _reference(item, references)
    if reference is not None:
        parts.append(_turn("reference", as_text(reference), limit, titles))
    judged = tuple(f"{key}." for key in judges)
    extra = {
        k: v
        for k, v in row.items()
        if k not in STANDARD_COLUMNS and not k.startswith(judged) and not isinstance(v, float | int) and k != "id"
    }
    for key, value in extra.items():
        if value not in (None, ""):
            parts.append(_turn(key, as_text(value), limit, titles, "detail"))
    facts = [f"id: <b>{esc(row['id'])}</b>"] if row.get("id") else []
    numbers = {
        k: v
        for k, v in row.items()
        if k not in STANDARD_COLUMNS and not k.startswith(judged) and isinstance(v, float | int)
    }
    facts += [f"{esc(k)}: <b>{num(v)}</b>" for k, v in numbers.items()]
    for key in ("latency_ms", "attempts", "http_status", "prompt_tokens", "completion_tokens", "cached"):
        if row.get(key) is not None:
            facts.append(f"{esc(key)}: <b>{num(row[key])}</b>")
    if row.get("notes"):
        facts.append(f"notes: <b>{esc(row['notes'])}</b>")
    if facts:
        parts.append('<div class="label">scores and facts</div><p class="facts-line">' + " · ".join(facts) + "</p>")
    if row.get("error"):
        where = ", ".join(str(row[k]) for k in ("phase", "metric") if row.get(k))
        parts.append(_turn(f"error ({where})" if where else "error", as_text(row["error"]), limit, titles))
    return "".join(parts)


def _reference(item: Any, references: Iterable[str]) -> Any:
    if not isinstance(item, Mapping):
        return None
    fields = list(references) or [k for k in _REFERENCE_KEYS if k in item]
    found = {path: value for path in fields for ok, value in [lookup(item, path)] if ok}
    if len(found) == 1:
        return next(iter(found.values()))
    return found or None
