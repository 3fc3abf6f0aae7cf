"""Type stubs of the connector's native module (``sources/debezium/native``, Rust with PyO3)."""

from typing import Any

_Position = tuple[str, int, int]
_Txn = tuple[int, str, int, _Position, int | None]
_Group = tuple[int, int, list[_Txn], list[tuple[str, _Position]]]

class Assembler:
    def __init__(self, first_order: int = 0, *, keep_events: bool = True) -> None: ...
    def emit_rows(
        self,
        start_emitted: int,
        start_partial: int,
        end_emitted: int,
        end_partial: int,
        source: str,
        column_types: bool,
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
    ) -> tuple[int, int, bool, list[_Group]]: ...
    def take_rows(self) -> Any: ...
    @property
    def next_order(self) -> int: ...
    @property
    def held_events(self) -> int: ...
    def open_items(self) -> list[tuple[str, _Position]]: ...
    def holdup(self) -> str | None: ...
