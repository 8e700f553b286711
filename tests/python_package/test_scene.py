# SPDX-License-Identifier: Apache-2.0
"""The scene from Python: world transforms (Stage.compute_world_transforms) against a numpy
reference, incremental computes read back as change ranges, the default column names, and
errors."""
import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402


def translate(x, y, z):
    m = np.eye(4)
    m[3, :3] = (x, y, z)  # row vectors: the translation is row 3 (elements 12-14)
    return m


def world_matrices(stage, paths, world=kstage.WORLD_MATRIX):
    q = stage.query(paths)
    out = {}
    for g in stage.read(q, world, compact=True):
        values = np.from_dlpack(g.tensor(0)).reshape(-1, 4, 4)
        for p, m in zip(g.paths, values):
            out[p] = m
    return out


def changed(stage, paths, ordinal, world=kstage.WORLD_MATRIX):
    q = stage.query(paths)
    seen = []
    for g in stage.read(q, world, range=(ordinal, ordinal)):
        seen.extend(g.paths)
    return sorted(seen)


def test_world_is_local_times_parent_world(stage):
    paths = ["/World", "/World/Env_1", "/World/Env_1/Arm/Tip"]
    locals_ = np.stack([translate(10, 0, 0), translate(0, 100, 0), translate(0, 0, 7)])
    stage.write(kstage.LOCAL_MATRIX, paths, locals_, 1, semantic="matrix").wait()
    stage.seal(1)
    stage.compute_world_transforms(2).wait()
    stage.seal(2)
    w = world_matrices(stage, paths)
    np.testing.assert_allclose(w["/World/Env_1/Arm/Tip"], translate(10, 100, 7))
    # A numpy reference of the convention: world = local @ parent_world.
    np.testing.assert_allclose(w["/World/Env_1/Arm/Tip"],
                               locals_[2] @ locals_[1] @ locals_[0])
    # Env_1 moves: the tip follows at the next (incremental) compute, with Env_1 itself.
    stage.write(kstage.LOCAL_MATRIX, ["/World/Env_1"], translate(0, 100, 40)[None], 3,
                 semantic="matrix").wait()
    stage.seal(3)
    stage.compute_world_transforms(4).wait()
    stage.seal(4)
    assert world_matrices(stage, paths)["/World/Env_1/Arm/Tip"][3, 2] == 47
    assert changed(stage, paths, 4) == ["/World/Env_1", "/World/Env_1/Arm/Tip"]
    stage.compute_world_transforms(5, mode="full").wait()
    stage.seal(5)
    assert changed(stage, paths, 5) == sorted(paths)


def test_random_forest_against_numpy(stage):
    rng = np.random.default_rng(7)
    n = 500
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    paths = ["/r"]
    for i in range(1, n):
        paths.append(paths[parents[i]] + f"/c{i}")
    angles = rng.uniform(-1, 1, n)
    locals_ = np.zeros((n, 4, 4))
    for i, a in enumerate(angles):
        locals_[i] = translate(*rng.uniform(-1, 1, 3))
        locals_[i][:2, :2] = [[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]]
    reset = rng.uniform(size=n) < 0.05
    stage.write(kstage.LOCAL_MATRIX, paths, locals_, 1, semantic="matrix").wait()
    stage.write(kstage.RESET_XFORM_STACK, paths, reset, 1).wait()
    stage.seal(1)
    stage.compute_world_transforms(2).wait()
    stage.seal(2)
    expect = np.zeros_like(locals_)
    for i in range(n):  # parents come before children
        p = parents[i]
        expect[i] = locals_[i] if p < 0 or reset[i] else locals_[i] @ expect[p]
    got = world_matrices(stage, paths)
    np.testing.assert_allclose(np.stack([got[p] for p in paths]), expect, rtol=1e-12,
                               atol=1e-12)


def test_named_columns_float32_and_errors(stage):
    paths = ["/a", "/a/b"]
    m = np.stack([translate(1, 2, 3), translate(1, 1, 1)]).astype(np.float32)
    stage.write("loc", paths, m, 1, semantic="matrix").wait()
    stage.seal(1)
    stage.compute_world_transforms(2, local="loc", world="wld").wait()
    stage.seal(2)
    w = world_matrices(stage, paths, world="wld")
    assert w["/a/b"].dtype == np.float32
    np.testing.assert_array_equal(w["/a/b"][3, :3], [2, 3, 4])
    assert stage.attribute_info("wld")["semantic"] == "matrix"
    with pytest.raises(kstage.WriteFloorViolation, match="write floor 2"):
        stage.compute_world_transforms(2, local="loc", world="wld")
    with pytest.raises(kstage.InvalidArgument, match="desc.local and desc.world"):
        stage.compute_world_transforms(3, local="loc", world="loc")
    with pytest.raises(kstage.InvalidArgument, match="neither 'incremental' nor 'full'"):
        stage.compute_world_transforms(3, mode="sometimes")
    with pytest.raises(kstage.NotFound, match="omni:xform"):
        stage.compute_world_transforms(3)
    stage.write("bad", paths, np.zeros((2, 3), np.float32), 3).wait()
    stage.seal(3)
    with pytest.raises(kstage.InvalidArgument, match="'bad' is fixed-size float32"):
        stage.compute_world_transforms(4, local="bad")


def test_reserved_names():
    assert kstage.LOCAL_MATRIX == "omni:xform"
    assert kstage.RESET_XFORM_STACK == "omni:resetXformStack"
    assert kstage.WORLD_MATRIX == "omni:fabric:worldMatrix"
    assert kstage.PRIM_TYPE == "usd-prim-type"
    assert kstage.APPLIED_SCHEMAS == "usd-schemas"
