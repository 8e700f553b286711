# SPDX-License-Identifier: Apache-2.0
"""kstage.adios2 on MPI ranks, with mpi4py's communicators (not a pytest module: mpirun runs it on
2 and 3 ranks, ctest python_adios2_mpi_<ranks>, where the bridge has its MPI form).

    mpirun -n P python mpi_adios2.py <work-dir>

Each rank's stage holds its 100 particles (a path range of its own) with a position; a checkpoint
on every rank, restarted on every rank (each its own prims back), and by rank 0 alone with the
serial call (every rank's prims); a stream of a full and an incremental step read back on the
ranks; a failure on one rank raised on every rank.
"""
import os
import sys

import numpy as np
from mpi4py import MPI

import kstage
import kstage.adios2 as ka

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
N = 100


def mine(rank_):
    s = kstage.Stage()
    first = s.intern_range("/p", "x", rank_ * N, N)
    q = s.query_range(first)
    pos = np.arange(rank_ * N * 3, (rank_ + 1) * N * 3, dtype=np.float32).reshape(N, 3)
    s.write("pos", q, pos, 1, semantic="point")
    s.seal(1)
    return s, q


def positions(stage):
    out = {}
    for g in stage.read(stage.query(), "pos", compact=True):
        values = np.from_dlpack(g.tensor(0))
        for i, p in enumerate(g.paths):
            out[p] = values[i].tolist()
    return out


def expected(ranks):
    return {f"/p/x{i}": [3.0 * i, 3.0 * i + 1, 3.0 * i + 2] for r in ranks for i in range(r * N, (r + 1) * N)}


def main(work):
    s, q = mine(rank)
    path = os.path.join(work, f"ckpt-{size}.bp")
    ka.checkpoint(s, path, comm=comm)
    fresh = kstage.Stage()
    assert ka.restart(fresh, path, comm=comm) == 1
    assert positions(fresh) == expected([rank]), "each rank gets its own block back"
    comm.Barrier()
    if rank == 0:  # one process, the serial call: every rank's prims, one step
        one = kstage.Stage()
        assert ka.restart(one, path) == 1
        assert positions(one) == expected(range(size))
    comm.Barrier()

    # A stream on the ranks: a full step, then one moved particle per rank.
    ticks = os.path.join(work, f"ticks-{size}.bp")
    with ka.Stream(ticks, comm=comm) as w:
        w.write_step(s)
        moved = f"/p/x{rank * N + 7}"
        s.write("pos", s.query([moved]), np.full((1, 3), -1.0, np.float32), 2, semantic="point")
        s.seal(2)
        w.write_step(s, q, "pos", change_range=(2, 2))
    reader = kstage.Stage()
    with ka.Stream(ticks, "r", comm=comm) as r:
        assert list(r.steps(reader)) == [1, 2]
    want = expected([rank])
    want[f"/p/x{rank * N + 7}"] = [-1.0, -1.0, -1.0]
    assert positions(reader) == want

    # A failure on the last rank (a restart into its own stage: not above its floor) is every
    # rank's, the others naming the failing rank.
    target = s if rank == size - 1 else kstage.Stage()
    try:
        ka.restart(target, path, comm=comm)
    except kstage.InvalidArgument as e:
        if rank != size - 1:
            assert f"failed on rank {size - 1} of {size}" in str(e), str(e)
    else:
        raise AssertionError("the restart did not fail")
    # A communicator that is not one.
    try:
        ka.checkpoint(s, path, comm="world")
    except TypeError:
        pass
    else:
        raise AssertionError("a string communicator was taken")
    comm.Barrier()

    # Verified restarts on the ranks (#50): restart(manifest="required", comm=), and the pointer
    # procedure with comm=; the latest checkpoint damaged (rank 0 flips a byte) is refused on
    # every rank.
    again = kstage.Stage()
    assert ka.restart(again, path, comm=comm, manifest="required") == 1
    assert positions(again) == expected([rank])
    pointer = os.path.join(work, f"latest-{size}")
    if rank == 0 and os.path.exists(pointer):  # (a run before this one's)
        os.remove(pointer)
    comm.Barrier()
    for name in ("0", "1"):
        ka.checkpoint_latest(s, pointer, comm=comm)
        with open(pointer) as f:
            assert f.read() == f"latest-{size}.{name}\n"
        latest = kstage.Stage()
        assert ka.restart_latest(latest, pointer, comm=comm) == 2
        assert positions(latest) == want
    comm.Barrier()
    if rank == 0:
        with open(pointer + ".1/data.0", "r+b") as f:
            f.seek(9)
            byte = f.read(1)
            f.seek(9)
            f.write(bytes([byte[0] ^ 0x40]))
    comm.Barrier()
    refused = kstage.Stage()
    try:
        ka.restart_latest(refused, pointer, comm=comm)
    except kstage.OpFailed as e:
        assert "data.0" in str(e), str(e)
    else:
        raise AssertionError("a damaged latest checkpoint was restarted")
    assert positions(refused) == {}
    comm.Barrier()
    if rank == 0:
        print(f"mpi_adios2: {size} ranks: checkpoint, restart, serial restart, stream, agreed failure, "
              "verified restart, latest: OK")


if __name__ == "__main__":
    main(sys.argv[1])
