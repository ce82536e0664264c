"""The two vault libraries that ``tools/bench_vault.py`` compares, behind one set of functions:
rlvault (``vault.Vault`` with ``buffers``) and Flashbax (``flashbax.vault.Vault``), both
through their public APIs.

Only the standard library is imported at module level (the libraries load on first use), so
that a child process can import this module before it starts timing the library's import.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

LIBRARIES = ("rlvault", "flashbax")

# Read operations of each library (Flashbax only returns buffer states)
READ_OPS: dict[str, list[str]] = {
    "rlvault": ["numpy_all", "state_all", "numpy_last", "state_last"],
    "flashbax": ["state_all", "state_last"],
}
READ_LABELS = {
    "numpy_all": "read all, numpy",
    "state_all": "read all, state",
    "numpy_last": "read last N, numpy",
    "state_last": "read last N, state",
}
# rlvault op -> the Flashbax op it is compared with
FBX_COUNTERPART = {
    "numpy_all": "state_all",
    "state_all": "state_all",
    "numpy_last": "state_last",
    "state_last": "state_last",
}
FBX_UID = "v"  # the Flashbax vault_uid of every vault the benchmark creates


def vault_class(lib: str) -> Any:
    """Import ``lib``'s Vault class (this is the library's import)."""
    if lib == "rlvault":
        from vault import Vault

        return Vault
    if lib == "flashbax":
        return importlib.import_module("flashbax.vault").Vault
    raise ValueError(f"unknown library {lib!r}; expected one of {LIBRARIES}")


def load_libraries(no_flashbax: bool, log: Any = None) -> dict[str, tuple[ModuleType, Any]]:
    """``{name: (buffers module, Vault class)}``; Flashbax only when importable."""
    import buffers

    libs: dict[str, tuple[ModuleType, Any]] = {"rlvault": (buffers, vault_class("rlvault"))}
    if not no_flashbax:
        try:
            fbx = importlib.import_module("flashbax")
            fbx_vault = vault_class("flashbax")
        except ImportError as err:
            if log is not None:
                log(f"flashbax not importable ({err}); running rlvault only")
        else:
            libs["flashbax"] = (fbx, fbx_vault)
    return libs


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Flashbax's Vault prints to stdout; keep stdout for the table and the probes' JSON."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def create_vault(lib: str, vault_cls: Any, location: Path, state: Any) -> tuple[Any, Path]:
    """A new vault for ``state``'s experience; returns it and the directory holding its files."""
    if lib == "rlvault":
        return vault_cls.create(str(location), state), location
    with quiet_stdout():
        v = vault_cls(
            vault_name=location.name,
            experience_structure=state.experience,
            rel_dir=str(location.parent),
            vault_uid=FBX_UID,
        )
    return v, location / FBX_UID


def open_vault(lib: str, vault_cls: Any, data_dir: Path) -> Any:
    """Open the vault whose files are in ``data_dir`` (as :func:`create_vault` returned it)
    for reading."""
    if lib == "rlvault":
        return vault_cls.open(str(data_dir), "r")
    with quiet_stdout():
        return vault_cls(
            vault_name=data_dir.parent.name, rel_dir=str(data_dir.parent.parent), vault_uid=FBX_UID
        )


def read_op(lib: str, op: str, v: Any, last: int) -> Any:
    """Run one of ``READ_OPS[lib]`` on the open vault ``v`` (``last``: N of "last N")."""
    if lib == "rlvault":
        if op == "numpy_all":
            return v.read_numpy()
        if op == "numpy_last":
            return v.read_numpy(last=last)
        if op == "state_all":
            return v.read()
        if op == "state_last":
            return v.read(timesteps=last)
    elif op == "state_all":
        return v.read()
    elif op == "state_last":
        return v.read(timesteps=last)
    raise ValueError(f"unknown read op {lib}/{op}")


def block(tree: Any) -> None:
    """Wait for JAX arrays in ``tree`` (numpy leaves are already there)."""
    import jax

    jax.block_until_ready([x for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)])
