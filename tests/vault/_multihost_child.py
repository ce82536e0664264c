"""One JAX process of tests/vault/test_multihost.py's multi-process stream.

Run as ``python _multihost_child.py CONFIG_JSON PROCESS_ID`` with ``JAX_PLATFORMS=cpu``; the
config says the coordinator port, the number of processes, the vaults (several sources), the
stream's arguments and the mode:

* ``run``: one epoch of the stream over the global mesh, a jitted step per batch, and the
  same stream stopped after ``stop_after`` batches whose state process 0 saves as JSON;
* ``resume``: the stream resumed from that JSON state, to its end.

Each process writes what it saw (its part of every batch and the step's global result) to
``<out>/<mode>-<process>.json``. Everything is under ``__main__`` (see STORAGE-FACTS: code
that a spawned process re-runs must not initialise JAX's distributed runtime twice).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main(config: dict[str, Any], process_id: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    address = f"127.0.0.1:{config['port']}"
    jax.distributed.initialize(
        coordinator_address=address,
        num_processes=config["processes"],
        process_id=process_id,
        coordinator_bind_address=address,
        initialization_timeout=60,
    )
    import vault
    from vault.stream._stream import as_dataset

    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    batch, seq = config["batch"], config["seq"]
    weights = jnp.arange(1, batch + 1, dtype=jnp.int32)[:, None]  # the order matters

    @jax.jit
    def step(experience: Any) -> Any:  # over the global batch: every process's sequences
        return jnp.sum(experience["code"] * weights) + jnp.sum(experience["obs"][..., 1] < 0)

    def follow(stream: Any, limit: int | None = None) -> list[dict[str, Any]]:
        seen = []
        for i, b in enumerate(stream):
            code = b.experience["code"]
            assert isinstance(code, jax.Array)
            assert code.shape == (batch, seq)
            assert len(code.addressable_shards) == jax.local_device_count()
            seen.append(
                {
                    "epoch": b.epoch,
                    "source": b.source.tolist(),
                    "row": b.row.tolist(),
                    "start": b.start.tolist(),
                    "value": int(step(b.experience)),
                }
            )
            if limit is not None and i + 1 == limit:
                break
        return seen

    out = Path(config["out"])
    report: dict[str, Any] = {"process_index": jax.process_index(), "devices": jax.device_count()}
    if config["mode"] == "run":
        snaps = [vault.Vault.open(p).snapshot for p in config["vaults"]]
        with as_dataset(snaps, batch, seq, sharding=sharding, **config["kwargs"]) as stream:
            report["process_count"] = stream.process_count
            report["local_batch_size"] = stream.local_batch_size
            report["batches"] = follow(stream)
        stream = as_dataset(snaps, batch, seq, sharding=sharding, **config["kwargs"])
        report["taken"] = follow(stream, config["stop_after"])
        state = stream.state()
        stream.close()
        if jax.process_index() == 0:
            (out / "state.json").write_text(json.dumps(state))
    else:
        state = json.loads((out / "state.json").read_text())
        with vault.resume_stream(state, sharding=sharding) as stream:
            report["batches"] = follow(stream)
    (out / f"{config['mode']}-{process_id}.json").write_text(json.dumps(report))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), int(sys.argv[2]))
