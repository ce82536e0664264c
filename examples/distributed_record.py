"""Several actor processes record into one dataset while a learner trains from it.

Run: ``python examples/distributed_record.py`` (about a minute on 2 CPU cores; it writes the
dataset ``runs/gridworld-actors``, ``--out`` for another place, ``s3://bucket/prefix``
included, ``--overwrite`` to replace an earlier run's local one; ``--quick`` for a small run,
used by the tests). It

1. starts ``--actors`` actor processes (default 3). Each steps its own copies of the pure-JAX
   gridworld of ``examples/record_and_train.py`` (its own seed and noise level) and appends
   them to its own shard of one dataset (``Dataset.create(..., exist_ok=True)`` then
   ``dataset.shard(name)``): no coordinator, no lock server, writers never wait for each other;
2. meanwhile this process (the learner) opens the dataset, and round after round calls
   ``refresh()`` to see new shards and new commits and trains behaviour cloning on a stream over
   every shard (``dataset.as_dataset``), evaluating the policy in the jitted environment;
3. when the actors are done, trains on the whole dataset once more and prints what it saw
   (shards and timesteps per round, episodes per shard) and the returns.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_and_train import (
    NUM_ACTIONS,
    adam_init,
    bc_update,
    env_reset,
    env_step,
    eval_greedy,
    mlp_init,
    scripted_action,
    vault_command,
)

from vault import Dataset, is_dataset, lock_holder

DEFAULT_OUT = "runs/gridworld-actors"


class Settings(NamedTuple):
    envs: int  # per actor
    steps: int  # per environment
    write_every: int
    rounds_batches: int  # training batches per learner round
    batch_size: int


DEFAULT = Settings(envs=16, steps=1200, write_every=100, rounds_batches=200, batch_size=256)
QUICK = Settings(envs=8, steps=200, write_every=50, rounds_batches=40, batch_size=64)


# --------------------------------------------------------------------------------------------
# An actor: its own environments, its own shard
# --------------------------------------------------------------------------------------------


def act(root: str, index: int, actors: int, cfg: Settings) -> None:
    n, k = cfg.envs, cfg.write_every
    noise = jnp.full(n, 0.1 + 0.8 * index / max(1, actors - 1))  # actors differ in quality
    key = jax.random.key(100 + index)
    key, k_reset = jax.random.split(key)
    states = jax.vmap(env_reset)(jax.random.split(k_reset, n))
    _, example = env_step(env_reset(key), jnp.int32(0), key)
    dataset = Dataset.create(
        root,
        example,
        rows=n,
        done_leaf="done",
        truncated_leaf="truncated",
        reward_leaf="reward",
        exist_ok=True,
    )  # fmt: skip  (every actor calls this; exactly one creates the dataset)

    @jax.jit
    def collect(states: Any, key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        def body(s: Any, k_step: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
            k_act, k_env = jax.random.split(k_step)
            actions = jax.vmap(scripted_action)(s, jax.random.split(k_act, n), noise)
            return jax.vmap(env_step)(s, actions, jax.random.split(k_env, n))

        states, steps = jax.lax.scan(body, states, jax.random.split(key, k))
        return states, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), steps)

    with dataset.shard(f"actor-{index}") as shard:
        # run again after a crash, the shard goes on: the environments start afresh, so the
        # first append does not continue the episodes the killed run left open
        continues = shard.committed_length == 0
        for _ in range(cfg.steps // k):
            key, k_chunk = jax.random.split(key)
            states, steps = collect(states, k_chunk)
            shard.append(steps, continues=continues)  # [envs, k]; committed when it returns
            continues = True
    print(f"actor {index}: {cfg.steps // k * k} steps x {n} environments", flush=True)


# --------------------------------------------------------------------------------------------
# The learner: trains from the growing dataset
# --------------------------------------------------------------------------------------------


def learn(root: str, actors: list[subprocess.Popen[bytes]], cfg: Settings) -> dict[str, Any]:
    while not is_dataset(root):  # the first actor creates it
        if all(a.poll() is not None for a in actors):
            raise SystemExit("the actors stopped before creating the dataset")
        time.sleep(0.1)
    dataset = Dataset.open(root)
    params = mlp_init(jax.random.key(1), [6, 128, 128, NUM_ACTIONS])
    opt = adam_init(params)
    update = jax.jit(bc_update)
    eval_key = jax.random.key(2)
    rounds: list[dict[str, Any]] = []
    running = True
    while running:
        running = any(a.poll() is None for a in actors)  # one more round after they finish
        dataset.refresh()  # new shards, new commits
        if dataset.timesteps < cfg.batch_size:
            time.sleep(0.2)
            continue
        stream = dataset.as_dataset(
            cfg.batch_size, 1, shuffle=True, seed=len(rounds), epochs=None,
            leaves=["obs", "action"],
        )  # fmt: skip
        with stream:
            for _ in range(cfg.rounds_batches):
                params, opt, loss = update(params, opt, next(stream).experience)
        score = float(eval_greedy(params, eval_key))
        rounds.append(
            {"shards": len(dataset.shards), "timesteps": dataset.timesteps, "return": score}
        )
        print(
            f"learner round {len(rounds)}: {len(dataset.shards)} shards, "
            f"{dataset.timesteps} timesteps, loss {float(loss):.3f}, return {score:+.3f}",
            flush=True,
        )
    if not rounds:
        raise SystemExit("the actors stopped before recording a batch: see their output above")
    table = dataset.episodes()
    per_shard = {name: int((table.shard == name).sum()) for name in dataset.shards}
    return {
        "rounds": rounds,
        "shards": dataset.shards,
        "timesteps": dataset.timesteps,
        "episodes_per_shard": per_shard,
        "bc_return": rounds[-1]["return"],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast run (for tests)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"the dataset (default: {DEFAULT_OUT})")
    parser.add_argument("--actors", type=int, default=3, help="actor processes (default: 3)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a local dataset already at --out"
    )
    parser.add_argument(
        "--role",
        choices=["learner", "actor"],
        default="learner",
        help="learner (default): start the --actors actor processes and train from the "
        "dataset; actor: one actor process (the learner starts them with --index)",
    )
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else DEFAULT
    if args.actors < 1:
        parser.error("--actors must be at least 1")
    if args.role == "actor":
        act(args.out, args.index, args.actors, cfg)
        return {}
    if "://" not in args.out and os.path.exists(args.out):
        if not args.overwrite:
            parser.error(f"{args.out} exists: pass --overwrite to replace it, or --out elsewhere")
        if not is_dataset(args.out):
            parser.error(f"{args.out} is not a dataset; not removing it")
        for name in Dataset.open(args.out).shards:  # an actor of a run still going
            holder = lock_holder(f"{args.out}/shards/{name}")
            if holder is not None:
                parser.error(f"{args.out}: shard {name} is being recorded by {holder}")
        shutil.rmtree(args.out)
    command = [sys.executable, os.path.abspath(__file__), "--role", "actor", "--out", args.out]
    command += ["--actors", str(args.actors)] + (["--quick"] if args.quick else [])
    actors = [subprocess.Popen([*command, "--index", str(i)]) for i in range(args.actors)]
    try:
        result = learn(args.out, actors, cfg)
    finally:
        for actor in actors:
            if actor.poll() is None:
                actor.terminate()
            actor.wait()
    failed = [i for i, a in enumerate(actors) if a.returncode != 0]
    if failed:
        raise SystemExit(f"actors {failed} failed")
    print(
        f"dataset {args.out}: {len(result['shards'])} shards, {result['timesteps']} timesteps; "
        f"episodes per shard {result['episodes_per_shard']}; behaviour cloning return "
        f"{result['bc_return']:+.3f}"
    )
    # as record_and_train prints its hints: runnable as printed (the path quoted for the
    # shell; this environment's vault script when the one on PATH is not it)
    command, where = vault_command(), shlex.quote(args.out)
    print(f"look at it: {command} info {where}; {command} episodes {where} --sort return")
    return result


if __name__ == "__main__":
    main()
