# SPDX-License-Identifier: Apache-2.0
"""kstage.usd (docs/usd.md): populate a stage from USD, re-sample, and export layers back.

Real assets no one here wrote -- Newton's ant, humanoid, cartpole and the 64-environment
ant_multi, Warp's bunny and square_cloth -- round-trip USD -> kstage -> USD with values and types
equal, and kstage's world transforms equal UsdGeom.XformCache's. The Newton assets come from the
newton wheel (scripts/setup/usd_assets.sh unpacks them; KSTAGE_USD_ASSETS names the folder),
Warp's from the installed warp-lang package. Generated scenes cover every mapped type, time
samples, the report of what has no mapping, and the errors.
"""
import os
import pathlib

import pytest

np = pytest.importorskip("numpy", minversion="2.1")
pxr = pytest.importorskip("pxr", reason="kstage.usd needs usd-core (pip install kstage[usd])")
from pxr import Gf, Sdf, Usd, UsdGeom, Vt  # noqa: E402

import kstage  # noqa: E402
import kstage.usd as ku  # noqa: E402

NEWTON = {
    "ant": "newton/examples/assets/ant.usda",
    "humanoid": "newton/examples/assets/humanoid.usda",
    "cartpole": "newton/examples/assets/cartpole.usda",
    "ant_multi": "newton/tests/assets/ant_multi.usda",
}


def newton_asset(name):
    root = os.environ.get("KSTAGE_USD_ASSETS")
    if not root:
        if os.environ.get("KSTAGE_REQUIRE_USD_ASSETS") == "1":
            pytest.fail("KSTAGE_USD_ASSETS is not set (scripts/setup/usd_assets.sh makes it)")
        pytest.skip("KSTAGE_USD_ASSETS is not set: the Newton assets are not unpacked")
    path = pathlib.Path(root) / NEWTON[name]
    assert path.is_file(), f"{path} is missing from KSTAGE_USD_ASSETS"
    return str(path)


def warp_asset(name):
    warp = pytest.importorskip("warp")
    path = pathlib.Path(warp.__file__).parent / "examples" / "assets" / name
    assert path.is_file(), f"warp-lang has no {path}"
    return str(path)


def asset(name):
    return newton_asset(name) if name in NEWTON else warp_asset(name)


ASSETS = ["ant", "humanoid", "cartpole", "ant_multi", "bunny.usd", "square_cloth.usd"]


def equal(a, b):
    if isinstance(a, (Vt.Matrix4dArray, Vt.Vec3fArray, Vt.FloatArray, Vt.IntArray)) or (
            hasattr(a, "__len__") and not isinstance(a, str) and hasattr(b, "__len__")):
        try:
            return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
        except TypeError:
            pass
    return a == b


def compare_scenes(src, dst, skip=()):
    """Every prim, type, applied schema, authored attribute (type and value) and relationship
    of `src` is in `dst`; returns the number of values compared."""
    n = 0
    for p in src.Traverse(Usd.TraverseInstanceProxies()):
        q = dst.GetPrimAtPath(p.GetPath())
        assert q, f"{p.GetPath()} is missing"
        assert q.GetTypeName() == p.GetTypeName(), p.GetPath()
        assert list(q.GetAppliedSchemas()) == list(p.GetAppliedSchemas()), p.GetPath()
        for a in p.GetAuthoredAttributes():
            if (str(p.GetPath()), a.GetName()) in skip:
                continue
            v = a.Get()
            if v is None:
                continue
            b = q.GetAttribute(a.GetName())
            assert b, f"{a.GetPath()} is missing"
            assert b.GetTypeName() == a.GetTypeName(), a.GetPath()
            assert equal(b.Get(), v), f"{a.GetPath()}: {b.Get()!r} != {v!r}"
            n += 1
        for r in p.GetAuthoredRelationships():
            assert q.GetRelationship(r.GetName()).GetTargets() == r.GetTargets(), r.GetPath()
            n += 1
    return n


@pytest.mark.parametrize("name", ASSETS)
def test_real_assets_round_trip(stage, name):
    path = asset(name)
    pop = ku.populate(stage, path, 1)
    stage.seal(1)
    src = Usd.Stage.Open(path)
    assert pop.report.prims == len(list(src.Traverse(Usd.TraverseInstanceProxies())))
    for u in pop.report.unmapped:  # only values that are not there are left out of these assets
        assert u.reason == "no value at this time", u
    layer = ku.export(stage, over=False, xform_since=pop.ordinal)
    n = compare_scenes(src, Usd.Stage.Open(layer))
    assert n == pop.report.values - pop.report.columns.get((kstage.APPLIED_SCHEMAS, "token[]"), 0) \
        - pop.report.columns.get((kstage.LOCAL_MATRIX, "matrix4d"), 0) \
        - pop.report.columns.get((kstage.RESET_XFORM_STACK, "bool"), 0)


@pytest.mark.parametrize("name", ["ant", "humanoid", "ant_multi"])
def test_world_transforms_equal_xform_cache(stage, name):
    path = asset(name)
    ku.populate(stage, path, 1)
    stage.seal(1)
    stage.compute_world_transforms(2).wait()
    stage.seal(2)
    src = Usd.Stage.Open(path)
    cache = UsdGeom.XformCache()
    xformables = [p for p in src.Traverse(Usd.TraverseInstanceProxies())
                  if p.IsA(UsdGeom.Xformable)]
    assert xformables
    worlds = {}
    with stage.read(stage.query([str(p.GetPath()) for p in xformables]), kstage.WORLD_MATRIX,
                    compact=True) as read:
        for g in read:
            for p, m in zip(g.paths, np.from_dlpack(g.tensor(0)).reshape(-1, 4, 4)):
                worlds[p] = m
    for p in xformables:
        want = np.array(cache.GetLocalToWorldTransform(p))
        got = worlds[str(p.GetPath())]
        scale = max(1.0, float(np.abs(want).max()))
        assert np.abs(got - want).max() <= 1e-12 * scale, p.GetPath()


def every_type_scene():
    """A usda scene with one attribute of every mapped type, scalar and array."""
    layer = Sdf.Layer.CreateAnonymous(".usda")
    s = Usd.Stage.Open(layer)
    a = s.DefinePrim("/Root/A", "Xform")
    b = s.DefinePrim("/Root/B", "Scope")
    rng = np.random.default_rng(7)
    expected = {}
    for t in ku.type_table():
        tn = Sdf.ValueTypeNames.Find(t.name)
        assert tn, t.name
        value = sample_value(t, tn, rng)
        attr = a.CreateAttribute("a_" + t.name.replace("[]", "_array"), tn)
        assert attr.Set(value), t.name
        expected[attr.GetName()] = t.name
    b.CreateRelationship("targets").SetTargets([Sdf.Path("/Root/A"), Sdf.Path("/Root")])
    conn = b.CreateAttribute("inputs:x", Sdf.ValueTypeNames.Float)
    conn.Set(0.25)  # a connection of an attribute with no value keeps no type (docs/usd.md)
    conn.SetConnections([Sdf.Path("/Root/A.a_float")])
    UsdGeom.Xformable(a).AddTranslateOp().Set(Gf.Vec3d(1, 2, 3))
    return s, expected


def sample_value(t, tn, rng):
    base = t.name.replace("[]", "")
    count = 3 if t.name.endswith("[]") else None

    def one(i):
        if base == "token":
            return f"tok{i}"
        if base == "string":
            return f"strïng {i}"
        if base == "asset":
            return Sdf.AssetPath(f"./file{i}.usd")
        if base == "pathExpression":
            return Sdf.PathExpression(f"/Root/A{i}")
        if base == "timecode":
            return Sdf.TimeCode(1.5 + i)
        if base == "bool":
            return bool(i % 2)
        scalar_cls = Sdf.ValueTypeNames.Find(base).type.pythonClass
        n = int(np.prod(t.shape)) if t.shape else 1
        vals = (rng.integers(0, 100, n) + 0.5 * (t.schema.dtype.kind == "f")).tolist()
        if t.schema.dtype.kind in "iu":
            vals = [int(v) for v in vals]
        if not t.shape:
            return vals[0]
        if base.startswith("quat"):
            return scalar_cls(vals[3], vals[0], vals[1], vals[2])
        if base.startswith("matrix") or base.startswith("frame"):
            k = t.shape[0]
            return scalar_cls(*vals) if k != 4 else scalar_cls(*vals)
        return scalar_cls(*vals)

    if count is None:
        return one(0)
    return tn.type.pythonClass([one(i) for i in range(count)])


def test_every_type_round_trips_and_keeps_its_schema(stage):
    src, expected = every_type_scene()
    pop = ku.populate(stage, src, 1)
    stage.seal(1)
    assert pop.report.unmapped == []
    for name, usd_name in expected.items():
        t = ku._mapping.usd_type(usd_name)
        (info,) = [a for a in stage.attributes() if a["name"] == name]
        assert info["semantic"] == t.schema.semantic, name
        assert info["is_array"] == t.schema.is_array, name
    layer = ku.export(stage, over=False, xform_since=pop.ordinal)
    dst = Usd.Stage.Open(layer)
    compare_scenes(src, dst)
    assert dst.GetAttributeAtPath("/Root/B.inputs:x").GetConnections() == [
        Sdf.Path("/Root/A.a_float")]
    # The semantics are the documented ones.
    ids = {a["name"]: a for a in stage.attributes()}
    assert ids["a_point3f"]["semantic"] == "point"
    assert ids["a_normal3f"]["semantic"] == "normal"
    assert ids["a_color3f"]["semantic"] == "color"
    assert ids["a_texCoord2f"]["semantic"] == "texcoord"
    assert ids["a_quatf"]["semantic"] == "quaternion"
    assert ids["a_matrix4d"]["semantic"] == "matrix"
    assert ids["a_asset"]["semantic"] == "asset_path_id"
    assert ids["targets"]["semantic"] == "relationship_path_id"
    assert ids["inputs:x.connect"]["semantic"] == "connection_path_id"


def test_quaternion_and_matrix_bytes(stage):
    s = Usd.Stage.CreateInMemory()
    p = s.DefinePrim("/P")
    p.CreateAttribute("q", Sdf.ValueTypeNames.Quatf).Set(Gf.Quatf(0.5, 1, 2, 3))
    m = Gf.Matrix4d(1).SetTranslate(Gf.Vec3d(4, 5, 6))
    p.CreateAttribute("m", Sdf.ValueTypeNames.Matrix4d).Set(m)
    ku.populate(stage, s, 1)
    stage.seal(1)
    with stage.read(["/P"], ["q", "m"], compact=True) as r:
        got = {g.attribute: np.from_dlpack(g.tensor(0)) for g in r}
    np.testing.assert_array_equal(got["q"].reshape(4), [1, 2, 3, 0.5])  # (x, y, z, w)
    np.testing.assert_array_equal(got["m"].reshape(4, 4)[3], [4, 5, 6, 1])  # row vectors


def test_unmapped_values_are_reported(stage):
    s = Usd.Stage.CreateInMemory()
    p = s.DefinePrim("/P")
    p.CreateAttribute("names", Sdf.ValueTypeNames.StringArray).Set(["a", "b"])
    p.CreateAttribute("declared", Sdf.ValueTypeNames.Float)  # no value
    p.CreateAttribute("f", Sdf.ValueTypeNames.Float).Set(2.0)
    pop = ku.populate(stage, s, 1)
    got = {(u.prim, u.name, u.type) for u in pop.report.unmapped}
    assert got == {("/P", "names", "string[]"), ("/P", "declared", "float")}
    assert "string[]" in str(pop.report)
    stage.seal(1)
    assert {a["name"] for a in stage.attributes()} == {"f", kstage.PRIM_TYPE}


def animated_scene():
    s = Usd.Stage.CreateInMemory()
    root = UsdGeom.Xform.Define(s, "/W")
    arm = UsdGeom.Xform.Define(s, "/W/Arm")
    op = root.AddTranslateOp()
    for t in (0, 10):
        op.Set(Gf.Vec3d(t, 0, 0), t)
    arm.AddTranslateOp().Set(Gf.Vec3d(0, 1, 0))
    speed = arm.GetPrim().CreateAttribute("speed", Sdf.ValueTypeNames.Float)
    speed.Set(1.0, 0)
    speed.Set(3.0, 10)
    arm.GetPrim().CreateAttribute("mass", Sdf.ValueTypeNames.Float).Set(7.0)
    return s


def animated_scene_file(tmp_path):
    """animated_scene() saved as tmp_path/scene.usda (its stage held while its root layer is
    exported: the layer goes with its stage)."""
    path = tmp_path / "scene.usda"
    scene = animated_scene()
    scene.GetRootLayer().Export(str(path))
    return path


def test_resample_writes_only_time_varying_values(stage):
    s = animated_scene()
    pop = ku.populate(stage, s, 1, time=0)
    stage.seal(1)
    assert pop.report.time_varying == 3  # speed, the root's translate and its transform
    rep = pop.resample(2, 5)
    stage.seal(2)
    assert rep.values == 4  # speed and xformOp:translate, omni:xform and its reset flag
    changed = {}
    with stage.read(stage.query(), [a["name"] for a in stage.attributes()], range=(2, 2)) as r:
        for g in r:
            changed.setdefault(g.attribute, set()).update(g.paths)
    assert changed == {"speed": {"/W/Arm"}, "xformOp:translate": {"/W"},
                       kstage.LOCAL_MATRIX: {"/W"}, kstage.RESET_XFORM_STACK: {"/W"}}
    with stage.read(["/W/Arm"], ["speed"], compact=True) as r:
        (g,) = list(r)
        assert np.from_dlpack(g.tensor(0)).tolist() == [2.0]  # linear between 1 and 3
    with stage.read(["/W"], [kstage.LOCAL_MATRIX], compact=True) as r:
        (g,) = list(r)
        assert np.from_dlpack(g.tensor(0)).reshape(4, 4)[3, 0] == 5.0


def test_moved_roots_export_as_an_animated_over(stage, tmp_path):
    src_path = animated_scene_file(tmp_path)
    pop = ku.populate(stage, str(src_path), 1)
    stage.seal(1)
    writer = ku.LayerWriter(stage, tmp_path / "run.usda", over=True, xform_since=pop.ordinal)
    ordinal = 1
    for tick in range(1, 4):
        ordinal += 1
        m = np.eye(4)
        m[3, :3] = (tick, 2 * tick, 0)
        stage.write(kstage.LOCAL_MATRIX, ["/W"], m.reshape(1, 16), ordinal).wait()
        stage.seal(ordinal)
        rep = writer.write(time=tick, since=ordinal - 1)
        assert rep.transforms == 1 and rep.prims == 1
    writer.save()
    root = Sdf.Layer.CreateAnonymous(".usda")
    root.subLayerPaths = [str(tmp_path / "run.usda"), str(src_path)]
    composed = Usd.Stage.Open(root)
    w = UsdGeom.Xformable(composed.GetPrimAtPath("/W"))
    arm = composed.GetPrimAtPath("/W/Arm")
    for tick in range(1, 4):
        cache = UsdGeom.XformCache(tick)
        world = np.array(cache.GetLocalToWorldTransform(arm))
        assert world[3, :3].tolist() == [tick, 2 * tick + 1, 0]
        assert w.GetLocalTransformation(tick)[3][:3] == Gf.Vec3d(tick, 2 * tick, 0)
    assert list(w.GetXformOpOrderAttr().Get()) == ["xformOp:transform"]


def test_change_range_export_holds_only_changes(stage):
    ku.populate(stage, animated_scene(), 1)
    stage.seal(1)
    stage.write("mass", ["/W/Arm"], np.array([9.0], np.float32), 2).wait()
    stage.seal(2)
    layer = ku.export(stage, since=1, xform_since=1)
    got = [(str(p.path), [a.name for a in p.attributes]) for p in layer.rootPrims[0].nameChildren]
    assert got == [("/W/Arm", ["mass"])]
    assert layer.GetAttributeAtPath("/W/Arm.mass").default == 9.0
    assert layer.GetPrimAtPath("/W").specifier == Sdf.SpecifierOver


def test_points_and_point_instancer(stage):
    n = 1000
    paths = [f"/particles/p{i}" for i in range(n)]
    pos = np.random.default_rng(1).random((n, 3), dtype=np.float32)
    vel = np.ones((n, 3), np.float32)
    stage.write("pos", paths, pos, 1, semantic="point").wait()
    stage.write("vel", paths, vel, 1).wait()
    stage.seal(1)
    w = ku.LayerWriter(stage, over=False)
    q = stage.query(paths)
    assert w.write_points(q, "/Out/Points", positions="pos", velocities="vel", time=1) == n
    assert w.write_points(q, "/Out/Inst", positions="pos", instancer=True,
                          prototype="/Out/Proto") == n
    s = Usd.Stage.Open(w.layer)
    pts = UsdGeom.Points(s.GetPrimAtPath("/Out/Points"))
    np.testing.assert_array_equal(np.asarray(pts.GetPointsAttr().Get(1)), pos)
    np.testing.assert_array_equal(np.asarray(pts.GetIdsAttr().Get(1)),
                                  np.asarray(stage.intern(paths), np.int64))
    inst = UsdGeom.PointInstancer(s.GetPrimAtPath("/Out/Inst"))
    np.testing.assert_array_equal(np.asarray(inst.GetPositionsAttr().Get()), pos)
    assert inst.GetPrototypesRel().GetTargets() == [Sdf.Path("/Out/Proto")]
    with pytest.raises(ku.UsdError, match="every point must hold"):
        stage.write("vel", ["/particles/extra"], np.ones((1, 3), np.float32), 2).wait()
        stage.write("pos2", paths[:5], pos[:5], 2).wait()
        stage.seal(2)
        w.write_points(stage.query(paths), "/Out/P2", positions="pos", velocities="pos2")


def fingerprint(stage):
    out = []
    for a in stage.attributes():
        with stage.read(stage.query(), [a["name"]], compact=True) as r:
            for g in r:
                rows = ([bytes(np.from_dlpack(g.tensor(i))) for i in range(len(g))] if g.is_array
                        else bytes(np.from_dlpack(g.tensor(0))))
                out.append((a["name"], tuple(g.paths), rows))
    return out


def test_errors_name_the_file_prim_and_attribute(stage, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.usda"):
        ku.populate(stage, tmp_path / "nowhere.usda", 1)
    bad = tmp_path / "bad.usda"
    bad.write_text("#usda 1.0\ndef Xform \"A\" {\n  float x = \n")
    with pytest.raises(ku.UsdError, match="bad.usda"):
        ku.populate(stage, bad, 1)
    with pytest.raises(ku.UsdError, match="cannot parse"):
        ku.populate(stage, "#usda 1.0\ndef \"A\" {\n  floaty x = 1\n", 1)
    # A prim that holds an attribute in another schema: refused, the stage unchanged.
    stage.write("mass", ["/W/Arm"], np.array([[1, 2]], np.int32), 1).wait()
    stage.seal(1)
    before = fingerprint(stage)
    path = animated_scene_file(tmp_path)
    with pytest.raises(ku.UsdError) as e:
        ku.populate(stage, path, 2)
    assert e.value.file == str(path) and e.value.prim == "/W/Arm" and e.value.attribute == "mass"
    assert "holds it as fixed int32 x 2" in str(e.value) and "float32 x 1" in str(e.value)
    stage.seal(2)
    assert fingerprint(stage) == before
    # An ordinal at or below a name's write floor: refused before any write.
    other = kstage.Stage()
    try:
        other.write("mass", ["/W/Arm"], np.array([1.0], np.float32), 5).wait()
        other.seal(5)
        before = fingerprint(other)
        with pytest.raises(ku.UsdError, match="write floor 5") as e:
            ku.populate(other, path, 3)
        assert e.value.attribute == "mass"
        other.seal(6)
        assert fingerprint(other) == before
    finally:
        other.close()
    with pytest.raises(ku.UsdError, match="no prim at the root path"):
        ku.populate(stage, path, 3, root="/Nope")


def test_several_usd_types_for_one_name(stage):
    s = Usd.Stage.CreateInMemory()
    s.DefinePrim("/A").CreateAttribute("v", Sdf.ValueTypeNames.Float).Set(1.0)
    s.DefinePrim("/B").CreateAttribute("v", Sdf.ValueTypeNames.Double).Set(2.0)
    ku.populate(stage, s, 1)
    stage.seal(1)
    assert len(stage.attribute_schemas("v")) == 2
    dst = Usd.Stage.Open(ku.export(stage, over=False))
    assert dst.GetAttributeAtPath("/A.v").GetTypeName() == "float"
    assert dst.GetAttributeAtPath("/B.v").GetTypeName() == "double"
    # A further schema conflicting with what the stage held is refused before any write.
    other = kstage.Stage()
    try:
        other.write("v", ["/B"], np.array([5], np.int32), 1).wait()
        other.seal(1)
        before = fingerprint(other)
        with pytest.raises(ku.UsdError) as e:
            ku.populate(other, s, 2)
        assert e.value.prim == "/B" and e.value.attribute == "v"
        other.seal(2)
        assert fingerprint(other) == before
    finally:
        other.close()


def test_docs_type_table_is_the_mapping():
    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "usd.md"
    if not doc.is_file():
        pytest.skip("docs/usd.md is not beside these tests (a wheel's test copy)")
    rows = {}
    for t in ku.type_table():
        rows.setdefault(t.name.replace("[]", ""), [None, None])[t.name.endswith("[]")] = t

    def cell(t):
        if t is None:
            return "--"
        s = t.schema
        kind = "array" if s.is_array else "fixed"
        return f"{kind} {s.dtype.name} x {s.lanes}, {s.semantic.upper()}"

    want = [f"| `{base}` | {cell(s)} | {'`' + a.name + '`' if a else '--'} | {cell(a)} |"
            for base, (s, a) in rows.items()]
    got = [line for line in doc.read_text().splitlines() if line.startswith("| `")
           and line.count("|") == 5 and ("fixed" in line or "array" in line)]
    assert got == want


def test_connections_authored_in_a_referenced_layer(stage, tmp_path):
    asset = Usd.Stage.CreateNew(str(tmp_path / "asset.usda"))
    mat = asset.DefinePrim("/Mat", "Material")
    shader = asset.DefinePrim("/Mat/Shader", "Shader")
    shader.CreateAttribute("outputs:out", Sdf.ValueTypeNames.Float).Set(1.0)
    inp = mat.CreateAttribute("inputs:x", Sdf.ValueTypeNames.Float)
    inp.Set(0.5)
    inp.SetConnections([Sdf.Path("/Mat/Shader.outputs:out")])
    asset.SetDefaultPrim(mat)
    asset.GetRootLayer().Save()
    root = Usd.Stage.CreateInMemory()
    for i in range(2):
        root.DefinePrim(f"/World/M{i}").GetReferences().AddReference(str(tmp_path / "asset.usda"))
    ku.populate(stage, root, 1)
    stage.seal(1)
    dst = Usd.Stage.Open(ku.export(stage, over=False))
    for i in range(2):  # the reference maps the connection into each instance
        assert dst.GetAttributeAtPath(f"/World/M{i}.inputs:x").GetConnections() == [
            Sdf.Path(f"/World/M{i}/Shader.outputs:out")]


def test_values_varying_through_a_spline_or_value_clips_resample(stage, tmp_path):
    from pxr import Ts
    s = Usd.Stage.CreateInMemory()
    spline_attr = s.DefinePrim("/S").CreateAttribute("x", Sdf.ValueTypeNames.Double)
    spline = Ts.Spline()
    spline.SetKnot(Ts.Knot(time=0.0, value=1.0, nextInterp=Ts.InterpLinear))
    spline.SetKnot(Ts.Knot(time=10.0, value=3.0))
    spline_attr.SetSpline(spline)
    # A value clip: /C.y's samples live in clip.usda, the root layer only names the clip.
    clip = Sdf.Layer.CreateNew(str(tmp_path / "clip.usda"))
    clip_prim = Sdf.CreatePrimInLayer(clip, "/Clip")
    clip_prim.specifier = Sdf.SpecifierDef
    y = Sdf.AttributeSpec(clip_prim, "y", Sdf.ValueTypeNames.Float)
    clip.SetTimeSample(y.path, 0, 10.0)
    clip.SetTimeSample(y.path, 10, 20.0)
    clip.Save()
    c = s.DefinePrim("/C")
    c.CreateAttribute("y", Sdf.ValueTypeNames.Float)
    clips = Usd.ClipsAPI(c)
    clips.SetClipAssetPaths([Sdf.AssetPath(str(tmp_path / "clip.usda"))])
    clips.SetClipPrimPath("/Clip")
    clips.SetClipActive([(0.0, 0)])
    clips.SetClipTimes([(0.0, 0.0), (10.0, 10.0)])
    pop = ku.populate(stage, s, 1, time=0)
    stage.seal(1)
    assert pop.report.time_varying == 2
    pop.resample(2, 5)
    stage.seal(2)
    with stage.read(["/S", "/C"], ["x", "y"], compact=True) as r:
        got = {g.attribute: float(np.from_dlpack(g.tensor(0))[0]) for g in r}
    assert got == {"x": spline_attr.Get(5), "y": 15.0}
    assert got["x"] == pytest.approx(2.0)


def test_an_over_defines_the_prims_the_scene_lacks(stage, tmp_path):
    src = animated_scene_file(tmp_path)
    pop = ku.populate(stage, str(src), 1)
    stage.seal(1)
    # A clone of /W/Arm below a path the scene does not have, and a new typed prim.
    stage.clone("/W/Arm", ["/Extra/Group/Arm2"], 2).wait()
    stage.write(kstage.PRIM_TYPE, ["/Extra/Cube"], np.array([stage.token("Cube")], np.uint64),
                2, semantic="token_id").wait()
    stage.seal(2)
    layer = ku.export(stage, population=pop)
    root = Sdf.Layer.CreateAnonymous(".usda")
    root.subLayerPaths = [layer.identifier, str(src)]
    composed = Usd.Stage.Open(root)
    arm2 = composed.GetPrimAtPath("/Extra/Group/Arm2")
    assert arm2.IsDefined() and arm2.GetTypeName() == "Xform"
    assert arm2.GetAttribute("mass").Get() == 7.0
    assert composed.GetPrimAtPath("/Extra/Group").IsDefined()  # no type: a typeless def
    assert composed.GetPrimAtPath("/Extra/Cube").GetTypeName() == "Cube"
    # The scene's own prims stay overs, their types the scene's.
    assert layer.GetPrimAtPath("/W/Arm").specifier == Sdf.SpecifierOver
    assert not layer.GetPrimAtPath("/W/Arm").typeName
    # The clone's world transform in USD is kstage's.
    stage.compute_world_transforms(3).wait()
    stage.seal(3)
    with stage.read(["/Extra/Group/Arm2"], kstage.WORLD_MATRIX, compact=True) as r:
        (g,) = list(r)
        ours = np.from_dlpack(g.tensor(0)).reshape(4, 4)
    np.testing.assert_array_equal(np.array(UsdGeom.XformCache().GetLocalToWorldTransform(arm2)),
                                  ours)


def test_writer_refusals(stage):
    stage.write("pos", ["/p0"], np.zeros((1, 3), np.float32), 1).wait()
    stage.write("names", ["/p0"], [np.zeros(2, np.uint8)], 1, semantic="string").wait()
    stage.seal(1)
    w = ku.LayerWriter(stage)
    with pytest.raises(ku.UsdError, match="anonymous layer cannot be saved"):
        w.save()
    with pytest.raises(ku.UsdError, match="no prim of the query holds it") as e:
        w.write_points(stage.query(["/p0"]), "/Out", positions="pos", velocities="vel")
    assert e.value.attribute == "vel"
    with pytest.raises(ku.UsdError, match="fixed-size column") as e:
        w.write_points(stage.query(["/p0"]), "/Out", positions="names")
    assert e.value.attribute == "names"
    # A column no USD type has is left out, with its reason.
    stage.write("flags", ["/p0"], np.zeros(1, np.int8), 2).wait()
    stage.seal(2)
    report = ku.LayerWriter(stage).write()
    assert ("flags", "fixed int8 x 1 none", "no USD type has this schema") in report.skipped
