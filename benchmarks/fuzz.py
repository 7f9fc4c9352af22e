#!/usr/bin/env python3
"""Structure-aware fuzzing of strata's decoders, at length (the CI test, ``tests/test_fuzz.py``,
runs a few thousand cases of the same fuzzer).

Valid lossy streams (float32/float64, 0-D to 4-D, with and without missing values, infinities,
NaN payloads, metadata) and checkpoint files (a state dict, full and delta, a larger segment, a
safetensors file) are parsed into their fields; each case changes one field (or a few), then
recomputes the lengths and every CRC so the parsers and compiled kernels see the bad values
(see ``tests/fuzzing.py``). Cases run in worker subprocesses with numba's bounds checking on
(``NUMBA_BOUNDSCHECK=1``, its own numba cache) and an address-space limit; a case must decode
to a result that keeps its stream's promises (else ``SILENT``: ``tests/fuzzing.py``
``check_read``) or raise a ``strata.errors`` type within 5 s.

Prints the outcome table (per mutated field: cases, decoded, each strata error type, SILENT,
other exceptions, crashes, hangs), the same per decoder and per base stream, and every finding
with the command that reproduces it; writes them to benchmarks/results/fuzz.md. Exit status 1 if
a case was SILENT, raised another exception, crashed or hung, unless it is a documented issue of a module
outside the fuzzer's remit (``KNOWN`` in tests/fuzzing.py; each has a strict xfail in
tests/test_fuzz.py).

    .venv/bin/python benchmarks/fuzz.py [--cases 20000] [--seed 1] [--decoders all]
    .venv/bin/python benchmarks/fuzz.py --repro SEED:INDEX [--decoders ...] [--save case.bin]

Decoders: ``full`` (open, whole read, metadata, CF metadata, the enhancement section),
``level`` (a progressive read, full resolution or the level's grid), ``region`` (a region
read), ``mask`` (the missing-value mask, whole or a region), ``netcdf``
(``strata.cf.to_netcdf``), ``fields`` and ``fields-region`` (``strata.enhance.decompress_fields``
of a field set, whole or a region), ``checkpoint`` (``strata.checkpoint.load`` or
``decompress_safetensors``); ``lossy`` is the first five, ``fields`` the two field-set ones,
``all`` every one. Lossy streams with an enhancement section (``strata.enhance``, 1x and 2x) and
a field set are among the bases when torch is installed. ``--repro`` needs the same
``--decoders`` as the run that found the case.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from tests import fuzzing as fz  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def decoder_list(spec: str) -> tuple[str, ...]:
    out: list[str] = []
    for name in spec.split(","):
        name = name.strip()
        group = {"all": fz.ALL_DECODERS, "lossy": fz.LOSSY_DECODERS, "checkpoint": fz.CHECKPOINT_DECODERS,
                 "fields": fz.FIELDS_DECODERS, "layers": fz.LAYERS_DECODERS}.get(name)
        for d in group or (name,):
            if d not in fz.ALL_DECODERS:
                raise SystemExit(f"unknown decoder {d!r}: choose from {', '.join(fz.ALL_DECODERS)}, lossy, fields, "
                                 "layers, checkpoint, all")
            if d not in out:
                out.append(d)
    return tuple(out)


def repro(spec: str, decoders: tuple[str, ...], save: str | None) -> None:
    """Run one case in this process (bounds checking on), printing its traceback."""
    env = fz.worker_env()
    if os.environ.get("NUMBA_BOUNDSCHECK") != "1":  # numba reads it when it is imported
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    seed, index = (int(v) for v in spec.split(":"))
    folder = Path(tempfile.mkdtemp(prefix="strata-fuzz-bases-"))
    bases = fz.build_bases(folder)
    blobs = {b.name: (folder / b.file).read_bytes() for b in bases}
    case = fz.make_case(seed, index, bases, blobs, decoders)
    print(f"case {seed}:{index}: base {case.base}, decoder {case.decoder}, mutated {case.category}, "
          f"{len(case.data)} bytes")
    if save:
        Path(save).write_bytes(case.data)
        print(f"mutated stream written to {save}")
    base = next(b for b in bases if b.name == case.base)
    workdir = Path(tempfile.mkdtemp(prefix="strata-fuzz-"))
    for need in base.extra.get("needs", []):
        (workdir / need).write_bytes((folder / need).read_bytes())
    try:
        fz.run_decoder(case, base, workdir)
        print("decoded")
    except Exception as exc:  # noqa: BLE001 - printed for the reader
        import traceback

        traceback.print_exc()
        print("outcome:", fz.classify(exc))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=20000, help="number of cases (default 20000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--decoders", default="all", help="comma-separated decoders, or lossy / checkpoint / all")
    ap.add_argument("--workers", type=int, default=max(1, min(8, len(os.sched_getaffinity(0)))))
    ap.add_argument("--timeout", type=float, default=fz.CASE_TIMEOUT, help="seconds a case may take")
    ap.add_argument("--memory", type=float, default=fz.MEMORY_HEADROOM / 2**30,
                    help="GiB of address space a worker may add after its imports")
    ap.add_argument("--out", default=str(RESULTS / "fuzz.md"))
    ap.add_argument("--json", help="also write every case's outcome to this JSON file")
    ap.add_argument("--repro", metavar="SEED:INDEX", help="run one case here and print its traceback")
    ap.add_argument("--save", help="with --repro: write the mutated stream to this file")
    args = ap.parse_args()
    decoders = decoder_list(args.decoders)
    if args.repro:
        repro(args.repro, decoders, args.save)
        return

    folder = Path(tempfile.mkdtemp(prefix="strata-fuzz-bases-"))
    t = time.perf_counter()
    bases = fz.build_bases(folder)
    print(f"{len(bases)} base streams in {time.perf_counter() - t:.1f} s; compiling the bounds-checked kernels "
          f"into {fz.numba_cache_dir()} ...", flush=True)
    compile_s = fz.compile_kernels(folder)
    print(f"compiled (or loaded from the cache) in {compile_s:.1f} s", flush=True)
    t = time.perf_counter()
    last = [0.0]

    def progress(done, total):
        now = time.perf_counter()
        if now - last[0] > 30 or done == total:
            last[0] = now
            print(f"  {done}/{total} cases, {now - t:.0f} s", flush=True)

    outcomes, late_compile_s = fz.run_pool(folder, args.seed, range(args.cases), decoders, workers=args.workers,
                           timeout=args.timeout, headroom=int(args.memory * 2**30), progress=progress)
    fuzz_s = time.perf_counter() - t
    if args.json:
        Path(args.json).write_text(json.dumps([o.__dict__ for o in outcomes]))
    failures = [o for o in outcomes if fz.is_failure(o)]
    known = [o for o in failures if fz.known_issue(o)]
    text = "\n".join([
        "# Structure-aware fuzzing of the decoders",
        "",
        f"`benchmarks/fuzz.py --cases {args.cases} --seed {args.seed} --decoders {','.join(decoders)}`: "
        f"{len(outcomes)} cases in {fuzz_s:.0f} s on {args.workers} workers ({platform.machine()}, "
        f"{len(os.sched_getaffinity(0))} cores), bounds-checked kernels compiled or loaded in {compile_s:.0f} s; "
        f"{args.timeout:g} s and {args.memory:g} GiB of address space per case"
        + (f" ({late_compile_s:.0f} s of compilation during the cases, not counted)" if late_compile_s else "")
        + ". Each case parses a valid stream "
        "into its fields, changes one (or 2-3: \"combined\"), recomputes lengths and every CRC, and decodes it. "
        "A case passes when it raises a `strata.errors` type, or decodes to a result that keeps its stream's "
        "promises (`tests/fuzzing.py` `check_read`: the shape and dtype asked for, no NaN at a valid point, valid "
        "values within the recorded valid range widened by the bound, a whole mask of the header's missing count "
        "whose points hold the fill pattern or an exact value, finite metadata numbers); a result that breaks one "
        "is `SILENT`, a failure. `targeted: ...` rows change the header fields a read checks against its sections "
        f"({fz.TARGETED_SHARE:.0%} of the lossy cases).",
        "",
        f"**{len(failures)} failures** (SILENT results, other exceptions, crashes, hangs), {len(known)} of them "
        "documented "
        "known issues of modules outside the fuzzer's remit.",
        "",
        "## Per mutated field",
        "",
        fz.table(outcomes, "category"),
        "",
        "## Per decoder",
        "",
        fz.table(outcomes, "decoder"),
        "",
        "## Per base stream",
        "",
        fz.table(outcomes, "base"),
        "",
        "## Per code width",
        "",
        f"A lossy or field-set case lets the reader take narrow (uint16) codes for any size of stream "
        f"({fz.NARROW_SHARE:.0%} of them, by index) or keeps its default (narrow only from 2**20 values on, "
        "above every base stream): where the tables allow them, the narrow kernels decode.",
        "",
        fz.table(outcomes, "codes"),
        "",
        "## Findings",
        "",
        fz.findings(outcomes, args.seed) or "None.",
        "",
    ])
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    from strata.atomic import atomic_write

    atomic_write(args.out, text)
    print(f"written to {args.out}")
    sys.exit(1 if len(failures) > len(known) else 0)


if __name__ == "__main__":
    main()
