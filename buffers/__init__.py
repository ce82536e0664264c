"""In-memory JAX replay buffers: pure functions over pytree states.

The API follows the reference (Flashbax): code written for it runs by changing the import
(``import buffers as fbx``). Every state also carries a never-wrapping ``write_counter``, and
sampling a state that is not ready is an error (eagerly) or a false ``valid`` mask (in ``jit``),
never silent zeros.

Bad inputs raise typed errors, all :class:`BufferError` and the matching builtin, naming the
argument or leaf path, what was expected and what was got: :class:`BufferConfigError`
(``ValueError``: sizes, ranges, the episode-end leaf), :class:`ArgumentTypeError` (also
``TypeError``: ``2.5`` or ``True`` as a size, a string leaf, a state of another kind, an
integer as a PRNG key), :class:`BufferTooLargeError` (also ``MemoryError``: a state or sample
beyond the devices' memory, refused before allocating), :class:`BatchStructureError` (a batch
that does not match the state), :class:`PriorityError` (NaN, infinite or negative priorities,
indices that name no item), :class:`NotReadyError` and :class:`QueueFullError`
(``RuntimeError``). Shapes, dtypes and types are checked at trace time, so also under ``jit``;
values (priorities) only when concrete.

``buffers.__version__`` is the installed rlvault's version (the one in pyproject.toml, as
``vault.__version__`` and ``vault --version`` show it).
"""

from typing import TYPE_CHECKING

from buffers import (
    episode_buffer,
    flat_buffer,
    item_buffer,
    mixer,
    n_step_buffer,
    prioritised_flat_buffer,
    prioritised_item_buffer,
    prioritised_trajectory_buffer,
    sum_tree,
    trajectory_buffer,
    trajectory_queue,
    utils,
)
from buffers._counter import from_int as write_counter_from_int
from buffers._counter import timesteps_added
from buffers._errors import (
    ArgumentTypeError,
    BatchStructureError,
    BufferConfigError,
    BufferError,
    BufferTooLargeError,
    LeafMismatch,
    NotReadyError,
    PriorityError,
    QueueFullError,
)
from buffers._flashbax_state import from_flashbax_state, to_flashbax_state
from buffers._gather import gather_all
from buffers.episode_buffer import (
    EpisodeBuffer,
    EpisodeBufferSample,
    EpisodeBufferState,
    make_episode_buffer,
)
from buffers.flat_buffer import ExperiencePair, TransitionSample, make_flat_buffer
from buffers.item_buffer import make_item_buffer
from buffers.mixer import Mixer, make_mixer
from buffers.n_step_buffer import (
    make_n_step_buffer,
    n_step_discounts,
    n_step_returns,
)
from buffers.prioritised_flat_buffer import (
    PrioritisedTransitionSample,
    make_prioritised_flat_buffer,
)
from buffers.prioritised_item_buffer import make_prioritised_item_buffer
from buffers.prioritised_trajectory_buffer import (
    PrioritisedTrajectoryBuffer,
    PrioritisedTrajectoryBufferSample,
    PrioritisedTrajectoryBufferState,
    make_prioritised_trajectory_buffer,
)
from buffers.replay_buffer import ReplayBuffer, ReplayBufferState
from buffers.trajectory_buffer import (
    TrajectoryBuffer,
    TrajectoryBufferSample,
    TrajectoryBufferState,
    make_trajectory_buffer,
)
from buffers.trajectory_queue import (
    TrajectoryQueue,
    TrajectoryQueueSample,
    TrajectoryQueueState,
    make_trajectory_queue,
)

__all__ = [
    "ArgumentTypeError",
    "BatchStructureError",
    "BufferConfigError",
    "BufferError",
    "BufferTooLargeError",
    "EpisodeBuffer",
    "EpisodeBufferSample",
    "EpisodeBufferState",
    "ExperiencePair",
    "LeafMismatch",
    "Mixer",
    "NotReadyError",
    "PrioritisedTrajectoryBuffer",
    "PrioritisedTrajectoryBufferSample",
    "PrioritisedTrajectoryBufferState",
    "PrioritisedTransitionSample",
    "PriorityError",
    "QueueFullError",
    "ReplayBuffer",
    "ReplayBufferState",
    "TrajectoryBuffer",
    "TrajectoryBufferSample",
    "TrajectoryBufferState",
    "TrajectoryQueue",
    "TrajectoryQueueSample",
    "TrajectoryQueueState",
    "TransitionSample",
    "episode_buffer",
    "flat_buffer",
    "from_flashbax_state",
    "gather_all",
    "item_buffer",
    "make_episode_buffer",
    "make_flat_buffer",
    "make_item_buffer",
    "make_mixer",
    "make_n_step_buffer",
    "make_prioritised_flat_buffer",
    "make_prioritised_item_buffer",
    "make_prioritised_trajectory_buffer",
    "make_trajectory_buffer",
    "make_trajectory_queue",
    "mixer",
    "n_step_buffer",
    "n_step_discounts",
    "n_step_returns",
    "prioritised_flat_buffer",
    "prioritised_item_buffer",
    "prioritised_trajectory_buffer",
    "sum_tree",
    "timesteps_added",
    "to_flashbax_state",
    "trajectory_buffer",
    "trajectory_queue",
    "utils",
    "write_counter_from_int",
]

if TYPE_CHECKING:
    __version__: str


def __getattr__(name: str) -> str:
    # read on first use from the installed distribution's metadata (pyproject.toml's version,
    # the one version source; vault reads it the same way, as buffers never imports vault)
    if name != "__version__":
        raise AttributeError(f"module 'buffers' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("rlvault")
    except PackageNotFoundError:  # a source tree that was never installed
        value = "0+unknown"
    globals()[name] = value
    return value
