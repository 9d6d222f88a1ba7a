"""What makes two runs comparable: the dataset's content fingerprint, the config and eval hashes, models seen.

The fingerprint is a sum modulo 2**64 of one 64-bit hash per split of the dataset (a JSONL
or CSV file, a Parquet row group) over its first row position and the raw bytes of its
records as stored (``RecordsDigest``), so it is computed as the rows are read, in any order
and over any sharding, with a two-integer accumulator (a sum, unlike an XOR, does not cancel
when the same split appears twice). Hashing the bytes the reader already holds costs a
fraction of a microsecond per row, where re-serialising every row as JSON cost several.
The eval hash covers what defines the evaluation apart from the target, so the same
evaluation of two models, or of one model on two days, shares it.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DatasetFingerprint",
    "RecordsDigest",
    "canonical_hash",
    "eval_definition",
    "models_seen",
    "reply_models",
]

_MASK = (1 << 64) - 1


class RecordsDigest:
    """A 64-bit hash of consecutive records: where they start in the dataset, then their raw bytes.

    Args:
        first_row: the ``row_index`` of the first record (so the same bytes elsewhere hash apart).
    """

    __slots__ = ("_hash",)

    def __init__(self, first_row: int) -> None:
        self._hash = hashlib.blake2b(f"{first_row}\x1f".encode(), digest_size=8)

    def update(self, data: bytes) -> None:
        """Fold in the next bytes of the records, in order."""
        self._hash.update(data)

    def value(self) -> int:
        """The hash, for ``DatasetFingerprint.add``."""
        return int.from_bytes(self._hash.digest(), "little")


@dataclass(slots=True)
class DatasetFingerprint:
    """Rows read and the sum of their splits' hashes modulo 2**64: order- and shard-independent."""

    rows: int = 0
    total: int = 0

    def add(self, hashed: int, rows: int) -> None:
        """Fold in one split: its ``RecordsDigest`` value and how many rows it held."""
        self.rows += rows
        self.total = (self.total + hashed) & _MASK

    @staticmethod
    def merge(parts: Iterable[DatasetFingerprint]) -> DatasetFingerprint:
        """Combine partial fingerprints."""
        merged = DatasetFingerprint()
        for part in parts:
            merged.rows += part.rows
            merged.total = (merged.total + part.total) & _MASK
        return merged

    def hexdigest(self) -> str:
        """The fingerprint: 32 hex digits of SHA-256 over the row count and the hash sum."""
        return hashlib.sha256(f"{self.rows}:{self.total:016x}".encode()).hexdigest()[:32]


def canonical_hash(data: Any) -> str:
    """SHA-256 of ``data`` as canonical JSON (sorted keys, no spaces): equal configs hash equal."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def eval_definition(config: dict[str, Any], fingerprint: str) -> dict[str, Any]:
    """Everything that defines the evaluation apart from the target (what ``eval_hash`` hashes).

    Args:
        config: the resolved config (``EvalConfig.public_dump()``).
        fingerprint: the dataset's content fingerprint (it reflects ``--limit`` too).

    Returns:
        The dataset fingerprint, prompt template, system prompt, metrics, statistics,
        inference parameters, reasoning and structured-output settings, and repeats. Not
        the target, the dataset's location, concurrency, retries, timeouts or caching.
    """
    params = config.get("params") or {}
    return {
        "dataset_fingerprint": fingerprint,
        "prompt_template": config.get("prompt_template"),
        "system_prompt": params.get("system_prompt"),
        "metrics": config.get("metrics"),
        "statistics": config.get("statistics"),
        "inference": params.get("inference"),
        "reasoning": params.get("reasoning"),
        "structured_output": params.get("structured_output"),
        "repeats": params.get("repeats") or 1,
    }


def reply_models(sample: dict[str, Any]) -> tuple[str | None, str | None] | None:
    """``(model, system_fingerprint)`` from a sample's raw reply; None when there is no reply or it names neither."""
    response = sample.get("response")
    if not isinstance(response, dict):
        return None
    model, fingerprint = response.get("model"), response.get("system_fingerprint")
    if model is None and fingerprint is None:  # an agent's reply names no model
        return None
    return (None if model is None else str(model), None if fingerprint is None else str(fingerprint))


def models_seen(counts: Iterable[tuple[tuple[str | None, str | None], int]]) -> list[dict[str, Any]]:
    """``[{model, system_fingerprint, count}]``, most frequent first (a silent model swap shows as two entries)."""
    total: Counter[tuple[str | None, str | None]] = Counter()
    for pair, count in counts:
        total[pair] += count
    ordered = sorted(total.items(), key=lambda kv: (-kv[1], str(kv[0][0]), str(kv[0][1])))
    return [{"model": m, "system_fingerprint": f, "count": c} for (m, f), c in ordered]
