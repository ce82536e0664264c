"""The :class:`Vault` facade, and streaming per-leaf statistics of a vault or a dataset.

``create`` / ``open`` / the reference-style constructor, with its reading, writing, episode
and commit methods by concern.

Delegates to ``vault.write``, ``vault.read`` and ``vault.stream``; may import everything below.
"""
