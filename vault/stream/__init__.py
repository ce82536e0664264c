"""Streams for data larger than memory.

Batches of sequences cut from blocks of whole chunks, the layout and order of an epoch,
shares of several JAX processes, checkpointable positions and resuming, windows as buffer
states, the background prefetcher and the Grain data source.

May import ``vault.read`` and everything below it.
"""
