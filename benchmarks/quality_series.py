"""Make 2D turbulence time series with the fluidsim simulator, for compression-quality prediction.

The script runs forced two-dimensional incompressible Navier-Stokes turbulence with fluidsim's
pseudo-spectral solver ``fluidsim.solvers.ns2d`` on 2*pi-periodic square grids and, at equally
spaced simulated times, writes the vorticity ``rot`` and the x-velocity ``ux`` of each snapshot as
raw float32 little-endian bytes in C order, dims (y, x) (x varies fastest), one file per snapshot,
named after the SDRBench convention ``NAME_D0xD1.f32``::

    ns2d256_nu1_t012_256x256.f32      vorticity of sequence ns2d256_nu1, snapshot 12
    ns2d256_nu1_ux_t012_256x256.f32   x-velocity of the same snapshot

plus ``manifest.json`` (parameters, versions, and for every file: sequence, field, step index,
simulated time, shape, dtype, min/max/mean/std, sha256). Default output directory:
``benchmarks/.cache/quality_series/`` (ignored by git).

How to run
----------
fluidsim is NOT a dependency of strata; install it in a separate virtual environment outside the
repository (as for ``demo/make_sample.py``), then run the script from the repository root::

    python3 -m venv /tmp/simvenv
    /tmp/simvenv/bin/pip install fluidsim fluidfft pyfftw h5py
    OMP_NUM_THREADS=1 /tmp/simvenv/bin/python benchmarks/quality_series.py

Options: ``--out DIR`` (default ``benchmarks/.cache/quality_series``), ``--only NAME [NAME ...]``
(run only these sequences; the manifest then lists only them), ``--no-velocity`` (write the
vorticity only). fluidsim's own output (parameters, logs, spatial means, final state) goes to a
temporary directory (FLUIDSIM_PATH) that is removed at the end; only the ``.f32`` files and
``manifest.json`` are written into ``--out``.

Read a file back with ``numpy.fromfile(path, dtype="<f4").reshape(shape)``, ``shape`` from the
manifest (also in the file name).

Sequences
---------
===========  ======  =========  =========  =======  ====  ========================================
name         grid    nu_2       snapshots  spacing  seed  snapshot times (step index 0, 1, ...)
===========  ======  =========  =========  =======  ====  ========================================
ns2d256_nu1  256^2   2e-3       48         0.5      1001  t = 1.0, 1.5, ..., 24.5
ns2d256_nu2  256^2   4e-4 (/5)  48         0.5      1002  t = 1.0, 1.5, ..., 24.5
ns2d512      512^2   1e-4       32         0.5      1003  t = 1.0, 1.5, ..., 16.5
===========  ======  =========  =========  =======  ====  ========================================

Each snapshot gives two files: vorticity (``NAME_tSSS_NxN.f32``) and x-velocity
(``NAME_ux_tSSS_NxN.f32``); 256 files, 112 MiB in all.

Common parameters
-----------------
- box: Lx = Ly = 2*pi, periodic; 2/3 dealiasing with fluidsim's square ("cubic") truncation
  (kmax = N/3: 85.3 at 256^2, 170.7 at 512^2)
- dissipation: Laplacian viscosity nu_2 (table) and a large-scale hypo-viscosity nu_m4 = 2
  (damping rate nu_m4 / k^4), which keeps the inverse energy cascade from piling up at k = 1
- forcing: ``tcrandom`` (time-correlated random, normalised to a constant injection rate) of the
  vorticity ``rot_fft`` in the shells 4 <= k <= 6. fluidsim normalises the injection of the forced
  quantity, so forcing_rate = 1 is the enstrophy injection rate beta (energy injection ~ 0.042, i.e.
  beta / k_f^2); the random pattern changes every forcing_rate^(-1/3) = 1 time unit. Time unit:
  beta^(-1/3) = 1.
- initial condition: the script's own random vorticity (fluidsim's "noise" initial condition always
  reseeds numpy with 42): white noise from ``numpy.random.default_rng(seed)``, filtered to the annulus
  exp(-((k - 6)/3)^2 / 2), zero mean, scaled to rms vorticity 2.
- random forcing: ``numpy.random.seed(seed)`` just before the simulation is created; fluidsim's
  tcrandom forcing draws its seeds from numpy's global generator.
- time stepping: RK4 with exact integration of the linear (dissipative) terms, CFL-adaptive step
  (fluidsim's default CFL coefficient, 1 for RK4; deltat_max = 0.05). The script clamps the step so
  that the run lands exactly on each snapshot time, then copies fluidsim's physical fields.
- the first snapshot is at t = 1.0 (one time unit of spin-up from the noise is not saved). The
  following steps include the transient in which the large scales build up, so early and late
  snapshots look different (the vorticity goes from many small blobs to coherent vortices with thin
  filaments; correlation between the first and the last snapshot ~0).

Measured (the run that made benchmarks/.cache/quality_series)
-------------------------------------------------------------
=============================  ===================  ===================  ===================
quantity                       ns2d256_nu1          ns2d256_nu2          ns2d512
=============================  ===================  ===================  ===================
vorticity range, all steps     [-13.6, 14.6]        [-15.3, 15.4]        [-19.4, 17.8]
vorticity rms, first -> last   2.25 -> 3.00         2.40 -> 3.58         2.43 -> 4.05
ux range, all steps            [-2.38, 2.11]        [-2.20, 2.40]        [-2.45, 2.75]
energy, first -> last          0.085 -> 0.292       0.106 -> 0.332       0.103 -> 0.379
enstrophy dissipation (late)   0.99                 1.00                 0.85 (still growing)
k_nu = (beta/nu^3)^(1/6)       22                   50                   97
kmax / k_nu                    3.8                  1.7                  1.75
Z(kmax) / Z(peak) (late)       4e-7                 6e-4                 2e-4
corr(step i, step i+1)         0.72-0.90 (med .81)  0.54-0.86 (med .63)  0.46-0.85 (med .60)
RK4 time steps                 3272                 3687                 5052
=============================  ===================  ===================  ===================

Z(k) is the shell-summed enstrophy spectrum of a snapshot; "late" is the second half of the run.
ns2d256_nu1 is well resolved (its enstrophy spectrum falls by more than six decades to kmax);
ns2d256_nu2 and ns2d512 are resolved but less comfortably (kmax / k_nu ~ 1.7; the spectrum falls by
3.2-3.6 decades and flattens slightly over the last few shells; demo/make_sample.py runs at
kmax * eta ~ 1).

Runtime: 216 s wall for the whole script (time loops 28 s, 34 s and 151 s; 2 min 41 s of CPU) with
OMP_NUM_THREADS=1 on one core of a 2-core machine shared with another engineer's timing jobs; an
unloaded rerun of ns2d256_nu1 took 17 s.

FFT planning and reproducibility
--------------------------------
fluiddyn's pyfftw wrapper makes its FFTW plans with pyfftw's default flag FFTW_MEASURE, which picks
an algorithm by timing candidates, so two runs can use different plans and differ by round-off
(demo/make_sample.py saw 1-ulp differences in 3D). This script therefore wraps ``pyfftw.FFTW`` so
that plans are made with FFTW_ESTIMATE (deterministic heuristics). With that, a rerun of
``ns2d256_nu1`` on the same machine reproduced all 96 files bit for bit (same sha256). For
comparison, two FFTW_MEASURE runs of ns2d256_nu1 happened to agree with each other, and differed from
the FFTW_ESTIMATE run in 23 of 48 vorticity files, at round-off level only (at most 2 float32 ulps,
1.2e-7; 11 of 65536 values in the last snapshot). Other CPUs or library builds can give other
round-off, which the chaotic flow may amplify over the later steps, especially in the less viscous
sequences (not tested).

Versions used
-------------
Python 3.11.7, fluidsim 26.10.0 (fluidsim-core 26.10.0), fluidfft 0.4.5 (FFT class
``fluidfft.fft2d.with_pyfftw``), pyfftw 0.15.1, fluiddyn 0.9.0, numpy 2.4.6; h5py 3.16.0 installed
but not used by this script; 1 thread (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "benchmarks" / ".cache" / "quality_series"

# name, grid size, Laplacian viscosity, number of snapshots, spacing, seed
SEQUENCES = {
    "ns2d256_nu1": {"n": 256, "nu_2": 2e-3, "n_snapshots": 48, "dt_snapshot": 0.5, "seed": 1001},
    "ns2d256_nu2": {"n": 256, "nu_2": 4e-4, "n_snapshots": 48, "dt_snapshot": 0.5, "seed": 1002},
    "ns2d512": {"n": 512, "nu_2": 1e-4, "n_snapshots": 32, "dt_snapshot": 0.5, "seed": 1003},
}
COMMON = {
    "solver": "fluidsim.solvers.ns2d",
    "L": "2*pi",
    "coef_dealiasing": 2 / 3,
    "nu_m4": 2.0,
    "forcing_type": "tcrandom",
    "forcing_key": "rot_fft",
    "nkmin_forcing": 4,
    "nkmax_forcing": 6,
    "forcing_rate": 1.0,
    "init_k0": 6.0,
    "init_width": 3.0,
    "init_rot_rms": 2.0,
    "time_scheme": "RK4",
    "cfl_coef": "fluidsim default (1.0 for RK4)",
    "deltat_max": 0.05,
    "t_first_snapshot": 1.0,
    "fftw_planner": "FFTW_ESTIMATE",
}


def _use_fftw_estimate() -> None:
    """Make every pyfftw.FFTW plan with FFTW_ESTIMATE (deterministic) instead of FFTW_MEASURE."""
    import pyfftw

    original = pyfftw.FFTW
    if getattr(original, "_strata_estimate", False):
        return

    def fftw_estimate(*args, **kwargs):
        flags = tuple(f for f in kwargs.get("flags", ("FFTW_MEASURE",)) if f not in ("FFTW_MEASURE", "FFTW_PATIENT"))
        kwargs["flags"] = ("FFTW_ESTIMATE", *flags)
        return original(*args, **kwargs)

    fftw_estimate._strata_estimate = True
    pyfftw.FFTW = fftw_estimate


def _random_vorticity(oper, seed: int) -> np.ndarray:
    """Seeded random vorticity in spectral space: filtered white noise, zero mean, given rms."""
    rng = np.random.default_rng(seed)
    ny, nx = oper.shapeX_seq
    rot = rng.standard_normal((ny, nx))
    rot_fft = oper.fft2(np.ascontiguousarray(rot))
    envelope = np.exp(-0.5 * ((oper.K - COMMON["init_k0"]) / COMMON["init_width"]) ** 2)
    rot_fft = rot_fft * envelope
    rot_fft[0, 0] = 0.0
    oper.dealiasing(rot_fft)
    rms = float(np.sqrt(np.mean(oper.ifft2(rot_fft) ** 2)))
    return rot_fft * (COMMON["init_rot_rms"] / rms)


def _enstrophy_spectrum(rot: np.ndarray) -> np.ndarray:
    """Shell-summed enstrophy spectrum Z(k), k = 0, 1, ... (integer shells, 2*pi box)."""
    n = rot.shape[0]
    w = np.fft.fft2(rot.astype(np.float64)) / rot.size
    k = np.fft.fftfreq(n, 1.0 / n)
    kk = np.sqrt(k[:, None] ** 2 + k[None, :] ** 2)
    shells = np.rint(kk).astype(int)
    return np.bincount(shells.ravel(), weights=0.5 * np.abs(w.ravel()) ** 2)


def _write(path: Path, field: np.ndarray) -> dict:
    data = np.ascontiguousarray(field, dtype="<f4")
    if not np.isfinite(data).all():
        raise RuntimeError(f"non-finite values in {path.name}")
    raw = data.tobytes()
    path.write_bytes(raw)
    return {
        "file": path.name,
        "shape": list(data.shape),
        "dtype": "<f4",
        "order": "C (y, x), x fastest",
        "bytes": len(raw),
        "min": float(data.min()),
        "max": float(data.max()),
        "mean": float(data.mean(dtype=np.float64)),
        "std": float(data.std(dtype=np.float64)),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def run_sequence(name: str, out: Path, velocity: bool) -> tuple[list[dict], dict]:
    """Run one sequence, write its snapshots into ``out``; return (file entries, sequence info)."""
    from fluidsim.solvers.ns2d.solver import Simul

    cfg = SEQUENCES[name]
    n = cfg["n"]
    params = Simul.create_default_params()
    params.short_name_type_run = name
    params.output.sub_directory = "strata_quality_series"
    params.oper.nx = params.oper.ny = n
    params.oper.Lx = params.oper.Ly = 2 * np.pi
    params.oper.coef_dealiasing = COMMON["coef_dealiasing"]
    params.nu_2 = cfg["nu_2"]
    params.nu_m4 = COMMON["nu_m4"]

    params.init_fields.type = "in_script"

    params.forcing.enable = True
    params.forcing.type = COMMON["forcing_type"]
    params.forcing.key_forced = COMMON["forcing_key"]
    params.forcing.nkmin_forcing = COMMON["nkmin_forcing"]
    params.forcing.nkmax_forcing = COMMON["nkmax_forcing"]
    params.forcing.forcing_rate = COMMON["forcing_rate"]

    times = [COMMON["t_first_snapshot"] + i * cfg["dt_snapshot"] for i in range(cfg["n_snapshots"])]
    params.time_stepping.type_time_scheme = COMMON["time_scheme"]
    params.time_stepping.USE_CFL = True
    params.time_stepping.USE_T_END = True
    params.time_stepping.t_end = times[-1]
    params.time_stepping.deltat_max = COMMON["deltat_max"]

    params.output.periods_print.print_stdout = times[-1] / 4
    params.output.periods_save.spatial_means = 0.25
    params.output.periods_save.phys_fields = 0

    np.random.seed(cfg["seed"])  # fluidsim's tcrandom forcing draws its seeds from numpy's global generator
    sim = Simul(params)
    sim.state.init_from_rotfft(_random_vorticity(sim.oper, cfg["seed"]))
    sim.state.is_initialized = True

    ts = sim.time_stepping
    ts.prepare_main_loop()
    cfl_step = ts.compute_time_increment_CLF
    target = {"t": times[0]}

    def cfl_then_land_on_target():
        cfl_step()
        remaining = target["t"] - ts.t
        if ts.deltat > remaining:
            ts.deltat = remaining

    ts.compute_time_increment_CLF = cfl_then_land_on_target

    entries, snaps = [], []
    kmax = n * COMMON["coef_dealiasing"] / 2
    start = time.perf_counter()
    for step, t_snap in enumerate(times):
        target["t"] = t_snap
        params.time_stepping.t_end = t_snap
        ts.main_loop()
        if abs(ts.t - t_snap) > 1e-9:
            raise RuntimeError(f"{name}: landed at t={ts.t!r}, wanted {t_snap!r}")
        rot = np.array(sim.state.get_var("rot"))
        ux = np.array(sim.state.get_var("ux"))
        uy = np.array(sim.state.get_var("uy"))
        fields = [("vorticity", "", rot)] + ([("ux", "_ux", ux)] if velocity else [])
        for field, tag, arr in fields:
            entry = _write(out / f"{name}{tag}_t{step:03d}_{n}x{n}.f32", arr)
            entries.append({"sequence": name, "field": field, "step": step, "time": t_snap, **entry})
        spec = _enstrophy_spectrum(rot)
        snaps.append(
            {
                "step": step,
                "time": t_snap,
                "it": ts.it,
                "energy": float(0.5 * np.mean(ux**2 + uy**2)),
                "enstrophy": float(0.5 * np.mean(rot**2)),
                "rot_rms": float(np.sqrt(np.mean(rot**2))),
                "umax": float(max(np.abs(ux).max(), np.abs(uy).max())),
                "Z_kmax_over_Z_peak": float(spec[int(kmax)] / spec[1 : int(kmax)].max()),
            }
        )
    wall = time.perf_counter() - start
    ts.finalize_main_loop()

    means = sim.output.spatial_means.load()
    t_means = np.asarray(means["t"])
    late = t_means >= times[-1] / 2
    info = {
        **cfg,
        "kmax": kmax,
        "times": times,
        "time_steps": int(ts.it),
        "wall_s": round(wall, 2),
        "late_half_means": {
            key: float(np.mean(np.asarray(means[key])[late]))
            for key in ("E", "Z", "PK_tot", "PZ_tot", "epsK_tot", "epsZ_tot", "epsK_hypo")
            if key in means
        },
        "fft_class": sim.oper.type_fft,
        "snapshots": snaps,
    }
    return entries, info


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for dist in ("fluidsim", "fluidsim-core", "fluidfft", "fluiddyn", "pyfftw", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    parser.add_argument("--only", nargs="+", choices=sorted(SEQUENCES), help="run only these sequences")
    parser.add_argument("--no-velocity", action="store_true", help="write the vorticity only")
    args = parser.parse_args(argv)
    names = args.only or list(SEQUENCES)

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # pyfftw threads, read by fluiddyn at import
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "generator": "benchmarks/quality_series.py",
        "description": "forced 2D Navier-Stokes turbulence (fluidsim ns2d), raw little-endian float32, C order (y, x)",
        "read_with": 'numpy.fromfile(path, dtype="<f4").reshape(shape)',
        "common_parameters": COMMON,
        "versions": None,
        "sequences": {},
        "files": [],
    }
    total = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fluidsim_") as tmp:
        # fluidsim reads FLUIDSIM_PATH when it is imported, so set it first and import afterwards.
        os.environ["FLUIDSIM_PATH"] = tmp
        _use_fftw_estimate()
        for name in names:
            t0 = time.perf_counter()
            entries, info = run_sequence(name, args.out, velocity=not args.no_velocity)
            manifest["files"].extend(entries)
            manifest["sequences"][name] = info
            first, last = info["snapshots"][0], info["snapshots"][-1]
            print(
                f"{name}: {len(info['times'])} snapshots, t={info['times'][0]}..{info['times'][-1]}, "
                f"{info['time_steps']} steps, {info['wall_s']:.1f} s loop, {time.perf_counter() - t0:.1f} s total; "
                f"E {first['energy']:.3g}->{last['energy']:.3g}, "
                f"rot_rms {first['rot_rms']:.3g}->{last['rot_rms']:.3g}, "
                f"Z(kmax)/Zpeak(last)={last['Z_kmax_over_Z_peak']:.2e}",
                flush=True,
            )
    manifest["versions"] = {**_versions(), "omp_num_threads": os.environ["OMP_NUM_THREADS"]}
    manifest["total_wall_s"] = round(time.perf_counter() - total, 1)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(manifest['files'])} files and manifest.json to {args.out} in {manifest['total_wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
