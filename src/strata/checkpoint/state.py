"""Nested state dicts <-> a JSON skeleton plus a flat list of tensors.

A state dict (``model.state_dict()``, ``optimizer.state_dict()``, or any nesting of dicts,
lists and tuples) may hold torch tensors, NumPy arrays and plain values (numbers, strings,
booleans, None). Tensors become ``{"__tensor__": i}`` in the skeleton and entry ``i`` of the
tensor list; tuples and dicts with non-string keys are tagged so they come back as they were.
A dict whose only key is one of these tags is itself stored tagged, so it is never taken for one.
Tensors of any memory layout are saved by value (their contiguous bytes); they come back
contiguous, with the same name, shape and dtype. torch is imported only if a torch tensor is
met (``strata.checkpoint`` works on NumPy arrays without it).

A skeleton read from a file is checked by :func:`check_skeleton` before :func:`unflatten`
builds it; both walk it with an explicit stack (no recursion, whatever the nesting).
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
#: Keys that tag a skeleton node: a tensor, a tuple, a dict with non-string keys.
TAGS = ("__tensor__", "__tuple__", "__dict__")
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
    """The bytes of a contiguous torch tensor, copied on demand: ``size`` bytes. On the CPU
    :meth:`copy_to` is one ``memmove``; a tensor on a GPU (``on_device``) is copied by
    :mod:`strata.checkpoint.capture`, which issues the device-to-host copy into a pinned
    buffer on its own CUDA stream."""

    __slots__ = ("tensor", "size")

    def __init__(self, tensor, size: int):
        self.tensor, self.size = tensor, size

    @property
    def on_device(self) -> bool:
        return not self.tensor.is_cpu

    def host_view(self) -> np.ndarray:
        """The bytes of a tensor on the CPU, as a uint8 NumPy view of its memory (no copy)."""
        return self.tensor.reshape(-1).view(_torch_uint8(self.tensor)).numpy()

    def copy_to(self, out: np.ndarray) -> None:
        """Copy the bytes into ``out`` (uint8, ``size`` bytes), now (from a GPU: synchronously)."""
        if self.size and self.on_device:
            import torch

            torch.from_numpy(out).copy_(self.tensor.reshape(-1).view(torch.uint8))
        elif self.size:
            ctypes.memmove(out.ctypes.data, self.tensor.data_ptr(), self.size)


def on_device(tensors) -> bool:
    """Whether any of these :class:`Tensor` entries still has its bytes on a GPU (a lazy
    :func:`flatten`'s): their host buffers are then best pinned."""
    return any(isinstance(t.data, TorchBytes) and t.data.on_device for t in tensors)


def tensor_bytes(x, copy: bool = False, lazy: bool = False) -> tuple[str, str, tuple[int, ...], object]:
    """``(kind, dtype name, shape, uint8 bytes)`` of a torch tensor or NumPy array; with
    ``lazy``, the bytes of a torch tensor come as :class:`TorchBytes` (the caller copies them
    before the tensor may change; a GPU tensor stays on its device, made contiguous there).

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
        if lazy and not copy and (t.is_cpu or t.is_cuda):
            t = t.contiguous()
            return "torch", TORCH_NAMES[name], tuple(t.shape), TorchBytes(t, t.nbytes)
        if not t.is_cpu or not t.is_contiguous():
            t = t.to("cpu").contiguous()
        b = t.reshape(-1).view(_torch_uint8(t)).numpy()
        return "torch", TORCH_NAMES[name], tuple(t.shape), (b.copy() if copy else b)
    a = np.asarray(x)
    dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    if np.dtype(dt).newbyteorder("=") not in NUMPY_NAMES:
        raise UnsupportedDtypeError(f"NumPy dtype {a.dtype} is not supported")
    shape = tuple(a.shape)  # (ascontiguousarray makes a 0-d array 1-d)
    a = np.ascontiguousarray(a, dtype=np.dtype(dt).newbyteorder("<"))
    b = a.reshape(-1).view(np.uint8)
    return "numpy", NUMPY_NAMES[np.dtype(dt).newbyteorder("=")], shape, (b.copy() if copy else b)


def flatten(state, copy: bool = False, lazy: bool = False) -> tuple[object, list[Tensor]]:
    """Skeleton and tensors of a nested state dict (``copy``: snapshot the bytes; ``lazy``:
    see :func:`tensor_bytes`).

    Plain values are stored as JSON: NumPy integer, float and bool scalars become the Python
    number of the same value (``np.float32(0.1)`` comes back as the float ``0.10000000149011612``).

    Raises:
        InvalidInputError: a value that is neither a tensor, a container nor a plain value.
        UnsupportedDtypeError: a tensor of a dtype strata cannot store, or a NumPy scalar with
            no exact Python number (``np.longdouble``).
    """
    tensors: list[Tensor] = []

    def walk(x, path):
        if _is_torch(x) or isinstance(x, np.ndarray):
            kind, dtype, shape, data = tensor_bytes(x, copy, lazy)
            tensors.append(Tensor(path, kind, dtype, shape, data))
            return {"__tensor__": len(tensors) - 1}
        if isinstance(x, dict):
            if all(isinstance(k, str) for k in x) and not (len(x) == 1 and next(iter(x)) in TAGS):
                return {k: walk(v, f"{path}.{k}" if path else k) for k, v in x.items()}
            return {"__dict__": [[_key(k), walk(v, f"{path}.{k}" if path else str(k))] for k, v in x.items()]}
        if isinstance(x, (list, tuple)):
            items = [walk(v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(x)]
            return items if isinstance(x, list) else {"__tuple__": items}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, (np.integer, np.floating, np.bool_)):
            v = x.item()  # (a Python number of the same value; np.longdouble stays itself)
            if isinstance(v, (bool, int, float)):
                return v
            raise UnsupportedDtypeError(f"NumPy scalar {type(x).__name__} at {path or 'the top'} has no exact "
                                        f"JSON number: store it as an array of a supported dtype")
        raise InvalidInputError(f"cannot store {type(x).__name__} at {path or 'the top'} in a checkpoint")

    return walk(state, ""), tensors


def _key(k):
    if isinstance(k, (str, int, float, bool)) or k is None:
        return k
    raise InvalidInputError(f"dict key {k!r} of type {type(k).__name__} cannot be stored")


def check_skeleton(skeleton, n_tensors: int) -> str | None:
    """Why ``skeleton`` (parsed JSON) is not one :func:`unflatten` can build with ``n_tensors``
    tensors, each referenced exactly once, or ``None`` if it is. Walks with an explicit stack."""
    seen = bytearray(n_tensors)
    stack = [skeleton]
    while stack:
        x = stack.pop()
        if isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, dict):
            if len(x) == 1 and "__tensor__" in x:
                i = x["__tensor__"]
                if type(i) is not int or not 0 <= i < n_tensors:
                    return f"tensor reference {repr(i)[:40]} out of range (the file has {n_tensors} tensors)"
                if seen[i]:
                    return f"tensor {i} referenced twice"
                seen[i] = 1
            elif len(x) == 1 and "__tuple__" in x:
                if not isinstance(x["__tuple__"], list):
                    return "a tuple node is not a list"
                stack.extend(x["__tuple__"])
            elif len(x) == 1 and "__dict__" in x:
                items = x["__dict__"]
                if not isinstance(items, list):
                    return "a dict node is not a list"
                for item in items:
                    if not (isinstance(item, list) and len(item) == 2
                            and (item[0] is None or isinstance(item[0], (str, int, float)))):
                        return "a dict node's item is not a [key, value] pair with a plain key"
                    stack.append(item[1])
            else:
                stack.extend(x.values())
    if not all(seen):
        return f"tensor {seen.index(0)} is not referenced"
    return None


class _Node:
    """A container being rebuilt by :func:`unflatten`: its kind, child nodes, keys, and values."""

    __slots__ = ("kind", "items", "keys", "out", "i")

    def __init__(self, kind: str, items: list, keys: list | None = None):
        self.kind, self.items, self.keys, self.out, self.i = kind, items, keys, [], 0


def unflatten(skeleton, tensors: list, device: str = "cpu"):
    """Rebuild the state dict from its skeleton and decoded :class:`Tensor` entries (the
    skeleton as :func:`flatten` makes it, or checked by :func:`check_skeleton`). Torch tensors
    go to ``device`` by non-blocking copies: a caller whose entries lie in pinned memory
    synchronizes before it frees them (:func:`strata.checkpoint.io.load`)."""

    def build(t: Tensor):
        if t.kind == "torch":
            import torch

            dtype = getattr(torch, next(k for k, v in TORCH_NAMES.items() if v == t.dtype))
            raw = torch.from_numpy(np.ascontiguousarray(t.data)) if t.data.size else torch.empty(0, dtype=torch.uint8)
            out = raw.view(dtype).reshape(t.shape)
            return out if device == "cpu" else out.to(device, non_blocking=True)
        return np.ascontiguousarray(t.data).view(NUMPY_DTYPES[t.dtype].newbyteorder("<")).reshape(t.shape)

    top = _Node("list", [skeleton])
    stack = [top]
    while stack:
        node = stack[-1]
        if node.i == len(node.items):
            stack.pop()
            if stack:
                out = node.out
                stack[-1].out.append(out if node.kind == "list" else tuple(out) if node.kind == "tuple"
                                     else dict(zip(node.keys, out)))
            continue
        x = node.items[node.i]
        node.i += 1
        if isinstance(x, list):
            stack.append(_Node("list", x))
        elif isinstance(x, dict):
            if len(x) == 1 and "__tensor__" in x:
                node.out.append(build(tensors[x["__tensor__"]]))
            elif len(x) == 1 and "__tuple__" in x:
                stack.append(_Node("tuple", x["__tuple__"]))
            elif len(x) == 1 and "__dict__" in x:
                stack.append(_Node("dict", [v for _, v in x["__dict__"]], [k for k, _ in x["__dict__"]]))
            else:
                stack.append(_Node("dict", list(x.values()), list(x)))
        else:
            node.out.append(x)
    return top.out[0]
