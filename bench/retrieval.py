"""Retrieval benchmark: the retrieval target on a synthetic BEIR corpus against the test server's embeddings.

For each corpus size, two runs against one test server (hashed bag-of-words embeddings):

* **ours**: ``python -m pipeline.run`` with ``target.retrieval`` (FnApiRunner): wall time,
  peak RSS of its process tree, and the embeddings requests the server answered (each
  document must be embedded once: ``ceil(docs / batch_size)`` corpus requests plus one per
  query);
* **in-memory** (the reference SDK's way, ``nemo_evaluator_sdk.retrieval.dense_search``):
  one process embeds everything through the same server (batches of ``batch_size``, two in
  flight), holds every vector in one float32 matrix and scores chunks of queries against it.

Both must return the same top-10 lists (checked on every query). Usage::

    python bench/retrieval.py --docs 10000 100000 --queries 1000 [--json out.json]
    python bench/retrieval.py --smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from bench.scale import TreeMemory  # noqa: E402  (needs the project root on sys.path)
from bench.sides import our_env  # noqa: E402

BATCH = 64
TOP_K = 10
DIMENSIONS = 128  # the test server's hashed bag of words, wide enough that 4 query words find their document


def collection(folder: Path, docs: int, queries: int, seed: int = 38) -> None:
    """A BEIR folder: documents of 12-30 words from a 20,000-word vocabulary; each query is 4 words of one document."""
    rng = random.Random(seed)
    vocabulary = [f"w{n}" for n in range(20_000)]
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    texts = []
    with (folder / "corpus.jsonl").open("w") as corpus:
        for n in range(docs):
            words = rng.choices(vocabulary, k=rng.randint(12, 30))
            texts.append(words)
            corpus.write(json.dumps({"_id": f"d{n}", "title": "", "text": " ".join(words)}) + "\n")
    with (folder / "queries.jsonl").open("w") as query_file, (folder / "qrels" / "test.tsv").open("w") as qrels:
        qrels.write("query-id\tcorpus-id\tscore\n")
        for n in range(queries):
            target = rng.randrange(docs)
            query_file.write(json.dumps({"_id": f"q{n}", "text": " ".join(rng.sample(texts[target], 4))}) + "\n")
            qrels.write(f"q{n}\td{target}\t1\n")


def run_ours(folder: Path, work: Path, base_url: str) -> dict[str, Any]:
    import yaml

    config = {
        "dataset": {"path": str(folder), "format": "beir", "id_field": "query_id"},
        "target": {
            "retrieval": {
                "embeddings": {"url": base_url, "name": "bench-embed", "batch_size": BATCH, "dimensions": DIMENSIONS},
                "first_stage_k": TOP_K,
                "top_k": TOP_K,
            }
        },
        "params": {"parallelism": 8},
        "metrics": [{"type": "retrieval-recall", "k": [1, TOP_K]}, {"type": "retrieval-ndcg", "k": [TOP_K]}],
    }
    (work / "ours.yaml").write_text(yaml.safe_dump(config))
    output = work / "out"
    cmd = [sys.executable, "-m", "pipeline.run", "--config", str(work / "ours.yaml"), "--output", str(output)]
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=PROJECT_ROOT, env=our_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with TreeMemory(proc.pid) as memory:
        _stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"the run exited {proc.returncode}:\n{stderr[-3000:]}")
    results = json.loads((output / "results.json").read_text())
    import pyarrow.parquet as pq

    ranked = {}
    for path in sorted((output / "rows").glob("*.parquet")):
        for row in pq.read_table(path, columns=["id", "output_text"]).to_pylist():
            ranked[row["id"]] = [entry["id"] for entry in json.loads(row["output_text"])]
    scores = {s["name"]: s["mean"] for s in results["aggregate_scores"]["scores"]}
    return {
        "wall_s": round(wall, 1),
        "peak_rss_tree_mib": round(memory.peak_tree / 2**20),
        "peak_rss_single_mib": round(memory.peak_single / 2**20),
        "recall_10": scores.get(f"retrieval-recall.recall_{TOP_K}"),
        "ranked": ranked,
    }


def in_memory_side(folder: str, base_url: str, out: str) -> None:
    """The reference's dense search, in this process: every vector in one matrix (run as a subprocess)."""
    import httpx
    import numpy as np

    docs = [json.loads(line) for line in Path(folder, "corpus.jsonl").read_text().splitlines()]
    queries = [json.loads(line) for line in Path(folder, "queries.jsonl").read_text().splitlines()]

    async def encode(texts: list[str], input_type: str) -> list[list[float]]:
        batches = [texts[i : i + BATCH] for i in range(0, len(texts), BATCH)]
        gate = asyncio.Semaphore(2)  # the reference's embedding_in_flight default
        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:

            async def one(batch: list[str]) -> list[list[float]]:
                async with gate:
                    body = {
                        "model": "bench-embed",
                        "input": batch,
                        "input_type": input_type,
                        "dimensions": DIMENSIONS,
                    }
                    reply = (await client.post(f"{base_url}/embeddings", json=body)).json()
                    return [entry["embedding"] for entry in sorted(reply["data"], key=lambda e: e["index"])]

            parts = await asyncio.gather(*(one(batch) for batch in batches))
        return [vector for part in parts for vector in part]

    def unit(vectors: list[list[float]]) -> Any:
        matrix = np.asarray(vectors, dtype=np.float32)
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    documents = unit(asyncio.run(encode([d["text"] for d in docs], "passage")))
    query_vectors = unit(asyncio.run(encode([q["text"] for q in queries], "query")))
    ids = np.asarray([d["_id"] for d in docs])
    rank = np.argsort(np.argsort(ids, kind="stable"))
    ranked = {}
    chunk = max(1, 64_000_000 // len(ids))
    for start in range(0, len(queries), chunk):
        scores = query_vectors[start : start + chunk] @ documents.T
        for row, query in zip(scores, queries[start : start + chunk], strict=False):
            cutoff = row[np.argpartition(row, len(ids) - TOP_K)[len(ids) - TOP_K]]
            candidates = np.flatnonzero(row >= cutoff)
            ordered = candidates[np.lexsort((rank[candidates], -row[candidates]))][:TOP_K]
            ranked[query["_id"]] = [str(ids[i]) for i in ordered]
    Path(out).write_text(json.dumps(ranked))


def run_in_memory(folder: Path, work: Path, base_url: str) -> dict[str, Any]:
    out = work / "in_memory.json"
    cmd = [sys.executable, __file__, "--in-memory-side", str(folder), base_url, str(out)]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=our_env(), stderr=subprocess.PIPE, text=True)
    with TreeMemory(proc.pid) as memory:
        _out, stderr = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the in-memory side exited {proc.returncode}:\n{stderr[-3000:]}")
    return {
        "wall_s": round(time.perf_counter() - started, 1),
        "peak_rss_tree_mib": round(memory.peak_tree / 2**20),
        "ranked": json.loads(out.read_text()),
    }


def bench(docs: int, queries: int, ours_only: bool = False) -> dict[str, Any]:
    from beameval.testserver.harness import ServerProcess

    with tempfile.TemporaryDirectory() as scratch, ServerProcess() as server:
        work = Path(scratch)
        collection(work / "beir", docs, queries)
        ours = run_ours(work / "beir", work, server.base_url)
        sent = server.stats()["requests"]
        server.reset()
        skipped = {"wall_s": None, "peak_rss_tree_mib": None, "ranked": {}}
        reference = skipped if ours_only else run_in_memory(work / "beir", work, server.base_url)
    same = sum(ours["ranked"].get(q) == ranked for q, ranked in reference["ranked"].items())
    corpus_requests = -(-docs // BATCH)
    return {
        "docs": docs,
        "queries": queries,
        "ours_wall_s": ours["wall_s"],
        "ours_peak_rss_mib": ours["peak_rss_tree_mib"],
        "ours_peak_rss_single_mib": ours["peak_rss_single_mib"],
        "embedding_requests": sent,
        "each_document_once": sent == corpus_requests + queries,
        "in_memory_wall_s": reference["wall_s"],
        "in_memory_peak_rss_mib": reference["peak_rss_tree_mib"],
        "same_top10": None if ours_only else f"{same}/{queries}",
        "recall_10": ours["recall_10"],
    }


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| docs | queries | ours: wall s | ours: peak RSS MiB (tree / largest process) "
        "| embeddings requests (each doc once) | in-memory: wall s | in-memory: peak RSS MiB "
        "| same top-10 | recall@10 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['docs']:,} | {r['queries']:,} | {r['ours_wall_s']} | {r['ours_peak_rss_mib']} / "
            f"{r['ours_peak_rss_single_mib']} | {r['embedding_requests']:,} ({r['each_document_once']}) | "
            f"{r['in_memory_wall_s']} | {r['in_memory_peak_rss_mib']} | {r['same_top10']} | {r['recall_10']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--in-memory-side"]:
        in_memory_side(*args[1:4])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--smoke", action="store_true", help="one small corpus (2,000 documents, 50 queries)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--ours-only", action="store_true", help="skip the in-memory side (it needs ~7 GiB at 10^6)")
    options = parser.parse_args(args)
    sizes, queries = ([2000], 50) if options.smoke else (options.docs, options.queries)
    results = []
    for docs in sizes:
        results.append(bench(docs, queries, options.ours_only))
        print(json.dumps(results[-1]), file=sys.stderr)
    print(markdown(results))
    if options.json:
        options.json.write_text(json.dumps({"results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
