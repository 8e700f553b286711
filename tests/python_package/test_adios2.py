# SPDX-License-Identifier: Apache-2.0
"""kstage.adios2: checkpoint and restart, streams of full and incremental steps, and errors (only
where kstage was built with its ADIOS2 bridge: skipped otherwise, e.g. for a pip install)."""
import pytest

np = pytest.importorskip("numpy", minversion="2.1")
try:
    import kstage.adios2 as ka
except ImportError as e:  # importorskip takes only ModuleNotFoundError from pytest 8.2 on
    pytest.skip(f"kstage was built without its ADIOS2 bridge: {e}", allow_module_level=True)

import kstage  # noqa: E402


def state(stage):
    out = {}
    for info in stage.attributes():
        rows = {}
        for g in stage.read(stage.query(), info["name"], compact=True):
            values = np.from_dlpack(g.tensor(0))
            for i, p in enumerate(g.paths):
                rows[p] = values[i].tolist()
        out[info["name"]] = (info["write_floor"], info["prim_count"], str(info["dtype"]), info["lanes"], rows)
    return out


def filled():
    s = kstage.Stage()
    first = s.intern_range("/world/p", "p", 0, 50)
    q = s.query_range(first)
    s.write("pos", q, np.arange(150, dtype=np.float32).reshape(50, 3), 1, semantic="point")
    s.write("mass", s.query(["/world/heavy"]), np.array([7.0]), 1)
    s.seal(1)
    return s, q


def test_checkpoint_restart_round_trip(tmp_path):
    s, _ = filled()
    ka.checkpoint(s, tmp_path / "c.bp")
    fresh = kstage.Stage()
    assert ka.restart(fresh, tmp_path / "c.bp") == 1
    assert state(fresh) == state(s)
    assert fresh.range_info(fresh.intern("/world/p/p7"))[1] == 50  # the range is a range again


def test_checkpoint_of_clones_with_path_ranges(tmp_path):
    """The copies of a path range a clone made are ranges in the checkpoint, and again after it."""
    s, _ = filled()
    s.write("mass", s.query(["/world"]), np.array([1.0]), 2)
    s.seal(2)
    s.clone("/world", ["/copy/a", "/copy/b"], 3).wait()
    s.seal(3)
    ka.checkpoint(s, tmp_path / "c.bp")
    fresh = kstage.Stage()
    assert ka.restart(fresh, tmp_path / "c.bp") == 3
    assert state(fresh) == state(s)
    for t in ("/copy/a", "/copy/b"):
        assert fresh.range_info(fresh.intern(t + "/p/p7"))[1] == 50


def test_incremental_steps_in_order(tmp_path):
    s, q = filled()
    path = tmp_path / "ticks.bp"
    with ka.Stream(path) as w:
        w.write_step(s)
        for tick in (2, 3):
            s.write("pos", s.query([f"/world/p/p{tick}"]), np.full((1, 3), tick, np.float32), tick,
                    semantic="point")
            s.delete(s.query([f"/world/p/p{40 + tick}"]), tick)
            s.seal(tick)
            w.write_step(s, q, "pos", change_range=(tick, tick))
    reader = kstage.Stage()
    with ka.Stream(path, "r") as r:
        assert list(r.steps(reader)) == [1, 2, 3]
    assert state(reader)["pos"] == state(s)["pos"]


def test_errors_name_the_input(tmp_path):
    s, _ = filled()
    with pytest.raises(kstage.NotSupported, match="NoSuchEngine"):
        ka.Stream(tmp_path / "x.bp", engine="NoSuchEngine")
    with pytest.raises(ValueError, match="mode"):
        ka.Stream(tmp_path / "x.bp", "a")
    ka.checkpoint(s, tmp_path / "c.bp")
    with pytest.raises(kstage.InvalidArgument, match="not above the stage's write floor"):
        ka.restart(s, tmp_path / "c.bp")  # its own checkpoint: steps out of order
    w = ka.Stream(tmp_path / "y.bp")
    w.close()
    w.close()  # idempotent
    with pytest.raises(kstage.InvalidHandle):
        w.write_step(s)


def test_a_communicator_needs_the_mpi_form(tmp_path):
    """comm= is for a bridge with its MPI form (tests/python_package/mpi_adios2.py runs that under
    mpirun); without one it is NotSupported, naming what is missing."""
    from kstage import _adios2
    if _adios2.has_mpi:
        pytest.skip("this bridge has its MPI form: mpi_adios2.py tests comm=")
    s, _ = filled()
    with pytest.raises(kstage.NotSupported, match="no MPI form"):
        ka.checkpoint(s, tmp_path / "c.bp", comm=0)
    with pytest.raises(kstage.NotSupported, match="no MPI form"):
        ka.Stream(tmp_path / "s.bp", comm=0)


def test_a_damaged_checkpoint_is_refused_before_adios2_reads_it(tmp_path):
    """The manifest (docs/adios2.md, "Checkpoints that can be trusted"): a byte flipped in data.0
    raises OpFailed naming the file, the stage unchanged; without a manifest, "required" refuses
    and the default reads it."""
    s, _ = filled()
    path = tmp_path / "c.bp"
    ka.checkpoint(s, path)
    assert (path / "kstage.manifest").read_text().startswith("kstage-manifest 1\n")
    data = bytearray((path / "data.0").read_bytes())
    data[len(data) // 2] ^= 0x40
    (path / "data.0").write_bytes(bytes(data))
    fresh = kstage.Stage()
    with pytest.raises(kstage.OpFailed, match="data.0' does not match its manifest"):
        ka.restart(fresh, path)
    assert state(fresh) == {}
    clean = tmp_path / "clean.bp"
    ka.checkpoint(s, clean)
    (clean / "kstage.manifest").unlink()
    with pytest.raises(kstage.InvalidArgument, match="has no manifest"):
        ka.restart(kstage.Stage(), clean, manifest="required")
    with pytest.raises(ValueError, match="manifest must be one of"):
        ka.restart(kstage.Stage(), clean, manifest="sometimes")
    unchecked = kstage.Stage()
    assert ka.restart(unchecked, clean, manifest="if_present") == 1
    assert state(unchecked) == state(s)


def test_checkpoint_latest_names_the_complete_one(tmp_path):
    s, q = filled()
    pointer = tmp_path / "run"
    with pytest.raises(kstage.InvalidArgument, match="names no checkpoint"):
        ka.restart_latest(kstage.Stage(), pointer)
    ka.checkpoint_latest(s, pointer)
    assert pointer.read_text() == "run.0\n"
    s.write("pos", s.query(["/world/p/p3"]), np.full((1, 3), 9, np.float32), 2, semantic="point")
    s.seal(2)
    ka.checkpoint_latest(s, pointer)
    assert pointer.read_text() == "run.1\n"
    fresh = kstage.Stage()
    assert ka.restart_latest(fresh, pointer) == 2
    assert state(fresh) == state(s)
