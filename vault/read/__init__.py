"""Reading what a snapshot holds, checking it, and facts about vaults at a location.

Time ranges and row selections as numpy, buffer states or episodes; ``verify`` (every byte
checked, every problem named); ``find_vaults``, lock holders, disk use; the xarray/dask view.

May import ``vault.commits``, ``vault.storage`` and ``vault.format``; never ``vault.write``.
"""
