"""strata.lossy: streaming error-bounded lossy compression with progressive and
random-access decompression (after STZ, SC'25)."""
from .codec import compress
from .reader import LevelInfo, LossyReader, open_stream
from .tune import Settings

__all__ = ["LevelInfo", "LossyReader", "Settings", "compress", "open_stream"]
