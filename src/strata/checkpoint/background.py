"""Saving checkpoints in the background, as incremental snapshots (after DataStates-LLM and
LMC: a consistent host copy first, then compression and I/O off the training loop's path).

:meth:`AsyncCheckpointer.save` returns once every tensor has been copied to host memory, so the
training loop may change its parameters right away; a background thread then codes the copy
(as the XOR against the previous snapshot, except every ``full_every``-th save, which bounds
the chain a restore follows, and any save whose chain would exceed ``io.MAX_CHAIN`` deltas)
and writes it atomically, in the order of the saves. Up to ``max_pending`` snapshots wait in
memory. An error in the background is raised by the next ``save`` or by :meth:`wait`. A
program that ends without :meth:`wait` or :meth:`close` still writes every pending save before
it exits (an ``atexit`` handler waits for them; an error there is printed): the writer is a
daemon thread, which the interpreter would otherwise stop with the saves still queued.

Names may be reused: saving again to a rolling name (``latest.strata``) or to names taken in
turn is safe. A save to a file this checkpointer has written before is a full snapshot (a
delta there would be lost, or made unreadable, when the name is written again), and before a
file is replaced, the files this checkpointer wrote whose chain of bases passes through it are
rewritten as full snapshots (same id and tensors; the previous save from memory, an older one
decoded from its file), the farthest from it first, each atomically -- so every checkpoint it
wrote that is still there loads. A file changed by someone else since this checkpointer wrote
it is no longer its business: it is never a base again, nor rewritten.

The host buffers are recycled: once a snapshot is written and no longer the base of the
next delta, its buffers take the next save's copy. After the first saves (which allocate),
``save()`` costs one memory copy of the state into memory that is already mapped instead of
first-touch page faults. Tensors on a GPU are copied into pinned (page-locked) host buffers on
a CUDA stream of the checkpointer's own (:mod:`strata.checkpoint.capture`), with no pageable
copy in between.

**Lazy capture** (DataStates-LLM, ``lazy=True``): ``save()`` returns as soon as the copies are
issued (GPU) or started (CPU, in a thread); the forward and backward passes that follow do not
change the parameters or the optimizer state and run while the copies do. The contract: the
state saved must not change until the capture is done -- call :meth:`wait_for_capture` before
the next optimizer step, or let the hook of :meth:`guard` do it (it waits only if the capture
is still running). ``debug=True`` checks the contract: each tensor's checksum is taken when the
capture starts and compared with the captured bytes when it ends; a difference raises
:class:`~strata.errors.StateChangedError` (from :meth:`wait_for_capture`, else from the next
``save`` or :meth:`wait`).
"""
from __future__ import annotations

import atexit
import os
import queue
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from ..atomic import atomic_path
from ..errors import InvalidInputError, StateChangedError
from . import capture, io
from .state import flatten, on_device


class _Removed(Exception):
    """A file was removed before the flusher copied it."""


@dataclass
class _Written:
    """A file this checkpointer wrote: the entry of its base (``None``: a full snapshot) and
    its ``(device, inode, size, mtime)`` right after it was written."""

    base: str | None
    stat: tuple


def _stat(path: str) -> tuple | None:
    """``(device, inode, size, mtime in ns)`` of the file at ``path``, ``None`` if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class AsyncCheckpointer:
    """Background, incremental checkpoint writer.

    Args:
        full_every: every ``full_every``-th save is a full snapshot; the others are deltas
            against the previous save (1: always full).
        max_pending: saves held in memory until written (the one being written included); a
            ``save`` beyond that blocks, before it copies anything, until the oldest is written.
            Host memory holds at most ``max_pending`` snapshots, and one more while a delta is
            coded against the previous save or its buffers wait for the next save (the coded
            chunks are written as they are coded).
        workers: coding threads (default: all cores).
        lazy: ``save()`` returns before the copies to host memory are done (see the module's
            contract: :meth:`wait_for_capture` or :meth:`guard` before the state changes).
        debug: check that the state did not change during a capture (costs a checksum of
            every tensor, on its device, per save).
        flush_to: a second, slower destination (an existing folder: a parallel file system):
            every file written is then copied there, atomically, by a thread of its own, in
            the order written (a delta after its base). A file is loadable where it was saved
            as soon as it is written there (``wait(flushed=False)``); a file removed before its
            copy is skipped.

    Raises:
        InvalidInputError: ``flush_to`` is not a folder.

    Example::

        ckpt = AsyncCheckpointer(full_every=10)
        for step in range(steps):
            train_step()
            if step % 100 == 0:
                ckpt.save({"model": model.state_dict(), "optim": opt.state_dict()},
                          f"ckpt/step_{step:06d}.strata")
        ckpt.wait()

    Lazy, on a GPU: ``ckpt = AsyncCheckpointer(lazy=True); ckpt.guard(optimizer)`` once, then
    ``ckpt.save(...)`` where the loop saves: the next ``optimizer.step()`` waits for the copies
    if they are still running.
    """

    def __init__(self, full_every: int = 10, max_pending: int = 2, workers: int | None = None, *,
                 lazy: bool = False, debug: bool = False, flush_to=None):
        if full_every < 1 or max_pending < 1:
            raise ValueError("full_every and max_pending must be at least 1")
        if flush_to is not None and not Path(flush_to).is_dir():
            raise InvalidInputError(f"flush_to={str(flush_to)!r} is not a folder")
        self.flush_to = None if flush_to is None else Path(flush_to)
        self.full_every = full_every
        self.workers = workers
        self.lazy, self.debug = lazy, debug
        self._buffers = capture.HostBuffers(keep=max_pending + 1)  # (the pending saves and a delta's base)
        self._streams: dict = {}  # the capture stream of each CUDA device
        self._captures: list[capture.Capture] = []  # the saves' captures not yet waited for
        self._queue: queue.Queue = queue.Queue()
        self._slots = threading.BoundedSemaphore(max_pending)  # saves held in memory, not yet written
        self._error: BaseException | None = None
        self._count = 0
        self._prev: tuple[str, io.Snapshot] | None = None  # entry (io.entry) and snapshot of the last save
        self._files: dict[str, _Written] = {}  # by entry: the files written, still as written
        self._deltas: dict[str, set[str]] = {}  # entry -> entries of the deltas written on it
        self._thread = threading.Thread(target=self._run, daemon=True, name="strata-checkpoint")
        self._thread.start()
        self._flushes: queue.Queue = queue.Queue()  # files written, to copy to flush_to
        self._flusher = None
        if self.flush_to is not None:
            self._flusher = threading.Thread(target=self._flush_run, daemon=True, name="strata-checkpoint-flush")
            self._flusher.start()
        atexit.register(self.wait)  # (the daemon writer would be stopped with saves still queued)

    def save(self, state_dict, path) -> None:
        """Copy ``state_dict`` to host memory, then compress and write it to ``path`` in the
        background. Blocks only for the host copy (``lazy``: until the copies are issued), or
        while ``max_pending`` saves are waiting.

        Raises:
            Any error of an earlier background save (:class:`~strata.errors.StateChangedError`
            from ``debug``).
        """
        self._raise()
        self._slots.acquire()  # (before the copy: at most max_pending snapshots wait in memory)
        try:
            started = []
            snap = self._group(state_dict, lambda pairs: started.append(
                capture.start(pairs, lazy=self.lazy, debug=self.debug, streams=self._streams)))
        except BaseException:
            self._slots.release()
            raise
        self._captures = [c for c in self._captures if not c.done()] + started
        self._queue.put((snap, Path(path), self._count, started[0]))  # (save number i is full when i % full_every == 0)
        self._count += 1

    def reserve(self, state_dict, count: int | None = None) -> None:
        """Allocate now, and touch, the host buffers that ``count`` saves of states shaped like
        ``state_dict`` need (default: all the checkpointer keeps, ``max_pending + 1``): pinned
        for tensors on a GPU. The saves then copy into memory already mapped (and page-locked)
        from the first one on, as DataStates-LLM preallocates its host buffers; without it the
        first saves pay for the allocation (page faults; pinning, which takes long for GBs).
        Nothing is copied from ``state_dict``."""
        held = []
        for _ in range(self._buffers.keep if count is None else count):
            snap = self._group(state_dict, lambda pairs: None)
            for seg in snap.segments:
                seg.fill(0)  # (maps the pages now)
            held += snap.segments
        self._buffers.put(held)

    def _group(self, state_dict, copy) -> io.Snapshot:
        """``state_dict``'s snapshot in host buffers of the pool (pinned if a tensor is on a
        GPU), its tensors' bytes handed to ``copy`` (:func:`strata.checkpoint.io.group`)."""
        skeleton, tensors = flatten(state_dict, lazy=True)
        pinned = on_device(tensors)
        return io.group(skeleton, tensors, alloc=lambda n: self._buffers.get(n, pinned), copy=copy)

    @property
    def capturing(self) -> bool:
        """Whether copies of a save to host memory are still running (lazy mode)."""
        return any(not c.done() for c in self._captures)

    def wait_for_capture(self) -> None:
        """Wait until the copies of every save so far to host memory are done (at once if they
        are): from then on the state may change.

        Raises:
            StateChangedError: ``debug`` found a tensor changed during a capture.
        """
        captures, self._captures = self._captures, []
        changed = []
        for c in captures:
            try:
                c.wait()
            except StateChangedError as exc:
                changed.append(exc)
        if changed:
            raise changed[0]

    def guard(self, optimizer):
        """Make ``optimizer.step()`` wait for a capture still running (lazy mode's one line):
        registers :meth:`wait_for_capture` as a step pre-hook of ``optimizer`` (a
        ``torch.optim.Optimizer``, or a :class:`strata.comm.ShardedOptimizer`, whose wrapped
        optimizer's step is the first to change the state); returns the hook's handle
        (``handle.remove()`` undoes it).

        Raises:
            InvalidInputError: ``optimizer`` takes no step pre-hook.
        """
        opt = getattr(optimizer, "optimizer", optimizer)
        if not callable(getattr(opt, "register_step_pre_hook", None)):
            raise InvalidInputError(f"{type(optimizer).__name__} is not a torch optimizer (no register_step_pre_hook)")
        return opt.register_step_pre_hook(lambda *_: self.wait_for_capture())

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                snap, path, i, cap = item
                full = i % self.full_every == 0
                cap.wait()
                dest = io.entry(path)
                self._free_dependents(dest)
                base = None if full or dest in self._files else self._base(dest)
                if base is None and self._prev is not None:  # (no delta on it: its buffers are free now)
                    self._recycle(self._prev[1])
                    self._prev = None
                base_file = base and os.path.basename(base[0])
                self._write(path, snap, base and base[1], base_file)
                self._wrote(dest, base and base[0])
                old, self._prev = self._prev, (dest, snap)
                if old is not None:
                    self._recycle(old[1])
                if (i + 1) % self.full_every == 0:  # (the next save is full: no delta on this one)
                    self._recycle(snap)
                    self._prev = None
            except BaseException as exc:  # surfaces in save() or wait()
                self._error = exc
                self._prev = None
            finally:
                if item is not None:
                    self._slots.release()
                self._queue.task_done()

    def _intact(self, e: str) -> bool:
        """Whether the file at entry ``e``, and every file of its chain of bases, is still the
        one this checkpointer wrote there."""
        while e is not None:
            w = self._files.get(e)
            if w is None or _stat(e) != w.stat:
                return False
            e = w.base
        return True

    def _base(self, dest: str) -> tuple[str, io.Snapshot] | None:
        """The previous save, if a delta of the save to ``dest`` may be made on it: same
        folder, chain below ``io.MAX_CHAIN`` deltas and every file of it as written here."""
        if self._prev is None or os.path.dirname(self._prev[0]) != os.path.dirname(dest):
            return None
        if self._prev[1].depth >= io.MAX_CHAIN or not self._intact(self._prev[0]):
            return None
        return self._prev

    def _wrote(self, e: str, base: str | None) -> None:
        """Record the file just written at entry ``e`` (a delta on ``base``, or full)."""
        old = self._files.get(e)
        if old is not None and old.base is not None:
            self._deltas[old.base].discard(e)
        self._files[e] = _Written(base, _stat(e))
        if base is not None:
            self._deltas.setdefault(base, set()).add(e)

    def _free_dependents(self, dest: str) -> None:
        """Rewrite as full snapshots the files written here whose chain of bases passes
        through ``dest`` (about to be replaced), the farthest from it first, so each is
        decoded while the files below it are still there."""
        found, level = [], [dest]
        while level:
            level = [d for e in level for d in sorted(self._deltas.get(e, ())) if d != dest]
            found += level
        for e in reversed(found):
            if not self._intact(e):
                continue  # (changed by someone else: not this checkpointer's file any more)
            if self._prev is not None and self._prev[0] == e:
                snap = self._prev[1]  # the last save, still in memory
            else:
                snap = io.read(e, self.workers)
            self._write(e, snap)
            self._wrote(e, None)

    def _write(self, path, snap: io.Snapshot, base: io.Snapshot | None = None, base_file: str | None = None) -> None:
        """Write a file (atomically; a delta on ``base`` if given), then queue its copy to ``flush_to``."""
        io.write_snapshot(path, snap, base, base_file, self.workers)
        if self._flusher is not None:
            self._flushes.put(Path(path))

    def _flush_run(self) -> None:
        while True:
            path = self._flushes.get()
            try:
                if path is None:
                    return
                with atomic_path(self.flush_to / path.name) as tmp:
                    try:
                        shutil.copyfile(path, tmp)
                    except FileNotFoundError:
                        raise _Removed from None
            except _Removed:
                pass  # (removed before its copy: nothing to flush, and atomic_path left nothing)
            except BaseException as exc:  # surfaces in save() or wait()
                self._error = self._error or exc
            finally:
                self._flushes.task_done()

    def _recycle(self, snap: io.Snapshot) -> None:
        """Return the buffers of a snapshot that is written and no longer a base."""
        self._buffers.put(snap.segments)

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def wait(self, flushed: bool = True) -> None:
        """Wait until every save so far is written (``flushed``: and copied to ``flush_to``);
        raise the error of a failed one."""
        self._queue.join()
        if flushed:
            self._flushes.join()
        self._raise()

    def close(self) -> None:
        """Finish the pending saves and stop the writer threads."""
        self.wait()
        atexit.unregister(self.wait)
        self._queue.put(None)
        self._thread.join()
        if self._flusher is not None:
            self._flushes.put(None)
            self._flusher.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
