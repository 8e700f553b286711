# SPDX-License-Identifier: Apache-2.0
"""Threads: several Python threads writing distinct attributes and prims, sealing, reading and
exporting at once give consistent snapshots, with no deadlock (joins have timeouts; a watchdog
dumps every thread's stack and ends the process if one hangs in C)."""
import contextlib
import faulthandler
import queue
import sys
import threading
import time

import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import describe_exit, run_python, values_in_prim_order  # noqa: E402

JOIN_TIMEOUT = 60.0


@contextlib.contextmanager
def watchdog(seconds=120):
    """Ends the process with every thread's traceback if the test hangs where Python cannot
    run (a deadlock in C with the GIL held): better than a silent hang of the whole suite."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def run_threads(targets, timeout=JOIN_TIMEOUT):
    """Starts one daemon thread per callable, joins them all with a deadline; returns the
    exceptions they raised. Fails if one is still running at the deadline."""
    errors = []
    lock = threading.Lock()

    def wrap(fn):
        def body():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001  (reported by the test)
                import traceback

                with lock:
                    errors.append("".join(traceback.format_exception(e)))

        return body

    threads = [threading.Thread(target=wrap(fn), daemon=True, name=f"t{i}") for i, fn in enumerate(targets)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads {hung} still running after {timeout} s (deadlock?)"
    return errors


@pytest.mark.parametrize("host_execution", ["default", "serial"])
def test_writers_readers_and_sealers_at_once(host_execution):
    """W writer threads each own an attribute and a set of prims: write value k at ordinal k,
    seal that attribute, read it back. R reader threads read every attribute meanwhile: every
    snapshot holds one value, equal to its ordinal (each ordinal is written, then sealed). A
    checker thread holds exports from the readers and checks that later seals never change them."""
    W, R, N, K = 4, 2, 64, 400
    stage = kstage.Stage(host_execution=host_execution)
    held = queue.Queue()
    done = threading.Event()
    remaining = [W]
    count_lock = threading.Lock()
    attrs = [f"a{w}" for w in range(W)]
    shared = [f"/shared/p{i}" for i in range(N)]

    def writer(w):
        own = stage.query([f"/w{w}/p{i}" for i in range(N)])
        for k in range(1, K + 1):
            stage.write(attrs[w], own, np.full(N, k, np.float64), k)
            if k % 3 == 0:  # the prims every writer shares, under the writer's own attribute
                stage.write(attrs[w], shared, np.full(N, k, np.float64), k)
            stage.seal(k, attrs[w])
            (g,) = stage.read(own, attrs[w], compact=True)
            got = np.from_dlpack(g.tensor(0))
            assert g.ordinal == k and (got == k).all(), (w, k, g.ordinal, got[:4])
            g.release()

    def reader(r):
        q = stage.query([f"/w{w}/p{i}" for w in range(W) for i in range(N)] + shared)
        rounds = 0
        while not done.is_set() or rounds < 20:
            rounds += 1
            for g in stage.read(q, attrs):
                x = np.from_dlpack(g.tensor(0))
                vals = values_in_prim_order(g)
                shared_rows = np.array([p.startswith("/shared") for p in g.paths])
                # own prims: written at every ordinal; shared prims: at every third
                assert (vals[~shared_rows] == g.ordinal).all(), (g.attribute, g.ordinal, vals[:4])
                assert (vals[shared_rows] == g.ordinal // 3 * 3).all(), (g.attribute, g.ordinal)
                assert shared_rows.any() == (g.ordinal >= 3)
                if rounds % 3 == 0:
                    held.put((x.copy(), x))
                g.release()

    readers_done = threading.Event()
    readers_left = [R]

    def reader_then_count(r):
        try:
            reader(r)
        finally:
            with count_lock:
                readers_left[0] -= 1
                if readers_left[0] == 0:
                    readers_done.set()

    def checker():
        kept = []
        while not readers_done.is_set() or not held.empty():
            try:
                kept.append(held.get(timeout=0.05))
            except queue.Empty:
                pass
            for want, x in kept[-50:]:
                assert np.array_equal(want, x), "an export changed after a later seal"
        for want, x in kept:
            assert np.array_equal(want, x), "an export changed after a later seal"
        assert kept, "the readers exported nothing"

    def writer_then_count(w):
        try:
            writer(w)
        finally:
            with count_lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

    with watchdog():
        errors = run_threads([lambda w=w: writer_then_count(w) for w in range(W)]
                             + [lambda r=r: reader_then_count(r) for r in range(R)] + [checker])
    assert not errors, "\n".join(errors)
    assert held.empty()
    for w in range(W):
        assert stage.write_floor(attrs[w]) == K
        (g,) = stage.read([f"/w{w}/p{i}" for i in range(N)], attrs[w], compact=True)
        assert (np.from_dlpack(g) == K).all()
    stage.close()


def test_maps_batches_and_deletes_from_threads(stage):
    W, N, K = 3, 32, 60

    def worker(w):
        q = stage.query([f"/m{w}/p{i}" for i in range(N)])
        for k in range(1, K + 1):
            if k % 3 == 0:
                with stage.map(q, f"m{w}", k, dtype=("f4", 2)) as m:
                    for g in m:
                        np.from_dlpack(g)[:] = k
            elif k % 3 == 1:
                stage.write_batch(q, k, {f"m{w}": np.full((N, 2), k, np.float32),
                                         f"n{w}": [np.full(k % 5, k, np.int32)] * N})
            else:
                stage.delete([f"/m{w}/p0"], k, attrs=[f"n{w}"])
                stage.write(f"m{w}", q, np.full((N, 2), k, np.float32), k)
            stage.seal(k, [f"m{w}", f"n{w}"])
            (g,) = stage.read(q, f"m{w}", compact=True)
            assert (np.from_dlpack(g) == k).all()
            g.release()

    with watchdog():
        errors = run_threads([lambda w=w: worker(w) for w in range(W)])
    assert not errors, "\n".join(errors)


def test_adopted_arrays_from_threads_are_each_released_once():
    stage = kstage.Stage()
    W, K, N = 4, 50, 16
    arrays = [[np.full(N, w * 1000 + k, np.float64) for k in range(K)] for w in range(W)]
    before = [[sys.getrefcount(a) for a in row] for row in arrays]

    def worker(w):
        q = stage.query([f"/ad{w}/p{i}" for i in range(N)])
        for k in range(K):
            stage.write(f"ad{w}", q, arrays[w][k], k + 1, adopt=True)
            stage.seal(k + 1, f"ad{w}")
            (g,) = stage.read(q, f"ad{w}")
            assert np.from_dlpack(g).ctypes.data == arrays[w][k].ctypes.data
            g.release()

    with watchdog():
        errors = run_threads([lambda w=w: worker(w) for w in range(W)])
        assert not errors, "\n".join(errors)
        stage.close()
    after = [[sys.getrefcount(a) for a in row] for row in arrays]
    assert after == before


def test_export_and_release_of_one_group_from_several_threads():
    # One group shared by threads that export it while another releases it: each export
    # succeeds or raises InvalidHandle; nothing crashes. Run apart: the failure mode is a crash.
    code = """
    import threading, numpy as np, kstage
    s = kstage.Stage()
    paths = [f"/p{i}" for i in range(256)]
    s.write("pos", paths, np.arange(768, dtype=np.float32).reshape(256, 3), 1)
    s.seal(1)
    want = np.arange(768, dtype=np.float32).reshape(256, 3)
    outcomes = {"ok": 0, "released": 0, "other": []}
    lock = threading.Lock()
    for round in range(500):
        (g,) = s.read(paths, "pos")
        def export():
            for _ in range(5):
                try:
                    x = np.from_dlpack(g)
                    assert np.array_equal(x, want)
                    with lock: outcomes["ok"] += 1
                except kstage.InvalidHandle:
                    with lock: outcomes["released"] += 1
                except Exception as e:
                    with lock: outcomes["other"].append(repr(e))
        ts = [threading.Thread(target=export) for _ in range(3)]
        for t in ts: t.start()
        g.release()
        for t in ts: t.join(30)
        assert not any(t.is_alive() for t in ts)
    s.close()
    print("OUTCOMES", outcomes["ok"], outcomes["released"], outcomes["other"][:3])
    """
    rc, out = run_python(code, timeout=120)
    assert rc == 0, f"{describe_exit(rc)}:\n{out}"
    line = [line for line in out.splitlines() if line.startswith("OUTCOMES")]
    assert line, out
    _, ok, released, other = line[0].split(" ", 3)
    assert other == "[]", line[0]
    assert int(ok) + int(released) == 500 * 3 * 5
