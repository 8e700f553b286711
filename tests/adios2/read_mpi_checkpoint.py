# SPDX-License-Identifier: Apache-2.0
"""A checkpoint that several MPI ranks wrote (mpi_ranks.cpp), read whole without kstage: ADIOS2's
own Python reader sees one step holding every rank's prims, by the layout of docs/adios2.md.

    python read_mpi_checkpoint.py <file.bp.ckpt> <writers>
"""
import os
import sys

import adios2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_with_adios2 import column, paths  # noqa: E402

PARTICLES, WALLS = 300, 4


def main(path, writers):
    with adios2.FileReader(path) as f:
        assert f.read_attribute("kstage/format_version") == 2
        blocks = f.read("kstage/blocks").reshape(-1, 6)
        assert blocks.shape[0] == writers + 1, blocks.shape
        assert np.all(np.diff(blocks, axis=0) >= 0), "each writer's block starts after the one before"
        everything = paths(f)
        assert len(everything) == len(set(everything)), "no prim is in two writers' blocks"
        assert blocks[-1][0] == len(everything)
        ids = column(f, "id", everything)
        pos = column(f, "position", everything)
        charge = column(f, "charge", everything)
    # Every particle but those the model deletes (i % 37 == 5, all gone by the last tick).
    alive = [i for i in range(PARTICLES) if i % 37 != 5]
    assert sorted(int(v) for v in ids.values()) == alive
    for p, i in ids.items():
        assert p == f"/particles/p{int(i)}", (p, i)
        assert pos[p][0] == float(i), (p, pos[p])
        assert (p in charge) == (int(i) % 2 == 0)
    assert all(f"/walls/w{k}" in pos for k in range(WALLS))
    print(f"read_mpi_checkpoint: {len(everything)} prims of {writers} writers, one step")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
