"""Datasets of shards: many writers, one dataset, no coordinator.

The :class:`Dataset` class, its shards read as records in batches, and the catalog at its root.

May import ``vault.facade`` and everything below it.
"""
