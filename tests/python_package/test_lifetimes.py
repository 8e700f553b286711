# SPDX-License-Identifier: Apache-2.0
"""Lifetimes: releasing and closing (idempotent, then InvalidHandle), what stays valid after a
release or a close (numpy views, exports), context managers, ops dropped without a wait, and no
leaks over many loops (RSS and tracemalloc flat)."""
import gc
import sys
import time
import tracemalloc

import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import describe_exit, rss_bytes, run_python, values_in_prim_order  # noqa: E402


# ------------------------------------------------------------------------------------------------
# Groups and reads
# ------------------------------------------------------------------------------------------------
def test_release_twice_then_invalid_handle(stage, q4, pos):
    (g,) = stage.read(q4, "pos")
    t = g.tensor(0)
    g.release()
    g.release()  # idempotent
    assert "released" in repr(g)
    for use in (lambda: g.prims, lambda: g.index_map, lambda: g.paths, lambda: g.tensor(0), lambda: len(g),
                lambda: g.dtype, lambda: g.lanes, lambda: g.ordinal, lambda: g.attribute, lambda: g.device,
                lambda: g.__dlpack__(max_version=(1, 0)), lambda: g.__dlpack_device__(),
                lambda: t.__dlpack__(max_version=(1, 0)), lambda: t.__dlpack_device__()):
        with pytest.raises(kstage.InvalidHandle, match="released"):
            use()


def test_views_of_prims_and_index_map_outlive_release(stage, q4, paths4, pos):
    rq = stage.query([paths4[i] for i in (3, 1, 0, 2)])
    (g,) = stage.read(rq, "pos")
    prims, index_map = g.prims, g.index_map
    assert index_map is not None
    assert not prims.flags.writeable and not index_map.flags.writeable
    with pytest.raises(ValueError):
        prims[0] = 1
    expected_prims, expected_map = prims.copy(), index_map.copy()
    g.release()
    del g
    gc.collect()
    for k in range(2, 5):  # later seals, and a delete of the prims
        stage.write("pos", rq, np.full((4, 3), k, np.float32), k)
        stage.seal(k)
    stage.delete(rq, 5)
    stage.seal(5)
    np.testing.assert_array_equal(prims, expected_prims)
    np.testing.assert_array_equal(index_map, expected_map)


def test_group_context_manager_releases(stage, q4, pos):
    with stage.read(q4, "pos") as r:
        with next(iter(r)) as g:
            x = np.from_dlpack(g.tensor(0))
        with pytest.raises(kstage.InvalidHandle):
            g.tensor(0)
    assert sorted(x.ravel().tolist()) == sorted(pos.ravel().tolist())  # the export stays readable


def test_groups_outlive_their_read(stage, q4, pos):
    stage.write("vel", q4, np.ones((4, 3), np.float32), 2)
    stage.seal(2)
    r = stage.read(q4, ["pos", "vel"])
    it = iter(r)
    g1 = next(it)
    r.release()
    r.release()  # idempotent
    assert list(it) == []  # a released read yields nothing more
    assert g1.attribute == "pos"
    np.testing.assert_array_equal(values_in_prim_order(g1), pos)


def test_tensor_outlives_its_collected_group(stage, q4, pos):
    # A Tensor holds its group (the C group stays pinned while it lives): taking the tensors of
    # a read and exporting them afterwards -- or exporting from a temporary group -- works. Only
    # an explicit release() ends a group for the caller.
    tensors = [g.tensor(0) for g in stage.read(q4, "pos")]
    gc.collect()
    x = np.from_dlpack(tensors[0])
    np.testing.assert_array_equal(x, pos)
    y = np.from_dlpack(next(iter(stage.read(q4, "pos", compact=True))).tensor(0))
    np.testing.assert_array_equal(y, pos)


def test_collected_group_releases_its_pin(stage, q4, pos):
    # Groups that are only collected (never released) do not pin old storage forever: the data
    # of an adopted array is handed back once the group is gone.
    b = np.ones((4, 3), np.float32)
    before = sys.getrefcount(b)
    stage.write("ad", q4, b, 2, adopt=True)
    stage.seal(2)
    for g in stage.read(q4, "ad"):
        pass
    del g
    stage.write("ad", q4, np.zeros((4, 3), np.float32), 3)
    stage.seal(3)
    gc.collect()
    assert sys.getrefcount(b) == before


def test_adopted_sparse_write_is_held_until_its_seal(stage, q4):
    # An index_map or mask write with adopt=True keeps the array (no copy) until the seal has read
    # its rows, then hands it back.
    stage.write("sp", q4, np.zeros((4, 3), np.float32), 1)
    stage.seal(1)
    b = np.arange(12, dtype=np.float32).reshape(4, 3)
    before = sys.getrefcount(b)
    stage.write("sp", q4, b, 2, index_map=np.array([3, 0], np.uint32), adopt=True)
    assert sys.getrefcount(b) > before  # held by the pending write
    m = np.array([True, False, False, True])
    stage.write("sp", q4, b + 100, 3, mask=m, adopt=True)
    stage.seal(3)
    gc.collect()
    assert sys.getrefcount(b) == before
    (g,) = stage.read(q4, "sp", compact=True)
    got = np.from_dlpack(g.tensor(0))
    want = np.array([[100, 101, 102], [0, 1, 2], [0, 0, 0], [109, 110, 111]], np.float32)
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------------------------------------
# Closing the stage
# ------------------------------------------------------------------------------------------------
def test_close_keeps_exports_valid(paths4):
    s = kstage.Stage()
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    s.write("pos", paths4, a, 1)
    s.write("nbr", paths4, [np.arange(i, dtype=np.int32) for i in range(4)], 1)
    s.seal(1)
    (g,) = s.read(paths4, "pos")
    (c,) = s.read(paths4, "pos", compact=True)
    (r,) = s.read(paths4, "nbr")
    x = np.from_dlpack(g.tensor(0))
    y = np.from_dlpack(c.tensor(0, readonly=False))
    rows = [np.from_dlpack(r.tensor(i)) for i in range(4)]
    t = g.tensor(0)
    s.close()
    s.close()  # idempotent
    assert s.closed
    gc.collect()
    for _ in range(50):  # churn the allocator
        np.ones(4096)
    assert x.tolist() == a.tolist()
    np.testing.assert_array_equal(y, a)
    y[:] = 0  # a writable compact export is the consumer's
    assert [v.tolist() for v in rows] == [[], [0], [0, 1], [0, 1, 2]]
    with pytest.raises(kstage.InvalidHandle, match="closed"):
        t.__dlpack__(max_version=(1, 0))
    with pytest.raises(kstage.InvalidHandle, match="closed"):
        g.tensor(0)
    del g, c, r, t
    gc.collect()


def test_group_fields_after_close_are_invalid_handle(paths4):
    # Stage.close: "everything made from it becomes stale (InvalidHandle)". A group's prims and
    # index map point into the destroyed stage: reading them now would read freed memory.
    s = kstage.Stage()
    s.write("pos", paths4, np.zeros((4, 3), np.float32), 1)
    s.seal(1)
    (g,) = s.read(list(reversed(paths4)), "pos")
    s.close()
    for use in (lambda: g.prims, lambda: g.index_map, lambda: len(g), lambda: g.paths):
        with pytest.raises(kstage.InvalidHandle):
            use()


def test_views_taken_before_close_stay_valid():
    # ReadGroup.release: "numpy views of its prims or index map keep its memory until they go".
    # Run apart: the failure mode is a read of freed memory.
    code = """
    import gc, numpy as np, kstage
    s = kstage.Stage()
    paths = [f"/w/p{i}" for i in range(1000)]
    s.write("pos", paths, np.ones((1000, 3), np.float32), 1)
    s.seal(1)
    (g,) = s.read(list(reversed(paths)), "pos")
    prims, index_map = g.prims, g.index_map
    want_prims, want_map = prims.copy(), index_map.copy()
    s.close()
    junk = [np.full(n, -1, np.int64) for n in (4, 16, 1000, 2000, 4000) for _ in range(20)]
    print("PRIMS", np.array_equal(prims, want_prims))
    print("INDEX_MAP", np.array_equal(index_map, want_map))
    """
    rc, out = run_python(code)
    assert rc == 0, f"{describe_exit(rc)}:\n{out}"
    assert "PRIMS True" in out, out
    assert "INDEX_MAP True" in out, out


def test_everything_is_invalid_after_close(paths4):
    s = kstage.Stage()
    q = s.query(paths4)
    s.write("pos", q, np.zeros((4, 3), np.float32), 1)
    op = s.write("pos", q, np.zeros((4, 3), np.float32), 2)
    m = s.map(q, "mm", 3, dtype="f4")
    mg = next(iter(m))
    r = s.read(q, "pos")
    s.close()
    for use in (lambda: s.write("pos", q, np.zeros((4, 3), np.float32), 5), lambda: s.read(q, "pos"),
                lambda: s.map(q, "pos", 9, dtype="f4"), lambda: s.write_floor(), lambda: s.token("new"),
                lambda: s.intern("/a"), lambda: len(q), lambda: q.paths, lambda: op.wait(), lambda: op.error,
                lambda: mg.tensor(0), lambda: m.commit(), lambda: s.delete(q, 9)):
        with pytest.raises(kstage.InvalidHandle):
            use()
    # releases are still fine
    m.abandon()
    r.release()
    q.release()
    op.release()
    assert op.done


def test_stage_context_manager_closes(paths4):
    with kstage.Stage() as s:
        s.write("pos", paths4, np.zeros(4), 1)
        s.seal(1)
        (g,) = s.read(paths4, "pos")
        x = np.from_dlpack(g)
    assert s.closed
    assert x.tolist() == [0, 0, 0, 0]
    with pytest.raises(kstage.InvalidHandle):
        s.write_floor()


def test_collected_stage_keeps_exports_valid(paths4):
    s = kstage.Stage()
    s.write("pos", paths4, np.arange(4.0), 1)
    s.seal(1)
    (g,) = s.read(paths4, "pos")
    x = np.from_dlpack(g)
    g.release()
    del g, s
    gc.collect()
    np.testing.assert_array_equal(x, np.arange(4.0))


def test_query_context_manager(stage, paths4):
    with stage.query(paths4) as q:
        assert len(q) == 4
    assert q.released


# ------------------------------------------------------------------------------------------------
# Ops
# ------------------------------------------------------------------------------------------------
def test_op_dropped_without_wait(stage, q4):
    for k in range(1, 50):
        stage.write("v", q4, np.full(4, float(k)), k)  # the Op is dropped at once
        stage.delete(["/none"], k, attrs="v")
    stage.seal(49)
    (g,) = stage.read(q4, "v", compact=True)
    assert np.from_dlpack(g).tolist() == [49.0] * 4


def test_op_release_and_queries(stage, q4):
    op = stage.write("v", q4, np.zeros(4), 1)
    assert op.done and op.wait() and op.wait(0) and op.wait(0.5)
    assert op.error == ""
    op.release()
    op.release()
    assert op.done  # a released op has nothing left to do
    with pytest.raises(kstage.InvalidHandle, match="released"):
        op.error
    with pytest.raises(kstage.InvalidHandle, match="released"):
        op.wait(0)
    with pytest.raises(kstage.InvalidArgument, match="timeout"):
        stage.write("v", q4, np.zeros(4), 2).wait(-1)


# ------------------------------------------------------------------------------------------------
# No leaks
# ------------------------------------------------------------------------------------------------
def _churn(stage, q, start, n, data, adopted_pool):
    """One loop: a copied or adopted write, a seal, a zero-copy and a compact read, exports
    (versioned and legacy) and releases."""
    for k in range(start, start + n):
        if k % 4 == 0:
            stage.write("pos", q, adopted_pool[k % len(adopted_pool)], k, adopt=True)
        else:
            stage.write("pos", q, data, k)
        if k % 8 == 0:
            stage.write("nbr", q, [data[0, :1], data[1, :2], data[2, :0], data[3]], k)
        stage.seal(k)
        for g in stage.read(q, "pos"):
            x = np.from_dlpack(g.tensor(0))
            g.tensor(0, consumer_reads_only=True).__dlpack__()
            g.release()
        if k % 16 == 0:
            for g in stage.read(q, ["pos", "nbr"], compact=True):
                for i in range(g.tensor_count):
                    np.from_dlpack(g.tensor(i, readonly=False))
                g.release()
            with stage.map(q, "mapped", k + 1, dtype=("f4", 3)) as m:
                for mg in m:
                    np.from_dlpack(mg)[:] = 1
    return x


def test_no_leak_over_many_loops():
    """1e5 loops of write, seal, read, export and release: RSS after a warm-up of 1e4 loops
    stays flat (< 8 MB of growth)."""
    # host_execution="serial": on a busy machine with few cores the OpenMP backend's threads
    # make tiny kernels erratically slow (see test_threads.py); leaks are what this measures.
    stage = kstage.Stage(host_execution="serial")
    try:
        q = stage.query([f"/leak/p{i}" for i in range(4)])
        data = np.arange(12, dtype=np.float32).reshape(4, 3)
        # adopted arrays are read-only to the stage: a small pool of them is reused
        pool = [np.arange(12, dtype=np.float32).reshape(4, 3) + i for i in range(8)]
        counts = [sys.getrefcount(a) for a in pool]
        t0 = time.monotonic()
        _churn(stage, q, 1, 10_000, data, pool)
        gc.collect()
        base = rss_bytes()
        _churn(stage, q, 10_001, 90_000, data, pool)
        gc.collect()
        grown = rss_bytes() - base
        elapsed = time.monotonic() - t0
        assert grown < 8 * 2**20, f"RSS grew by {grown / 2**20:.1f} MB over 9e4 loops"
        assert elapsed < 60, f"1e5 loops took {elapsed:.1f} s"
    finally:
        stage.close()
    gc.collect()
    assert [sys.getrefcount(a) for a in pool] == counts  # every adopted array handed back


def test_no_python_allocations_kept():
    """tracemalloc: the Python heap stays flat over 2e4 loops after a warm-up."""
    # host_execution="serial": on a busy machine with few cores the OpenMP backend's threads
    # make tiny kernels erratically slow (see test_threads.py); leaks are what this measures.
    stage = kstage.Stage(host_execution="serial")
    try:
        q = stage.query([f"/leak/p{i}" for i in range(4)])
        data = np.arange(12, dtype=np.float32).reshape(4, 3)
        pool = [np.arange(12, dtype=np.float32).reshape(4, 3) + i for i in range(8)]
        _churn(stage, q, 1, 2_000, data, pool)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            _churn(stage, q, 2_001, 20_000, data, pool)
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        stats = after.compare_to(before, "lineno")
        growth = sum(s.size_diff for s in stats)
        top = "\n".join(str(s) for s in stats[:5])
        assert growth < 256 * 1024, f"the Python heap grew by {growth} bytes:\n{top}"
    finally:
        stage.close()


def test_interpreter_exit_with_everything_open():
    # Open stages, adopted arrays, live exports, an open map, a read in progress and -- when the
    # emulated device exists -- device writes still in flight at interpreter exit: the atexit
    # hook destroys the stages while Python runs; the process exits cleanly.
    code = """
    import numpy as np, kstage
    s = kstage.Stage()
    P = [f"/p{i}" for i in range(16)]
    arrays = [np.full(16, i, np.float64) for i in range(10)]
    for i, a in enumerate(arrays, 1):
        s.write("a", P, a, i, adopt=True)
    s.seal(10)
    (g,) = s.read(P, "a")
    x = np.from_dlpack(g)
    r = s.read(P, "a")
    m = s.map(P, "m", 11, dtype="f4")
    mg = next(iter(m))
    try:
        d = kstage.Stage(residency=(12, 0))
        for i, a in enumerate(arrays, 1):
            d.write("a", P, a, i, adopt=True)
        print("DEVICE WRITES IN FLIGHT")
    except (kstage.NotSupported, kstage.InvalidArgument):
        print("NO EMULATED DEVICE")
    print("EXITING")
    """
    rc, out = run_python(code)
    assert rc == 0, f"{describe_exit(rc)}:\n{out}"
    assert "EXITING" in out
