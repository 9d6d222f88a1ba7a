"""The offline path moves rows in batches: each batch keeps every row once, in order, and is cheap to size."""

import pickle

import apache_beam as beam
import yaml
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beameval.core.records import GeneratedRow, InputRow
from pipeline.config import load_config
from pipeline.graph import build_graph
from transforms.read import ReadRows, list_dataset_files
from transforms.row_batches import PackedRows, RowBatch, RowBatchCoder, rows_of, unpacked_batches


def test_read_emits_batches_holding_every_row_once_in_dataset_order(write_parquet, write_jsonl, tmp_path):
    write_parquet([{"q": str(i)} for i in range(70)], "a.parquet", row_group_size=16)
    write_jsonl([{"q": str(i)} for i in range(30)], "b.jsonl")
    paths = list_dataset_files(str(tmp_path / "*"))
    pipeline = beam.Pipeline(runner=FnApiRunner())
    batches = pipeline | ReadRows(paths, "auto", 90, batch_rows=7)
    shapes = batches | beam.Map(lambda batch: (type(batch).__name__, [row.row_index for row in batch]))
    # a.parquet: row groups of 16, 16, 16, 16, 6 rows; b.jsonl: 30 rows, 20 of them under the limit
    expected = []
    for start, size in ((0, 16), (16, 16), (32, 16), (48, 16), (64, 6), (70, 20)):
        indices = list(range(start, start + size))
        expected += [("RowBatch", indices[i : i + 7]) for i in range(0, size, 7)]
    assert_that(shapes, equal_to(expected))
    pipeline.run().wait_until_finish()


def test_rows_of_gives_a_batch_rows_or_the_one_row():
    row = InputRow(3, {"q": "x"})
    assert list(rows_of(RowBatch([row, row]))) == [row, row]
    assert list(rows_of(row)) == [row]


def test_coder_round_trips_and_sizes_a_batch_from_its_first_row():
    rows = RowBatch(InputRow(i, {"q": "x" * 10}) for i in range(1000))
    coder = RowBatchCoder()
    decoded = coder.decode(coder.encode(rows))
    assert isinstance(decoded, RowBatch) and decoded == rows
    one = len(pickle.dumps(rows[0], pickle.HIGHEST_PROTOCOL))
    assert coder.estimate_size(rows) == 1000 * one
    assert coder.estimate_size(RowBatch()) == 1
    assert beam.coders.registry.get_coder(RowBatch).__class__ is RowBatchCoder


def _element_types(config_path, tmp_path):
    config = load_config(str(config_path))
    pipeline = beam.Pipeline(runner=FnApiRunner())
    build_graph(pipeline, config, [config.dataset.path], str(tmp_path / "out"), None, "run")
    types = {}

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            for tag, pcoll in node.outputs.items():
                types[(node.full_label, tag)] = pcoll.element_type

    pipeline.visit(Visitor())
    return types


def test_only_offline_scoring_runs_on_batches(write_jsonl, tmp_path):
    data = write_jsonl([{"q": "a", "answer": "a"}], "d.jsonl")
    metric = {
        "type": "exact-match",
        "reference": "{{ item.answer }}",
        "candidate": "{{ item.q }}",
    }
    offline = tmp_path / "offline.yaml"
    offline.write_text(yaml.safe_dump({"dataset": {"path": str(data)}, "metrics": [metric]}))
    online = tmp_path / "online.yaml"
    target = {"model": {"url": "http://127.0.0.1:9/v1", "name": "m", "format": "openai"}}
    prompt = {"messages": [{"role": "user", "content": "{{ item.q }}"}]}
    online.write_text(
        yaml.safe_dump(
            {
                "dataset": {"path": str(data)},
                "target": target,
                "prompt_template": prompt,
                "metrics": [metric],
            }
        )
    )
    offline_types = _element_types(offline, tmp_path)
    assert offline_types[("ReadRows/ReadSplits/ParDo(_ReadSplits)", None)] is RowBatch
    assert offline_types[("ScoreRows/ParDo(ScoreRows)", None)] is RowBatch
    online_types = _element_types(online, tmp_path)
    assert online_types[("ReadRows/ReadSplits/ParDo(_ReadSplits)", None)] is not RowBatch
    assert online_types[("ScoreRows/ParDo(ScoreRows)", None)] is not RowBatch


def test_packed_rows_round_trip_compressed_and_become_a_row_batch():
    rows = [
        GeneratedRow(i, {"question": f"q{i}", "context": "the same long context " * 20}, {"output_text": f"a{i}"})
        for i in range(500)
    ]
    packed = PackedRows(rows)
    encoded = pickle.dumps(packed, pickle.HIGHEST_PROTOCOL)
    assert len(encoded) * 5 < len(pickle.dumps(rows, pickle.HIGHEST_PROTOCOL))  # what a checkpoint holds
    back = pickle.loads(encoded)
    assert type(back) is PackedRows and back == rows
    batch = unpacked_batches(back)
    assert type(batch) is RowBatch and batch == rows
    assert unpacked_batches(rows[0]) is rows[0]


def test_packed_rows_are_compressed_once_and_a_decoded_pack_keeps_its_bytes(monkeypatch):
    """Beam encodes a sampled element again to size it: the second encoding reuses the first's bytes."""
    import transforms.row_batches as row_batches

    calls = []
    real = row_batches.pack_bytes
    monkeypatch.setattr(row_batches, "pack_bytes", lambda data: calls.append(len(data)) or real(data))
    packed = PackedRows(GeneratedRow(i, {"q": "x" * i}, {"output_text": str(i)}) for i in range(50))
    first = pickle.dumps(packed, pickle.HIGHEST_PROTOCOL)
    assert pickle.dumps(packed, pickle.HIGHEST_PROTOCOL) == first and len(calls) == 1
    back = pickle.loads(first)
    assert back == packed and pickle.dumps(back, pickle.HIGHEST_PROTOCOL) == first and len(calls) == 1
    assert unpacked_batches(back) == list(packed)
