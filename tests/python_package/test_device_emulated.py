# SPDX-License-Identifier: Apache-2.0
"""The emulated device (DLPack kDLExtDev = 12, ordinals 0 and 1; test builds with
KSTAGE_EMULATED_DEVICE=ON): device columns written from numpy, reads to the host, zero-copy
device exports with __dlpack_device__ and streams, device-to-device writes, slow device work,
and producers' deleters run from the device's worker thread. Every test skips when this kstage
has no emulated device (a pip build)."""
import ctypes
import gc
import sys
import threading
import time

import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import CapsuleView, emulated_api  # noqa: E402

EXT = 12
PATHS = [f"/dev/p{i}" for i in range(64)]
DATA = np.arange(64 * 3, dtype=np.float32).reshape(64, 3)


@pytest.fixture
def emu(emulated):
    """The emulated device's test API (libkstage's kstage_emulated_* functions)."""
    api = emulated_api()
    if api is None:
        pytest.skip("libkstage exports no kstage_emulated_* test API")
    yield api
    api.kstage_emulated_set_kernel_delay_us(0)


@pytest.fixture
def dstage(emulated):
    s = kstage.Stage()
    yield s
    s.close()


def device_column(stage, attr="pos", data=DATA, ordinal=1, ordinal_device=0):
    op = stage.write(attr, PATHS, data, ordinal, residency=(EXT, ordinal_device))
    assert op.wait(10)
    stage.seal(ordinal)


def host_copy(emu, view, dtype, shape):
    """A host copy of device memory (a capsule's data), through the emulated device's memcpy."""
    out = np.empty(shape, dtype)
    emu.kstage_emulated_memcpy(out.ctypes.data, view.data, out.nbytes)
    return out


# ------------------------------------------------------------------------------------------------
# Device columns and reads to the host
# ------------------------------------------------------------------------------------------------
def test_device_column_read_to_cpu_equals_the_data(dstage):
    device_column(dstage)
    for kw in ({"device": "cpu"}, {"device": (1, 0), "compact": True}, {"device": "cpu", "compact": True}):
        (g,) = dstage.read(PATHS, "pos", **kw)
        assert g.device == (1, 0) and g.__dlpack_device__() == (1, 0)
        x = np.from_dlpack(g.tensor(0))
        np.testing.assert_array_equal(x, DATA)
        assert g.index_map is None  # landed in prim order


def test_read_to_another_device_is_compact(dstage):
    # kstage_read_desc_t.target_device: "A device other than the residency implies compact"
    device_column(dstage)
    (g,) = dstage.read(PATHS, "pos", device="cpu")
    assert g.compact
    w = np.from_dlpack(g.tensor(0, readonly=False))  # the read's own buffer: writable on request
    assert w.flags.writeable
    w[:] = 0
    (g2,) = dstage.read(PATHS, "pos", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(g2), DATA)


def test_zero_copy_device_group_exports_on_the_device(dstage, emu):
    device_column(dstage)
    (g,) = dstage.read(PATHS, "pos")
    assert g.device == (EXT, 0) and g.__dlpack_device__() == (EXT, 0)
    assert g.tensor(0).__dlpack_device__() == (EXT, 0)
    v = CapsuleView(g.tensor(0).__dlpack__(max_version=(1, 0)))
    assert v.versioned and v.read_only and v.device == (EXT, 0)
    assert v.shape == (64, 3)
    assert emu.kstage_emulated_ordinal_of(v.data) == 0  # the memory is the device's arena
    rows = np.arange(64) if g.index_map is None else np.asarray(g.index_map)
    np.testing.assert_array_equal(host_copy(emu, v, np.float32, (64, 3))[rows], DATA)


def test_device_export_streams(dstage):
    device_column(dstage)
    (g,) = dstage.read(PATHS, "pos")
    # None and 1: the legacy default stream (the array API's rule); -1: none
    for stream in (None, 1, -1):
        v = CapsuleView(g.__dlpack__(max_version=(1, 0), stream=stream))
        assert v.device == (EXT, 0)
    # 0 is ambiguous outside ROCm (the emulated device follows CUDA's rules): refused, not taken
    # as "nothing to order"
    with pytest.raises(BufferError, match="stream=0"):
        g.__dlpack__(max_version=(1, 0), stream=0)
    with pytest.raises(kstage.InvalidArgument, match="stream"):
        g.__dlpack__(max_version=(1, 0), stream=12345)  # not a stream of the emulated device


def test_dlpack_stream_minus_one_is_released_after_the_device(dstage, emu):
    # Issue #52, defect 8: __dlpack__(stream=-1) names no consumer stream, so the export's deleter
    # waits for the whole device before kstage may reuse the memory (KSTAGE_STREAM_UNORDERED).
    # Before, it freed the memory on kstage's stream at once, with the consumer's read queued.
    device_column(dstage)
    device_column(dstage, "other", np.full((64, 3), -1.0, np.float32), 2)
    (g,) = dstage.read(PATHS, "pos", compact=True)  # a buffer of the read's own
    cap = g.__dlpack__(max_version=(1, 0), stream=-1)
    view = CapsuleView(cap)
    g.release()
    # Stream -1 orders nothing for the consumer either: it waits for the device before it reads
    # (else its copy, delayed below as much as kstage's gather, may read the buffer first).
    emu.kstage_emulated_device_synchronize(0)
    stream = emu.kstage_emulated_stream_create(0)
    done = emu.kstage_emulated_event_create()
    # Pinned memory, written in stream order (a copy to pageable memory would return done).
    emu.kstage_emulated_host_malloc.argtypes = [ctypes.c_size_t]
    emu.kstage_emulated_host_malloc.restype = ctypes.c_void_p
    emu.kstage_emulated_host_free.argtypes = [ctypes.c_void_p]
    emu.kstage_emulated_host_free.restype = None
    nbytes = DATA.nbytes
    address = emu.kstage_emulated_host_malloc(nbytes)
    assert address
    pinned = np.ctypeslib.as_array((ctypes.c_float * DATA.size).from_address(address))
    emu.kstage_emulated_set_kernel_delay_us(200000)  # the consumer's read runs about 0.2 s late
    try:
        assert emu.kstage_emulated_memcpy_async(stream, address, view.data, nbytes) == 0
        emu.kstage_emulated_event_record(done, stream)
        del cap  # unconsumed: its destructor runs the deleter, right after the read was enqueued
        read_before_release_returned = emu.kstage_emulated_event_query(done) == 1
    finally:
        emu.kstage_emulated_set_kernel_delay_us(0)
    (g2,) = dstage.read(PATHS, "other", compact=True)  # kstage's next allocation of that size
    emu.kstage_emulated_event_synchronize(done)
    assert read_before_release_returned
    np.testing.assert_array_equal(pinned.reshape(64, 3), DATA)
    emu.kstage_emulated_host_free(address)
    g2.release()
    emu.kstage_emulated_event_destroy(done)
    emu.kstage_emulated_stream_destroy(stream)


def test_stream_zero_is_refused_for_device_producers(dstage):
    # A producer's stream=0 on a device other than ROCm would order nothing (a race with the
    # producer): writes, map commits and abandon refuse it, naming it, and change nothing.
    device_column(dstage)
    (g,) = dstage.read(PATHS, "pos")
    # (A write first asks its producer's __dlpack__ with that stream: kstage's own export, the
    # producer here, refuses it as the array API says a producer does: BufferError.)
    with pytest.raises((BufferError, kstage.InvalidArgument), match="stream=0"):
        dstage.write("pos2", PATHS, g, 2, stream=0)
    m = dstage.map(PATHS, "m", 2, dtype="f4", lanes=3, residency=(EXT, 0))
    groups = list(m)
    with pytest.raises(kstage.InvalidArgument, match="stream=0"):
        groups[0].commit(stream=0)
    with pytest.raises(kstage.InvalidArgument, match="stream=0"):
        m.commit(stream=0)
    with pytest.raises(kstage.InvalidArgument, match="stream=0"):
        m.abandon(stream=0)
    assert not m.ended
    m.commit(stream=1)
    dstage.seal(2)
    (back,) = dstage.read(PATHS, "m", device="cpu", compact=True)  # the map still committed
    assert np.from_dlpack(back.tensor(0)).shape == (64, 3)
    assert list(dstage.read(PATHS, "pos2", compact=True)) == []  # the refused write wrote nothing


def test_stream_minus_one_means_nothing_to_order(dstage):
    # The array API's -1 ("no synchronisation") is taken wherever a stream is: reads, device
    # writes and map commits, as well as __dlpack__.
    device_column(dstage)
    (g,) = dstage.read(PATHS, "pos", stream=-1)
    assert g.__dlpack_device__() == (EXT, 0)
    assert dstage.write("pos2", PATHS, g, 2, stream=-1).wait(10)
    m = dstage.map(PATHS, "m", 2, dtype="f4", lanes=3, residency=(EXT, 0))
    for mg in m:
        pass
    m.commit(stream=-1)
    dstage.seal(2)
    (back,) = dstage.read(PATHS, "pos2", device="cpu", compact=True)
    assert np.array_equal(np.from_dlpack(back.tensor(0)), DATA)
    with pytest.raises(kstage.InvalidArgument, match="not -2"):
        dstage.read(PATHS, "pos", stream=-2)


def test_device_export_refusals(dstage):
    device_column(dstage)
    (g,) = dstage.read(PATHS, "pos")
    with pytest.raises(BufferError, match="copy"):
        g.__dlpack__(max_version=(1, 0), copy=True)
    with pytest.raises(BufferError, match="cpu"):
        g.__dlpack__(max_version=(1, 0), dl_device=(1, 0))
    with pytest.raises(BufferError, match="legacy"):
        g.__dlpack__()
    legacy = CapsuleView(g.tensor(0, consumer_reads_only=True).__dlpack__())
    assert legacy.name == "dltensor" and legacy.device == (EXT, 0)
    with pytest.raises((BufferError, RuntimeError)):
        np.from_dlpack(g)  # numpy cannot take device memory


def test_second_ordinal_and_stage_residency(emulated, emu):
    with kstage.Stage(residency=(EXT, 1)) as s:
        s.write("pos", PATHS, DATA, 1).wait(10)
        s.seal(1)
        (g,) = s.read(PATHS, "pos")
        assert g.device == (EXT, 1)
        assert emu.kstage_emulated_ordinal_of(CapsuleView(g.__dlpack__(max_version=(1, 0))).data) == 1
        (h,) = s.read(PATHS, "pos", device="cpu")
        np.testing.assert_array_equal(np.from_dlpack(h), DATA)
    with kstage.Stage(residency="ext_dev:0") as s:
        s.write("pos", PATHS, DATA, 1).wait(10)
        s.seal(1)
        assert [g.device for g in s.read(PATHS, "pos")] == [(EXT, 0)]


def test_bad_device_ordinal(emulated):
    with pytest.raises((kstage.InvalidArgument, kstage.NotSupported)):
        with kstage.Stage() as s:
            s.write("pos", PATHS, DATA, 1, residency=(EXT, 7))


def test_transfer_counts(dstage):
    h2d0, d2h0, _ = kstage.transfer_counts()
    device_column(dstage)
    h2d1, d2h1, _ = kstage.transfer_counts()
    assert h2d1 > h2d0 and d2h1 == d2h0
    (g,) = dstage.read(PATHS, "pos")  # zero-copy: no transfer
    g.__dlpack__(max_version=(1, 0))
    assert kstage.transfer_counts()[:2] == (h2d1, d2h1)
    (c,) = dstage.read(PATHS, "pos", device="cpu")
    assert kstage.transfer_counts()[1] > d2h1


def test_device_to_device_write_takes_no_detour_through_the_host(emulated):
    with kstage.Stage(residency=(EXT, 0)) as a, kstage.Stage(residency=(EXT, 0)) as b:
        device_column(a)
        (g,) = a.read(PATHS, "pos")
        before = kstage.transfer_counts()[:2]
        assert b.write("pos", PATHS, g, 1).wait(10)  # a device export as a producer
        assert b.write("adopted", PATHS, g, 1, adopt=True).wait(10)
        b.seal(1)
        assert kstage.transfer_counts()[:2] == before
        (ad,) = b.read(PATHS, "adopted")
        # adopted (dense, on the column's device): b's storage is a's, no copy
        assert CapsuleView(ad.__dlpack__(max_version=(1, 0))).data == CapsuleView(g.__dlpack__(max_version=(1, 0))).data
        for h in b.read(PATHS, ["pos", "adopted"], device="cpu"):
            np.testing.assert_array_equal(np.from_dlpack(h), DATA)
        # the producer's stream for device data: 1 is the device's default stream; an unknown one
        # is refused
        assert b.write("s1", PATHS, g, 2, stream=1).wait(10)
        with pytest.raises(kstage.InvalidArgument, match="stream"):
            b.write("s2", PATHS, g, 2, stream=12345)


def test_device_map(dstage, emu):
    with dstage.map(PATHS, "m", 1, dtype=("f4", 3), residency=(EXT, 0)) as m:
        for g in m:
            assert g.device == (EXT, 0)
            v = CapsuleView(g.tensor(0).__dlpack__(max_version=(1, 0)))
            assert v.device == (EXT, 0) and not v.read_only
            rows = np.arange(len(g)) if g.index_map is None else np.asarray(g.index_map)
            src = np.empty((64, 3), np.float32)
            src[rows] = DATA
            emu.kstage_emulated_memcpy(v.data, src.ctypes.data, src.nbytes)
    dstage.seal(1)
    (h,) = dstage.read(PATHS, "m", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(h), DATA)


def test_device_index_map_is_read_in_place_and_checked_on_the_device(dstage, emu):
    five = PATHS[:5]
    # A uint32 device column, read as a device group: a DLPack index tensor on the device.
    assert dstage.write("idx", five, np.array([3, 0, 2, 2, 1], np.uint32), 1, residency=(EXT, 0)).wait(10)
    assert dstage.write("bad", five, np.array([0, 1, 9, 0, 0], np.uint32), 1, residency=(EXT, 0)).wait(10)
    assert dstage.write("src", PATHS[:4], np.array([10, 20, 30, 40], np.float32), 1,
                        residency=(EXT, 0)).wait(10)
    dstage.seal(1)
    (imap,) = dstage.read(five, "idx")
    (bad,) = dstage.read(five, "bad")
    (src,) = dstage.read(PATHS[:4], "src")
    assert imap.device == (EXT, 0)
    before = kstage.transfer_counts()
    assert dstage.write("x", five, src, 2, index_map=imap).wait(10)
    after = kstage.transfer_counts()
    assert after[0] == before[0] and after[2] == before[2]  # nothing up: no copy, no upload
    assert after[1] == before[1] + 1  # the check's 8-byte report
    dstage.seal(2)
    (h,) = dstage.read(five, "x", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(h), [40, 10, 30, 30, 20])
    # A bad entry: the call is accepted, the op fails, the write is never applied.
    op = dstage.write("x", five, src, 3, index_map=bad)
    with pytest.raises(kstage.InvalidArgument, match=r"index_map\[2\] = 9 references a source row outside"):
        op.wait(10)
    dstage.seal(3)
    (h,) = dstage.read(five, "x", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(h), [40, 10, 30, 30, 20])
    # Only integers of 32 bits, or int64, are read on the device.
    with pytest.raises(kstage.InvalidArgument, match="int64, int32 or uint32 entries, not float32"):
        dstage.write("x", PATHS[:4], src, 4, index_map=src)


def test_device_int64_index_map_is_passed_through_and_checked_on_the_device(dstage, emu):
    # torch's and cupy's index dtype: int64 on the device, read in place as index_map64.
    five = PATHS[:5]
    assert dstage.write("idx", five, np.array([3, 0, 2, 2, 1], np.int64), 1, residency=(EXT, 0)).wait(10)
    assert dstage.write("neg", five, np.array([0, 1, -2, 0, 0], np.int64), 1, residency=(EXT, 0)).wait(10)
    assert dstage.write("u16", five, np.array([0, 1, 2, 0, 0], np.uint16), 1, residency=(EXT, 0)).wait(10)
    assert dstage.write("src", PATHS[:4], np.array([10, 20, 30, 40], np.float32), 1,
                        residency=(EXT, 0)).wait(10)
    dstage.seal(1)
    (imap,) = dstage.read(five, "idx")
    (neg,) = dstage.read(five, "neg")
    (u16,) = dstage.read(five, "u16")
    (src,) = dstage.read(PATHS[:4], "src")
    before = kstage.transfer_counts()
    assert dstage.write("x", five, src, 2, index_map=imap).wait(10)
    after = kstage.transfer_counts()
    assert after[0] == before[0] and after[2] == before[2]  # no conversion on the host, no upload
    assert after[1] == before[1] + 1  # the check's report
    dstage.seal(2)
    (h,) = dstage.read(five, "x", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(h), [40, 10, 30, 30, 20])
    op = dstage.write("x", five, src, 3, index_map=neg)
    with pytest.raises(kstage.InvalidArgument,
                       match=r"index_map64\[2\] = -2 references a source row outside the transported row count 4"):
        op.wait(10)
    dstage.seal(3)
    (h,) = dstage.read(five, "x", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(h), [40, 10, 30, 30, 20])
    with pytest.raises(kstage.InvalidArgument, match="int64, int32 or uint32 entries, not uint16"):
        dstage.write("x", five, src, 4, index_map=u16)


def test_a_read_hands_out_a_device_index_map_as_a_device_tensor(dstage, emu):
    eight = PATHS[:8]
    assert dstage.write("pos", eight, DATA[:8], 1, residency=(EXT, 0)).wait(10)
    assert dstage.write("hpos", eight, DATA[:8], 1, residency="cpu").wait(10)
    dstage.seal(1)
    backwards = eight[::-1]  # a zero-copy group of these prims needs an index map
    before = kstage.transfer_counts()
    (g,) = dstage.read(backwards, "pos", device_index_map=True)
    t = g.index_map
    assert isinstance(t, kstage.Tensor)
    assert t.__dlpack_device__() == (EXT, 0)
    # Ordered on the device's default stream (1), which the emulated memcpy uses.
    capsule = t.__dlpack__(max_version=(1, 0), stream=1)
    cap = CapsuleView(capsule)
    assert cap.device == (EXT, 0) and cap.shape == (8,) and cap.dtype == (1, 32, 1) and cap.read_only
    assert emu.kstage_emulated_ordinal_of(cap.data) == 0
    np.testing.assert_array_equal(host_copy(emu, cap, np.uint32, (8,)), np.arange(8)[::-1])
    # No copy of the map down to the host; at most one upload of it (the column's cached copy).
    after = kstage.transfer_counts()
    assert after[1] == before[1] and after[2] - before[2] <= 1
    # The export outlives the group; a writable one is refused.
    g.release()
    np.testing.assert_array_equal(host_copy(emu, cap, np.uint32, (8,)), np.arange(8)[::-1])
    del cap, capsule
    (g2,) = dstage.read(backwards, "pos", device_index_map=True)
    with pytest.raises(BufferError, match="index map .* exports read-only"):
        g2.index_map.__dlpack__(max_version=(1, 0), readonly=False)
    with pytest.raises(BufferError, match="cannot go out as legacy DLPack"):
        g2.index_map.__dlpack__()  # a legacy consumer: it cannot be told read-only
    g2.release()
    with pytest.raises(kstage.InvalidHandle, match="released"):
        t.__dlpack__(max_version=(1, 0))
    # Without the flag, a host numpy view; a host column's map is host memory either way.
    (h,) = dstage.read(backwards, "pos")
    assert isinstance(h.index_map, np.ndarray)
    np.testing.assert_array_equal(h.index_map, np.arange(8)[::-1])
    (hh,) = dstage.read(backwards, "hpos", device_index_map=True)
    assert isinstance(hh.index_map, np.ndarray)
    np.testing.assert_array_equal(hh.index_map, np.arange(8)[::-1])


def test_device_mask_is_read_in_place(dstage, emu):
    four = PATHS[:4]
    assert dstage.write("src", four, np.array([10, 20, 30, 40], np.float32), 1, residency=(EXT, 0)).wait(10)
    assert dstage.write("m", PATHS[:1], np.array([0b1010], np.uint64), 1, residency=(EXT, 0)).wait(10)
    assert dstage.write("x", four, np.zeros(4, np.float32), 1, residency=(EXT, 0)).wait(10)
    dstage.seal(1)
    (src,) = dstage.read(four, "src")
    (mask,) = dstage.read(PATHS[:1], "m")  # one uint64 word on the device: elements 1 and 3
    before = kstage.transfer_counts()
    assert dstage.write("x", four, src, 2, mask=mask, count=4).wait(10)
    assert kstage.transfer_counts()[0] == before[0] and kstage.transfer_counts()[2] == before[2]
    dstage.seal(2)
    (h,) = dstage.read(four, "x", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(h), [0, 20, 0, 40])
    with pytest.raises(kstage.InvalidArgument, match="needs count="):
        dstage.write("x", four, src, 3, mask=mask)
    with pytest.raises(kstage.InvalidArgument, match="uint64 words"):
        dstage.write("x", four, src, 3, mask=src, count=4)


# ------------------------------------------------------------------------------------------------
# Slow device work, lifetimes and deleters on the worker thread
# ------------------------------------------------------------------------------------------------
def test_slow_device_work_and_op_wait(dstage, emu):
    device_column(dstage)
    emu.kstage_emulated_set_kernel_delay_us(100_000)  # every device kernel and copy sleeps 0.1 s
    op = dstage.write("pos", PATHS, DATA + 1, 2)
    assert not op.done
    assert op.wait(0) is False  # a timeout is False, not an exception
    assert op.wait(0.001) is False
    assert op.error == ""
    dstage.seal(2)  # sealing does not wait for the copy, reads order after it
    emu.kstage_emulated_set_kernel_delay_us(0)
    (h,) = dstage.read(PATHS, "pos", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(h), DATA + 1)
    assert op.wait(10) is True and op.done


def test_op_sync_orders_a_producer_after_the_write_on_the_device(dstage, emu):
    # Op.sync (kstage_op_sync): the producer's event is recorded after the write's copies out of
    # its array (on the device, no host wait): not complete while they run, complete after.
    device_column(dstage)
    event = emu.kstage_emulated_event_create()
    stream = emu.kstage_emulated_stream_create(0)
    try:
        emu.kstage_emulated_set_kernel_delay_us(100_000)
        op = dstage.write("pos", PATHS, DATA + 1, 2)
        op.sync(stream=stream, event=event)
        assert emu.kstage_emulated_event_query(event) == 0 and not op.done
        emu.kstage_emulated_event_synchronize(event)
        assert op.done  # the event is past the op's work
        op.sync()  # nothing to order: fine
        op.sync(stream=-1)
        with pytest.raises(kstage.InvalidArgument, match="consumer.event"):
            op.sync(event=0x7777)
        op.release()
        with pytest.raises(kstage.InvalidHandle):
            op.sync(event=event)
        # A host op takes no stream or event.
        host = dstage.write("h", PATHS, DATA, 2)
        host.sync()
        with pytest.raises(kstage.InvalidArgument, match="consumer"):
            host.sync(stream=stream)
    finally:
        emu.kstage_emulated_set_kernel_delay_us(0)
        emu.kstage_emulated_stream_destroy(stream)
        emu.kstage_emulated_event_destroy(event)


def test_copied_write_keeps_the_array_until_the_op_is_done(dstage, emu):
    device_column(dstage)
    a = DATA + 5
    before = sys.getrefcount(a)
    emu.kstage_emulated_set_kernel_delay_us(50_000)
    op = dstage.write("pos", PATHS, a, 2)
    assert sys.getrefcount(a) > before  # the device copy still reads it
    assert op.wait(10)
    gc.collect()
    assert sys.getrefcount(a) == before
    emu.kstage_emulated_set_kernel_delay_us(0)


def test_op_dropped_without_wait_on_a_slow_device(dstage, emu):
    device_column(dstage)
    arrays = [DATA + k for k in range(2, 8)]
    counts = [sys.getrefcount(x) for x in arrays]
    emu.kstage_emulated_set_kernel_delay_us(20_000)
    for k, x in enumerate(arrays, start=2):
        dstage.write("pos", PATHS, x, k)  # dropped at once: the Op waits for its copy
    del x
    dstage.seal(7)
    emu.kstage_emulated_set_kernel_delay_us(0)
    (h,) = dstage.read(PATHS, "pos", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(h), arrays[-1])
    gc.collect()
    assert [sys.getrefcount(x) for x in arrays] == counts


def test_adopted_numpy_into_a_device_column_is_released(emulated, emu):
    # A host array adopted into a device column: copied to the device, and its deleter may run
    # on the device's worker thread (the box takes the GIL for numpy's deleter).
    arrays = [DATA + k for k in range(6)]
    counts = [sys.getrefcount(x) for x in arrays]
    emu.kstage_emulated_set_kernel_delay_us(10_000)
    s = kstage.Stage(residency=(EXT, 0))
    ops = []
    for k, x in enumerate(arrays, start=1):
        ops.append(s.write("pos", PATHS, x, k, adopt=True))
        if k % 2:
            ops.pop()  # some ops dropped at once
    del x
    s.seal(6)
    (h,) = s.read(PATHS, "pos", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(h), arrays[-1])
    s.close()  # waits for work in flight, runs the remaining deleters
    emu.kstage_emulated_set_kernel_delay_us(0)
    del ops
    gc.collect()
    assert [sys.getrefcount(x) for x in arrays] == counts


def test_device_export_outlives_close_and_frees_its_memory(emulated, emu):
    base = emu.kstage_emulated_live_bytes(0)
    s = kstage.Stage()
    device_column(s)
    (g,) = s.read(PATHS, "pos")
    cap = g.tensor(0).__dlpack__(max_version=(1, 0))
    t = g.tensor(0)
    s.write("pos", PATHS, DATA * 0, 2).wait(10)
    s.seal(2)
    s.close()
    del g
    gc.collect()
    v = CapsuleView(cap)
    assert emu.kstage_emulated_live_bytes(0) > base  # the export holds its buffer
    np.testing.assert_array_equal(host_copy(emu, v, np.float32, (64, 3)), DATA)
    with pytest.raises(kstage.InvalidHandle):
        t.__dlpack__(max_version=(1, 0))
    del cap, v, t
    gc.collect()
    assert emu.kstage_emulated_live_bytes(0) == base  # its deleter ran: everything freed


def test_threads_with_device_columns(emulated, emu):
    """Writers on device columns with slow device work (deleters of their arrays run on the
    worker threads and take the GIL) while other threads make GIL-holding calls."""
    from test_threads import run_threads, watchdog

    s = kstage.Stage(residency=(EXT, 0))
    W, K = 3, 30
    stop = threading.Event()
    emu.kstage_emulated_set_kernel_delay_us(500)

    def writer(w):
        q = s.query([f"/t{w}/p{i}" for i in range(64)])
        for k in range(1, K + 1):
            s.write(f"d{w}", q, np.full((64, 3), k, np.float32), k, adopt=bool(k % 2))
            s.seal(k, f"d{w}")
            if k % 5 == 0:
                (h,) = s.read(q, f"d{w}", device="cpu")
                assert (np.from_dlpack(h) == k).all()
                h.release()

    def poker():
        while not stop.is_set():
            s.write_floor()
            s.token("d0")
            s.path(s.intern("/t0/p0"))
            time.sleep(0)

    with watchdog():
        errors = run_threads([lambda w=w: writer(w) for w in range(W)] + [poker, lambda: (time.sleep(0.5), stop.set())])
        stop.set()
        emu.kstage_emulated_set_kernel_delay_us(0)
        s.close()
    assert not errors, "\n".join(errors)


def test_map_commit_stream_none_is_the_legacy_default_stream(dstage, emu):
    # One rule for writes, commits and __dlpack__ (the array API's): stream=None is the legacy
    # default stream (1), so a commit is ordered after what a producer queued there.
    m = dstage.map(PATHS, "m", 1, dtype="f4", lanes=3, residency=(EXT, 0))
    (mg,) = list(m)
    v = CapsuleView(mg.tensor(0).__dlpack__(max_version=(1, 0)))
    rows = np.arange(64) if mg.index_map is None else np.asarray(mg.index_map)
    src = np.empty_like(DATA)
    src[rows] = DATA  # row r of the buffer holds prim index_map^-1(r)
    emu.kstage_emulated_stream_hold(1)
    try:
        assert emu.kstage_emulated_memcpy_async(1, v.data, src.ctypes.data, src.nbytes) == 0
        def release():
            time.sleep(0.05)
            emu.kstage_emulated_stream_release(1)

        t = threading.Thread(target=release)
        t.start()
        m.commit()  # stream=None: kstage's work waits for the held default stream's copy
        dstage.seal(1)
        (back,) = dstage.read(PATHS, "m", device="cpu", compact=True)  # before the release
        got = np.from_dlpack(back.tensor(0)).copy()
        t.join()
    finally:
        emu.kstage_emulated_stream_release(1)
    assert np.array_equal(got, DATA)


def test_abandon_after_the_producers_stream_on_the_device(dstage):
    # A device map given up with the producer's stream: the buffers are freed after its work
    # (None: the legacy default stream); a stream the device does not know is refused and the map
    # stays open; nothing is committed.
    for stream in (None, 1, -1):
        m = dstage.map(PATHS, "given_up", 2, dtype="f4", lanes=3, residency=(EXT, 0))
        for mg in m:
            pass
        if stream is None:
            with pytest.raises(kstage.InvalidArgument, match="producer"):
                m.abandon(stream=12345)
            assert not m.ended
            m.abandon(stream=1)
        else:
            m.abandon(stream=stream)
        assert m.ended
    dstage.seal(2)
    assert dstage.query(has="given_up").paths.tolist() == []


def test_a_device_producer_is_asked_for_the_stream_kstage_waits_on(dstage):
    # (#52, defect 5) kstage orders a write after the stream its stream= names (None: the legacy
    # default stream), and asks the producer's __dlpack__ for that same stream -- 1, not None --
    # so that the producer orders its work before it there.
    device_column(dstage)
    (g,) = dstage.read(PATHS, "pos")

    class Recording:
        def __init__(self, inner):
            self.inner, self.streams = inner, []

        def __dlpack_device__(self):
            return self.inner.__dlpack_device__()

        def __dlpack__(self, stream=None, max_version=None):
            self.streams.append(stream)
            return self.inner.__dlpack__(stream=stream, max_version=max_version)

    p = Recording(g)
    for ordinal, stream in enumerate((None, 1, -1), start=2):
        assert dstage.write("asked", PATHS, p, ordinal, stream=stream).wait(10)
    assert p.streams == [1, 1, -1]
    # A host producer is asked for no stream, whatever the write's.
    host = Recording(np.ones((64, 3), np.float32))
    dstage.write("asked_host", PATHS, host, 5).wait(10)
    assert host.streams == [None]


def test_device_check_reports_a_fault_of_the_device(dstage, emu):
    """Stage.device_check (kstage_device_check, #52 defect 7): a healthy device and the host
    pass; a sticky fault of the device (a copy that faults after the call returned) raises
    DeviceError naming it."""
    device_column(dstage)
    dstage.device_check((EXT, 0))
    dstage.device_check("cpu")
    with pytest.raises(kstage.InvalidArgument):
        dstage.device_check((EXT, 7))
    assert emu.kstage_emulated_inject_fault(0, 2, 1) == 1  # KSTAGE_EMULATED_FAULT_COPY
    emu.kstage_emulated_set_kernel_delay_us(20000)
    try:
        dstage.write("pos", PATHS[:4], DATA[:4], 2, residency=(EXT, 0))  # not waited for
        with pytest.raises(kstage.DeviceError, match="illegal memory access"):
            dstage.device_check((EXT, 0))
    finally:
        emu.kstage_emulated_set_kernel_delay_us(0)
        emu.kstage_emulated_device_reset(0)
