"""Writing: the one writer of a vault, and creating a vault.

Write planning (pure: state + tip -> append job), the commit protocol (grow, data, episode
index, commit record) with its named fault points, the background queue, and creating a vault
from an example.

May import ``vault.commits``, ``vault.storage`` and ``vault.format``; never ``vault.read``.
"""
