"""The enhancement section of a lossy stream: the network, its inputs, the 1x fallback mask.

Layout (``docs/format.md``, section 7)::

    u8 version (1) | u8 mode (1: "1x", 2: "2x") | u8 stored (0: declined, 1: stored)
    f32 PSNR of the plain decode | f32 PSNR enhanced | varint bytes of a plain stream of the
        enhanced PSNR (the encoder's estimate; how it decided)            -- always
    u8 width | u8 input fields F                                           -- if stored
    F x (blob name (UTF-8, "" = this field) | f32 center | f32 value scale | f32 detail scale |
         u8 feature mask)
    varint parameter count P | 8 x f32 tensor scales | blob: the P int8 parameters, coded
    varint fallback count | blob fallback bitmap                           -- if stored, 1x
    u32 CRC-32 of all the above

The parameters are 8-bit (:func:`strata.enhance.network.quantize`: each of the network's eight
tensors ``q * scale``). The fallback bitmap holds one bit per value of the array (C order,
least significant bit first), set where the decoder keeps the plain decoded value. Both are
coded by the shared byte coder (:mod:`strata.entropy.bytecoder`). Everything is validated
before use; weights that decode to non-finite values are refused.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from ..container import Reader, Writer, checked_body, crc32
from ..entropy import bytecoder
from ..errors import CorruptStreamError
from . import network

VERSION = 1
MODE_1X, MODE_2X = 1, 2
MODE_NAMES = {MODE_1X: "1x", MODE_2X: "2x"}
MAX_WIDTH = 64
MAX_INPUTS = 64
MAX_NAME_BYTES = 255
_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], np.uint8)


@dataclass
class InputField:
    """One input field of the network: ``name`` ("" for the stream's own field) and how its
    channels are made (:mod:`strata.enhance.network`)."""

    name: str
    center: float
    value_scale: float
    detail_scale: float
    features: int


@dataclass
class Enhancement:
    """A parsed enhancement section.

    ``stored`` is False when the encoder measured that the network does not pay for its
    bytes at the stream's bound (no network then). ``psnr_plain``/``psnr_enhanced`` (dB, over
    the valid values) and ``plain_equivalent_bytes`` (a plain stream's estimated size at the
    enhanced PSNR) are what the encoder measured when it decided.
    """

    mode: int
    stored: bool
    psnr_plain: float
    psnr_enhanced: float
    plain_equivalent_bytes: int
    width: int = 0
    inputs: list[InputField] = field(default_factory=list)
    scales: np.ndarray | None = None  # float32 (N_TENSORS,)
    quantized: np.ndarray | None = None  # int8 (P,)
    fallback_count: int = 0
    fallback_coded: bytes = b""

    @property
    def mode_name(self) -> str:
        return MODE_NAMES[self.mode]

    @property
    def channels(self) -> int:
        return network.channel_count(f.features for f in self.inputs)

    @property
    def params(self) -> np.ndarray:
        """float32 flat parameters (:func:`strata.enhance.network.dequantize`)."""
        return network.dequantize(self.scales, self.quantized, self.channels, self.width)

    def set_params(self, params: np.ndarray) -> None:
        """Quantize and keep float32 ``params`` (:func:`strata.enhance.network.quantize`)."""
        self.scales, self.quantized = network.quantize(params, self.channels, self.width)

    def spec(self) -> np.ndarray:
        """float32 ``(F, 4)``: center, value scale, detail scale, feature mask per input."""
        return np.array([[f.center, f.value_scale, f.detail_scale, f.features] for f in self.inputs], np.float32)

    def fallback(self, shape: tuple[int, ...], box=None) -> np.ndarray | None:
        """The 1x fallback mask of an array of ``shape`` (its internal 3D view), or of the block
        ``box`` (``(lo, hi)`` per axis) of it: bool of that shape, or None when there is none.
        The bitmap is unpacked only in the block (``size / 8`` bytes are decoded).

        Raises:
            CorruptStreamError: the bitmap does not decode to ``fallback_count`` set bits.
        """
        if self.mode != MODE_1X or not self.fallback_count:
            return None
        size = math.prod(shape)
        packed = bytecoder.decode(self.fallback_coded, -(-size // 8))
        tail = size % 8
        if (tail and packed[-1] >> tail) or int(_POPCOUNT[packed].sum(dtype=np.int64)) != self.fallback_count:
            raise CorruptStreamError("enhancement fallback bitmap does not match its count")
        if box is None:
            return np.unpackbits(packed, count=size, bitorder="little").view(np.bool_).reshape(shape)
        lo, hi = box
        idx = np.ravel_multi_index(np.ix_(*(np.arange(a, b) for a, b in zip(lo, hi))), shape)
        return ((packed[idx >> 3] >> (idx & 7).astype(np.uint8)) & 1).view(np.bool_)

    def to_bytes(self) -> bytes:
        w = Writer().u8(VERSION).u8(self.mode).u8(int(self.stored))
        w.f32(self.psnr_plain).f32(self.psnr_enhanced).varint(self.plain_equivalent_bytes)
        if self.stored:
            w.u8(self.width).u8(len(self.inputs))
            for f in self.inputs:
                w.blob(f.name.encode()).f32(f.center).f32(f.value_scale).f32(f.detail_scale).u8(f.features)
            w.varint(self.quantized.size).raw(self.scales.astype("<f4").tobytes())
            w.blob(bytecoder.encode(self.quantized.view(np.uint8)))
            if self.mode == MODE_1X:
                w.varint(self.fallback_count).blob(self.fallback_coded)
        body = w.getvalue()
        return body + struct.pack("<I", crc32(body))

    @classmethod
    def from_bytes(cls, data, size: int) -> Enhancement:
        """Parse and validate the section of a stream of ``size`` values.

        Raises:
            CorruptStreamError: checksum mismatch, unknown version or mode, inconsistent
                counts, non-finite scales or weights.
        """
        body = checked_body(data, "enhancement section")
        r = Reader(body, "enhancement section")
        version, mode, stored = r.u8(), r.u8(), r.u8()
        if version != VERSION:
            raise CorruptStreamError(f"enhancement section version {version} is not supported")
        if mode not in MODE_NAMES or stored > 1:
            raise CorruptStreamError(f"invalid enhancement mode {mode} / stored flag {stored}")
        e = cls(mode, bool(stored), r.f32(), r.f32(), r.varint())
        if e.stored:
            e.width, n_inputs = r.u8(), r.u8()
            if not (1 <= e.width <= MAX_WIDTH and 1 <= n_inputs <= MAX_INPUTS):
                raise CorruptStreamError(f"invalid enhancement network ({e.width} channels, {n_inputs} inputs)")
            for i in range(n_inputs):
                try:
                    name = bytes(r.blob(MAX_NAME_BYTES)).decode()
                except UnicodeDecodeError as exc:
                    raise CorruptStreamError("enhancement input name is not UTF-8") from exc
                f = InputField(name, r.f32(), r.f32(), r.f32(), r.u8())
                if not (0 < f.features < 16 and all(map(math.isfinite, (f.center, f.value_scale, f.detail_scale)))):
                    raise CorruptStreamError("invalid enhancement input")
                if (i == 0) != (name == ""):
                    raise CorruptStreamError("the first enhancement input must be the stream's own field, only it")
                e.inputs.append(f)
            expected = network.weight_count(e.channels, e.width)
            n = r.varint(1 << 24)
            if n != expected:
                raise CorruptStreamError(f"enhancement network holds {n} parameters, its shape needs {expected}")
            e.scales = np.frombuffer(r.raw(4 * network.N_TENSORS), "<f4").astype(np.float32)
            if not (np.isfinite(e.scales).all() and (e.scales >= 0).all()):
                raise CorruptStreamError("enhancement weights decode to non-finite values")
            e.quantized = bytecoder.decode(r.blob(len(body)), n).view(np.int8)
            if not np.isfinite(e.params).all():
                raise CorruptStreamError("enhancement weights decode to non-finite values")
            if mode == MODE_1X:
                e.fallback_count = r.varint(size)
                e.fallback_coded = bytes(r.blob(len(body)))
                if e.fallback_count and not e.fallback_coded:
                    raise CorruptStreamError("enhancement fallback positions missing")
        r.done()
        return e


def code_fallback(mask: np.ndarray) -> bytes:
    """The bitmap of ``mask`` (flat bool), coded; empty when no bit is set."""
    if not mask.any():
        return b""
    return bytecoder.encode(np.packbits(mask, bitorder="little"))
