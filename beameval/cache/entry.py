"""One stored response as a JSON line, read back cheaply: the key is sliced out without parsing the line.

A line is ``{"key": K, "v": KEY_VERSION, "model": M, "recorded_at": T, "row": W, "response": R}``
with the keys in that order (the writer's ``encode_entry``; ``row`` only in a journal, see
``StoredResponse.row``), so ``line_key`` reads the key
and version from fixed offsets; a store with millions of entries is joined on keys
without decoding a single response that no row asks for. Lines written by anything else
are parsed as JSON. A line that does not parse (the torn last line of a shard whose
writer was killed) or that carries another key version yields no key: it is skipped,
never an error.

For the pipeline's join, lines travel in batches (``pack_lines``): the 32-byte keys side
by side, and the lines compressed together. A batch of a few hundred lines compresses to
about a quarter of their size where each line alone barely shrinks, and a shuffle that
holds a batch as one object (as a local runner's does) spends a few bytes of bookkeeping
on it instead of a hundred on every line. Every batch the join and the store's hits carry
is compressed by ``pack_bytes`` (Zstandard at level 1, from pyarrow): about five times
faster than zlib's fastest level, and smaller.
"""

from __future__ import annotations

import binascii
import codecs
import json
from collections.abc import Collection, Iterable, Iterator
from typing import IO, Any, NamedTuple

import orjson
import pyarrow as pa

from beameval.cache.key import KEY_VERSION

__all__ = [
    "KEY_BYTES",
    "StoredResponse",
    "bucket_of",
    "choose",
    "decode_entry",
    "encode_entry",
    "iter_lines",
    "line_key",
    "line_raw_key",
    "line_row",
    "pack_bytes",
    "pack_lines",
    "unpack_bytes",
    "wanted_lines",
]

#: A key's length as raw bytes (the line holds it as 64 hex digits).
KEY_BYTES = 32

_PREFIX = b'{"key":"'
_KEY_END = len(_PREFIX) + 64
_VERSION = b'","v":' + str(KEY_VERSION).encode() + b","
_HEX = frozenset(b"0123456789abcdef")


class StoredResponse(NamedTuple):
    """A response read back from a journal or the store.

    A named tuple, not a frozen dataclass: a cached rerun decodes one for every row, and a
    tuple is built in a quarter of the time.

    Attributes:
        key: the request's ``response_key``.
        response: the endpoint's decoded JSON reply, as it arrived.
        model: the model name the request asked for (None for endpoints without one).
        recorded_at: Unix time the response was recorded.
        row: in the run's journal, the row (``row_index/sample_index``) whose request was
            answered: a send-time look-up (``journal_index``) tells a retry of that row (the
            request was paid for this row) from another row asking the same. None elsewhere.
        nesting: when the response is known to hold no lone surrogate, a bound on how
            deep it nests (the count of ``{`` and ``[`` bytes in its line but the entry's
            own: every object and array of it writes one); None when not known. A reply
            then needs no check of its text and nesting (``TargetHandler.parse_nesting``).

    """

    key: str
    response: Any
    model: str | None
    recorded_at: float
    row: str | None = None
    nesting: int | None = None


def encode_entry(key: str, response: Any, model: str | None, recorded_at: float, row: str | None = None) -> bytes:
    """Return one entry as a JSON line (newline included), keys in ``line_key``'s fixed order.

    Args:
        key: the request's key.
        response: the decoded JSON reply, or the reply's body as received (JSON bytes,
            which are kept as they are when they are UTF-8 on one line).
        model: the model name the request asked for.
        recorded_at: Unix time.
        row: the row the request was sent for (``StoredResponse.row``); omitted when None.

    Raises:
        TypeError: the response holds a value with no JSON form (a decoded reply never does).
        ValueError: bytes that are not JSON.

    """
    head = f'{{"key":"{key}","v":{KEY_VERSION},"model":{json.dumps(model)},"recorded_at":{recorded_at:.3f},'
    if row is not None:
        head += f'"row":{json.dumps(row)},'
    if isinstance(response, bytes) and _one_line_utf8(response):  # a reply body as received: no second encoding
        return b"".join((head.encode(), b'"response":', response.strip(), b"}\n"))
    if isinstance(response, bytes):
        response = json.loads(response)
    body = json.dumps(response, ensure_ascii=False, separators=(",", ":"))
    return f'{head}"response":{body}}}\n'.encode()


def _one_line_utf8(body: bytes) -> bool:
    """True when a JSON body can go into a line as it is: UTF-8, no line break (JSON strings never hold one raw)."""
    if b"\n" in body or b"\r" in body or body.startswith(codecs.BOM_UTF8) or not body.strip():
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def line_key(line: bytes) -> str | None:
    """Return the key of a line of the current key version, or None for any other line.

    Args:
        line: one line of a shard (its newline may be attached).

    Returns:
        The 64-hex-digit key, or None when the line is blank, torn, not an entry, or of
        another ``KEY_VERSION``.

    """
    key = _laid_out_key(line)
    if key is None:
        entry = _parse(line)
        return entry.key if entry is not None else None
    return key.decode("ascii") if _HEX.issuperset(key) else None


def line_raw_key(line: bytes) -> bytes | None:
    """``bytes.fromhex(line_key(line))``, or None: the join reads every line's key as raw bytes.

    A key that is not hexadecimal (a line written by something else) yields None too.
    """
    key = _laid_out_key(line)
    if key is not None:
        return binascii.unhexlify(key) if _HEX.issuperset(key) else None
    entry = _parse(line)
    try:
        return None if entry is None else bytes.fromhex(entry.key)
    except ValueError:
        return None


def _laid_out_key(line: bytes) -> bytes | None:
    """The key's 64 bytes when the line is laid out as ``encode_entry`` writes it (this version); None otherwise.

    Such a line's key and version sit at fixed places, so both are read without parsing it.
    """
    if line.startswith(_PREFIX) and line[_KEY_END : _KEY_END + len(_VERSION)] == _VERSION:
        return line[len(_PREFIX) : _KEY_END]
    return None


_ROW = b',"row":"'


def line_row(line: bytes) -> str | None:
    """Return the ``row`` a journal line names, read without parsing the line; None when it names none.

    A wrong answer is harmless (the reader checks the decoded entry): a model name that
    holds the marker itself could only make a look-up miss.
    """
    start = line.find(_ROW, _KEY_END, _KEY_END + 400)
    if start < 0:
        return None
    start += len(_ROW)
    end = line.find(b'"', start, start + 64)
    return line[start:end].decode("ascii", "replace") if end > 0 else None


def decode_entry(line: bytes | str) -> StoredResponse | None:
    """Return the entry a line holds, or None when it is torn, malformed or of another key version."""
    return _parse(line.encode("utf-8") if isinstance(line, str) else line)


#: Every ASCII digit to "0", every other byte to ".": a line holds a run of 19 digits (an integer orjson
#: could read as a float, or just a long number, an id or a key) when its mapping holds ``_LONG_DIGITS``.
#: Ten times faster than the same search by a regular expression.
_DIGITS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x2E for byte in range(256))
_LONG_DIGITS = b"0" * 19


def _parse(line: bytes) -> StoredResponse | None:
    data, strict = _loads(line)
    if data is None:
        return None
    if not isinstance(data, dict) or data.get("v") != KEY_VERSION or "response" not in data:
        return None
    key, model, recorded_at, row = data.get("key"), data.get("model"), data.get("recorded_at"), data.get("row")
    if not isinstance(key, str) or len(key) != 64 or not isinstance(recorded_at, (int, float)):
        return None
    model = model if isinstance(model, str) else None
    # orjson refuses lone surrogates, so what it read holds none; the line's other brackets are in its text.
    nesting = line.count(b"{") + line.count(b"[") - 1 if strict else None
    row = row if isinstance(row, str) else None
    return StoredResponse(key, data["response"], model, float(recorded_at), row, nesting)


def _loads(line: bytes) -> tuple[Any, bool]:
    """The line's JSON value, exactly as ``json.loads`` reads it (None: it does not parse), and if orjson read it.

    ``orjson`` reads a stored line in about a third of ``json``'s time, and a cached rerun
    decodes every row's entry. It reads RFC 8259 strictly, so what it refuses and ``json``
    accepts (lone surrogates, ``NaN``, numbers beyond a double's range, a byte-order mark)
    goes to ``json``; the one thing it reads differently, an integer beyond 64 bits (a
    float to orjson, an exact int to ``json``), cannot occur in a line with no run of 19
    digits, and any other line goes to ``json`` too. Every line thus gives ``json``'s value.
    """
    # The key of a line laid out as ``encode_entry`` writes it is a string: a run of digits there is text.
    after_key = 0 if _laid_out_key(line) is None else _KEY_END
    if line.translate(_DIGITS).find(_LONG_DIGITS, after_key) < 0:
        try:
            return orjson.loads(line), True
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(line), False
    except ValueError:  # UnicodeDecodeError included
        return None, False


def choose(lines: Iterable[bytes | str]) -> StoredResponse | None:
    """Pick the one answer among a key's entries: the earliest recorded that parses.

    Every run that asks for the key gets the same answer, whichever shards hold copies of
    it and in whatever order a join delivers them.

    Returns:
        The chosen entry, or None when no line parses (every copy was torn).

    """
    best: StoredResponse | None = None
    for line in lines:
        entry = decode_entry(line)
        if entry is None:
            continue
        if best is None or entry.recorded_at < best.recorded_at:
            best = entry
        elif entry.recorded_at == best.recorded_at and _order(entry) < _order(best):
            best = entry
    return best


def _order(entry: StoredResponse) -> str:
    """A tie-break between copies recorded in the same millisecond."""
    return json.dumps(entry.response, sort_keys=True, default=str)


def iter_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Yield the non-blank lines of a shard, newline stripped (a torn last line included: ``line_key`` skips it)."""
    for line in stream:
        line = line.rstrip(b"\r\n")
        if line:
            yield line


def bucket_of(key: bytes, buckets: int) -> int:
    """The join bucket of a raw key: its first four bytes modulo ``buckets`` (keys are uniform hashes)."""
    return int.from_bytes(key[:4], "big") % buckets


def pack_lines(keys: list[bytes], lines: list[bytes]) -> tuple[bytes, bytes]:
    """Return a batch of lines: ``(the raw keys concatenated, the lines joined by newlines and compressed)``.

    Args:
        keys: each line's key as ``KEY_BYTES`` raw bytes (``bytes.fromhex(line_key(line))``).
        lines: the lines, without newlines, in the same order.

    """
    return b"".join(keys), pack_bytes(b"\n".join(lines))


def wanted_lines(batches: Iterable[tuple[bytes, bytes]], wanted: Collection[bytes]) -> dict[bytes, list[bytes]]:
    """Return the lines of the ``wanted`` keys found in ``pack_lines`` batches, every copy of each.

    A batch none of whose keys is wanted is not even decompressed, so a join bucket costs
    memory for what its rows ask for, not for the whole store's share of it.

    Args:
        batches: ``(keys, compressed lines)`` pairs, as ``pack_lines`` returns them.
        wanted: the raw keys to look for.

    Returns:
        Raw key -> its lines (for ``choose``); a key with no line is absent.

    """
    found: dict[bytes, list[bytes]] = {}
    for keys, blob in batches:
        hits = [i for i in range(0, len(keys), KEY_BYTES) if keys[i : i + KEY_BYTES] in wanted]
        if not hits:
            continue
        lines = unpack_bytes(blob).split(b"\n")
        for i in hits:
            found.setdefault(keys[i : i + KEY_BYTES], []).append(lines[i // KEY_BYTES])
    return found


#: Zstandard at its fastest level: a batch of rows or lines shrinks to about a quarter, at a
#: few hundred MB/s. Compressed sizes are not part of any file (only of a run's batches).
_CODEC = pa.Codec("zstd", compression_level=1)
_SIZE = 8  # the uncompressed length, in front (Arrow's decompression needs it)


def pack_bytes(data: bytes) -> bytes:
    """``data`` compressed, its length in front; ``unpack_bytes`` gives it back."""
    return len(data).to_bytes(_SIZE, "little") + _CODEC.compress(data, asbytes=True)


def unpack_bytes(blob: bytes) -> bytes:
    """The bytes ``pack_bytes`` compressed."""
    size = int.from_bytes(blob[:_SIZE], "little")
    return _CODEC.decompress(memoryview(blob)[_SIZE:], size, asbytes=True)  # type: ignore[no-any-return]
