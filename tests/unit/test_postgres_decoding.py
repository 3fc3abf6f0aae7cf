"""The output plugins behind one interface: each option value has exactly one decoder."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_ckpt.errors import InvalidOptionError
from spark_ckpt.sources.postgres.decoding.by_name import output_plugin
from spark_ckpt.sources.postgres.decoding.plugin import OutputPlugin
from spark_ckpt.sources.postgres.decoding.wal2json import add_tables
from spark_ckpt.sources.postgres.plugins import PLUGIN, PLUGINS


@pytest.mark.parametrize("name", PLUGINS)
def test_every_plugin_the_option_accepts_has_its_decoder(name: str) -> None:
    plugin: OutputPlugin = output_plugin(name)
    assert plugin.name == name
    assert plugin.peek_function == (
        "pg_logical_slot_peek_binary_changes" if plugin.binary else "pg_logical_slot_peek_changes"
    )
    assert output_plugin(PLUGIN).name == PLUGIN


def test_an_unknown_plugin_is_a_typed_error_listing_the_accepted_ones() -> None:
    with pytest.raises(InvalidOptionError, match="wal2json, pgoutput"):
        output_plugin("decoderbufs")


def test_peek_options_name_the_tables_or_the_publication() -> None:
    wal2json = output_plugin("wal2json").peek_options(["public.a", "odd schema.t,1"], None)
    assert wal2json[-2:] == ["add-tables", r"public.a,odd\ schema.t\,1"]
    assert add_tables(["s.a*b"]) == r"s.a\*b"
    pgoutput = output_plugin("pgoutput").peek_options(["public.a"], 'my "pub"')
    assert pgoutput[-2:] == ["publication_names", '"my ""pub"""']


def test_wal2json_renders_with_the_native_decoder_and_needs_no_relations() -> None:
    row = (
        '{"action":"I","schema":"public","table":"t","columns":[{"name":"id","type":"integer",'
        '"value":1},{"name":"n","type":"numeric(30,10)","value":1.10000000000000000001}],'
        '"pk":[{"name":"id","type":"integer"}]}'
    )
    columns = output_plugin("wal2json").render(pa.array([row], pa.string()), None, ())
    assert columns.table.to_pylist() == ["public.t"]
    assert columns.key.to_pylist() == ['{"id":1}']
    assert columns.after.to_pylist() == ['{"id":1,"n":"1.10000000000000000001"}']
