"""strata.lossy: streaming error-bounded lossy compression with progressive and random-access
decompression (after STZ, SC'25), and precision layers readable at any bound
(:mod:`strata.lossy.layers`)."""
from .codec import compress
from .layers import compress_layers
from .layers_reader import LayeredReader, LayerInfo, Retrieval, open_array
from .reader import LevelInfo, LossyReader, open_stream
from .tune import Settings

__all__ = ["LayerInfo", "LayeredReader", "LevelInfo", "LossyReader", "Retrieval", "Settings", "compress",
           "compress_layers", "open_array", "open_stream"]
