"""torch.distributed.checkpoint (DCP) integration: strata as a stream transform.

DCP writes every item of a (sharded, multi-rank) checkpoint through a chain of
``StreamTransformExtension`` objects (torch >= 2.6, ``FileSystemWriter(_extensions=...)``;
marked experimental by PyTorch). :class:`StrataTransform` codes each item's bytes with
:mod:`strata.checkpoint.codec` -- the element layout guessed from samples, since DCP hands
over serialized tensors without their dtype -- and records the descriptor
``stream.strata/1`` in the checkpoint metadata, so a reader with the extension registered
decodes it transparently.

Usage (every rank)::

    import torch.distributed.checkpoint as dcp
    from strata.checkpoint.dcp import storage_reader, storage_writer

    dcp.save(state_dict, storage_writer=storage_writer("ckpt/step_100"))
    dcp.load(state_dict, storage_reader=storage_reader("ckpt/step_100"))

Limits: each item is buffered in memory while it is coded (DCP items are one rank's tensors
or shards); XOR deltas between checkpoints are not applied here (DCP has no notion of a base
checkpoint) -- use :class:`strata.checkpoint.AsyncCheckpointer` for incremental snapshots.
"""
from __future__ import annotations

import io
from typing import IO

from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint._extension import ExtensionRegistry, StreamTransformExtension

from . import codec


class StrataTransform(StreamTransformExtension):
    """DCP stream transform that stores each item as a strata segment record."""

    @staticmethod
    def registry_name() -> str:
        return "stream.strata"

    @staticmethod
    def from_descriptor(version: str) -> StrataTransform:
        if version.partition(".")[0] != "1":
            raise ValueError(f"unknown stream.strata version {version!r}")
        return StrataTransform()

    def get_descriptor(self) -> str:
        return f"{self.registry_name()}/1"

    def transform_to(self, output: IO[bytes]) -> IO[bytes]:
        return _Writer(output)

    def transform_from(self, input: IO[bytes]) -> IO[bytes]:
        return io.BytesIO(codec.decode(input.read()).tobytes())


class _Writer(io.RawIOBase):
    """Collects an item's bytes, codes them on close."""

    def __init__(self, output: IO[bytes]):
        super().__init__()
        self.output = output
        self.parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        data = bytes(b)
        self.parts.append(data)
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self.output.write(codec.encode(b"".join(self.parts), "AUTO"))
            self.parts = []
            self.output.close()
        super().close()


def registry() -> ExtensionRegistry:
    """An extension registry that knows :class:`StrataTransform`."""
    reg = ExtensionRegistry()
    reg.register(StrataTransform)
    return reg


def storage_writer(path, **kwargs) -> FileSystemWriter:
    """A DCP ``FileSystemWriter`` whose items are coded by strata."""
    return FileSystemWriter(path, _extensions=[StrataTransform()], **kwargs)


def storage_reader(path, **kwargs) -> FileSystemReader:
    """A DCP ``FileSystemReader`` that decodes strata-coded items."""
    return FileSystemReader(path, _extension_registry=registry(), **kwargs)
