"""A stored reply that ``clean_replies`` passes really needs no check: ``clean_value`` would change nothing.

The store's hits skip ``sanitize.clean_value`` when the entry's line tells its nesting and
orjson read it (no lone surrogate), for the handlers that declare how deep their samples
nest (``parse_nesting``). Each generated reply here is stored, read back and parsed as a
cached rerun does; whenever the shortcut says "clean", the full check must agree, and
the shortcut must say so for ordinary replies (or it saves nothing).
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest

from beameval.cache.entry import decode_entry, encode_entry
from beameval.cache.recording import clean_replies, sample_from_stored
from beameval.config.schema import parse_config
from beameval.core.sanitize import MAX_NESTING, RowTooLarge, clean_value
from beameval.inference.targets import make_handler
from beameval.inference.targets.base import TargetHandler

KEY = "ab" * 32
_MODEL = {"model": {"url": "http://127.0.0.1:9/v1", "name": "m", "format": "openai"}}
_AGENT = {
    "agent": {
        "url": "http://127.0.0.1:9/agent",
        "name": "a",
        "body": {"q": "{{ item.q }}"},
        "response_path": "$.answer",
        "trajectory_path": "$.steps",
    }
}


def _handler(target: dict[str, Any]) -> TargetHandler:
    config = parse_config(
        {
            "dataset": {"path": "x.jsonl"},
            "target": target,
            "prompt_template": {"messages": [{"role": "user", "content": "{{ item.q }}"}]},
            "metrics": [{"type": "exact-match", "reference": "x"}],
        }
    )
    assert config.target is not None
    return make_handler(config.target, config.params, None)


def _text(rng: random.Random) -> str:
    pieces = ["plain", "é ✓", "😀", "{[", "]}", '"{"', "\\"]
    if rng.random() < 0.1:
        pieces.append(rng.choice(["\ud83d", "\udc00 x"]))
    return " ".join(rng.choice(pieces) for _ in range(rng.randint(1, 4)))


def _nested(rng: random.Random, depth: int) -> Any:
    value: Any = _text(rng)
    for _ in range(depth):
        value = {"k": value, "n": 1} if rng.random() < 0.5 else [value, 2]
    return value


def _reply(rng: random.Random, agent: bool) -> bytes:
    """A reply nested anywhere from flat to past the limit, often exactly at it (one chain: depth = containers)."""
    depth = rng.choice([0, 1, 3]) if rng.random() < 0.3 else rng.randint(MAX_NESTING - 8, MAX_NESTING + 1)
    extra = _nested(rng, depth)
    if agent:
        reply: dict[str, Any] = {"answer": _text(rng), "steps": extra}
    else:
        message = {"role": "assistant", "content": _text(rng), "extra": extra}
        reply = {"choices": [{"index": 0, "message": message}]}
        if rng.random() < 0.5:
            reply["usage"] = {"prompt_tokens": 3}
    return json.dumps(reply).encode()  # surrogates as escapes, as a reply arrives


@pytest.mark.parametrize("target", [_MODEL, _AGENT], ids=["model", "agent"])
def test_a_reply_the_shortcut_passes_is_one_the_full_check_passes_unchanged(target: dict[str, Any]):
    handler = _handler(target)
    assert handler.parse_nesting is not None
    rng = random.Random(7)
    passed = refused = 0
    for _ in range(3000):
        entry = decode_entry(encode_entry(KEY, _reply(rng, "agent" in target), "m", time.time()))
        assert entry is not None
        sample = sample_from_stored(handler, entry)
        if sample is None:
            continue
        if clean_replies(handler, [entry]):
            passed += 1
            assert clean_value(sample) == (sample, False)  # no surrogate, not too deep: nothing skipped
        else:
            refused += 1
            try:
                clean_value(sample)
            except RowTooLarge:
                pass
    assert passed > 800 and refused > 1000  # both kinds were met


def test_the_shortcut_needs_every_entry_known_and_a_handler_that_declares_its_nesting():
    handler = _handler(_MODEL)
    plain = json.dumps({"choices": [{"message": {"content": "hi"}}]}).encode()
    escaped = json.dumps({"choices": [{"message": {"content": "\ud83d"}}]}).encode()
    clean = decode_entry(encode_entry(KEY, plain, "m", 1.0))
    lone = decode_entry(encode_entry(KEY, escaped, "m", 1.0))
    assert clean is not None and clean.nesting == 4 and lone is not None and lone.nesting is None
    assert clean_replies(handler, [clean, clean])
    assert not clean_replies(handler, [clean, lone]) and not clean_replies(handler, [clean, None])

    class Unknown(type(handler)):  # type: ignore[misc]
        parse_nesting = None

    unknown = Unknown.__new__(Unknown)
    assert not clean_replies(unknown, [clean])
