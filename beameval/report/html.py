"""HTML building blocks for the reports: escaping, number formatting, tables and the page shell.

Everything that comes from data (row text, score names, config values, error messages)
goes through :func:`esc` or :func:`attr` before it reaches the page; nothing from data is
ever placed inside a ``<script>`` or ``<style>`` element, so a row holding
``</script><script>`` stays text. The page has no external reference at all: the style
and the script are inline (``assets.py``), charts are inline SVG.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from beameval.report.assets import SCRIPT, STYLE

__all__ = [
    "attr",
    "breakable",
    "data_json",
    "esc",
    "facts_table",
    "interval",
    "kv_table",
    "num",
    "page",
    "pval",
    "redact",
    "scores_by_name",
    "table",
]

#: Keys whose values are never shown (the config holds env-var *names*, but be safe twice).
_SECRET_KEY = re.compile(r"(secret|password|passwd|authorization|bearer|credential|(^|_)token$|api_?key$)", re.I)
#: Keys that only *name* where a secret lives, so they are safe to show.
_SECRET_REFERENCE = re.compile(r"(_env|_header|_secret|_path)$", re.I)
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
_URL_KEY_PARAM = re.compile(r"([?&](?:key|api_key|apikey|token|access_token|sig|signature)=)[^&#\s]*", re.I)


def esc(value: Any) -> str:
    """Text for an HTML element body: ``None`` is empty, everything else is ``str()`` escaped."""
    return "" if value is None else html.escape(str(value), quote=False)


def breakable(name: Any) -> str:
    """A score name for a narrow column head: escaped, with line-break chances after ``.`` and ``_``."""
    return esc(name).replace(".", ".<wbr>").replace("_", "_<wbr>")


def attr(value: Any) -> str:
    """A value for a double-quoted HTML attribute."""
    return "" if value is None else html.escape(str(value), quote=True)


def data_json(value: Any) -> str:
    """JSON for a ``data-*`` attribute (NaN becomes null, so ``JSON.parse`` accepts it)."""
    return attr(json.dumps(_finite(value), separators=(",", ":"), ensure_ascii=False))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def num(value: Any, digits: int = 4) -> str:
    """A number as shown on the page: floats with ``digits`` decimals, ints with separators, else ``–``."""
    if isinstance(value, bool) or value is None:
        return "–" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if math.isfinite(value) else "–"
    return esc(value)


def pval(value: Any) -> str:
    """A p-value as shown: never rounded to look like a certainty.

    Scientific below 0.001 (``9.50e-07``, never ``0.0000``), ``> 0.999`` above 0.999 (never a
    rounded ``1`` beside an exact one), else 3 significant digits.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "–"
    if value == 0 or value == 1:
        return str(int(value))
    if value > 0.999:
        return "> 0.999"
    return f"{value:.2e}" if abs(value) < 1e-3 else f"{value:.3g}"


def interval(low: Any, high: Any) -> str:
    """``[low, high]`` with :func:`num`, or an empty string when either end is unknown."""
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return ""
    if not (math.isfinite(low) and math.isfinite(high)):
        return ""
    return f"[{num(float(low))}, {num(float(high))}]"


def table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "grid") -> str:
    """A table from already-escaped cell HTML."""
    head_html = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{attr(cls)}"><thead><tr>{head_html}</tr></thead><tbody>{body}</tbody></table>'


def facts_table(rows: Iterable[tuple[str, str]]) -> str:
    """A two-column table of plain-text keys and values that are already HTML (a panel's facts)."""
    return table(["", ""], [(esc(key), value) for key, value in rows], cls="kv")


def scores_by_name(results: Mapping[str, Any]) -> dict[Any, Mapping[str, Any]]:
    """A results document's aggregate scores, by name."""
    found = (results.get("aggregate_scores") or {}).get("scores") or []
    return {s.get("name"): s for s in found if isinstance(s, Mapping)}


def kv_table(pairs: Iterable[tuple[str, Any]]) -> str:
    """A two-column key/value table; nested mappings and lists are shown as compact JSON."""
    rows = []
    for key, value in pairs:
        if isinstance(value, Mapping | list):
            shown = f"<code>{esc(json.dumps(_finite(value), ensure_ascii=False, default=str))}</code>"
        else:
            shown = num(value) if isinstance(value, int | float) and not isinstance(value, bool) else esc(value)
        rows.append((str(key), shown))
    return facts_table(rows)


def redact(value: Any) -> Any:
    """A copy of a config-like structure with secret-looking values masked and URL credentials removed."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            if _SECRET_KEY.search(name) and not _SECRET_REFERENCE.search(name) and item not in (None, "", {}, []):
                out[name] = "(hidden)"
            else:
                out[name] = redact(item)
        return out
    if isinstance(value, list):
        return [redact(item) for item in value]
    if isinstance(value, str):
        return _URL_KEY_PARAM.sub(r"\1(hidden)", _URL_CREDENTIALS.sub("", value))
    return value


def page(title: str, body: str) -> str:
    """The whole self-contained document: inline style and script, no external reference."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # The page may fetch nothing: a browser that honours CSP refuses any external load.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{esc(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}<script>{SCRIPT}</script></body></html>\n"
    )
