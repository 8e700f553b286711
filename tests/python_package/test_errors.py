# SPDX-License-Identifier: Apache-2.0
"""Errors: every status maps to its exception class (also a built-in exception), with `.status`
and kstage_last_error()'s message naming the input; a failed call leaves the stage as it was.

Checks whose failure mode is a crash of the interpreter run in a subprocess (ks_support.run_python),
so that one crash fails one test instead of ending the run."""
import textwrap

import pytest

np = pytest.importorskip("numpy", minversion="2.1")

import kstage  # noqa: E402
from ks_support import describe_exit, run_python, values_in_prim_order  # noqa: E402

CLASSES = [
    ("InvalidArgument", ValueError, 1),
    ("InvalidHandle", ValueError, 2),
    ("NotFound", KeyError, 3),
    ("AlreadyExists", ValueError, 4),
    ("WriteFloorViolation", ValueError, 5),
    ("NotSupported", NotImplementedError, 6),
    ("Timeout", TimeoutError, 8),
    ("OutOfMemory", MemoryError, 9),
    ("OutOfRange", IndexError, 10),
    ("OpFailed", RuntimeError, 11),
    ("DeviceError", RuntimeError, 12),
    ("InternalError", RuntimeError, 13),
]


@pytest.mark.parametrize("name,builtin,status", CLASSES, ids=[c[0] for c in CLASSES])
def test_exception_classes(name, builtin, status):
    cls = getattr(kstage, name)
    assert issubclass(cls, kstage.Error) and issubclass(cls, builtin)
    assert issubclass(kstage.Error, Exception)
    assert cls.status == status
    assert cls.__module__ == "kstage" or cls.__qualname__ == name
    assert name in kstage.__all__


def expect(cls, builtin, status, *fragments):
    """A pytest.raises for `cls` that then checks .status, the built-in base and the message."""

    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(cls)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            suppressed = self.ctx.__exit__(*exc)  # raises when nothing (or another class) was raised
            if not suppressed:
                return False
            e = self.info.value
            assert isinstance(e, kstage.Error) and isinstance(e, builtin)
            assert e.status == status
            message = e.args[0]
            assert isinstance(message, str) and message
            for f in fragments:
                assert f in message, f"{f!r} not in {message!r}"
                assert f in str(e)
            return suppressed

    return _Check()


def current(stage, q4, attr="pos"):
    groups = list(stage.read(q4, attr))
    assert len(groups) == 1
    return values_in_prim_order(groups[0])


# ------------------------------------------------------------------------------------------------
# Each status, its class, its message
# ------------------------------------------------------------------------------------------------
def test_invalid_argument_bad_dtype(stage, q4, pos):
    with expect(kstage.InvalidArgument, ValueError, 1, "float64", "'pos'"):
        stage.write("pos", q4, pos.astype(np.float64), 2)


def test_invalid_argument_bad_shape(stage, q4, pos):
    with expect(kstage.InvalidArgument, ValueError, 1, "float32x2", "'pos'"):
        stage.write("pos", q4, np.zeros((4, 2), np.float32), 2)
    with expect(kstage.InvalidArgument, ValueError, 1, "3 source row", "4 prim"):
        stage.write("pos", q4, np.zeros((3, 3), np.float32), 2)


def test_write_floor_violation(stage, q4, pos):
    with expect(kstage.WriteFloorViolation, ValueError, 5, "ordinal 1", "write floor 1", "'pos'"):
        stage.write("pos", q4, pos, 1)
    with expect(kstage.WriteFloorViolation, ValueError, 5, "ordinal 0"):
        stage.delete(q4, 0, attrs="pos")


def test_already_exists_for_insert_of_existing(stage, q4, paths4, pos):
    with expect(kstage.AlreadyExists, ValueError, 4, "INSERT", paths4[0]):
        stage.write("pos", q4, pos, 2, mode="insert")


def test_not_found_for_update_of_missing(stage, pos):
    with expect(kstage.NotFound, KeyError, 3, "UPDATE", "/world/new"):
        stage.write("pos", ["/world/new"], pos[:1], 2, mode="update")


def test_not_found_for_unknown_ids(stage, q4):
    with expect(kstage.NotFound, KeyError, 3, "123456"):
        stage.path(123456)
    with expect(kstage.NotFound, KeyError, 3, "99999"):
        stage.token_name(99999)
    with expect(kstage.NotFound, KeyError, 3, "range"):
        stage.range_info(int(q4.paths[0]))


def test_invalid_handle_after_release(stage, q4, pos):
    (g,) = stage.read(q4, "pos")
    g.release()
    with expect(kstage.InvalidHandle, ValueError, 2, "released"):
        g.tensor(0)
    op = stage.write("pos", q4, pos, 2)
    op.release()
    with expect(kstage.InvalidHandle, ValueError, 2, "released"):
        op.wait()


def test_invalid_handle_after_close(q4):
    s = kstage.Stage()
    s.close()
    with expect(kstage.InvalidHandle, ValueError, 2, "stage"):
        s.write("pos", ["/a"], np.zeros(1), 1)
    with expect(kstage.InvalidHandle, ValueError, 2, "stage"):
        s.read(["/a"], "pos")
    with expect(kstage.InvalidHandle, ValueError, 2, "stage"):
        s.write_floor()


def test_released_query_is_an_invalid_handle(stage):
    # kstage.h: "A handle that is unknown, of the wrong kind, released, or belongs to a destroyed
    # stage gives KSTAGE_INVALID_HANDLE"; kstage.InvalidHandle's own doc names queries.
    q = stage.query(["/a", "/b"])
    q.release()
    q.release()  # idempotent
    assert q.released
    with expect(kstage.InvalidHandle, ValueError, 2, "released"):
        len(q)
    with expect(kstage.InvalidHandle, ValueError, 2, "released"):
        stage.write("x", q, np.zeros(2), 1)
    with expect(kstage.InvalidHandle, ValueError, 2, "released"):
        stage.read(q, "x")
    with expect(kstage.InvalidHandle, ValueError, 2, "released"):
        stage.map(q, "x", 1, dtype="f4")


def test_query_of_another_stage_is_refused(stage):
    other = kstage.Stage()
    try:
        q = other.query(["/a"])
        with pytest.raises(ValueError, match="another stage"):
            stage.write("x", q, np.zeros(1), 1)
    finally:
        other.close()


def test_out_of_range_for_a_range_that_changed_again(stage, q4, paths4, pos):
    stage.write("pos", q4, pos + 1, 3, mask=[True, False, False, False])
    stage.seal(3)
    with expect(kstage.OutOfRange, IndexError, 10, paths4[0], "ordinal 3", "'pos'"):
        stage.read(q4, "pos", range=(1, 2))


def test_type_error_for_data_without_dlpack(stage, q4):
    for data in ([1.0, 2.0, 3.0, 4.0][0], object(), "abcd", {1: 2}):
        with pytest.raises(TypeError, match="__dlpack__"):
            stage.write("pos", q4, data, 1)
    with pytest.raises(TypeError, match="attribute"):
        stage.write(3.5, q4, np.zeros(4), 1)
    with pytest.raises(TypeError):
        stage.write("pos", 42, np.zeros(4), 1)


def test_not_supported_for_a_device_without_backend(stage, q4):
    # kDLMetal (8): no kstage build has a backend for it
    with expect(kstage.NotSupported, NotImplementedError, 6, "kDLMetal"):
        stage.write("pos", q4, np.zeros(4), 1, residency=(8, 0))


def test_invalid_argument_for_bad_options(stage, q4):
    with expect(kstage.InvalidArgument, ValueError, 1, '"x"'):
        kstage.Stage(host_execution="x")
    with expect(kstage.InvalidArgument, ValueError, 1, '"nonsense"'):
        stage.write("pos", q4, np.zeros(4), 1, residency="nonsense")
    with expect(kstage.InvalidArgument, ValueError, 1, "[5, 1]"):
        stage.read(q4, "pos", range=(5, 1))
    with expect(kstage.InvalidArgument, ValueError, 1, "at least one"):
        stage.read(q4, [])
    with expect(kstage.InvalidArgument, ValueError, 1, "repeats"):
        stage.read(q4, ["pos", "pos"])
    with expect(kstage.InvalidArgument, ValueError, 1, "bad//x"):
        stage.intern("bad//x")
    with expect(kstage.InvalidArgument, ValueError, 1, "99999"):
        stage.query(path_in=[99999])
    with expect(kstage.InvalidArgument, ValueError, 1, "repeats"):
        stage.write("pos", ["/a", "/a"], np.zeros(2), 1)


# ------------------------------------------------------------------------------------------------
# A failed write leaves the stage as it was
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["dtype", "rows", "floor", "insert", "update", "count0", "index_map",
                                  "semantic", "no_dlpack", "mask_and_map"])
def test_failed_write_leaves_the_stage_unchanged(stage, q4, pos, case):
    new = np.full((4, 3), -1, np.float32)
    calls = {
        "dtype": lambda: stage.write("pos", q4, new.astype(np.int32), 2),
        "rows": lambda: stage.write("pos", q4, new[:3], 2),
        "floor": lambda: stage.write("pos", q4, new, 1),
        "insert": lambda: stage.write("pos", ["/world/fresh"] + q4.paths.tolist()[:3], new, 2, mode="insert"),
        "update": lambda: stage.write("pos", q4.paths.tolist()[:3] + [stage.intern("/world/none")], new, 2,
                                      mode="update"),
        "count0": lambda: stage.write("pos", q4, new, 2, count=0),
        "index_map": lambda: stage.write("pos", q4, new, 2, index_map=[0, 1, 2, 4]),
        "semantic": lambda: stage.write("pos", q4, new, 2, semantic="point"),
        "no_dlpack": lambda: stage.write("pos", q4, new.tolist(), 2),
        "mask_and_map": lambda: stage.write("pos", q4, new, 2, index_map=[0], mask=[True]),
    }
    with pytest.raises((kstage.Error, TypeError)):
        calls[case]()
    assert stage.write_floor("pos") == 1
    stage.seal(2)
    np.testing.assert_array_equal(current(stage, q4), pos)
    # no prim was created by the failed write
    assert stage.query(prefix="/world").paths.tolist() == q4.paths.tolist()
    # and ordinal 3 is still free for a good write
    stage.write("pos", q4, new, 3)
    stage.seal(3)
    np.testing.assert_array_equal(current(stage, q4), new)


# ------------------------------------------------------------------------------------------------
# Errors raised from calls made with the GIL released (each in its own interpreter: the
# failure mode is a crash)
# ------------------------------------------------------------------------------------------------
SNIPPET = """
import numpy as np, kstage
s = kstage.Stage()
{setup}
try:
    {call}
except kstage.Error as e:
    print("RAISED", type(e).__name__, e.status, str(e))
else:
    print("NO ERROR")
"""

GIL_CASES = {
    "query_duplicate_paths": ("", "s.query(['/a', '/a'])", "InvalidArgument", "repeats"),
    "intern_list_with_a_bad_path": ("", "s.intern(['/ok', 'bad'])", "InvalidArgument", "bad"),
    "write_to_paths_with_a_bad_one": ("", "s.write('x', ['/ok', 'bad'], np.zeros(2), 1)", "InvalidArgument", "bad"),
    "intern_range_count_0": ("", "s.intern_range('/r', 'p', 0, 0)", "InvalidArgument", "count"),
    "intern_range_bad_parent": ("", "s.intern_range('bad', 'p', 0, 5)", "InvalidArgument", "bad"),
    "intern_range_overlap": ("s.intern_range('/r', 'p', 0, 10)", "s.intern_range('/r', 'p', 5, 10)",
                             "AlreadyExists", "/r"),
    "query_range_unknown_first": ("", "s.query_range(999999)", "InvalidArgument", "999999"),
    "query_range_start_beyond": ("f = s.intern_range('/r', 'p', 0, 10)", "s.query_range(f, 20)",
                                 "InvalidArgument", "20"),
    "seal_unknown_token": ("", "s.seal(1, [99999])", "InvalidArgument", "99999"),
    "stage_residency_without_backend": ("", "kstage.Stage(residency=(8, 0))", "NotSupported", "kDLMetal"),
    "stage_residency_bad_ordinal": ("", "kstage.Stage(residency=(1, 0)); kstage.Stage(residency=(12, 7))",
                                    "", ""),
    "seal_after_close": ("s.close()", "s.seal(1)", "InvalidHandle", "stage"),
    "query_after_close": ("s.close()", "s.query(['/a'])", "InvalidHandle", "stage"),
    "query_range_after_close": ("f = s.intern_range('/r', 'p', 0, 10); s.close()", "s.query_range(f)",
                                "InvalidHandle", "stage"),
    "intern_range_after_close": ("s.close()", "s.intern_range('/r', 'p', 0, 10)", "InvalidHandle", "stage"),
}


@pytest.mark.parametrize("case", sorted(GIL_CASES))
def test_errors_of_calls_without_the_gil(case):
    setup, call, cls, fragment = GIL_CASES[case]
    rc, out = run_python(SNIPPET.format(setup=setup, call=call))
    assert rc == 0, f"`{call}` crashed the interpreter ({describe_exit(rc)}) instead of raising:\n{out}"
    lines = [line for line in out.splitlines() if line.startswith(("RAISED", "NO ERROR"))]
    assert lines and lines[-1].startswith("RAISED"), out
    if cls:
        _, name, status, *message = lines[-1].split(" ", 3)
        assert name == cls, lines[-1]
        assert int(status) == getattr(kstage, cls).status
        assert fragment in " ".join(message), lines[-1]
    else:
        # an ordinal the process lacks is INVALID_ARGUMENT; a device type without a backend
        # (a pip build has no emulated device) NOT_SUPPORTED
        assert lines[-1].split()[1] in ("InvalidArgument", "NotSupported"), lines[-1]


# ------------------------------------------------------------------------------------------------
# Arguments of the wrong type or shape: a TypeError or ValueError naming the argument, never a
# bare RuntimeError("std::bad_cast") or a SystemError
# ------------------------------------------------------------------------------------------------
BAD_ARGUMENTS = {
    "mask_of_ints": ("mask", lambda s, q: s.write("a", q, np.zeros(4), 2, mask=[1, 0, 1, 1])),
    "mask_of_int32": ("mask", lambda s, q: s.write("a", q, np.zeros(4), 2, mask=np.array([1, 0, 1, 1], np.int32))),
    "index_map_of_floats": ("index_map", lambda s, q: s.write("a", q, np.zeros(4), 2, index_map=[0.0, 1.0, 2.0, 3.0])),
    "index_map_of_bools": ("index_map", lambda s, q: s.write("a", q, np.zeros(4), 2,
                                                           index_map=np.array([True, False, True, True]))),
    "range_of_one": ("range", lambda s, q: s.read(q, "a", range=(1,))),
    "range_not_a_pair": ("range", lambda s, q: s.read(q, "a", range=5)),
    "range_negative": ("range", lambda s, q: s.read(q, "a", range=(-1, 2))),
    "path_ids_of_floats": ("path", lambda s, q: s.intern(np.array([1.5]))),
    "element_counts_2d": ("element_counts", lambda s, q: s.map(q, "m", 2, dtype="f4",
                                                               element_counts=[[1], [2], [3], [4]])),
    "max_version_of_one": ("max_version", lambda s, q: next(iter(s.read(q, "a"))).__dlpack__(max_version=(1,))),
    "max_version_str": ("max_version", lambda s, q: next(iter(s.read(q, "a"))).__dlpack__(max_version="1.0")),
    # From the review of the binding: each was RuntimeError(std::bad_cast) naming nothing.
    "count_negative": ("count", lambda s, q: s.write("a", q, np.zeros(4), 2, count=-1)),
    "count_float": ("count", lambda s, q: s.write("a", q, np.zeros(4), 2, count=1.5)),
    "prefix_negative": ("prefix", lambda s, q: s.query(prefix=-1)),
    "prefix_float": ("prefix", lambda s, q: s.query(prefix=1.5)),
    "semantic_float": ("semantic", lambda s, q: s.write("a", q, np.zeros(4), 2, semantic=1.5)),
    "semantic_huge": ("semantic", lambda s, q: s.write("a", q, np.zeros(4), 2, semantic=2**40)),
    "index_map_of_objects": ("index_map", lambda s, q: s.write("a", q, np.zeros(2), 2,
                                                               index_map=np.array([0, None], dtype=object))),
    "mask_of_objects": ("mask", lambda s, q: s.write("a", q, np.zeros(4), 2,
                                                     mask=np.array([True, None, 1, 0], dtype=object))),
    "row_counts_of_floats": ("row_counts", lambda s, q: s.write("r", q, np.zeros(6, np.int32), 2,
                                                                row_counts=[0.5, 1, 2, 2.5])),
    "token_negative": ("token", lambda s, q: s.write_floor(-1)),
    "token_huge": ("token", lambda s, q: s.write_floor(2**70)),
    "device_ordinal_junk": ("device", lambda s, q: s.read(q, "a", device="cpu:1x")),
}


@pytest.mark.parametrize("case", sorted(BAD_ARGUMENTS))
def test_bad_argument_types_name_the_argument(stage, q4, case):
    name, call = BAD_ARGUMENTS[case]
    stage.write("a", q4, np.zeros(4), 1)
    stage.seal(1)
    try:
        call(stage, q4)
    except (TypeError, ValueError) as e:
        assert name in str(e), f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"{case}: {type(e).__name__}: {e} (expected a TypeError or ValueError naming {name!r})")
    else:
        # 0/1 integers as a mask may be taken as bools; every other case must be refused
        assert case in ("mask_of_ints", "mask_of_int32"), f"{case}: no error"
        return
    stage.seal(2)
    assert current(stage, q4, "a").tolist() == [0, 0, 0, 0]


def test_op_wait_timeout_of_a_wrong_type(stage, q4):
    op = stage.write("a", q4, np.zeros(4), 1)
    with pytest.raises(TypeError, match="timeout"):
        op.wait("x")
    with pytest.raises(ValueError, match="timeout"):
        op.wait(-1)
    assert op.wait(0) is True


def test_message_cut_inside_a_utf8_character_still_raises_its_class(stage):
    # kstage cuts long messages at a byte count; a path of 2-byte characters gets cut mid-way.
    for k in range(0, 8):
        with pytest.raises(kstage.InvalidArgument):
            stage.intern("x" * k + "\u00e9" * 300 + "//")


def test_exception_in_flight_survives_a_consumed_capsule(stage, q4, pos):
    # A capsule a consumer took (renamed "used_...") and that is freed while an exception
    # unwinds: its destructor must leave the exception alone (it once called PyErr_Clear).
    import ctypes
    (g,) = stage.read(q4, "pos")
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get_pointer.restype = ctypes.c_void_p
    taken = []

    def consume(capsule):
        taken.append(get_pointer(capsule, b"dltensor_versioned"))
        set_name(capsule, b"used_dltensor_versioned")
        return capsule

    def f():
        return (consume(g.__dlpack__(max_version=(1, 0))), 1 / 0)

    with pytest.raises(ZeroDivisionError):
        f()
    # The consumer owns the tensor now: run its deleter once, as a consumer would.
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
        ctypes.cast(taken[0] + 16, ctypes.POINTER(ctypes.c_void_p)).contents.value)  # version (8 B), manager_ctx, deleter
    deleter(taken[0])


def test_stream_too_large_for_cpu_data(stage, q4, pos):
    (g,) = stage.read(q4, "pos")
    with pytest.raises((BufferError, OverflowError, ValueError)):
        g.__dlpack__(max_version=(1, 0), stream=2**70)
    with pytest.raises(BufferError, match="stream"):
        g.__dlpack__(max_version=(1, 0), stream=-2)


@pytest.mark.parametrize("case", ["Tensor", "MapGroup", "ReadGroup", "Map", "Read", "Map subclass"])
def test_instances_kstage_did_not_make_raise_type_error(case):
    # __dlpack__ and iteration are C entry points nanobind does not wrap: an instance made
    # without its constructor (Cls.__new__(Cls), or a subclass whose __init__ skips the base's)
    # must raise TypeError there as it does in the bound methods (it was a segfault).
    code = {
        "Tensor": "kstage.Tensor.__new__(kstage.Tensor).__dlpack__(max_version=(1, 0))",
        "MapGroup": "kstage.MapGroup.__new__(kstage.MapGroup).__dlpack__()",
        "ReadGroup": "kstage.ReadGroup.__new__(kstage.ReadGroup).__dlpack__()",
        "Map": "next(kstage.Map.__new__(kstage.Map))",
        "Read": "next(kstage.Read.__new__(kstage.Read))",
        "Map subclass": "class M(kstage.Map):\n    def __init__(self): pass\nnext(M())",
    }[case]
    rc, out = run_python(f"""
import kstage
try:
{textwrap.indent(code, '    ')}
except TypeError as e:
    print("TypeError:", e)
""")
    assert rc == 0, describe_exit(rc) + "\n" + out
    assert "TypeError: this" in out and "was not made by kstage" in out, out


def test_write_batch_holds_its_keys_while_the_query_runs_python(stage):
    # Converting the query may run Python that changes the dict: the attribute names must
    # still be the ones given (it was a use after free of the key strings).
    rc, out = run_python("""
import numpy as np, kstage
s = kstage.Stage()
writes = {"".join(["attr_", "12345"]): np.arange(3, dtype=np.float32)}
def paths():
    writes.clear()
    junk = ["x" * 64 for _ in range(1000)]
    yield from ("/p0", "/p1", "/p2")
s.write_batch(paths(), 1, writes).wait()
s.seal(1)
(g,) = s.read(["/p0", "/p1", "/p2"], "attr_12345")
print("values", np.from_dlpack(g).tolist())
""")
    assert rc == 0, describe_exit(rc) + "\n" + out
    assert "values [0.0, 1.0, 2.0]" in out, out


@pytest.mark.parametrize("order", [">", "<", "="])
def test_index_map_of_any_byte_order(stage, order):
    q = stage.query(["/a", "/b", "/c"])
    stage.write("x", q, np.float32([1, 2, 3]), 1, index_map=np.array([2, 0, 1], dtype=order + "i4")).wait()
    stage.seal(1)
    (g,) = stage.read(q, "x")
    assert values_in_prim_order(g).tolist() == [3.0, 1.0, 2.0]


def test_packed_rows_of_a_view_with_a_negative_stride(stage):
    q = stage.query([f"/p{i}" for i in range(4)])
    packed = np.arange(12, dtype=np.float32).reshape(4, 3)[::-1]  # rows 3, 2, 1, 0
    stage.write("arr", q, packed, 1, row_counts=[1, 2, 0, 1]).wait()
    stage.seal(1)
    got = {tuple(g.prims.tolist()): [np.from_dlpack(g.tensor(i)).tolist() for i in range(len(g))]
           for g in stage.read(q, "arr")}
    (rows,) = got.values()
    assert rows == [[[9, 10, 11]], [[6, 7, 8], [3, 4, 5]], [], [[0, 1, 2]]]
    # Counts whose sum overflows int64 are refused by the binding, naming the problem.
    with pytest.raises(kstage.InvalidArgument, match="add up to more than"):
        stage.write("arr2", q, np.arange(4, dtype=np.int8), 1,
                    row_counts=np.array([4, 2**63 - 1, 2**63 - 1, 2], np.int64))


def test_unexportable_groups_raise_buffer_error(stage, q4):
    # The array API: a __dlpack__ that cannot export raises BufferError (what consumers catch).
    stage.write("rag", q4, [np.ones(k, np.float32) for k in (1, 2, 3, 4)], 1).wait()
    stage.seal(1)
    (g,) = stage.read(q4, "rag")
    with pytest.raises(BufferError, match="one tensor per prim"):
        g.__dlpack__(max_version=(1, 0))
    with pytest.raises(BufferError, match="one tensor per prim"):
        np.from_dlpack(g)
    m = stage.map(q4, "ragm", 2, dtype="f4", element_counts=[1, 1, 1, 1])
    with pytest.raises(BufferError, match="one tensor per prim"):
        next(iter(m)).__dlpack__()


def test_bytes_are_not_paths(stage):
    # bytes is a sequence of ints to Python: b"/a" must not become path ids 47 and 97.
    for paths in (b"/a", bytearray(b"/a")):
        with pytest.raises(TypeError, match="decode it first"):
            stage.query(paths)
        with pytest.raises(TypeError, match="decode it first"):
            stage.write("x", paths, np.float32([1, 2]), 1)
