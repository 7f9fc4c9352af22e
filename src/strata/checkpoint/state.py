"""Nested state dicts <-> a JSON skeleton plus a flat list of tensors.

A state dict (``model.state_dict()``, ``optimizer.state_dict()``, or any nesting of dicts,
lists and tuples) may hold torch tensors, NumPy arrays and plain values (numbers, strings,
booleans, None). Tensors become ``{"__tensor__": i}`` in the skeleton and entry ``i`` of the
tensor list; tuples and dicts with non-string keys are tagged so they come back as they were.
Tensors of any memory layout are saved by value (their contiguous bytes); they come back
contiguous, with the same name, shape and dtype. torch is imported only if a torch tensor is
met (``strata.checkpoint`` works on NumPy arrays without it).
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidInputError, UnsupportedDtypeError

#: NumPy dtype -> safetensors dtype name.
NUMPY_NAMES = {
    np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
    np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("int16"): "I16", np.dtype("int8"): "I8",
    np.dtype("uint64"): "U64", np.dtype("uint32"): "U32", np.dtype("uint16"): "U16", np.dtype("uint8"): "U8",
    np.dtype("bool"): "BOOL", np.dtype("complex64"): "C64", np.dtype("complex128"): "C128",
}
NUMPY_DTYPES = {v: k for k, v in NUMPY_NAMES.items()}
#: torch dtype attribute name -> safetensors dtype name.
TORCH_NAMES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64",
    "bool": "BOOL", "complex64": "C64", "complex128": "C128", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}


@dataclass
class Tensor:
    """A tensor's identity and bytes: ``name`` (its path in the state dict), ``kind``
    (``"torch"`` or ``"numpy"``), ``dtype`` (safetensors name), ``shape`` and ``data`` (uint8,
    contiguous little-endian bytes)."""

    name: str
    kind: str
    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray  # or TorchBytes before grouping (``flatten(lazy=True)``)


_TORCH_DTYPE_NAMES: dict = {}  # torch dtype -> its name, memoized


def _torch_uint8(t):
    return __import__("torch").uint8


def _is_torch(x) -> bool:
    torch = sys.modules.get("torch")  # (a torch tensor exists only once torch is imported)
    return torch is not None and isinstance(x, torch.Tensor)


class TorchBytes:
    """The bytes of a CPU, contiguous torch tensor, copied on demand: ``size`` bytes;
    :meth:`copy_to` copies them to an address (one ``memmove``, no NumPy or torch views)."""

    __slots__ = ("tensor", "size")

    def __init__(self, tensor, size: int):
        self.tensor, self.size = tensor, size

    def copy_to(self, address: int) -> None:
        if self.size:
            ctypes.memmove(address, self.tensor.data_ptr(), self.size)


def tensor_bytes(x, copy: bool = False, lazy: bool = False) -> tuple[str, str, tuple[int, ...], object]:
    """``(kind, dtype name, shape, uint8 bytes)`` of a torch tensor or NumPy array; with
    ``lazy``, the bytes of a CPU contiguous torch tensor come as :class:`TorchBytes` (the
    caller copies them before the tensor may change).

    Raises:
        UnsupportedDtypeError: a dtype strata cannot store (object arrays, quantized tensors).
    """
    if _is_torch(x):
        name = _TORCH_DTYPE_NAMES.get(x.dtype)
        if name is None:
            name = str(x.dtype).removeprefix("torch.")
            if name not in TORCH_NAMES:
                raise UnsupportedDtypeError(f"torch dtype {x.dtype} is not supported")
            _TORCH_DTYPE_NAMES[x.dtype] = name
        t = x.detach() if x.requires_grad else x
        if not t.is_cpu or not t.is_contiguous():
            t = t.to("cpu").contiguous()
        elif lazy and not copy:
            return "torch", TORCH_NAMES[name], tuple(t.shape), TorchBytes(t, t.nbytes)
        b = t.reshape(-1).view(_torch_uint8(t)).numpy()
        return "torch", TORCH_NAMES[name], tuple(t.shape), (b.copy() if copy else b)
    a = np.asarray(x)
    dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    if np.dtype(dt).newbyteorder("=") not in NUMPY_NAMES:
        raise UnsupportedDtypeError(f"NumPy dtype {a.dtype} is not supported")
    a = np.ascontiguousarray(a, dtype=np.dtype(dt).newbyteorder("<"))
    b = a.reshape(-1).view(np.uint8)
    return "numpy", NUMPY_NAMES[np.dtype(dt).newbyteorder("=")], tuple(a.shape), (b.copy() if copy else b)


def flatten(state, copy: bool = False, lazy: bool = False) -> tuple[object, list[Tensor]]:
    """Skeleton and tensors of a nested state dict (``copy``: snapshot the bytes; ``lazy``:
    see :func:`tensor_bytes`).

    Raises:
        InvalidInputError: a value that is neither a tensor, a container nor a plain value.
    """
    tensors: list[Tensor] = []

    def walk(x, path):
        if _is_torch(x) or isinstance(x, np.ndarray):
            kind, dtype, shape, data = tensor_bytes(x, copy, lazy)
            tensors.append(Tensor(path, kind, dtype, shape, data))
            return {"__tensor__": len(tensors) - 1}
        if isinstance(x, dict):
            if all(isinstance(k, str) for k in x):
                return {k: walk(v, f"{path}.{k}" if path else k) for k, v in x.items()}
            return {"__dict__": [[_key(k), walk(v, f"{path}.{k}" if path else str(k))] for k, v in x.items()]}
        if isinstance(x, (list, tuple)):
            items = [walk(v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(x)]
            return items if isinstance(x, list) else {"__tuple__": items}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, (np.integer, np.floating, np.bool_)):
            return x.item()
        raise InvalidInputError(f"cannot store {type(x).__name__} at {path or 'the top'} in a checkpoint")

    return walk(state, ""), tensors


def _key(k):
    if isinstance(k, (str, int, float, bool)) or k is None:
        return k
    raise InvalidInputError(f"dict key {k!r} of type {type(k).__name__} cannot be stored")


def unflatten(skeleton, tensors: list, device: str = "cpu"):
    """Rebuild the state dict from its skeleton and decoded :class:`Tensor` entries."""

    def build(t: Tensor):
        if t.kind == "torch":
            import torch

            dtype = getattr(torch, next(k for k, v in TORCH_NAMES.items() if v == t.dtype))
            raw = torch.from_numpy(np.ascontiguousarray(t.data)) if t.data.size else torch.empty(0, dtype=torch.uint8)
            out = raw.view(dtype).reshape(t.shape)
            return out if device == "cpu" else out.to(device)
        return np.ascontiguousarray(t.data).view(NUMPY_DTYPES[t.dtype].newbyteorder("<")).reshape(t.shape)

    def walk(x):
        if isinstance(x, dict):
            if "__tensor__" in x and len(x) == 1:
                return build(tensors[x["__tensor__"]])
            if "__tuple__" in x and len(x) == 1:
                return tuple(walk(v) for v in x["__tuple__"])
            if "__dict__" in x and len(x) == 1:
                return {k: walk(v) for k, v in x["__dict__"]}
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(skeleton)
