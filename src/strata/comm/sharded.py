"""ZeRO-style sharded data-parallel optimizer wrapper: weights replicated, fp32 master weights and optimizer
state sharded, quantized weight all-gather and gradient reduce-scatter.

This is the setting SDP4Bit was designed for (Jia et al., arXiv:2410.15526, background and methods: Megatron-LM's
distributed optimizer, ZeRO stage 1/2): every rank holds the full model for forward and backward, and owns
one contiguous shard of a flat, padded parameter vector for which it keeps the fp32 master weights and the
optimizer state. One :meth:`ShardedOptimizer.step`:

1. flattens the model gradients (fp32, zero-padded) and divides them by the world size (the only averaging);
2. reduce-scatters them (plain, TLq, TLq-HS or qgZ, see :mod:`strata.comm.collectives`) to this rank's shard;
3. optionally clips by the global gradient norm (one scalar all-reduce, not counted as wire bytes);
4. runs the wrapped optimizer on the master shard;
5. all-gathers the new weights (plain, qWD or direct) into every replica.

Steps 1-2 are also :meth:`ShardedOptimizer.reduce_gradients`, which fp16 training with ``torch.amp.GradScaler``
calls before ``scaler.step``: the scaler then unscales and checks the fp32 gradient shards, and a step whose
gradients overflowed on any rank is skipped on every rank. :meth:`ShardedOptimizer.save_checkpoint` /
:meth:`ShardedOptimizer.load_checkpoint` write and read every rank's shard of the training state through
:func:`strata.checkpoint.save`, so that a run resumed from step ``k`` continues bit-identically.

See ``docs/comm.md`` for why this engine rather than FSDP2 hooks (:mod:`strata.comm.fsdp` has those too), the
checkpoint format and the resume and overflow guarantees.
"""
from __future__ import annotations

import inspect
import json
import uuid
import warnings
import weakref
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from ..errors import FormatError, InvalidInputError, UnsupportedDtypeError
from .collectives import (
    CommStats,
    Topology,
    WeightAllGather,
    all_gather_single,
    build_topology,
    reduce_scatter,
    torch_dtype,
)
from .config import CommConfig

#: ``"format"`` of :meth:`ShardedOptimizer.state_dict` and of checkpoint manifests.
STATE_FORMAT = "strata.comm.ShardedOptimizer/1"
#: The file of a checkpoint folder that marks it complete.
MANIFEST = "manifest.json"


def shard_file(rank: int, world_size: int) -> str:
    """Name of rank ``rank``'s file in a checkpoint folder written by :meth:`ShardedOptimizer.save_checkpoint`."""
    return f"rank{rank:05d}-of-{world_size:05d}.strata"


def _copy(x):
    """A copy of a nested state (dicts, lists, tuples) whose tensors are detached clones."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, dict):
        return {k: _copy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_copy(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_copy(v) for v in x)
    return x


class ShardedOptimizer:
    """Wrap a freshly built torch optimizer of ``model`` into sharded data parallelism over all ranks.

    Every rank builds the same model and the same optimizer (e.g. ``torch.optim.AdamW(model.parameters())``
    or one with several parameter groups), wraps them, and then trains as usual::

        sdp = ShardedOptimizer(model, torch.optim.AdamW(model.parameters(), lr=1e-3),
                               CommConfig.arm("sdp4bit", ranks_per_node=8))
        for x, y in batches:                 # each rank its own slice of the global batch
            loss = loss_fn(model(x), y)
            sdp.zero_grad()
            loss.backward()
            sdp.step()

    The wrapper re-points every parameter of ``model`` into one flat replica buffer (``replica``), rebuilds the
    optimizer's class with the same hyperparameters over fp32 fragments of this rank's shard (``optimizer``;
    attach LR schedulers to it), and broadcasts rank 0's weights so that all replicas start identical.

    fp16 with loss scaling (fp16 parameters, or fp32 ones under ``torch.autocast``)::

        scaler = torch.amp.GradScaler("cuda")
        for x, y in batches:
            sdp.zero_grad()
            scaler.scale(loss_fn(model(x), y)).backward()
            sdp.reduce_gradients()   # the scaler sees the reduced fp32 shard, NaN/Inf included
            scaler.step(sdp)         # unscale; skipped on every rank if any rank's gradients overflowed
            scaler.update()

    Resume: ``sdp.save_checkpoint(folder, extra={...})`` on every rank, and in the new processes, after
    building the same model, optimizer and wrapper, ``extra = sdp.load_checkpoint(folder)``.

    Args:
        model: any ``nn.Module``; its trainable parameters must all have one dtype (fp32, bf16 or fp16).
        optimizer: an optimizer over exactly the trainable parameters of ``model``, with no state yet, whose
            update is elementwise (SGD, Adam, AdamW, ...).
        config: the :class:`CommConfig` (default: the baseline arm).
        topology: from :func:`build_topology` (default: built here from ``config.ranks_per_node``).
        stats: where to count wire bytes (default: a new :class:`CommStats`, at ``self.stats``).
        seed: seed of this rank's stochastic-rounding generator (the rank is mixed in).
        max_grad_norm: clip the global gradient norm to this value (``None``: no clipping).

    Raises:
        InvalidInputError: torch.distributed not initialized, the optimizer has state or its parameters are not
            the model's trainable parameters, or a bad topology.
        UnsupportedDtypeError: the parameters are not all fp32, all bf16 or all fp16.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, config: CommConfig | None = None, *,
                 topology: Topology | None = None, stats: CommStats | None = None, seed: int = 0,
                 max_grad_norm: float | None = None) -> None:
        self.config = config = config or CommConfig()
        self.topology = topo = topology or build_topology(config.ranks_per_node)
        self.stats = stats if stats is not None else CommStats()
        self.max_grad_norm = max_grad_norm
        self.model = model

        params: list[nn.Parameter] = []
        seen: set[int] = set()
        for p in model.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        if not params:
            raise InvalidInputError("the model has no trainable parameters")
        opt_params = [p for g in optimizer.param_groups for p in g["params"]]
        if {id(p) for p in opt_params} != seen or len(opt_params) != len(params):
            raise InvalidInputError("the optimizer must hold exactly the model's trainable parameters, once each")
        if any(len(s) for s in optimizer.state.values()):
            raise InvalidInputError("wrap the optimizer before its first step (it already has state)")
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1 or next(iter(dtypes)) not in (torch.float32, torch.bfloat16, torch.float16):
            raise UnsupportedDtypeError(f"parameters must share one float dtype (fp32/bf16/fp16), got {dtypes}")
        dtype, device = params[0].dtype, params[0].device

        w = topo.world_size
        align = config.alignment
        n = sum(p.numel() for p in params)
        s = -(-n // (w * align)) * align
        self.numel, self.padded_numel, self.shard_numel = n, w * s, s
        self._params = params
        self._offsets: list[int] = []

        # 1. one flat replica buffer; parameters become views of it; rank 0's values everywhere
        replica = torch.zeros(w * s, dtype=dtype, device=device)
        off = 0
        with torch.no_grad():
            for p in params:
                self._offsets.append(off)
                replica[off:off + p.numel()].copy_(p.reshape(-1))
                p.data = replica[off:off + p.numel()].view_as(p)
                off += p.numel()
        dist.broadcast(replica, src=0)
        self._round_replica(replica)
        self.replica = replica

        # 2. fp32 master shard and its fragments (one per parameter overlapping the shard)
        lo, hi = topo.rank * s, (topo.rank + 1) * s
        self.master = replica[lo:hi].to(torch.float32).clone()
        self._grad = torch.zeros(s, dtype=torch.float32, device=device)
        frag_of: dict[int, nn.Parameter] = {}
        self._frag_ranges: list[tuple[nn.Parameter, int, int]] = []
        for p, o in zip(params, self._offsets):
            a, b = max(o, lo), min(o + p.numel(), hi)
            if a < b:
                frag = nn.Parameter(self.master[a - lo:b - lo], requires_grad=True)
                frag_of[id(p)] = frag
                self._frag_ranges.append((frag, a - lo, b - lo))
        groups = []
        for g in optimizer.param_groups:
            hyper = {k: v for k, v in g.items() if k != "params"}
            groups.append({**hyper, "params": [frag_of[id(p)] for p in g["params"] if id(p) in frag_of]})
        if not self._frag_ranges:
            # this rank's shard is all padding: one fragment over it (zero weights, zero gradients, so an
            # elementwise optimizer leaves it zero) gives a GradScaler a gradient to check on this rank too
            frag = nn.Parameter(self.master[:], requires_grad=True)
            self._frag_ranges.append((frag, 0, s))
            groups[-1]["params"].append(frag)
        accepted = inspect.signature(type(optimizer).__init__).parameters
        self.optimizer = type(optimizer)(groups, **{k: v for k, v in optimizer.defaults.items() if k in accepted})
        self.optimizer.defaults.update(optimizer.defaults)

        gen_seed = (seed * 1_000_003 + topo.rank) % (2**63)
        self.generator = torch.Generator(device=device).manual_seed(gen_seed)
        self._weights = WeightAllGather(config, topo, self.stats, self.generator)
        #: whether the last :meth:`reduce_gradients` found NaN or Inf in the reduced gradients of any rank
        self.grads_nonfinite = False
        self._reduced: list | None = None  # the model gradients the shard gradients were reduced from

    # ------------------------------------------------------------------------------------------------------------

    @property
    def param_groups(self):
        """The wrapped optimizer's parameter groups (learning rates etc. can be changed here)."""
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the model's gradients (the replicas' ``.grad``) and the reduced gradients of the shard."""
        self.model.zero_grad(set_to_none=set_to_none)
        self._reduced = None
        for frag, _, _ in self._frag_ranges:
            frag.grad = None

    def _round_replica(self, replica: torch.Tensor) -> None:
        pdt = torch_dtype(self.config.param_dtype)
        if replica.dtype != pdt:
            replica.copy_(replica.to(pdt))

    def _flat_grads(self) -> torch.Tensor:
        flat = torch.zeros(self.padded_numel, dtype=torch.float32, device=self.replica.device)
        for p, o in zip(self._params, self._offsets):
            if p.grad is not None:
                flat[o:o + p.numel()].copy_(p.grad.reshape(-1))
        return flat

    def _grad_identity(self) -> list:
        """Which gradient tensors the model holds, and their in-place version counters."""
        return [None if p.grad is None else (weakref.ref(p.grad), p.grad._version) for p in self._params]

    def _grads_reduced(self) -> bool:
        """Whether the shard gradients were reduced from the model gradients as they are now."""
        if self._reduced is None:
            return False
        for p, r in zip(self._params, self._reduced):
            if (r is None) != (p.grad is None) or r is not None and (r[0]() is not p.grad or r[1] != p.grad._version):
                return False
        return True

    @torch.no_grad()
    def reduce_gradients(self) -> bool:
        """Average and reduce-scatter the model gradients into this rank's fp32 shard (collective).

        Afterwards the optimizer's parameters (``self.param_groups``: fp32 fragments of the master shard) hold
        the reduced gradients in ``.grad``, which is what ``torch.amp.GradScaler`` unscales and checks: call this
        after the backward pass and before ``scaler.unscale_(sdp)`` / ``scaler.step(sdp)``. :meth:`step` calls it
        itself when the gradients were not reduced since the last backward.

        NaN and Inf are carried through every collective (a quantization group holding one arrives as NaN). If
        any rank's reduced shard is not finite (one scalar all-reduce, not counted as wire bytes), every rank's
        first gradient fragment is set to NaN as well, so that every rank's scaler skips the step together.

        Returns:
            ``True`` if some rank's reduced gradients hold NaN or Inf (also in :attr:`grads_nonfinite`).
        """
        topo = self.topology
        flat = self._flat_grads().div_(topo.world_size)
        self._grad.copy_(reduce_scatter(flat, topo, self.config, self.stats, self.generator))
        flag = (~torch.isfinite(self._grad)).any().to(torch.float32).reshape(1)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self.grads_nonfinite = bool(flag.item())
        if self.grads_nonfinite:
            self._grad[self._frag_ranges[0][1]] = float("nan")
        for frag, a, b in self._frag_ranges:
            frag.grad = self._grad[a:b]
        self._reduced = self._grad_identity()
        return self.grads_nonfinite

    @torch.no_grad()
    def step(self) -> float | None:
        """Reduce-scatter the gradients (unless :meth:`reduce_gradients` already did), update this rank's shard,
        all-gather the weights into every replica.

        Every rank must call it after its backward pass (collective). If the reduced gradients hold NaN or Inf on
        any rank, the step is skipped on every rank (weights, master shard and optimizer state unchanged) with a
        ``RuntimeWarning``; with a ``GradScaler`` the scaler skips such steps before calling this.

        Returns:
            The global gradient norm when ``max_grad_norm`` is set (computed on the reduced, unscaled gradients,
            before clipping), else ``None``; ``None`` for a skipped step.
        """
        if not self._grads_reduced():
            self.reduce_gradients()
        self._reduced = None
        try:
            if self.grads_nonfinite:
                warnings.warn("ShardedOptimizer: non-finite gradients on some rank, step skipped on every rank "
                              "(use torch.amp.GradScaler with fp16)", RuntimeWarning, stacklevel=2)
                return None
            norm = None
            if self.max_grad_norm is not None:
                sq = self._grad.square().sum()
                dist.all_reduce(sq)
                norm = float(sq.sqrt())
                coef = self.max_grad_norm / (norm + 1e-6)
                if coef < 1.0:
                    self._grad.mul_(coef)
            self.optimizer.step()
            self._weights(self.master, self.replica)
            return norm
        finally:
            for frag, _, _ in self._frag_ranges:
                frag.grad = None  # a scaler must not find stale gradients (it would then skip the reduction)

    # ------------------------------------------------------------------------------------------------------------
    # state and checkpoints
    # ------------------------------------------------------------------------------------------------------------

    def _layout(self) -> list[list[int]]:
        return [list(p.shape) for p in self._params]

    def state_dict(self) -> dict:
        """This rank's shard of the training state, as a new nested dict of tensor copies and plain values.

        Keys: ``format`` (:data:`STATE_FORMAT`), ``rank``, ``world_size``, ``numel``, ``shard_numel``,
        ``layout`` (the trainable parameters' shapes, in order), ``param_dtype`` (the replica's dtype),
        ``config`` (:meth:`CommConfig.to_dict`, for information), ``master`` (fp32 ``(S,)``), ``replica``
        (this rank's slice of the replica, ``(S,)`` in the parameter dtype: with quantized weights it differs
        from the master), ``generator`` (uint8 state of the stochastic-rounding generator) and ``optimizer``
        (the wrapped optimizer's ``state_dict()`` over this rank's fragments: step counts, moments,
        hyperparameters of every group). Every rank saves its own; :meth:`load_state_dict` restores it.
        """
        return self._state(copy=True)

    def _state(self, copy: bool) -> dict:
        """:meth:`state_dict`, its tensors copies (``copy``) or views of the live state (for a synchronous save,
        which copies them to the host anyway: no second device copy)."""
        topo, s = self.topology, self.shard_numel
        replica = self.replica[topo.rank * s:(topo.rank + 1) * s]
        optimizer = self.optimizer.state_dict()
        return {
            "format": STATE_FORMAT,
            "rank": topo.rank,
            "world_size": topo.world_size,
            "numel": self.numel,
            "shard_numel": s,
            "layout": self._layout(),
            "param_dtype": str(self.replica.dtype).removeprefix("torch."),
            "config": self.config.to_dict(),
            "master": self.master.detach().clone() if copy else self.master.detach(),
            "replica": replica.clone() if copy else replica,
            "generator": self.generator.get_state().clone(),
            "optimizer": _copy(optimizer) if copy else optimizer,
        }

    def _check_state(self, state) -> InvalidInputError | None:
        """Why ``state`` cannot be loaded on this rank (``None`` if it can)."""
        topo = self.topology
        try:
            if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
                got = state.get("format") if isinstance(state, dict) else type(state).__name__
                return InvalidInputError(f"not a ShardedOptimizer state of format {STATE_FORMAT!r} (got {got!r})")
            if state["world_size"] != topo.world_size:
                return InvalidInputError(
                    f"the state was saved by {state['world_size']} ranks and this run has {topo.world_size}: "
                    f"ShardedOptimizer does not reshard; resume with {state['world_size']} ranks")
            if state["rank"] != topo.rank:
                return InvalidInputError(f"rank {topo.rank} was given the state of rank {state['rank']}")
            if [list(map(int, x)) for x in state["layout"]] != self._layout() or state["numel"] != self.numel:
                return InvalidInputError("the state was saved for other trainable parameters (shapes or order "
                                         "differ): build the same model before loading")
            if state["shard_numel"] != self.shard_numel:
                return InvalidInputError(
                    f"the state has shards of {state['shard_numel']} values and this run {self.shard_numel}: the "
                    "sharding differs (CommConfig.alignment: group sizes, weight_mode, hadamard)")
            pdt = str(self.replica.dtype).removeprefix("torch.")
            if state["param_dtype"] != pdt:
                return InvalidInputError(f"the state was saved with {state['param_dtype']} parameters, these are {pdt}")
            s = self.shard_numel
            for key, dtype in (("master", torch.float32), ("replica", self.replica.dtype)):
                t = state[key]
                if not isinstance(t, torch.Tensor) or t.dtype != dtype or tuple(t.shape) != (s,):
                    return InvalidInputError(f"state[{key!r}] must be a {dtype} tensor of shape ({s},)")
            g, ref = state["generator"], self.generator.get_state()
            if not isinstance(g, torch.Tensor) or g.dtype != torch.uint8 or g.numel() != ref.numel():
                return InvalidInputError(f"state['generator'] must be a uint8 tensor of {ref.numel()} bytes "
                                         f"(a {self.generator.device} generator's state)")
            opt = state["optimizer"]
            groups = self.optimizer.param_groups
            if (len(opt["param_groups"]) != len(groups)
                    or any(len(a["params"]) != len(b["params"]) for a, b in zip(opt["param_groups"], groups))):
                return InvalidInputError("the optimizer state has other parameter groups than this optimizer")
            if not isinstance(opt["state"], dict):
                return InvalidInputError("state['optimizer']['state'] must be a dict")
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            return InvalidInputError(f"malformed ShardedOptimizer state: {type(e).__name__}: {e}")
        return None

    def _collectively(self, fn, what: str):
        """Collective: run ``fn()`` here and raise on every rank if it raised on any (:meth:`_agree`); its result."""
        error = result = None
        try:
            result = fn()
        except Exception as e:  # re-raised by _agree, after every rank knows
            error = e
        try:
            self._agree(error, what)
        finally:
            error = None  # no frame <-> traceback cycle
        return result

    def _agree(self, error: BaseException | None, what: str) -> None:
        """Collective: raise on every rank if any rank has an ``error`` (its own there, a pointer elsewhere)."""
        topo = self.topology
        flags = torch.zeros(topo.world_size, dtype=torch.float32, device=self.replica.device)
        if error is not None:
            flags[topo.rank] = 1.0
        dist.all_reduce(flags)
        if error is not None:
            try:
                raise error
            finally:
                error = None  # no frame <-> traceback cycle (it would keep this object alive until a gc run)
        failed = flags.nonzero().flatten().tolist()
        if failed:
            raise InvalidInputError(f"rank(s) {failed} could not {what} (see the error raised there)")

    @torch.no_grad()
    def _apply(self, state: dict) -> None:
        own = state["replica"].to(device=self.replica.device).contiguous()
        all_gather_single(self.replica, own)  # restores the replica bit for bit (not counted in stats)
        self.master.copy_(state["master"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"].to("cpu").contiguous())
        self._reduced = None
        self.grads_nonfinite = False
        for frag, _, _ in self._frag_ranges:
            frag.grad = None

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned on this rank, in a run with the same ranks, model, optimizer
        and sharding (collective: the replica is re-assembled from every rank's slice).

        The state is checked on every rank before anything changes; if any rank's check fails, every rank raises
        (the failing one its reason, the others an :class:`InvalidInputError` naming it). The wrapped optimizer's
        hyperparameters (learning rates...) are restored too, as ``torch.optim.Optimizer.load_state_dict`` does.

        Raises:
            InvalidInputError: another world size (no resharding), rank, model layout, shard length (a
                configuration with another alignment), parameter dtype, optimizer groups, or a malformed state.
        """
        self._agree(self._check_state(state), "load its state")
        self._apply(state)

    def save_checkpoint(self, path, extra=None, *, workers: int | None = None) -> Path:
        """Save every rank's :meth:`state_dict` (and ``extra``) into the folder ``path`` (collective).

        Each rank writes ``rank{r:05d}-of-{W:05d}.strata`` with :func:`strata.checkpoint.save` (lossless,
        atomic, checksummed); once all have, rank 0 writes ``manifest.json`` (atomically), which marks the
        checkpoint complete. All files carry one random checkpoint id, so that a folder mixing the files of two
        saves is refused on load. The folder must be visible to every rank (a shared file system).

        Args:
            path: the checkpoint folder (created if missing); use a new folder per checkpoint.
            extra: this rank's other state, restored by :meth:`load_checkpoint`: nested dicts/lists/tuples of
                tensors, NumPy arrays and plain values, e.g. ``{"step": k, "scaler": scaler.state_dict(),
                "scheduler": sched.state_dict(), "rng": torch.get_rng_state()}``.
            workers: coding threads per rank (default: all cores).

        Returns:
            ``Path(path)``.

        Raises:
            Whatever :func:`strata.checkpoint.save` raises for a value it cannot store or a failed write, on
            the rank where it happened; :class:`InvalidInputError` on the other ranks.
        """
        from ..atomic import atomic_write
        from ..checkpoint import save

        topo = self.topology
        path = Path(path)
        uid = torch.zeros(16, dtype=torch.uint8, device=self.replica.device)
        if topo.rank == 0:
            uid.copy_(torch.frombuffer(bytearray(uuid.uuid4().bytes), dtype=torch.uint8))
        dist.broadcast(uid, src=0)
        checkpoint_id = bytes(uid.cpu().tolist()).hex()

        def write_shard():
            path.mkdir(parents=True, exist_ok=True)
            state = self._state(copy=False)
            state["checkpoint_id"] = checkpoint_id
            state["extra"] = extra
            save(state, path / shard_file(topo.rank, topo.world_size), workers=workers)

        def write_manifest():
            if topo.rank == 0:
                manifest = {"format": STATE_FORMAT, "id": checkpoint_id, "world_size": topo.world_size,
                            "numel": self.numel, "shard_numel": self.shard_numel,
                            "files": [shard_file(r, topo.world_size) for r in range(topo.world_size)]}
                atomic_write(path / MANIFEST, json.dumps(manifest, indent=1) + "\n")

        self._collectively(write_shard, "write its checkpoint file")
        self._collectively(write_manifest, "write the checkpoint manifest")
        return path

    def load_checkpoint(self, path, *, workers: int | None = None):
        """Load a checkpoint folder written by :meth:`save_checkpoint` (collective); returns this rank's ``extra``.

        Build the model, optimizer and wrapper exactly as in the saved run (same world size, model, optimizer
        groups and :class:`CommConfig`, any ``seed``), then call this on every rank; then restore what ``extra``
        holds (scheduler, scaler, data position). Training then continues bit-identically to the saved run on
        the same hardware and software (see ``docs/comm.md`` for the conditions).

        Raises:
            FormatError: no ``manifest.json`` (the save did not finish, or not a checkpoint folder), a file of
                another save, or a damaged file (strata.checkpoint's ``CorruptStreamError`` and friends).
            InvalidInputError: the checkpoint was saved by another number of ranks (no resharding), or for another
                model or sharding (see :meth:`load_state_dict`); raised on every rank.
        """
        from ..checkpoint import load

        topo = self.topology
        path = Path(path)

        def read():
            try:
                manifest = json.loads((path / MANIFEST).read_text())
            except FileNotFoundError:
                raise FormatError(f"{path}: no {MANIFEST}: not a ShardedOptimizer checkpoint, or its save did not "
                                  "finish") from None
            except ValueError as e:
                raise FormatError(f"{path / MANIFEST}: not valid JSON ({e})") from None
            if not isinstance(manifest, dict) or manifest.get("format") != STATE_FORMAT:
                raise FormatError(f"{path / MANIFEST} is not a ShardedOptimizer checkpoint manifest")
            if manifest.get("world_size") != topo.world_size:
                raise InvalidInputError(
                    f"{path} was saved by {manifest.get('world_size')} ranks and this run has {topo.world_size}: "
                    f"ShardedOptimizer does not reshard; resume with {manifest.get('world_size')} ranks")
            name = shard_file(topo.rank, topo.world_size)
            if not (path / name).exists():
                raise FormatError(f"{path}: {name} is missing")
            state = load(path / name, workers=workers)
            if not isinstance(state, dict) or state.get("checkpoint_id") != manifest.get("id"):
                raise FormatError(f"{path / name} belongs to another save than {MANIFEST} (a save into this "
                                  "folder was interrupted?)")
            error = self._check_state(state)
            if error is not None:
                raise error
            return state

        state = self._collectively(read, "load its checkpoint file")
        self._apply(state)
        return state.get("extra")
