"""Type stubs of the connector's native module (``sources/debezium/native``, Rust with PyO3)."""

from typing import Any

_Position = tuple[str, int, int]
_Delivered = tuple[str | None, tuple[str | None, bool] | None]
_Unit = tuple[
    int, str, int, _Position, _Position, list[tuple[str, _Position]], _Delivered, int | None
]
_Stream = tuple[str, _Position, int, int, int | None]

class Assembler:
    def __init__(
        self,
        first_order: int = 0,
        *,
        keep_events: bool = True,
        delivered: _Delivered = (None, None),
        accept_resnapshot: bool = False,
    ) -> None: ...
    def emit_rows(
        self,
        start_emitted: int,
        start_partial: int,
        end_emitted: int,
        end_partial: int,
        source: str,
        column_types: bool,
        key_columns: dict[str, list[str]] | None = None,
        streams: list[_Stream] | None = None,
    ) -> None: ...
    def feed(
        self,
        data: bytes,
        file: str,
        byte: int,
        line: int,
        tail_is_line: bool = False,
        only: set[str] | None = None,
        budget: int | None = None,
    ) -> tuple[int, int, bool]: ...
    def unit_sizes(self) -> list[int]: ...
    @property
    def unit_changes(self) -> int: ...
    def unit(self, index: int) -> _Unit: ...
    def truncate_units(self, keep: int) -> None: ...
    def drop_units(self, count: int) -> None: ...
    def regroup(self, file: str, byte: int, line: int) -> None: ...
    def take_rows(self) -> Any: ...
    @property
    def next_order(self) -> int: ...
    @property
    def held_events(self) -> int: ...
    def holdup(self) -> str | None: ...
    @property
    def held_transactions(self) -> int: ...
    def oldest_open(self) -> tuple[str, _Position] | None: ...
    @property
    def delivered(self) -> _Delivered: ...
    def skipped(self) -> list[tuple[str, int]]: ...
