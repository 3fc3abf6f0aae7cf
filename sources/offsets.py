"""The envelope every ``txn-cdc`` offset shares, whatever its connector.

An offset is JSON in Spark's offset log. Every connector's offset starts with the same three
keys, in this order, which the framework and the control plane read without knowing the
connector::

    {"v": 1, "checkpoint": 7, "emitted": 120, ...the connector's own keys...}

``checkpoint`` is the source's checkpoint the offset ends (-1 for the initial offset) and
``emitted`` how many units (transactions, the snapshot) lie before it; ``txn_order`` numbers
them, and the history derives a checkpoint's transaction range from it. Spark compares offsets
as JSON text, so keys are always written in one order.

Pure Python; runs on the driver and on executors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from spark_ckpt.errors import LogRewrittenError, StateFormatError

__all__ = ["OFFSET_VERSION", "OffsetHeader", "offset_json", "read_offset"]

OFFSET_VERSION = 1
"""Version of the envelope and of both connectors' bodies."""

T = TypeVar("T")


@dataclass(frozen=True)
class OffsetHeader:
    """The keys every offset starts with.

    Attributes
    ----------
    checkpoint
        The source checkpoint the offset ends (-1 for the initial offset).
    emitted
        Units (transactions, the snapshot) before the offset, in stream order.
    """

    checkpoint: int
    emitted: int


def offset_json(header: OffsetHeader, body: Mapping[str, Any]) -> dict[str, Any]:
    """The offset as JSON: the envelope, then ``body``'s keys in their order."""
    return {
        "v": OFFSET_VERSION,
        "checkpoint": header.checkpoint,
        "emitted": header.emitted,
        **body,
    }


def read_offset(
    value: Mapping[str, Any], connector: str, body: Callable[[OffsetHeader, Mapping[str, Any]], T]
) -> T:
    """Check the envelope and let ``body`` parse the connector's keys.

    ``body`` may raise ``ValueError``, ``KeyError``, ``TypeError``, ``IndexError`` or
    ``AttributeError`` for a value it cannot read; they all become the one error below.

    Raises
    ------
    LogRewrittenError
        When ``value`` is not an offset of ``connector`` (another source's checkpoint, or a
        version this code does not know).
    """
    try:
        if value.get("v") != OFFSET_VERSION:
            raise StateFormatError(f"unsupported offset version {value.get('v')!r}")
        header = OffsetHeader(int(value["checkpoint"]), int(value["emitted"]))
        return body(header, value)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise LogRewrittenError(
            f"the checkpoint holds an offset the {connector} connector cannot read ({value!r}: "
            f"{e}); was this checkpoint location written by another source? Use a new "
            f"checkpointLocation"
        ) from e
