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
