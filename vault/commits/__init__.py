"""What is committed: the immutable :class:`Snapshot` (manifest + one commit record +
array handles) and pinned versions (commit ids, the history, tags, fingerprints).

Readers and writers both stand on it. May import ``vault.storage`` and ``vault.format``.
"""
