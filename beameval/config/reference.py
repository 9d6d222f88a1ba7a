"""The config schema as data: JSON Schema for editors, and the Markdown reference in docs/CONFIG.md.

Both are generated from the pydantic models, so they cannot drift from what the loader
accepts (a test regenerates docs/CONFIG.md and fails when the file is stale). Each metric
type's own config class stands in the ``metrics`` list, one ``anyOf`` branch per type.
"""

from __future__ import annotations

import json
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from beameval.config.schema import EvalConfig
from beameval.metrics.registry import config_model, metric_types

__all__ = ["config_markdown", "config_schema"]


def config_schema() -> dict[str, Any]:
    """JSON Schema of the config file, with every registered metric type in ``metrics``."""
    schema = EvalConfig.model_json_schema()
    definitions = schema.setdefault("$defs", {})
    branches = []
    for type_name in metric_types():
        model = config_model(type_name)
        inner = model.model_json_schema(ref_template="#/$defs/{model}")
        definitions.update(inner.pop("$defs", {}))
        inner["properties"]["type"] = {"const": type_name, "title": "Type"}
        definitions[model.__name__] = inner
        branches.append({"$ref": f"#/$defs/{model.__name__}"})
    schema["properties"]["metrics"] = {"type": "array", "minItems": 1, "items": {"anyOf": branches}}
    definitions.pop("MetricConfig", None)
    return schema


def config_markdown() -> str:
    """docs/CONFIG.md: one table per config section and per metric type (key, type, default, required)."""
    lines = [
        "# Config reference",
        "",
        "Generated from the pydantic models by `python -m pipeline.run --print_config_schema --markdown`;",
        "`tests/pipeline/test_config_reference.py` fails when this file is stale. Unknown keys are refused",
        "everywhere except `params.inference` (request parameters; see docs/METRICS.md and the README).",
        "",
    ]
    seen: set[str] = set()
    _section(lines, "Top level (`EvalConfig`)", EvalConfig, seen)
    for type_name in metric_types():
        _section(lines, f"Metric `{type_name}`", config_model(type_name), seen)
    return "\n".join(lines).rstrip() + "\n"


def _section(lines: list[str], title: str, model: type[BaseModel], seen: set[str]) -> None:
    nested: list[tuple[str, type[BaseModel]]] = []
    lines += [f"## {title}", ""]
    doc = (model.__doc__ or "").strip().splitlines()
    if doc:
        lines += [doc[0], ""]
    lines += ["| key | type | default |", "|---|---|---|"]
    for name, field in model.model_fields.items():
        annotation = field.annotation
        default = (
            "required"
            if field.is_required()
            else json.dumps(_plain(field.get_default(call_default_factory=True)), default=str)
        )
        shown = _type_name(Annotated[(annotation, *field.metadata)] if field.metadata else annotation)
        lines.append(f"| `{name}` | `{shown}` | {default} |")
        for candidate in _models_in(annotation):
            if candidate.__name__ not in seen and candidate.__name__ != "MetricConfig":
                seen.add(candidate.__name__)
                nested.append((f"`{candidate.__name__}`", candidate))
    lines.append("")
    notes = [f"- `{name}`: {field.description}" for name, field in model.model_fields.items() if field.description]
    if notes:
        lines += [*notes, ""]
    for nested_title, nested_model in nested:
        _section(lines, nested_title, nested_model, seen)


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _type_name(annotation: Any) -> str:
    """A readable type: ``int (>= 1) | null``, ``list[str]``, ``"openai" | "nim"``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is Annotated:
        bounds = [
            f"{symbol} {getattr(meta, attr)}"
            for meta in args[1:]
            for attr, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
            if getattr(meta, attr, None) is not None
        ]
        return _type_name(args[0]) + (f" ({', '.join(bounds)})" if bounds else "")
    if origin in (Union, UnionType):
        return " \\| ".join(_type_name(arg) for arg in args)
    if origin is Literal:
        return " \\| ".join(json.dumps(arg) for arg in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_name(arg) for arg in args)}]"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Every pydantic model inside an annotation (``X | None``, ``list[X]``, ``Annotated[X, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for inner in getattr(annotation, "__args__", ()) or ():
        found += _models_in(inner)
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and origin is not annotation and isinstance(origin, type) and issubclass(origin, BaseModel):
        found.append(origin)
    return found
