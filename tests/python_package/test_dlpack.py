# SPDX-License-Identifier: Apache-2.0
"""DLPack both ways: zero copy (addresses), read-only and writable exports, versioned and legacy
capsules (flags read through ctypes), copy / dl_device / stream, data that outlives its group
and later seals, and producers' deleters run exactly once on every path."""
import gc
import sys

import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import (  # noqa: E402
    CapsuleView,
    Counter,
    CountingProducer,
    LegacyCountingProducer,
    column_storage_address,
    make_capsule,
    values_in_prim_order,
)

ALIGN = 64  # KSTAGE_BUFFER_ALIGNMENT


def one_group(stage, query, attr, **kw):
    groups = list(stage.read(query, attr, **kw))
    assert len(groups) == 1, groups
    return groups[0]


# ------------------------------------------------------------------------------------------------
# Zero copy, both directions
# ------------------------------------------------------------------------------------------------
def test_zero_copy_read_exports_the_column_storage(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    x = np.from_dlpack(g.tensor(0))
    storage = column_storage_address(stage, q4.paths, "pos")
    assert x.ctypes.data == storage
    assert x.ctypes.data % ALIGN == 0  # kstage's own buffers are 64-byte aligned
    # every export and every zero-copy read shares it
    assert np.from_dlpack(g).ctypes.data == storage
    g2 = one_group(stage, q4, "pos")
    assert np.from_dlpack(g2.tensor(0)).ctypes.data == storage
    # the write copied: the caller's array is not the storage
    assert storage != pos.ctypes.data


def test_adopted_write_becomes_the_column_storage(stage, q4):
    b = np.arange(12, dtype=np.float32).reshape(4, 3) + 100
    address = b.ctypes.data
    stage.write("pos", q4, b, 1, adopt=True)
    stage.seal(1)
    assert column_storage_address(stage, q4.paths, "pos") == address
    g = one_group(stage, q4, "pos")
    x = np.from_dlpack(g.tensor(0))
    assert x.ctypes.data == address
    np.testing.assert_array_equal(values_in_prim_order(g), b)


def test_adopted_array_is_never_written_by_the_stage(stage, q4):
    b = np.arange(12, dtype=np.float32).reshape(4, 3)
    keep = b.copy()
    stage.write("pos", q4, b, 1, adopt=True)
    stage.seal(1)
    # a sparse write to the column must not write into the adopted (read-only) buffer
    stage.write("pos", q4, np.full((4, 3), -1, np.float32), 2, mask=[True, False, True, False])
    stage.write("pos", q4, np.full((1, 3), -2, np.float32), 3, index_map=[0], count=1)
    stage.seal(3)
    np.testing.assert_array_equal(b, keep)
    got = values_in_prim_order(one_group(stage, q4, "pos"))
    expected = keep.copy()
    expected[0], expected[2] = -2, -1
    np.testing.assert_array_equal(got, expected)


def test_map_buffer_becomes_the_column_storage(stage, q4):
    with stage.map(q4, "pos", 1, dtype=("f4", 3)) as m:
        (mg,) = list(m)
        buf = np.from_dlpack(mg.tensor(0))
        buf[:] = np.arange(12).reshape(4, 3)
        address = buf.ctypes.data
    assert address % ALIGN == 0
    stage.seal(1)
    assert column_storage_address(stage, q4.paths, "pos") == address


def test_compact_read_has_a_buffer_of_its_own(stage, q4, pos):
    g = one_group(stage, q4, "pos", compact=True)
    x = np.from_dlpack(g.tensor(0))
    assert x.ctypes.data != column_storage_address(stage, q4.paths, "pos")
    assert x.ctypes.data % ALIGN == 0
    np.testing.assert_array_equal(x, pos)


# ------------------------------------------------------------------------------------------------
# Read-only and writable exports
# ------------------------------------------------------------------------------------------------
def test_zero_copy_export_is_read_only(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    x = np.from_dlpack(g.tensor(0))
    assert not x.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        x[0, 0] = 5
    y = np.from_dlpack(g)  # the group itself, as tensor 0
    assert not y.flags.writeable
    with pytest.raises(BufferError, match="read-only|shares the column"):
        g.tensor(0, readonly=False).__dlpack__(max_version=(1, 0))
    with pytest.raises(BufferError):
        np.from_dlpack(g.tensor(0, readonly=False))
    np.testing.assert_array_equal(values_in_prim_order(one_group(stage, q4, "pos")), pos)


def test_compact_export_is_writable_only_on_request(stage, q4, pos):
    g = one_group(stage, q4, "pos", compact=True)
    x = np.from_dlpack(g.tensor(0))
    assert not x.flags.writeable
    with pytest.raises(ValueError):
        x[0, 0] = 5
    w = np.from_dlpack(g.tensor(0, readonly=False))
    assert w.flags.writeable
    assert w.ctypes.data == x.ctypes.data  # the read's own buffer, not a copy
    w[:] = -1
    # the read's buffer is the reader's: the stage is untouched
    np.testing.assert_array_equal(values_in_prim_order(one_group(stage, q4, "pos")), pos)
    # readonly as __dlpack__'s keyword too
    cap = g.tensor(0).__dlpack__(max_version=(1, 0), readonly=False)
    assert not CapsuleView(cap).read_only


def test_map_group_exports_writable(stage, q4):
    with stage.map(q4, "pos", 1, dtype=("f4", 3)) as m:
        for mg in m:
            x = np.from_dlpack(mg.tensor(0))
            assert x.flags.writeable and x.shape == (4, 3)
            x[:] = 3
            view = CapsuleView(mg.tensor(0).__dlpack__(max_version=(1, 0)))
            assert view.versioned and not view.read_only
            ro = np.from_dlpack(mg.tensor(0, readonly=True))
            assert not ro.flags.writeable and ro.ctypes.data == x.ctypes.data
    stage.seal(1)
    np.testing.assert_array_equal(values_in_prim_order(one_group(stage, q4, "pos")), np.full((4, 3), 3))


# ------------------------------------------------------------------------------------------------
# Versioned and legacy capsules
# ------------------------------------------------------------------------------------------------
def test_versioned_capsule_of_a_read_group(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    cap = g.tensor(0).__dlpack__(max_version=(1, 0))
    v = CapsuleView(cap)
    assert v.name == "dltensor_versioned"
    assert v.version[0] == 1
    assert v.read_only and not v.is_copied
    assert v.device == (1, 0)
    assert v.ndim == 2 and v.shape == (4, 3)
    assert v.strides == (3, 1)  # strides are always filled
    assert v.dtype == (2, 32, 1)  # kDLFloat, 32 bits, lanes 1: numpy refuses DLPack lanes
    assert v.data == column_storage_address(stage, q4.paths, "pos")
    # a newer max_version still gets 1.x
    assert CapsuleView(g.tensor(0).__dlpack__(max_version=(1, 7))).version[0] == 1


def test_versioned_capsule_of_a_compact_group(stage, q4, pos):
    g = one_group(stage, q4, "pos", compact=True)
    assert CapsuleView(g.tensor(0).__dlpack__(max_version=(1, 0))).read_only
    assert not CapsuleView(g.tensor(0, readonly=False).__dlpack__(max_version=(1, 0))).read_only


def test_dlpack_keywords_built_at_run_time_and_unknown_ones(stage, q4, pos):
    # Keyword names that are not the interned strings (made at run time) take the text
    # comparison; a name that is no keyword of __dlpack__ raises TypeError naming it.
    g = one_group(stage, q4, "pos")
    built = {"".join(["max_", "version"]): (1, 0), "".join(["str", "eam"]): None}
    assert all(sys.intern(k) is not k for k in built)  # really not the interned objects
    assert CapsuleView(g.tensor(0).__dlpack__(**built)).version[0] == 1
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_versions'"):
        g.tensor(0).__dlpack__(max_versions=(1, 0))


def test_legacy_request_for_a_read_only_tensor_is_refused(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    for request in ({}, {"max_version": (0, 8)}, {"max_version": None}):
        with pytest.raises(BufferError, match="legacy"):
            g.tensor(0).__dlpack__(**request)
        with pytest.raises(BufferError, match="legacy"):
            g.__dlpack__(**request)
    c = one_group(stage, q4, "pos", compact=True)
    with pytest.raises(BufferError, match="legacy"):
        c.tensor(0).__dlpack__()


def test_consumer_reads_only_allows_a_legacy_zero_copy_export(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    cap = g.tensor(0, consumer_reads_only=True).__dlpack__()
    v = CapsuleView(cap)
    assert v.name == "dltensor"
    assert v.data == column_storage_address(stage, q4.paths, "pos")
    assert v.shape == (4, 3)


def test_legacy_export_of_a_writable_compact_tensor(stage, q4, pos):
    g = one_group(stage, q4, "pos", compact=True)
    cap = g.tensor(0, readonly=False).__dlpack__()
    v = CapsuleView(cap)
    assert v.name == "dltensor" and v.shape == (4, 3)


def test_copy_true_gives_a_writable_copy_elsewhere(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    storage = column_storage_address(stage, q4.paths, "pos")
    c = np.from_dlpack(g.tensor(0), copy=True)
    np.testing.assert_array_equal(c, pos)
    assert c.ctypes.data != storage
    # a copy belongs to the consumer: writable (numpy's own __dlpack__(copy=True) is)
    assert c.flags.writeable, "np.from_dlpack(read_group_tensor, copy=True) gave a read-only array"
    c[:] = 0
    np.testing.assert_array_equal(values_in_prim_order(one_group(stage, q4, "pos")), pos)


def test_copy_true_capsule_is_marked_copied(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    v = CapsuleView(g.tensor(0).__dlpack__(max_version=(1, 0), copy=True))
    assert v.is_copied
    assert v.data != column_storage_address(stage, q4.paths, "pos")
    legacy = CapsuleView(g.tensor(0).__dlpack__(copy=True))  # a copy may go out as legacy
    assert legacy.name == "dltensor" and legacy.data != v.data


def test_dl_device_mismatch_is_a_buffer_error(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    with pytest.raises(BufferError, match="cpu"):
        g.tensor(0).__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    with pytest.raises(BufferError):
        g.__dlpack__(max_version=(1, 0), dl_device=(12, 0))
    # the data's own device is fine
    assert CapsuleView(g.tensor(0).__dlpack__(max_version=(1, 0), dl_device=(1, 0))).device == (1, 0)


def test_a_stream_for_cpu_data_is_a_buffer_error(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    for stream in (1, 2, 5):
        with pytest.raises(BufferError, match="stream"):
            g.tensor(0).__dlpack__(max_version=(1, 0), stream=stream)
    g.tensor(0).__dlpack__(max_version=(1, 0), stream=None)
    g.tensor(0).__dlpack__(max_version=(1, 0), stream=-1)


def test_dlpack_device(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    assert g.__dlpack_device__() == (1, 0)
    assert g.tensor(0).__dlpack_device__() == (1, 0)
    assert g.tensor(0).index == 0


# ------------------------------------------------------------------------------------------------
# Exported data outlives its group and later seals
# ------------------------------------------------------------------------------------------------
def test_export_survives_release_and_later_seals(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    x = np.from_dlpack(g.tensor(0))
    c = one_group(stage, q4, "pos", compact=True)
    y = np.from_dlpack(c.tensor(0, readonly=False))
    address = x.ctypes.data
    g.release()
    c.release()
    del g, c
    gc.collect()
    for k in range(2, 6):  # overwrite the attribute and seal again, several times
        stage.write("pos", q4, np.full((4, 3), -k, np.float32), k)
        stage.seal(k)
        # the old export still shows the old values, at its old address
        assert x.ctypes.data == address
        np.testing.assert_array_equal(x, pos)
        np.testing.assert_array_equal(y, pos)
        np.testing.assert_array_equal(values_in_prim_order(one_group(stage, q4, "pos")), np.full((4, 3), -k))
    # a sparse write: the stage must not write into the buffer the export holds
    stage.write("pos", q4, np.full((4, 3), 9, np.float32), 6, mask=[True, False, False, False])
    stage.seal(6)
    np.testing.assert_array_equal(x, pos)


def test_export_survives_a_delete_of_the_prims(stage, q4, pos):
    g = one_group(stage, q4, "pos")
    x = np.from_dlpack(g.tensor(0))
    g.release()
    stage.delete(q4, 2)
    stage.seal(2)
    assert list(stage.read(q4, "pos")) == []
    np.testing.assert_array_equal(x, pos)


# ------------------------------------------------------------------------------------------------
# Producers' deleters: exactly once, on every path
# ------------------------------------------------------------------------------------------------
def test_copied_write_releases_the_caller_array_at_once(stage, q4):
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    before = sys.getrefcount(a)
    op = stage.write("pos", q4, a, 1)
    assert sys.getrefcount(a) == before, "a copied (host) write kept a reference after the call"
    del op
    stage.seal(1)
    assert sys.getrefcount(a) == before


def test_adopted_write_holds_one_reference_until_overwritten(stage, q4):
    b = np.arange(12, dtype=np.float32).reshape(4, 3)
    before = sys.getrefcount(b)
    stage.write("pos", q4, b, 1, adopt=True)
    assert sys.getrefcount(b) == before + 1
    stage.seal(1)
    assert sys.getrefcount(b) == before + 1
    stage.write("pos", q4, np.zeros((4, 3), np.float32), 2)  # a dense overwrite
    stage.seal(2)
    gc.collect()
    assert sys.getrefcount(b) == before, "the column no longer needs the adopted array: released"


def test_adopted_write_is_released_by_close():
    b = np.arange(12, dtype=np.float32).reshape(4, 3)
    before = sys.getrefcount(b)
    st = kstage.Stage()
    st.write("pos", [f"/p{i}" for i in range(4)], b, 1, adopt=True)
    st.seal(1)
    g = one_group(st, [f"/p{i}" for i in range(4)], "pos")
    x = np.from_dlpack(g.tensor(0))
    assert x.ctypes.data == b.ctypes.data
    st.close()
    del g
    gc.collect()
    # the export x still needs b's memory: the stage's reference may live on through it
    np.testing.assert_array_equal(x, np.arange(12, dtype=np.float32).reshape(4, 3))
    del x
    gc.collect()
    assert sys.getrefcount(b) == before


def test_adopted_write_is_released_while_a_held_group_pins_it_no_longer(stage, q4):
    b = np.ones((4, 3), np.float32)
    before = sys.getrefcount(b)
    stage.write("pos", q4, b, 1, adopt=True)
    stage.seal(1)
    g = one_group(stage, q4, "pos")
    stage.write("pos", q4, np.zeros((4, 3), np.float32), 2)
    stage.seal(2)
    assert sys.getrefcount(b) == before + 1  # the held group pins the old storage
    g.release()
    del g
    gc.collect()
    assert sys.getrefcount(b) == before


def versioned_and_legacy():
    return pytest.mark.parametrize("producer", [CountingProducer, LegacyCountingProducer],
                                   ids=["versioned", "legacy"])


@versioned_and_legacy()
def test_deleter_once_for_a_copied_write(stage, q4, producer):
    c = Counter()
    p = producer(np.arange(12, dtype=np.float32).reshape(4, 3), c, "a")
    stage.write("pos", q4, p, 1)
    assert c.calls == {"a": 1}
    stage.seal(1)
    stage.close()
    assert c.calls == {"a": 1}


@versioned_and_legacy()
def test_deleter_once_for_an_adopted_write(stage, q4, producer):
    c = Counter()
    p = producer(np.arange(12, dtype=np.float32).reshape(4, 3), c, "a")
    stage.write("pos", q4, p, 1, adopt=True)
    assert c.calls == {"a": 0}
    stage.seal(1)
    g = one_group(stage, q4, "pos")
    x = np.from_dlpack(g.tensor(0))
    g.release()
    del g
    assert x.ctypes.data == p.array.ctypes.data  # adopted: zero copy
    assert c.calls == {"a": 0}
    stage.write("pos", q4, np.zeros((4, 3), np.float32), 2)
    stage.seal(2)
    gc.collect()
    assert c.calls == {"a": 0}  # the export x still holds it
    del x
    gc.collect()
    assert c.calls == {"a": 1}
    stage.close()
    assert c.calls == {"a": 1}


@versioned_and_legacy()
@pytest.mark.parametrize("adopt", [False, True], ids=["copied", "adopted"])
def test_deleter_once_for_a_rejected_write(stage, q4, producer, adopt):
    stage.write("pos", q4, np.zeros((4, 3), np.float32), 1)
    stage.seal(1)
    c = Counter()
    cases = {
        "dtype": (producer(np.zeros((4, 3), np.float64), c, "dtype"), {}),
        "rows": (producer(np.zeros((3, 3), np.float32), c, "rows"), {}),
        "floor": (producer(np.zeros((4, 3), np.float32), c, "floor"), {"ordinal": 1}),
        "count0": (producer(np.zeros((4, 3), np.float32), c, "count0"), {"count": 0}),
        "insert": (producer(np.zeros((4, 3), np.float32), c, "insert"), {"mode": "insert"}),
        "row_counts": (producer(np.zeros(4, np.float32), c, "row_counts"), {"row_counts": [1, 1, 1, 1]}),
    }
    for name, (p, kw) in cases.items():
        ordinal = kw.pop("ordinal", 2)
        if name == "row_counts" and not adopt:
            continue  # a packed ragged write of a fixed column: only adopt=True refuses it early
        with pytest.raises(ValueError):
            stage.write("pos", q4, p, ordinal, adopt=adopt, **kw)
        # count=0 is refused before the data is even asked for; every other tensor taken is
        # deleted exactly once
        assert p.exports == (0 if name == "count0" else 1)
        assert c.calls.get(name, 1) == 1, f"{name}: the producer's deleter ran {c.calls[name]} time(s)"
    stage.close()
    assert c.not_once() == {}


def test_deleters_once_for_a_rejected_write_batch(stage, q4):
    c = Counter()
    writes = {
        "a": kstage.Write(CountingProducer(np.zeros(4), c, "a"), adopt=True),
        "b": CountingProducer(np.zeros(4), c, "b"),
        "bad": kstage.Write(CountingProducer(np.zeros(3), c, "bad"), adopt=True),
        "d": kstage.Write([CountingProducer(np.zeros(i, np.int32), c, f"d{i}") for i in range(4)]),
    }
    with pytest.raises(kstage.InvalidArgument):
        stage.write_batch(q4, 1, writes)
    assert c.not_once() == {}, c.calls
    assert c.total() == 7


def test_deleters_once_when_a_later_entry_fails_to_import(stage, q4):
    c = Counter()
    writes = {
        "a": kstage.Write(CountingProducer(np.zeros(4), c, "a"), adopt=True),
        "b": CountingProducer(np.zeros(4), c, "b"),
        "c": object(),  # no __dlpack__: TypeError before any C call
    }
    with pytest.raises(TypeError, match="__dlpack__"):
        stage.write_batch(q4, 1, writes)
    assert c.calls == {"a": 1, "b": 1}


def test_deleters_once_for_ragged_rows(stage, q4):
    c = Counter()
    rows = [CountingProducer(np.arange(i, dtype=np.int32), c, f"r{i}") for i in range(4)]
    stage.write("nbr", q4, rows, 1)
    assert c.calls == {f"r{i}": 1 for i in range(4)}
    rows = [CountingProducer(np.arange(i, dtype=np.int32), c, f"s{i}") for i in range(4)]
    stage.write("nbr", q4, rows, 2, adopt=True)
    stage.seal(2)
    (g,) = stage.read(q4, "nbr")
    assert [np.from_dlpack(g.tensor(i)).tolist() for i in range(4)] == [[], [0], [0, 1], [0, 1, 2]]
    g.release()
    stage.close()
    assert c.not_once() == {}, c.calls
    assert c.total() == 8


def test_deleter_once_for_a_raw_capsule(stage, q4):
    c = Counter()
    a = np.arange(4, dtype=np.float64)
    cap = make_capsule(a, c, "cap")
    stage.write("v", q4, cap, 1)
    assert c.calls == {"cap": 1}
    with pytest.raises(ValueError, match="used"):  # a consumed capsule cannot be imported twice
        stage.write("v", q4, cap, 2)
    assert c.calls == {"cap": 1}
    legacy = make_capsule(a, c, "legacy", versioned=False)
    stage.write("v", q4, legacy, 3, adopt=True)
    stage.seal(3)
    np.testing.assert_array_equal(values_in_prim_order(one_group(stage, q4, "v")), a)
    stage.close()
    assert c.calls == {"cap": 1, "legacy": 1}


class _RaisingProducer:
    def __dlpack__(self, **kw):
        raise ValueError("the producer refuses")

    def __dlpack_device__(self):
        return (1, 0)


class _NotACapsuleProducer:
    def __dlpack__(self, **kw):
        return 42

    def __dlpack_device__(self):
        return (1, 0)


def test_producer_errors_propagate_and_change_nothing(stage, q4, pos):
    with pytest.raises(ValueError, match="the producer refuses"):
        stage.write("pos", q4, _RaisingProducer(), 2)
    with pytest.raises((ValueError, TypeError), match="[Cc]apsule"):
        stage.write("pos", q4, _NotACapsuleProducer(), 2)
    c = Counter()
    with pytest.raises(ValueError, match="the producer refuses"):
        stage.write_batch(q4, 2, {"pos": kstage.Write(CountingProducer(pos, c, "first"), adopt=True),
                                  "other": _RaisingProducer()})
    assert c.calls == {"first": 1}
    stage.seal(2)
    np.testing.assert_array_equal(values_in_prim_order(one_group(stage, q4, "pos")), pos)


def test_numpy_capsule_can_be_passed_directly(stage, q4):
    a = np.arange(4, dtype=np.float64)
    stage.write("v", q4, a.__dlpack__(max_version=(1, 0)), 1)
    stage.write("w", q4, a.__dlpack__(), 1)
    stage.seal(1)
    np.testing.assert_array_equal(values_in_prim_order(one_group(stage, q4, "v")), a)
    np.testing.assert_array_equal(values_in_prim_order(one_group(stage, q4, "w")), a)


def test_deleter_once_for_an_unknown_dlpack_major_version(stage, q4):
    c = Counter()
    p = CountingProducer(np.zeros(4), c, "v2", major=2)
    with pytest.raises(BufferError, match="2.x"):
        stage.write("v", q4, p, 1)
    assert c.calls == {"v2": 1}


def test_read_only_producer_is_copied_not_written(stage, q4):
    c = Counter()
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    keep = a.copy()
    stage.write("pos", q4, CountingProducer(a, c, "ro", read_only=True), 1, adopt=True)
    stage.seal(1)
    stage.write("pos", q4, np.full((4, 3), 5, np.float32), 2, mask=[False, True, False, False])
    stage.seal(2)
    np.testing.assert_array_equal(a, keep)
    stage.close()
    assert c.calls == {"ro": 1}


def test_unused_capsules_of_exports_free_their_tensor(stage, q4, pos):
    # A capsule nobody consumed deletes its tensor when collected: many of them, then the
    # group is released, and the data of a still-held export is intact.
    g = one_group(stage, q4, "pos")
    keep = np.from_dlpack(g.tensor(0))
    for _ in range(1000):
        g.tensor(0).__dlpack__(max_version=(1, 0))
        g.tensor(0, consumer_reads_only=True).__dlpack__()
    g.release()
    stage.write("pos", q4, np.zeros((4, 3), np.float32), 2)
    stage.seal(2)
    gc.collect()
    np.testing.assert_array_equal(keep, pos)
