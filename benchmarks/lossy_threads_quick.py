"""strata.lossy's speed on a few thread counts, one process per source tree: what fits a short
call of a many-core machine (``lossy_threads.py`` starts a worker process per version and round,
each compiling the kernels again: on the 16-core device its run outlasted the call).

Time (one process, ``PYTHONPATH`` = the tree's ``src``): one warm-up compression and
decompression per field, then per thread count (``numba.set_num_threads``) the median of
``--repeats`` compressions and decompressions at a value-range-relative bound; prints one line
per (field, threads)::

    PYTHONPATH=src python3 benchmarks/lossy_threads_quick.py --label new --threads 1,16 > new.txt

Table: ``--table new.txt base.txt ... --out benchmarks/results/NAME.md`` joins such files
(labels in file order, the first the one compared) into a markdown table.
"""
from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path


def measure(args) -> None:
    import numba
    import numpy as np

    import strata

    for path in sorted(Path(args.data).glob("*.f32")):
        if not any(path.name.startswith(f) for f in args.fields.split(",")):
            continue
        shape = tuple(int(n) for n in re.search(r"_(\d+(?:x\d+)*)\.f32$", path.name).group(1).split("x"))
        a = np.fromfile(path, "<f4").reshape(shape)
        eb = args.rel * float(np.ptp(a))
        strata.decompress(strata.compress(a, abs_error=eb))
        for threads in (int(t) for t in args.threads.split(",")):
            numba.set_num_threads(threads)
            c, d = [], []
            for _ in range(args.repeats):
                t = time.perf_counter()
                blob = strata.compress(a, abs_error=eb)
                c.append(time.perf_counter() - t)
                t = time.perf_counter()
                strata.decompress(blob)
                d.append(time.perf_counter() - t)
            mb = a.nbytes / 1e6
            print(f"{args.label} {path.name} threads {threads} compress MB/s {mb / statistics.median(c):.0f} "
                  f"decompress MB/s {mb / statistics.median(d):.0f} bytes {len(blob)}", flush=True)


def table(files: list[Path], out: Path) -> None:
    rows: dict[tuple[str, int], dict[str, tuple[float, float, int]]] = {}
    labels: list[str] = []
    for f in files:
        for line in f.read_text().splitlines():
            p = line.split()
            if len(p) != 12 or p[2] != "threads":
                continue
            if p[0] not in labels:
                labels.append(p[0])
            rows.setdefault((p[1], int(p[3])), {})[p[0]] = (float(p[6]), float(p[9]), int(p[11]))
    if not labels:
        raise SystemExit(f"no timing lines in {', '.join(map(str, files))} (a run that timed out while compiling?)")
    head = labels[0]
    lines = ["| field | threads | " + " | ".join(f"{lb} compress" for lb in labels) + " | "
             + " | ".join(f"{lb} decompress" for lb in labels) + " | bytes " + " / ".join(labels) + " |",
             "|---|---|" + "---|" * (2 * len(labels) + 1)]
    for (field, threads), v in sorted(rows.items()):
        get = [v.get(lb, (float("nan"),) * 2 + (0,)) for lb in labels]
        lines.append(f"| {field} | {threads} | " + " | ".join(f"{g[0]:.0f}" for g in get) + " | "
                     + " | ".join(f"{g[1]:.0f}" for g in get) + " | " + " / ".join(str(g[2]) for g in get) + " |")
    lines += ["", f"(MB/s of original bytes; `{head}` first.)", ""]
    out.write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=".devdata", help="folder of raw NAME_D0xD1xD2.f32 fields")
    ap.add_argument("--fields", default="ns3d192,era5_t2m,cosmo", help="comma-separated name prefixes")
    ap.add_argument("--threads", default="1,16")
    ap.add_argument("--rel", type=float, default=1e-3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--label", default="this")
    ap.add_argument("--table", nargs="+", type=Path, help="line files to join into a table (measures nothing)")
    ap.add_argument("--out", type=Path, help="with --table: the markdown file to write")
    args = ap.parse_args()
    if args.table:
        table(args.table, args.out or Path("/dev/stdout"))
    else:
        measure(args)


if __name__ == "__main__":
    main()
