#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""kstage.usd against usd-core used directly, in the same run (issue #49's targets).

    python perf/usd_bench.py [--quick] [--sizes 1e4,1e5] [--repeat 5] [--json FILE] [--check]

Scenes: Newton's ant_multi.usda (4,105 composed prims, 64 ants; from KSTAGE_USD_ASSETS, see
scripts/setup/usd.sh) and generated scenes of N Xform prims (a translate and an orient op, their
xformOpOrder, a mass, a velocity, an id and a token each), written to a temporary usda file.

  populate           kstage.usd.populate(stage, file, 1) into a fresh stage (Usd.Stage.Open
                     included), the seal after it not timed
  usd_loader         what a user's own loader costs: Usd.Stage.Open plus one traversal reading
                     the same values (every authored attribute's Get(), every relationship's
                     targets, every Xformable's local transform and reset flag) into lists
  export             kstage.usd.export(stage, over=True, xform_since=1) of the populated stage
                     into an anonymous layer (every column read, converted, authored)
  usd_direct         the same values as a run would hold them -- numeric attributes in numpy
                     arrays (one per attribute), tokens, strings and assets as text, relationship
                     targets as path strings -- authored with usd-core directly: Sdf.ChangeBlock,
                     an over prim spec and an attribute (or relationship) spec per value, Vt
                     arrays from numpy

Each case is run --repeat times, interleaved with its baseline (A B A B ...); the figures are
medians. Targets (PASS/FAIL lines): populate <= 2x usd_loader, export <= 1.5x usd_direct.
Without --check the exit status is 0 whatever the targets say; with --check a miss exits 1.
"""
import argparse
import gc
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

import numpy as np

import kstage
import kstage.usd as ku


def generated_scene(path, n):
    from pxr import Gf, Sdf, Usd, UsdGeom, Vt
    layer = Sdf.Layer.CreateNew(str(path))
    rng = np.random.default_rng(3)
    t = Vt.Vec3dArray.FromNumpy(rng.random((n, 3)) * 100)
    q = Vt.QuatfArray.FromNumpy(rng.random((n, 4)).astype(np.float32))
    v = Vt.Vec3fArray.FromNumpy(rng.random((n, 3)).astype(np.float32))
    order = Vt.TokenArray(["xformOp:translate", "xformOp:orient"])
    with Sdf.ChangeBlock():
        world = Sdf.PrimSpec(layer, "World", Sdf.SpecifierDef, "Xform")
        for i in range(n):
            p = Sdf.PrimSpec(world, f"body_{i}", Sdf.SpecifierDef, "Xform")
            for name, tn, val in (("xformOp:translate", Sdf.ValueTypeNames.Double3, t[i]),
                                  ("xformOp:orient", Sdf.ValueTypeNames.Quatf, q[i]),
                                  ("xformOpOrder", Sdf.ValueTypeNames.TokenArray, order),
                                  ("physics:mass", Sdf.ValueTypeNames.Float, float(i % 7) + 1.0),
                                  ("physics:velocity", Sdf.ValueTypeNames.Vector3f, v[i]),
                                  ("body:id", Sdf.ValueTypeNames.Int, i),
                                  ("body:kind", Sdf.ValueTypeNames.Token, f"kind{i % 4}")):
                Sdf.AttributeSpec(p, name, tn).default = val
    layer.Save()
    del Gf, Usd, UsdGeom


def usd_loader(path):
    """A user's own loader: open, traverse, read every value populate reads."""
    from pxr import Usd, UsdGeom
    stage = Usd.Stage.Open(str(path))
    values, mats = [], []
    xformable = UsdGeom.Xformable
    for prim in Usd.PrimRange(stage.GetPseudoRoot(), Usd.TraverseInstanceProxies()):
        prim.GetTypeName()
        prim.GetAppliedSchemas()
        for a in prim.GetAuthoredAttributes():
            values.append(a.Get())
        for r in prim.GetAuthoredRelationships():
            values.append(r.GetTargets())
        if prim.IsA(xformable):
            x = xformable(prim)
            mats.append((x.GetLocalTransformation(), x.GetResetXformStack()))
    return len(values) + len(mats)


def columns_of(stage):
    """What export authors, as a user's run would hold it (untimed input of usd_direct): numeric
    columns as numpy arrays, tokens, strings and assets as their text (USD values), relationship
    targets as path strings."""
    from kstage.usd import _mapping
    w = ku.LayerWriter(stage)  # its id -> text conversion, to make the text inputs
    out = []
    for name in [a["name"] for a in stage.attributes()]:
        if name.startswith("usd-") or name.startswith("omni:") or name.endswith(".connect"):
            continue
        with stage.read(stage.query(), [name], compact=True) as read:
            for g in read:
                schema = _mapping.Schema(g.is_array, np.dtype(g.dtype), g.lanes, g.semantic)
                data = ([np.from_dlpack(g.tensor(i)).copy() for i in range(len(g))]
                        if g.is_array else np.from_dlpack(g.tensor(0)).copy())
                paths = list(g.paths)
                if schema == _mapping.RELATIONSHIP:
                    out.append((name, None, paths, [[stage.path(int(p)) for p in a] for a in data]))
                    continue
                t = _mapping.for_schema(schema)
                if t is None:
                    continue
                if t.family != _mapping.NUMERIC:
                    data = w._values(t, data)
                out.append((name, t, paths, data))
    return out


def usd_direct(columns):
    """The columns authored with usd-core directly into an anonymous layer (over specs)."""
    from kstage.usd import _mapping
    from pxr import Sdf
    layer = Sdf.Layer.CreateAnonymous(".usda")
    specs = {}

    def prim(p):
        spec = specs.get(p)
        if spec is None:
            spec = specs[p] = Sdf.CreatePrimInLayer(layer, p)
        return spec

    with Sdf.ChangeBlock():
        for name, t, paths, data in columns:
            if t is None:  # a relationship
                for p, targets in zip(paths, data):
                    Sdf.RelationshipSpec(prim(p), name).targetPathList.explicitItems = targets
                continue
            tn = Sdf.ValueTypeNames.Find(t.name)
            if t.family != _mapping.NUMERIC:
                values = data
            elif t.schema.is_array:
                cls = tn.type.pythonClass
                values = [cls.FromNumpy(np.ascontiguousarray(a).reshape((-1,) + t.shape))
                          for a in data]
            elif t.shape:
                cls = Sdf.ValueTypeNames.Find(t.name + "[]").type.pythonClass
                values = list(cls.FromNumpy(np.ascontiguousarray(data).reshape((-1,) + t.shape)))
            else:
                values = data.tolist()
            for p, v in zip(paths, values):
                Sdf.AttributeSpec(prim(p), name, tn).default = v
    return layer


def timed(fn):
    gc.collect()
    t0 = time.perf_counter()
    r = fn()
    return time.perf_counter() - t0, r


def run_scene(label, path, repeat):
    res = {"scene": label}
    pop_t, load_t, exp_t, dir_t = [], [], [], []
    warm = kstage.Stage()  # USD's plugins and schemas load on the first open: not timed
    ku.populate(warm, path, 1)
    warm.close()
    usd_loader(path)
    gc.collect()
    stage = None
    for _ in range(repeat):
        if stage is not None:
            stage.close()
        stage = kstage.Stage()
        t, pop = timed(lambda: ku.populate(stage, path, 1))
        pop_t.append(t)
        stage.seal(1)
        res["prims"], res["values"] = pop.report.prims, pop.report.values
        del pop  # its Usd.Stage holds the file's layers open: the loader must parse them too
        gc.collect()
        t, _ = timed(lambda: usd_loader(path))
        load_t.append(t)
    cols = columns_of(stage)
    for _ in range(repeat):
        t, _ = timed(lambda: ku.export(stage, over=True, xform_since=1))
        exp_t.append(t)
        t, _ = timed(lambda: usd_direct(cols))
        dir_t.append(t)
    stage.close()
    res.update(populate=statistics.median(pop_t), usd_loader=statistics.median(load_t),
               export=statistics.median(exp_t), usd_direct=statistics.median(dir_t))
    res["populate_vs_loader"] = res["populate"] / res["usd_loader"]
    res["export_vs_direct"] = res["export"] / res["usd_direct"]
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description="kstage.usd against usd-core used directly")
    ap.add_argument("--quick", action="store_true", help="1e3 and 1e4 prims, 2 repeats (CI)")
    ap.add_argument("--sizes", default="1e4,1e5", help="generated scenes' prim counts")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    args = ap.parse_args(argv)
    sizes = [1000, 10000] if args.quick else [int(float(s)) for s in args.sizes.split(",")]
    repeat = 2 if args.quick else args.repeat
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        assets = os.environ.get("KSTAGE_USD_ASSETS")
        if assets:
            results.append(run_scene("ant_multi", pathlib.Path(assets) /
                                     "newton/tests/assets/ant_multi.usda", repeat))
        else:
            print("KSTAGE_USD_ASSETS is not set: no ant_multi case", file=sys.stderr)
        for n in sizes:
            path = pathlib.Path(tmp) / f"gen_{n}.usda"
            generated_scene(path, n)
            results.append(run_scene(f"generated_{n}", path, repeat))
    print(f"{'scene':16} {'prims':>7} {'values':>8} {'populate':>9} {'loader':>9} {'ratio':>6} "
          f"{'export':>9} {'direct':>9} {'ratio':>6}")
    for r in results:
        print(f"{r['scene']:16} {r['prims']:7d} {r['values']:8d} {r['populate']:8.3f}s "
              f"{r['usd_loader']:8.3f}s {r['populate_vs_loader']:6.2f} {r['export']:8.3f}s "
              f"{r['usd_direct']:8.3f}s {r['export_vs_direct']:6.2f}")
    ok = True
    for r in results:
        for key, limit, what in (("populate_vs_loader", 2.0, "populate <= 2x the user's loader"),
                                 ("export_vs_direct", 1.5, "export <= 1.5x usd-core direct")):
            passed = r[key] <= limit
            ok &= passed
            print(f"{'PASS' if passed else 'FAIL'} {r['scene']}: {what}: {r[key]:.2f}x")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
