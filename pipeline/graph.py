"""The evaluation graph: read -> render -> generate (or pass through) -> score -> write + summarise."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beameval.cache.journal import JOURNAL_DIR
from beameval.config.schema import EvalConfig
from beameval.core.records import InputRow
from beameval.core.scoring import RowScorer
from beameval.inference.first_request import HandedReply
from pipeline.options import progress_settings
from pipeline.provenance import collect_provenance
from transforms.aggregate import SummarizeRun
from transforms.baseline import Baseline, needs_baseline
from transforms.batch_endpoint import batch_metrics, uses_batch_mode
from transforms.cache import STORED, AnswerHits, LookupResponses
from transforms.generate import GenerateSamples, passthrough_offline, repeat_row
from transforms.metric_batch import BatchMetricCalls
from transforms.metric_cache import LookupMetricResponses
from transforms.metric_calls import CallMetricEndpoints, needs_metric_calls
from transforms.progress import ProgressLines
from transforms.read import ReadRows
from transforms.render import RenderPrompts
from transforms.retrieval import Retrieve
from transforms.row_batches import OFFLINE_BATCH_ROWS, RowBatch, rows_of, unpacked_batches
from transforms.score import ERRORS, ScoreRows
from transforms.spread import SpreadRows
from transforms.store_join import ReadResponses
from transforms.target_batch import BatchSamples
from transforms.write import WriteErrors, WriteRows, WriteSummary

__all__ = ["TargetBranch", "build_graph", "build_job_graph", "build_targets_graph"]


def build_graph(
    pipeline: beam.Pipeline,
    config: EvalConfig,
    paths: list[str],
    output: str,
    limit: int | None,
    run_id: str,
    stored_shards: Sequence[str] | None = None,
    stage: str | None = None,
    handed: HandedReply | None = None,
    wave: Callable[[InputRow], InputRow] | None = None,
) -> None:
    """Add the whole evaluation to ``pipeline``.

    Args:
        pipeline: the Beam pipeline to extend.
        config: the validated evaluation config.
        paths: the dataset files, sorted.
        output: the output directory.
        limit: evaluate only rows with ``row_index < limit``.
        run_id: unique per run; lets workers stop a failing strict run early.
        stored_shards: response-store and journal shards to answer requests from
            (``--resume``, ``cache:``); None sends every request.
        stage: where rows/, errors/ and the summaries are written until the run publishes
            them into ``output`` (``pipeline.output_dir``); None writes to ``output``.
        handed: the preflight's answer to the first row's request
            (``pipeline.first_answer.HandOff``): ``GenerateSamples`` answers that row with it.
        wave: ``--decide``'s filter (``transforms.decide.MarkDecided``): rows outside the waves so far are skipped.
    """
    in_batches = _scores_offline(config) or _hits_in_batches(config, stored_shards)
    read = ReadRows(paths, config.dataset.format, limit, OFFLINE_BATCH_ROWS if in_batches else None)
    samples = _read(pipeline, config, read, in_batches)
    if wave is not None:
        samples = samples | "DecideWave" >> _each_row(wave, in_batches)
    scored = _evaluate(read.fingerprints, samples, config, output, run_id, stored_shards, stage, handed)
    _progress(pipeline, scored, run_id, read, limit)


@dataclass(frozen=True)
class TargetBranch:
    """One target of a job: its single-target config (the workers'), where it writes, and its own run id."""

    name: str
    config: EvalConfig
    output: str
    run_id: str
    stored_shards: Sequence[str] | None
    stage: str
    handed: HandedReply | None = None
    #: ``--decide``'s filter for this target (``transforms.decide.MarkDecided``); None evaluates every row.
    wave: Callable[[InputRow], InputRow] | None = None


def build_targets_graph(
    pipeline: beam.Pipeline, config: EvalConfig, branches: Sequence[TargetBranch], paths: list[str], limit: int | None
) -> None:
    """Add a multi-target evaluation to ``pipeline``: read and render once, then one branch per target.

    Every prompt is rendered once, before the fan-out (``transforms.render``), and each
    branch builds its target's request bodies from the rendered prompts; targets cannot
    differ in what a prompt depends on (``EvalConfig.for_target`` changes only ``target:``
    and how requests are sent).

    Each branch is the single-target graph after the read (:func:`build_graph`'s own stages,
    under the target's name), with that target's config, journal, store shards and staging
    folder, so ``OUT_DIR/targets/NAME/`` is what a run of that target alone writes. Branches
    rather than one keyed stage: each target keeps its own engine (concurrency limit, retries,
    rate limits), and every per-target stage, writer and CombineFn is reused as it is.

    Args:
        pipeline: the Beam pipeline to extend.
        config: the multi-target config (its dataset, repeats and prompt are every branch's).
        branches: one per target, in the config's order.
        paths: the dataset files, sorted.
        limit: evaluate only rows with ``row_index < limit``.
    """
    read = ReadRows(paths, config.dataset.format, limit)
    samples = _read(pipeline, config, read)
    baseline = Baseline() if needs_baseline(config.metrics) else None  # pairwise judges: the first target's answers
    scored = [(read.fingerprints, samples) | branch.name >> _Branch(branch, baseline) for branch in branches]
    # One progress line for the run, counting the first target's rows (every target scores each row once).
    _progress(pipeline, scored[0], branches[0].run_id, read, limit)


class _Branch(beam.PTransform):  # type: ignore[misc]
    """One target's stages, nested under its name so the labels of every branch are distinct."""

    def __init__(self, branch: TargetBranch, baseline: Baseline | None = None) -> None:
        super().__init__()
        self._branch = branch
        self._baseline = baseline

    def expand(self, inputs: tuple[beam.PCollection, beam.PCollection]) -> beam.PCollection:
        fingerprints, samples = inputs
        branch = self._branch
        if branch.wave is not None:
            samples = samples | "DecideWave" >> _each_row(branch.wave, in_batches=False)
        return _evaluate(
            fingerprints,
            samples,
            branch.config,
            branch.output,
            branch.run_id,
            branch.stored_shards,
            branch.stage,
            branch.handed,
            rendered=True,
            baseline=self._baseline,
        )


def _read(pipeline: beam.Pipeline, config: EvalConfig, read: ReadRows, in_batches: bool = False) -> beam.PCollection:
    """The samples to evaluate: the rows as read, each K times with ``params.repeats``.

    With ``targets:`` each row's prompt is rendered here, once for every target and sample
    (a single-target run renders in :func:`_to_send`, after the spread). ``in_batches``: the
    read gives ``RowBatch`` elements (``transforms.row_batches``), and so does every step here.
    """
    rows = pipeline | "ReadRows" >> read
    if config.targets:
        rows = rows | "RenderPrompts" >> _render(config)
    repeats = config.params.repeats
    if repeats == 1:
        return rows
    # params.repeats: each row becomes K samples (sample_index 0..K-1) before anything is sent or looked up.
    repeat = beam.FlatMap(repeat_row, repeats)
    return rows | "RepeatRows" >> (repeat.with_output_types(RowBatch) if in_batches else repeat)


def _evaluate(
    fingerprints: beam.PCollection,
    samples: beam.PCollection,
    config: EvalConfig,
    output: str,
    run_id: str,
    stored_shards: Sequence[str] | None,
    stage: str | None,
    handed: HandedReply | None = None,
    rendered: bool = False,
    baseline: Baseline | None = None,
) -> beam.PCollection:
    """Generate, score, write and summarise ``samples`` for ``config``'s target; return the scored rows.

    ``rendered``: the samples' prompts were rendered before (a multi-target run's fan-out).
    ``baseline``: the first target's answers, which a pairwise judge compares each row with.
    """
    pipeline = samples.pipeline
    written = stage or output
    scorer = RowScorer(config.metrics, config.dataset.id_field)
    journal = FileSystems.join(output, JOURNAL_DIR)  # every successful response is recorded as it arrives
    stored = None if stored_shards is None else pipeline | "ReadResponses" >> ReadResponses(stored_shards)
    metric_calls = needs_metric_calls(config.metrics)
    joined = list(stored_shards or ())  # the send-time journal look-up skips what the join read
    if config.target is not None and config.target.retrieval is not None:  # search a corpus, not generate
        generated = samples | "Retrieve" >> Retrieve(config, run_id, journal, stored)
    elif config.target is not None:
        # The store's hits travel in row batches when every stage after the join takes them (as offline rows do).
        in_batches = _hits_in_batches(config, stored_shards)
        to_send = _to_send(samples, config, stored, rendered, in_batches)
        # A checkpoint after the paid calls: a later stage that fails (or a lost worker) never runs them again.
        if uses_batch_mode(config):  # the requests left after the lookup go, together, through the Batch API
            # Its answers cross the checkpoint packed; the metric calls take them one row at a time.
            answer = BatchSamples(config, journal, output, run_id)
            generated = to_send | "BatchSamples" >> answer | "CheckpointGenerated" >> beam.Reshuffle()
            if metric_calls:
                generated = generated | "UnpackGenerated" >> beam.FlatMap(rows_of)
            else:
                generated = generated | "RowBatches" >> beam.Map(unpacked_batches)
        elif in_batches:  # only the sent rows cross the checkpoint: the store's hits cost nothing to redo
            generate = GenerateSamples(config, run_id, journal, handed, joined)
            sent = to_send.misses | "GenerateSamples" >> beam.ParDo(generate)
            checked = sent | "CheckpointGenerated" >> beam.Reshuffle()
            answer = beam.ParDo(AnswerHits()).with_output_types(RowBatch)
            generated = (checked, to_send[STORED]) | "WithStored" >> beam.Flatten() | "AnswerHits" >> answer
        else:
            generate = GenerateSamples(config, run_id, journal, handed, joined)
            generated = to_send | "GenerateSamples" >> beam.ParDo(generate) | "CheckpointGenerated" >> beam.Reshuffle()
    elif metric_calls:
        generated = samples | "NoTarget" >> beam.Map(passthrough_offline)
    else:  # offline scoring: ScoreRows passes each row through itself (one step less per row)
        generated = samples
    if baseline is not None:  # before the judge's store look-up: its requests show both answers
        generated = baseline.attach(generated)
    if metric_calls:
        if stored is not None:
            generated = generated | "LookupMetricResponses" >> LookupMetricResponses(config.metrics, stored)
        generated = generated | "CallMetricEndpoints" >> beam.ParDo(
            CallMetricEndpoints(config.metrics, journal, config.params, run_id, joined)
        )
        batched = bool(batch_metrics(config.metrics))
        if batched:  # judges in batch mode: their requests go, together, through the Batch API
            calls = BatchMetricCalls(config.metrics, journal, output, config.params, run_id)
            generated = generated | "BatchMetricCalls" >> calls
        generated = generated | "CheckpointMetricCalls" >> beam.Reshuffle()
        if batched:  # the rows that waited for a batch judge crossed the checkpoint packed
            generated = generated | "RowBatches" >> beam.Map(unpacked_batches)
    offline = _scores_offline(config)
    score = beam.ParDo(ScoreRows(config.metrics, config.dataset.id_field, config.target, from_input=offline))
    if offline or generated.element_type is RowBatch:  # batches in, batches out (transforms.row_batches)
        score = score.with_output_types(RowBatch)
    scored = generated | "ScoreRows" >> score.with_outputs(ERRORS, main="rows")
    # results.json provenance: the dataset fingerprint, and the models seen in the target's replies
    collect_provenance(fingerprints, None if config.target is None else generated, written)
    _ = scored.rows | "WriteRows" >> WriteRows(written, scorer.score_names, scorer.label_names, scorer.detail_names)
    _ = scored[ERRORS] | "WriteErrors" >> WriteErrors(written)
    summarize = SummarizeRun(scorer.score_names, config.statistics, config.params.repeats)
    _ = scored.rows | "SummarizeRun" >> summarize | "WriteSummary" >> WriteSummary(written)
    return scored.rows


def _scores_offline(config: EvalConfig) -> bool:
    """No target and no metric endpoint: ScoreRows takes the rows as read, in batches (transforms.row_batches).

    A row that waits for a reply travels alone.
    """
    return config.target is None and not needs_metric_calls(config.metrics)


def _hits_in_batches(config: EvalConfig, stored_shards: Sequence[str] | None) -> bool:
    """A target's run that joins the store, and whose every stage after the join takes row batches.

    Its rows are read in batches too (a single-target run), and stay in them through
    rendering, keying and the join: Beam's hand-over of an element is paid once a batch.
    """
    return (
        stored_shards is not None
        and config.target is not None
        and config.target.retrieval is None
        and not needs_metric_calls(config.metrics)
        and not uses_batch_mode(config)
    )


def _each_row(step: Callable[[InputRow], InputRow], in_batches: bool) -> beam.PTransform:
    """``step`` on every row, whether the elements are rows or (``in_batches``) ``RowBatch`` lists of them."""
    if not in_batches:
        return beam.Map(step)
    return beam.Map(lambda batch: RowBatch(map(step, batch))).with_output_types(RowBatch)


def _to_send(
    samples: beam.PCollection, config: EvalConfig, stored: beam.PCollection | None, rendered: bool, in_batches: bool
) -> Any:
    """The samples on their way to the target: prompts rendered, spread over the workers or joined with the store.

    Spread rows over every worker before the slow stage: one file is read by one worker, but
    each worker process has its own `parallelism` requests in flight. The store's join spreads
    them too; the rows it answered pass through GenerateSamples unsent. A single-target run
    renders after the spread, so its prompts never cross that shuffle (a multi-target run
    renders before its fan-out, ``rendered``: once for every target). ``in_batches``: the
    store's hits go past GenerateSamples by their own output (``LookupResponses``), the rows
    to send by ``misses``.
    """
    if stored is None:  # batch mode spreads its requests over its own keys: no second shuffle of every row
        spread = samples if uses_batch_mode(config) else samples | "SpreadRows" >> SpreadRows()
        return spread if rendered else spread | "RenderPrompts" >> _render(config)
    keyed = samples if rendered else samples | "RenderPrompts" >> _render(config, in_batches)
    lookup = LookupResponses(config, stored, in_batches, rows_in_batches=in_batches and not rendered)
    return keyed | "LookupResponses" >> lookup


def _render(config: EvalConfig, in_batches: bool = False) -> beam.ParDo:
    """``RenderPrompts``; ``in_batches``: its elements are ``RowBatch`` lists (``transforms.row_batches``)."""
    render = beam.ParDo(RenderPrompts(config.prompt_template))
    return render.with_output_types(RowBatch) if in_batches else render


def _progress(
    pipeline: beam.Pipeline, scored: beam.PCollection, run_id: str, read: ReadRows, limit: int | None
) -> None:
    interval, _, local = progress_settings(pipeline.options)
    if interval > 0:
        _ = scored | "Progress" >> ProgressLines(run_id, interval, read.splits if local else None, limit)


def build_job_graph(
    pipeline: beam.Pipeline, config: EvalConfig, branches: Sequence[TargetBranch], paths: list[str], limit: int | None
) -> None:
    """Add a job to ``pipeline``: a single-target config's graph (:func:`build_graph`), else one branch per target.

    ``branches``: one per target (exactly one for a single-target ``config``).
    """
    if config.targets is not None:
        build_targets_graph(pipeline, config, branches, paths, limit)
        return
    (b,) = branches
    build_graph(pipeline, b.config, paths, b.output, limit, b.run_id, b.stored_shards, b.stage, b.handed, b.wave)
