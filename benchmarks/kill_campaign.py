"""kill -9 campaign: writers killed at random moments leave the old or the complete new output,
and the next run leaves no temporary file behind (issue 35).

Five writers, each killed (SIGKILL) ``--kills`` times:

* ``strata ckpt compress MODEL -o OUT --force`` (the shared MiniLM safetensors file, 91 MB);
* an :class:`strata.checkpoint.AsyncCheckpointer` saving 8 MB states to two names in turn
  (deltas across the names, a full snapshot every fourth save), a small Python driver;
* ``strata compress FIELD -o OUT --force`` (ns3d_vx, 8 MB);
* ``strata decompress STREAM -o OUT.npy --force``;
* ``strata convert IN.nc OUT.zarr --force`` (era5_t2m written as NetCDF).

Each trial puts the old output in place, starts the writer and kills it: half of the trials
at a moment drawn uniformly over the writer's whole run (measured unkilled), half at a moment
drawn uniformly over 1.5 times the life of its temporary file (from its appearance to its
rename, measured unkilled), counted from its appearance, so that the renames are hit too.
Right after the kill the destination must be the old output or the complete new one (files:
byte for byte, or for checkpoints whose ids differ from run to run, decoded and compared to
the source; stores: every file byte for byte), every checkpoint must load; then the writer
runs again to its end (the next run) and no temporary file or directory
(``.NAME.strata-tmp.*``, ``.NAME.strata-old.*``) may be left in the folder.

Usage::

    python benchmarks/kill_campaign.py [--kills 24] [--seed 0] [--out benchmarks/results]

Writes ``kill_campaign.json`` and ``kill_campaign.md`` to ``--out``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import SHARED, machine
from strata.atomic import atomic_write

STRATA = [sys.executable, "-m", "strata.cli"]
TEMP_TAGS = (".strata-tmp.", ".strata-old.")

ASYNC_DRIVER = r"""
import sys
import numpy as np
from strata.checkpoint import AsyncCheckpointer

def state(k):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1024, 1024)).astype(np.float32)
    w[:, k % 1024] += np.float32(k)
    return {"w": w, "b": (rng.standard_normal(1 << 20) * (1 + k)).astype(np.float32), "step": np.array([k])}

if __name__ == "__main__":
    folder, start, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ck = AsyncCheckpointer(full_every=4)
    k = start
    while count < 0 or k < start + count:
        ck.save(state(k), f"{folder}/ckpt_{k % 2}.strata")
        k += 1
    ck.close()
"""


def temp_names(folder: Path) -> list[str]:
    """The names of the temporary entries in ``folder``."""
    return [n for n in os.listdir(folder) if any(t in n for t in TEMP_TAGS)]


def temps(folder: Path) -> list[tuple[str, int]]:
    """The temporary entries in ``folder`` and their sizes (bytes, all files of a directory),
    once no writer runs there."""
    out = []
    for name in temp_names(folder):
        p = folder / name
        size = sum(q.stat().st_size for q in p.rglob("*") if q.is_file()) if p.is_dir() else p.stat().st_size
        out.append((name, size))
    return out


def digest(path: Path) -> str | None:
    """SHA-256 of a file, or of a directory's files (names and bytes); None when absent."""
    if not path.exists():
        return None
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if p.is_file():
            h.update(str(p.relative_to(path)).encode() if path.is_dir() else b"")
            h.update(p.read_bytes())
    return h.hexdigest()


def put(src: Path, dest: Path) -> None:
    """Put a copy of ``src`` (file or directory) at ``dest``, replacing what is there."""
    if dest.is_dir():
        shutil.rmtree(dest)
    elif dest.exists():
        dest.unlink()
    (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest)


def run_to_end(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}")


def run_and_kill(cmd: list[str], folder: Path, delay: float, after_temp: bool) -> bool:
    """Start ``cmd``; SIGKILL it ``delay`` seconds after its start (or after its temporary file
    appears in ``folder``); True when it had already finished."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if after_temp:
        while p.poll() is None and not temp_names(folder):
            time.sleep(0.001)
    time.sleep(delay)
    finished = p.poll() is not None
    if not finished:
        os.kill(p.pid, signal.SIGKILL)
    p.wait()  # (reaped: its process id is gone for the next run's clean-up)
    return finished and p.returncode == 0


def timings(cmd: list[str], folder: Path, setup) -> tuple[float, float]:
    """Wall time of an unkilled run and the life of its temporary file (from its appearance to
    its rename), medians of 3."""
    runs, writes = [], []
    for _ in range(3):
        setup()
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen = gone = None  # (first and last time a temporary is there: zarr's mode "w" removes and
        while p.poll() is None:  # makes again the directory it is given, so it vanishes for a moment)
            if temp_names(folder):
                gone = time.perf_counter()
                seen = seen or gone
            time.sleep(0.0005)
        end = time.perf_counter()
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed")
        runs.append(end - t0)
        writes.append((gone or end) - (seen or end))
    return float(np.median(runs)), float(np.median(writes))


class Writer:
    """One writer of the campaign: its command, the old output and how to tell what is there."""

    def __init__(self, name, cmd, dest: Path, old: Path, new_digest: str | None, check=None):
        self.name, self.cmd, self.dest, self.old = name, cmd, dest, old
        self.old_digest, self.new_digest, self.check = digest(old), new_digest, check

    def state(self) -> str:
        d = digest(self.dest)
        if d is None:
            return "missing"
        if d == self.old_digest:
            return "old"
        if d == self.new_digest or (self.check is not None and self.check(self.dest)):
            return "new"
        return "other"


def campaign_cli(w: Writer, kills: int, rng: random.Random) -> dict:
    folder = w.dest.parent
    setup = lambda: put(w.old, w.dest)  # noqa: E731
    duration, write = timings(w.cmd, folder, setup)
    trials = []
    for i in range(kills):
        setup()
        after_temp = i % 2 == 1
        delay = rng.uniform(0, 1.5 * write if after_temp else duration)
        finished = run_and_kill(w.cmd, folder, delay, after_temp)
        left = temps(folder)
        state = w.state()
        run_to_end(w.cmd)  # the next run
        trials.append({"delay_s": round(delay, 4), "from": "temporary file" if after_temp else "start",
                       "finished": finished, "state": state, "temporaries": left,
                       "after_next_run": w.state(), "left_after_next_run": temps(folder)})
    return summary(w.name, w.cmd, duration, write, trials)


def summary(name, cmd, duration, write, trials) -> dict:
    states = [t["state"] for t in trials]
    return {"writer": name, "command": " ".join(str(c) for c in cmd), "run_s": round(duration, 3),
            "write_s": round(write, 3), "kills": len(trials),
            "old": states.count("old"), "new": states.count("new"),
            "missing": states.count("missing"), "other": states.count("other"),
            "kills_leaving_temporaries": sum(bool(t["temporaries"]) for t in trials),
            "largest_temporary_bytes": max((s for t in trials for _, s in t["temporaries"]), default=0),
            "temporaries_after_next_run": sum(len(t["left_after_next_run"]) for t in trials),
            "new_after_next_run": sum(t["after_next_run"] == "new" for t in trials),
            "trials": trials}


def campaign_async(work: Path, kills: int, rng: random.Random) -> dict:
    from strata.checkpoint import load

    driver = work / "async_driver.py"
    driver.write_text(ASYNC_DRIVER)
    sys.path.insert(0, str(work))
    from async_driver import state

    folder = work / "async"
    folder.mkdir()
    t0 = time.perf_counter()
    run_to_end([sys.executable, str(driver), str(folder), "0", "12"])
    duration = time.perf_counter() - t0

    def loads() -> tuple[str, list[int]]:
        steps = []
        for p in sorted(folder.glob("ckpt_*.strata")):
            try:
                d = load(p)
            except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
                return f"{p.name} does not load: {type(exc).__name__}: {exc}", steps
            k = int(d["step"][0])
            ref = state(k)
            if sorted(d) != sorted(ref) or not all(np.array_equal(d[n], ref[n]) for n in ref):
                return f"{p.name} holds step {k} with other values", steps
            steps.append(k)
        return "all load", steps

    trials, start = [], 100
    for _ in range(kills):
        cmd = [sys.executable, str(driver), str(folder), str(start), "-1"]
        delay = rng.uniform(0.2 * duration, duration)
        run_and_kill(cmd, folder, delay, False)
        left = temps(folder)
        verdict, steps = loads()
        start += 100
        run_to_end([sys.executable, str(driver), str(folder), str(start), "3"])
        after, after_steps = loads()
        start += 100
        trials.append({"delay_s": round(delay, 4), "state": "loads" if verdict == "all load" else verdict,
                       "steps": steps, "temporaries": left, "after_next_run": after,
                       "left_after_next_run": temps(folder)})
    out = summary("AsyncCheckpointer, two names in turn", ["python", "driver"], duration, 0.0, trials)
    out.update(old=None, new=None, missing=None, other=None,
               loads=sum(t["state"] == "loads" for t in trials),
               new_after_next_run=sum(t["after_next_run"] == "all load" for t in trials))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=24, help="kills per writer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", type=Path, default=SHARED / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    ap.add_argument("--only", help="run only the writers whose name contains this")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    from strata.checkpoint import decompress_safetensors

    results = []
    with tempfile.TemporaryDirectory(prefix="kill_campaign.") as tmp:
        work = Path(tmp)
        refs = work / "refs"
        refs.mkdir()
        model = args.data / "llm" / "all-MiniLM-L6-v2.fp32.safetensors"
        field = args.data / "sci" / "ns3d_vx_t2_128x128x128.f32"
        era5 = args.data / "sci" / "era5_t2m_744x33x49.f32"
        # checkpoints: the old one is of the model with its last MiB of tensor bytes changed
        other_model = refs / "other.safetensors"
        data = bytearray(model.read_bytes())
        data[-(1 << 20):] = bytes(b ^ 0x5A for b in data[-(1 << 20):])
        other_model.write_bytes(bytes(data))
        run_to_end(STRATA + ["ckpt", "compress", str(other_model), "-o", str(refs / "old_ckpt.strata")])
        new_model = model.read_bytes()

        def same_model(p: Path) -> bool:
            back = refs / "back.safetensors"
            try:
                decompress_safetensors(p, back)
                return back.read_bytes() == new_model
            except Exception:  # noqa: BLE001 - a checkpoint that does not load is no new one
                return False

        run_to_end(STRATA + ["compress", str(field), "--rel", "1e-2", "-o", str(refs / "old.strata")])
        run_to_end(STRATA + ["compress", str(field), "--rel", "1e-4", "-o", str(refs / "new.strata")])
        run_to_end(STRATA + ["decompress", str(refs / "old.strata"), "-o", str(refs / "old.npy")])
        run_to_end(STRATA + ["decompress", str(refs / "new.strata"), "-o", str(refs / "new.npy")])
        nc = refs / "era5.nc"
        _write_netcdf(era5, nc)
        run_to_end(STRATA + ["convert", str(nc), str(refs / "old.zarr"), "--rel", "1e-2"])
        run_to_end(STRATA + ["convert", str(nc), str(refs / "new.zarr"), "--rel", "1e-3"])
        out = work / "out"
        out.mkdir()
        writers = [
            Writer("strata ckpt compress", STRATA + ["ckpt", "compress", str(model), "-o", str(out / "m.strata"),
                                                     "--force"], out / "m.strata", refs / "old_ckpt.strata", None,
                   same_model),
            Writer("strata compress", STRATA + ["compress", str(field), "--rel", "1e-4", "-o", str(out / "f.strata"),
                                                "--force"], out / "f.strata", refs / "old.strata",
                   digest(refs / "new.strata")),
            Writer("strata decompress", STRATA + ["decompress", str(refs / "new.strata"), "-o", str(out / "f.npy"),
                                                  "--force"], out / "f.npy", refs / "old.npy",
                   digest(refs / "new.npy")),
            Writer("strata convert --force", STRATA + ["convert", str(nc), str(out / "t2m.zarr"), "--rel", "1e-3",
                                                       "--force"], out / "t2m.zarr", refs / "old.zarr",
                   digest(refs / "new.zarr")),
        ]
        for w in writers:
            if args.only and args.only not in w.name:
                continue
            print(f"{w.name}: {args.kills} kills", flush=True)
            results.append(campaign_cli(w, args.kills, rng))
            print(_row(results[-1]), flush=True)
        if not args.only or args.only in "AsyncCheckpointer":
            print(f"AsyncCheckpointer: {args.kills} kills", flush=True)
            results.append(campaign_async(work, args.kills, rng))
            print(_row(results[-1]), flush=True)
    report = {"machine": machine(), "seed": args.seed, "kills_per_writer": args.kills, "writers": results}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out / "kill_campaign.json", json.dumps(report, indent=1) + "\n")
    atomic_write(args.out / "kill_campaign.md", _markdown(report))


def _write_netcdf(raw: Path, path: Path) -> None:
    import netCDF4

    a = np.fromfile(raw, "<f4").reshape(744, 33, 49)
    with netCDF4.Dataset(path, "w") as ds:
        for name, n in zip(("time", "lat", "lon"), a.shape):
            ds.createDimension(name, n)
            ds.createVariable(name, "f8", (name,))[:] = np.arange(n)
        v = ds.createVariable("t2m", "f4", ("time", "lat", "lon"))
        v.units = "K"
        v[:] = a


def _row(r: dict) -> str:
    if r["old"] is None:
        return (f"| {r['writer']} | {r['kills']} | all load: {r['loads']} | {r['kills_leaving_temporaries']} "
                f"({r['largest_temporary_bytes'] / 1e6:.1f} MB) | {r['temporaries_after_next_run']} | "
                f"{r['new_after_next_run']} |")
    return (f"| {r['writer']} | {r['kills']} | old {r['old']}, new {r['new']}, missing {r['missing']}, "
            f"other {r['other']} | {r['kills_leaving_temporaries']} ({r['largest_temporary_bytes'] / 1e6:.1f} MB) | "
            f"{r['temporaries_after_next_run']} | {r['new_after_next_run']} |")


def _markdown(report: dict) -> str:
    lines = ["# kill -9 campaign", "",
             f"Machine: {report['machine']}. Seed {report['seed']}, {report['kills_per_writer']} kills per writer "
             "(half at a moment drawn over the whole run, half over 1.5 times the life of the temporary file, from its "
             "appearance). Made by `benchmarks/kill_campaign.py`.", "",
             "| writer | kills | destination right after the kill | kills that left temporaries (largest) | "
             "temporaries left after the next run | complete new output after the next run |",
             "|---|---|---|---|---|---|"]
    lines += [_row(r) for r in report["writers"]]
    lines += ["", "Run time and life of the temporary file (unkilled, median of 3): "
              + "; ".join(f"{r['writer']} {r['run_s']} s / {r['write_s']} s" for r in report["writers"]
                          if r["old"] is not None) + ".", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
