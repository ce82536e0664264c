"""Every public name of Flashbax 0.1.3's modules, and the check that each resolves in ours.

A *public name* of a reference module is one that user code can import from it and that is
Flashbax's own:

* a name bound at the module's top level by ``def``, ``class`` or an assignment, or imported
  there from another Flashbax module (``from flashbax.utils import add_dim_to_args``);
* any attribute whose value Flashbax defines (a class, function or type variable whose
  ``__module__`` is Flashbax's, or a Flashbax module);
* every submodule of a package (``from flashbax.buffers import sum_tree`` imports it).

Names starting with ``_`` are private. Names the reference binds to other libraries' objects
(``jax``, ``chex.PRNGKey``, ``typing.Optional``) are those libraries', imported from them, and
not counted; tests (``*_test``, ``conftest``) are not modules users import.

Modules map as the README's migration says (``import flashbax as fbx`` becomes ``import buffers
as fbx``, ``from flashbax.vault import Vault`` becomes ``from vault import Vault``):
``flashbax`` and ``flashbax.buffers`` -> ``buffers``; ``flashbax.buffers.X`` -> ``buffers.X``;
``flashbax.utils`` -> ``buffers.utils``; ``flashbax.vault[.X]`` -> ``vault[.X]``. A name that
is a submodule must import as the mapped module (``flashbax.vault`` is the package ``vault``,
not an attribute of ``buffers``, which never imports ``vault``).

A name resolves when ours is a real equivalent: the same kind of object (module, class,
function, type variable, constant), the same object where the reference re-exports one of its
own (``flat_buffer.make_trajectory_buffer`` is ``trajectory_buffer.make_trajectory_buffer``),
classes with the reference's fields and number of type parameters, functions callable as the
reference's (every parameter at its position under its name, defaults where it has them),
type variables with mapped bounds or constraints, constants of the same type (dicts with the
same keys, lists of the mapped items).

``tools/make_flashbax_names.py`` stores :func:`walk`'s table in ``data/flashbax_names.json``,
which the default test run checks without Flashbax.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import types
import typing
from pathlib import Path
from typing import Any

TABLE = Path(__file__).parent / "data" / "flashbax_names.json"

# Reference fields with no counterpart, by design (checked to be exactly these).
FIELDS_NOT_KEPT = {
    "flashbax.buffers.sum_tree.SumTreeState": {
        "tree_depth": "static layout field: ours derives the depth from `nodes` "
        "(buffers.sum_tree.get_tree_depth), whose size is a power of two",
        "capacity": "static field: ours keeps no item count in the tree (the buffer knows it: "
        "prioritised_trajectory_buffer.get_sum_tree_capacity)",
    },
}


def ours(module: str) -> str:
    """Our module for a reference module's name."""
    if module in ("flashbax", "flashbax.buffers"):
        return "buffers"
    if module.startswith("flashbax.buffers."):
        return "buffers." + module.removeprefix("flashbax.buffers.")
    if module == "flashbax.vault" or module.startswith("flashbax.vault."):
        return module.removeprefix("flashbax.")
    return "buffers." + module.removeprefix("flashbax.")


def modules(flashbax: types.ModuleType) -> list[str]:
    """The reference's importable modules (tests excluded), sorted."""
    found = [
        m.name
        for m in pkgutil.walk_packages(flashbax.__path__, "flashbax.")
        if not m.name.endswith("_test") and m.name.rsplit(".", 1)[-1] != "conftest"
    ]
    return sorted(["flashbax", *found])


def _own_bindings(module: types.ModuleType) -> set[str]:
    """Names bound at the top level by def/class/assignment, or imported from Flashbax."""
    tree = ast.parse(inspect.getsource(module))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flashbax"):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {
                (a.asname or a.name).split(".")[0]
                for a in node.names
                if a.name.startswith("flashbax")
            }
    return names


_LIBRARIES = ("jax", "chex", "numpy", "typing")


def _origin(obj: Any) -> str:
    """``module.qualname`` of a Flashbax class, function or type variable; another library's
    object by the public name its library gives it (``jax.Array``, ``chex.ArrayTree``)."""
    if _is_flashbax(obj):
        return f"{obj.__module__}.{getattr(obj, '__qualname__', obj.__name__)}"
    for library in _LIBRARIES:
        module = importlib.import_module(library)
        for attr in sorted(dir(module)):
            if not attr.startswith("_") and getattr(module, attr) is obj:
                return f"{library}.{attr}"
    raise LookupError(f"no public name for {obj!r}")


def _is_flashbax(obj: Any) -> bool:
    if isinstance(obj, types.ModuleType):
        return obj.__name__.startswith("flashbax")
    return str(getattr(obj, "__module__", "") or "").startswith("flashbax")


def _params(fn: Any) -> list[list[Any]]:
    return [
        [p.name, p.kind.name, p.default is not inspect.Parameter.empty]
        for p in inspect.signature(fn).parameters.values()
    ]


def _fields(cls: type) -> list[str]:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    return list(getattr(cls, "_fields", []))


def describe(obj: Any) -> dict[str, Any]:
    """What a reference object is, in the table's terms."""
    if isinstance(obj, types.ModuleType):
        return {"kind": "module", "module": obj.__name__}
    if isinstance(obj, typing.TypeVar):
        return {
            "kind": "typevar",
            "of": _origin(obj),
            "bound": None if obj.__bound__ is None else _origin(obj.__bound__),
            "constraints": [_origin(c) for c in obj.__constraints__],
        }
    if inspect.isclass(obj):
        entry: dict[str, Any] = {"kind": "class", "of": _origin(obj)}
        if _is_flashbax(obj):
            entry["fields"] = _fields(obj)
            entry["type_params"] = len(getattr(obj, "__parameters__", ()))
        return entry
    if callable(obj):
        return {"kind": "function", "of": _origin(obj), "params": _params(obj)}
    if isinstance(obj, dict):
        return {"kind": "value", "type": "dict", "keys": sorted(obj)}
    if isinstance(obj, list):
        return {"kind": "value", "type": "list", "items": [_origin(x) for x in obj]}
    if isinstance(obj, bool | int | float):
        return {"kind": "value", "type": "number"}
    return {"kind": "value", "type": type(obj).__name__}


def walk(flashbax: types.ModuleType) -> dict[str, dict[str, Any]]:
    """``{reference module: {"ours": module, "names": {name: description}}}``."""
    table: dict[str, dict[str, Any]] = {}
    names_of = modules(flashbax)
    for name in names_of:
        module = importlib.import_module(name)
        own = _own_bindings(module)
        public: dict[str, Any] = {}
        for attr in dir(module):
            value = getattr(module, attr)
            if attr.startswith("_") or not (attr in own or _is_flashbax(value)):
                continue
            public[attr] = describe(value)
        if hasattr(module, "__path__"):
            for sub in names_of:
                rest = sub.removeprefix(name + ".")
                if rest != sub and "." not in rest:
                    public[rest] = {"kind": "module", "module": sub}
        table[name] = {"ours": ours(name), "names": dict(sorted(public.items()))}
    return table


# ------------------------------------------------------------------------------ the check
def resolve(origin: str) -> Any:
    """Our object for a reference ``module.qualname`` (or another library's, as it is)."""
    parts = origin.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        if module_name.startswith("flashbax"):
            module_name = ours(module_name)
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise LookupError(origin)


def _check_params(want: list[list[Any]], fn: Any) -> str | None:
    try:
        got = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return "has no signature"
    positional = [p for p in got if p.kind.name in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")]
    by_name = {p.name: p for p in got}
    var = {p.kind.name for p in got} & {"VAR_POSITIONAL", "VAR_KEYWORD"}
    for i, (name, kind, has_default) in enumerate(want):
        if kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            if kind not in var:
                return f"takes no {'*args' if kind == 'VAR_POSITIONAL' else '**kwargs'}"
            continue
        if kind == "POSITIONAL_OR_KEYWORD" and (i >= len(positional) or positional[i].name != name):
            return f"parameter {i} is not `{name}`: {inspect.signature(fn)}"
        param = by_name.get(name)
        if param is None:
            return f"has no parameter `{name}`"
        if has_default and param.default is inspect.Parameter.empty:
            return f"`{name}` has no default (the reference's has one)"
    wanted = {w[0] for w in want}
    for p in got:
        extra = p.name not in wanted and p.kind.name not in ("VAR_POSITIONAL", "VAR_KEYWORD")
        if extra and p.default is inspect.Parameter.empty:
            return f"extra parameter `{p.name}` without a default"
    return None


def _check_one(ref_module: str, name: str, entry: dict[str, Any], mine: Any) -> str | None:
    kind = entry["kind"]
    if kind == "module":
        target = ours(entry["module"])
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            return f"module {target} does not import: {exc}"
        if entry["module"] == f"{ref_module}.{name}":
            # a submodule: `from mine import name` imports it when it maps to our submodule;
            # `flashbax.buffers` and `flashbax.vault` map to packages of their own
            return None
        got = getattr(mine, name, None)
        return None if got is module else f"is {got!r}, not the module {target}"
    if not hasattr(mine, name):
        return "missing"
    got = getattr(mine, name)
    origin_module = entry.get("of", "").rsplit(".", 1)[0]
    reexport = origin_module.startswith("flashbax") and origin_module != ref_module
    if kind in ("class", "function") and (reexport or not entry["of"].startswith("flashbax")):
        try:
            expected = resolve(entry["of"])
        except (LookupError, AttributeError):
            return f"{entry['of']} has no counterpart"
        if got is not expected:
            return f"is {got!r}, not the same object as {entry['of']}'s counterpart"
    if kind == "class":
        if not inspect.isclass(got):
            return f"is {got!r}, not a class"
        have = set(_fields(got)) | {
            n for n, v in inspect.getmembers(got) if isinstance(v, property)
        }
        missing = [
            f
            for f in entry.get("fields", [])
            if f not in have and f not in FIELDS_NOT_KEPT.get(entry["of"], {})
        ]
        if missing:
            return f"lacks the fields {missing}"
        n_params = len(getattr(got, "__parameters__", ()))
        if "type_params" in entry and n_params != entry["type_params"]:
            return f"takes {n_params} type parameters, the reference's {entry['type_params']}"
        return None
    if kind == "function":
        if not callable(got) or inspect.isclass(got):
            return f"is {got!r}, not a function"
        problem = _check_params(entry["params"], got)
        return None if problem is None else f"is not callable as the reference's: {problem}"
    if kind == "typevar":
        if not isinstance(got, typing.TypeVar) or got.__name__ != name:
            return f"is {got!r}, not the type variable {name}"
        bound = None if entry["bound"] is None else resolve(entry["bound"])
        mine_bound = got.__bound__
        if isinstance(mine_bound, typing.ForwardRef):  # e.g. bound="chex.ArrayTree"
            mine_bound = resolve(mine_bound.__forward_arg__)
        if mine_bound is not bound:
            return f"is bound to {got.__bound__!r}, not {entry['bound']}"
        constraints = tuple(resolve(c) for c in entry["constraints"])
        if got.__constraints__ != constraints:
            return f"is constrained to {got.__constraints__}, not {constraints}"
        return None
    want_type = entry["type"]
    if want_type == "number":
        ok = isinstance(got, int | float) and not isinstance(got, bool)
    elif want_type == "dict":
        ok = isinstance(got, dict) and sorted(got) == entry["keys"]
    elif want_type == "list":
        ok = isinstance(got, list) and list(got) == [resolve(o) for o in entry["items"]]
    else:
        ok = type(got).__name__ == want_type
    return None if ok else f"is {got!r}, not a {want_type} like the reference's"


def problems(table: dict[str, dict[str, Any]]) -> list[str]:
    """Every reference name that does not resolve in our module of the same name."""
    found = []
    for ref_module, spec in table.items():
        try:
            mine = importlib.import_module(spec["ours"])
        except ImportError as exc:
            found.append(f"{ref_module}: our module {spec['ours']} does not import ({exc})")
            continue
        for name, entry in spec["names"].items():
            problem = _check_one(ref_module, name, entry, mine)
            if problem is not None:
                found.append(f"{ref_module}.{name} -> {spec['ours']}.{name}: {problem}")
    return found
