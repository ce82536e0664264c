"""One container style for every state and sample: frozen dataclasses registered as pytrees.

Flattening keeps field order and gives ``GetAttrKey`` paths, so error messages and the Vault
name leaves as ``experience/obs``. Unflattening bypasses ``__init__`` so that transformations
(``jit``, ``vmap``, ``pmap``) can rebuild a state from arbitrary leaves (tracers, sentinels).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar, dataclass_transform

import jax

T = TypeVar("T")


def _replace(self: T, **changes: Any) -> T:
    return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def pytree_dataclass(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen dataclass, a pytree (with key paths) and give it ``.replace``."""
    dc = dataclasses.dataclass(frozen=True)(cls)
    names = tuple(f.name for f in dataclasses.fields(dc))  # type: ignore[arg-type]
    keys = tuple(jax.tree_util.GetAttrKey(n) for n in names)

    def flatten_with_keys(obj: Any) -> tuple[list[tuple[Any, Any]], None]:
        return [(k, getattr(obj, n)) for k, n in zip(keys, names, strict=True)], None

    def flatten(obj: Any) -> tuple[list[Any], None]:
        return [getattr(obj, n) for n in names], None

    def unflatten(_aux: None, children: Any) -> Any:
        obj = object.__new__(dc)
        for n, c in zip(names, children, strict=True):
            object.__setattr__(obj, n, c)
        return obj

    jax.tree_util.register_pytree_with_keys(dc, flatten_with_keys, unflatten, flatten)
    if not hasattr(dc, "replace"):
        dc.replace = _replace  # type: ignore[attr-defined]
    return dc


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def frozen_container(cls: type[T]) -> type[T]:
    """A frozen dataclass of functions (a buffer), with ``.replace`` like the reference's."""
    dc = dataclasses.dataclass(frozen=True)(cls)
    if not hasattr(dc, "replace"):
        dc.replace = _replace  # type: ignore[attr-defined]
    return dc
