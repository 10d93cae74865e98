"""The one YAML loader: a file that must hold a mapping, validated by a pydantic model.

Every error is one line naming the file and every bad key
(`configs/server.yaml: limits.max_depht: unknown key`).
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any, TypeVar

import pydantic

from agents.redact import quoted

__all__ = ["describe_validation_error", "load_yaml_model", "read_yaml_mapping"]

M = TypeVar("M", bound=pydantic.BaseModel)


def load_yaml_model(
    path: Path,
    model: type[M],
    *,
    reserved: dict[str, str] | None = None,
    context: dict[str, Any] | None = None,
) -> M:
    """Read `path` and validate it as `model`.

    Args:
        path: the YAML file.
        model: the pydantic model of its content.
        reserved: keys the file may not set, with why (the loader sets them).
        context: pydantic's validation context (validators that read files beside
            this one find it there).

    Raises:
        ValueError: one line naming the file and what is wrong.
    """
    data = read_yaml_mapping(path)
    for key, why in (reserved or {}).items():
        if key in data:
            raise ValueError(f"{path}: {key}: unknown key{why}")
    try:
        return model.model_validate(data, context=context)
    except pydantic.ValidationError as exc:
        raise ValueError(describe_validation_error(path, exc, model)) from None


def describe_validation_error(
    path: Path | str, exc: pydantic.ValidationError, model: type[pydantic.BaseModel] | None = None
) -> str:
    """One line naming the file and every bad key: `f.yaml: limits.max_depth: …`, each
    problem once; an unknown key of `model` with the key it is closest to (`did you
    mean 'port'?`).

    The refused values are quoted only as `agents.redact.quoted` allows: never a whole
    section, never a secret."""
    problems: list[str] = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            problem = f"{loc}: unknown key{_suggestion(model, err['loc'])}"
        elif err["type"] == "missing":
            problem = f"{loc}: required key is missing"
        else:
            message = str(err["msg"]).removeprefix("Value error, ")
            problem = f"{loc}: {message}{quoted(err['loc'], err.get('input'))}"
        if problem not in problems:
            problems.append(problem)
    return f"{path}: " + "; ".join(problems)


def _suggestion(model: type[pydantic.BaseModel] | None, loc: tuple[Any, ...]) -> str:
    """` (did you mean 'x'?)` for the key of `model` at `loc` closest to its last part."""
    keys = _keys_at(model, loc[:-1]) if model is not None else []
    close = difflib.get_close_matches(str(loc[-1]), keys, n=1, cutoff=0.6) if loc else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def _keys_at(model: type[pydantic.BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys a mapping at `loc` under `model` may have (none known: [])."""
    found: Any = model
    for part in loc:
        if isinstance(found, type) and issubclass(found, pydantic.BaseModel):
            field = found.model_fields.get(str(part))
            if field is None:
                return []
            found = field.annotation
        else:  # a dict's key or a list's index: into its values' type
            found = _inner(found)
        found = _model_in(found)
    if isinstance(found, type) and issubclass(found, pydantic.BaseModel):
        return [n for n, f in found.model_fields.items() if not f.exclude]
    return []


def _inner(annotation: Any) -> Any:
    """The values' type of `dict[K, V]` or `list[V]` (else the annotation itself)."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin in (dict, list, tuple) and args:
        return args[-1]
    return annotation


def _model_in(annotation: Any) -> Any:
    """The model in `X | None` (or the annotation itself)."""
    if isinstance(annotation, type):
        return annotation
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, pydantic.BaseModel):
            return arg
    return annotation


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping.

    Raises:
        ValueError: one line naming the file and what is wrong with it.
    """
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{path}: invalid YAML{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of keys, got {type(data).__name__}")
    return data
