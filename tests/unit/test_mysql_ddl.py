"""What MySQL's and MariaDB's DDL statements (Debezium's ``ddl``) say: renames, new tables."""

from __future__ import annotations

import pytest

from spark_ckpt.sources.debezium_format.mysql_ddl import (
    altered_table,
    creates_table,
    renamed_columns,
)


@pytest.mark.parametrize(
    ("ddl", "renames"),
    [
        ("ALTER TABLE products RENAME COLUMN name TO title", [("name", "title")]),
        ("alter table `shop`.`p` rename column `a b` to `c``d`", [("a b", "c`d")]),
        ("ALTER TABLE p CHANGE sku code varchar(40) NOT NULL", [("sku", "code")]),
        ("ALTER TABLE p CHANGE COLUMN IF EXISTS a b int", [("a", "b")]),
        (
            "ALTER ONLINE TABLE IF EXISTS p CHANGE a b int, RENAME COLUMN c TO d, ADD e int",
            [("a", "b"), ("c", "d")],
        ),
        ("ALTER TABLE p MODIFY qty bigint", []),
        ("ALTER TABLE p CHANGE qty qty bigint", []),  # a type change, no rename
        ("ALTER TABLE p ADD COLUMN x decimal(10,2) DEFAULT '1,2', DROP y", []),
        ("ALTER TABLE p /* CHANGE a b int, */ RENAME TO q", []),  # a table rename
        ("RENAME TABLE a TO b", []),
        ("CREATE TABLE t (a int, CHANGE int)", []),
    ],
)
def test_renames_are_read_from_rename_column_and_change_clauses(
    ddl: str, renames: list[tuple[str, str]]
) -> None:
    assert renamed_columns(ddl) == renames


@pytest.mark.parametrize(
    ("ddl", "creates"),
    [
        ("CREATE TABLE extra (id int PRIMARY KEY)", True),
        ("create or replace temporary table `x` (a int)", True),
        ("/* by the app */ CREATE TABLE IF NOT EXISTS x (a int)", True),
        ("CREATE INDEX i ON x (a)", False),
        ("ALTER TABLE x ADD b int", False),
        ("CREATE DATABASE d", False),
    ],
)
def test_a_new_table_is_told_by_its_create_table_statement(ddl: str, creates: bool) -> None:
    assert creates_table(ddl) is creates


@pytest.mark.parametrize(
    ("ddl", "altered"),
    [
        ("ALTER TABLE products ADD note text", (None, "products", False)),
        ("alter online table if exists `shop`.`my t` drop x", ("shop", "my t", False)),
        ("ALTER TABLE p RENAME COLUMN a TO b, RENAME INDEX i TO j", (None, "p", False)),
        ("ALTER TABLE shop.p RENAME TO q", ("shop", "p", True)),
        ("ALTER TABLE p ADD c int, RENAME AS q", (None, "p", True)),
        ("ALTER TABLE p RENAME q", (None, "p", True)),
        ("RENAME TABLE a TO b", None),
        ("DROP TABLE p", None),
    ],
)
def test_an_alter_table_names_its_table_and_says_whether_it_renames_it(
    ddl: str, altered: tuple[str | None, str, bool] | None
) -> None:
    assert altered_table(ddl) == altered
