"""GenerateSamples run again over the same bundle, in process, against the test server: nothing is paid twice.

The DoFn is driven by hand as a runner drives it (``setup``, ``start_bundle``, ``process``,
``finish_bundle``): a first attempt whose bundle is abandoned (a later stage failed; no
``finish_bundle``) while some requests are still in flight and others answered, then the
same rows again. The server counts the requests it receives per prompt.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from beameval.cache.journal import JOURNAL_DIR, JournalWriter
from beameval.config.schema import parse_config
from beameval.core.prompt import render_prompt
from beameval.core.records import GeneratedRow, InputRow
from beameval.core.templates import Template
from transforms.generate import GenerateSamples

ROWS = 40


def _rows(config: Any, questions: list[str]) -> list[InputRow]:
    template = Template(config.prompt_template, "prompt_template")
    return [render_prompt(template, InputRow(i, {"question": q})) for i, q in enumerate(questions)]


def _dofn(server, tmp_path: Path, run_id: str, parallelism: int = 8) -> tuple[GenerateSamples, Any]:
    config = parse_config(
        {
            "dataset": {"path": str(tmp_path / "unused.jsonl")},
            "target": {"model": {"url": server.base_url, "name": "test-model", "format": "openai"}},
            "prompt_template": {"messages": [{"role": "user", "content": "{{ item.question }}"}]},
            "params": {"parallelism": parallelism, "max_retries": 0},
            "metrics": [{"type": "exact-match", "reference": "{{ item.question }}"}],
        }
    )
    dofn = GenerateSamples(config, run_id, str(tmp_path / "out" / JOURNAL_DIR))
    dofn.setup()
    return dofn, config


def _bundle(dofn: GenerateSamples, rows: list[InputRow]) -> list[GeneratedRow]:
    dofn.start_bundle()
    out = [generated for row in rows for generated in dofn.process(row)]
    return out + [windowed.value for windowed in dofn.finish_bundle()]


def test_a_bundle_run_again_in_process_sends_nothing_twice(clean_server, tmp_path: Path):
    clean_server.configure(latency_ms=200)
    dofn, config = _dofn(clean_server, tmp_path, "retry-in-process", parallelism=64)  # no row waits for a slot
    rows = _rows(config, [f"question {i}" for i in range(ROWS)])
    half = ROWS // 2
    try:
        # The first attempt: half the rows answered (and journalled), the other half still in flight when the
        # bundle is abandoned (no finish_bundle: a later stage failed).
        dofn.start_bundle()
        first = [generated for row in rows[:half] for generated in dofn.process(row)]
        deadline = time.monotonic() + 30
        while clean_server.stats()["by_status"].get("200", 0) < half or dofn._journal.in_flight:
            assert time.monotonic() < deadline, "the first half was never answered"
            time.sleep(0.01)  # waiting for a real server (and the client reading its replies): no clock to inject
        first += [generated for row in rows[half:] for generated in dofn.process(row)]
        assert len(first) == half and len(dofn._journal.in_flight) == ROWS - half
        # The retry, in the same process: the same rows again, to the end of the bundle.
        again = _bundle(dofn, rows)
    finally:
        dofn.teardown()
    stats = clean_server.stats()
    assert stats["requests"] == ROWS and set(stats["per_prompt"].values()) == {1}
    assert sorted(r.row_index for r in again) == list(range(ROWS))
    assert all(r.failure is None and r.sample["output_text"] == f"question {r.row_index}" for r in again)
    # Each row carries its own request once (the first attempt's rows were thrown away): none is a hit.
    assert all(r.inference.attempts == 1 and not r.inference.cached for r in again)


def test_a_lost_worker_s_journal_answers_its_rows_elsewhere_and_a_repeated_prompt_is_still_sent(
    clean_server, tmp_path: Path
):
    """The rows of a worker that died after answering them, retried by a worker that never saw them."""
    dofn, config = _dofn(clean_server, tmp_path, "retry-other-process")
    rows = _rows(config, [f"question {i}" for i in range(ROWS)] + ["question 0"])  # row 40 repeats row 0's request
    try:
        assert len(_bundle(dofn, rows[:ROWS])) == ROWS
    finally:
        dofn.teardown()
    assert clean_server.stats()["requests"] == ROWS
    JournalWriter.close_all()  # that process is gone: the next writer (and its index) starts empty
    other, _ = _dofn(clean_server, tmp_path, "retry-other-process")
    try:
        assert len(other._journal.index) == 0
        again = _bundle(other, rows)  # start_bundle reads the journal's shards
    finally:
        other.teardown()
    # Only row 40 is sent: a row of its own, as in a run without retries (one request a row).
    assert clean_server.stats()["per_prompt"] == {f"question {i}": 2 if i == 0 else 1 for i in range(ROWS)}
    assert sorted(r.row_index for r in again) == list(range(ROWS + 1))
    assert all(r.inference.attempts == 1 and not r.inference.cached for r in again)
    assert all(r.sample["output_text"] == f"question {r.row_index % ROWS}" for r in again)
