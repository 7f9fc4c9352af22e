"""strata.xarray.encoding written through xarray in both zarr formats and read back with
``xarray.open_zarr``: ``xarray.testing.assert_allclose`` within each variable's bound, missing
values (NaN holes and a CF ``_FillValue``) included, attributes and lossless variables kept."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")

from strata import xarray as sx  # noqa: E402
from strata.numcodecs import Strata  # noqa: E402
from strata.zarr import StrataCodec  # noqa: E402


def _dataset():
    g = np.random.default_rng(5)
    t = np.linspace(0, 4, 30)[:, None, None] + np.linspace(0, 2, 17)[None, :, None] + np.linspace(0, 3, 21)
    t2m = (280 + 6 * np.sin(t) + 0.05 * g.standard_normal(t.shape)).astype(np.float32)
    t2m[:, :3, :4] = np.nan                                    # a hole: written as _FillValue
    wind = np.cumsum(g.standard_normal((30, 17)), axis=1).astype(">f8")   # big-endian
    wind[5, 2:6] = np.nan
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), t2m, {"units": "K"}),
                     "wind": (("time", "lat"), wind, {"units": "m s-1"}),
                     "count": (("time",), np.arange(30, dtype=np.int16))},
                    coords={"time": np.arange(30), "lat": np.linspace(50, 58, 17), "lon": np.linspace(-10, 2, 21)})
    ds.t2m.encoding["_FillValue"] = np.float32(-9999.0)
    return ds


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_encoding_writes_through_xarray(tmp_path, zarr_format):
    ds = _dataset()
    enc = sx.encoding(ds.chunk({"time": 12}), rel_error={"t2m": 1e-3, "wind": 1e-4}, zarr_format=zarr_format)
    codec = Strata if zarr_format == 2 else StrataCodec
    key = "compressors" if zarr_format == 2 else "serializer"
    assert all(isinstance(e[key], codec) for e in enc.values())
    with warnings.catch_warnings():                              # zarr: v3 consolidated metadata is not in the spec
        warnings.filterwarnings("ignore", "Consolidated metadata is currently not part", UserWarning)
        ds.chunk({"time": 12}).to_zarr(tmp_path / "out.zarr", encoding=enc, zarr_format=zarr_format,
                                       consolidated=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                           # consolidated metadata: no warning
        back = xr.open_zarr(tmp_path / "out.zarr")
    assert back.t2m.chunks is not None
    for name in ("t2m", "wind"):
        eb = enc[name][key].config.abs_error
        xr.testing.assert_allclose(back[name].load(), ds[name], rtol=0, atol=eb)
        assert np.array_equal(np.isnan(back[name].values), np.isnan(ds[name].values))
        assert back[name].attrs == ds[name].attrs
    xr.testing.assert_identical(back["count"].load(), ds["count"])
    raw = xr.open_zarr(tmp_path / "out.zarr", mask_and_scale=False)
    assert np.count_nonzero(raw.t2m.values == -9999.0) == np.count_nonzero(np.isnan(ds.t2m.values))
