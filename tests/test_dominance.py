"""strata.dominance: a value range dominated by a few extreme values is found, and the shared
real fields with their documented fill values declared are left alone (issue 35)."""
from __future__ import annotations

import numpy as np
import pytest

import strata
from strata.dominance import SHARE, check_array, check_stream
from strata.inputs import read_array

from .conftest import SHARED

ZOO_FILLS = {"ocean_foam_v": 1e35, "gpm_ku_zcorr": -9999.9}
FIELDS = sorted((SHARED / "data" / "sci").glob("*.f*")) + sorted((SHARED / "data" / "zoo").glob("*.f*"))


def smooth(shape=(40, 60), dtype=np.float32):
    y, x = np.meshgrid(np.linspace(0, 3, shape[0]), np.linspace(0, 4, shape[1]), indexing="ij")
    return (280 + 10 * np.sin(x) * np.cos(y)).astype(dtype)


@pytest.mark.skipif(not FIELDS, reason="shared data not present")
def test_shared_fields_with_their_fill_values_declared_are_not_reported():
    for path in FIELDS:
        a = read_array(path)
        fill = ZOO_FILLS.get(path.name.rsplit("_", 1)[0])
        missing = a == a.dtype.type(fill) if fill is not None else None
        assert check_array(a, missing) is None, path.name
        if fill is not None:  # undeclared, the fill dominates
            d = check_array(a)
            assert d is not None and d.values == (float(a.dtype.type(fill)),), path.name
            assert d.counts == (int(missing.sum()),) and d.share < SHARE


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fill_values_glitches_and_two_valued_fields(dtype):
    a = smooth(dtype=dtype)
    land = np.zeros(a.shape, bool)
    land[5:20, 10:30] = True
    b = a.copy()
    b[land] = dtype(1e20)
    d = check_array(b)
    assert d.values == (float(dtype(1e20)),) and d.counts == (int(land.sum()),) and d.groups == 2
    assert d.low == float(a[~land].min()) and d.high == float(dtype(1e20))
    assert check_array(b, land) is None and check_array(b, land.reshape(-1)) is None
    b[0, :3] = dtype(-1e20)  # fills at both ends: both named
    assert sorted(check_array(b).values) == [float(dtype(-1e20)), float(dtype(1e20))]
    c = a.copy()
    c.flat[[7, 70, 700]] = dtype(1e30) * np.array([1, 2, 3], dtype)  # a few glitches, all different
    d = check_array(c)
    assert d is not None and d.values == (float(c.max()),) and d.counts == (1,)
    assert check_array(np.where(land, dtype(1), dtype(0))) is None  # a mask stored as floats: not reported
    assert check_array(a) is None and check_array(np.full(5, np.nan, dtype)) is None
    assert check_array(np.zeros(0, dtype)) is None


def test_streams():
    a = np.stack([smooth((90, 120))] * 2)
    land = np.zeros(a.shape, bool)
    land[:, 20:60, 30:80] = True
    b = a.copy()
    b[land] = np.float32(1e20)
    for rel in (1e-2, 1e-3, 1e-4):
        with strata.open(strata.compress(b, rel_error=rel)) as r:
            d = check_stream(r)
            assert d is not None and d.values == (float(np.float32(1e20)),) and d.counts is None, rel
        with strata.open(strata.compress(b, rel_error=rel, fill_value=1e20)) as r:
            assert check_stream(r) is None
        with strata.open(strata.compress(a, rel_error=rel)) as r:
            assert check_stream(r) is None
