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


# ---------------------------------------------------------------------------- the fuzz run's set-up
# tests/test_fuzz.py needs its base streams written and numba's bounds-checked kernels compiled
# (about 4 minutes, single-threaded, on a fresh clone). When it is selected, that starts in a
# background process as soon as the tests are collected (fuzzing.Preparation), on the second
# core while this session compiles its own kernels and runs the other tests on the first; the
# fixtures below wait for what is left of it. Not under pytest-xdist (its workers would each
# start one): there, and for `--collect-only`, the fixtures do the work themselves, as before.
_FUZZ_PREP = pytest.StashKey()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """The tests that need the fuzz set-up run last (in their order): the set-up then has the
    whole rest of the session to finish in the background, instead of the tests before
    test_fuzz in alphabetical order (and the fuzz cases, on every core, end the session)."""
    fuzz = [item for item in items if "fuzz_bases" in getattr(item, "fixturenames", ())]
    if fuzz:
        items[:] = [item for item in items if "fuzz_bases" not in getattr(item, "fixturenames", ())] + fuzz


def pytest_collection_finish(session):
    """Start the fuzz set-up in the background if a selected test needs it (``fuzz_bases``),
    with the kernels if one needs them (``fuzz_kernels``)."""
    names = [set(getattr(item, "fixturenames", ())) for item in session.items]
    if (not any("fuzz_bases" in n for n in names) or session.config.option.collectonly
            or os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("STRATA_FUZZ_PREPARE") == "0"):
        return
    from .fuzzing import Preparation

    session.config.stash[_FUZZ_PREP] = Preparation(kernels=any("fuzz_kernels" in n for n in names))


def pytest_sessionfinish(session):
    """End the background set-up (if still running: test_fuzz deselected by ``-k``, or a
    ``-x`` stop) and remove its files: no process outlives the session."""
    prep = session.config.stash.get(_FUZZ_PREP, None)
    if prep is not None:
        prep.stop()


@pytest.fixture(scope="session")
def fuzz_bases(request, tmp_path_factory):
    """The folder of the fuzzer's base streams (``fuzzing.build_bases``): the background
    set-up's, once written, or written now."""
    prep = request.config.stash.get(_FUZZ_PREP, None)
    if prep is not None:
        return prep.bases()
    from .fuzzing import build_bases

    folder = tmp_path_factory.mktemp("fuzz-bases")
    build_bases(folder)
    return folder


@pytest.fixture(scope="session")
def fuzz_kernels(request, fuzz_bases):
    """A function that returns once the bounds-checked kernels are in the fuzz numba cache
    (waiting for the background set-up, or compiling them, ``fuzzing.compile_kernels``), with
    the seconds it took. The test calls it: a failed warm-up fails that test, not its set-up."""
    prep = request.config.stash.get(_FUZZ_PREP, None)
    if prep is not None:
        return prep.kernels
    from .fuzzing import compile_kernels

    return lambda: compile_kernels(fuzz_bases)


def repack_header(blob, mutate):
    """Re-pack a lossy stream after ``mutate(header)`` (valid checksum, possibly absurd content)."""
    from strata.container import Source, pack, unpack_header
    from strata.lossy.header import LossyHeader

    raw, off = unpack_header(Source(blob), 1)
    h = LossyHeader.from_bytes(raw, len(blob))
    mutate(h)
    return pack(1, h.to_bytes(), [blob[off:]])
