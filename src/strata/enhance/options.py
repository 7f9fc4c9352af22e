"""Training settings of :mod:`strata.enhance`."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import InvalidInputError

#: Plain streams smaller than this get the narrow network (``EnhanceOptions.width`` None).
SMALL_STREAM = 32 << 10
#: Default training length (``EnhanceOptions.steps`` None): a step per this many bytes of the
#: field, within these limits.
BYTES_PER_STEP, MIN_STEPS, MAX_STEPS = 5000, 400, 6000


@dataclass(frozen=True)
class EnhanceOptions:
    """Training settings of :mod:`strata.enhance`.

    Attributes:
        steps: optimizer steps (Adam); None: one per ``BYTES_PER_STEP`` bytes of the field,
            between ``MIN_STEPS`` and ``MAX_STEPS`` (a step on one 64 x 64 patch takes 1-2 ms
            on one core: about 0.3 s of training per MB, 6-12 s at most).
        batch_points: points per step (whole patches of ``patch x patch`` points of a slice,
            at least one).
        patch: edge of the training patches (points).
        width: hidden channels of the network; None: 8 (1,537 parameters for one field), or 4
            (481) when the plain stream is under ``SMALL_STREAM`` bytes, where the larger
            network's weights would cost more than it gains.
        learning_rate: Adam's step size.
        slice_share: share of the slices (axis 0 of the internal 3D view) patches are drawn
            from, in (0, 1].
        seed: seeds the patch sampling and the initial weights (the stream is reproducible).
        progress: show a tqdm bar over the training steps (None: only on a terminal).
    """

    steps: int | None = None
    batch_points: int = 4096
    patch: int = 64
    width: int | None = None
    learning_rate: float = 1e-2
    slice_share: float = 1.0
    seed: int = 0
    progress: bool | None = None

    def steps_for(self, nbytes: int) -> int:
        """Training steps for a field of ``nbytes`` bytes."""
        if self.steps is not None:
            return self.steps
        return min(MAX_STEPS, max(MIN_STEPS, nbytes // BYTES_PER_STEP))

    def __post_init__(self):
        try:
            ok = self._valid()
        except TypeError:
            ok = False
        if not ok:
            raise InvalidInputError(f"invalid enhancement options {self}")

    def _valid(self) -> bool:
        return ((self.steps is None or isinstance(self.steps, int) and self.steps >= 1)
              and isinstance(self.batch_points, int)
              and self.batch_points >= 1 and isinstance(self.patch, int) and self.patch >= 1
              and (self.width is None or isinstance(self.width, int) and 1 <= self.width <= 64)
              and 0 < self.slice_share <= 1
              and math.isfinite(self.learning_rate) and self.learning_rate > 0)
