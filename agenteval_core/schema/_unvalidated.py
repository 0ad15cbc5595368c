"""Models built from values already known to be what validation would keep.

The engine builds a case for every trace and a result for every metric of every trace;
pydantic's validation of values the engine has just made costs as much as the rest of that
work. Callers check (or know by construction) that validation would keep each value as it is;
tests check that both ways give equal models.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["unvalidated"]

M = TypeVar("M", bound=BaseModel)


def unvalidated(model: type[M], values: dict[str, Any], fields_set: set[str]) -> M:
    """A ``model`` holding ``values`` (every field, in field order) as they are, with
    ``fields_set`` as the fields given explicitly; nothing is validated or copied."""
    instance = model.__new__(model)
    # what pydantic's own model_construct sets, without its per-field work
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", fields_set)
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance
