"""Flashbax programs run with ``import buffers as fbx`` in place of ``import flashbax as fbx``.

README, docs/api/buffers.md and docs/guides/migrate-flashbax.md promise that code written for
Flashbax runs by changing only its import. Each test here is a small program written the way a
Flashbax user writes it (its README, docstrings, the usage its own tests and real projects
show), run once with Flashbax 0.1.3 and once with ``buffers`` on the same keys and inputs, and
compared: the states' pytrees (key paths, dtypes, shapes, values; ours through
``to_flashbax_state``, less the documented ``write_counter``), ``can_sample`` and every sampled
batch (less the documented ``valid``). What other modules cover is not repeated (names and
signatures: test_flashbax_names.py; draw tables and random trajectory runs:
test_reference_*.py; exact-mode PER loops, queues, utils and containers through layouts:
test_buffer_joints*.py; ours-only transforms: test_jax_transforms.py; orbax checkpoints written
by Flashbax: test_flashbax_checkpoints.py). Covered here:

* the class hierarchy users check with ``isinstance``, and a buffer as a ``jit`` static
  argument;
* flat / item / prioritised layouts built with *positional* arguments (as real projects call
  them), driven through ``jax.jit(buffer.add, donate_argnums=0)`` until the ring wraps, with
  whole priorities given back through a donated ``set_priorities``;
* ``vmap`` of ``init`` / donated ``add`` / ``sample`` (a key per state, one shared key, one
  state and many keys) / ``can_sample``, and ``eval_shape(init)`` (``lax.scan``:
  test_jax_transforms.py, test_buffer_joints.py);
* ``add`` in a ``lax.cond`` branch and a ``lax.while_loop`` body; ``pickle`` and ``deepcopy``
  of states (real projects save buffers with ``pickle.dump``); orbax checkpoints of our own
  states restored against ``buffer.init`` ("they restore ... as usual",
  flashbax-checkpoints.md);
* the mapping protocol of Flashbax's ``chex.dataclass`` states (xfail, see the test).

Not pinned, on purpose: ``numpy.float64`` batches (Flashbax's flat and item buffers cast them,
ours refuse them eagerly: documented, concepts.md "Batches must match exactly"), sampling or
reading a queue before ``can_sample`` (documented), and the dtypes under ``jax_enable_x64``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import pickle
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import buffers

flashbax = pytest.importorskip("flashbax")
from flashbax.buffers import flat_buffer as fbx_flat  # noqa: E402
from flashbax.buffers import prioritised_flat_buffer as fbx_pflat  # noqa: E402
from flashbax.buffers import prioritised_trajectory_buffer as fbx_ptb  # noqa: E402
from flashbax.buffers import trajectory_buffer as fbx_tb  # noqa: E402

TIMESTEP = {"x": jnp.zeros(2, jnp.float32), "n": jnp.int32(0)}
OURS_ONLY = ("write_counter", "valid")  # documented additions (concepts.md, buffer states)


def quiet(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` without the warnings and prints Flashbax gives for some settings (period
    advice, the divisible time axis, capacity rounding); the suite turns warnings into
    errors."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def make(lib: Any, factory: str, *args: Any, **kwargs: Any) -> Any:
    return quiet(getattr(lib, factory), *args, **kwargs)


def steps(code: int, prefix: tuple[int, ...]) -> dict[str, jax.Array]:
    """A batch with leading axes ``prefix`` whose timesteps carry running codes from
    ``code`` (so every value says which add and position it came from)."""
    n = int(np.prod(prefix, dtype=np.int64))
    c = (code + np.arange(n)).reshape(prefix)
    return {
        "x": jnp.asarray(np.stack([c, -c], -1), jnp.float32),
        "n": jnp.asarray(c, jnp.int32),
    }


def stack(tree: Any, n: int, step: int = 1000) -> Any:
    """``n`` copies of ``tree`` along a new leading axis, copy ``i`` offset by ``i * step``."""
    return jax.tree.map(lambda x: jnp.stack([x + i * step for i in range(n)]).astype(x.dtype), tree)


def _name(key: Any) -> str:
    for attr in ("name", "key", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def named(tree: Any) -> dict[str, np.ndarray]:
    """Leaves by ``a/b/c`` path (attribute, dict key or index alike), less our additions."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        names = [_name(k) for k in path]
        if not set(names) & set(OURS_ONLY):
            out["/".join(names)] = np.asarray(leaf)
    return out


def in_reference_shape(tree: Any) -> Any:
    if hasattr(tree, "write_counter") and hasattr(tree, "experience"):
        return buffers.to_flashbax_state(tree)
    return tree


def assert_same(ours: Any, ref: Any, what: str) -> None:
    """Same leaf paths, dtypes, shapes and values (a state of ours is compared in the
    reference's shape, through ``to_flashbax_state``, less ``write_counter``)."""
    got, want = named(in_reference_shape(ours)), named(in_reference_shape(ref))
    assert sorted(got) == sorted(want), what
    for path, value in want.items():
        assert got[path].dtype == value.dtype, f"{what}: {path} dtype"
        assert got[path].shape == value.shape, f"{what}: {path} shape"
        np.testing.assert_array_equal(got[path], value, err_msg=f"{what}: {path}")


# --------------------------------------------------------------------------------------------
# Types users check
# --------------------------------------------------------------------------------------------


def test_state_sample_and_buffer_classes_subclass_as_the_reference_s() -> None:
    """``isinstance(state, TrajectoryBufferState)`` holds for a prioritised state, a
    prioritised sample is a ``TrajectoryBufferSample``, a prioritised transition sample a
    ``TransitionSample`` and a prioritised buffer a ``TrajectoryBuffer``, as in Flashbax;
    every factory returns the reference's container class and state class; and a buffer
    serves as a ``jit`` static argument (hashable, no retrace on the second call)."""
    pairs = [
        ("PrioritisedTrajectoryBufferState", "TrajectoryBufferState"),
        ("PrioritisedTrajectoryBufferSample", "TrajectoryBufferSample"),
        ("PrioritisedTrajectoryBuffer", "TrajectoryBuffer"),
    ]
    for sub, base in pairs:
        assert issubclass(getattr(fbx_ptb, sub), getattr(fbx_tb, base))
        assert issubclass(getattr(buffers, sub), getattr(buffers, base)), (sub, base)
    assert issubclass(fbx_pflat.PrioritisedTransitionSample, fbx_flat.TransitionSample)
    assert issubclass(buffers.PrioritisedTransitionSample, buffers.TransitionSample)

    factories = {
        "make_trajectory_buffer": (2, 2, 2, 1, 2, None, 4),
        "make_prioritised_trajectory_buffer": (2, 2, 2, 1, 2, None, 4),
        "make_flat_buffer": (8, 2, 2),
        "make_prioritised_flat_buffer": (8, 2, 2),
        "make_item_buffer": (8, 2, 2),
        "make_prioritised_item_buffer": (8, 2, 2),
        "make_trajectory_queue": (4, 2, 2, 2),
    }
    for factory, args in factories.items():
        ref, ours = make(flashbax, factory, *args), make(buffers, factory, *args)
        assert type(ours).__name__ == type(ref).__name__, factory
        ref_state, state = ref.init(TIMESTEP), ours.init(TIMESTEP)
        assert type(state).__name__ == type(ref_state).__name__, factory
        for cls in type(ref_state).__mro__:
            if cls.__module__.startswith("flashbax"):
                assert isinstance(state, getattr(buffers, cls.__name__)), (factory, cls)

    buffer = buffers.make_item_buffer(8, 1, 2)
    traces = []

    def add_twice(buf: Any, state: Any, batch: Any) -> Any:
        traces.append(1)
        return buf.add(buf.add(state, batch), batch)

    jitted = jax.jit(add_twice, static_argnums=0)
    state = jitted(buffer, buffer.init(TIMESTEP), steps(0, ()))
    state = jitted(buffer, state, steps(1, ()))
    assert len(traces) == 1
    assert buffers.timesteps_added(state) == 4


def test_states_read_as_mappings_as_the_reference_s_do() -> None:
    """Flashbax's states, samples and buffers are ``chex.dataclass`` es, which are mappings
    by default (``mappable_dataclass=True``): ``state["current_index"]``, ``state.keys()``,
    ``dict(**state)`` and ``"is_full" in state`` work on them, and code written for it may use
    them (e.g. to list or copy fields generically). Ours raise ``TypeError`` (not
    subscriptable) or ``AttributeError`` (no ``keys``)."""
    ref = make(flashbax, "make_flat_buffer", 8, 1, 2)
    ours = buffers.make_flat_buffer(8, 1, 2)
    ref_state, state = ref.init(TIMESTEP), ours.init(TIMESTEP)
    assert list(ref_state.keys()) == ["experience", "current_index", "is_full"]
    assert int(ref_state["current_index"]) == 0
    assert "is_full" in ref_state
    assert sorted(dict(**ref_state)) == ["current_index", "experience", "is_full"]
    # ours: the same reads (our `write_counter` may be among the keys)
    assert int(state["current_index"]) == 0
    assert "is_full" in state
    assert {"experience", "current_index", "is_full"} <= set(state.keys())
    assert {"experience", "current_index", "is_full"} <= set(dict(**state))


# --------------------------------------------------------------------------------------------
# Every layout, positional arguments, jitted and donated
# --------------------------------------------------------------------------------------------

# factory, positional arguments (as real projects pass them), the leading axes of every add
LAYOUTS = {
    "item batches": ("make_item_buffer", (6, 4, 4, False, True), (3,)),
    "prioritised flat": ("make_prioritised_flat_buffer", (6, 1, 4, True, 2, 1.0, "cpu"), (2, 2)),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_positional_layouts_through_a_donated_jitted_add_match_the_reference(layout: str) -> None:
    """``make_*_buffer`` called positionally (``make_item_buffer(size, batch, batch, False,
    True)``, as real projects do), its functions jitted as Flashbax's README recommends
    (``add`` and ``set_priorities`` donating the state): after every add, until the ring has
    wrapped, the state, ``can_sample`` and the draws agree with the reference's, and so do the
    states after ``set_priorities`` with whole priorities (zeros among them), where the
    prioritised draws are documented to agree."""
    factory, args, prefix = LAYOUTS[layout]
    ref, ours = make(flashbax, factory, *args), make(buffers, factory, *args)
    prioritised = hasattr(ref, "set_priorities")

    def jitted(buffer: Any) -> Any:
        changes = {"add": jax.jit(buffer.add, donate_argnums=0), "sample": jax.jit(buffer.sample)}
        if prioritised:
            changes["set_priorities"] = jax.jit(buffer.set_priorities, donate_argnums=0)
        return buffer.replace(**changes)

    ref, ours = jitted(ref), jitted(ours)
    ref_state, state = ref.init(TIMESTEP), ours.init(TIMESTEP)
    assert_same(state, ref_state, f"{layout}: init")
    for i in range(4):
        ref_state, state = (
            ref.add(ref_state, steps(100 * i, prefix)),
            ours.add(state, steps(100 * i, prefix)),
        )
        assert_same(state, ref_state, f"{layout}: add {i}")
        ready = bool(ref.can_sample(ref_state))
        assert bool(ours.can_sample(state)) == ready, f"{layout}: can_sample after add {i}"
        if not ready:
            continue
        key = jax.random.PRNGKey(i)
        got, want = ours.sample(state, key), ref.sample(ref_state, key)
        assert_same(got, want, f"{layout}: sample after add {i}")
        assert bool(got.valid.all())
        if prioritised:
            priorities = (jnp.arange(want.indices.shape[0], dtype=jnp.float32) + i) % 4
            ref_state = ref.set_priorities(ref_state, want.indices, priorities)
            state = ours.set_priorities(state, got.indices, priorities)
            assert_same(state, ref_state, f"{layout}: set_priorities after add {i}")
    assert bool(ref_state.is_full), "the ring wrapped"


# --------------------------------------------------------------------------------------------
# Transformations, with the reference on the same inputs
# --------------------------------------------------------------------------------------------


def run_vmapped(lib: Any, n: int = 3) -> dict[str, Any]:
    """One buffer per agent: ``vmap(init)``, a donated ``jit(vmap(add))``, ``vmap`` of
    ``sample`` (a key per state, one key for all, one state and many keys), ``can_sample``,
    and ``eval_shape(init)`` (an orbax restore target)."""
    buffer = make(lib, "make_trajectory_buffer", 2, 3, 2, 1, 2, None, 5)
    states = jax.jit(jax.vmap(buffer.init))(stack(TIMESTEP, n))
    add = jax.jit(jax.vmap(buffer.add), donate_argnums=0)
    out: dict[str, Any] = {"empty": jax.vmap(buffer.can_sample)(states)}
    for i in range(4):
        states = add(states, stack(steps(100 * i, (2, 2)), n))
    keys = jax.random.split(jax.random.PRNGKey(5), n)

    @jax.jit
    def draws(states: Any, keys: jax.Array) -> dict[str, Any]:
        first = jax.tree.map(lambda x: x[0], states)
        return {
            "per key": jax.vmap(buffer.sample)(states, keys),
            "shared key": jax.vmap(buffer.sample, in_axes=(0, None))(states, keys[0]),
            "many keys": jax.vmap(buffer.sample, in_axes=(None, 0))(first, keys),
            "ready": jax.vmap(buffer.can_sample)(states),
        }

    out |= draws(states, keys)
    out["states"] = states
    abstract = jax.eval_shape(buffer.init, TIMESTEP)
    out["abstract"] = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), abstract)
    return out


def test_vmapped_buffers_with_donated_adds_match_the_reference() -> None:
    ours, ref = run_vmapped(buffers), quiet(run_vmapped, flashbax)
    assert sorted(ours) == sorted(ref)
    for what in ref:
        assert_same(ours[what], ref[what], what)
    assert list(buffers.timesteps_added(ours["states"])) == [8, 8, 8]


# --------------------------------------------------------------------------------------------
# Control flow, pickling and checkpoints: the state as a value
# --------------------------------------------------------------------------------------------

KINDS = {
    "prioritised flat": ("make_prioritised_flat_buffer", (8, 1, 2), ()),
    "queue": ("make_trajectory_queue", (6, 2, 2, 2), (2, 2)),
}


def run_control_flow(lib: Any, kind: str) -> Any:
    """``add`` in one branch of ``lax.cond`` (the other keeps the state) and as the body of
    ``lax.while_loop``: both need the state's structure and dtypes to stay as ``init`` gave
    them."""
    factory, args, prefix = KINDS[kind]
    buffer = make(lib, factory, *args)

    @jax.jit
    def maybe_add(state: Any, flag: jax.Array, code: jax.Array) -> Any:
        batch = jax.tree.map(lambda x: x + code.astype(x.dtype), steps(0, prefix))
        return jax.lax.cond(flag, lambda: buffer.add(state, batch), lambda: state)

    state = buffer.init(TIMESTEP)
    for i, flag in enumerate([True, False, True]):
        state = maybe_add(state, jnp.bool_(flag), jnp.int32(100 * i))

    def body(carry: Any) -> Any:
        s, i = carry
        return buffer.add(s, jax.tree.map(lambda x: x + i.astype(x.dtype), steps(7, prefix))), i + 1

    if kind != "queue":  # a full queue refuses adds, by design
        state = jax.jit(lambda s: jax.lax.while_loop(lambda c: c[1] < 2, body, (s, 0))[0])(state)
    return state


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_add_inside_cond_and_while_loop_matches_the_reference(kind: str) -> None:
    assert_same(run_control_flow(buffers, kind), quiet(run_control_flow, flashbax, kind), kind)


PER = buffers.make_prioritised_trajectory_buffer(2, 2, 2, 1, 2, None, 4, 1.0)
PER = PER.replace(
    add=jax.jit(PER.add), sample=jax.jit(PER.sample), set_priorities=jax.jit(PER.set_priorities)
)
QUEUE = buffers.make_trajectory_queue(4, 2, 2, 2)


@pytest.fixture(scope="module")
def saved() -> dict[str, Any]:
    """What a run holds when it saves: a prioritised state (wrapped, re-prioritised, a zero
    among the priorities) and a queue with unread data, plus a step count."""
    state = PER.init(TIMESTEP)
    for i in range(3):
        state = PER.add(state, steps(100 * i, (2, 2)))
    drawn = PER.sample(state, jax.random.PRNGKey(0))
    state = PER.set_priorities(state, drawn.indices, jnp.array([3.0, 0.0]))
    queue = QUEUE.add(QUEUE.init(TIMESTEP), steps(5, (2, 2)))
    return {"buffer": state, "queue": queue, "step": jnp.int32(7)}


def assert_restored(got: dict[str, Any], want: dict[str, Any]) -> None:
    """The same types, structure, dtypes and values; the same counts and next draw."""
    for name in ("buffer", "queue"):
        assert type(got[name]) is type(want[name]), name
    structure: Any = jax.tree.structure(want)
    assert jax.tree.structure(got) == structure
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_array_equal(a, b)
    assert buffers.timesteps_added(got["buffer"]) == 6
    assert buffers.timesteps_added(got["queue"]) == 2
    key = jax.random.PRNGKey(11)
    assert_same(PER.sample(got["buffer"], key), PER.sample(want["buffer"], key), "next draw")
    assert_same(QUEUE.sample(got["queue"]), QUEUE.sample(want["queue"]), "next read")


def test_pickled_and_copied_states_are_the_original(saved: dict[str, Any]) -> None:
    """Real projects save buffers with ``pickle.dump(state, file)`` and load them back (and
    copy them with ``deepcopy``): the loaded states have the original's types, structure,
    values and counts, and draw what it draws; the buffers pickle too."""
    assert_restored(pickle.loads(pickle.dumps(saved)), saved)
    assert_restored(copy.deepcopy(saved), saved)
    for buffer in (buffers.make_prioritised_flat_buffer(8, 1, 2), QUEUE):
        again = pickle.loads(pickle.dumps(buffer))
        assert_same(again.init(TIMESTEP), buffer.init(TIMESTEP), "pickled buffer")


def test_orbax_checkpoints_of_our_states_restore_against_init(
    saved: dict[str, Any], tmp_path: Path
) -> None:
    """flashbax-checkpoints.md: "From here on, save checkpoints of rlvault's state; they
    restore against ``buffer.init(example_step)`` as usual". A learner dict holding a
    prioritised state and a queue state is saved with orbax and restored against freshly
    initialised states: same types, values, write counters, and the same next draw."""
    ocp = pytest.importorskip("orbax.checkpoint")
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "ckpt", saved)
    checkpointer.wait_until_finished()
    target = {"buffer": PER.init(TIMESTEP), "queue": QUEUE.init(TIMESTEP), "step": jnp.int32(0)}
    assert_restored(checkpointer.restore(tmp_path / "ckpt", target), saved)
