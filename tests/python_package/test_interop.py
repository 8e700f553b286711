# SPDX-License-Identifier: Apache-2.0
"""Interop with JAX, PyTorch and CuPy through DLPack (each skipped when not installed; CUDA paths
only with a CUDA device and a kstage built with its backend)."""
import gc

import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import (  # noqa: E402
    CapsuleView,
    Counter,
    CountedLegacyExport,
    column_storage_address,
    kstage_has_cuda,
    values_in_prim_order,
)

PATHS = [f"/io/p{i}" for i in range(8)]


def one(stage, attr, **kw):
    groups = list(stage.read(PATHS, attr, **kw))
    assert len(groups) == 1
    return groups[0]


# ------------------------------------------------------------------------------------------------
# JAX (a legacy DLPack producer; immutable arrays)
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_platforms", "cpu")
    return jax


def test_jax_array_is_a_legacy_producer(jax):
    x = jax.numpy.arange(8, dtype=jax.numpy.float32)
    assert CapsuleView(x.__dlpack__()).name == "dltensor"


def test_jax_to_kstage_copied(stage, jax):
    jnp = jax.numpy
    x = jnp.arange(24, dtype=jnp.float32).reshape(8, 3)
    c = Counter()
    stage.write("pos", PATHS, CountedLegacyExport(x, c, "x"), 1)
    assert c.calls == {"x": 1}  # copied during the call, deleted at once
    stage.seal(1)
    g = one(stage, "pos")
    assert g.lanes == 3
    assert column_storage_address(stage, stage.intern(PATHS), "pos") != x.unsafe_buffer_pointer()
    np.testing.assert_array_equal(values_in_prim_order(g), np.asarray(x))
    assert float(x.sum()) == float(np.arange(24).sum())  # the JAX array is intact


def test_jax_to_kstage_adopted_zero_copy(stage, jax):
    jnp = jax.numpy
    x = jnp.arange(24, dtype=jnp.float32).reshape(8, 3)
    c = Counter()
    stage.write("pos", PATHS, CountedLegacyExport(x, c, "x"), 1, adopt=True)
    stage.seal(1)
    assert c.calls == {"x": 0}  # the column holds it
    g = one(stage, "pos")
    assert np.from_dlpack(g).ctypes.data == x.unsafe_buffer_pointer()  # no copy
    # a sparse write copies the adopted (read-only: legacy) buffer first: x never changes
    stage.write("pos", PATHS, np.full((8, 3), -1, np.float32), 2, mask=[True] + [False] * 7)
    stage.seal(2)
    np.testing.assert_array_equal(np.asarray(x), np.arange(24, dtype=np.float32).reshape(8, 3))
    g.release()
    del g
    gc.collect()
    assert c.calls == {"x": 1}  # no longer needed: handed back exactly once
    stage.close()
    assert c.calls == {"x": 1}
    assert float(x.sum()) == float(np.arange(24).sum())


def test_jax_adopted_array_released_by_close(jax):
    jnp = jax.numpy
    x = jnp.ones((8, 4, 4), jnp.float32)
    c = Counter()
    s = kstage.Stage()
    s.write("m", PATHS, CountedLegacyExport(x, c, "m"), 1, adopt=True)
    s.seal(1)
    assert one(s, "m").lanes == 16
    s.close()
    assert c.calls == {"m": 1}
    assert float(x.sum()) == 128.0


def test_kstage_to_jax_zero_copy(stage, jax):
    a = np.arange(24, dtype=np.float32).reshape(8, 3)
    stage.write("pos", PATHS, a, 1)
    stage.seal(1)
    g = one(stage, "pos")
    j = jax.dlpack.from_dlpack(g.tensor(0, consumer_reads_only=True))
    assert j.shape == (8, 3) and j.dtype == jax.numpy.float32
    assert j.unsafe_buffer_pointer() == column_storage_address(stage, g.prims, "pos")  # zero copy
    rows = np.asarray(g.index_map) if g.index_map is not None else np.arange(8)
    np.testing.assert_array_equal(np.asarray(j)[rows], a)
    # the JAX array keeps its data: later seals, the group's release, the stage's close
    g.release()
    stage.write("pos", PATHS, a * 0, 2)
    stage.seal(2)
    stage.close()
    gc.collect()
    np.testing.assert_array_equal(np.asarray(j)[rows], a)
    assert float((j * 2).sum()) == float(a.sum() * 2)


def test_jax_refuses_a_read_only_tensor_without_the_promise(stage, jax):
    stage.write("pos", PATHS, np.zeros(8, np.float32), 1)
    stage.seal(1)
    g = one(stage, "pos")
    with pytest.raises(BufferError, match="consumer_reads_only"):
        jax.dlpack.from_dlpack(g.tensor(0))


def test_kstage_compact_writable_to_jax(stage, jax):
    a = np.arange(8, dtype=np.float64)
    jax.config.update("jax_enable_x64", True)
    try:
        stage.write("v", PATHS, a, 1)
        stage.seal(1)
        g = one(stage, "v", compact=True)
        t = g.tensor(0, readonly=False)
        j = jax.dlpack.from_dlpack(t)
        np.testing.assert_array_equal(np.asarray(j), a)
    finally:
        jax.config.update("jax_enable_x64", False)


def test_jax_bfloat16_round_trip(stage, jax):
    jnp = jax.numpy
    x = jnp.arange(8, dtype=jnp.bfloat16)
    stage.write("bf", PATHS, x, 1)
    stage.seal(1)
    g = one(stage, "bf", compact=True)
    assert g.dtype is None  # numpy has no bfloat16 of its own
    j = jax.dlpack.from_dlpack(g.tensor(0, consumer_reads_only=True))
    assert j.dtype == jnp.bfloat16
    assert j.astype(jnp.float32).tolist() == list(range(8))


# ------------------------------------------------------------------------------------------------
# PyTorch
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_torch_to_kstage_and_back_on_cpu(stage, torch):
    t = torch.arange(24, dtype=torch.float32).reshape(8, 3)
    stage.write("pos", PATHS, t, 1)
    u = torch.ones(8, 3)
    stage.write("adopted", PATHS, u, 1, adopt=True)
    stage.seal(1)
    g = one(stage, "pos", compact=True)
    back = torch.from_dlpack(g.tensor(0, readonly=False))
    assert back.data_ptr() == np.from_dlpack(g.tensor(0)).ctypes.data  # zero copy into torch
    assert torch.equal(back, t)
    back.add_(1)  # a compact export is the reader's to write
    assert torch.equal(torch.from_dlpack(one(stage, "pos", compact=True).tensor(0, readonly=False)), t)
    a = one(stage, "adopted")
    assert np.from_dlpack(a).ctypes.data == u.data_ptr()


def test_torch_zero_copy_read_only_export(stage, torch):
    stage.write("pos", PATHS, np.arange(8, dtype=np.float32), 1)
    stage.seal(1)
    g = one(stage, "pos")
    try:
        x = torch.from_dlpack(g.tensor(0))
    except BufferError:
        return  # a PyTorch that asks for legacy DLPack or refuses READ_ONLY: refused cleanly
    assert sorted(x.tolist()) == list(range(8))
    assert x.data_ptr() == np.from_dlpack(g).ctypes.data


def test_torch_cuda(stage, torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if not kstage_has_cuda():
        pytest.skip("this kstage build has no CUDA backend")
    t = torch.arange(24, dtype=torch.float32, device="cuda").reshape(8, 3)
    s = torch.cuda.current_stream()
    stage.write("pos", PATHS, t, 1, stream=s.cuda_stream).wait(10)
    stage.seal(1)
    g = one(stage, "pos", compact=True, device="cuda:0", stream=s.cuda_stream)
    assert g.device == (2, 0)
    back = torch.from_dlpack(g.tensor(0, readonly=False))
    assert back.is_cuda and torch.equal(back, t)
    h = one(stage, "pos", device="cpu")
    np.testing.assert_array_equal(np.from_dlpack(h), t.cpu().numpy())


# ------------------------------------------------------------------------------------------------
# CuPy
# ------------------------------------------------------------------------------------------------
def test_cupy_round_trip(stage):
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device")
    except cp.cuda.runtime.CUDARuntimeError:
        pytest.skip("no CUDA device")
    if not kstage_has_cuda():
        pytest.skip("this kstage build has no CUDA backend")
    x = cp.arange(24, dtype=cp.float32).reshape(8, 3)
    stage.write("pos", PATHS, x, 1, stream=cp.cuda.get_current_stream().ptr).wait(10)
    stage.seal(1)
    g = one(stage, "pos", compact=True)
    y = cp.from_dlpack(g.tensor(0, readonly=False))
    assert bool((y == x).all())
