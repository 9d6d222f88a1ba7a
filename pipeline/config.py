"""Loading the evaluation config file: YAML or JSON from disk, with readable errors.

The schema itself lives in :mod:`beameval.config`; this module only reads files. YAML
aliases are expanded by reference, so a 1 KB "billion laughs" file is tiny once loaded
but has billions of nodes for anything that walks it (validation, the config dump): a
config whose expanded size passes ``MAX_CONFIG_NODES`` is refused before it is built.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beameval.config.schema import EvalConfig, parse_config
from beameval.core.errors import ConfigError

__all__ = ["MAX_CONFIG_NODES", "load_config"]

#: Nodes (mappings, sequences, scalars) a config may have once its YAML aliases are expanded.
MAX_CONFIG_NODES = 100_000
#: libyaml's loader when PyYAML has it: the pure-Python scanner is quadratic in nesting depth (a config
#: nested 2,000 levels deep takes seconds), libyaml refuses such nesting at once.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_config(path: str) -> EvalConfig:
    """Read and validate a YAML or JSON config file.

    Raises:
        ConfigError: the file is missing, unparseable or invalid.
    """
    file = Path(path)
    try:
        # Through Beam's file systems, so a Flex Template job can name gs://B/eval.yaml (it has no local files).
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            text = handle.read().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path!r}: {exc.strerror or exc}.") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path!r} is not UTF-8 text (byte {exc.start}); it must be a YAML or JSON file."
        ) from None
    except Exception as exc:  # noqa: BLE001 - an unknown scheme (ValueError), or a remote store's own errors
        raise ConfigError(f"cannot read config file {path!r}: {exc}") from None
    try:
        data = json.loads(text) if file.suffix.lower() == ".json" else _load_yaml(text, path)
    except RecursionError:
        raise ConfigError(f"config file {path!r} is nested too deeply to be a config.") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"config file {path!r} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path!r} is not valid YAML/JSON: {_yaml_problem(exc)}.") from None
    return parse_config(data, source=f"config file {path!r}")


def _load_yaml(text: str, path: str) -> object:
    """``yaml.safe_load``, refusing a document whose alias expansion passes ``MAX_CONFIG_NODES``.

    Raises:
        ConfigError: too many nodes once expanded, or an alias that contains itself.
    """
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node)
        if size > MAX_CONFIG_NODES:
            raise ConfigError(
                f"config file {path!r} expands to more than {MAX_CONFIG_NODES:,} values through its YAML "
                'aliases (*name); a config is never that large, so it is refused (a "billion laughs" file?).'
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_size(root: yaml.Node) -> int:
    """Nodes in the document once aliases are expanded, counted without expanding them.

    Each node's size is computed once (iteratively, so depth cannot overflow the stack);
    sizes are capped just past the budget, and an alias cycle raises.
    """
    sizes: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if children_done:
            in_progress.discard(key)
            sizes[key] = min(1 + sum(sizes[id(child)] for child in children), MAX_CONFIG_NODES + 1)
            continue
        if key in in_progress:
            raise ConfigError("the config has a YAML alias that contains itself; remove the cycle.")
        in_progress.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in in_progress:
                raise ConfigError("the config has a YAML alias that contains itself; remove the cycle.")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error on one line: what is wrong and where (PyYAML's own text spans several)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        context = f" ({exc.context})" if exc.context else ""
        return f"{exc.problem}{context}{where}"
    return " ".join(str(exc).split())
