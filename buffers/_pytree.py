"""One container style for every state and sample: frozen dataclasses registered as pytrees.

Flattening keeps field order and gives ``GetAttrKey`` paths, so error messages and the Vault
name leaves as ``experience/obs``. Unflattening bypasses ``__init__`` so that transformations
(``jit``, ``vmap``, ``pmap``) can rebuild a state from arbitrary leaves (tracers, sentinels).

Every container subclasses :class:`Replaceable`, whose ``replace`` type checkers see with the
container's own type; the decorators refuse a class that does not.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Self, TypeVar, dataclass_transform

import jax


class Replaceable:
    """Base of every container: ``replace(**changes)`` returns a copy with fields changed."""

    # Declared (not set) so that type checkers accept ``self`` in ``dataclasses.replace``: every
    # subclass is made a dataclass by one of the decorators below.
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def replace(self, **changes: Any) -> Self:
        """Returns a copy with the given fields changed (``state.replace(is_full=...)``).

        Args:
            **changes: field name -> new value.
        """
        return dataclasses.replace(self, **changes)


R = TypeVar("R", bound=Replaceable)


def derived(*, default: None, kw_only: bool = False) -> Any:
    """Field specifier for a field that ``__post_init__`` computes when it is not given.

    ``default`` must be given as ``None`` (it marks "not given", and tells type checkers the
    field may be left out). Type checkers see the field's declared type, which every built
    instance has: ``__post_init__`` replaces the ``None``.
    """
    return dataclasses.field(default=default, kw_only=kw_only)


def _frozen_dataclass(cls: type[R]) -> type[R]:
    if not issubclass(cls, Replaceable):
        raise TypeError(
            f"{cls.__name__} must subclass buffers._pytree.Replaceable (for its typed `replace`)"
        )
    return dataclasses.dataclass(frozen=True)(cls)


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, derived))
def pytree_dataclass(cls: type[R]) -> type[R]:
    """Make ``cls`` a frozen dataclass and a pytree (with key paths)."""
    dc = _frozen_dataclass(cls)
    names = tuple(f.name for f in dataclasses.fields(dc))
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
    return dc


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def frozen_container(cls: type[R]) -> type[R]:
    """A frozen dataclass of functions (a buffer), with ``.replace`` like the reference's."""
    return _frozen_dataclass(cls)
