"""Where each journal line is, in 16 bytes an entry: an open-addressing table over two arrays.

The send-time look-up (``journal_index``) must know every answer this run has recorded, on
every worker, for runs of millions of rows. A ``dict`` of key strings to positions costs
about 200 bytes an entry (a 64-character key alone is 113); here a key (a hex hash) is its
first 64 bits (uniform, so they spread the table without hashing again) and a position
one 64-bit integer, in two ``array('Q')``: 16 bytes a slot, at most twice as many slots as
keys. Two keys sharing 64 bits would share a slot; the reader checks the line it finds, so
such a clash costs a re-sent request, never a wrong answer.
"""

from __future__ import annotations

from array import array

__all__ = ["KeyLocations", "location", "split_location"]

_OFFSET_BITS = 40  # a shard of up to 1 TiB
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1
_MAX_LOAD = 0.5


def location(shard: int, offset: int) -> int:
    """One integer for ``(shard number, byte offset of the line)``."""
    return shard << _OFFSET_BITS | offset


def split_location(value: int) -> tuple[int, int]:
    """``(shard number, byte offset)`` of a ``location``."""
    return value >> _OFFSET_BITS, value & _OFFSET_MASK


def _slot_key(key: str) -> int:
    """A hex key's first 64 bits, never 0 (0 marks an empty slot)."""
    return int(key[:16], 16) or 1


class KeyLocations:
    """Hash key (16 hex digits or more) -> location; not thread-safe (``JournalIndex`` locks)."""

    def __init__(self, capacity: int = 1024) -> None:
        self._allocate(max(16, 1 << (capacity - 1).bit_length()))
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def get(self, key: str) -> int | None:
        """The location stored for ``key`` (or for a key sharing its first 64 bits); None when absent."""
        wanted = _slot_key(key)
        keys, mask = self._keys, self._mask
        slot = wanted & mask
        while True:
            found = keys[slot]
            if found == wanted:
                return int(self._values[slot])
            if found == 0:
                return None
            slot = (slot + 1) & mask

    def put(self, key: str, value: int) -> None:
        """Store ``value`` for ``key`` unless the key already has one (the first answer recorded is kept)."""
        if self._insert(_slot_key(key), value):
            self._count += 1
            if self._count > _MAX_LOAD * len(self._keys):
                self._grow()

    def _insert(self, wanted: int, value: int) -> bool:
        keys, mask = self._keys, self._mask
        slot = wanted & mask
        while True:
            found = keys[slot]
            if found == wanted:
                return False
            if found == 0:
                keys[slot] = wanted
                self._values[slot] = value
                return True
            slot = (slot + 1) & mask

    def _allocate(self, slots: int) -> None:
        self._keys = array("Q", bytes(8 * slots))
        self._values = array("Q", bytes(8 * slots))
        self._mask = slots - 1

    def _grow(self) -> None:
        keys, values = self._keys, self._values
        self._allocate(2 * len(keys))
        for slot, wanted in enumerate(keys):
            if wanted:
                self._insert(wanted, values[slot])
