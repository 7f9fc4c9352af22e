"""Choice of predictor settings (placeholder: defaults)."""
from __future__ import annotations


def choose(a, eb):
    from .codec import Settings
    return Settings()
