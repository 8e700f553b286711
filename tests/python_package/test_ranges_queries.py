# SPDX-License-Identifier: Apache-2.0
"""Paths, path ranges (intern_range, query_range with stride), filter queries (prefix, has,
path_in), change-range reads and tombstone groups."""
import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import values_in_prim_order  # noqa: E402


def compact_values(stage, query, attr, **kw):
    out = {}
    for g in stage.read(query, attr, compact=True, **kw):
        if g.is_tombstone:
            out.setdefault("tombstones", []).extend(g.paths)
        else:
            out.setdefault("paths", []).extend(g.paths)
            out.setdefault("values", []).extend(np.from_dlpack(g.tensor(0)).tolist())
    return out


# ------------------------------------------------------------------------------------------------
# Paths
# ------------------------------------------------------------------------------------------------
def test_intern_single_and_many(stage):
    a = stage.intern("/a/b")
    assert isinstance(a, int) and a != 0
    assert stage.intern("/a/b") == a
    assert stage.path(a) == "/a/b"
    ids = stage.intern(["/a/b", "/c", "/a/b/d"])
    assert isinstance(ids, np.ndarray) and ids.dtype == np.uint64 and ids.shape == (3,)
    assert ids[0] == a
    assert [stage.path(int(i)) for i in ids] == ["/a/b", "/c", "/a/b/d"]
    assert stage.intern([]).tolist() == []
    assert stage.path(stage.intern("/")) == "/"


def test_ancestors_keep_their_reserved_ids(stage):
    z = stage.intern("/x/y/z")
    x, y = stage.intern("/x"), stage.intern("/x/y")
    # interning /x/y/z reserved ids for /x and /x/y, which they keep: both come before z
    assert x < y < z
    assert stage.intern(["/x", "/x/y", "/x/y/z"]).tolist() == [x, y, z]


def test_intern_list_is_all_or_nothing(stage):
    with pytest.raises(kstage.InvalidArgument, match="bad"):
        stage.intern(["/fine/one", "bad"])
    # nothing of the list was interned: /fine/one does not exist as a path yet
    assert stage.query(prefix="/fine").paths.tolist() == []
    before = stage.intern("/probe")
    assert stage.intern("/fine/one") > before  # a fresh id, interned only now


def test_token_names(stage):
    t = stage.token("velocity")
    assert stage.token("velocity") == t
    assert stage.token_name(t) == "velocity"
    assert stage.token("other") != t


# ------------------------------------------------------------------------------------------------
# Path ranges
# ------------------------------------------------------------------------------------------------
def test_intern_range(stage):
    first = stage.intern_range("/r", "p", 5, 10)
    assert [stage.path(first + i) for i in (0, 1, 9)] == ["/r/p5", "/r/p6", "/r/p14"]
    assert stage.range_info(first + 3) == (first, 10, 3)
    assert stage.range_member(first, 7) == first + 7
    assert stage.intern("/r/p12") == first + 7  # the same string gives the same id
    assert stage.intern_range("/r", "p", 5, 10) == first  # interning again: the same range
    with pytest.raises(kstage.InvalidArgument, match="beyond"):
        stage.range_member(first, 10)
    with pytest.raises(kstage.InvalidArgument, match="not the first path"):
        stage.range_member(first + 1, 0)


def test_intern_range_variants(stage):
    top = stage.intern_range("/", "p", 100, 3)
    assert stage.path(top + 2) == "/p102"
    bare = stage.intern_range("/nums", "", 0, 3)
    assert stage.path(bare + 1) == "/nums/1"
    big = stage.intern_range("/big", "e", 0, 1_000_000)  # O(1): a million paths at once
    assert stage.path(big + 999_999) == "/big/e999999"
    assert stage.range_info(big + 123_456) == (big, 1_000_000, 123_456)


def test_intern_range_overlaps_are_refused(stage):
    stage.intern_range("/r", "p", 0, 3)
    with pytest.raises(kstage.AlreadyExists, match="/r/p1"):
        stage.intern_range("/r", "p1", 0, 3)  # a prefix that starts the other's: "p1" names are "p" names
    stage.intern("/s/q4")
    with pytest.raises(kstage.AlreadyExists):
        stage.intern_range("/s", "q", 0, 10)  # /s/q4 was interned as a path of its own


def test_query_range_start_count_stride(stage):
    first = stage.intern_range("/w/parts", "p", 0, 1000)
    q = stage.query_range(first, 10, 5, 2)
    assert len(q) == 5
    assert q.paths.tolist() == [first + 10 + 2 * i for i in range(5)]
    assert [stage.path(int(p)) for p in q.paths] == [f"/w/parts/p{10 + 2 * i}" for i in range(5)]
    assert stage.query_range(first).paths.tolist() == list(range(first, first + 1000))
    assert stage.query_range(first, 995).paths.tolist() == list(range(first + 995, first + 1000))
    assert stage.query_range(first, 2, 3, 0).paths.tolist() == [first + 2, first + 3, first + 4]  # 0 means 1
    with pytest.raises(kstage.InvalidArgument, match="beyond"):
        stage.query_range(first, 0, 600, 2)


def test_write_and_read_over_a_strided_range(stage):
    first = stage.intern_range("/w/parts", "p", 0, 100)
    even = stage.query_range(first, 0, 50, 2)
    odd = stage.query_range(first, 1, 50, 2)
    stage.write("mass", even, np.arange(50, dtype=np.float32), 1)
    stage.write("mass", odd, -np.arange(50, dtype=np.float32), 1)
    stage.seal(1)
    all_ = stage.query_range(first)
    got = compact_values(stage, all_, "mass")
    expected = np.empty(100, np.float32)
    expected[0::2], expected[1::2] = np.arange(50), -np.arange(50)
    assert got["values"] == expected.tolist()
    assert got["paths"] == [f"/w/parts/p{i}" for i in range(100)]
    # filters see range members like any path
    assert stage.query(prefix="/w/parts", has="mass").paths.tolist() == list(range(first, first + 100))
    stage.delete(stage.query_range(first, 0, 10), 2)
    stage.seal(2)
    assert len(stage.query(prefix="/w/parts")) == 90


def test_read_a_range_in_bounded_groups(stage):
    # max_group_prims: groups of at most that many prims, in order, each a zero-copy window of
    # the column with its own prims (a range query has no list of ids: each group makes its own).
    first = stage.intern_range("/w/big", "p", 0, 10_000)
    q = stage.query_range(first)
    stage.write("x", q, np.arange(10_000, dtype=np.float32), 1)
    stage.seal(1)
    with stage.read(q, "x", max_group_prims=4096) as r:
        groups = list(r)
        assert [len(g.prims) for g in groups] == [4096, 4096, 1808]
        assert np.concatenate([g.prims for g in groups]).tolist() == list(range(first, first + 10_000))
        assert all(g.index_map is None for g in groups)
        arrays = [np.from_dlpack(g) for g in groups]
        assert np.concatenate(arrays).tolist() == list(range(10_000))
        # windows of one buffer: no copy
        assert arrays[1].ctypes.data == arrays[0].ctypes.data + 4096 * 4
    with pytest.raises(TypeError):
        stage.read(q, "x", max_group_prims=-1)


def test_read_prims_as_progression(stage):
    # prims_as_progression=True: a group whose prims are a progression is published with no list
    # of ids; prim_progression names them, and prims / paths make them only when asked.
    first = stage.intern_range("/w/big", "p", 0, 1000)
    stage.intern("/w/apart")
    q = stage.query_range(first, 10, 40, 3)  # prims first + 10 + 3 i
    stage.write("x", stage.query_range(first), np.arange(1000, dtype=np.float32), 1)
    stage.seal(1)
    want = [first + 10 + 3 * i for i in range(40)]
    with stage.read(q, "x", prims_as_progression=True, max_group_prims=16) as r:
        groups = list(r)
    assert [len(g) for g in groups] == [16, 16, 8]
    assert [g.prim_progression for g in groups] == [(want[0], 3), (want[16], 3), (want[32], 3)]
    ids = np.concatenate([g.prims for g in groups])
    assert ids.dtype == np.uint64 and ids.tolist() == want
    assert not groups[0].prims.flags.writeable
    assert groups[0].prims is groups[0].prims  # made once
    assert groups[2].paths == [f"/w/big/p{10 + 3 * i}" for i in range(32, 40)]
    # (zero-copy: each group's tensor is the column, its index_map the prims' rows)
    values = np.concatenate([np.from_dlpack(g)[g.index_map] for g in groups])
    assert values.tolist() == [float(p - first) for p in want]
    for g in groups:
        g.release()
        with pytest.raises(kstage.InvalidHandle):
            g.prim_progression
        with pytest.raises(kstage.InvalidHandle):
            g.prims
    # Without the flag a progression group names its progression too, and has its list.
    with stage.read(q, "x") as r:
        (g,) = list(r)
        assert g.prim_progression == (want[0], 3)
        assert g.prims.tolist() == want
    # A list that is no progression: None, whatever the flag.
    listed = stage.query([first + 5, first + 1, first + 9])
    with stage.read(listed, "x", prims_as_progression=True) as r:
        (g,) = list(r)
        assert g.prim_progression is None
        assert g.prims.tolist() == [first + 5, first + 1, first + 9]
        assert g.paths == ["/w/big/p5", "/w/big/p1", "/w/big/p9"]


# ------------------------------------------------------------------------------------------------
# Filter queries
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def tree(stage):
    paths = ["/a", "/a/b", "/a/b/c", "/ab", "/ab/x", "/z"]
    stage.write("m", paths, np.arange(6.0), 1)
    stage.write("v", ["/a/b", "/ab", "/z"], np.ones(3), 1)
    stage.seal(1)
    return {p: stage.intern(p) for p in paths}


def paths_of(stage, q):
    return [stage.path(int(p)) for p in q.paths]


def test_prefix_matches_the_subtree_only(stage, tree):
    assert paths_of(stage, stage.query(prefix="/a")) == ["/a", "/a/b", "/a/b/c"]  # not /ab
    assert paths_of(stage, stage.query(prefix="/ab")) == ["/ab", "/ab/x"]
    assert paths_of(stage, stage.query(prefix=tree["/a/b"])) == ["/a/b", "/a/b/c"]  # an id works too
    assert len(stage.query(prefix="/")) == 6


def test_has_is_an_and(stage, tree):
    assert paths_of(stage, stage.query(has="v")) == ["/a/b", "/ab", "/z"]
    assert paths_of(stage, stage.query(has=["m", "v"])) == ["/a/b", "/ab", "/z"]
    assert paths_of(stage, stage.query(prefix="/a", has=["m", "v"])) == ["/a/b"]
    assert stage.query(has=["m", "never"]).paths.tolist() == []


def test_path_in(stage, tree):
    q = stage.query(path_in=["/z", "/a", "/nowhere/yet"])
    assert paths_of(stage, q) == ["/a", "/z"]  # existing prims only, in path-id order
    assert paths_of(stage, stage.query(prefix="/a", path_in=[tree["/a/b/c"], tree["/z"]])) == ["/a/b/c"]
    assert paths_of(stage, stage.query(has="v", path_in=np.array([tree["/ab"], tree["/a"]]))) == ["/ab"]


def test_filters_see_the_sealed_state_only(stage, tree):
    stage.write("v", ["/a"], np.ones(1), 2)
    stage.delete(["/z"], 2)
    assert paths_of(stage, stage.query(has="v")) == ["/a/b", "/ab", "/z"]
    stage.seal(2)
    assert paths_of(stage, stage.query(has="v")) == ["/a", "/a/b", "/ab"]


def test_query_by_paths_and_filters_are_exclusive(stage, tree):
    with pytest.raises(kstage.InvalidArgument, match="not both"):
        stage.query(["/a"], prefix="/a")


def test_query_paths_keep_their_order_and_may_not_exist(stage):
    q = stage.query(["/later/b", "/later/a"])
    assert paths_of(stage, q) == ["/later/b", "/later/a"]
    assert len(q) == 2
    assert list(stage.read(q, "anything")) == []


# ------------------------------------------------------------------------------------------------
# Change ranges and tombstones
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def history(stage, q4, paths4):
    """v written at 1 (all), 2 (p1), 3 (p2, p3); each sealed."""
    stage.write("v", q4, np.full(4, 1.0), 1)
    stage.seal(1)
    stage.write("v", [paths4[1]], np.full(1, 2.0), 2)
    stage.seal(2)
    stage.write("v", paths4[2:], np.full(2, 3.0), 3)
    stage.seal(3)
    return paths4


def test_change_range_selects_the_changed_prims(stage, q4, history):
    paths4 = history
    assert compact_values(stage, q4, "v", range=(3, 3)) == {"paths": paths4[2:], "values": [3.0, 3.0]}
    assert compact_values(stage, q4, "v", range=(2, 3)) == {"paths": paths4[1:], "values": [2.0, 3.0, 3.0]}
    assert compact_values(stage, q4, "v", range=(1, 3))["paths"] == paths4
    assert compact_values(stage, q4, "v", range=(4, 9)) == {}
    # zero-copy change-range groups map their prims to the column's rows
    (g,) = stage.read(q4, "v", range=(3, 3))
    assert g.paths == paths4[2:]
    np.testing.assert_array_equal(values_in_prim_order(g), [3.0, 3.0])


def test_change_range_that_changed_again_is_out_of_range(stage, q4, history):
    paths4 = history
    with pytest.raises(kstage.OutOfRange, match=paths4[1]):
        stage.read(q4, "v", range=(1, 1))  # p1 changed again at 2
    with pytest.raises(kstage.OutOfRange, match="ordinal 3"):
        stage.read(q4, "v", range=(2, 2))  # p2, p3 changed again at 3
    # a query of prims that did not change again is answerable
    assert compact_values(stage, [paths4[0]], "v", range=(1, 1))["paths"] == [paths4[0]]


def test_tombstones_after_a_delete(stage, q4, history):
    paths4 = history
    stage.delete([paths4[0]], 4, attrs="v")
    stage.delete([paths4[3]], 4)  # the prim itself
    stage.seal(4)
    groups = list(stage.read(q4, "v", range=(4, 4)))
    tomb = [g for g in groups if g.is_tombstone]
    assert len(tomb) == 1 and [g for g in groups if not g.is_tombstone] == []
    g = tomb[0]
    assert sorted(g.paths) == sorted([paths4[0], paths4[3]])
    assert len(g) == 2 and g.tensor_count == 0
    assert sorted(g.prims.tolist()) == sorted(stage.intern([paths4[0], paths4[3]]).tolist())
    assert g.attribute == "v" and g.ordinal == 4
    assert "tombstone" in repr(g)
    with pytest.raises(kstage.InvalidArgument, match="tombstone"):
        g.tensor(0)
    with pytest.raises(BufferError, match="tombstone"):  # the array API's "cannot export"
        g.__dlpack__(max_version=(1, 0))
    # latest reads have no tombstones: the deleted prims are simply absent
    assert compact_values(stage, q4, "v") == {"paths": paths4[1:3], "values": [2.0, 3.0]}
    # a range over both writes and deletes
    got = compact_values(stage, q4, "v", range=(3, 4))
    assert got["paths"] == [paths4[2]] and sorted(got["tombstones"]) == sorted([paths4[0], paths4[3]])


def test_tombstone_device_and_len(stage, q4, history):
    paths4 = history
    stage.delete(q4, 4, attrs="v")
    stage.seal(4)
    (g,) = stage.read(q4, "v", range=(4, 4))
    assert g.is_tombstone and len(g) == 4
    assert g.device == (1, 0)


def test_change_range_of_a_ragged_attribute(stage, q4, paths4):
    stage.write("nbr", q4, [np.arange(i, dtype=np.int32) for i in range(4)], 1)
    stage.seal(1)
    stage.write("nbr", [paths4[2]], [np.array([9, 9], np.int32)], 2)
    stage.seal(2)
    (g,) = stage.read(q4, "nbr", range=(2, 2))
    assert g.is_array and g.paths == [paths4[2]] and g.tensor_count == 1
    assert np.from_dlpack(g.tensor(0)).tolist() == [9, 9]


# ------------------------------------------------------------------------------------------------
# Describing a stage (kstage_list_attributes, kstage_attribute_info)
# ------------------------------------------------------------------------------------------------
def test_attributes_describe_each_column(stage):
    assert stage.attributes() == []
    q = stage.query([f"/d/p{i}" for i in range(4)])
    stage.write("pos", q, np.zeros((4, 3), np.float32), 1, semantic="point")
    stage.write("nbrs", stage.query(["/d/p0", "/d/p1"]),
                [np.arange(3, dtype=np.int32), np.arange(0, dtype=np.int32)], 1)
    before = {a["name"]: a for a in stage.attributes()}
    assert set(before) == {"pos", "nbrs"}
    assert before["pos"]["prim_count"] == 0 and before["pos"]["write_floor"] == 0  # not sealed
    stage.seal(1)
    infos = stage.attributes()
    assert [a["attribute"] for a in infos] == sorted(a["attribute"] for a in infos)  # token order
    pos = stage.attribute_info("pos")
    assert pos["dtype"] == np.float32 and pos["lanes"] == 3 and not pos["is_array"]
    assert pos["semantic"] == "point" and pos["residency"] == (1, 0)
    assert pos["write_floor"] == 1 and pos["prim_count"] == 4
    nbrs = stage.attribute_info("nbrs")
    assert nbrs["is_array"] and nbrs["dtype"] == np.int32 and nbrs["prim_count"] == 2
    # What a generic consumer queries with it: every existing prim, the prims holding one.
    assert len(stage.query()) == 4
    assert len(stage.query(has="nbrs")) == nbrs["prim_count"]
    with pytest.raises(kstage.NotFound, match="'vel' has no column"):
        stage.attribute_info("vel")


def test_range_definition_makes_the_same_range_elsewhere(stage):
    first = stage.intern_range("/world/cells", "c1", 5, 20)
    assert stage.range_definition(first) == ("/world/cells", "c1", 5, 20)
    other = kstage.Stage()
    again = other.intern_range(*stage.range_definition(first))
    assert other.path(again + 19) == stage.path(first + 19) == "/world/cells/c124"
    with pytest.raises(kstage.InvalidArgument, match="not the first path"):
        stage.range_definition(first + 1)
    other.close()
