"""A zarr store wrapper counting reads, shared by the zarr and dask tests (imported only where
zarr is installed)."""
from __future__ import annotations

import zarr


class CountingStore(zarr.storage.WrapperStore):
    """Logs every key read. zarr re-wraps a store for read-only access, so the log is kept on
    the class: clear it with ``CountingStore.keys.clear()`` before a read."""

    keys: list = []

    async def get(self, key, prototype, byte_range=None):
        self.keys.append(key)
        return await super().get(key, prototype, byte_range)

    @classmethod
    def chunk_reads(cls, prefix: str = "") -> list:
        """Keys read since the last clear, metadata (``zarr.json``) left out."""
        return [k for k in cls.keys if not k.endswith("zarr.json") and k.startswith(prefix)]
