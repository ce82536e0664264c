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

    # Read as a mapping of its fields, as the reference's ``chex.dataclass`` containers are
    # (``state["current_index"]``, ``state.keys()``, ``dict(**state)``, ``"is_full" in
    # state``). Not a ``collections.abc.Mapping``: its equality and hash stay the dataclass's,
    # and JAX flattens it by its pytree registration, never as a mapping.
    def keys(self) -> list[str]:
        """Returns the field names, in order."""
        return [f.name for f in dataclasses.fields(self)]

    def values(self) -> list[Any]:
        """Returns the field values, in field order."""
        return [getattr(self, name) for name in self.keys()]

    def items(self) -> list[tuple[str, Any]]:
        """Returns ``(name, value)`` for every field, in order."""
        return [(name, getattr(self, name)) for name in self.keys()]

    def get(self, name: str, default: Any = None) -> Any:
        """Returns field ``name``'s value, or ``default`` when there is no such field.

        Args:
            name: a field name.
            default: what to return for a name that is not a field.
        """
        return getattr(self, name) if name in self.keys() else default

    def __getitem__(self, name: str) -> Any:
        if not isinstance(name, str) or name not in self.keys():
            raise KeyError(name)
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.keys()

    def __iter__(self) -> Any:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(dataclasses.fields(self))

    def to_tuple(self) -> tuple[Any, ...]:
        """Returns the field values as a tuple, in field order (as the reference's)."""
        return tuple(self.values())

    @classmethod
    def from_tuple(cls, values: tuple[Any, ...]) -> Self:
        """Returns the container of ``values``, given in field order (see :meth:`to_tuple`).

        Args:
            values: one value per field.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**dict(zip(names, values, strict=True)))


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
