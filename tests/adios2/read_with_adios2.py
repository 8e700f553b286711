# SPDX-License-Identifier: Apache-2.0
"""A kstage checkpoint read without kstage: ADIOS2's own Python reader and numpy, by the layout of
docs/adios2.md. Checks what sample_checkpoint.c wrote, then draws the particles' positions.

    python read_with_adios2.py <file.bp> <picture.png> <N>
"""
import sys

import adios2
import numpy as np


def strings(f, table):
    chars = f.read(table + "/chars") if table + "/chars" in f.available_variables() else np.zeros(0, np.uint8)
    offsets = f.read(table + "/offsets")
    data = bytes(chars)
    return [data[offsets[i]:offsets[i + 1]].decode() for i in range(len(offsets) - 1)]


def paths(f):
    """The step's paths: runs of explicit strings and of path-range members."""
    explicit = strings(f, "kstage/paths/strings")
    numbers = f.read("kstage/ranges/numbers").reshape(-1, 2)
    names = strings(f, "kstage/ranges/strings")
    out = []
    for kind, a, b, c in f.read("kstage/paths/segments").reshape(-1, 4):
        if kind == 0:
            out += explicit[a:a + b]
        else:
            parent, prefix = names[2 * a], names[2 * a + 1]
            out += [f"{parent}/{prefix}{numbers[a][0] + k}" for k in range(b, b + c)]
    assert len(out) == f.read("kstage/paths/count"), "the runs hold every path"
    return out


def column(f, name, all_paths):
    """{path: row} of a fixed-size attribute."""
    values = f.read(f"kstage/attr/{name}/values")
    count = int(f.read(f"kstage/attr/{name}/count"))
    at = f"kstage/attr/{name}/prims"
    positions = f.read(at) if at in f.available_variables() else np.arange(count)
    return {all_paths[p]: values[i] for i, p in enumerate(positions)}


def main(path, picture, n):
    with adios2.FileReader(path) as f:
        assert f.read_attribute("kstage/format") == "kstage"
        assert list(f.read_attribute("kstage/attr/position/dtype")) == [2, 32, 3]  # float32 x 3
        assert f.read_attribute("kstage/attr/position/kind") == "fixed"
        assert f.read_attribute("kstage/attr/position/semantic") == 1  # POINT
        everything = paths(f)
        assert len(everything) == n + 1
        pos = column(f, "position", everything)
        mass = column(f, "mass", everything)
    assert len(pos) == n + 1 and len(mass) == n
    assert np.array_equal(pos["/world/origin"], np.zeros(3, np.float32))
    for i in (0, 1, n // 2, n - 1):
        want = np.array([i, 2 * i, -i], np.float32) / 4
        assert np.array_equal(pos[f"/world/particles/p{i}"], want), (i, pos[f"/world/particles/p{i}"])
        assert mass[f"/world/particles/p{i}"] == i
    assert "/world/origin" not in mass

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    xyz = np.array([pos[p] for p in everything])
    fig = plt.figure(figsize=(5, 4))
    ax = fig.add_subplot(projection="3d")
    ax.scatter(xyz[:, 0], xyz[:, 1], xyz[:, 2], s=2, c=xyz[:, 0], cmap="viridis")
    ax.set_title(f"{len(xyz)} positions from a kstage checkpoint")
    fig.savefig(picture, dpi=80)
    print(f"read_with_adios2: {len(everything)} paths, positions and masses as written; picture {picture}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
