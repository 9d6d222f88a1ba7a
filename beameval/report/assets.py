"""The report's inline style sheet and script: constants, so the page needs no file and no network.

The script is plain ES5-level JavaScript (no library, no build step) that works in every
current browser. It only reads what the page already holds: ``data-*`` attributes written
by Python and the elements' text. It never builds HTML from data (no ``innerHTML``), so
data cannot become markup here either.

What it does:

* **Browsers** (``.filters[data-target]`` + ``table.browse``): a search box, status,
  group, failure and direction selects, and a score range, hide the row bodies that do not
  match; a "sort by" select orders them by one of their scores, highest first; at most
  ``PAGE`` matches are shown until "show more"; a click on a row opens its detail line.
* **Failure links** (``a[data-failure]``): select that failure group in the rows browser.
* **Sortable tables** (``table.sortable th[data-sort=K]``): reorder rows by ``data-K``.
"""

from __future__ import annotations

__all__ = ["SCRIPT", "STYLE"]

STYLE = """
:root{--fg:#1d2330;--muted:#5d6678;--line:#d9dee8;--bg:#f6f7fb;--card:#fff;--accent:#2f6fd6;
--ok:#2e8b57;--bad:#c23b3b;--warn:#b8860b}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:20px 24px 60px}
h1{font-size:22px;margin:6px 0 2px}h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid var(--line);
padding-bottom:4px}h3{font-size:14px;margin:14px 0 6px}
.sub{color:var(--muted);margin:0 0 14px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(230px,1fr));gap:10px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px}
.card .name{color:var(--muted);font-size:12px;word-break:break-all}
.card .mean{font-size:24px;font-weight:600}
.card .ci,.card .n{color:var(--muted);font-size:12px}
.facts{display:flex;flex-wrap:wrap;gap:6px 18px;margin:12px 0}
.facts span b{font-weight:600}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:10px}
figure{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:8px}
figcaption{font-size:12px;color:var(--muted);word-break:break-all}
svg text{font:11px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:var(--muted)}
svg .bar{fill:var(--accent)}svg .mark{stroke:var(--fg);stroke-width:1.5}
svg .whisker{stroke:var(--fg);stroke-width:1.5}svg .axis{stroke:var(--line)}
svg .zero{stroke:var(--muted);stroke-width:1}svg .gate{stroke:var(--bad);stroke-dasharray:4 3;stroke-width:1.5}
svg .pt{fill:var(--fg)}svg .pt.GO{fill:var(--ok)}svg .pt.NO-GO{fill:var(--bad)}svg .pt.INCONCLUSIVE{fill:var(--warn)}
table{border-collapse:collapse;background:var(--card);width:100%}
.grid th,.grid td,.browse th,.browse td,.sortable th,.sortable td{border:1px solid var(--line);padding:4px 7px;
text-align:left;vertical-align:top}
th{background:#eef1f7;font-weight:600}
.kv{width:auto}.kv td{border:0;padding:2px 10px 2px 0;vertical-align:top}.kv thead{display:none}
.kv code{white-space:pre-wrap;word-break:break-all}
th[data-sort]{cursor:pointer;user-select:none}th[data-sort]::after{content:" \\2195";color:var(--muted)}
th[aria-sort=ascending]::after{content:" \\2191"}th[aria-sort=descending]::after{content:" \\2193"}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.filters{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin:8px 0}
.filters input,.filters select,button{font:inherit;padding:3px 6px;border:1px solid var(--line);border-radius:5px;
background:#fff}
.filters input[type=search]{min-width:240px}.filters input[type=number]{width:80px}
.shown{color:var(--muted);font-size:12px}
.browse tr.sum{cursor:pointer}.browse tr.sum:hover{background:#f0f4fc}
.browse td.txt{max-width:380px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.det td{background:#fafbfd}
.det pre,.side pre{white-space:pre-wrap;word-break:break-word;margin:2px 0 8px;font:12px/1.4 ui-monospace,
SFMono-Regular,Menlo,Consolas,monospace;background:#fff;border:1px solid var(--line);border-radius:4px;padding:6px}
.det .label{font-size:12px;color:var(--muted);font-weight:600}
.status-error{color:var(--bad);font-weight:600}.status-ok{color:var(--ok)}
.verdict{font-size:18px;font-weight:700;padding:8px 12px;border-radius:8px;display:inline-block;color:#fff}
.verdict.GO{background:var(--ok)}.verdict.NO-GO{background:var(--bad)}.verdict.INCONCLUSIVE{background:var(--warn)}
.note{background:#fff8e1;border:1px solid #f0dca0;border-radius:6px;padding:6px 10px;margin:8px 0}
.side{display:grid;grid-template-columns:1fr 1fr;gap:8px}
pre.config{white-space:pre-wrap;word-break:break-word;background:var(--card);border:1px solid var(--line);
padding:8px;border-radius:6px;font-size:12px}
a{color:var(--accent)}
.scroll{overflow-x:auto;max-width:100%}
.interval{white-space:nowrap}
table.sticky tr>:first-child,.browse tr.sum>td:first-child,.browse thead th:first-child{position:sticky;left:0;
z-index:1;box-shadow:1px 0 0 var(--line)}
table.sticky tbody tr>:first-child,.browse tr.sum>td:first-child{background:var(--card)}
.sortable tbody th{font-weight:500;background:var(--card)}
svg .grid{stroke:#e9ecf3}svg .mean-label{fill:var(--fg);font-weight:600}
.transcript{border-left:3px solid var(--line);padding-left:10px;margin:4px 0 10px}
.turn .label{text-transform:none}.turn.system .label{color:#6b5b95}.turn.user .label{color:var(--accent)}
.turn.assistant .label{color:var(--ok)}.turn.judge .label{color:#a0522d}
.turn.system pre{background:#f7f5fb}.turn.assistant pre{background:#f3faf6}.turn.judge pre{background:#fcf6f1}
.request-params,.judge-scores{font-size:12px;color:var(--muted);margin:0 0 8px}
.v-GO{color:var(--ok)}.v-NO-GO{color:var(--bad)}.v-INCONCLUSIVE{color:var(--warn)}
table.scores td,table.scores th{padding:4px 5px;font-size:13px}
svg .pt.best{fill:var(--ok)}svg .pt.worst{fill:var(--bad)}svg g.best text{fill:var(--ok);font-weight:600}
svg g.worst text{fill:var(--bad)}.lb-charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));
gap:10px}td.best{background:#eaf6ef}td.worst{background:#fbeeee}
.matrix td.answer{min-width:180px;max-width:320px}.matrix .answer .txt{white-space:pre-wrap;word-break:break-word}
.matrix .answer .scores-line{color:var(--muted);font-size:12px}
table.sides{width:auto;margin:6px 0 12px}table.sides td,table.sides th{border:1px solid var(--line);padding:4px 10px;
text-align:left;vertical-align:top}table.sides td.num{text-align:right}
"""

SCRIPT = """
(function () {
  "use strict";
  var PAGE = 100;
  function all(selector, root) {
    return Array.prototype.slice.call((root || document).querySelectorAll(selector));
  }
  function parse(text, fallback) {
    try { return JSON.parse(text); } catch (e) { return fallback; }
  }
  all(".filters[data-target]").forEach(function (bar) {
    var table = document.getElementById(bar.getAttribute("data-target"));
    if (!table) { return; }
    var items = Array.prototype.slice.call(table.tBodies);
    var text = items.map(function (b) { return b.textContent.toLowerCase(); });
    var groups = items.map(function (b) { return parse(b.getAttribute("data-g") || "[]", []); });
    var scores = items.map(function (b) { return parse(b.getAttribute("data-s") || "[]", []); });
    var more = document.querySelector('button.more[data-for="' + table.id + '"]');
    var shown = bar.querySelector(".shown");
    var limit = PAGE;
    var order = items.map(function (b, i) { return i; });
    var sortedBy = "";
    function reorder(key) {
      order = items.map(function (b, i) { return i; });
      if (key !== "") {
        var at = function (i) { var v = scores[i][+key]; return typeof v === "number" ? v : -Infinity; };
        order.sort(function (a, b) { return at(b) - at(a) || a - b; });
      }
      order.forEach(function (i) { table.appendChild(items[i]); });
      sortedBy = key;
    }
    function value(name) {
      var el = bar.querySelector('[data-filter="' + name + '"]');
      return el ? el.value : "";
    }
    function same(b, name, wanted) { return !wanted || b.getAttribute("data-" + name) === wanted; }
    function apply() {
      var q = value("q").trim().toLowerCase(), group = value("group"), score = value("score");
      var low = parseFloat(value("min")), high = parseFloat(value("max"));
      var wanted = {status: value("status"), f: value("failure"), dir: value("dir")};
      var matching = 0, visible = 0;
      if (value("sort") !== sortedBy) { reorder(value("sort")); }
      order.forEach(function (i) {
        var b = items[i];
        var ok = (!q || text[i].indexOf(q) >= 0) && same(b, "status", wanted.status) &&
          same(b, "f", wanted.f) && same(b, "dir", wanted.dir) && (!group || groups[i].indexOf(group) >= 0);
        if (ok && score !== "") {
          var v = scores[i][+score];
          ok = typeof v === "number" && (isNaN(low) || v >= low) && (isNaN(high) || v <= high);
        }
        if (ok) { matching += 1; }
        b.hidden = !(ok && matching <= limit);
        if (!b.hidden) { visible += 1; }
      });
      if (shown) {
        shown.textContent = visible + " shown, " + matching + " matching, " + items.length + " on this page";
      }
      if (more) { more.hidden = matching <= limit; }
    }
    bar.addEventListener("input", function () { limit = PAGE; apply(); });
    bar.addEventListener("change", function () { limit = PAGE; apply(); });
    if (more) { more.addEventListener("click", function () { limit += 5 * PAGE; apply(); }); }
    table.addEventListener("click", function (event) {
      var row = event.target.closest ? event.target.closest("tr.sum") : null;
      if (!row || !row.nextElementSibling) { return; }
      row.nextElementSibling.hidden = !row.nextElementSibling.hidden;
    });
    all("a[data-failure]").forEach(function (link) {
      link.addEventListener("click", function () {
        all("[data-filter]", bar).forEach(function (el) { el.value = ""; });
        var select = bar.querySelector('[data-filter="failure"]');
        if (select) { select.value = link.getAttribute("data-failure"); }
        limit = PAGE;
        apply();
      });
    });
    apply();
  });
  all("table.sortable").forEach(function (table) {
    all("th[data-sort]", table).forEach(function (th) {
      th.addEventListener("click", function () {
        var key = "data-" + th.getAttribute("data-sort");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var sign = th.getAttribute("aria-sort") === "descending" ? 1 : -1;
        function number(row) { var v = parseFloat(row.getAttribute(key)); return isNaN(v) ? -Infinity : v; }
        rows.sort(function (a, b) { var x = number(a), y = number(b); return x === y ? 0 : (x < y ? -sign : sign); });
        all("th[aria-sort]", table).forEach(function (other) { other.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", sign < 0 ? "descending" : "ascending");
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
})();
"""
