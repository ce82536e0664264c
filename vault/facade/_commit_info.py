"""The commit methods of :class:`~vault.Vault` (its facade, by concern): which commit it
reads (its id, its content fingerprint, its seams) and the tags that name commits. They work on
the Vault's current snapshot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vault.commits._pins import commit_id, create_tag, fingerprint, list_tags

if TYPE_CHECKING:
    from vault.commits._snapshot import Snapshot
    from vault.format._records import Seam


class CommitMethods:
    """Mixed into :class:`~vault.Vault`: needs its ``snapshot``."""

    @property
    def snapshot(self) -> Snapshot:
        raise NotImplementedError

    @property
    def commit_id(self) -> str:
        """The id of the commit this Vault reads (``"<number>-<uid>"``).

        Pass it as ``Vault.open(location, at=...)`` to read exactly this data later.
        """
        return commit_id(self.snapshot.commit)

    def fingerprint(self) -> str:
        """The content fingerprint of the commit this Vault reads.

        Made from the chunks' stored checksums: a byte-for-byte copy has the same one, any
        changed value another (``vault verify --fingerprint`` checks it).

        Returns:
            Text made of ``sha256``, a colon and the digest in hex.
        """
        return fingerprint(self.snapshot)

    def tag(self, name: str) -> str:
        """Name the commit this Vault reads, for ``Vault.open(..., at=name)``.

        Needs no writer lock. A tag never moves.

        Args:
            name: 1-100 letters, digits, ``.``, ``_`` or ``-``, starting with a letter or
                ``_`` (so that it never looks like a commit id); in any letter case, not
                ``zarr.json`` and not ending in ``.__lock`` (names the store keeps for itself).

        Returns:
            The tagged commit's id.

        Raises:
            VaultExistsError: the tag names another commit already.
            VaultArgumentError: a name that is not a valid tag.
        """
        return create_tag(self.snapshot, name)

    def tags(self) -> dict[str, str]:
        """Every tag of the vault.

        Returns:
            Tag name -> commit id.
        """
        return list_tags(self.snapshot)

    @property
    def seams(self) -> list[Seam]:
        """The seams of the data: where consecutive timesteps of a row are not consecutive.

        At ``Seam(at, lost)`` the timesteps at ``at - 1`` and ``at`` are not consecutive.
        ``lost > 0``: that many timesteps per row were lost there
        (``on_overrun="save_surviving"``); ``lost == 0``: the rows restarted there
        (``append(..., continues=False)``, the seams of :func:`~vault.combine`, where a write
        appended another buffer than the one before). Streams never cut a sequence across a
        seam, and no episode runs across one.
        """
        return list(self.snapshot.commit.seams)

    @property
    def gaps(self) -> list[dict[str, int]]:
        """:attr:`seams` as ``{"at", "lost"}`` dicts (the name of earlier versions)."""
        return [seam.to_json() for seam in self.seams]
