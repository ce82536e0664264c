"""New vaults from old ones: a row/time slice, selected episodes, several vaults combined.

May import ``vault.dataset`` and everything below it; used by the converters and the CLI.
"""
