# SPDX-License-Identifier: Apache-2.0
"""Maps: writable buffers filled in place and committed at the map's ordinal; the context
manager commits on a clean exit and abandons on an exception."""
import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import CapsuleView, values_in_prim_order  # noqa: E402


def read_compact(stage, query, attr):
    groups = list(stage.read(query, attr, compact=True))
    if not groups:
        return None
    (g,) = groups
    if g.is_array:
        return [np.from_dlpack(g.tensor(i)).tolist() for i in range(g.tensor_count)]
    return np.from_dlpack(g.tensor(0)).copy()


def test_map_fill_commit_and_read(stage, q4, paths4):
    values = np.arange(12, dtype=np.float32).reshape(4, 3)
    with stage.map(q4, "pos", 1, dtype=("f4", 3)) as m:
        assert isinstance(m, kstage.Map) and not m.ended
        groups = list(m)
        assert len(groups) == 1
        g = groups[0]
        assert isinstance(g, kstage.MapGroup)
        assert len(g) == 4 and g.ordinal == 1 and not g.is_array
        assert g.dtype == np.float32 and g.lanes == 3 and g.tensor_count == 1
        assert g.device == (1, 0) and g.__dlpack_device__() == (1, 0)
        assert g.prims.tolist() == q4.paths.tolist()
        buf = np.from_dlpack(g.tensor(0))
        assert buf.shape == (4, 3) and buf.flags.writeable
        rows = g.index_map
        if rows is None:
            buf[:] = values
        else:
            buf[np.asarray(rows)] = values
    assert m.ended
    assert list(stage.read(q4, "pos")) == []  # not sealed yet
    stage.seal(1)
    np.testing.assert_array_equal(read_compact(stage, q4, "pos"), values)


def test_map_lanes_argument_equals_subarray_dtype(stage, q4):
    with stage.map(q4, "a", 1, dtype="f8", lanes=3) as m:
        for g in m:
            assert g.lanes == 3
            np.from_dlpack(g)[:] = 1
    with stage.map(q4, "b", 1, dtype=np.dtype(("f8", (2, 2)))) as m:  # 4 lanes from (2, 2)
        for g in m:
            assert g.lanes == 4
            assert np.from_dlpack(g).shape == (4, 4)
            np.from_dlpack(g)[:] = 2
    stage.seal(1)
    np.testing.assert_array_equal(read_compact(stage, q4, "a"), np.ones((4, 3)))
    np.testing.assert_array_equal(read_compact(stage, q4, "b"), np.full((4, 4), 2.0))


def test_map_over_a_subset_of_an_existing_column(stage, q4, paths4):
    base = np.arange(12, dtype=np.float32).reshape(4, 3)
    stage.write("pos", q4, base, 1)
    stage.seal(1)
    sub = stage.query([paths4[3], paths4[1]])
    with stage.map(sub, "pos", 2, dtype=("f4", 3)) as m:
        for g in m:
            assert g.prims.tolist() == sub.paths.tolist()
            buf = np.from_dlpack(g.tensor(0))
            rows = np.arange(len(g)) if g.index_map is None else np.asarray(g.index_map)
            buf[rows] = [[-3, -3, -3], [-1, -1, -1]]
    stage.seal(2)
    expected = base.copy()
    expected[3], expected[1] = -3, -1
    np.testing.assert_array_equal(read_compact(stage, q4, "pos"), expected)


def test_map_groups_and_per_group_commit(stage, q4):
    with stage.map(q4, "w", 1, dtype="f8", max_group_prims=3) as m:
        groups = list(m)
        assert [len(g) for g in groups] == [3, 1]
        for g in groups:
            buf = np.from_dlpack(g.tensor(0))
            rows = np.arange(len(g)) if g.index_map is None else np.asarray(g.index_map)
            buf[rows] = g.prims.astype(np.float64)
        groups[0].commit()
        with pytest.raises(kstage.InvalidHandle, match="committed"):
            groups[0].tensor(0)
        with pytest.raises(kstage.InvalidHandle, match="committed"):
            groups[0].commit()
        # groups[1] is committed by the map's clean exit
    stage.seal(1)
    np.testing.assert_array_equal(read_compact(stage, q4, "w"), q4.paths.astype(np.float64))


def test_clean_exit_commits_only_fetched_groups(stage, q4):
    with stage.map(q4, "w", 1, dtype="f4", max_group_prims=2) as m:
        g = next(iter(m))
        np.from_dlpack(g)[:] = 5
        # the second group is never fetched: dropped, not committed
    stage.seal(1)
    (rg,) = stage.read(q4, "w", compact=True)
    assert len(rg) == 2 and np.from_dlpack(rg.tensor(0)).tolist() == [5, 5]


def test_exception_abandons_the_map(stage, q4):
    stage.write("pos", q4, np.zeros((4, 3), np.float32), 1)
    stage.seal(1)
    with pytest.raises(RuntimeError, match="boom"):
        with stage.map(q4, "pos", 2, dtype=("f4", 3)) as m:
            for g in m:
                np.from_dlpack(g.tensor(0))[:] = -5
            raise RuntimeError("boom")
    assert m.ended
    with pytest.raises(kstage.InvalidHandle, match="ended"):
        g.tensor(0)
    with pytest.raises(kstage.InvalidHandle):
        m.commit()
    stage.seal(2)
    np.testing.assert_array_equal(read_compact(stage, q4, "pos"), np.zeros((4, 3)))
    with pytest.raises(RuntimeError, match="boom"):
        with stage.map(q4, "newattr", 3, dtype="i4") as m2:
            for g in m2:
                np.from_dlpack(g)[:] = 1
            raise RuntimeError("boom")
    stage.seal(3)
    assert read_compact(stage, q4, "newattr") is None
    assert stage.query(has="newattr").paths.tolist() == []


def test_abandon_and_commit_are_final(stage, q4):
    m = stage.map(q4, "pos", 1, dtype="f4")
    g = next(iter(m))
    m.abandon()
    m.abandon()  # idempotent
    assert m.ended
    assert list(m) == []
    with pytest.raises(kstage.InvalidHandle):
        g.commit()
    with pytest.raises(kstage.InvalidHandle):
        m.commit()
    m2 = stage.map(q4, "pos", 1, dtype="f4")
    m2.commit()  # nothing fetched: nothing committed, the map ends
    assert m2.ended
    with pytest.raises(kstage.InvalidHandle, match="ended"):
        m2.commit()
    stage.seal(1)
    assert read_compact(stage, q4, "pos") is None


def test_abandon_after_the_producers_stream(stage, q4):
    # A host map has no stream to wait for: a stream is refused, and the map stays open.
    m = stage.map(q4, "abandoned", 1, dtype="f4")
    g = next(iter(m))
    with pytest.raises(kstage.InvalidArgument, match="producer"):
        m.abandon(stream=7)
    assert not m.ended
    m.abandon(stream=0)
    assert m.ended
    with pytest.raises(kstage.InvalidHandle):
        g.commit()
    stage.seal(1)
    assert read_compact(stage, q4, "abandoned") is None


def test_array_map(stage, q4):
    counts = [1, 0, 2, 3]
    with stage.map(q4, "rag", 1, dtype="i4", element_counts=counts) as m:
        for g in m:
            assert g.is_array and g.tensor_count == 4
            shapes = [np.from_dlpack(g.tensor(i)).shape for i in range(4)]
            assert shapes == [(c,) for c in counts]
            for i in range(4):
                np.from_dlpack(g.tensor(i))[:] = i + 1
            with pytest.raises(BufferError, match="one tensor per prim"):
                g.__dlpack__(max_version=(1, 0))
    stage.seal(1)
    assert read_compact(stage, q4, "rag") == [[1], [], [3, 3], [4, 4, 4]]


def test_array_map_with_lanes(stage, q4):
    with stage.map(q4, "pts", 1, dtype=("f4", 2), element_counts=[2, 1, 0, 1]) as m:
        for g in m:
            for i in range(g.tensor_count):
                x = np.from_dlpack(g.tensor(i))
                assert x.shape[1:] == (2,)
                x[:] = i
    stage.seal(1)
    assert read_compact(stage, q4, "pts") == [[[0, 0], [0, 0]], [[1, 1]], [], [[3, 3]]]


def test_map_legacy_export_is_writable(stage, q4):
    with stage.map(q4, "z", 1, dtype="f4") as m:
        for g in m:
            v = CapsuleView(g.__dlpack__())
            assert v.name == "dltensor" and v.shape == (4,)
            v2 = CapsuleView(g.tensor(0).__dlpack__(max_version=(1, 0)))
            assert not v2.read_only and v2.data == v.data
            np.from_dlpack(g)[:] = 1


def test_map_errors(stage, q4, paths4):
    stage.write("pos", q4, np.zeros((4, 3), np.float32), 1)
    stage.seal(1)
    with pytest.raises(kstage.InvalidArgument, match="float64x3"):
        stage.map(q4, "pos", 2, dtype=("f8", 3))
    with pytest.raises(kstage.WriteFloorViolation, match="write floor 1"):
        stage.map(q4, "pos", 1, dtype=("f4", 3))
    with pytest.raises(kstage.AlreadyExists, match=paths4[0]):
        stage.map(q4, "pos", 2, dtype=("f4", 3), mode="insert")
    with pytest.raises(kstage.NotFound, match="/nowhere"):
        stage.map(["/nowhere"], "pos", 2, dtype=("f4", 3), mode="update")
    with pytest.raises(kstage.InvalidArgument, match="U3"):
        stage.map(q4, "s", 2, dtype=np.dtype("U3"))
    with pytest.raises(kstage.InvalidArgument, match="semantic"):
        stage.map(q4, "pos", 2, dtype=("f4", 3), semantic="color")
    stage.seal(2)
    np.testing.assert_array_equal(read_compact(stage, q4, "pos"), np.zeros((4, 3)))


def test_map_is_checked_again_at_commit(stage, paths4):
    # UPDATE requires all prims to exist, "checked at map and again at each unmap"
    stage.write("pos", paths4, np.zeros(4, np.float32), 1)
    stage.seal(1)
    m = stage.map(paths4, "pos", 3, dtype="f4", mode="update")
    g = next(iter(m))
    np.from_dlpack(g)[:] = 1
    stage.delete(paths4[:1], 2)
    stage.seal(2)
    with pytest.raises(kstage.NotFound):
        m.commit()
    assert not m.ended  # "On failure nothing is committed and the map stays open"
    m.abandon()


def test_map_view_of_a_read(stage, q4):
    # the same buffer read back: a whole-column map becomes the storage, so a zero-copy read
    # exports the very memory the map handed out
    with stage.map(q4, "pos", 1, dtype=("f4", 3)) as m:
        (g,) = list(m)
        buf = np.from_dlpack(g)
        buf[:] = 7
    stage.seal(1)
    (rg,) = stage.read(q4, "pos")
    x = np.from_dlpack(rg)
    assert x.ctypes.data == buf.ctypes.data
    np.testing.assert_array_equal(values_in_prim_order(rg), np.full((4, 3), 7))


def test_map_dtypes_without_a_dlpack_equivalent_are_refused(stage, q4):
    with pytest.raises(kstage.InvalidArgument, match="no DLPack equivalent"):
        stage.map(q4, "s", 1, dtype="U4")
    if np.dtype(np.clongdouble).itemsize * 8 > 255:  # 256 bits on x86-64: too wide for DLPack
        with pytest.raises(kstage.InvalidArgument, match="at most 255 bits"):
            stage.map(q4, "c", 1, dtype=np.clongdouble)
