"""What is committed: the immutable snapshot of a commit, and pinned versions.

The :class:`Snapshot` is the manifest + one commit record + array handles; pinned versions
are commit ids, the history, tags and fingerprints.

Readers and writers both stand on it. May import ``vault.storage`` and ``vault.format``.
"""
