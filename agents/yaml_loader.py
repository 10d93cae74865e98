"""The one YAML loader: a file that must hold a mapping, validated by a pydantic model.

Every error is one line naming the file and every bad key
(`configs/server.yaml: limits.max_depht: unknown key`).
"""

from __future__ import annotations

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
        raise ValueError(describe_validation_error(path, exc)) from None


def describe_validation_error(path: Path | str, exc: pydantic.ValidationError) -> str:
    """One line naming the file and every bad key: `f.yaml: limits.max_depth: …`.

    The refused values are quoted only as `agents.redact.quoted` allows: never a whole
    section, never a secret."""
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            problems.append(f"{loc}: unknown key")
        elif err["type"] == "missing":
            problems.append(f"{loc}: required key is missing")
        else:
            problems.append(f"{loc}: {err['msg']}{quoted(err['loc'], err.get('input'))}")
    return f"{path}: " + "; ".join(problems)


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
