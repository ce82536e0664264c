"""The :class:`Vault` facade (``create`` / ``open`` / the reference-style constructor),
its episode methods, and streaming per-leaf statistics of a vault or a dataset.

Delegates to ``vault.write``, ``vault.read`` and ``vault.stream``; may import everything below.
"""
