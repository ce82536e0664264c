"""Record a JAX environment into a vault, then train offline from it by streaming.

Run: ``python examples/record_and_train.py`` (a minute or two on 2 CPU cores; it writes the
vault ``runs/gridworld``, ``--out`` for another path, ``--overwrite`` to replace an earlier
run's; ``--quick`` for a small run, used by the tests). It

1. steps 64 copies of a small pure-JAX gridworld in a jitted ``lax.scan``, acting with a
   scripted behaviour policy of mixed quality, adds the steps to a trajectory buffer and saves
   them with ``vault.write(state, block=False)`` every 100 steps, with the episode index on;
2. trains two policies offline from the vault through the streaming reader
   (``vault.as_dataset``): behaviour cloning on single steps, and CQL (a Q-network with a
   conservative penalty) on sequences of two steps, evaluating both in the jitted
   environment as they train;
3. prints the episodes recorded, the size on disk, the returns of the offline policies
   against a random policy and the behaviour policy, and ``vault`` commands to look at the
   data (written so that they run as printed).

The gridworld: an agent and a goal on a 10 x 10 grid with a wall across most of it (a gap at
one end); actions up, down, left, right; reward +1 on reaching the goal (the episode
terminates) and -0.02 for every other step; episodes are truncated after 40 steps. The
behaviour policy walks straight at the goal, ignoring the wall, with its own amount of random
noise in each environment (from 10 % to fully random): when the wall is in the way it gets
stuck until noise frees it. Behaviour cloning copies that habit; CQL learns from the same data
to walk around the wall (the best policy's mean return is about 0.86).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import buffers as fbx
from vault import Vault, disk_usage, parse_location

SIZE = 10  # the grid is SIZE x SIZE
TIME_LIMIT = 40  # steps before truncation
STEP_REWARD = -0.02
GOAL_REWARD = 1.0
MOVES = jnp.array([[0, -1], [0, 1], [-1, 0], [1, 0]], jnp.int32)  # up, down, left, right
NUM_ACTIONS = 4
GAMMA = 0.95
EVAL_EPISODES = 512
_WALL = np.zeros((SIZE, SIZE), bool)
_WALL[5, :7] = True  # a wall at x = 5 with a gap at the bottom (y >= 7)
WALL = jnp.asarray(_WALL)
FREE = jnp.asarray(np.argwhere(~_WALL), jnp.int32)  # the cells an agent or goal can be in


# --------------------------------------------------------------------------------------------
# The environment: pure functions over a pytree state, batched with vmap
# --------------------------------------------------------------------------------------------


class EnvState(NamedTuple):
    pos: jax.Array  # int32 [2]
    goal: jax.Array  # int32 [2]
    t: jax.Array  # int32, steps taken in this episode


def env_reset(key: jax.Array) -> EnvState:
    k_pos, k_goal = jax.random.split(key)
    cells = FREE.shape[0]
    i = jax.random.randint(k_pos, (), 0, cells)
    j = (i + jax.random.randint(k_goal, (), 1, cells)) % cells  # a different free cell
    return EnvState(FREE[i], FREE[j], jnp.int32(0))


def observe(state: EnvState) -> jax.Array:
    return jnp.concatenate([state.pos, state.goal]).astype(jnp.uint8)


def env_step(
    state: EnvState, action: jax.Array, key: jax.Array
) -> tuple[EnvState, dict[str, jax.Array]]:
    """One step; the timestep records the observation the action was taken in, the action,
    and what followed it. A finished episode is reset at once (same step)."""
    pos = jnp.clip(state.pos + MOVES[action], 0, SIZE - 1)
    pos = jnp.where(WALL[pos[0], pos[1]], state.pos, pos)  # walking into the wall: no move
    reached = jnp.all(pos == state.goal)
    t = state.t + 1
    truncated = (t >= TIME_LIMIT) & ~reached
    timestep = {
        "obs": observe(state),
        "action": action.astype(jnp.int32),
        "reward": jnp.where(reached, GOAL_REWARD, STEP_REWARD).astype(jnp.float32),
        "done": reached,
        "truncated": truncated,
    }
    moved = EnvState(pos, state.goal, t)
    fresh = env_reset(key)
    new_state = jax.tree.map(lambda a, b: jnp.where(reached | truncated, a, b), fresh, moved)
    return new_state, timestep


def scripted_action(state: EnvState, key: jax.Array, noise: jax.Array) -> jax.Array:
    """Step towards the goal (along a random axis that reduces the distance); with
    probability ``noise``, a uniformly random action instead."""
    k_axis, k_noise, k_random = jax.random.split(key, 3)
    delta = state.goal - state.pos
    horizontal = jnp.where(delta[0] > 0, 3, 2)
    vertical = jnp.where(delta[1] > 0, 1, 0)
    use_x = jnp.where(
        (delta[0] != 0) & (delta[1] != 0),
        jax.random.bernoulli(k_axis),
        delta[0] != 0,
    )
    greedy = jnp.where(use_x, horizontal, vertical)
    random = jax.random.randint(k_random, (), 0, NUM_ACTIONS)
    return jnp.where(jax.random.bernoulli(k_noise, noise), random, greedy).astype(jnp.int32)


# --------------------------------------------------------------------------------------------
# Small networks and Adam, in plain JAX
# --------------------------------------------------------------------------------------------

Params = list[tuple[jax.Array, jax.Array]]


def mlp_init(key: jax.Array, sizes: list[int]) -> Params:
    params = []
    keys = jax.random.split(key, len(sizes) - 1)
    for k, (n_in, n_out) in zip(keys, itertools.pairwise(sizes), strict=True):
        scale = math.sqrt(2.0 / n_in)
        params.append((scale * jax.random.normal(k, (n_in, n_out)), jnp.zeros(n_out)))
    return params


def features(obs: jax.Array) -> jax.Array:
    """Positions scaled to [-1, 1], and the offset to the goal."""
    x = obs.astype(jnp.float32) / (SIZE - 1) * 2 - 1
    return jnp.concatenate([x, x[..., 2:] - x[..., :2]], axis=-1)


def mlp_apply(params: Params, obs: jax.Array) -> jax.Array:
    h = features(obs)
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w + b)
    w, b = params[-1]
    return h @ w + b


class Adam(NamedTuple):
    m: Any
    v: Any
    step: jax.Array


def adam_init(params: Any) -> Adam:
    zeros = jax.tree.map(jnp.zeros_like, params)
    return Adam(zeros, zeros, jnp.int32(0))


def adam_update(params: Any, grads: Any, opt: Adam, lr: float) -> tuple[Any, Adam]:
    b1, b2, eps = 0.9, 0.999, 1e-8
    count = opt.step + 1
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, opt.m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, opt.v, grads)
    scale = lr * jnp.sqrt(1 - b2**count) / (1 - b1**count)
    params = jax.tree.map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
    return params, Adam(m, v, count)


# --------------------------------------------------------------------------------------------
# Offline learners: one jitted update each, fed from the vault's stream
# --------------------------------------------------------------------------------------------


@jax.jit
def bc_update(params: Params, opt: Adam, batch: dict[str, jax.Array]) -> tuple[Any, ...]:
    """Behaviour cloning: maximise the likelihood of the recorded actions (single steps)."""
    obs, action = batch["obs"][:, 0], batch["action"][:, 0]

    def loss_fn(p: Params) -> jax.Array:
        logp = jax.nn.log_softmax(mlp_apply(p, obs))
        return -jnp.take_along_axis(logp, action[:, None], axis=1).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    params, opt = adam_update(params, grads, opt, lr=1e-3)
    return params, opt, loss


class CQLState(NamedTuple):
    params: Params
    target: Params
    opt: Adam


@jax.jit
def cql_update(state: CQLState, batch: dict[str, jax.Array]) -> tuple[CQLState, jax.Array]:
    """Discrete CQL on two-step sequences ``(s, a, r, done, s')``: a double-Q TD loss plus
    ``alpha * (logsumexp_a Q(s, a) - Q(s, a_data))``, which keeps Q low on actions the data
    does not support. A transition cut by truncation has no valid ``s'`` (the next step
    belongs to a new episode), so it is left out of the TD loss."""
    obs, action = batch["obs"][:, 0], batch["action"][:, 0]
    reward, done = batch["reward"][:, 0], batch["done"][:, 0]
    keep = 1.0 - batch["truncated"][:, 0].astype(jnp.float32)
    next_obs = batch["obs"][:, 1]
    best_next = jnp.argmax(mlp_apply(state.params, next_obs), axis=1)
    next_q = jnp.take_along_axis(mlp_apply(state.target, next_obs), best_next[:, None], axis=1)
    target = reward + GAMMA * (1.0 - done.astype(jnp.float32)) * next_q[:, 0]
    target = jax.lax.stop_gradient(target)

    def loss_fn(p: Params) -> jax.Array:
        q = mlp_apply(p, obs)
        q_data = jnp.take_along_axis(q, action[:, None], axis=1)[:, 0]
        td = (keep * (q_data - target) ** 2).sum() / jnp.maximum(keep.sum(), 1.0)
        conservative = (jax.nn.logsumexp(q, axis=1) - q_data).mean()
        return td + 0.05 * conservative

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    params, opt = adam_update(state.params, grads, state.opt, lr=1e-3)
    target_params = jax.tree.map(lambda t, p: 0.995 * t + 0.005 * p, state.target, params)
    return CQLState(params, target_params, opt), loss


# --------------------------------------------------------------------------------------------
# Evaluation in the jitted environment
# --------------------------------------------------------------------------------------------

Policy = Callable[[EnvState, jax.Array], jax.Array]  # (state, key) -> action


def evaluate(policy: Policy, key: jax.Array, episodes: int) -> float:
    """Mean return of the first episode of ``episodes`` environments."""
    return float(_evaluate(policy, key, episodes))


@functools.partial(jax.jit, static_argnums=(0, 2))
def _evaluate(policy: Policy, key: jax.Array, episodes: int) -> jax.Array:
    k_reset, k_run = jax.random.split(key)
    states = jax.vmap(env_reset)(jax.random.split(k_reset, episodes))

    def body(carry: tuple[EnvState, jax.Array, jax.Array], k: jax.Array) -> tuple[Any, None]:
        states, alive, total = carry
        k_act, k_env = jax.random.split(k)
        actions = policy(states, k_act)
        states, ts = jax.vmap(env_step)(states, actions, jax.random.split(k_env, episodes))
        total = total + jnp.where(alive, ts["reward"], 0.0)
        alive = alive & ~(ts["done"] | ts["truncated"])
        return (states, alive, total), None

    init = (states, jnp.ones(episodes, bool), jnp.zeros(episodes))
    (_, _, total), _ = jax.lax.scan(body, init, jax.random.split(k_run, TIME_LIMIT))
    return total.mean()


@jax.jit
def eval_greedy(params: Params, key: jax.Array) -> jax.Array:
    """Acting greedily on a network's outputs (BC logits or Q-values)."""
    return _evaluate(
        lambda s, _k: jnp.argmax(mlp_apply(params, observe_batch(s)), axis=1), key, EVAL_EPISODES
    )


def observe_batch(states: EnvState) -> jax.Array:
    return jax.vmap(observe)(states)


# --------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------


class Settings(NamedTuple):
    envs: int
    steps: int  # per environment
    write_every: int
    bc_steps: int
    cql_steps: int
    eval_every: int
    batch_size: int


DEFAULT = Settings(
    envs=64,
    steps=3000,
    write_every=100,
    bc_steps=3000,
    cql_steps=20000,
    eval_every=2000,
    batch_size=256,
)
QUICK = Settings(
    envs=32,
    steps=500,
    write_every=50,
    bc_steps=1000,
    cql_steps=6000,
    eval_every=2000,
    batch_size=256,
)


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
    )


def record(path: str, cfg: Settings, seed: int) -> dict[str, Any]:
    """Run the behaviour policy in ``cfg.envs`` environments and save every step."""
    n, k = cfg.envs, cfg.write_every
    # Mixed quality: environment i acts at random with probability 0.1 + 0.9 i / (n - 1).
    noise = jnp.linspace(0.1, 1.0, n)
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=n,
        sample_batch_size=cfg.batch_size,
        sample_sequence_length=2,
        period=1,
        min_length_time_axis=2,
        max_length_time_axis=2 * k,
    )
    key = jax.random.key(seed)
    key, k_reset = jax.random.split(key)
    env_states = jax.vmap(env_reset)(jax.random.split(k_reset, n))
    _, example = env_step(env_reset(key), jnp.int32(0), key)  # one timestep, for the shapes
    buffer_state = buffer.init(example)

    def collect(
        env_states: EnvState, buffer_state: Any, key: jax.Array
    ) -> tuple[EnvState, Any, jax.Array]:
        """``k`` steps of every environment in a scan, then one ``add`` of [n, k] steps."""

        def body(states: EnvState, k_step: jax.Array) -> tuple[EnvState, dict[str, jax.Array]]:
            k_act, k_env = jax.random.split(k_step)
            actions = jax.vmap(scripted_action)(states, jax.random.split(k_act, n), noise)
            return jax.vmap(env_step)(states, actions, jax.random.split(k_env, n))

        env_states, steps = jax.lax.scan(body, env_states, jax.random.split(key, k))
        steps = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), steps)  # [k, n] -> [n, k]
        ended = (steps["done"] | steps["truncated"]).sum()
        return env_states, buffer.add(buffer_state, steps), ended

    # The buffer is donated: the next chunk is written in place. That is safe with
    # ``write(block=False)``, which copies the unsaved steps out before it returns.
    collect_jit = jax.jit(collect, donate_argnums=1)
    episodes_seen = 0
    chunks = cfg.steps // k
    with (
        Vault.create(
            path,
            buffer_state,
            done_leaf="done",
            truncated_leaf="truncated",
            reward_leaf="reward",
            metadata={"env": f"gridworld {SIZE}x{SIZE}", "behaviour": "scripted, noise 0.1..1.0"},
        ) as vault,
        _progress() as progress,
    ):
        task = progress.add_task("recording", total=chunks, info="")
        for _ in range(chunks):
            key, k_chunk = jax.random.split(key)
            env_states, buffer_state, ended = collect_jit(env_states, buffer_state, k_chunk)
            vault.write(buffer_state, block=False)  # encoding and disk I/O in the background
            episodes_seen += int(ended)
            progress.update(task, advance=1, info=f"{episodes_seen} episodes")
    # Leaving the ``with`` block waited for the pending writes and closed the vault.
    return {"episodes_seen": episodes_seen, "timesteps": chunks * k}


def train(path: str, cfg: Settings, seed: int, at: str | None = None) -> dict[str, Any]:
    """Behaviour cloning and CQL from the vault, streamed; evaluated as they train."""
    vault = Vault.open(path, at=at)  # pinned: exactly the data named in the output
    k_bc, k_q = jax.random.split(jax.random.key(seed + 1))
    sizes = [6, 128, 128, NUM_ACTIONS]
    eval_key = jax.random.key(seed + 2)  # the same evaluation episodes for every policy
    history: dict[str, list[tuple[int, float]]] = {"bc": [], "cql": []}

    bc_params = mlp_init(k_bc, sizes)
    bc_opt = adam_init(bc_params)
    q_params = mlp_init(k_q, sizes)
    cql = CQLState(q_params, q_params, adam_init(q_params))

    with _progress() as progress:
        # Behaviour cloning: single timesteps (sequence length 1), shuffled, endless epochs.
        task = progress.add_task("behaviour cloning", total=cfg.bc_steps, info="")
        stream = vault.as_dataset(
            cfg.batch_size, 1, shuffle=True, seed=seed, epochs=None, leaves=["obs", "action"]
        )
        with stream:
            for step in range(1, cfg.bc_steps + 1):
                bc_params, bc_opt, loss = bc_update(bc_params, bc_opt, next(stream).experience)
                if step % cfg.eval_every == 0 or step == cfg.bc_steps:
                    score = float(eval_greedy(bc_params, eval_key))
                    history["bc"].append((step, score))
                    progress.update(task, info=f"loss {float(loss):.3f}  return {score:+.3f}")
                progress.update(task, advance=1)

        # CQL: two-step sequences (s, a, r, done, truncated, s'). Windows may cross an episode
        # end: a done step's next observation is masked by (1 - done), a truncated one is
        # dropped from the TD loss.
        task = progress.add_task("CQL", total=cfg.cql_steps, info="")
        with vault.as_dataset(cfg.batch_size, 2, shuffle=True, seed=seed, epochs=None) as stream:
            for step in range(1, cfg.cql_steps + 1):
                cql, loss = cql_update(cql, next(stream).experience)
                if step % cfg.eval_every == 0 or step == cfg.cql_steps:
                    score = float(eval_greedy(cql.params, eval_key))
                    history["cql"].append((step, score))
                    progress.update(task, info=f"loss {float(loss):.3f}  return {score:+.3f}")
                progress.update(task, advance=1)

    n = EVAL_EPISODES
    noise = jnp.linspace(0.1, 1.0, n)  # the behaviour policy's mix of noise levels

    def behaviour(states: EnvState, k: jax.Array) -> jax.Array:
        return jax.vmap(scripted_action)(states, jax.random.split(k, n), noise)

    def uniform(states: EnvState, k: jax.Array) -> jax.Array:
        return jax.random.randint(k, (n,), 0, NUM_ACTIONS)

    table = vault.episodes()
    return {
        "bc_return": history["bc"][-1][1],
        "cql_return": history["cql"][-1][1],
        "random_return": evaluate(uniform, eval_key, n),
        "behaviour_return": evaluate(behaviour, eval_key, n),
        "recorded_mean_return": float(table.returns.mean()),
        "history": history,
    }


DEFAULT_OUT = "runs/gridworld"


def _make_room(parser: argparse.ArgumentParser, path: str, overwrite: bool) -> None:
    """Refuse an existing ``path`` (saying what to do), or with ``overwrite`` remove the vault
    there; anything at ``path`` that is not a vault is never removed, nor a vault that a
    running process is recording. What a killed run left while creating its vault needs no
    ``--overwrite``: ``Vault.create`` takes it over. Local paths and URLs alike."""
    where = parse_location(path)
    taken = os.path.lexists(path) if "://" not in path else not where.is_empty()
    if not taken or where.abandoned_build():
        return
    if not overwrite:
        parser.error(
            f"{path} already exists (an earlier run?): pass --overwrite to replace it, "
            f"or --out to write another vault"
        )
    try:
        with Vault.open(path) as old:
            holder = old.lock_holder()
    except Exception as err:  # not a vault: leave it alone
        parser.error(f"{path} exists and is not a vault ({err}); move it away or pass --out")
    if holder is not None:
        parser.error(f"{path} is being recorded by {holder}; stop that run first, or pass --out")
    if where.remote:
        where.clear()
    else:
        shutil.rmtree(path)


def vault_command() -> str:
    """How to run the ``vault`` command from here, as the hints print it: ``vault`` when the
    one on PATH is this environment's (an activated venv), else the path of this
    environment's script (``.venv/bin/vault``), which runs without activating anything."""
    script = os.path.join(os.path.dirname(sys.executable), "vault")
    found = shutil.which("vault")
    if found is not None and os.path.realpath(found) == os.path.realpath(script):
        return "vault"
    if not os.path.exists(script):
        return "vault"
    relative = os.path.relpath(script)
    return shlex.quote(script if relative.startswith("..") else relative)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast run (for tests)")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"the vault (default: {DEFAULT_OUT})")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace the vault at --out if there is one"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the recording and training (default: 0)"
    )
    args = parser.parse_args(argv)
    cfg = QUICK if args.quick else DEFAULT
    path = args.out
    _make_room(parser, path, args.overwrite)

    t0 = time.perf_counter()
    recorded = record(path, cfg, args.seed)
    t_record = time.perf_counter() - t0
    vault = Vault.open(path)
    table = vault.episodes()
    print(
        f"recorded {recorded['timesteps']} steps x {cfg.envs} environments in {t_record:.1f}s "
        f"into {vault.location}"
    )
    print(
        f"episodes recorded: {len(table)} complete "
        f"({int(table.truncated.sum())} truncated at {TIME_LIMIT} steps), "
        f"mean length {table.length.mean():.1f}"
    )
    size = disk_usage(path)  # None on an object store, whose listing carries no sizes
    raw = vault.committed_length * vault.rows * vault.manifest.step_bytes
    if size is not None:
        ratio = raw / max(size, 1)
        print(f"dataset size on disk: {size / 2**20:.2f} MiB ({ratio:.1f}x compression)")
    else:
        print(f"dataset size: {raw / 2**20:.2f} MiB raw (the store tells no stored size)")

    # what the run trained on, named exactly: Vault.open(path, at=commit) reads it back in
    # any process, and `vault verify PATH --at COMMIT --fingerprint F` checks it is unchanged
    data = {"commit": vault.commit_id, "fingerprint": vault.fingerprint()}
    print(f"training data: commit {data['commit']}, fingerprint {data['fingerprint'][:23]}...")

    t1 = time.perf_counter()
    result = train(path, cfg, args.seed, at=data["commit"])
    result["data"] = data
    t_train = time.perf_counter() - t1
    print(f"offline training (streamed from the vault) took {t_train:.1f}s")
    print(f"mean return over {EVAL_EPISODES} evaluation episodes:")
    print(f"  random policy            {result['random_return']:+.3f}")
    print(
        f"  behaviour policy         {result['behaviour_return']:+.3f}"
        f"   (recorded episodes: {result['recorded_mean_return']:+.3f})"
    )
    print(f"  behaviour cloning        {result['bc_return']:+.3f}")
    print(f"  CQL (offline)            {result['cql_return']:+.3f}")
    command, where = vault_command(), shlex.quote(path)
    # the plot goes next to the vault (runs/gridworld.png), never into it: a path given as
    # DIR/ (as a shell completes a folder's name) is named without its trailing slashes
    png = (path.rstrip("/") or path) + ".png"
    print("look at the data:")
    print(f"  {command} info {where}")
    print(f"  {command} plot {where} --out {shlex.quote(png)}")
    print(f"  {command} verify {where}")
    result.update(
        path=path,
        timesteps=recorded["timesteps"],
        envs=cfg.envs,
        episodes_seen=recorded["episodes_seen"],
        episodes_recorded=len(table),
        committed_length=vault.committed_length,
        disk_bytes=size,
        seconds=time.perf_counter() - t0,
    )
    return result


if __name__ == "__main__":
    main()
