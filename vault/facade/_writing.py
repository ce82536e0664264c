"""The writing methods of :class:`~vault.Vault` (its facade, by concern): appending buffer
states or arrays through the vault's one writer, and waiting for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vault._args import bool_arg

if TYPE_CHECKING:
    from vault.write._plan import OnOverrun
    from vault.write._writer import Writer


class WriteMethods:
    """Mixed into :class:`~vault.Vault`: needs its ``rows``, its writer (``_writer``) and
    ``_writer_for_write`` (the writer, taken on first use; refused when read-only)."""

    _writer: Writer | None

    @property
    def rows(self) -> int:
        raise NotImplementedError

    def _writer_for_write(self) -> Writer:
        raise NotImplementedError

    def write(
        self,
        state: Any,
        *,
        on_overrun: OnOverrun = "error",
        new_buffer: bool = False,
        block: bool = True,
    ) -> int:
        """Append the timesteps added to ``state`` since the previous write.

        Writes go by the buffer's write counter, which the commit record keeps (after
        :meth:`open`, a different buffer is refused). A write never stores less than is new
        silently.

        Args:
            state: a buffer state of this package (its experience shaped like the vault's).
            on_overrun: when more timesteps were added since the last write than the buffer
                holds, the oldest unsaved ones are gone: ``"error"`` raises (the vault is
                unchanged); ``"save_surviving"`` saves the surviving ones and records the loss
                as a seam (:attr:`seams`).
            new_buffer: append all the buffer holds (a buffer new to this vault); safe on
                every write: never a timestep twice, and an overrun of the buffer this object
                wrote last is still an overrun (above: a buffer more than a ring past the
                vault's last timestep is taken for it). ``Vault(name, ...)`` always acts so.
            block: ``False`` returns once the fresh timesteps have been copied out of the
                buffer into host memory (so the buffer may be donated or overwritten at
                once); compression, I/O and the commit continue on a background thread, in
                order, compressing on one core fewer than the machine has (at least one), so
                that a training step running beside it keeps a core. At most
                :attr:`max_pending` writes wait there (then the call blocks).
                :meth:`flush`, :meth:`close` and leaving a ``with`` block wait for them; an
                error in the background is raised by the next ``write``/``flush``/``close``,
                and nothing after the failed write is committed.

        Returns:
            How many timesteps per row were appended.

        Raises:
            UnsavedDataLostError: unsaved timesteps were overwritten (``on_overrun="error"``);
                it says how many.
            VaultStructureError: a state of another structure, or a different buffer after
                :meth:`open` without ``new_buffer``.
            VaultModeError: the vault is read-only or closed.
            VaultLockedError: another writer took the lock (opened by ``Vault(...)``).
            VaultArgumentError: ``new_buffer`` or ``block`` not True or False.

        Examples:
            >>> import jax.numpy as jnp
            >>> import buffers as fbx
            >>> from vault import Vault
            >>> buffer = fbx.make_flat_buffer(max_length=64, min_length=1, sample_batch_size=1)
            >>> state = buffer.add(buffer.init({"obs": jnp.zeros(3)}), {"obs": jnp.ones(3)})
            >>> with Vault.create("runs/doc", state) as v:
            ...     print(v.write(state), v.write(state))  # nothing new the second time
            1 0
        """
        new_buffer, block = bool_arg("new_buffer", new_buffer), bool_arg("block", block)
        writer = self._writer_for_write()
        return writer.write(state, on_overrun=on_overrun, new_buffer=new_buffer, block=block)

    def append(self, experience: Any, *, continues: bool = True) -> int:
        """Append timesteps given directly as arrays, for data that does not come from a buffer.

        For a Gymnasium loop or another dataset. Blocking; it forgets the buffer write
        counter, so a later ``write(state)`` saves all that buffer holds (as with
        ``new_buffer=True``), after a seam: the buffer's rows are not taken to continue the
        arrays appended.

        Args:
            experience: the vault's structure with leaves ``[rows, n, ...]`` (numpy or JAX).
            continues: ``False`` says the rows do not continue their open episodes: those are
                dropped from the index and new ones start here (a seam is recorded).

        Returns:
            ``n``, the timesteps per row appended.

        Raises:
            VaultStructureError: leaves missing, extra, or of other shapes or dtypes (every
                bad leaf listed).
            VaultModeError: the vault is read-only or closed.
            VaultArgumentError: ``continues`` not True or False.
        """
        continues = bool_arg("continues", continues)
        writer = self._writer_for_write()
        return writer.append(experience, None if continues else np.ones(self.rows, bool))

    def flush(self) -> None:
        """Wait until every write has been committed.

        Raises:
            VaultError: a background write failed (nothing after it was committed).
        """
        if self._writer is not None:
            self._writer.flush()
