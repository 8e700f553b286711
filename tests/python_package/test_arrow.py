# SPDX-License-Identifier: Apache-2.0
"""Read groups as Apache Arrow arrays through the Arrow PyCapsule interface
(``__arrow_c_array__``, ``__arrow_c_device_array__``, ``__arrow_c_schema__``;
kstage_group_export_arrow underneath): pyarrow, polars and nanoarrow take them, values equal,
without a copy (buffer addresses match the group's own memory), lifetimes right (the group
released first, then the Arrow object used), and every export valid by two independent
validators: nanoarrow's full validation of each leaf's buffers and Arrow C++'s
(pyarrow's validate(full=True)) of the whole array."""
import gc

import pytest

np = pytest.importorskip("numpy", minversion="2.1")
pa = pytest.importorskip("pyarrow")
na = pytest.importorskip("nanoarrow")
pl = pytest.importorskip("polars")
from nanoarrow.device import c_device_array  # noqa: E402

import kstage  # noqa: E402


def leaves_valid(c):
    """nanoarrow's full validation of every node without children (primitives, strings,
    dictionary indices): the node rebuilt from its own buffers with validation_level="full"
    (nanoarrow's Python layer validates nested arrays only through their leaves)."""
    if c.n_children == 0:
        view = c.view()
        buffers = [None if addr == 0 else view.buffer(i) for i, addr in enumerate(c.buffers)]
        schema = c.schema
        if c.dictionary is not None:  # the indices on their own (the dictionary below), in range
            assert c.schema.format == "i"
            schema = na.int32()
            assert all(0 <= i < c.dictionary.length for i in np.frombuffer(buffers[1], np.int32)[: c.length])
        na.c_array_from_buffers(schema, c.length, buffers, validation_level="full")
    for child in c.children:
        leaves_valid(child)
    if c.dictionary is not None:
        leaves_valid(c.dictionary)


def validated(obj):
    """pyarrow.array(obj), checked by nanoarrow and by Arrow C++."""
    leaves_valid(na.c_array(obj))
    a = pa.array(obj)
    a.validate(full=True)
    return a


@pytest.fixture
def ragged(stage, paths4, q4):
    """neighbours (int32 arrays: rows of 2, 0, 3, 1) and label (STRING), sealed at 1."""
    rows = [np.array([1, 2], np.int32), np.array([], np.int32), np.array([3, 4, 5], np.int32),
            np.array([6], np.int32)]
    words = ["alpha", "", "γamma", "x"]
    stage.write("neighbours", q4, rows, 1).wait()
    stage.write("label", q4, [np.frombuffer(w.encode(), np.uint8) for w in words], 1,
                semantic="string").wait()
    stage.seal(1)
    return rows, words


def test_fixed_size_column_is_a_fixed_size_list_without_a_copy(stage, q4, pos):
    (g,) = stage.read(q4, "pos")
    address = np.from_dlpack(g).ctypes.data
    a = validated(g)
    assert a.type == pa.list_(pa.field("item", pa.float32(), nullable=False), 3)
    assert np.array_equal(np.asarray(a.values).reshape(4, 3), pos)
    assert a.values.buffers()[1].address == address  # the group's own memory
    # Lifetimes: the group released first, then the Arrow array used.
    g.release()
    del g
    gc.collect()
    assert np.array_equal(np.asarray(a.values).reshape(4, 3), pos)
    # pyarrow.table / record batches of groups, polars from Arrow.
    t = pa.table({"pos": a})
    assert t.num_rows == 4
    s = pl.from_arrow(a)
    assert s.to_list() == pos.tolist()


def test_primitives_and_token_ids(stage, q4):
    ids = np.array([5, 6, 7, 8], np.uint64)
    stage.write("id", q4, ids, 1).wait()
    stage.write("w", q4, np.array([0.5, 1.5, 2.5, 3.5]), 1).wait()
    stage.write("flag", q4, np.array([True, False, True, True]), 1).wait()
    stage.seal(1)
    (g,) = stage.read(q4, "id")
    a = validated(g)
    assert a.type == pa.uint64()
    assert a.buffers()[1].address == np.from_dlpack(g).ctypes.data
    assert a.to_pylist() == ids.tolist()
    (g,) = stage.read(q4, "w")
    assert validated(g).to_pylist() == [0.5, 1.5, 2.5, 3.5]
    (g,) = stage.read(q4, "flag")
    b = validated(g)  # kstage's 8-bit bool is Arrow's bit-packed boolean (a copy)
    assert b.type == pa.bool_()
    assert b.to_pylist() == [True, False, True, True]
    assert pl.from_arrow(b).to_list() == [True, False, True, True]


def test_ragged_and_string_columns(stage, q4, ragged):
    rows, words = ragged
    (g,) = stage.read(q4, "neighbours", compact=True)
    a = validated(g)
    assert a.type == pa.large_list(pa.field("item", pa.int32(), nullable=False))
    assert a.to_pylist() == [r.tolist() for r in rows]
    (g,) = stage.read(q4, "label")
    s = validated(g)
    assert s.type == pa.large_string()
    g.release()
    assert s.to_pylist() == words
    assert pl.from_arrow(s).to_list() == words


def test_path_columns(stage, paths4, q4, pos):
    (g,) = stage.read(q4, "pos")
    ids = validated(g.arrow(paths="ids"))
    assert ids.type.names == ["path", "pos"]
    assert ids.field("path").to_pylist() == g.prims.tolist()
    named = validated(g.arrow(paths="strings"))
    assert pa.types.is_dictionary(named.type.field("path").type)
    assert named.field("path").to_pylist() == paths4
    assert np.array_equal(np.asarray(named.field("pos").values).reshape(4, 3), pos)
    df = pl.from_arrow(pa.RecordBatch.from_struct_array(named))
    assert df["path"].to_list() == paths4
    with pytest.raises(ValueError, match="ids"):
        g.arrow(paths="names")


def test_path_columns_of_a_group_with_no_list_of_ids(stage):
    # prims_as_progression=True: the group's prims are NULL in the C struct; the path column is
    # made from its progression.
    first = stage.intern_range("/r", "p", 0, 6)
    stage.write("m", stage.query_range(first), np.arange(6, dtype=np.float32), 1)
    stage.seal(1)
    (g,) = stage.read(stage.query_range(first, 1, 3, 2), "m", compact=True, prims_as_progression=True)
    assert g.prim_progression == (first + 1, 2)
    ids = validated(g.arrow(paths="ids"))
    assert ids.field("path").to_pylist() == [first + 1, first + 3, first + 5]
    assert ids.field("m").to_pylist() == [1.0, 3.0, 5.0]
    named = validated(g.arrow(paths="strings"))
    assert named.field("path").to_pylist() == ["/r/p1", "/r/p3", "/r/p5"]


def test_capsules_are_released_once_and_the_protocol_is_checked(stage, q4, pos):
    (g,) = stage.read(q4, "pos")
    schema, array = g.__arrow_c_array__()
    assert type(schema).__name__ == "PyCapsule"
    del schema, array  # never consumed: the capsules release the export themselves
    gc.collect()
    schema = g.__arrow_c_schema__()
    assert na.c_schema(g).format == "+w:3"
    del schema
    with pytest.raises(TypeError, match="requested_schema"):
        g.__arrow_c_array__(pa.schema([]).__arrow_c_schema__())
    with pytest.raises(TypeError, match="does not take"):
        g.__arrow_c_device_array__(None, some_option=True)
    s, d = g.__arrow_c_device_array__(None, some_option=None)  # None-valued options are ignored

    class Capsules:
        def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
            return s, d

    assert c_device_array(Capsules()).device_type_id == 1  # ARROW_DEVICE_CPU
    g.release()
    with pytest.raises(kstage.InvalidHandle):
        g.__arrow_c_array__()


def test_device_groups_export_on_their_device(emulated):
    s = kstage.Stage()
    try:
        paths = [f"/dev/p{i}" for i in range(8)]
        data = np.arange(24, dtype=np.float32).reshape(8, 3)
        s.write("x", paths, data, 1, residency=(emulated, 0)).wait()
        s.seal(1)
        (g,) = s.read(paths, "x")
        assert g.device == (emulated, 0)
        with pytest.raises(kstage.InvalidArgument, match="__arrow_c_device_array__"):
            g.__arrow_c_array__()
        dev = c_device_array(g)
        assert dev.device_type_id == emulated  # ARROW_DEVICE_EXT_DEV: DLPack's kDLExtDev
        assert dev.device_id == 0
        assert dev.array.length == 8
        (h,) = s.read(paths, "x", device="cpu")  # the host read exports as a plain array
        assert np.array_equal(np.asarray(validated(h).values).reshape(8, 3), data)
    finally:
        s.close()


def test_stage_to_arrow_is_a_record_batch_with_nulls(stage, paths4, q4, ragged):
    rows, words = ragged
    pos = np.arange(12, dtype=np.float32).reshape(4, 3)
    stage.write("pos", q4, pos, 2).wait()
    stage.write("mass", paths4[1:3], np.array([2.0, 3.0]), 2).wait()
    stage.seal(2)
    batch = stage.to_arrow(q4, ["pos", "mass", "label", "neighbours"], paths="strings")
    rb = pa.record_batch(batch)
    rb.validate(full=True)
    leaves_valid(na.c_array(batch))
    assert rb.schema.names == ["path", "pos", "mass", "label", "neighbours"]
    assert rb.column("path").to_pylist() == paths4
    assert np.array_equal(np.asarray(rb.column("pos").values).reshape(4, 3), pos)
    assert rb.column("mass").to_pylist() == [None, 2.0, 3.0, None]
    assert rb.schema.field("mass").nullable and not rb.schema.field("pos").nullable
    assert rb.column("label").to_pylist() == words
    assert rb.column("neighbours").to_pylist() == [r.tolist() for r in rows]
    # A table, and polars, from the same batch; each take reads the stage as it is then.
    t = pa.table(stage.to_arrow(q4, ["pos", "mass"]))
    assert t.num_rows == 4
    df = pl.from_arrow(t)
    assert df["mass"].to_list() == [None, 2.0, 3.0, None]
    # The column one group holds for every prim, in order, is that group's memory.
    (g,) = stage.read(q4, "pos")
    assert pa.record_batch(stage.to_arrow(q4, "pos")).column("pos").values.buffers()[1].address == \
        np.from_dlpack(g).ctypes.data
    # A change range: the prims that did not change in it are null.
    changed = pa.record_batch(stage.to_arrow(q4, "mass", range=(2, 2)))
    assert changed.column("mass").to_pylist() == [None, 2.0, 3.0, None]
    with pytest.raises(kstage.InvalidArgument, match="unknown attribute|token|never"):
        pa.record_batch(stage.to_arrow(q4, 12345))


def test_duckdb_queries_kstage_columns():
    duckdb = pytest.importorskip("duckdb")
    s = kstage.Stage()
    try:
        paths = [f"/p{i}" for i in range(6)]
        s.write("mass", paths, np.arange(6, dtype=np.float64), 1).wait()
        s.seal(1)
        t = pa.table(s.to_arrow(paths, "mass", paths="strings"))
        got = duckdb.sql("SELECT count(*), sum(mass) FROM t WHERE mass > 2").fetchall()
        assert got == [(3, 12.0)]
    finally:
        s.close()
