"""Capturing a state dict's tensors into host memory for a checkpoint, without stopping the
training loop for longer than the copies take to issue (DataStates-LLM, Maurya et al., HPDC
2024, sections 4.1-4.2: host buffers allocated once and reused, device-to-host copies
overlapped with the next forward and backward passes, which do not change the parameters or
the optimizer state; only the next optimizer step must wait for them).

:func:`start` copies the tensors' bytes (:class:`~strata.checkpoint.state.TorchBytes` pairs of
:func:`strata.checkpoint.io.group`) into their host buffers and returns a :class:`Capture`:

* tensors on a GPU: ``copy_(non_blocking=True)`` into pinned buffers (:class:`HostBuffers`)
  on one dedicated CUDA stream per device, which first waits for the work already queued on
  the device's current stream (what produced the values), then one CUDA event; the source
  tensors are recorded on that stream so that the caching allocator does not reuse their
  memory before the copies have read it. No pageable intermediate copy.
* tensors on the CPU: one ``memmove`` each, now (eager) or in a short-lived thread (lazy).

:meth:`Capture.wait` returns once every copy is done. Until then the tensors must not change:
the contract of lazy capture. With ``debug``, each tensor's checksum is taken when the capture
starts (on the device, queued before its copy) and compared with the captured bytes' when it
ends; a difference raises :class:`~strata.errors.StateChangedError`.
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import StateChangedError

#: Integer view of an element size, for the debug checksums (sums of the elements as integers
#: and of the bytes, in int64: equal on both sides exactly when no byte moved, but for chance).
_INT_VIEW = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def pinned_buffer(n: int) -> np.ndarray:
    """A page-locked host buffer of ``n`` bytes: a NumPy view of a torch tensor allocated with
    ``pin_memory=True`` (the view keeps it alive). Copies between it and a GPU run
    asynchronously, by DMA, without staging. Where pinning is refused (no page-locked memory
    left for a state this large) the buffer is ordinary memory: the copies are then synchronous,
    the bytes the same."""
    import torch

    try:
        return torch.empty(n, dtype=torch.uint8, pin_memory=True).numpy()
    except RuntimeError:
        return np.empty(n, np.uint8)


class HostBuffers:
    """Host buffers recycled by size: a snapshot's segments are taken with :meth:`get` and
    returned with :meth:`put` once written, so that after the first saves a capture writes
    into memory already mapped (and, for GPU tensors, already page-locked: ``pinned``
    buffers are torch tensors allocated with ``pin_memory=True``, handed out as NumPy views).
    At most ``keep`` buffers of each size are kept (what the pending saves can use)."""

    def __init__(self, keep: int):
        self.keep = keep
        self._free: dict[tuple[int, bool], list] = {}
        self._pinned: set[int] = set()  # addresses of the pinned buffers handed out
        self._lock = threading.Lock()

    def get(self, n: int, pinned: bool = False) -> np.ndarray:
        """A uint8 buffer of ``n`` bytes, recycled if one is free."""
        with self._lock:
            free = self._free.get((n, pinned))
            if free:
                return free.pop()
        if not pinned:
            return np.empty(n, np.uint8)
        a = pinned_buffer(n)
        with self._lock:
            self._pinned.add(a.ctypes.data)
        return a

    def put(self, arrays) -> None:
        """Return buffers of :meth:`get` (others are left to the garbage collector)."""
        with self._lock:
            for a in arrays:
                pinned = a.ctypes.data in self._pinned
                free = self._free.setdefault((a.size, pinned), [])
                if len(free) < self.keep:
                    free.append(a)
                elif pinned:
                    self._pinned.discard(a.ctypes.data)


def _source_sums(d):
    """Checksum of a TorchBytes' tensor where it is (queued on the current stream on a GPU)."""
    import torch

    t = d.tensor.reshape(-1)
    elems = t.view(getattr(torch, _INT_VIEW[t.element_size()])) if t.element_size() in _INT_VIEW else None
    raw = t.view(torch.uint8)
    return (raw.sum(dtype=torch.int64), None if elems is None else elems.sum(dtype=torch.int64))


def _host_sums(out: np.ndarray, itemsize: int):
    elems = out.view(_INT_VIEW[itemsize]).sum(dtype=np.int64) if itemsize in _INT_VIEW else None
    return int(out.sum(dtype=np.int64)), None if elems is None else int(elems)


class Capture:
    """The copies of one snapshot, perhaps still running: :meth:`wait` for them, :meth:`done`
    to ask. Made by :func:`start`."""

    def __init__(self, pairs, events, thread, sums):
        self._pairs, self._events, self._thread, self._sums = pairs, events, thread, sums
        self._lock = threading.Lock()
        self._changed = ""  # why the check failed (every wait raises it)

    def done(self) -> bool:
        """Whether every copy has finished (no wait)."""
        return all(e.query() for e in self._events) and (self._thread is None or not self._thread.is_alive())

    def wait(self) -> None:
        """Wait until every copy has finished; with ``debug``, then compare the captured bytes
        with the checksums taken at the start (once, whoever waits first; every wait raises
        what it found). The sources are no longer referenced after it.

        Raises:
            StateChangedError: a tensor changed while it was being captured (``debug`` only).
        """
        for e in self._events:
            e.synchronize()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._sums is not None:
                for (out, d), sums in zip(self._pairs, self._sums):
                    want = tuple(None if s is None else int(s) for s in sums)
                    if _host_sums(out, d.tensor.element_size()) != want:
                        self._changed = (f"a tensor of {d.size} bytes ({d.tensor.dtype}, {tuple(d.tensor.shape)}) "
                                         f"changed while the checkpoint was capturing it: wait for the capture "
                                         f"(wait_for_capture() or guard(optimizer)) before changing the state")
                        break
            self._pairs, self._sums = (), None  # (no reference to the sources once they are copied)
        if self._changed:
            raise StateChangedError(self._changed)


def _copy_cpu(pairs) -> None:
    for out, d in pairs:
        d.copy_to(out)


def start(pairs, *, lazy: bool, debug: bool = False, streams: dict | None = None) -> Capture:
    """Start copying ``pairs`` (``(uint8 host view, TorchBytes)``, :func:`strata.checkpoint.io.group`).

    Args:
        lazy: return while the copies run (GPU: issued on the capture streams; CPU: in a thread);
            else return once they are done.
        debug: take each tensor's checksum now, compared with the captured bytes by
            :meth:`Capture.wait`.
        streams: the dedicated CUDA stream of each device, by device (created on first use and
            kept there for the next captures).

    GPU destinations should be pinned (:class:`HostBuffers`); into pageable memory the copies
    are synchronous (correct, not overlapped).
    """
    pairs = [(out, d) for out, d in pairs if d.size]
    device_pairs = [p for p in pairs if p[1].on_device]
    cpu_pairs = [p for p in pairs if not p[1].on_device]
    sums = [_source_sums(d) for _, d in pairs] if debug else None
    events = []
    if device_pairs:
        import torch

        streams = {} if streams is None else streams
        by_device: dict = {}
        for out, d in device_pairs:
            by_device.setdefault(d.tensor.device, []).append((out, d))
        for device, todo in by_device.items():
            stream = streams.get(device)
            if stream is None:
                stream = streams[device] = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))  # (the values are what is queued so far)
            with torch.cuda.stream(stream):
                for out, d in todo:
                    torch.from_numpy(out).copy_(d.tensor.reshape(-1).view(torch.uint8), non_blocking=True)
                    d.tensor.record_stream(stream)
                event = torch.cuda.Event()
                event.record(stream)
            events.append(event)
    thread = None
    if cpu_pairs and lazy:
        thread = threading.Thread(target=_copy_cpu, args=(cpu_pairs,), daemon=True, name="strata-capture")
        thread.start()
    elif cpu_pairs:
        _copy_cpu(cpu_pairs)
    capture = Capture(pairs, events, thread, sums)
    if not lazy:
        capture.wait()
    return capture


__all__ = ["Capture", "HostBuffers", "pinned_buffer", "start"]
