# SPDX-License-Identifier: Apache-2.0
"""A USD scene in a kstage stage: load Newton's 64-ant scene, clone one environment to many,
move their roots each tick, compute world transforms, and write the run as an animated USD layer.

    python examples/python/usd_scene.py --envs 1024 --ticks 10 --out usd_scene_out

What it does, with the calls a user would make:
  1. kstage.usd.populate: every prim of ant_multi.usda (Newton's test asset: 64 ants under
     /World/envs) with its type, applied schemas, attributes and local transforms.
  2. Stage.clone_range: /World/envs/env_0 (64 prims) to the members of a path range
     /World/clones/env_<i>; the joints' body relationships are rebased into each copy.
  3. each tick: the clones' root transforms written as one (N, 16) array; world transforms
     computed (incremental: only the moved roots and their subtrees); the layer gets the moved
     roots' transforms as time samples (a change-range export).
  4. the layer (a standalone usda: every prim and value at the first tick, then the samples)
     is checked with usd-core's UsdGeom.XformCache against kstage's world matrices, and a
     picture of the last tick is drawn with matplotlib.

The assets come from the newton wheel (scripts/setup.sh --python unpacks them; --assets or
KSTAGE_USD_ASSETS names the folder). Needs kstage[usd] and matplotlib.
"""
import argparse
import os
import pathlib
import time

import numpy as np

import kstage
import kstage.usd


def roots_at(tick, n, spacing=4.0):
    """(n, 16) row-vector transforms: a grid of n roots, turning about z with the ticks."""
    side = int(np.ceil(np.sqrt(n)))
    i = np.arange(n)
    angle = 0.1 * tick + 0.002 * i
    m = np.zeros((n, 4, 4))
    m[:, 0, 0] = m[:, 1, 1] = np.cos(angle)
    m[:, 0, 1], m[:, 1, 0] = np.sin(angle), -np.sin(angle)
    m[:, 2, 2] = m[:, 3, 3] = 1.0
    m[:, 3, 0] = 80.0 + (i % side) * spacing + 0.5 * tick  # beside ant_multi's 8 x 8 grid
    m[:, 3, 1] = -60.0 + (i // side) * spacing
    return m.reshape(n, 16)


def world_of(stage, paths):
    out = {}
    with stage.read(stage.query(paths), kstage.WORLD_MATRIX, compact=True) as read:
        for g in read:
            for p, m in zip(g.paths, np.from_dlpack(g.tensor(0)).reshape(-1, 4, 4)):
                out[p] = m.copy()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--assets", default=os.environ.get("KSTAGE_USD_ASSETS"),
                    help="the folder with newton/tests/assets/ant_multi.usda")
    ap.add_argument("--envs", type=int, default=1024, help="clones of env_0")
    ap.add_argument("--ticks", type=int, default=10)
    ap.add_argument("--out", default="usd_scene_out", help="folder for run.usda and the picture")
    args = ap.parse_args()
    if not args.assets:
        ap.error("--assets or KSTAGE_USD_ASSETS: the folder of the newton wheel's assets")
    source = pathlib.Path(args.assets) / "newton/tests/assets/ant_multi.usda"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from pxr import Sdf, Usd, UsdGeom

    stage = kstage.Stage()
    t0 = time.perf_counter()
    pop = kstage.usd.populate(stage, source, 1)
    stage.seal(1)
    print(f"populate: {pop.report.prims} prims, {pop.report.values} values in "
          f"{len(pop.report.columns)} columns ({time.perf_counter() - t0:.2f} s)")

    n = args.envs
    first = stage.intern_range("/World/clones", "env_", 0, n)
    t0 = time.perf_counter()
    stage.clone_range("/World/envs/env_0", first, 2).wait()
    stage.seal(2)
    clones = stage.query_range(first, 0, n)
    print(f"clone: env_0 to {n} environments ({time.perf_counter() - t0:.3f} s)")

    writer = kstage.usd.LayerWriter(stage, out / "run.usda", over=False, xform_since=pop.ordinal)
    ordinal = 2
    for tick in range(args.ticks):
        ordinal += 1
        stage.write(kstage.LOCAL_MATRIX, clones, roots_at(tick, n), ordinal,
                    semantic="matrix").wait()
        stage.seal(ordinal)
        stage.compute_world_transforms(ordinal + 1).wait()
        stage.seal(ordinal + 1)
        if tick == 0:
            writer.write()                              # every prim and value, as defaults
        writer.write(time=tick, since=ordinal - 1)      # the moved roots, as time samples
        ordinal += 1
    writer.save()
    print(f"exported {args.ticks} ticks to {out / 'run.usda'}")

    # usd-core's answer for the last tick equals kstage's, for a sample of every clone's bodies.
    layer_stage = Usd.Stage.Open(str(out / "run.usda"))
    cache = UsdGeom.XformCache(args.ticks - 1)
    torsos = [stage.path(first + i) + "/Robot/torso" for i in range(0, n, max(1, n // 64))]
    ours = world_of(stage, torsos)
    for p in torsos:
        want = np.array(cache.GetLocalToWorldTransform(layer_stage.GetPrimAtPath(p)))
        assert np.allclose(ours[p], want, rtol=1e-12, atol=1e-9), p
    print(f"usd-core's world transforms of {len(torsos)} torsos at the last tick equal kstage's")

    # The picture: every body of every ant, seen from above.
    bodies = stage.query(prefix="/World")
    xy, env = [], []
    with stage.read(bodies, kstage.WORLD_MATRIX, compact=True) as read:
        for g in read:
            w = np.from_dlpack(g.tensor(0)).reshape(-1, 4, 4)
            xy.append(w[:, 3, :2])
            env.append(np.array(["/World/clones/" in p for p in g.paths]))
    xy, env = np.concatenate(xy), np.concatenate(env)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 7), dpi=100)
    ax.scatter(xy[~env, 0], xy[~env, 1], s=1, c="0.6", label="ant_multi's 64 ants")
    ax.scatter(xy[env, 0], xy[env, 1], s=1, c="tab:blue", label=f"{n} clones of env_0")
    ax.set_aspect("equal")
    ax.set_title(f"kstage: ant_multi.usda, env_0 cloned {n}x, tick {args.ticks - 1} "
                 "(world transforms)")
    ax.legend(loc="lower right", markerscale=8)
    fig.savefig(out / "usd_scene.png", bbox_inches="tight")
    print(f"picture: {out / 'usd_scene.png'}")
    stage.close()
    del Sdf


if __name__ == "__main__":
    main()
