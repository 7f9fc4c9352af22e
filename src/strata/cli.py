"""The ``strata`` command line::

    strata compress INPUT [-o OUT] (--abs E | --rel E | --target-psnr DB | --target-ratio R | --target-ssim S)
                    [--shape AxBxC] [--var NAME [--no-cf]] [--fill-value V] [--mask FILE] [--enhance 1x|2x]
                    [--force]
    strata decompress INPUT [-o OUT.npy|OUT.f32|OUT.f64|OUT.nc] [--level K] [--region SPEC] [--no-enhance]
                    [--force]
    strata info INPUT
    strata quality INPUT (--rel E,E,... | --abs E,E,...) [--compressor strata,sz3,zfp] [--verify] [--shape]
                    [--var] [--fill-value V] [--mask FILE]
    strata extract INPUT -o OUT [--level K [--grid]] [--region SPEC] [--force]
    strata convert IN.nc OUT.zarr (--rel E | --abs E) [--var NAME ...] [--chunks SPEC] [--force]
    strata convert IN.zarr OUT.nc [--force]
    strata ckpt compress MODEL.safetensors [-o OUT] [--base EARLIER.strata] [--force]
    strata ckpt decompress CKPT.strata -o MODEL.safetensors [--force]
    strata ckpt info CKPT.strata

Inputs: raw ``NAME_D0xD1xD2.f32/.f64`` (SDRBench naming; or ``--shape``), ``.npy``, or a
variable of a NetCDF/HDF5 file (``--var``), read with the CF conventions unless ``--no-cf``
(see :mod:`strata.cf`); only regular files (a FIFO, device or directory is refused before it
is opened). The missing values of a raw or ``.npy`` input are declared with ``--fill-value``
and ``--mask`` (a ``.npy`` boolean array or a raw file of 0/1 bytes, broadcasting as
:func:`strata.compress`'s mask). ``compress``, ``quality`` and ``info`` warn (stderr) when the
valid values' range is dominated by a few extreme values (:mod:`strata.dominance`): a
relative bound would then be the extreme values' and erase the data.

Outputs are written atomically (:mod:`strata.atomic`); a ``.nc`` output rebuilds the NetCDF
variable from the stream's metadata. An existing output is replaced only with ``--force``, and
an input of the same command never (compared by file identity). A region is written like numpy
indexing without brackets: ``"10:20,:,5"``.

Errors are one line on stderr, ``Error: ...``, and no traceback. Exit codes: 0 success; 1 the
work failed on the data or the system: a damaged or truncated stream, not a strata stream, a
full disk or another I/O error, a missing optional dependency; 2 the command line asks for
something it cannot do: a bad option value, conflicting options, a missing or unreadable input,
a file that is not a regular file, an input of the wrong kind or shape, an output that exists
(without ``--force``), is an input, or lies in a missing folder.
"""
from __future__ import annotations

import errno
import os
import stat
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import click
import numpy as np

from . import __version__
from .errors import InvalidInputError, StrataError, UnsupportedDtypeError

#: Inputs at least this large get a progress bar.
PROGRESS_BYTES = 64 << 20
#: Exit code of a failure on the data or the system (damaged stream, full disk).
EXIT_FAILURE = 1
#: Exit code of a command line that asks for something that cannot be done (click's code for
#: usage errors).
EXIT_USAGE = 2
#: Errors that say the command line is wrong (exit code :data:`EXIT_USAGE`); the others (a
#: damaged stream: :class:`strata.errors.FormatError` and its kinds) say the data or the system
#: failed (:data:`EXIT_FAILURE`).
_USAGE_ERRORS = (InvalidInputError, UnsupportedDtypeError, FileNotFoundError, FileExistsError, IsADirectoryError,
                 NotADirectoryError, PermissionError)
#: I/O failures of the system itself, whatever the arguments (exit code :data:`EXIT_FAILURE`).
_SYSTEM_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EIO, errno.EDQUOT, errno.EROFS)
#: Indices of a region: numpy's (int64).
_INDEX_LIMIT = 1 << 63


class CommandError(click.ClickException):
    """An error shown as one line, ``Error: MESSAGE``, ending the command with ``exit_code``
    (:data:`EXIT_FAILURE` or :data:`EXIT_USAGE`)."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        names = " -> ".join(str(n) for n in (exc.filename, exc.filename2) if n is not None)
        return f"{names}: {exc.strerror}" if names else exc.strerror
    if isinstance(exc, StrataError):
        return f"{type(exc).__name__}: {exc}"
    return str(exc)


@contextmanager
def reported():
    """Turn the errors a command may meet into a :class:`CommandError` (one line, no traceback):
    strata's own (:mod:`strata.errors`) and the system's (``OSError``), with the exit code of
    their kind (see the module's docstring)."""
    try:
        yield
    except (StrataError, OSError) as exc:
        usage = isinstance(exc, _USAGE_ERRORS) and not (isinstance(exc, OSError) and exc.errno in _SYSTEM_ERRNOS)
        raise CommandError(_message(exc), EXIT_USAGE if usage else EXIT_FAILURE) from None


class InputPath(click.Path):
    """An existing regular file (a directory too with ``dir_okay``): a FIFO, socket or device is
    refused before anything opens it (reading a FIFO blocks)."""

    def __init__(self, dir_okay: bool = False):
        super().__init__(exists=True, dir_okay=dir_okay, path_type=Path)

    def convert(self, value, param, ctx):
        path = super().convert(value, param, ctx)
        mode = os.stat(path).st_mode
        if not (stat.S_ISREG(mode) or (self.dir_okay and stat.S_ISDIR(mode))):
            self.fail(f"{click.format_filename(path)!r} is not a regular file (a FIFO, socket or device): "
                      "give a file", param, ctx)
        return path


OUTPUT = click.Path(dir_okay=False, path_type=Path)


def parse_region(text: str | None):
    """``"10:20,:,5"`` -> ``(slice(10, 20), slice(None), 5)``: numpy basic indexing without
    brackets (integers and ``start:stop:step`` slices, one per leading axis).

    Raises:
        click.BadParameter: not integers, an empty index, a step of 0, more than three parts
            in a slice, or an index beyond int64 (numpy's).
    """
    if text is None:
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        bits = part.split(":")
        if len(bits) > 3:
            raise click.BadParameter(f"bad slice {part!r}: at most start:stop:step", param_hint="--region")
        try:
            nums = [int(b) if b.strip() else None for b in bits]
        except ValueError:
            raise click.BadParameter(f"bad index {part!r}: integers and start:stop:step slices, e.g. "
                                     "\"10:20,:,5\"", param_hint="--region") from None
        if any(n is not None and not -_INDEX_LIMIT <= n < _INDEX_LIMIT for n in nums):
            raise click.BadParameter(f"index out of range in {part!r}", param_hint="--region")
        if len(nums) == 1:
            if nums[0] is None:
                raise click.BadParameter(f"empty index in {text!r}", param_hint="--region")
            out.append(nums[0])
        elif len(nums) == 3 and nums[2] == 0:
            raise click.BadParameter(f"slice step cannot be zero in {part!r}", param_hint="--region")
        else:
            out.append(slice(*nums))
    return tuple(out)


def _region_option(ctx, param, value):
    return parse_region(value)


def _shape_option(ctx, param, value):
    from .inputs import parse_shape

    if value is None:
        return None
    try:
        return parse_shape(value)
    except InvalidInputError as exc:
        raise click.BadParameter(f"{exc} (e.g. 100x500x500)") from None


def _bounds_option(ctx, param, value):
    if value is None:
        return None
    try:
        return [float(b) for b in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: comma-separated numbers, e.g. 1e-2,1e-3") from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_output(output: Path, force: bool, **inputs: Path | None) -> None:
    """Refuse an ``output`` that is one of the command's ``inputs`` (named by keyword: the
    same file, by identity: a link or another spelling counts), whatever ``force`` says; one
    that exists, unless ``force``; one whose folder is missing.

    Raises:
        CommandError: exit code :data:`EXIT_USAGE`.
    """
    for what, path in inputs.items():
        if path is not None and _same_file(output, path):
            raise CommandError(f"{output} is the {what.replace('_', ' ')} of this command: give another output "
                               "(-o)")
    if not output.parent.is_dir():
        raise CommandError(f"{output}: the folder {output.parent} does not exist")
    if os.path.lexists(output) and not force:
        raise CommandError(f"{output} exists: give --force to replace it, or another output (-o)")


def _declared(v, fill_value, mask):
    """The variable ``v`` with the missing values given on the command line."""
    from .inputs import declare_missing, read_mask

    return declare_missing(v, fill_value, read_mask(mask, v.data.shape) if mask is not None else None)


def _exact(v: float, dtype) -> str:
    """``v`` written so that it reads back as the same value of ``dtype`` (numpy's shortest)."""
    return str(np.dtype(dtype).type(v))


def _warn_input(name: str, d, dtype) -> None:
    """Print a :class:`strata.dominance.Dominance` of an input (before compressing) to stderr."""
    named = " and ".join(f"{_exact(v, dtype)} ({c} points, {100 * c / d.size:.3g} %)"
                         for v, c in zip(d.values, d.counts))
    first = _exact(d.values[0], dtype)
    click.echo(f"warning: {name}: the valid values' range [{d.low:.6g}, {d.high:.6g}] is dominated by {named}: "
               f"the values fill {100 * d.share:.2g} % of it, so a --rel bound is set by {first} and erases the "
               f"other values. If {first} marks missing values, declare it: --fill-value {first} (or --mask "
               "FILE); otherwise give an --abs bound.", err=True)


def _warn_stream(name: str, d, reader) -> None:
    """Print a :class:`strata.dominance.Dominance` of a stream (``strata info``) to stderr."""
    v = _exact(d.values[0], reader.dtype)
    click.echo(f"warning: {name}: the decoded values fill {100 * d.share:.2g} % of their range "
               f"[{d.low:.6g}, {d.high:.6g}] ({d.groups} groups), which the valid range's end {v} dominates: "
               f"the bound in force ({reader.header.eb:.6g}) may exceed the spread of the other values. If {v} "
               f"marked missing values, compress the source again with --fill-value {v}.", err=True)


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


@click.group()
@click.version_option(__version__, prog_name="strata")
def main():
    """strata: error-bounded lossy compression of scientific arrays with progressive and
    random-access decompression.

    Exit codes: 0 success, 1 a failure on the data or the system (damaged stream, full disk),
    2 a command line that cannot be done (bad option, missing input, existing output without
    --force)."""


FORCE_HELP = "replace OUTPUT if it exists (an input of the command is never replaced)"
ERROR_BOUND_HELP = ("absolute bound the values must meet: a stream in precision layers reads only the layers it "
                    "needs (strata info lists them); a plain stream accepts its own bound or a coarser one")
FILL_HELP = "values equal to V are missing (e.g. 1e+20 over land): kept exactly, outside the bound and the range"
MASK_HELP = ("missing points: a .npy bool array (or 0/1), or raw 0/1 bytes (shape from the name, else the data's "
             "trailing axes), of the data's shape or broadcasting to it")


@main.command()
@click.argument("input", type=InputPath())
@click.option("-o", "--output", type=OUTPUT, help="output stream (default: INPUT.strata)")
@click.option("--abs", "abs_error", type=float, help="absolute error bound")
@click.option("--rel", "rel_error", type=float, help="bound relative to the range of the valid values")
@click.option("--target-psnr", "target_psnr", type=float,
              help="instead of a bound: reach this PSNR (dB), predicted then checked (at most 3 compressions)")
@click.option("--target-ratio", "target_ratio", type=float, help="instead of a bound: reach this compression ratio")
@click.option("--target-ssim", "target_ssim", type=float,
              help="instead of a bound: reach this SSIM (needs scikit-image)")
@click.option("--shape", callback=_shape_option,
              help="shape of a raw input, e.g. 100x500x500 (default: from the file name)")
@click.option("--var", help="variable (NetCDF) or dataset (HDF5) to read")
@click.option("--no-cf", "no_cf", is_flag=True,
              help="NetCDF/HDF5: read the stored values, ignoring _FillValue, missing_value, valid_* and packing")
@click.option("--fill-value", "fill_value", type=float, metavar="V", help=FILL_HELP)
@click.option("--mask", type=InputPath(), metavar="FILE", help=MASK_HELP)
@click.option("--enhance", type=click.Choice(["1x", "2x"]),
              help="train and store an enhancement network (NeurLZ; needs strata[torch]): 2x keeps every value "
              "within twice the bound, 1x within the bound")
@click.option("--objective", type=click.Choice(["ratio", "psnr"]), default="ratio", show_default=True,
              help="with a bound: tune for the smallest stream at the bound (ratio) or for the fewest bits at "
              "equal PSNR (psnr: tighter bounds on coarse levels, slower to compress)")
@click.option("--progressive", type=click.Choice(["precision"]),
              help="precision: write layers readable at any bound from the coarsest layer's down to the bound "
              "given (decompress/extract --error-bound read only the layers a bound needs)")
@click.option("--layers", callback=_bounds_option,
              help="with --progressive precision: the coarser layers' bounds, comma-separated, of the kind of "
              "--abs/--rel (default: every decade up to 1e-2 of the range)")
@click.option("--force", is_flag=True, help=FORCE_HELP)
def compress(input, output, abs_error, rel_error, target_psnr, target_ratio, target_ssim, shape, var, no_cf,
             fill_value, mask, enhance, objective, progressive, layers, force):
    """Compress INPUT with a point-wise error bound on its valid values.

    A NetCDF/HDF5 variable is read with the CF conventions (missing values, packed data) and
    its name, dimensions, attributes and coordinates travel in the stream, so that
    `strata decompress -o OUT.nc` rebuilds it. The missing values of a raw or .npy input are
    declared with --fill-value and --mask; a warning tells when a few extreme values dominate
    the range (a relative bound would then erase the data). With --progressive precision the
    stream holds precision layers: `strata decompress --error-bound E` reads only those that
    E needs, and `strata info` lists them.
    """
    from .atomic import atomic_write
    from .cf import HDF5_SUFFIXES, NETCDF_SUFFIXES
    from .dominance import check_array
    from .inputs import read_input
    from .lossy import open_array

    targets = [(m, x) for m, x in (("psnr", target_psnr), ("ratio", target_ratio), ("ssim", target_ssim))
               if x is not None]
    given = len(targets) + (abs_error is not None) + (rel_error is not None)
    if given != 1 or (targets and enhance):
        raise click.UsageError("give one of --abs, --rel, --target-psnr, --target-ratio, --target-ssim "
                               "(a target does not combine with --enhance)")
    if objective != "ratio" and (targets or enhance):
        raise click.UsageError("--objective applies to --abs or --rel, without a target or --enhance")
    if (progressive or layers) and (targets or enhance or not progressive):
        raise click.UsageError("--progressive precision (and --layers, which needs it) takes --abs or --rel, "
                               "without a target or --enhance")
    if no_cf and input.suffix.lower() not in NETCDF_SUFFIXES + HDF5_SUFFIXES:
        raise click.UsageError("--no-cf is for NetCDF/HDF5 inputs only")
    output = output or input.with_name(input.name + ".strata")
    check_output(output, force, input=input, mask=mask)
    with reported():
        v = _declared(read_input(input, shape, var, cf=not no_cf), fill_value, mask)
        a = v.data
        d = check_array(a, v.mask)
        if d is not None:
            _warn_input(input.name, d, a.dtype)
        bar = _Bar(a.nbytes, "compress")
        t = time.perf_counter()
        try:
            blob = v.compress(abs_error=abs_error, rel_error=rel_error, progress=bar, enhance=enhance,
                              target=targets[0] if targets else None, objective=objective,
                              layers=layers if progressive else None, progressive=progressive)
        finally:
            bar.close()
        t = time.perf_counter() - t
        atomic_write(output, blob, replace=force)
        with open_array(blob) as r:
            eb = r.header.eb if progressive is None else r.error_bound
            n_layers = f", {len(r.layers)} precision layers" if progressive else ""
    missing = f", {int(np.count_nonzero(v.mask))} missing" if v.mask is not None else ""
    click.echo(f"{input.name}: {a.shape} {a.dtype}{missing} -> {output} ({len(blob)} bytes, ratio "
               f"{a.nbytes / len(blob):.2f}, {8 * len(blob) / max(a.size, 1):.3f} bits/value, error bound {eb:.6g}"
               f"{n_layers}, {a.nbytes / 1e6 / t:.0f} MB/s)")


def _decode_to(input, output, level, region, grid=False, enhance=True, force=False, error_bound=None):
    """Decode INPUT (all, a level, or a region; at ``error_bound`` for a stream in precision
    layers) and write it to OUTPUT; report or fail."""
    from .cf import NETCDF_SUFFIXES, keep_axes
    from .inputs import RAW_DTYPES, write_array
    from .lossy import open_array

    check_output(output, force, input=input)
    netcdf = output.suffix.lower() in NETCDF_SUFFIXES
    if not netcdf and output.suffix.lower() not in (".npy", *RAW_DTYPES):
        raise CommandError(f"{output.name}: the output must be .npy, .f32, .f64 or .nc")
    if netcdf:
        region = keep_axes(region)  # a NetCDF variable keeps its dimensions (and coordinates)
    with reported():
        with open_array(input) as r:
            bar = _Bar(r.header.size * r.dtype.itemsize, "decompress")
            try:
                a = r.read(level=level, region=region, full_resolution=not grid, masked=True, progress=bar,
                           enhance=enhance, error_bound=error_bound)
            finally:
                bar.close()
            index = tuple(slice(None, None, q) for q in r.levels[level].stride) if grid else region
            metadata, fill = (r.metadata, r.fill_value) if netcdf else (None, None)
        write_array(output, a, metadata, fill_value=fill, index=index, replace=force)
    n = int(np.count_nonzero(np.ma.getmaskarray(a)))
    click.echo(f"{input.name} -> {output}: {a.shape} {a.dtype}" + (f", {n} missing" if n else ""))


@main.command()
@click.argument("input", type=InputPath())
@click.option("-o", "--output", type=OUTPUT,
              help="output .npy, .f32, .f64 or .nc (default: INPUT without .strata, as .npy)")
@click.option("--level", type=click.IntRange(min=0), help="decode levels 0..LEVEL only (a full-resolution preview)")
@click.option("--region", callback=_region_option, help='decode only this box, e.g. "10:20,:,5"')
@click.option("--error-bound", "error_bound", type=float, metavar="E", help=ERROR_BOUND_HELP)
@click.option("--no-enhance", "no_enhance", is_flag=True, help="skip the stream's enhancement network (plain values)")
@click.option("--force", is_flag=True, help=FORCE_HELP)
def decompress(input, output, level, region, error_bound, no_enhance, force):
    """Decompress INPUT (all of it, a preview from a level, or a region).

    A .nc output rebuilds the NetCDF variable the stream was made from (name, dimensions,
    coordinates, attributes, _FillValue, packing); a stream without that metadata gives a
    variable "data" with dimensions dim_0, dim_1, ... In .npy/.f32/.f64 outputs missing points
    hold their original values. The default output (foo.npy for foo.npy.strata) is often the
    original file: it is replaced only with --force.
    """
    if output is None:
        stem = input.name[:-len(".strata")] if input.name.endswith(".strata") else input.name
        output = input.with_name(Path(stem).stem + ".npy")
    _decode_to(input, output, level, region, enhance=not no_enhance, force=force, error_bound=error_bound)


@main.command()
@click.argument("input", type=InputPath())
@click.option("-o", "--output", required=True, type=OUTPUT, help="output .npy, .f32, .f64 or .nc")
@click.option("--level", type=click.IntRange(min=0), help="decode levels 0..LEVEL only")
@click.option("--grid", is_flag=True, help="write the level's grid itself, not a full-resolution preview")
@click.option("--region", callback=_region_option, help='decode only this box, e.g. "10:20,:,5"')
@click.option("--error-bound", "error_bound", type=float, metavar="E", help=ERROR_BOUND_HELP)
@click.option("--force", is_flag=True, help=FORCE_HELP)
def extract(input, output, level, grid, region, error_bound, force):
    """Extract a level (its grid or a preview) or a box from INPUT, at a coarser error bound
    for a stream in precision layers."""
    if grid and level is None:
        raise click.BadParameter("--grid needs --level", param_hint="--grid")
    if grid and region is not None:
        raise click.UsageError("--grid writes a whole level: it does not combine with --region")
    _decode_to(input, output, level, region, grid, force=force, error_bound=error_bound)


@main.command()
@click.argument("input", type=InputPath())
def info(input):
    """Describe the stream INPUT: shape, dtype, bound, missing values, variable, target, levels.

    Warns (stderr) when a few extreme values dominate the decoded values' range."""
    from .cf import parse_metadata
    from .dominance import check_stream
    from .lossy import LayeredReader, open_array

    with reported(), open_array(input) as r:
        h = r.header
        size = input.stat().st_size
        nbytes = h.size * r.dtype.itemsize
        layered = isinstance(r, LayeredReader)
        if layered:
            click.echo(f"{input.name}: strata stream in {len(r.layers)} precision layers, {size} bytes")
            click.echo(f"  shape {h.shape}  dtype {r.dtype}  finest error bound {r.error_bound:.6g} "
                       "(strata decompress --error-bound E reads the layers E needs)")
        else:
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
        t = None if layered else r.target
        if t is not None:
            click.echo(f"  {_target_text(t)}")
        e = None if layered else r.enhancement
        if e is not None:
            click.echo(f"  {_enhancement_text(e)}")
        s = r.settings_text()
        click.echo(f"  predictor {s}" + (" (first layer)" if layered else ""))
        if layered:
            vr = r.valid_range[1] - r.valid_range[0] if r.valid_range is not None else 0.0
            click.echo("  layer  error bound   of the range  bytes       bytes read to it")
            for lay in r.layers:
                rel = f"{lay.error_bound / vr:12.3g}" if vr > 0 else f"{'-':>12s}"
                click.echo(f"  {lay.index:5d}  {lay.error_bound:11.4g}  {rel}  {lay.compressed_bytes:10d}"
                           f"  {lay.offset + lay.compressed_bytes:10d}")
        click.echo("  level  shape                 stride        error bound   bytes       points"
                   + ("   (first layer)" if layered else ""))
        for lv in r.levels:
            click.echo(f"  {lv.index:5d}  {str(lv.shape):20s}  {str(lv.stride):12s}  {lv.error_bound:11.4g}"
                       f"  {lv.compressed_bytes:10d}  {lv.points:10d}")
        d = check_stream(r)
        if d is not None:
            _warn_stream(input.name, d, r)


@main.command()
@click.argument("input", type=InputPath())
@click.option("--rel", "rel_error", callback=_bounds_option,
              help="bounds relative to the valid range, comma-separated: 1e-2,1e-3,1e-4")
@click.option("--abs", "abs_error", callback=_bounds_option, help="absolute bounds, comma-separated")
@click.option("--compressor", default="strata", show_default=True,
              help="comma-separated: strata, sz3, zfp (fixed accuracy)")
@click.option("--verify", is_flag=True, help="also compress and measure (sz3 needs pysz, zfp zfpy; SSIM scikit-image)")
@click.option("--shape", callback=_shape_option,
              help="shape of a raw input, e.g. 100x500x500 (default: from the file name)")
@click.option("--var", help="variable (NetCDF) or dataset (HDF5) to read")
@click.option("--fill-value", "fill_value", type=float, metavar="V", help=FILL_HELP)
@click.option("--mask", type=InputPath(), metavar="FILE", help=MASK_HELP)
def quality(input, rel_error, abs_error, compressor, verify, shape, var, fill_value, mask):
    """Predict the compression ratio, PSNR and SSIM of INPUT at the given bounds, without
    compressing (strata.quality, after DeepCQ); --verify measures them beside.

    Missing values count as in `strata compress` (--fill-value, --mask, or the CF attributes
    of a NetCDF variable); a warning tells when a few extreme values dominate the range."""
    from .dominance import check_array
    from .inputs import read_input
    from .lossy import missing
    from .quality import features, predict
    from .quality.anchors import measure

    if (rel_error is None) == (abs_error is None):
        raise click.UsageError("give one of --rel and --abs")
    bounds = rel_error or abs_error
    with reported():
        v = _declared(read_input(input, shape, var), fill_value, mask)
        a = v.data
        d = check_array(a, v.mask)
        if d is not None:
            _warn_input(input.name, d, a.dtype)
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
            try:
                p = predict(f, compressor=comp, metrics=metrics, **{kind: bounds})
            except ImportError as exc:
                raise CommandError(str(exc), EXIT_FAILURE) from None
            for i, b in enumerate(bounds):
                row = {m: p[m][i] for m in metrics}
                line = f"  {comp:10s} {b:9.3g} " + _quality_cells(row, a.dtype.itemsize, with_ssim)
                if verify:
                    try:
                        row = measure(comp, a, p["abs_error"][i], miss, ssim=with_ssim)
                    except ImportError as exc:
                        raise CommandError(str(exc), EXIT_FAILURE) from None
                    line += "  |  " + _quality_cells(row, a.dtype.itemsize, with_ssim)
                click.echo(line)


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
@click.argument("input", type=InputPath(dir_okay=True))
@click.argument("output", type=click.Path(path_type=Path))
@click.option("--rel", "rel_error", type=float,
              help="bound relative to each variable's whole valid range (max - min of its valid values)")
@click.option("--abs", "abs_error", type=float, help="absolute bound, in each variable's unit")
@click.option("--var", "variables", multiple=True,
              help="compress only this data variable (repeat, or NAME,NAME); default: all float data variables")
@click.option("--chunks", help="zarr chunk shape: time=24,lat=256 (dimensions not named are not split) or "
              "24,256,256 (the largest compressed variable's dimensions); default: about 4 MiB a chunk")
@click.option("--objective", type=click.Choice(["ratio", "psnr"]),
              help="to zarr: tune for the smallest stream at the bound (ratio, default) or the fewest bits at equal "
              "PSNR (psnr)")
@click.option("--layers", callback=_bounds_option,
              help="to zarr: precision layers at these coarser bounds (of the kind of --rel/--abs), comma-separated; "
              "strata.xarray.open_zarr(..., rel_error=E) then reads only the layers E needs")
@click.option("--force", is_flag=True, help=FORCE_HELP)
def convert(input, output, rel_error, abs_error, variables, chunks, objective, layers, force):
    """Convert a NetCDF/HDF5 file to a zarr v3 store compressed with strata, or back.

    IN.nc/.nc4/.h5/.hdf5 -> OUT.zarr: float data variables are compressed with an error bound
    (exactly one of --rel, --abs); coordinates, integer and packed-integer variables are copied
    losslessly; attributes, coordinates and _FillValue are kept. IN.zarr -> OUT.nc: a NetCDF4
    file with the decoded values (missing points as _FillValue). The output is written under a
    temporary name and renamed at the end; with --force an existing store is swapped with the
    new one in one step, so that OUTPUT is always the old or the new store.
    """
    from .convert import convert as run_convert

    names = [n.strip() for v in variables for n in v.split(",") if n.strip()] or None
    if output.suffix.lower() == ".zarr" and (rel_error is None) == (abs_error is None):
        raise click.UsageError("give exactly one of --rel and --abs")
    check_output(output, force, input=input)
    with reported():
        rep = run_convert(input, output, rel_error=rel_error, abs_error=abs_error, variables=names, chunks=chunks,
                          force=force, progress_bytes=PROGRESS_BYTES, objective=objective, layers=layers)
    ratio = f", ratio {rep.nbytes / rep.output_bytes:.2f}" if rep.lossy and rep.output_bytes else ""
    click.echo(f"{input.name} -> {output} ({rep.nbytes} bytes -> {rep.output_bytes} bytes{ratio}, "
               f"{rep.seconds:.1f} s)")
    if rep.chunks:
        click.echo("  chunks " + ", ".join(f"{d}={n}" for d, n in rep.chunks.items()))
    for name, c in rep.lossy.items():
        how = ""
        if c.rel_error is not None and c.valid_range is not None:
            how = f"{c.rel_error:g} of [{c.valid_range[0]:.6g}, {c.valid_range[1]:.6g}] -> "
        layered = f", precision layers at {', '.join(f'{b:.6g}' for b in c.layers)}" if c.layers else ""
        click.echo(f"  {name}: strata, abs bound {how}{c.abs_error:.6g}{layered}")
    if rep.lossless:
        click.echo(f"  {'lossless' if rep.lossy else 'written'}: {', '.join(rep.lossless)}")


@main.group()
def ckpt():
    """Lossless compression of checkpoints (safetensors files, strata checkpoints)."""


@ckpt.command("compress")
@click.argument("input", type=InputPath())
@click.option("-o", "--output", type=OUTPUT, help="output checkpoint (default: INPUT.strata)")
@click.option("--base", type=InputPath(),
              help="an earlier strata checkpoint of the same model (same folder): store the XOR delta")
@click.option("--force", is_flag=True, help=FORCE_HELP + "; the output is never --base")
def ckpt_compress(input, output, base, force):
    """Compress a .safetensors file losslessly (optionally as a delta against --base)."""
    from .checkpoint import compress_safetensors

    output = output or input.with_name(input.name + ".strata")
    check_output(output, force, input=input, base=base)
    t = time.perf_counter()
    with reported(), _Steps(input.stat().st_size, "compress"):
        compress_safetensors(input, output, base=base)
    t = time.perf_counter() - t
    n, c = input.stat().st_size, output.stat().st_size
    click.echo(f"{input.name} -> {output} ({c} bytes, ratio {n / c:.4f}, {n / 2**30 / t:.2f} GiB/s)")


@ckpt.command("decompress")
@click.argument("input", type=InputPath())
@click.option("-o", "--output", required=True, type=OUTPUT,
              help="the .safetensors file to rebuild (byte-identical to the original)")
@click.option("--force", is_flag=True, help=FORCE_HELP)
def ckpt_decompress(input, output, force):
    """Rebuild the original .safetensors file from a strata checkpoint."""
    from .checkpoint import decompress_safetensors

    check_output(output, force, input=input)
    with reported(), _Steps(input.stat().st_size, "decompress"):
        decompress_safetensors(input, output)
    click.echo(f"{input.name} -> {output} ({output.stat().st_size} bytes)")


@ckpt.command("info")
@click.argument("input", type=InputPath())
def ckpt_info(input):
    """List a strata checkpoint's segments and tensors."""
    from .checkpoint.io import header

    with reported():
        h = header(input)
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
