"""PostgreSQL log sequence numbers (LSNs): ``"X/Y"`` text <-> 64-bit integers. Pure Python."""

from __future__ import annotations

import re

from spark_ckpt.errors import ChangeDecodeError, UsageError

__all__ = ["format_lsn", "parse_lsn"]

_LSN = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$")


def parse_lsn(text: str) -> int:
    """``"16/B374D848"`` -> the 64-bit position.

    Raises
    ------
    ChangeDecodeError
        When ``text`` is not an LSN.
    """
    match = _LSN.match(text.strip())
    if match is None:
        raise ChangeDecodeError(
            f"not a PostgreSQL LSN: {text!r} (expected two hex numbers, as 0/16B3748)"
        )
    return (int(match.group(1), 16) << 32) | int(match.group(2), 16)


def format_lsn(value: int) -> str:
    """The 64-bit position -> ``"16/B374D848"`` (PostgreSQL's own spelling)."""
    if not 0 <= value < 1 << 64:
        raise UsageError(f"an LSN is a 64-bit unsigned position, got {value}")
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
