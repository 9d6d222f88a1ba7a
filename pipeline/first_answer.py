"""The preflight's real request and its answer handed to the run: recorded in the journal, used, counted once.

``first_answer`` builds the first row's request with the run's own code (``check_row``,
``transforms.cache.target_request``, the key ``GenerateSamples`` gives it) and sends it
(``beameval.inference.first_request``), unless the journal (``--resume``) or a readable
store already answers it (``answered_in``). The preflight runs before OUT_DIR is
prepared (a run it stops leaves OUT_DIR as it was), so the answer is kept in memory. Once
``prepare_output`` has made OUT_DIR ready, ``hand_off`` writes it into the journal,
``OUT_DIR/_responses/``, as a shard of its own holding the entry ``GenerateSamples`` would
have written (so a killed run's ``--resume`` finds it like any other), and hands it to
``GenerateSamples`` (``HandOff.reply``): that row's sample 0, if its request has the
preflight's key, is answered from it as from a fresh reply, unsent and not journalled
again; every other row costs one integer comparison. The run's store lookups are listed
before that shard is written, so a fresh run without a store sends its rows straight to
the target, never through the store's join. The row was paid for by this run, so it is
no cache hit: it carries the preflight's attempts and latency and counts in ``usage`` as
one request with its tokens, and its tokens and dollars come off the budget the workers
get (``HandOff.spent_after``). A ``--resume`` finds the answer in the journal like any
other (``answered_in``), so the preflight does not send it again. The request draws from what the job's budget has left
(``spent``), as the workers do: a ``--resume`` of a job that spent its budget sends nothing.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from beameval.cache import store
from beameval.cache.entry import decode_entry, iter_lines, line_key
from beameval.cache.journal import JOURNAL_DIR, JournalWriter
from beameval.cache.recording import sample_from_stored
from beameval.config.cache import StoreUse
from beameval.config.schema import EvalConfig
from beameval.core.console import printable
from beameval.core.errors import EvaluatorError
from beameval.core.prompt import render_prompt
from beameval.core.records import InputRow
from beameval.core.sanitize import RowTooLarge, check_row
from beameval.core.templates import Template
from beameval.inference.first_request import FirstAnswer, HandedReply, keyed, send_first_request
from beameval.inference.targets import make_handler
from beameval.inference.targets.base import TargetHandler
from pipeline.cache import lookup_shards
from pipeline.options import EvalOptions
from pipeline.output_dir import refuse_earlier_outputs
from pipeline.quota import budget_left
from transforms.batch_endpoint import uses_batch_mode
from transforms.cache import files_for, target_request

__all__ = ["FirstRow", "HandOff", "answered_in", "first_answer", "hand_off"]

#: Rounds of looking for the shards that replaced deleted ones (a compaction during a compaction's aftermath).
_SUCCESSOR_ROUNDS = 3


class FirstRow(NamedTuple):
    """The dataset's first readable row, as the preflight read it: the one whose request it sends."""

    row_index: int
    item: dict[str, Any]


@dataclass(frozen=True)
class HandOff:
    """What the run takes from its preflight: the answer for ``GenerateSamples``, and what it cost.

    Attributes:
        reply: the row the preflight answered and its call (None: nothing was sent).
        tokens: the tokens the answer used.
        usd: its cost.
    """

    reply: HandedReply | None = None
    tokens: float = 0.0
    usd: float = 0.0

    def spent_after(self, spent: tuple[float, float]) -> tuple[float, float]:
        """``spent`` (tokens, dollars of earlier invocations) plus the preflight's: what the workers' budget lacks."""
        return spent[0] + self.tokens, spent[1] + self.usd


def first_answer(
    config: EvalConfig,
    first: FirstRow | None,
    output: str,
    flags: EvalOptions,
    use: StoreUse,
    *,
    job: str,
    spent: tuple[float, float] = (0.0, 0.0),
) -> tuple[int, FirstAnswer] | None:
    """Send the target the first row's request, built as the run builds it; its answer, or None when not sent.

    Called once OUT_DIR is locked and before it is prepared. Not sent in batch mode (it
    would be paid at the online price, not the batch one), or when the journal
    (``--resume``) or a readable store already answers that row.

    Args:
        config: the run's (single-target) config.
        first: the first row as read (``pipeline.preflight.preflight``); None: nothing to send.
        output: the run's output directory.
        flags: the run's flags (``--resume``, ``--overwrite``).
        use: the run's use of the store.
        job: the run's id (its shared rate limit).
        spent: what the job spent before (tokens, dollars: earlier invocations, earlier targets'
            first requests): the request is checked against what ``params.budget`` has left.

    Returns:
        The row's index and its answer, for ``hand_off``.

    Raises:
        OutputError: ``output`` holds outputs and neither ``--overwrite`` nor ``--resume``
            is set (the request would be paid for a run that cannot start).
        EndpointError: no usable answer (``send_first_request``).
    """
    target = config.target
    if first is None or target is None or uses_batch_mode(config) or target.retrieval is not None:
        return None  # a retrieval target's first answer needs the whole corpus embedded: no early request
    refuse_earlier_outputs(output, flags.overwrite, flags.resume)
    try:
        checked, _notes = check_row(first.item)  # the row as the run reads it
    except RowTooLarge:
        return None  # the run fails that row as it reads it
    handler = make_handler(target, config.params, target.api_key())
    prompt = Template(config.prompt_template, "prompt_template") if config.prompt_template else None
    try:
        row = render_prompt(prompt, InputRow(first.row_index, checked))
        request = keyed(handler, target_request(handler, row))
    except EvaluatorError:  # the run fails that row, saying why
        return None
    if request is None:
        return None
    prepared, key = request
    stored = lookup_shards(config, output, use, flags.resume) or []
    if answered_in(stored, key, handler):
        return None  # the run answers that row from the journal or the store
    model = target.model.name if target.model is not None else None
    where = target.where
    sending = send_first_request(
        handler,
        prepared,
        key,
        where=where,
        model=model,
        access=target.endpoint,
        params=budget_left(config.params, spent),
        job=job,
    )
    result = asyncio.run(sending)
    if result.warning is not None:
        print(printable(f"warning: {result.warning}"), file=sys.stderr)
    return None if result.answer is None else (first.row_index, result.answer)


def hand_off(first: tuple[int, FirstAnswer] | None, output: str) -> HandOff:
    """Record the preflight's answer in ``output``'s journal (prepared by now); nothing when there is none.

    Call it after the run's store lookups are listed (``pipeline.cache.lookup_shards``):
    the row is answered from ``HandOff.reply``, and the shard is for a later ``--resume``.
    """
    if first is None:
        return HandOff()
    row_index, answer = first
    journal = f"{output.rstrip('/')}/{JOURNAL_DIR}"
    writer = JournalWriter(journal, files_for(journal), flush_interval=0)  # its own shard, closed at once
    writer.record(answer.key, answer.response, answer.model)
    writer.close()
    return HandOff(answer.handed(row_index), float(answer.tokens), answer.usd)


def answered_in(shards: Sequence[str], key: str, handler: TargetHandler) -> bool:
    """Whether one of ``shards`` (the journal on ``--resume``, a readable store) holds a usable answer to ``key``.

    Read in the driver, one shard after another until a copy that parses is found: the
    run would answer that row from it, so the preflight must not pay for it again. A shard
    that ``compact`` or ``prune`` deleted since it was listed is replaced by the shards they
    wrote before deleting it (``store.successors``), as the run's own read does.
    """
    listed, pending = list(shards), list(shards)
    for _ in range(_SUCCESSOR_ROUNDS):
        gone = []
        for path in pending:
            files = files_for(path)
            try:
                stream = files.open(path)
            except Exception:  # noqa: BLE001 - every file system says "not found" its own way
                if files.exists(path):
                    raise
                gone.append(path)
                continue
            with stream:
                for line in iter_lines(stream):
                    if line_key(line) == key and sample_from_stored(handler, decode_entry(line)) is not None:
                        return True
        if not gone:
            return False
        pending = store.successors(lambda folder: store.shards(files_for(folder), folder), listed, gone)
        listed += pending
    return False
