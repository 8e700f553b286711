# SPDX-License-Identifier: Apache-2.0
"""Schemas that evolve (issue #48) from Python: a write or map with no semantic keeps the
column's, a map needs no dtype for an existing column, one name holds several schemas on
different prims (a group each), attribute_mode="force" replaces a prim's schema at an ordinal,
and every refusal is raised at the call with the stage unchanged."""
import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import values_in_prim_order  # noqa: E402


def by_path(stage, paths, attr, **kw):
    """{path: (dtype, value)} of every group of `attr` (each prim once)."""
    out = {}
    for g in stage.read(stage.query(paths), attr, compact=True, **kw):
        rows = values_in_prim_order(g) if not g.is_tombstone else [None] * len(g)
        for p, v in zip(g.paths, rows):
            key = (p, "deleted") if g.is_tombstone else p
            assert key not in out
            out[key] = (g.dtype, None if v is None else float(v))
    return out


def test_no_semantic_keeps_the_columns(stage):
    q = stage.query(["/k0", "/k1"])
    stage.write("pos", q, np.zeros((2, 3), np.float32), 1, semantic="point")
    stage.seal(1)
    stage.write("pos", q, np.ones((2, 3), np.float32), 2)  # a ported update loop
    stage.seal(2)
    assert stage.attribute_info("pos")["semantic"] == "point"
    # A map of the existing column with no dtype.
    with stage.map(q, "pos", 3) as m:
        for g in m:
            assert g.semantic == "point"
            np.from_dlpack(g.tensor(0))[:] = 7
    stage.seal(3)
    for g in stage.read(q, "pos", compact=True):
        assert (np.from_dlpack(g.tensor(0)) == 7).all()
    with pytest.raises(kstage.InvalidArgument, match="semantic NORMAL does not match its semantic POINT"):
        stage.write("pos", q, np.ones((2, 3), np.float32), 4, semantic="normal")
    with pytest.raises(kstage.InvalidArgument, match="has no fixed-size column to take it from"):
        stage.map(q, "never", 4)


def test_one_name_several_schemas_and_force(stage):
    stage.write("m", ["/a", "/b"], np.array([1, 2], np.float32), 1)
    stage.write("m", ["/c"], np.array([3], np.float64), 1)  # ovstage: float64 m beside float32
    stage.seal(1)
    everything = ["/a", "/b", "/c"]
    got = by_path(stage, everything, "m")
    assert got == {"/a": (np.float32, 1.0), "/b": (np.float32, 2.0), "/c": (np.float64, 3.0)}
    info = stage.attribute_info("m")
    assert info["schema_count"] == 2 and info["prim_count"] == 3 and info["dtype"] == np.float32
    schemas = stage.attribute_schemas("m")
    assert [(s["dtype"], s["prim_count"]) for s in schemas] == [(np.float32, 2), (np.float64, 1)]
    assert [a["name"] for a in stage.attributes()] == ["m"]

    # A prim that holds float32: float64 refused, the stage unchanged.
    with pytest.raises(kstage.InvalidArgument,
                       match=r"prim '/a' \(element 0\) holds 'm' as float32 NONE: the write's dtype float64"):
        stage.write("m", ["/a"], np.array([9], np.float64), 2)
    with pytest.raises(ValueError, match='attribute_mode must be "reject" or "force"'):
        stage.write("m", ["/a"], np.array([9], np.float64), 2, attribute_mode="replace")
    stage.seal(2)
    assert by_path(stage, everything, "m") == got

    # FORCE: /a moves to float64 at 3; the change range shows the deletion and the new value.
    stage.write("m", ["/a"], np.array([10], np.float64), 3, attribute_mode="force")
    stage.seal(3)
    assert by_path(stage, everything, "m")["/a"] == (np.float64, 10.0)
    changes = by_path(stage, everything, "m", range=(3, 3))
    assert changes == {("/a", "deleted"): (np.float32, None), "/a": (np.float64, 10.0)}
    # A map with attribute_mode too: /b to float64.
    with stage.map(["/b"], "m", 4, dtype=np.float64, attribute_mode="force") as m:
        for g in m:
            np.from_dlpack(g.tensor(0))[:] = 20
    stage.seal(4)
    assert by_path(stage, everything, "m") == {
        "/a": (np.float64, 10.0), "/b": (np.float64, 20.0), "/c": (np.float64, 3.0)}
    assert [s["prim_count"] for s in stage.attribute_schemas("m")] == [0, 3]
    # Batches take it per Write.
    stage.write_batch(["/c"], 5, {"m": kstage.Write(np.array([5], np.float32), attribute_mode="force")})
    stage.seal(5)
    assert by_path(stage, ["/c"], "m") == {"/c": (np.float32, 5.0)}


def test_retype_after_every_prim_is_gone(stage):
    q = stage.query(["/g0", "/g1"])
    stage.write("x", q, np.zeros(2, np.float32), 1)
    stage.seal(1)
    stage.delete(q, 2, ["x"])
    stage.seal(2)
    stage.write("x", q, np.ones(2, np.float64), 3)  # ovstage: "delete it before changing type"
    stage.seal(3)
    assert stage.attribute_info("x")["dtype"] == np.float64
    assert stage.attribute_info("x")["schema_count"] == 2
