"""Saving checkpoints in the background, as incremental snapshots (after DataStates-LLM and
LMC: a consistent host copy first, then compression and I/O off the training loop's path).

:meth:`AsyncCheckpointer.save` returns once every tensor has been copied to host memory, so the
training loop may change its parameters right away; a background thread then codes the copy
(as the XOR against the previous snapshot, except every ``full_every``-th save, which bounds
the chain a restore follows, and any save whose chain would exceed ``io.MAX_CHAIN`` deltas)
and writes it atomically, in the order of the saves. Up to ``max_pending`` snapshots wait in
memory. An error in the background is raised by the next ``save`` or by :meth:`wait`.

The host buffers are recycled: once a snapshot is written and no longer the base of the
next delta, its buffers take the next save's copy. After the first saves (which allocate),
``save()`` costs one memory copy of the state into memory that is already mapped -- like the
pinned, preallocated host buffers of DataStates-LLM -- instead of first-touch page faults.
"""
from __future__ import annotations

import queue
import threading
from pathlib import Path

import numpy as np

from ..container import atomic_write
from . import io
from .state import flatten


class AsyncCheckpointer:
    """Background, incremental checkpoint writer.

    Args:
        full_every: every ``full_every``-th save is a full snapshot; the others are deltas
            against the previous save (1: always full).
        max_pending: saves that may wait in memory for the writer; a ``save`` beyond that
            blocks until the oldest is written (bounded host memory).
        workers: coding threads (default: all cores).

    Example::

        ckpt = AsyncCheckpointer(full_every=10)
        for step in range(steps):
            train_step()
            if step % 100 == 0:
                ckpt.save({"model": model.state_dict(), "optim": opt.state_dict()},
                          f"ckpt/step_{step:06d}.strata")
        ckpt.wait()
    """

    def __init__(self, full_every: int = 10, max_pending: int = 2, workers: int | None = None):
        if full_every < 1 or max_pending < 1:
            raise ValueError("full_every and max_pending must be at least 1")
        self.full_every = full_every
        self.workers = workers
        self._queue: queue.Queue = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._count = 0
        self._prev: tuple[Path, io.Snapshot] | None = None
        self._free: dict[int, list] = {}  # recycled segment buffers, by size
        self._free_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="strata-checkpoint")
        self._thread.start()

    def save(self, state_dict, path) -> None:
        """Copy ``state_dict`` to host memory, then compress and write it to ``path`` in the
        background. Blocks only for the host copy (unless ``max_pending`` saves are waiting).

        Raises:
            Any error of an earlier background save.
        """
        self._raise()
        snap = io.group(*flatten(state_dict, lazy=True), alloc=self._buffer)  # the one host copy
        full = self._count % self.full_every == 0
        self._count += 1
        self._queue.put((snap, Path(path), full))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                snap, path, full = item
                prev = self._prev
                base = prev if (not full and prev and prev[0].parent == path.parent
                                and prev[1].depth < io.MAX_CHAIN) else None
                data = io.encode(snap, base[1] if base else None, base[0].name if base else None, self.workers)
                atomic_write(path, data)
                old, self._prev = self._prev, (path, snap)
                if old is not None:
                    self._recycle(old[1])
            except BaseException as exc:  # surfaces in save() or wait()
                self._error = exc
                self._prev = None
            finally:
                self._queue.task_done()

    def _buffer(self, n: int) -> np.ndarray:
        """A host buffer of ``n`` bytes: a recycled one if there is one, else a new one."""
        with self._free_lock:
            free = self._free.get(n)
            if free:
                return free.pop()
        return np.empty(n, np.uint8)

    def _recycle(self, snap: io.Snapshot) -> None:
        """Return the buffers of a snapshot that is written and no longer a base."""
        with self._free_lock:
            for seg in snap.segments:
                free = self._free.setdefault(seg.size, [])
                if len(free) < self._queue.maxsize + 1:  # bounded: what the pending saves can use
                    free.append(seg)

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def wait(self) -> None:
        """Wait until every save so far is written; raise the error of a failed one."""
        self._queue.join()
        self._raise()

    def close(self) -> None:
        """Finish the pending saves and stop the writer thread."""
        self.wait()
        self._queue.put(None)
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
