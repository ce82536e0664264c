"""The on-disk format as code.

Key names, the chunk-key rule and the typed records (manifest, leaf specs, commit record,
seams), pytree structure <-> JSON and node names, the episode index's records and
arithmetic, and the checksums bound to a chunk's place.

Pure data and numpy: no I/O. May import only ``vault._errors`` and ``vault._args``.
"""
