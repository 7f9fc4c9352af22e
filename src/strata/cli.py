"""The ``strata`` command line.

    strata compress INPUT [-o OUT] (--abs E | --rel E | --target-psnr DB | --target-ratio R | --target-ssim S)
                    [--shape AxBxC] [--var NAME [--no-cf]] [--enhance 1x|2x]
    strata decompress INPUT [-o OUT.npy|OUT.f32|OUT.f64|OUT.nc] [--level K] [--region SPEC] [--no-enhance]
    strata info INPUT
    strata quality INPUT (--rel E,E,... | --abs E,E,...) [--compressor strata,sz3,zfp] [--verify] [--shape] [--var]
    strata extract INPUT -o OUT [--level K [--grid]] [--region SPEC]
    strata convert IN.nc OUT.zarr (--rel E | --abs E) [--var NAME ...] [--chunks SPEC] [--force]
    strata convert IN.zarr OUT.nc [--force]
    strata ckpt compress MODEL.safetensors [-o OUT] [--base EARLIER.strata]
    strata ckpt decompress CKPT.strata -o MODEL.safetensors
    strata ckpt info CKPT.strata

Inputs: raw ``NAME_D0xD1xD2.f32/.f64`` (SDRBench naming; or ``--shape``), ``.npy``, or a
variable of a NetCDF/HDF5 file (``--var``), read with the CF conventions unless ``--no-cf``
(see :mod:`strata.cf`). Outputs are written atomically; a ``.nc`` output rebuilds the NetCDF
variable from the stream's metadata. A region is written like numpy indexing without
brackets: ``"10:20,:,5"``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click
import numpy as np

from . import __version__
from .errors import StrataError

#: Inputs at least this large get a progress bar.
PROGRESS_BYTES = 64 << 20


def parse_region(text: str | None):
    """``"10:20,:,5"`` -> ``(slice(10, 20), slice(None), 5)``."""
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        if ":" in part:
            bits = [int(b) if b.strip() else None for b in part.split(":")]
            if len(bits) > 3:
                raise click.BadParameter(f"bad slice {part!r}", param_hint="--region")
            out.append(slice(*bits))
        else:
            try:
                out.append(int(part))
            except ValueError as exc:
                raise click.BadParameter(f"bad index {part!r}", param_hint="--region") from exc
    return tuple(out)


class _Bar:
    """A tqdm bar driven by ``(done, total)`` callbacks; silent for small inputs."""

    def __init__(self, nbytes: int, desc: str):
        self.bar = None
        if nbytes >= PROGRESS_BYTES:
            from tqdm import tqdm

            self.bar = tqdm(desc=desc, unit="stage", leave=False, file=sys.stderr)

    def __call__(self, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar.total = total
            self.bar.n = done
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _fail(exc: Exception):
    raise click.ClickException(f"{type(exc).__name__}: {exc}")


@click.group()
@click.version_option(__version__, prog_name="strata")
def main():
    """strata: error-bounded lossy compression of scientific arrays with progressive and
    random-access decompression."""


@main.command()
@click.argument("input", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="output stream (default: INPUT.strata)")
@click.option("--abs", "abs_error", type=float, help="absolute error bound")
@click.option("--rel", "rel_error", type=float, help="bound relative to the range of the valid values")
@click.option("--target-psnr", "target_psnr", type=float,
              help="instead of a bound: reach this PSNR (dB), predicted then checked (at most 3 compressions)")
@click.option("--target-ratio", "target_ratio", type=float, help="instead of a bound: reach this compression ratio")
@click.option("--target-ssim", "target_ssim", type=float,
              help="instead of a bound: reach this SSIM (needs scikit-image)")
@click.option("--shape", help="shape of a raw input, e.g. 100x500x500 (default: from the file name)")
@click.option("--var", help="variable (NetCDF) or dataset (HDF5) to read")
@click.option("--no-cf", "no_cf", is_flag=True,
              help="NetCDF/HDF5: read the stored values, ignoring _FillValue, missing_value, valid_* and packing")
@click.option("--enhance", type=click.Choice(["1x", "2x"]),
              help="train and store an enhancement network (NeurLZ; needs strata[torch]): 2x keeps every value "
              "within twice the bound, 1x within the bound")
def compress(input, output, abs_error, rel_error, target_psnr, target_ratio, target_ssim, shape, var, no_cf,
             enhance):
    """Compress INPUT with a point-wise error bound on its valid values.

    A NetCDF/HDF5 variable is read with the CF conventions (missing values, packed data) and
    its name, dimensions, attributes and coordinates travel in the stream, so that
    `strata decompress -o OUT.nc` rebuilds it.
    """
    from .container import atomic_write
    from .inputs import parse_shape, read_input

    try:
        v = read_input(input, parse_shape(shape) if shape else None, var, cf=not no_cf)
        a = v.data
        bar = _Bar(a.nbytes, "compress")
        t = time.perf_counter()
        targets = [(m, x) for m, x in (("psnr", target_psnr), ("ratio", target_ratio), ("ssim", target_ssim))
                   if x is not None]
        if len(targets) > 1 or (targets and (abs_error is not None or rel_error is not None or enhance)):
            raise click.UsageError("give one of --abs, --rel, --target-psnr, --target-ratio, --target-ssim "
                                   "(a target does not combine with --enhance)")
        try:
            blob = v.compress(abs_error=abs_error, rel_error=rel_error, progress=bar, enhance=enhance,
                              target=targets[0] if targets else None)
        finally:
            bar.close()
        t = time.perf_counter() - t
        output = output or input.with_name(input.name + ".strata")
        atomic_write(output, blob)
    except (StrataError, OSError) as exc:
        _fail(exc)
    missing = f", {int(np.count_nonzero(v.mask))} missing" if v.mask is not None else ""
    click.echo(f"{input.name}: {a.shape} {a.dtype}{missing} -> {output} ({len(blob)} bytes, ratio "
               f"{a.nbytes / len(blob):.2f}, {8 * len(blob) / max(a.size, 1):.3f} bits/value, "
               f"{a.nbytes / 1e6 / t:.0f} MB/s)")


def _decode_to(input, output, level, region, grid=False, enhance=True):
    """Decode INPUT (all, a level, or a region) and write it to OUTPUT; report or fail."""
    from .cf import NETCDF_SUFFIXES, keep_axes
    from .inputs import write_array
    from .lossy import LossyReader

    netcdf = output.suffix.lower() in NETCDF_SUFFIXES
    region = parse_region(region)
    if netcdf:
        region = keep_axes(region)  # a NetCDF variable keeps its dimensions (and coordinates)
    try:
        with LossyReader(input) as r:
            bar = _Bar(r.header.size * r.dtype.itemsize, "decompress")
            try:
                a = r.read(level=level, region=region, full_resolution=not grid, masked=True, progress=bar,
                           enhance=enhance)
            finally:
                bar.close()
            index = tuple(slice(None, None, q) for q in r.levels[level].stride) if grid else region
            metadata, fill = (r.metadata, r.fill_value) if netcdf else (None, None)
        write_array(output, a, metadata, fill_value=fill, index=index)
    except (StrataError, OSError) as exc:
        _fail(exc)
    n = int(np.count_nonzero(np.ma.getmaskarray(a)))
    click.echo(f"{input.name} -> {output}: {a.shape} {a.dtype}" + (f", {n} missing" if n else ""))


@main.command()
@click.argument("input", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="output .npy, .f32, .f64 or .nc (default: INPUT without .strata, as .npy)")
@click.option("--level", type=int, help="decode levels 0..LEVEL only (a full-resolution preview)")
@click.option("--region", help='decode only this box, e.g. "10:20,:,5"')
@click.option("--no-enhance", "no_enhance", is_flag=True, help="skip the stream's enhancement network (plain values)")
def decompress(input, output, level, region, no_enhance):
    """Decompress INPUT (all of it, a preview from a level, or a region).

    A .nc output rebuilds the NetCDF variable the stream was made from (name, dimensions,
    coordinates, attributes, _FillValue, packing); a stream without that metadata gives a
    variable "data" with dimensions dim_0, dim_1, ... In .npy/.f32/.f64 outputs missing points
    hold their original values.
    """
    if output is None:
        stem = input.name[:-len(".strata")] if input.name.endswith(".strata") else input.name
        output = input.with_name(Path(stem).stem + ".npy")
    _decode_to(input, output, level, region, enhance=not no_enhance)


@main.command()
@click.argument("input", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="output .npy, .f32, .f64 or .nc")
@click.option("--level", type=int, help="decode levels 0..LEVEL only")
@click.option("--grid", is_flag=True, help="write the level's grid itself, not a full-resolution preview")
@click.option("--region", help='decode only this box, e.g. "10:20,:,5"')
def extract(input, output, level, grid, region):
    """Extract a level (its grid or a preview) or a box from INPUT."""
    if grid and level is None:
        raise click.BadParameter("--grid needs --level", param_hint="--grid")
    _decode_to(input, output, level, region, grid)


@main.command()
@click.argument("input", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def info(input):
    """Describe the stream INPUT: shape, dtype, bound, missing values, variable, target, levels."""
    from .cf import parse_metadata
    from .lossy import LossyReader

    try:
        with LossyReader(input) as r:
            h = r.header
            size = input.stat().st_size
            nbytes = h.size * r.dtype.itemsize
            mode = "absolute" if h.bound_mode == 0 else f"{h.bound_value:g} of the valid range ->"
            click.echo(f"{input.name}: strata lossy stream, {size} bytes")
            click.echo(f"  shape {h.shape}  dtype {r.dtype}  error bound in force: {mode} {h.eb:.6g}")
            if nbytes:
                click.echo(f"  ratio {nbytes / size:.2f}  bit rate {8 * size / h.size:.3f} bits/value")
            if r.missing_count:
                click.echo(f"  missing values {r.missing_count} ({100 * r.missing_count / h.size:.2f} %), "
                           f"fill value {float(r.fill_value):g}, mask {r.mask_bytes} bytes")
            if r.valid_range is not None:
                click.echo(f"  valid range [{r.valid_range[0]:.6g}, {r.valid_range[1]:.6g}]")
            desc = parse_metadata(r.metadata)
            if desc is not None:
                packed = ", packed" if "scale_factor" in desc.attrs or "add_offset" in desc.attrs else ""
                click.echo(f"  variable {desc.name}({', '.join(desc.dims)}) stored as {desc.dtype}{packed}, "
                           f"{len(desc.attrs)} attributes, coordinates: {', '.join(desc.coords) or 'none'}")
            elif r.metadata is not None:
                click.echo(f"  metadata: {len(r.metadata)} entries")
            t = r.target
            if t is not None:
                click.echo(f"  {_target_text(t)}")
            e = r.enhancement
            if e is not None:
                click.echo(f"  {_enhancement_text(e)}")
            s = r.settings_text()
            click.echo(f"  predictor {s}")
            click.echo("  level  shape                 stride        error bound   bytes       points")
            for lv in r.levels:
                click.echo(f"  {lv.index:5d}  {str(lv.shape):20s}  {str(lv.stride):12s}  {lv.error_bound:11.4g}"
                           f"  {lv.compressed_bytes:10d}  {lv.points:10d}")
    except StrataError as exc:
        _fail(exc)


@main.command()
@click.argument("input", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--rel", "rel_error", help="bounds relative to the valid range, comma-separated: 1e-2,1e-3,1e-4")
@click.option("--abs", "abs_error", help="absolute bounds, comma-separated")
@click.option("--compressor", default="strata", show_default=True,
              help="comma-separated: strata, sz3, zfp (fixed accuracy)")
@click.option("--verify", is_flag=True, help="also compress and measure (sz3 needs pysz, zfp zfpy; SSIM scikit-image)")
@click.option("--shape", help="shape of a raw input, e.g. 100x500x500 (default: from the file name)")
@click.option("--var", help="variable (NetCDF) or dataset (HDF5) to read")
def quality(input, rel_error, abs_error, compressor, verify, shape, var):
    """Predict the compression ratio, PSNR and SSIM of INPUT at the given bounds, without
    compressing (strata.quality, after DeepCQ); --verify measures them beside."""
    from .inputs import parse_shape, read_input
    from .lossy import missing
    from .quality import features, predict
    from .quality.anchors import measure

    if (rel_error is None) == (abs_error is None):
        raise click.UsageError("give one of --rel and --abs")
    try:
        bounds = [float(b) for b in (rel_error or abs_error).split(",")]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--rel/--abs") from exc
    try:
        v = read_input(input, parse_shape(shape) if shape else None, var)
        a = v.data
        t = time.perf_counter()
        miss = missing.find(a, v.mask, v.fill_value).reshape(a.shape) if v.mask is not None \
            or v.fill_value is not None else None
        f = features(a, mask=miss)
        t_features = time.perf_counter() - t
        kind = "rel_error" if rel_error is not None else "abs_error"
        with_ssim = a.ndim >= 2 and min(a.shape[-2:]) >= 7
        metrics = ("ratio", "psnr", "ssim") if with_ssim else ("ratio", "psnr")
        click.echo(f"{input.name}: {a.shape} {a.dtype}; features in {1e3 * t_features:.1f} ms"
                   + ("" if with_ssim else "; no SSIM (slices under 7 x 7)"))
        head = f"  {'compressor':10s} {'bound':>9s} {'ratio':>9s} {'bits/value':>10s} {'PSNR dB':>8s}"
        head += f" {'SSIM':>7s}" if with_ssim else ""
        click.echo(head + ("   (measured beside)" if verify else ""))
        for comp in compressor.split(","):
            p = predict(f, compressor=comp, metrics=metrics, **{kind: bounds})
            for i, b in enumerate(bounds):
                row = {m: p[m][i] for m in metrics}
                line = f"  {comp:10s} {b:9.3g} " + _quality_cells(row, a.dtype.itemsize, with_ssim)
                if verify:
                    row = measure(comp, a, p["abs_error"][i], miss, ssim=with_ssim)
                    line += "  |  " + _quality_cells(row, a.dtype.itemsize, with_ssim)
                click.echo(line)
    except (StrataError, OSError, ImportError) as exc:
        _fail(exc)


def _quality_cells(row: dict, itemsize: int, with_ssim: bool) -> str:
    out = f"{row['ratio']:9.2f} {8 * itemsize / row['ratio']:10.3f} {row['psnr']:8.2f}"
    return out + (f" {row['ssim']:7.4f}" if with_ssim else "")


def _target_text(t) -> str:
    """One line on a target section (``strata info``): ``target: psnr 60 dB, achieved 60.21 dB
    in 2 compressions``; a ratio with 2 decimals, an SSIM with 4."""
    unit = f" {t.unit}" if t.unit else ""
    if t.metric == "ssim":
        asked, got = f"{t.target:.4f}", f"{t.achieved:.4f}{unit}"
    else:
        asked, got = f"{t.target:g}", f"{t.achieved:.2f}{unit}"
    if t.achieved == float("inf"):  # (a PSNR only: every valid value decoded exactly)
        got = f"inf{unit} (lossless)"
    runs = f"{t.compressions} compression" + ("" if t.compressions == 1 else "s")
    return f"target: {t.metric} {asked}{unit}, achieved {got} in {runs}"


def _enhancement_text(e) -> str:
    """One line on an enhancement section (``strata info``)."""
    gain = f"PSNR {e.psnr_plain:.2f} -> {e.psnr_enhanced:.2f} dB"
    if not e.stored:
        if e.plain_equivalent_bytes:
            why = f"it did not pay: {gain}, a plain stream of that PSNR: about {e.plain_equivalent_bytes} bytes"
        elif e.psnr_enhanced > e.psnr_plain:
            why = f"it did not pay: {gain}"
        else:
            why = "no gain, or not trained: a bound of 0, or weights that would outweigh the stream"
        return f"enhancement {e.mode_name}: not stored ({why}); values decode plainly"
    inputs = ", ".join(f.name for f in e.inputs[1:])
    extra = f", {e.fallback_count} fallback points" if e.mode_name == "1x" else ""
    within = "twice the bound" if e.mode_name == "2x" else "the bound"
    return (f"enhancement {e.mode_name}: stored (values within {within}), {e.quantized.size} 8-bit parameters, "
            f"width {e.width}{extra}, {gain}" + (f", inputs also {inputs}" if inputs else ""))


@main.command()
@click.argument("input", type=click.Path(exists=True, path_type=Path))
@click.argument("output", type=click.Path(path_type=Path))
@click.option("--rel", "rel_error", type=float,
              help="bound relative to each variable's whole valid range (max - min of its valid values)")
@click.option("--abs", "abs_error", type=float, help="absolute bound, in each variable's unit")
@click.option("--var", "variables", multiple=True,
              help="compress only this data variable (repeat, or NAME,NAME); default: all float data variables")
@click.option("--chunks", help="zarr chunk shape: time=24,lat=256 (dimensions not named are not split) or "
              "24,256,256 (the largest compressed variable's dimensions); default: about 4 MiB a chunk")
@click.option("--force", is_flag=True, help="replace an existing OUTPUT")
def convert(input, output, rel_error, abs_error, variables, chunks, force):
    """Convert a NetCDF/HDF5 file to a zarr v3 store compressed with strata, or back.

    IN.nc/.nc4/.h5/.hdf5 -> OUT.zarr: float data variables are compressed with an error bound
    (exactly one of --rel, --abs); coordinates, integer and packed-integer variables are copied
    losslessly; attributes, coordinates and _FillValue are kept. IN.zarr -> OUT.nc: a NetCDF4
    file with the decoded values (missing points as _FillValue). The output is written under a
    temporary name and renamed at the end.
    """
    from .convert import convert as run_convert

    names = [n.strip() for v in variables for n in v.split(",") if n.strip()] or None
    if output.suffix.lower() == ".zarr" and (rel_error is None) == (abs_error is None):
        raise click.UsageError("give exactly one of --rel and --abs")
    try:
        rep = run_convert(input, output, rel_error=rel_error, abs_error=abs_error, variables=names, chunks=chunks,
                          force=force, progress_bytes=PROGRESS_BYTES)
    except (StrataError, OSError) as exc:
        _fail(exc)
    ratio = f", ratio {rep.nbytes / rep.output_bytes:.2f}" if rep.lossy and rep.output_bytes else ""
    click.echo(f"{input.name} -> {output} ({rep.nbytes} bytes -> {rep.output_bytes} bytes{ratio}, "
               f"{rep.seconds:.1f} s)")
    if rep.chunks:
        click.echo("  chunks " + ", ".join(f"{d}={n}" for d, n in rep.chunks.items()))
    for name, c in rep.lossy.items():
        how = ""
        if c.rel_error is not None and c.valid_range is not None:
            how = f"{c.rel_error:g} of [{c.valid_range[0]:.6g}, {c.valid_range[1]:.6g}] -> "
        click.echo(f"  {name}: strata, abs bound {how}{c.abs_error:.6g}")
    if rep.lossless:
        click.echo(f"  {'lossless' if rep.lossy else 'written'}: {', '.join(rep.lossless)}")


@main.group()
def ckpt():
    """Lossless compression of checkpoints (safetensors files, strata checkpoints)."""


@ckpt.command("compress")
@click.argument("input", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="output checkpoint (default: INPUT.strata)")
@click.option("--base", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="an earlier strata checkpoint of the same model (same folder): store the XOR delta")
def ckpt_compress(input, output, base):
    """Compress a .safetensors file losslessly (optionally as a delta against --base)."""
    from .checkpoint import compress_safetensors

    output = output or input.with_name(input.name + ".strata")
    t = time.perf_counter()
    try:
        with _Steps(input.stat().st_size, "compress"):
            compress_safetensors(input, output, base=base)
    except StrataError as exc:
        _fail(exc)
    t = time.perf_counter() - t
    n, c = input.stat().st_size, output.stat().st_size
    click.echo(f"{input.name} -> {output} ({c} bytes, ratio {n / c:.4f}, {n / 2**30 / t:.2f} GiB/s)")


@ckpt.command("decompress")
@click.argument("input", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="the .safetensors file to rebuild (byte-identical to the original)")
def ckpt_decompress(input, output):
    """Rebuild the original .safetensors file from a strata checkpoint."""
    from .checkpoint import decompress_safetensors

    try:
        with _Steps(input.stat().st_size, "decompress"):
            decompress_safetensors(input, output)
    except StrataError as exc:
        _fail(exc)
    click.echo(f"{input.name} -> {output} ({output.stat().st_size} bytes)")


@ckpt.command("info")
@click.argument("input", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def ckpt_info(input):
    """List a strata checkpoint's segments and tensors."""
    from .checkpoint.io import header

    try:
        h = header(input)
    except StrataError as exc:
        _fail(exc)
    size = input.stat().st_size
    total = sum(m["nbytes"] for m in h["segments"])
    click.echo(f"{input.name}: strata checkpoint ({h['source']}), {size} bytes, ratio {total / max(size, 1):.4f}"
               + (f", delta of {h['base']['file']}" if h.get("base") else ""))
    click.echo("  dtype   bytes          coded       ratio   delta")
    for m in h["segments"]:
        click.echo(f"  {m['dtype']:6s} {m['nbytes']:12d} {m['length']:12d} {m['nbytes'] / max(m['length'], 1):8.4f}"
                   f"   {'yes' if m['delta'] else 'no'}")
    click.echo(f"  {len(h['tensors'])} tensors, e.g. " + ", ".join(t[0] for t in h["tensors"][:5]))


class _Steps:
    """A progress spinner for long single-step jobs on large inputs."""

    def __init__(self, nbytes: int, desc: str):
        self.bar = _Bar(nbytes, desc)

    def __enter__(self):
        self.bar(0, 1)
        return self

    def __exit__(self, *exc):
        self.bar(1, 1)
        self.bar.close()


if __name__ == "__main__":  # pragma: no cover
    main()
