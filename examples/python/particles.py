# SPDX-License-Identifier: Apache-2.0
"""Particles, in Python: the work of examples/cpp/particles through the kstage package.

    python examples/python/particles.py [--particles N] [--ticks T] [--percent P] [--out FILE]
                                        [--checkpoint FILE.bp]

kstage is the simulation's state. Ordinal 1 holds every particle's "position" (float32 x 3,
POINT) and "velocity" (float32 x 3, VECTOR), inserted as one batch. Each tick k = 1..T:

  1. reads the latest positions and velocities back from the stage, **zero-copy**:
     ``np.from_dlpack(group)`` is a read-only view of the column's own storage; a second read
     with nothing written in between hands out the same memory (checked by address);
  2. moves about P % of the particles (a velocity kick, gravity, a bounce off the floor z = 0),
     starting from those views;
  3. writes both attributes of the moved particles at ordinal k + 1 in one ``write_batch``
     (PRIM_MODE_UPDATE) and seals it. Odd ticks send whole N-row arrays with a mask over all
     particles (the unselected rows are NaN: the stage never reads them); even ticks send a query
     over just the moved particles and compact rows in shuffled order with an index_map;
  4. asks the stage what changed at that ordinal (a change-range read ``range=(k + 1, k + 1)``):
     exactly the moved particles must come back, with the values just written.

A plain numpy model runs the same simulation on arrays of its own, with the same random
numbers. Every tick's change set and values, the final state of both attributes, and change-range
reads over the last w ticks (w = 1..T, against the model's "last tick each particle moved") are
checked against it; any mismatch exits with status 1. Tick 1 also keeps a view of the state it
read across the write and checks that it still shows the old values (a read is a snapshot).

The plot (matplotlib, Agg; --out, default particles.png in the current directory) shows the
particles from the side (x, z) coloured by the last tick they changed, as kstage's change-range
reads reported it, and how many particles changed within the last w ticks.

With --checkpoint FILE.bp (where kstage has its ADIOS2 bridge, ``kstage.adios2``) the final
stage is written as a BP5 checkpoint, and -- where ADIOS2's own Python module ``adios2`` is
installed too -- read back *without kstage*, by the file layout of docs/adios2.md: the positions
must be the model's, and a second picture (FILE.png next to the plot: the file's particles from
above and from the side, coloured by speed) is drawn from the file alone.

Where pyarrow and DuckDB are installed, the final state also goes to DuckDB as an Arrow table
(``stage.to_arrow``: the particles' paths, positions and velocities, without a copy of the
columns), and a SQL query over it -- how many particles are above z = 1, their mean speed -- is
checked against the model.

Run it against a build tree with ``PYTHONPATH=<build>/python`` (configure with
``-DKSTAGE_BUILD_PYTHON=ON``), or after ``pip install .``; it needs numpy and matplotlib.
"""
import argparse
import sys
import time

import numpy as np

import kstage

DT = 0.1  # time step
GRAVITY = 0.981  # z acceleration (negative z)
KICK = 0.01  # random velocity kick per component, uniform in [-KICK/2, KICK/2)
BOUNCE = 0.8  # speed kept by a particle bouncing off the floor z = 0


class Mismatch(Exception):
    """kstage handed back something the numpy model disagrees with."""


def step(p, v, kick):
    """One step of the moved particles: rows p, v (float32, (m, 3)); returns new arrays."""
    v = v + kick
    v[:, 2] -= np.float32(DT * GRAVITY)
    p = p + np.float32(DT) * v
    below = p[:, 2] < 0
    p[below, 2] = -p[below, 2]
    v[below, 2] = -np.float32(BOUNCE) * v[below, 2]
    return p, v


def latest(stage, query, attrs):
    """A zero-copy latest read of `attrs`: {attribute: (group, read-only view in prim order's rows)}."""
    out = {}
    for g in stage.read(query, attrs):
        if g.attribute in out:
            raise Mismatch(f"latest read: two groups for {g.attribute!r} (expected one per attribute)")
        view = np.from_dlpack(g)  # zero-copy: the column's storage, read-only
        if view.flags.writeable:
            raise Mismatch("a zero-copy read group exported a writable view")
        out[g.attribute] = (g, view)
    return out


def rows_of(group, prim_positions):
    """The tensor rows holding the group's prims at `prim_positions` (index_map None: identity)."""
    im = group.index_map
    return prim_positions if im is None else im[prim_positions]


def changes_at(stage, query, first, ordinal, model_pos, what):
    """The prim positions whose position changed at `ordinal`, checked against the model."""
    seen = []
    for g in stage.read(query, "position", range=(ordinal, ordinal)):
        with g:
            if g.is_tombstone or g.ordinal != ordinal or g.semantic != "point":
                raise Mismatch(f"{what}: unexpected change group {g!r}")
            changed = (g.prims - np.uint64(first)).astype(np.int64)
            values = np.from_dlpack(g)  # zero-copy; index_map names the rows of these prims
            if not np.array_equal(values[rows_of(g, np.arange(len(g)))], model_pos[changed]):
                raise Mismatch(f"{what}: changed positions differ from the model")
            seen.append(changed)
    return np.concatenate(seen) if seen else np.empty(0, np.int64)


def checkpoint(stage, path, model_pos, model_vel, picture):
    """The final stage as a BP5 checkpoint, then read back with ADIOS2 alone and drawn."""
    try:
        import kstage.adios2 as ka
    except ImportError as e:
        print(f"  checkpoint: skipped ({e})")
        return
    ka.checkpoint(stage, path)
    try:
        import adios2
    except ImportError:
        print(f"  checkpoint: {path} (ADIOS2's Python module is not installed: not read back)")
        return
    n = len(model_pos)
    with adios2.FileReader(path) as f:
        # docs/adios2.md: the step's paths are runs; a whole path range is one run {1, r, 0, n} of
        # range r = {begin, count}, named by {parent, prefix}; an attribute held by every path,
        # in order, has no "prims" positions.
        assert f.read_attribute("kstage/format") == "kstage"
        segments = f.read("kstage/paths/segments").reshape(-1, 4)
        numbers = f.read("kstage/ranges/numbers").reshape(-1, 2)
        if segments.tolist() != [[1, 0, 0, n]] or numbers.tolist() != [[0, n]]:
            raise Mismatch(f"{path}: the particles are not one range run ({segments.tolist()})")
        for name in ("position", "velocity"):
            if f"kstage/attr/{name}/prims" in f.available_variables():
                raise Mismatch(f"{path}: {name} is not held by every particle in order")
        pos = f.read("kstage/attr/position/values")
        vel = f.read("kstage/attr/velocity/values")
    if not (np.array_equal(pos, model_pos) and np.array_equal(vel, model_vel)):
        raise Mismatch(f"{path}: the file's positions or velocities differ from the model")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = np.linalg.norm(vel, axis=1)
    shown = np.random.default_rng(1).permutation(n)[:min(n, 6000)]
    fig, (top, side) = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (a, b), label in ((top, (0, 1), "y"), (side, (0, 2), "z")):
        sc = ax.scatter(pos[shown, a], pos[shown, b], s=3, c=speed[shown], cmap="plasma")
        ax.set_xlabel("x")
        ax.set_ylabel(label)
    top.set_title("from above (x, y)")
    side.set_title("from the side (x, z)")
    fig.colorbar(sc, ax=side, label="speed")
    fig.suptitle(f"{len(shown)} of {n} particles, read from {path.rsplit('/', 1)[-1]} with ADIOS2 alone")
    fig.tight_layout()
    fig.savefig(picture, dpi=100)
    plt.close(fig)
    print(f"  checkpoint: {path}, read back with ADIOS2's own reader: {n} positions and velocities "
          f"as the model's; picture {picture}")


def sql_over_arrow(stage, query, model_pos, model_vel):
    """The final state as an Arrow table (stage.to_arrow), queried with DuckDB's SQL."""
    try:
        import duckdb
        import pyarrow as pa
    except ImportError as e:
        print(f"  DuckDB: skipped ({e.name} is not installed)")
        return
    state = pa.table(stage.to_arrow(query, ["position", "velocity"], paths="strings"))  # noqa: F841 (SQL)
    above, speed = duckdb.sql(
        "SELECT count(*), avg(sqrt(velocity[1]*velocity[1] + velocity[2]*velocity[2] + velocity[3]*velocity[3])) "
        "FROM state WHERE position[3] > 1").fetchall()[0]
    high = model_pos[:, 2] > 1
    want_speed = float(np.linalg.norm(model_vel[high].astype(np.float64), axis=1).mean()) if high.any() else None
    if above != int(high.sum()) or (want_speed is not None and abs(speed - want_speed) > 1e-4 * max(1.0, want_speed)):
        raise Mismatch(f"DuckDB over kstage's Arrow table: {above} particles above z = 1 (mean speed {speed}), "
                       f"the model says {int(high.sum())} ({want_speed})")
    print(f"  DuckDB: {above} particles above z = 1, mean speed {speed:.4f} (SQL over stage.to_arrow, as the model)")


def run(n, ticks, percent, seed, out, checkpoint_path=None):
    rng = np.random.default_rng(seed)
    moved_per_tick = max(1, n * percent // 100)

    stage = kstage.Stage()
    first = stage.intern_range("/particles", "p", 0, n)  # /particles/p0 .. p<n-1>: ids first + i
    everyone = stage.query_range(first)  # the whole range, in order
    ids = np.arange(first, first + n, dtype=np.uint64)

    # The initial state, at ordinal 1; the model starts from copies of the same arrays.
    pos = np.empty((n, 3), np.float32)
    pos[:, :2] = rng.uniform(0, 10, (n, 2))
    pos[:, 2] = rng.uniform(0, 5, n)
    vel = rng.uniform(-0.5, 0.5, (n, 3)).astype(np.float32)
    model_pos, model_vel = pos.copy(), vel.copy()
    stage.write_batch(everyone, 1, {"position": kstage.Write(pos, semantic="point"),
                                    "velocity": kstage.Write(vel, semantic="vector")}, mode="insert").wait()
    stage.seal(1)
    del pos, vel  # the stage copied them: from here on the stage holds the state

    last_tick = np.zeros(n, np.int64)  # the last tick each particle changed, from kstage's reports
    model_last_tick = np.zeros(n, np.int64)
    scratch_pos = np.full((n, 3), np.nan, np.float32)  # the mask ticks' whole arrays
    scratch_vel = np.full((n, 3), np.nan, np.float32)
    addresses = []  # the position column's storage address at each tick, seen through reads
    t_read = t_write = t_changes = 0.0
    snapshot_checked = False

    for k in range(1, ticks + 1):
        ordinal = k + 1
        moved = np.sort(rng.choice(n, moved_per_tick, replace=False))  # prim positions, ascending
        kick = rng.uniform(-KICK / 2, KICK / 2, (moved_per_tick, 3)).astype(np.float32)
        shuffle = rng.permutation(moved_per_tick)

        # 1. The state, from the stage, zero-copy.
        t0 = time.perf_counter()
        state = latest(stage, everyone, ["position", "velocity"])
        t_read += time.perf_counter() - t0
        (gp, p_view), (gv, v_view) = state["position"], state["velocity"]
        if len(gp) != n or not np.array_equal(gp.prims, ids):
            raise Mismatch(f"tick {k}: the latest read's prims are not the particles in order")
        with next(iter(stage.read(everyone, "position"))) as again:  # nothing written since
            if np.from_dlpack(again).ctypes.data != p_view.ctypes.data:
                raise Mismatch(f"tick {k}: two reads with nothing written between them gave different memory")
        addresses.append(p_view.ctypes.data)

        # 2. Move the picked particles, from what the stage holds (fancy indexing copies).
        new_pos, new_vel = step(p_view[rows_of(gp, moved)], v_view[rows_of(gv, moved)], kick)
        model_pos[moved], model_vel[moved] = step(model_pos[moved], model_vel[moved], kick)
        model_last_tick[moved] = k
        old_pos = None
        if k == 1:
            old_pos = p_view  # kept across the write: a snapshot, whatever is sealed meanwhile
            old_expected = p_view.copy()
        # Let go of the views and groups before writing: a sparse seal then updates the column's
        # storage in place; a view still held would make it copy the column first (see old_pos).
        gp.release(), gv.release()
        del state, gp, gv, p_view, v_view

        # 3. Hand the moved particles to the stage.
        t0 = time.perf_counter()
        if k % 2 == 1:  # whole arrays; the mask picks the moved prims of `everyone`
            scratch_pos[moved], scratch_vel[moved] = new_pos, new_vel
            mask = np.zeros(n, bool)
            mask[moved] = True
            target = everyone
            writes = {"position": kstage.Write(scratch_pos, mask=mask, semantic="point"),
                      "velocity": kstage.Write(scratch_vel, mask=mask, semantic="vector")}
        else:  # a query over the moved prims; row j of the tensors holds query prim shuffle[j]
            target = stage.query(ids[moved])  # path ids, ascending
            index_map = np.empty(moved_per_tick, np.uint32)
            index_map[shuffle] = np.arange(moved_per_tick, dtype=np.uint32)  # prim i's row
            writes = {"position": kstage.Write(new_pos[shuffle], index_map=index_map, semantic="point"),
                      "velocity": kstage.Write(new_vel[shuffle], index_map=index_map, semantic="vector")}
        stage.write_batch(target, ordinal, writes, mode="update").wait()
        stage.seal(ordinal)
        t_write += time.perf_counter() - t0
        if k % 2 == 1:
            scratch_pos[moved] = scratch_vel[moved] = np.nan
        else:
            target.release()

        if old_pos is not None:
            if not np.array_equal(old_pos, old_expected):
                raise Mismatch("tick 1: a view read before the write changed after the seal")
            snapshot_checked = True
            del old_pos, old_expected

        # 4. What changed at this ordinal? Exactly the moved particles, with the new values.
        t0 = time.perf_counter()
        seen = changes_at(stage, everyone, first, ordinal, model_pos, f"tick {k}")
        t_changes += time.perf_counter() - t0
        if not np.array_equal(seen, moved):
            raise Mismatch(f"tick {k}: {len(seen)} changes reported, {moved_per_tick} particles moved"
                           if len(seen) != moved_per_tick else f"tick {k}: the changed prims are not the moved ones")
        last_tick[seen] = k

    # The final state: every particle, both attributes.
    state = latest(stage, everyone, ["position", "velocity"])
    for name, model in (("position", model_pos), ("velocity", model_vel)):
        g, view = state[name]
        if g.ordinal != ticks + 1 or not np.array_equal(view[rows_of(g, np.arange(n))], model):
            raise Mismatch(f"final state: {name} differs from the model")
        g.release()
    del state, g, view

    # Change ranges: particles that changed within the last w ticks, for every w.
    window_counts = []
    for w in range(1, ticks + 1):
        begin = ticks - w + 2  # the ordinal of tick ticks - w + 1
        prims = [g.prims - np.uint64(first) for g in stage.read(everyone, "position", range=(begin, ticks + 1))]
        prims = np.concatenate(prims).astype(np.int64) if prims else np.empty(0, np.int64)
        expected = np.flatnonzero(model_last_tick > ticks - w)
        if not np.array_equal(np.sort(prims), expected):
            raise Mismatch(f"change range [{begin}, {ticks + 1}]: {len(prims)} prims, the model says {len(expected)}")
        window_counts.append(len(prims))
    if not np.array_equal(last_tick, model_last_tick):
        raise Mismatch("the last tick each particle changed differs from the model")

    plot(out, model_pos, last_tick, window_counts, n, ticks, moved_per_tick)

    moved_rows = moved_per_tick * ticks
    print(f"kstage {kstage.__version__} Python particles example")
    print(f"  particles {n}, ticks {ticks}, moved per tick {moved_per_tick}")
    print(f"  state reads  {t_read / ticks * 1e6:.0f} us per tick (position + velocity, zero-copy)")
    print(f"  producer     {2 * moved_rows / t_write:.3g} rows/s (position + velocity, write_batch + seal)")
    print(f"  consumer     {moved_rows / t_changes:.3g} rows/s (position change ranges, checked)")
    moves = [k for k in range(2, ticks + 1) if addresses[k - 1] != addresses[k - 2]]
    print(f"  position storage: read zero-copy every tick; it moved before ticks {moves or 'none'} "
          f"(a view of tick 1 was held across its write{', and kept its values' if snapshot_checked else ''})")
    print(f"  plot: {out}")
    sql_over_arrow(stage, everyone, model_pos, model_vel)
    if checkpoint_path:
        checkpoint(stage, checkpoint_path, model_pos, model_vel, checkpoint_path + ".png")
    print("python particles: OK")


def plot(out, pos, last_tick, window_counts, n, ticks, moved_per_tick):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (side, ranges) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [3, 2]})
    shown = np.random.default_rng(0).permutation(n)[:min(n, 6000)]  # a sample, in random order
    still = shown[last_tick[shown] == 0]
    moved = shown[last_tick[shown] > 0]
    side.scatter(pos[still, 0], pos[still, 2], s=4, c="0.8", label="not moved since ordinal 1")
    sc = side.scatter(pos[moved, 0], pos[moved, 2], s=4, c=last_tick[moved], cmap="viridis", vmin=1,
                      vmax=max(ticks, 2))
    fig.colorbar(sc, ax=side, label="last tick changed (kstage change-range reads)")
    side.set_xlabel("x")
    side.set_ylabel("z")
    side.set_title(f"side view after {ticks} ticks ({len(shown)} of {n} particles)")
    side.legend(loc="upper right", markerscale=3, fontsize="small", framealpha=0.9)

    w = np.arange(1, ticks + 1)
    expected = n * (1 - (1 - moved_per_tick / n) ** w)  # a particle is picked with p = m/n per tick
    ranges.plot(w, window_counts, "o-", ms=3, label="change-range read [T - w + 2, T + 1]")
    ranges.plot(w, expected, "--", c="0.4", label=r"expected: $n(1 - (1 - m/n)^w)$")
    ranges.set_xlabel("last w ticks")
    ranges.set_ylabel("particles changed")
    ranges.set_title("what changed, by change range")
    ranges.legend(fontsize="small")
    ranges.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--particles", "-n", type=int, default=100_000, help="number of particles (default 100000)")
    parser.add_argument("--ticks", "-t", type=int, default=50, help="ticks (default 50)")
    parser.add_argument("--percent", "-f", type=int, default=5, help="percent of particles moved per tick (default 5)")
    parser.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    parser.add_argument("--out", default="particles.png", help="the plot (PNG; default particles.png)")
    parser.add_argument("--checkpoint", metavar="FILE.bp",
                        help="write the final stage as a BP5 checkpoint (kstage.adios2), read it back with "
                             "ADIOS2's own reader and draw it to FILE.bp.png")
    args = parser.parse_args(argv)
    if not 1 <= args.particles < 2**32 or args.ticks < 1 or not 1 <= args.percent <= 100:
        parser.error("need 1 <= particles < 2^32, ticks >= 1 and 1 <= percent <= 100")
    try:
        run(args.particles, args.ticks, args.percent, args.seed, args.out, args.checkpoint)
    except Mismatch as e:
        print(f"python particles: MISMATCH: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
