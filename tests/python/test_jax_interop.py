# SPDX-License-Identifier: Apache-2.0
"""JAX <-> kstage through legacy DLPack (DLManagedTensor, capsule "dltensor"), zero-copy both
ways, with every deleter counted (issue 17, item 5). Drives libkstage through ctypes
(kstage_ctypes.py): there is no kstage Python package yet.

  JAX -> kstage: x.__dlpack__() -> legacy_managed_tensors of a dense fixed-size write (adopted)
  kstage -> JAX: kstage_group_export_legacy(..., KSTAGE_EXPORT_CONSUMER_READS_ONLY)
                 -> jax.dlpack.from_dlpack
"""
import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import time

import pytest

jax = pytest.importorskip("jax")
np = pytest.importorskip("numpy")
jnp = jax.numpy

import kstage_ctypes as ks  # noqa: E402
from dlpack_support import CountingLegacy, LegacyExporter, Ledger, take_legacy  # noqa: E402

jax.config.update("jax_platforms", "cpu")


def test_layouts_match_the_header():
    ks.check_layouts()
    assert ks.lib.kstage_version() >= 300  # 0.3: legacy_managed_tensors and residency exist


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
@pytest.fixture
def stage():
    s = ks.Stage()
    yield s
    s.destroy()


def prims(n, prefix="/p"):
    return [f"{prefix}/{i}" for i in range(n)]


def group_values(group, lanes=3):
    """The group's values in prim order, as an (n, lanes) float32 numpy copy."""
    n = group.g.prim_count
    t = group.tensor
    assert t.dtype.code == ks.kDLFloat and t.dtype.bits == 32 and t.dtype.lanes == lanes
    rows = t.shape[0]
    flat = np.ctypeslib.as_array((ctypes.c_float * (rows * lanes)).from_address(group.data_pointer))
    table = flat.reshape(rows, lanes)
    m = group.index_map()
    return (table[np.asarray(m)] if m is not None else table[:n]).copy()


def jax_pointer(a):
    return a.unsafe_buffer_pointer()


def to_kstage_legacy(x, ledger):
    """JAX array -> our counting DLManagedTensor over JAX's legacy export (capsule consumed)."""
    return CountingLegacy(take_legacy(x.__dlpack__()), ledger)


def to_jax(group, ledger):
    """A zero-copy read group -> a JAX array, through the legacy export (deleter counted)."""
    m = group.export_legacy(ks.KSTAGE_EXPORT_CONSUMER_READS_ONLY)
    w = CountingLegacy(m, ledger)
    return jax.dlpack.from_dlpack(LegacyExporter(w.pointer)), w


def wait_for(predicate, seconds=2.0):
    """Buffer release in JAX may lag the Python `del` a little: poll briefly."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        gc.collect()
        time.sleep(0.001)
    return True


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------------------------
# a. JAX -> kstage, zero-copy
# --------------------------------------------------------------------------------------------
def test_jax_array_is_adopted_without_copy_and_deleted_once(stage):
    n = 257
    q = stage.query(prims(n))
    a = stage.token("points")
    ledger = Ledger()

    x = jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3) * 0.5
    x.block_until_ready()
    expected = np.asarray(x).copy()
    xptr = jax_pointer(x)
    w = to_kstage_legacy(x, ledger)
    assert w.wrapper.dl_tensor.data + w.wrapper.dl_tensor.byte_offset == xptr
    stage.write_legacy(q, a, 1, w.pointer, ks.KSTAGE_SEMANTIC_POINT)
    assert ledger.of(w.id) == 0  # adopted: pending
    stage.seal(1)
    assert ledger.of(w.id) == 0  # adopted: the column's storage now

    # The producer lets go of its array: the stage keeps JAX's buffer alive through the
    # DLManagedTensor it holds.
    del x
    gc.collect()
    g = stage.read_one(q, a)
    assert g.data_pointer == xptr, "the read group is not JAX's buffer: the write copied"
    np.testing.assert_array_equal(group_values(g), expected)
    g.release()
    assert ledger.of(w.id) == 0

    # A later dense write replaces the column's storage: JAX's buffer is deleted then, once.
    fresh = np.full((n, 3), 7.0, dtype=np.float32)
    t, keep = dense_tensor(fresh)
    stage.write_tensor(q, a, 2, t, ks.KSTAGE_SEMANTIC_POINT)
    assert ledger.of(w.id) == 0
    stage.seal(2)
    assert ledger.of(w.id) == 1, "the replaced adopted buffer was not deleted at the seal"
    g = stage.read_one(q, a)
    np.testing.assert_array_equal(group_values(g), fresh)
    g.release()
    assert ledger.not_once() == []


def test_adopted_jax_buffer_is_never_written_and_is_deleted_at_destroy():
    s = ks.Stage()
    try:
        n = 64
        q = s.query(prims(n))
        a = s.token("points")
        ledger = Ledger()
        x = jnp.ones((n, 3), dtype=jnp.float32) * 3
        x.block_until_ready()
        before = np.asarray(x).copy()
        w = to_kstage_legacy(x, ledger)
        s.write_legacy(q, a, 1, w.pointer)
        s.seal(1)
        # A sparse write copies the adopted buffer first: the JAX array stays as it was.
        row = np.array([[-1, -2, -3]], dtype=np.float32)
        t, keep = dense_tensor(row)
        wd = ks.write_data_init()
        wd.tensors = ctypes.pointer(t)
        wd.tensor_count = 1
        wd.count = 1
        index_map = (ctypes.c_uint32 * 1)(0)
        wd.index_map = index_map
        s.write(q, a, 2, wd)
        s.seal(2)
        np.testing.assert_array_equal(np.asarray(x), before)
        g = s.read_one(q, a)
        vals = group_values(g)
        g.release()
        np.testing.assert_array_equal(vals[0], row[0])
        np.testing.assert_array_equal(vals[1:], before[1:])
        assert ledger.of(w.id) == 1  # the column no longer uses it

        # Adopted again, then the stage is destroyed with it as the column's storage.
        y = jnp.full((n, 3), 5.0, dtype=jnp.float32)
        y.block_until_ready()
        w2 = to_kstage_legacy(y, ledger)
        s.write_legacy(q, a, 3, w2.pointer)
        s.seal(3)
        g = s.read_one(q, a)
        assert g.data_pointer == jax_pointer(y)
        g.release()
        assert ledger.of(w2.id) == 0
    finally:
        s.destroy()
    assert ledger.of(w2.id) == 1, "kstage_destroy did not delete the adopted JAX buffer once"
    assert ledger.not_once() == []


def dense_tensor(array):
    """A DLTensor over a C-contiguous (n, lanes) float32 numpy array (canonical layout)."""
    array = np.ascontiguousarray(array, dtype=np.float32)
    shape = (ctypes.c_int64 * 1)(array.shape[0])
    t = ks.DLTensor()
    t.data = array.ctypes.data
    t.device.device_type = ks.kDLCPU
    t.ndim = 1
    t.shape = shape
    t.dtype.code = ks.kDLFloat
    t.dtype.bits = 32
    t.dtype.lanes = array.shape[1]
    return t, (array, shape)


# --------------------------------------------------------------------------------------------
# b. kstage -> JAX, zero-copy
# --------------------------------------------------------------------------------------------
def test_read_group_reaches_jax_without_copy(stage):
    n = 300
    q = stage.query(prims(n))
    a = stage.token("points")
    ledger = Ledger()
    values = np.arange(n * 3, dtype=np.float32).reshape(n, 3) + 0.25
    t, keep = dense_tensor(values)
    stage.write_tensor(q, a, 1, t, ks.KSTAGE_SEMANTIC_POINT)
    stage.seal(1)

    g = stage.read_one(q, a)
    assert g.data_pointer % ks.KSTAGE_BUFFER_ALIGNMENT == 0
    # Without the promise, a zero-copy (read-only) group cannot go out as legacy.
    with pytest.raises(ks.KstageError) as refused:
        g.export_legacy(0)
    assert refused.value.status == 6  # KSTAGE_NOT_SUPPORTED

    y, w = to_jax(g, ledger)
    exported = w.wrapper.dl_tensor
    assert exported.data + exported.byte_offset == g.data_pointer
    assert y.shape == (n, 3) and y.dtype == jnp.float32
    assert jax_pointer(y) == g.data_pointer, "jax.dlpack.from_dlpack copied the kstage tensor"
    expected = group_values(g)
    np.testing.assert_array_equal(np.asarray(y), expected)
    np.testing.assert_array_equal(expected, values)
    assert ledger.of(w.id) == 0  # JAX holds it

    # The export keeps the data alive after the group is released and a later seal.
    g.release()
    t2, keep2 = dense_tensor(values * -1)
    stage.write_tensor(q, a, 2, t2, ks.KSTAGE_SEMANTIC_POINT)
    stage.seal(2)
    np.testing.assert_array_equal(np.asarray(y), values)
    g2 = stage.read_one(q, a)
    np.testing.assert_array_equal(group_values(g2), values * -1)
    g2.release()
    assert jnp.sum(y).item() == pytest.approx(float(values.sum()), rel=1e-6)  # XLA computes on it
    assert ledger.of(w.id) == 0

    del y
    assert wait_for(lambda: ledger.of(w.id) >= 1), "JAX dropped the array, the deleter never ran"
    assert ledger.not_once() == []


def test_unconsumed_capsule_deletes_the_export_once(stage):
    q = stage.query(prims(8))
    a = stage.token("points")
    ledger = Ledger()
    t, keep = dense_tensor(np.ones((8, 3), dtype=np.float32))
    stage.write_tensor(q, a, 1, t)
    stage.seal(1)
    g = stage.read_one(q, a)
    w = CountingLegacy(g.export_legacy(), ledger)
    g.release()
    exporter = LegacyExporter(w.pointer)
    del exporter  # never handed to a consumer: the capsule destructor deletes it
    gc.collect()
    assert ledger.of(w.id) == 1


def test_jax_array_outlives_kstage_destroy():
    s = ks.Stage()
    q = s.query(prims(16))
    a = s.token("points")
    ledger = Ledger()
    values = np.arange(48, dtype=np.float32).reshape(16, 3)
    t, keep = dense_tensor(values)
    s.write_tensor(q, a, 1, t)
    s.seal(1)
    g = s.read_one(q, a)
    y, w = to_jax(g, ledger)
    g.release()
    s.destroy()  # the export still holds the column's buffer
    assert ledger.of(w.id) == 0
    np.testing.assert_array_equal(np.asarray(y), values)
    del y
    assert wait_for(lambda: ledger.of(w.id) >= 1)
    assert ledger.not_once() == []


def test_process_exit_with_jax_buffers_held_both_ways():
    """A stage still owning an adopted JAX buffer and a JAX array still holding a kstage export
    at interpreter exit: the process exits cleanly and the adopted buffer's (Python) deleter
    runs once, from the binding's atexit hook (kstage's own exit handler runs after Python is
    finalized, too late for a Python deleter)."""
    script = textwrap.dedent("""
        import atexit
        atexit.register(lambda: print("writes", writes.calls, flush=True))  # runs after ks's hook
        import numpy as np, jax
        import kstage_ctypes as ks, test_jax_interop as T
        from dlpack_support import Ledger
        s = ks.Stage()
        q = s.query(T.prims(16)); a = s.token("p")
        t, keep = T.dense_tensor(np.ones((16, 3), np.float32))
        s.write_tensor(q, a, 1, t); s.seal(1)
        exports, writes = Ledger(), Ledger()
        g = s.read_one(q, a); y, e = T.to_jax(g, exports); g.release()
        x = jax.numpy.zeros((16, 3), np.float32); x.block_until_ready()
        w = T.to_kstage_legacy(x, writes)
        s.write_legacy(q, a, 2, w.pointer); s.seal(2)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__))] + sys.path))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"exit status {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert "writes [1]" in r.stdout, r.stdout + r.stderr


# --------------------------------------------------------------------------------------------
# c. 1,000 export / overwrite cycles
# --------------------------------------------------------------------------------------------
def test_thousand_export_overwrite_cycles_delete_once_and_do_not_grow(stage):
    n = 2048  # 24 KiB per array: a leaked array per cycle would show as ~24 MiB
    cycles = 1000
    q = stage.query(prims(n))
    a = stage.token("points")
    writes, exports = Ledger(), Ledger()
    base = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    write_ids = []
    rss_warm = None
    start = time.monotonic()
    for i in range(1, cycles + 1):
        x = jax.device_put(base + np.float32(i))
        x.block_until_ready()
        xptr = jax_pointer(x)
        w = to_kstage_legacy(x, writes)
        write_ids.append(w.id)
        del x
        stage.write_legacy(q, a, i, w.pointer)
        stage.seal(i)
        if i > 1:  # the previous cycle's buffer was replaced at this seal: deleted, once
            assert writes.of(write_ids[-2]) == 1, f"cycle {i}: previous adopted buffer not deleted"
        assert writes.of(w.id) == 0

        g = stage.read_one(q, a)
        assert g.data_pointer == xptr, f"cycle {i}: the write copied"
        y, e = to_jax(g, exports)
        g.release()
        assert jax_pointer(y) == xptr, f"cycle {i}: the JAX import copied"
        if i % 100 == 0 or i == 1:
            np.testing.assert_array_equal(np.asarray(y), base + np.float32(i))
        else:
            assert float(y[n - 1, 2]) == base[n - 1, 2] + i
        del y
        assert wait_for(lambda: exports.of(e.id) >= 1), f"cycle {i}: export deleter never ran"
        if i == 100:
            gc.collect()
            rss_warm = rss_bytes()
    gc.collect()
    growth = rss_bytes() - rss_warm
    elapsed = time.monotonic() - start
    assert writes.of(write_ids[-1]) == 0  # still the column's storage
    assert exports.not_once() == []
    assert [c for c in writes.calls[:-1] if c != 1] == []
    assert growth < 8 * 1024 * 1024, f"resident memory grew by {growth / 2**20:.1f} MiB"
    print(f"\n{cycles} cycles in {elapsed:.2f} s; RSS growth after cycle 100: "
          f"{growth / 2**20:.2f} MiB")
