"""The child process of the first-read measurement (``tools/_first_read.py``): import one vault
library, open an existing vault and read all of it once as a buffer state (blocked until
ready); print the times of the three steps on one marked stdout line.

Only the standard library and ``tools/_vaults.py`` (standard library only at import) are loaded
before the clock starts, so the import time is the library's own (JAX, TensorStore, ...).

Usage (by the parent): ``python tools/_first_read_child.py '{"lib": ..., "data_dir": ...}'``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from _vaults import block, open_vault, vault_class

MARK = "BENCH_VAULT_FIRST_READ_JSON "


def first_read(lib: str, data_dir: Path) -> dict[str, Any]:
    """Import ``lib``, open the vault in ``data_dir``, read it all; seconds of each step."""
    t0 = time.perf_counter()
    vault_cls = vault_class(lib)
    t1 = time.perf_counter()
    jax_after_import = "jax" in sys.modules
    v = open_vault(lib, vault_cls, data_dir)
    t2 = time.perf_counter()
    state = v.read()
    block(state)
    t3 = time.perf_counter()
    import jax

    leaves = jax.tree.leaves(state.experience)
    return {
        "import_s": t1 - t0,
        "open_s": t2 - t1,
        "read_s": t3 - t2,
        "total_s": t3 - t0,
        "bytes": int(sum(leaf.nbytes for leaf in leaves)),
        "first_leaf_shape": list(leaves[0].shape),
        "jax_loaded_by_import": jax_after_import,
    }


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    print(MARK + json.dumps(first_read(spec["lib"], Path(spec["data_dir"]))), flush=True)
