"""Shared fixtures: the real fields in ../shared/data/sci (tests skip cleanly without them)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from strata.inputs import read_array

# compiled kernels make the first example of a test slow: no per-example deadline
settings.register_profile("strata", deadline=None, print_blob=True)
settings.load_profile("strata")

SHARED = Path(os.environ.get("STRATA_SHARED", Path(__file__).resolve().parents[2] / "shared"))
SCI = SHARED / "data" / "sci"
SCI_FILES = sorted(SCI.glob("*.f32")) + sorted(SCI.glob("*.f64")) if SCI.is_dir() else []


def sci_params():
    if not SCI_FILES:
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared/data/sci not present"))]
    return [pytest.param(p, id=p.name.split("_")[0] + "_" + p.name.split("_")[1]) for p in SCI_FILES]


@pytest.fixture(scope="session")
def field_cache():
    return {}


def load_field(path, cache):
    if path not in cache:
        cache[path] = read_array(path)
    return cache[path]


def repack_header(blob, mutate):
    """Re-pack a lossy stream after ``mutate(header)`` (valid checksum, possibly absurd content)."""
    from strata.container import Source, pack, unpack_header
    from strata.lossy.header import LossyHeader

    raw, off = unpack_header(Source(blob), 1)
    h = LossyHeader.from_bytes(raw, len(blob))
    mutate(h)
    return pack(1, h.to_bytes(), [blob[off:]])
