"""Make a small, real turbulence sample for the strata demo with the fluidsim simulator.

The script runs forced homogeneous isotropic turbulence with fluidsim's pseudo-spectral
Navier-Stokes solver (``fluidsim.solvers.ns3d.solver``) on a 64^3 periodic grid, saves the
final physical-space state, and writes its x-velocity component ``vx`` as raw float32
little-endian bytes in C order, with dims (z, y, x), following the SDRBench naming convention
``NAME_D0xD1xD2.f32``: by default ``demo/data/ns3d_vx_64x64x64.f32`` (1 MiB).

How to run
----------
fluidsim is NOT a dependency of strata; install it in a separate virtual environment outside the
repository, then run the script from the repository root::

    python3 -m venv /tmp/simvenv
    /tmp/simvenv/bin/pip install fluidsim fluidfft pyfftw h5py
    OMP_NUM_THREADS=1 /tmp/simvenv/bin/python demo/make_sample.py

Options: ``--output PATH`` (default ``demo/data/ns3d_vx_64x64x64.f32``), ``--t-end T`` (simulated
time, default 30), ``--seed N`` (numpy seed, default 2024). fluidsim's own output (parameters, logs,
the HDF5 state file) goes to a temporary directory (FLUIDSIM_PATH) that is removed at the end, so
nothing but the ``.f32`` file is written into the repository.

Versions used for the committed sample
--------------------------------------
Python 3.11.7, fluidsim 26.10.0 (fluidsim-core 26.10.0), fluidfft 0.4.5 (FFT class
``fft3d.with_pyfftw``), pyfftw 0.15.1, fluiddyn 0.9.0, numpy 2.4.6, h5py 3.16.0; 1 thread.

Parameters
----------
- box: 2*pi periodic in x, y, z; nx = ny = nz = 64; 2/3 dealiasing (kmax = 64/3 ~ 21)
- viscosity: nu_2 = 1e-2 (Laplacian viscosity only, no hyperviscosity)
- initial condition: "noise" (fluidsim's solenoidal random field, velo_max = 0.5, length = None)
- forcing: "tcrandom" (time-correlated random, normalised to a constant energy injection rate),
  shells nkmin_forcing = 3 to nkmax_forcing = 6, key_forced = ["vt_fft", "vp_fft"] (toroidal and
  poloidal velocity, i.e. the whole solenoidal field), total injection rate epsilon = 0.2; fluidsim's
  forcing_rate is per forced key, so params.forcing.forcing_rate = 0.1
- time stepping: RK4, CFL-adaptive (USE_CFL = True, fluidsim's default coefficient), t_end = 30
- numpy.random.seed(seed) before the simulation is created. fluidsim's noise initial condition
  seeds numpy with 42 itself; the forcing draws its seeds from numpy's global generator, so the
  run is repeatable. It is not guaranteed to be bitwise repeatable: FFTW picks its plans by timing
  (FFTW_MEASURE), so round-off can differ from run to run and the chaotic flow amplifies it (two runs
  of the committed configuration differed in 56 of 262144 values, by at most one float32 ulp, 6e-8).

With epsilon = 0.2 and nu = 1e-2 the Kolmogorov scale is eta = (nu^3/epsilon)^(1/4) ~ 0.047, so
kmax * eta ~ 1 (resolved). The forcing scale is L ~ 2*pi/4.5 ~ 1.4, the velocity U ~ (epsilon*L)^(1/3)
~ 0.65 and the large-eddy turnover time L/U ~ 2, so t_end = 30 is of order ten turnover times:
long enough for the flow to forget the initial noise and reach a statistically steady state.
Measured (mean over 20 <= t <= 30): energy E = 0.364 (steady from t ~ 6), u_rms = 0.49, dissipation
0.199 (= injection), kmax * eta = 1.01, E / epsilon = 1.8, Taylor-scale Reynolds number ~ 21.
1845 RK4 steps, about 3 minutes on one core.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "data" / "ns3d_vx_64x64x64.f32"
N = 64
EPSILON = 0.2  # total energy injection rate of the forcing


def run_simulation(t_end: float, seed: int, work_dir: Path) -> tuple[np.ndarray, dict]:
    """Run the fluidsim ns3d simulation in ``work_dir`` and return (vx, info) from the saved final state."""
    # fluidsim reads FLUIDSIM_PATH when it is imported, so set it first and import afterwards.
    os.environ["FLUIDSIM_PATH"] = str(work_dir)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # pyfftw threads (read by fluiddyn at import)
    import h5py
    from fluidsim.solvers.ns3d.solver import Simul

    params = Simul.create_default_params()
    params.short_name_type_run = "strata_sample"
    params.output.sub_directory = "strata_demo"

    # Grid: 64^3 points in a 2*pi periodic box, default 2/3 dealiasing.
    params.oper.nx = params.oper.ny = params.oper.nz = N
    params.oper.Lx = params.oper.Ly = params.oper.Lz = 2 * np.pi

    # Laplacian viscosity, chosen so that kmax * eta ~ 1 at this forcing rate.
    params.nu_2 = 1e-2

    # Initial condition: solenoidal large-scale random noise.
    params.init_fields.type = "noise"
    params.init_fields.noise.velo_max = 0.5

    # Forcing: time-correlated random forcing on shells 3..6 injecting kinetic energy at a total rate of 0.2.
    # Forcing both the toroidal and the poloidal velocity forces the whole solenoidal field (as in fluidsim's
    # own isotropic example); fluidsim normalises the injection rate *per forced key*, hence 0.2 / 2.
    params.forcing.enable = True
    params.forcing.type = "tcrandom"
    params.forcing.nkmin_forcing = 3
    params.forcing.nkmax_forcing = 6
    params.forcing.key_forced = ["vt_fft", "vp_fft"]
    params.forcing.forcing_rate = EPSILON / len(params.forcing.key_forced)

    # Time stepping: RK4 with CFL-adaptive time step, stop at t_end.
    params.time_stepping.USE_CFL = True
    params.time_stepping.USE_T_END = True
    params.time_stepping.t_end = t_end
    params.time_stepping.type_time_scheme = "RK4"

    # Output: a few diagnostics, no periodic field files (the final state is saved explicitly).
    params.output.periods_print.print_stdout = t_end / 10
    params.output.periods_save.spatial_means = 0.5
    params.output.periods_save.phys_fields = 0

    np.random.seed(seed)
    sim = Simul(params)
    start = time.perf_counter()
    sim.time_stepping.start()
    wall = time.perf_counter() - start

    # One final physical-space state: fluidsim writes it at the end of the run (HDF5 file, extension .nc or .h5
    # depending on the version); save() is a no-op if that file already holds the last time step. Read vx back.
    sim.output.phys_fields.save()
    state_files = sorted(Path(sim.output.path_run).glob("state_phys_t*"))
    if not state_files:
        raise RuntimeError(f"no state file written in {sim.output.path_run}")
    with h5py.File(state_files[-1], "r") as f:
        vx = np.array(f["state_phys"]["vx"])
        t_saved = float(f["state_phys"].attrs["time"])

    # Energy and dissipation over the last third of the run, to document the state of the flow.
    means = sim.output.spatial_means.load()
    times = np.asarray(means["t"])
    last = times >= times[-1] * 2 / 3
    energy = float(np.mean(np.asarray(means["E"])[last]))
    epsilon = float(np.mean(np.asarray(means["epsK_tot"])[last]))
    eta = (params.nu_2**3 / epsilon) ** 0.25
    kmax = params.oper.coef_dealiasing * np.pi * N / params.oper.Lx
    info = {
        "t_end": t_saved,
        "it": sim.time_stepping.it,
        "wall_s": wall,
        "energy": energy,
        "epsilon": epsilon,
        "kmax_eta": kmax * eta,
        "u_rms": float(np.sqrt(2 * energy / 3)),
        "state_file": state_files[-1].name,
    }
    return vx, info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="raw .f32 output (default: %(default)s)")
    parser.add_argument("--t-end", type=float, default=30.0, help="simulated time (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=2024, help="numpy random seed (default: %(default)s)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="fluidsim_") as tmp:
        vx, info = run_simulation(args.t_end, args.seed, Path(tmp))

    # (z, y, x) C order, float32 little-endian, raw bytes.
    if vx.shape != (N, N, N):
        raise RuntimeError(f"unexpected field shape {vx.shape}")
    data = np.ascontiguousarray(vx, dtype="<f4")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    data.tofile(args.output)

    # Sanity checks: finite, not constant, with structure.
    vmin, vmax = float(data.min()), float(data.max())
    mean, std = float(data.mean(dtype=np.float64)), float(data.std(dtype=np.float64))
    print(f"wrote {args.output} shape={data.shape} dtype={data.dtype.str} bytes={data.nbytes}")
    print(f"simulated time t={info['t_end']:.4g} in {info['it']} steps, wall time {info['wall_s']:.1f} s")
    print(
        f"late-time means: E={info['energy']:.4g} u_rms={info['u_rms']:.4g} "
        f"eps={info['epsilon']:.4g} kmax*eta={info['kmax_eta']:.3g}"
    )
    print(f"vx: min={vmin:.6g} max={vmax:.6g} mean={mean:.6g} std={std:.6g}")
    ok = bool(np.isfinite(data).all()) and vmax > vmin and std > 0.1 * (vmax - vmin)
    print("sanity check:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
