"""Reading what a snapshot holds: time ranges and row selections as numpy, buffer states
or episodes; ``verify`` (every byte checked, every problem named); facts about vaults at a
location (``find_vaults``, lock holders, disk use); the xarray/dask view.

May import ``vault.commits``, ``vault.storage`` and ``vault.format``; never ``vault.write``.
"""
