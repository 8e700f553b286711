# SPDX-License-Identifier: Apache-2.0
"""Writes and reads: values, layouts, ordinals and seals, index maps, masks, counts, modes,
ragged (array) attributes, write_batch and delete."""
import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import values_in_prim_order  # noqa: E402


def read_values(stage, query, attr, **kw):
    """{attribute: values in the query's prim order} of a compact read (None: no group)."""
    groups = list(stage.read(query, attr, compact=True, **kw))
    assert len(groups) <= 1
    if not groups:
        return None
    g = groups[0]
    assert g.compact
    return np.from_dlpack(g.tensor(0)).copy()


# ------------------------------------------------------------------------------------------------
# Round trips
# ------------------------------------------------------------------------------------------------
def test_fixed_size_round_trip(stage, q4, paths4):
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    op = stage.write("pos", q4, a, 1)
    assert isinstance(op, kstage.Op)
    assert op.done and op.wait(0) and op.error == ""
    stage.seal(1)
    groups = list(stage.read(q4, ["pos"]))
    assert len(groups) == 1
    g = groups[0]
    assert g.attribute == "pos"
    assert g.attribute_token == stage.token("pos")
    assert stage.token_name(g.attribute_token) == "pos"
    assert g.paths == paths4
    assert g.prims.tolist() == q4.paths.tolist() == stage.intern(paths4).tolist()
    assert g.ordinal == 1
    assert not g.is_array and not g.is_tombstone and not g.compact
    assert g.dtype == np.float32 and g.lanes == 3
    assert g.semantic == "none"
    assert g.tensor_count == 1 and len(g) == 4
    assert g.device == (1, 0)
    np.testing.assert_array_equal(values_in_prim_order(g), a)


@pytest.mark.parametrize("dtype", ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "c8", "c16"])
def test_dtypes_round_trip(stage, q4, dtype):
    a = (np.arange(8) * 3 + 1).astype(dtype).reshape(4, 2)
    stage.write("x", q4, a, 1)
    stage.seal(1)
    (g,) = stage.read(q4, "x")
    assert g.dtype == np.dtype(dtype) and g.lanes == 2
    got = values_in_prim_order(g)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, a)


def test_bool_column(stage, q4):
    a = np.array([True, False, True, True])
    stage.write("flag", q4, a, 1)
    stage.seal(1)
    (g,) = stage.read(q4, "flag")
    assert g.dtype == np.bool_ and g.lanes == 1
    np.testing.assert_array_equal(values_in_prim_order(g), a)


def test_unsealed_writes_are_invisible(stage, q4):
    stage.write("v", q4, np.zeros(4, np.float64), 1)
    stage.seal(1)
    stage.write("v", q4, np.ones(4, np.float64), 2)
    np.testing.assert_array_equal(read_values(stage, q4, "v"), np.zeros(4))
    assert stage.write_floor("v") == 1
    stage.seal(2)
    assert stage.write_floor("v") == 2
    np.testing.assert_array_equal(read_values(stage, q4, "v"), np.ones(4))


def test_seal_applies_in_ordinal_order_then_submission_order(stage, q4):
    stage.write("v", q4, np.full(4, 3.0), 3)
    stage.write("v", q4, np.full(4, 2.0), 2)
    stage.write("v", q4, np.full(4, 30.0), 3)  # same ordinal, submitted later: wins
    stage.seal(3)
    np.testing.assert_array_equal(read_values(stage, q4, "v"), np.full(4, 30.0))


def test_seal_of_one_attribute_leaves_others(stage, q4):
    stage.write("a", q4, np.ones(4), 1)
    stage.write("b", q4, np.ones(4), 1)
    stage.seal(1, "a")
    assert stage.write_floor("a") == 1 and stage.write_floor("b") == 0
    assert stage.write_floor() == 0  # the global floor is the minimum
    assert read_values(stage, q4, "b") is None
    stage.seal(1, ["b"])
    assert stage.write_floor("b") == 1
    assert stage.write_floor() == 0  # attributes not created yet are still at 0
    stage.seal(1)
    assert stage.write_floor() == 1
    stage.seal(0)  # a floor never moves backwards: a no-op, not an error
    assert stage.write_floor("a") == 1


def test_query_order_is_the_read_order(stage, q4, paths4):
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    stage.write("pos", q4, a, 1)
    stage.seal(1)
    order = [3, 1, 0, 2]
    rq = stage.query([paths4[i] for i in order])
    (g,) = stage.read(rq, "pos")  # zero-copy: the column's rows, prim i at row index_map[i]
    assert g.paths == [paths4[i] for i in order]
    assert g.index_map is not None
    np.testing.assert_array_equal(np.from_dlpack(g.tensor(0))[g.index_map], a[order])
    (c,) = stage.read(rq, "pos", compact=True)  # compact: rows gathered in prim order
    assert c.index_map is None and c.compact
    np.testing.assert_array_equal(np.from_dlpack(c.tensor(0)), a[order])


def test_queries_as_paths_or_ids(stage, paths4):
    a = np.arange(4, dtype=np.int64)
    stage.write("v", paths4, a, 1)  # a list of str
    ids = stage.intern(paths4)
    stage.write("w", ids, a * 2, 1)  # a numpy array of ids
    stage.write("u", [int(i) for i in ids], a * 3, 1)  # a list of ids
    stage.seal(1)
    for attr, k in (("v", 1), ("w", 2), ("u", 3)):
        np.testing.assert_array_equal(read_values(stage, paths4, attr), a * k)


def test_strided_and_fortran_inputs_are_read_by_their_strides(stage, q4):
    big = np.arange(24, dtype=np.float32).reshape(8, 3)
    f = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(4, 3))
    stage.write("s", q4, big[::2], 1)
    stage.write("f", q4, f, 1)
    stage.seal(1)
    np.testing.assert_array_equal(read_values(stage, q4, "s"), big[::2])
    np.testing.assert_array_equal(read_values(stage, q4, "f"), f)


def test_semantic_round_trip_and_must_match(stage, q4):
    stage.write("p", q4, np.zeros((4, 3), np.float32), 1, semantic="point")
    stage.write("c", q4, np.zeros((4, 4), np.float32), 1, semantic="color")
    stage.seal(1)
    assert [g.semantic for g in stage.read(q4, ["p", "c"])] == ["point", "color"]
    with pytest.raises(kstage.InvalidArgument, match="semantic"):
        stage.write("p", q4, np.zeros((4, 3), np.float32), 2, semantic="vector")
    with pytest.raises(kstage.InvalidArgument, match="bogus"):
        stage.write("p", q4, np.zeros((4, 3), np.float32), 2, semantic="bogus")


# The semantics that fix a column's layout (kstage.h): name, code, and a fitting value of 4 prims.
LAYOUT_SEMANTICS = [
    ("asset_path_id", 11, np.arange(8, dtype=np.uint64).reshape(4, 2)),
    ("path_expression_id", 12, np.arange(4, dtype=np.uint64)),
    ("relationship_path_id", 13, np.arange(4, dtype=np.uint64)),
    ("time_code", 15, np.arange(4, dtype=np.float64)),
    ("frame", 16, np.zeros((4, 4, 4), np.float64)),
]


@pytest.mark.parametrize("name, code, value", LAYOUT_SEMANTICS, ids=[c[0] for c in LAYOUT_SEMANTICS])
def test_layout_semantics_round_trip_by_name_and_code(stage, q4, name, code, value):
    stage.write("by_name", q4, value, 1, semantic=name)
    stage.write("by_code", q4, value, 1, semantic=code)
    stage.seal(1)
    assert [g.semantic for g in stage.read(q4, ["by_name", "by_code"])] == [name, name]
    assert stage.attribute_info("by_code")["semantic"] == name
    np.testing.assert_array_equal(read_values(stage, q4, "by_name").reshape(value.shape), value)


def test_connection_path_id_is_an_array_of_pairs(stage, q4):
    rows = [np.array([[1, 2], [3, 4]], np.uint64), np.zeros((0, 2), np.uint64),
            np.array([[5, 6]], np.uint64), np.array([[7, 8]], np.uint64)]
    stage.write("conn", q4, rows, 1, semantic="connection_path_id")
    stage.seal(1)
    (g,) = stage.read(q4, ["conn"])
    assert g.semantic == "connection_path_id" and g.is_array
    with pytest.raises(kstage.InvalidArgument,
                       match="semantic CONNECTION_PATH_ID needs an array column of uint64x2"):
        stage.write("conn1", q4, np.zeros((4, 2), np.uint64), 2, semantic="connection_path_id")


@pytest.mark.parametrize("name, bad", [
    ("asset_path_id", np.zeros(4, np.uint64)),
    ("path_expression_id", np.zeros(4, np.int64)),
    ("relationship_path_id", np.zeros((4, 2), np.uint64)),
    ("time_code", np.zeros(4, np.float32)),
    ("frame", np.zeros((4, 3, 3), np.float64)),
])
def test_layout_semantics_refuse_other_layouts(stage, q4, name, bad):
    with pytest.raises(kstage.InvalidArgument, match=f"semantic {name.upper()} needs"):
        stage.write("x", q4, bad, 1, semantic=name)
    assert stage.attributes() == []


# ------------------------------------------------------------------------------------------------
# The fixed-size layout: trailing axes fold into lanes; exports are (rows, lanes) or (rows,)
# ------------------------------------------------------------------------------------------------
def test_float32x3_exports_rows_by_3(stage, q4):
    stage.write("pos", q4, np.zeros((4, 3), np.float32), 1)
    stage.seal(1)
    (g,) = stage.read(q4, "pos")
    assert g.lanes == 3
    x = np.from_dlpack(g.tensor(0))
    assert x.shape == (4, 3) and x.dtype == np.float32


def test_4x4_matrices_read_as_rows_of_16(stage, q4):
    m = np.arange(64, dtype=np.float64).reshape(4, 4, 4)
    stage.write("xf", q4, m, 1, semantic="matrix")
    stage.seal(1)
    for compact in (False, True):
        (g,) = stage.read(q4, "xf", compact=compact)
        assert g.lanes == 16 and g.semantic == "matrix"
        x = np.from_dlpack(g.tensor(0))
        assert x.shape == (4, 16)  # exactly one trailing axis
        np.testing.assert_array_equal(values_in_prim_order(g), m.reshape(4, 16))


def test_one_lane_exports_rows_only(stage, q4):
    stage.write("mass", q4, np.arange(4, dtype=np.float32), 1)
    stage.seal(1)
    for compact in (False, True):
        (g,) = stage.read(q4, "mass", compact=compact)
        assert g.lanes == 1
        assert np.from_dlpack(g.tensor(0)).shape == (4,)
        np.testing.assert_array_equal(values_in_prim_order(g), np.arange(4, dtype=np.float32))


def test_n_by_4_then_n_by_2_by_2_is_the_same_column(stage, q4):
    stage.write("q", q4, np.zeros((4, 4), np.float32), 1)
    stage.write("q", q4, np.ones((4, 2, 2), np.float32), 2)  # (N,2,2) folds to 4 lanes as well
    stage.seal(2)
    np.testing.assert_array_equal(read_values(stage, q4, "q"), np.ones((4, 4), np.float32))


def test_flat_one_lane_tensor_is_not_rows_of_width_3(stage, q4):
    with pytest.raises(kstage.InvalidArgument, match="12 source row"):
        stage.write("pos", q4, np.zeros(12, np.float32), 1)


# ------------------------------------------------------------------------------------------------
# count, index_map, mask
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "form",
    [
        {"count": 0},
        {"index_map": []},
        {"index_map": np.array([], np.uint32)},
        {"mask": np.array([], bool)},
        {"mask": np.array([], np.uint64), "count": 4},
    ],
    ids=["count=0", "index_map=[]", "index_map=empty-uint32", "mask=empty-bool", "mask=empty-words"],
)
def test_count_zero_is_refused_in_every_form(stage, q4, pos, form):
    with pytest.raises(ValueError) as info:
        stage.write("pos", q4, np.full((4, 3), -1, np.float32), 2, **form)
    assert isinstance(info.value, kstage.InvalidArgument)
    assert info.value.status == 1
    assert "count=0" in str(info.value) or "empty" in str(info.value)
    # the stage is unchanged: nothing pending at 2 either
    stage.seal(2)
    np.testing.assert_array_equal(read_values(stage, q4, "pos"), pos)
    # and ordinal 2 was never used: a write at 3 still works
    stage.write("pos", q4, np.zeros((4, 3), np.float32), 3)


def test_index_map_picks_source_rows(stage, q4, pos):
    data = np.array([[10, 11, 12], [20, 21, 22]], np.float32)  # 2 source rows for 4 prims
    stage.write("pos", q4, data, 2, index_map=[0, 1, 1, 0])
    stage.seal(2)
    np.testing.assert_array_equal(read_values(stage, q4, "pos"), data[[0, 1, 1, 0]])


@pytest.mark.parametrize("dtype", ["u4", "i8", "u2", "i4"])
def test_index_map_integer_dtypes(stage, q4, pos, dtype):
    data = np.array([[10, 11, 12], [20, 21, 22], [30, 31, 32]], np.float32)
    stage.write("pos", q4, data, 2, index_map=np.array([2, 0, 1, 2], dtype))
    stage.seal(2)
    np.testing.assert_array_equal(read_values(stage, q4, "pos"), data[[2, 0, 1, 2]])


def test_index_map_with_count_writes_the_leading_prims(stage, q4, pos):
    data = np.array([[10, 11, 12], [20, 21, 22]], np.float32)
    stage.write("pos", q4, data, 2, index_map=[1, 0, 1, 1], count=2)
    stage.seal(2)
    expected = pos.copy()
    expected[0], expected[1] = data[1], data[0]
    np.testing.assert_array_equal(read_values(stage, q4, "pos"), expected)


def test_index_map_out_of_range_and_negative(stage, q4, pos):
    with pytest.raises(kstage.InvalidArgument, match=r"index_map\[1\] = 9"):
        stage.write("pos", q4, np.zeros((4, 3), np.float32), 2, index_map=[0, 9, 0, 0])
    with pytest.raises(kstage.InvalidArgument, match=r"index_map\[0\] = -1"):
        stage.write("pos", q4, np.zeros((2, 3), np.float32), 2, index_map=[-1, 0])
    with pytest.raises(kstage.InvalidArgument, match="count=3 but index_map has 2"):
        stage.write("pos", q4, np.zeros((2, 3), np.float32), 2, index_map=[1, 0], count=3)
    with pytest.raises(kstage.InvalidArgument, match="exclusive"):
        stage.write("pos", q4, np.zeros((4, 3), np.float32), 2, index_map=[0, 1], mask=[True, True])
    stage.seal(2)
    np.testing.assert_array_equal(read_values(stage, q4, "pos"), pos)


def test_count_writes_the_leading_prims(stage, q4, pos):
    stage.write("pos", q4, np.full((2, 3), -1, np.float32), 2, count=2)
    stage.seal(2)
    expected = pos.copy()
    expected[:2] = -1
    np.testing.assert_array_equal(read_values(stage, q4, "pos"), expected)


def test_bool_mask_writes_only_selected_prims(stage, q4, pos):
    new = np.full((4, 3), -1, np.float32) - np.arange(4, dtype=np.float32)[:, None]
    stage.write("pos", q4, new, 2, mask=np.array([True, False, False, True]))
    stage.seal(2)
    expected = pos.copy()
    expected[[0, 3]] = new[[0, 3]]  # source row i belongs to element i
    np.testing.assert_array_equal(read_values(stage, q4, "pos"), expected)


def test_uint64_word_mask_needs_count(stage, q4, pos):
    new = np.full((4, 3), -7, np.float32)
    with pytest.raises(kstage.InvalidArgument, match="count="):
        stage.write("pos", q4, new, 2, mask=np.array([0b0110], np.uint64))
    stage.write("pos", q4, new, 2, mask=np.array([0b0110], np.uint64), count=4)
    stage.seal(2)
    expected = pos.copy()
    expected[[1, 2]] = -7
    np.testing.assert_array_equal(read_values(stage, q4, "pos"), expected)


def test_shorter_mask_covers_the_leading_prims(stage, q4, pos):
    new = np.full((2, 3), -5, np.float32)
    stage.write("pos", q4, new, 2, mask=[False, True])
    stage.seal(2)
    expected = pos.copy()
    expected[1] = -5
    np.testing.assert_array_equal(read_values(stage, q4, "pos"), expected)


# ------------------------------------------------------------------------------------------------
# Prim modes
# ------------------------------------------------------------------------------------------------
def test_insert_creates_and_update_changes(stage, paths4):
    stage.write("m", paths4[:2], np.array([1.0, 2.0]), 1, mode="insert")
    stage.seal(1)
    stage.write("m", paths4[:2], np.array([3.0, 4.0]), 2, mode="update")
    stage.write("m", paths4[2:], np.array([5.0, 6.0]), 2, mode="upsert")
    stage.seal(2)
    np.testing.assert_array_equal(read_values(stage, paths4, "m"), [3.0, 4.0, 5.0, 6.0])


def test_mode_is_checked_against_pending_state(stage, paths4):
    # "Prim mode and schema are checked against the state the stage will have at `ordinal`
    # given what has been submitted so far": an update after an unsealed insert is accepted.
    stage.write("m", paths4[:1], np.array([1.0]), 1, mode="insert")
    stage.write("m", paths4[:1], np.array([2.0]), 2, mode="update")
    with pytest.raises(kstage.AlreadyExists):
        stage.write("m", paths4[:1], np.array([3.0]), 3, mode="insert")
    stage.seal(3)
    np.testing.assert_array_equal(read_values(stage, paths4[:1], "m"), [2.0])


def test_unknown_mode(stage, q4):
    with pytest.raises(kstage.InvalidArgument, match='"bogus"'):
        stage.write("m", q4, np.zeros(4), 1, mode="bogus")


# ------------------------------------------------------------------------------------------------
# Ragged (array) attributes
# ------------------------------------------------------------------------------------------------
def ragged_rows(group):
    assert group.is_array
    return [np.from_dlpack(group.tensor(i)).copy() for i in range(group.tensor_count)]


def test_ragged_list_round_trip(stage, q4, paths4):
    rows = [np.arange(i, dtype=np.int32) * (i + 1) for i in range(4)]
    stage.write("nbr", q4, rows, 1)
    stage.seal(1)
    for compact in (False, True):
        (g,) = stage.read(q4, "nbr", compact=compact)
        assert g.is_array and g.dtype == np.int32 and g.lanes == 1
        assert g.tensor_count == 4 and len(g) == 4 and g.paths == paths4
        got = ragged_rows(g)
        assert [r.tolist() for r in got] == [r.tolist() for r in rows]


def test_ragged_packed_row_counts(stage, q4):
    packed = np.arange(6, dtype=np.int64)
    stage.write("nbr", q4, packed, 1, row_counts=[0, 1, 2, 3])
    stage.seal(1)
    (g,) = stage.read(q4, "nbr")
    assert [r.tolist() for r in ragged_rows(g)] == [[], [0], [1, 2], [3, 4, 5]]


def test_ragged_rows_with_lanes(stage, q4):
    rows = [np.arange(2 * i, dtype=np.float32).reshape(i, 2) for i in range(4)]
    stage.write("pts", q4, rows, 1)
    packed = np.arange(12, dtype=np.float32).reshape(6, 2)
    stage.write("pts2", q4, packed, 1, row_counts=np.array([3, 0, 2, 1]))
    stage.seal(1)
    (g,) = stage.read(q4, "pts")
    assert g.lanes == 2
    got = ragged_rows(g)
    assert [r.shape for r in got] == [(0, 2), (1, 2), (2, 2), (3, 2)]
    for r, e in zip(got, rows):
        np.testing.assert_array_equal(r, e)
    (g2,) = stage.read(q4, "pts2")
    got2 = ragged_rows(g2)
    np.testing.assert_array_equal(np.concatenate(got2), packed)
    assert [r.shape[0] for r in got2] == [3, 0, 2, 1]


def test_ragged_row_counts_must_add_up(stage, q4):
    with pytest.raises(kstage.InvalidArgument, match="add up to 3"):
        stage.write("nbr", q4, np.arange(6, dtype=np.int32), 1, row_counts=[0, 1, 2, 0])
    with pytest.raises(kstage.InvalidArgument, match="more than"):
        stage.write("nbr", q4, np.arange(6, dtype=np.int32), 1, row_counts=[0, 1, 2, 4])
    with pytest.raises(kstage.InvalidArgument, match="3 source row"):
        stage.write("nbr", q4, [np.arange(i, dtype=np.int32) for i in range(3)], 1)
    stage.seal(1)
    assert list(stage.read(q4, "nbr")) == []


def test_ragged_group_has_no_single_tensor(stage, q4):
    stage.write("nbr", q4, [np.arange(i, dtype=np.int32) for i in range(4)], 1)
    stage.seal(1)
    (g,) = stage.read(q4, "nbr")
    with pytest.raises(BufferError, match="one tensor per prim"):
        g.__dlpack__(max_version=(1, 0))
    with pytest.raises(IndexError, match="out of range"):
        g.tensor(4)


def test_ragged_update_with_index_map(stage, q4):
    stage.write("nbr", q4, [np.arange(i, dtype=np.int32) for i in range(4)], 1)
    stage.seal(1)
    stage.write("nbr", q4, [np.array([7, 7, 7], np.int32)], 2, index_map=[0, 0], count=2)
    stage.seal(2)
    (g,) = stage.read(q4, "nbr", compact=True)
    assert [r.tolist() for r in ragged_rows(g)] == [[7, 7, 7], [7, 7, 7], [0, 1], [0, 1, 2]]


def test_fixed_and_array_kinds_do_not_mix(stage, q4):
    stage.write("k", q4, np.zeros(4, np.int32), 1)
    with pytest.raises(kstage.InvalidArgument):
        stage.write("k", q4, [np.zeros(1, np.int32)] * 4, 2)


# ------------------------------------------------------------------------------------------------
# write_batch: all or nothing
# ------------------------------------------------------------------------------------------------
def test_write_batch_writes_every_attribute_as_one_op(stage, q4):
    op = stage.write_batch(q4, 1, {
        "x": np.arange(4.0),
        "y": kstage.Write(np.array([[1, 2], [3, 4]], np.int32), index_map=[1, 1, 0, 0]),
        "z": kstage.Write([np.arange(i, dtype=np.int16) for i in range(4)]),
        "s": kstage.Write(np.zeros((4, 3), np.float32), semantic="normal"),
    })
    assert op.wait(5)
    stage.seal(1)
    got = {g.attribute: g for g in stage.read(q4, ["x", "y", "z", "s"], compact=True)}
    assert sorted(got) == ["s", "x", "y", "z"]
    np.testing.assert_array_equal(np.from_dlpack(got["x"].tensor(0)), np.arange(4.0))
    np.testing.assert_array_equal(np.from_dlpack(got["y"].tensor(0)), [[3, 4], [3, 4], [1, 2], [1, 2]])
    assert [r.tolist() for r in ragged_rows(got["z"])] == [[], [0], [0, 1], [0, 1, 2]]
    assert got["s"].semantic == "normal"


@pytest.mark.parametrize("bad", ["rows", "dtype", "count0", "no_dlpack"])
def test_write_batch_is_all_or_nothing(stage, q4, bad):
    stage.write("x", q4, np.zeros(4), 1)
    stage.seal(1)
    bad_entry = {
        "rows": np.zeros(3),  # 3 source rows for 4 prims
        "dtype": kstage.Write(np.zeros(4, np.int8)),  # x is float64: y is new, so break x instead
        "count0": kstage.Write(np.zeros(4), count=0),
        "no_dlpack": [1.0, 2.0, 3.0, 4.0],
    }[bad]
    writes = {"x": np.ones(4), "y": bad_entry, "z": np.ones(4)}
    if bad == "dtype":
        writes = {"y": np.ones(4), "x": np.zeros(4, np.int8), "z": np.ones(4)}
    with pytest.raises((ValueError, TypeError)):
        stage.write_batch(q4, 2, writes)
    stage.seal(2)
    np.testing.assert_array_equal(read_values(stage, q4, "x"), np.zeros(4))
    assert read_values(stage, q4, "y") is None
    assert read_values(stage, q4, "z") is None
    assert stage.query(has="z").paths.tolist() == []


def test_write_batch_names_the_bad_entry(stage, q4):
    with pytest.raises(kstage.InvalidArgument, match=r"\('y'\)"):
        stage.write_batch(q4, 1, {"x": np.zeros(4), "y": np.zeros(3)})


def test_write_batch_needs_an_attribute(stage, q4):
    with pytest.raises(kstage.InvalidArgument, match="at least one"):
        stage.write_batch(q4, 1, {})


# ------------------------------------------------------------------------------------------------
# delete
# ------------------------------------------------------------------------------------------------
def test_delete_attribute_and_prims(stage, q4, paths4):
    stage.write_batch(q4, 1, {"a": np.zeros(4), "b": np.ones(4)})
    stage.seal(1)
    stage.delete(paths4[:2], 2, attrs="a")
    stage.delete([paths4[3]], 2)  # every attribute: the prim goes
    stage.delete(["/never/there"], 2, attrs=["a", "b"])  # absent prims are ignored
    assert sorted(stage.query(prefix="/world").paths.tolist()) == sorted(q4.paths.tolist())  # unsealed
    stage.seal(2)
    assert [g.paths for g in stage.read(q4, "a")] == [[paths4[2]]]
    assert [g.paths for g in stage.read(q4, "b")] == [paths4[:3]]
    assert stage.query(prefix="/world").paths.tolist() == stage.intern(paths4[:3]).tolist()


def test_delete_needs_attributes_or_none(stage, q4):
    with pytest.raises(kstage.InvalidArgument, match="attrs"):
        stage.delete(q4, 1, attrs=[])
