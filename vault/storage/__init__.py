"""Where bytes live: locations, storage kinds, arrays through TensorStore.

The location abstraction (kvstore spec, capabilities, writer lock, staging, recovery), one
private module per storage kind (``_file``, ``_memory``, ``_s3``), the parser from paths and
URLs to locations (``_kinds``), Zarr arrays through TensorStore (``_arrays``), the S3 relay
that moves remote chunks through memory, and the reclaimer of replaced files.

May import ``vault.format`` and the base modules. Storage kinds never import each other.
"""
