"""Precision layers in the ecosystem: numcodecs' own codec checks on a codec writing layered
chunks, zarr v3 and v2 stores read at a coarser bound through ErrorBoundStore (fetching a
chunk's header and then only the prefix of layers the bound needs), xarray's open_zarr."""
from __future__ import annotations

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")
common = pytest.importorskip("numcodecs.tests.common")

import strata.xarray  # noqa: E402
from strata.errors import InvalidInputError  # noqa: E402
from strata.lossy.layers import HEAD_BYTES  # noqa: E402
from strata.numcodecs import Strata  # noqa: E402
from strata.zarr import ErrorBoundStore, StrataCodec  # noqa: E402

from .synthetic import waves  # noqa: E402


def _field(shape=(16, 24, 20)):
    a = waves(shape, 21, np.float32, noise=0.01)
    a[2:5, 3:9, :4] = np.nan
    return a


def _err(y, a):
    ok = np.isfinite(a)
    assert np.array_equal(np.isnan(y), np.isnan(a))
    return float(np.abs(y[ok].astype(np.float64) - a[ok]).max())


@pytest.mark.parametrize("layout", ["C", "F", "C>", "view"])
def test_numcodecs_checks_on_layered_chunks(layout):
    a = _field()
    a = {"C": a, "F": np.asfortranarray(a), "C>": a.astype(">f4"), "view": a[::2, 1:, ::-1]}[layout]
    codec = Strata(abs_error=0.0, layers=[0.1, 0.01])
    common.check_encode_decode_array(a, codec)             # exact at bound 0, every layout
    coarse = Strata.from_config({**codec.get_config(), "read_error_bound": 0.01})
    y = coarse.decode(codec.encode(a))
    assert y.dtype == a.dtype and y.shape == a.shape and _err(y, a) <= 0.01
    back = Strata.from_config(coarse.get_config())
    assert back.get_config() == coarse.get_config() and back.get_config()["read_error_bound"] == 0.01
    with pytest.raises(InvalidInputError):
        Strata(abs_error=0.01, read_error_bound=0.001)
    with pytest.raises(InvalidInputError):
        Strata(abs_error=0.01, layers=[0.001])


class _Counting(zarr.storage.WrapperStore):
    """Counts the bytes of chunks each get returns (in ``counts``, shared by its copies)."""

    def __init__(self, store, counts=None):
        super().__init__(store)
        self.counts = [0] if counts is None else counts

    @property
    def fetched(self) -> int:
        return self.counts[0]

    def _with_store(self, store):
        return type(self)(store, self.counts)

    async def get(self, key, prototype, byte_range=None):
        buf = await self._store.get(key, prototype, byte_range)
        if buf is not None and not key.endswith(("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")):
            self.counts[0] += len(buf)
        return buf


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_stores_read_at_a_coarser_bound_fetch_only_the_layers_needed(zarr_format):
    a = _field((32, 48, 40))
    vr = float(np.nanmax(a) - np.nanmin(a))
    store = zarr.storage.MemoryStore()
    if zarr_format == 3:
        codec = StrataCodec.for_array(a, 1e-5, layers=[1e-2, 1e-3])
        z = zarr.create_array(store, shape=a.shape, chunks=(16, 24, 40), dtype="f4", serializer=codec,
                              compressors=None)
    else:
        codec = Strata.for_array(a, 1e-5, layers=[1e-2, 1e-3])
        z = zarr.create_array(store, shape=a.shape, chunks=(16, 24, 40), dtype="f4", compressors=codec,
                              filters=None, zarr_format=2, fill_value=np.nan)
    z[:] = a
    assert _err(z[:], a) <= 1e-5 * vr
    full = _Counting(store)
    zarr.open_array(full, mode="r")[:]
    for rel, bound in ((1e-2, 1e-2 * vr), (1e-3, 1e-3 * vr)):
        counting = _Counting(store)
        view = zarr.open_array(ErrorBoundStore(counting, rel_error=rel), mode="r")
        y = view[:]
        if zarr_format == 3:        # (zarr v2 arrays fetch whole chunks: no partial decoding path)
            assert counting.fetched < (0.5 if rel == 1e-2 else 0.8) * full.fetched
        assert _err(y, a) <= bound and _err(y, a) > 1e-5 * vr
        assert np.array_equal(view[3:9, 5:17, 7], y[3:9, 5:17, 7], equal_nan=True)
    with pytest.raises(InvalidInputError):
        zarr.open_array(ErrorBoundStore(store, error_bound=1e-7 * vr), mode="r")
    with pytest.raises(InvalidInputError):
        ErrorBoundStore(store, error_bound=1.0, rel_error=1e-3)
    with pytest.raises(ValueError, match="read-only"):       # (zarr's own refusal of a read-only store)
        zarr.open_array(ErrorBoundStore(store, rel_error=1e-3), mode="a")


def test_a_plain_store_reads_at_its_bound_or_coarser(tmp_path):
    a = _field()
    z = zarr.create_array(tmp_path / "p.zarr", shape=a.shape, chunks=(8, 12, 20), dtype="f4",
                          serializer=StrataCodec(abs_error=0.01), compressors=None)
    z[:] = a
    y = zarr.open_array(ErrorBoundStore.of(tmp_path / "p.zarr", error_bound=0.05), mode="r")[:]
    assert _err(y, a) <= 0.01
    assert HEAD_BYTES > 0


def test_xarray_open_zarr_at_a_coarser_bound(tmp_path):
    xr = pytest.importorskip("xarray")
    a = _field()
    ds = xr.Dataset({"t": (("z", "y", "x"), a)})
    enc = strata.xarray.encoding(ds, rel_error=1e-5, layers=[1e-2, 1e-3])
    ds.to_zarr(tmp_path / "o.zarr", encoding=enc, zarr_format=3, consolidated=False)
    vr = float(np.nanmax(a) - np.nanmin(a))
    coarse = strata.xarray.open_zarr(tmp_path / "o.zarr", rel_error=1e-3, consolidated=False)
    assert 1e-5 * vr < _err(coarse.t.values, a) <= 1e-3 * vr
    xr.testing.assert_allclose(coarse.t, ds.t, atol=1e-3 * vr, rtol=0)
    fine = xr.open_zarr(tmp_path / "o.zarr", consolidated=False)
    assert _err(fine.t.values, a) <= 1e-5 * vr
