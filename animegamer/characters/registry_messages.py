"""The character registry's error messages: pydantic's first problem as one sentence that names
the file, the entry and the field (`FILE: characters[0] (Qiqi): field 'weights.release.revision'
must be ...`)."""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from animegamer.characters.registry_bounds import MAX_NAME_CHARS

_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 60
_SHOWN.maxlist = _SHOWN.maxdict = 4
_SHOWN.maxlevel = 1


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The schema model that a field's annotation holds (`list[X] | None` → X), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next(filter(None, map(_model_in, get_args(annotation))), None)


def _field_at(
    root: type[BaseModel], loc: Sequence[int | str]
) -> tuple[type[BaseModel], FieldInfo | None, int]:
    """Where an error's location points: the model, the field (None for an unknown field or a
    list item) and the length of the location up to that field. An error inside a field that
    holds no model (`latent_size[1]`) is reported at the field itself."""
    model = root
    for depth, part in enumerate(loc, start=1):
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        if info is None:
            return model, None, depth
        inner = _model_in(info.annotation)
        if inner is None or depth == len(loc):
            return model, info, depth
        model = inner
    return model, None, len(loc)


def _at(data: Any, loc: Sequence[int | str]) -> Any:
    """The value at `loc` in the parsed YAML, or None."""
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def entry_label(data: Any, index: int) -> str:
    """`characters[0] (Qiqi)`: an entry of the parsed YAML, its name cut to the schema's bound."""
    name = _at(data, ("characters", index, "name"))
    return f"characters[{index}]" + (f" ({name[:MAX_NAME_CHARS]})" if isinstance(name, str) else "")


def _dotted(loc: Sequence[int | str]) -> str:
    """`examples[0].place` for ('examples', 0, 'place')."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else part
    return text


def located(path: Path, data: Any, loc: Sequence[int | str], problem: str) -> str:
    """`FILE: characters[0] (Qiqi): field 'weights.release.revision' PROBLEM`."""
    where = [str(path)]
    if len(loc) >= 2 and loc[0] == "characters" and isinstance(loc[1], int):
        where.append(entry_label(data, loc[1]))
        loc = loc[2:]
    where.append(f"field {_dotted(loc)!r} {problem}" if loc else problem)
    return ": ".join(where)


def _description(info: FieldInfo | None) -> str | None:
    """What a field must be: its own description, or that of `X` in its `X | None`."""
    if info is None:
        return None
    if info.description or get_origin(info.annotation) not in (Union, UnionType):
        return info.description
    found = (m for a in get_args(info.annotation) for m in getattr(a, "__metadata__", ()))
    return next((m.description for m in found if isinstance(m, FieldInfo)), None)


def _problem(
    error: ErrorDetails, model: type[BaseModel], info: FieldInfo | None, value: Any
) -> str:
    kind = error["type"]
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return f"is not a known field (expected one of: {', '.join(sorted(model.model_fields))})"
    if kind == "value_error":
        return str(error.get("ctx", {}).get("error", error["msg"]))
    if value is None and info is not None:
        return "is required"
    expected = _description(info) or "a mapping"  # every field without one holds a model
    return f"must be {expected}, got {_SHOWN.repr(value)}"


def schema_message(
    error: ValidationError, root: type[BaseModel], data: Any, path: Path
) -> str:
    """One message for the first problem pydantic found validating `data` as `root`, naming
    the entry and the field."""
    first = error.errors(include_url=False)[0]
    model, info, depth = _field_at(root, first["loc"])
    loc = first["loc"][:depth]
    return located(path, data, loc, _problem(first, model, info, _at(data, loc)))
