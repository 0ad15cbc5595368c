"""Models built from values already known to be what validation would keep.

The engine builds a case for every trace, a result for every metric of every trace and a
copy of each trace a session's history keeps; pydantic's validation of values the engine has
just taken from validated models costs as much as the rest of that work. Callers check (or
know by construction) that validation would keep each value as it is; tests check that both
ways give equal models.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

__all__ = ["unvalidated", "unvalidated_with_defaults"]

M = TypeVar("M", bound=BaseModel)

# BaseModel's slots, set through their descriptors: a third cheaper than object.__setattr__
# by name, and a replay builds several models a trace
_set_attribute = object.__setattr__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__

_DEFAULTS: dict[type[BaseModel], tuple[dict[str, Any], dict[str, Any]]] = {}


def unvalidated(model: type[M], values: dict[str, Any], fields_set: set[str]) -> M:
    """A ``model`` holding ``values`` (every field, in field order) as they are, with
    ``fields_set`` as the fields given explicitly; nothing is validated or copied."""
    instance = model.__new__(model)
    # what pydantic's own model_construct sets, without its per-field work
    _set_attribute(instance, "__dict__", values)
    _set_fields_set(instance, fields_set)
    _set_extra(instance, None)
    _set_private(instance, None)
    return instance


def unvalidated_with_defaults(model: type[M], given: dict[str, Any]) -> M:
    """What ``model(**given)`` would build when validation keeps every given value as it is
    and no model validator changes anything for them; the other fields take their defaults
    (a default factory is called for each instance)."""
    known = _DEFAULTS.get(model)
    if known is None:
        fixed: dict[str, Any] = {}
        factories: dict[str, Any] = {}
        for name, field in model.model_fields.items():
            if field.default_factory is not None:
                fixed[name], factories[name] = PydanticUndefined, field.default_factory
            else:
                fixed[name] = field.default
        known = _DEFAULTS[model] = (fixed, factories)
    fixed, factories = known
    values = dict(fixed)  # field order
    values.update(given)
    for name, factory in factories.items():
        if name not in given:
            values[name] = factory()
    return unvalidated(model, values, set(given))
