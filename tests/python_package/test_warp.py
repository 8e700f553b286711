# SPDX-License-Identifier: Apache-2.0
"""NVIDIA Warp on kstage data, on Warp's CPU device always and on CUDA device 0 where Warp and
this kstage both have one (scripts/gpu-check.sh runs this file on a GPU machine):

- ``wp.from_dlpack`` of a read group's positions as ``wp.vec3`` is zero-copy (the same address);
  Warp asks for legacy DLPack, so the read-only column goes out with
  ``consumer_reads_only=True``, the caller's promise that the kernel only reads it;
- a Warp kernel fills a map group, which the unmap commits;
- a Warp array is written into a stage with ``stage.write`` and read back.
"""
import pytest

np = pytest.importorskip("numpy", minversion="2.1")
wp = pytest.importorskip("warp")

import kstage  # noqa: E402
from ks_support import kstage_has_cuda  # noqa: E402

PATHS = [f"/warp/p{i}" for i in range(16)]
POS = np.arange(48, dtype=np.float32).reshape(16, 3)

wp.config.quiet = True
wp.init()


def devices():
    out = ["cpu"]
    if wp.get_cuda_device_count() > 0 and kstage_has_cuda():
        out.append("cuda:0")
    return out


@wp.kernel
def fill_vec3(out: wp.array(dtype=wp.vec3), scale: float):
    i = wp.tid()
    out[i] = wp.vec3(float(i) * scale, 1.0, -1.0)


@wp.kernel
def sum_x(src: wp.array(dtype=wp.vec3), total: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(total, 0, src[i][0])


def residency(device):
    return None if device == "cpu" else (2, 0)


@pytest.fixture(params=devices())
def on(request):
    """(device, stage): a stage whose columns live on the Warp device under test."""
    s = kstage.Stage()
    yield request.param, s
    s.close()


def test_warp_reads_a_group_without_a_copy(on):
    device, stage = on
    stage.write("pos", PATHS, POS, 1, residency=residency(device)).wait(10)
    stage.seal(1)
    (g,) = stage.read(PATHS, "pos")
    a = wp.from_dlpack(g.tensor(0, consumer_reads_only=True), dtype=wp.vec3)
    assert a.shape == (16,) and a.dtype == wp.vec3
    assert str(a.device) == device
    if device == "cpu":
        assert a.ptr == np.from_dlpack(g).ctypes.data  # the column's own storage
    total = wp.zeros(1, dtype=float, device=device)
    wp.launch(sum_x, dim=a.shape[0], inputs=[a, total], device=device)
    wp.synchronize()
    assert total.numpy()[0] == pytest.approx(float(POS[:, 0].sum()))
    # The Warp array holds the export: the group may go first.
    g.release()
    np.testing.assert_array_equal(a.numpy(), POS)


def test_a_warp_kernel_fills_a_map_group(on):
    device, stage = on
    with stage.map(PATHS, "vel", 1, dtype="f4", lanes=3, residency=residency(device)) as m:
        for g in m:
            out = wp.from_dlpack(g.tensor(0), dtype=wp.vec3)
            assert str(out.device) == device
            wp.launch(fill_vec3, dim=out.shape[0], inputs=[out, 0.5], device=device)
            wp.synchronize()  # the kernel's writes are done before the unmap commits them
    stage.seal(1)
    (r,) = stage.read(PATHS, "vel", device="cpu")
    got = np.from_dlpack(r)
    rows = got if r.index_map is None else got[r.index_map]
    want = np.stack([np.arange(16, dtype=np.float32) * 0.5, np.ones(16, np.float32), -np.ones(16, np.float32)], 1)
    np.testing.assert_array_equal(rows, want)


def test_a_warp_array_is_written_into_a_stage(on):
    device, stage = on
    w = wp.array(POS * 2, dtype=wp.vec3, device=device)
    stage.write("w", PATHS, w, 1, residency=residency(device)).wait(10)
    stage.seal(1)
    (r,) = stage.read(PATHS, "w", device="cpu")
    assert r.lanes == 3
    got = np.from_dlpack(r)
    np.testing.assert_array_equal(got if r.index_map is None else got[r.index_map], POS * 2)
