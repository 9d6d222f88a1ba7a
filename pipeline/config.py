"""Loading the evaluation config file: YAML or JSON from disk, with readable errors.

The schema itself lives in :mod:`beameval.config`; this module only reads files.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from beameval.config import EvalConfig, parse_config
from beameval.core.errors import ConfigError

__all__ = ["load_config"]


def load_config(path: str) -> EvalConfig:
    """Read and validate a YAML or JSON config file.

    Raises:
        ConfigError: the file is missing, unparseable or invalid.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path!r}: {exc.strerror or exc}.") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path!r} is not UTF-8 text (byte {exc.start}); it must be a YAML or JSON file."
        ) from None
    try:
        data = json.loads(text) if file.suffix.lower() == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"config file {path!r} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path!r} is not valid YAML/JSON: {_yaml_problem(exc)}.") from None
    return parse_config(data, source=f"config file {path!r}")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error on one line: what is wrong and where (PyYAML's own text spans several)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        context = f" ({exc.context})" if exc.context else ""
        return f"{exc.problem}{context}{where}"
    return " ".join(str(exc).split())
