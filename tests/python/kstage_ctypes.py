# SPDX-License-Identifier: Apache-2.0
"""A minimal ctypes binding of libkstage (include/kstage/kstage.h) for the Python tests.

Only what the tests use. The library is found through $KSTAGE_LIB (the CMake test sets it to
$<TARGET_FILE:kstage>), else build/default/libkstage.so of this checkout. Every call's status
is checked: a failure raises KstageError with kstage_last_error().

The struct layouts mirror kstage.h and dlpack.h (DLPack 1.0) on LP64; check_layouts() compares
them with the static_asserts of tests/test_abi.cpp.
"""
import atexit
import ctypes
import glob
import os

from dlpack_ctypes import (  # noqa: E402,F401  (the DLPack structs, shared with the package tests)
    DLDataType,
    DLDevice,
    DLManagedTensor,
    DLManagedTensorDeleter,
    DLManagedTensorVersioned,
    DLManagedTensorVersionedDeleter,
    DLPackVersion,
    DLTensor,
    kDLCPU,
    kDLFloat,
    kDLInt,
    kDLUInt,
)

# --------------------------------------------------------------------------------------------
# kstage
# --------------------------------------------------------------------------------------------
KSTAGE_OK = 0
KSTAGE_END_OF_ITERATION = 7
KSTAGE_BUFFER_ALIGNMENT = 64
KSTAGE_NUL_TERMINATED = ctypes.c_size_t(-1).value
KSTAGE_TIMEOUT_INFINITE = (1 << 64) - 1
KSTAGE_EXPORT_READ_ONLY = 1
KSTAGE_EXPORT_CONSUMER_READS_ONLY = 2
KSTAGE_SEMANTIC_NONE = 0
KSTAGE_SEMANTIC_POINT = 1
KSTAGE_PRIM_MODE_UPSERT = 0

status_t = ctypes.c_int32
handle_t = ctypes.c_uint64


class kstage_device_sync_t(ctypes.Structure):
    _fields_ = [("stream", ctypes.c_size_t), ("event", ctypes.c_size_t)]


class kstage_write_data_t(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("semantic", ctypes.c_int32),
        ("tensors", ctypes.POINTER(DLTensor)),
        ("managed_tensors", ctypes.POINTER(ctypes.POINTER(DLManagedTensorVersioned))),
        ("tensor_count", ctypes.c_uint64),
        ("count", ctypes.c_uint64),
        ("index_map", ctypes.POINTER(ctypes.c_uint32)),
        ("mask", ctypes.POINTER(ctypes.c_uint64)),
        ("device_sync", kstage_device_sync_t),
        ("is_array", ctypes.c_bool),
        ("reserved", ctypes.c_uint8 * 7),
        ("legacy_managed_tensors", ctypes.POINTER(ctypes.POINTER(DLManagedTensor))),
        ("residency", DLDevice),
        ("selection_device", DLDevice),
    ]


class kstage_read_desc_t(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("change_range", ctypes.c_bool),
        ("compact", ctypes.c_bool),
        ("device_index_map", ctypes.c_bool),
        ("reserved", ctypes.c_uint8 * 1),
        ("range_begin", ctypes.c_uint64),
        ("range_end", ctypes.c_uint64),
        ("target_device", DLDevice),
        ("device_sync", kstage_device_sync_t),
    ]


class kstage_data_t(ctypes.Structure):
    _fields_ = [
        ("tensors", ctypes.POINTER(DLTensor)),
        ("tensor_count", ctypes.c_uint64),
        ("count", ctypes.c_uint64),
        ("index_map", ctypes.POINTER(ctypes.c_uint32)),
        ("mask", ctypes.POINTER(ctypes.c_uint64)),
        ("device_sync", kstage_device_sync_t),
    ]


class kstage_read_group_t(ctypes.Structure):
    _fields_ = [
        ("handle", handle_t),
        ("attribute", handle_t),
        ("prims", ctypes.POINTER(handle_t)),
        ("prim_count", ctypes.c_uint64),
        ("ordinal", ctypes.c_uint64),
        ("data", kstage_data_t),
        ("dtype", DLDataType),
        ("is_delete", ctypes.c_bool),
        ("is_array", ctypes.c_bool),
        ("semantic", ctypes.c_int32),
    ]


def write_data_init():
    """kstage_write_data_init(): zeroed, struct_size set (the header's function is inline)."""
    d = kstage_write_data_t()
    d.struct_size = ctypes.sizeof(kstage_write_data_t)
    return d


def read_desc_init():
    """kstage_read_desc_init()."""
    d = kstage_read_desc_t()
    d.struct_size = ctypes.sizeof(kstage_read_desc_t)
    return d


def check_layouts():
    """The offsets asserted in tests/test_abi.cpp (and the DLPack 1.0 layout)."""
    def off(t, f):
        return getattr(t, f).offset

    expected = {
        (kstage_write_data_t, "struct_size"): 0, (kstage_write_data_t, "semantic"): 4,
        (kstage_write_data_t, "tensors"): 8, (kstage_write_data_t, "managed_tensors"): 16,
        (kstage_write_data_t, "tensor_count"): 24, (kstage_write_data_t, "count"): 32,
        (kstage_write_data_t, "index_map"): 40, (kstage_write_data_t, "mask"): 48,
        (kstage_write_data_t, "device_sync"): 56, (kstage_write_data_t, "is_array"): 72,
        (kstage_write_data_t, "reserved"): 73, (kstage_write_data_t, "legacy_managed_tensors"): 80,
        (kstage_write_data_t, "residency"): 88, (kstage_write_data_t, "selection_device"): 96,
        (kstage_read_desc_t, "struct_size"): 0, (kstage_read_desc_t, "change_range"): 4,
        (kstage_read_desc_t, "compact"): 5, (kstage_read_desc_t, "device_index_map"): 6,
        (kstage_read_desc_t, "reserved"): 7,
        (kstage_read_desc_t, "range_begin"): 8, (kstage_read_desc_t, "range_end"): 16,
        (kstage_read_desc_t, "target_device"): 24, (kstage_read_desc_t, "device_sync"): 32,
        (DLTensor, "data"): 0, (DLTensor, "device"): 8, (DLTensor, "ndim"): 16,
        (DLTensor, "dtype"): 20, (DLTensor, "shape"): 24, (DLTensor, "strides"): 32,
        (DLTensor, "byte_offset"): 40,
        (DLManagedTensor, "manager_ctx"): 48, (DLManagedTensor, "deleter"): 56,
        (DLManagedTensorVersioned, "manager_ctx"): 8, (DLManagedTensorVersioned, "deleter"): 16,
        (DLManagedTensorVersioned, "flags"): 24, (DLManagedTensorVersioned, "dl_tensor"): 32,
        (kstage_read_group_t, "data"): 40, (kstage_read_group_t, "dtype"): 96,
        (kstage_read_group_t, "is_delete"): 100, (kstage_read_group_t, "semantic"): 104,
    }
    sizes = {kstage_write_data_t: 104, kstage_read_desc_t: 48, kstage_device_sync_t: 16,
             kstage_data_t: 56, kstage_read_group_t: 112, DLTensor: 48, DLManagedTensor: 64,
             DLManagedTensorVersioned: 80}
    bad = [f"offsetof({t.__name__}, {f}) = {off(t, f)}, expected {v}"
           for (t, f), v in expected.items() if off(t, f) != v]
    bad += [f"sizeof({t.__name__}) = {ctypes.sizeof(t)}, expected {v}"
            for t, v in sizes.items() if ctypes.sizeof(t) != v]
    if bad:
        raise AssertionError("ctypes layouts differ from kstage.h: " + "; ".join(bad))


# --------------------------------------------------------------------------------------------
# The library
# --------------------------------------------------------------------------------------------
class KstageError(RuntimeError):
    def __init__(self, func, status, message):
        super().__init__(f"{func}: {status_string(status)} ({status}): {message}")
        self.status = status
        self.message = message


def _find_library():
    path = os.environ.get("KSTAGE_LIB")
    if path:
        return path
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = sorted(glob.glob(os.path.join(root, "build", "default", "libkstage.so*")))
    if not found:
        raise OSError("libkstage not found: set KSTAGE_LIB to the library's path")
    return found[0]


lib = ctypes.CDLL(_find_library())

_P = ctypes.POINTER
_SIGNATURES = {
    "kstage_create": [ctypes.c_void_p, _P(handle_t)],
    "kstage_destroy": [handle_t],
    "kstage_intern_token": [handle_t, ctypes.c_char_p, ctypes.c_size_t, _P(handle_t)],
    "kstage_intern_path": [handle_t, ctypes.c_char_p, ctypes.c_size_t, _P(handle_t)],
    "kstage_query_paths": [handle_t, _P(handle_t), ctypes.c_uint64, _P(handle_t)],
    "kstage_query_release": [handle_t, handle_t],
    "kstage_write_attribute": [handle_t, handle_t, handle_t, ctypes.c_uint64,
                               _P(kstage_write_data_t), ctypes.c_int32, _P(handle_t)],
    "kstage_advance_write_floor": [handle_t, ctypes.c_uint64, _P(handle_t), ctypes.c_uint64],
    "kstage_read_attributes": [handle_t, handle_t, _P(handle_t), ctypes.c_uint64,
                               _P(kstage_read_desc_t), _P(handle_t)],
    "kstage_fetch_read_next": [handle_t, handle_t, ctypes.c_uint64, _P(kstage_read_group_t)],
    "kstage_release_group": [handle_t, handle_t],
    "kstage_release_read": [handle_t, handle_t],
    "kstage_group_export": [handle_t, handle_t, ctypes.c_uint64, ctypes.c_uint64,
                            _P(_P(DLManagedTensorVersioned))],
    "kstage_group_export_legacy": [handle_t, handle_t, ctypes.c_uint64, ctypes.c_uint64,
                                   _P(_P(DLManagedTensor))],
    "kstage_wait": [handle_t, handle_t, ctypes.c_uint64],
    "kstage_release_op": [handle_t, handle_t],
}
for _name, _args in _SIGNATURES.items():
    _f = getattr(lib, _name)
    _f.argtypes = _args
    _f.restype = status_t
lib.kstage_status_string.argtypes = [status_t]
lib.kstage_status_string.restype = ctypes.c_char_p
lib.kstage_last_error.argtypes = []
lib.kstage_last_error.restype = ctypes.c_char_p
lib.kstage_version.argtypes = []
lib.kstage_version.restype = ctypes.c_uint32


def status_string(status):
    return lib.kstage_status_string(status).decode()


def call(name, *args, ok=(KSTAGE_OK,)):
    """Calls lib.<name>; raises KstageError (with kstage_last_error()) unless the status is in ok."""
    status = getattr(lib, name)(*args)
    if status not in ok:
        raise KstageError(name, status, lib.kstage_last_error().decode(errors="replace"))
    return status


# --------------------------------------------------------------------------------------------
# A thin convenience layer
# --------------------------------------------------------------------------------------------
class Group:
    """A fetched read group (kstage_read_group_t) and the stage that owns it."""

    def __init__(self, stage, g):
        self.stage = stage
        self.g = g

    @property
    def tensor(self):
        return self.g.data.tensors[0]

    @property
    def data_pointer(self):
        t = self.tensor
        return (t.data or 0) + t.byte_offset

    def index_map(self):
        m = self.g.data.index_map
        return None if not m else [m[i] for i in range(self.g.prim_count)]

    def export_legacy(self, flags=KSTAGE_EXPORT_CONSUMER_READS_ONLY, index=0):
        out = ctypes.POINTER(DLManagedTensor)()
        call("kstage_group_export_legacy", self.stage.h, self.g.handle, index, flags,
             ctypes.byref(out))
        return out

    def release(self):
        if self.g is not None:
            call("kstage_release_group", self.stage.h, self.g.handle)
            self.g = None


# Stages not destroyed yet. libkstage destroys leftover stages from a C atexit handler, which
# runs after the Python interpreter is finalized: a deleter written in Python (a ctypes
# callback, like the tests' counting deleters) called from there crashes the process. So the
# binding destroys its stages at Python exit, while deleters can still run.
_live_stages = {}


@atexit.register
def _destroy_live_stages():
    for stage in list(_live_stages.values()):
        stage.destroy()


class Stage:
    def __init__(self):
        h = handle_t()
        call("kstage_create", None, ctypes.byref(h))
        self.h = h.value
        _live_stages[self.h] = self

    def destroy(self):
        if self.h:
            h, self.h = self.h, 0
            _live_stages.pop(h, None)
            call("kstage_destroy", h)

    def token(self, name):
        t = handle_t()
        call("kstage_intern_token", self.h, name.encode(), KSTAGE_NUL_TERMINATED, ctypes.byref(t))
        return t.value

    def query(self, paths):
        ids = (handle_t * len(paths))()
        for i, p in enumerate(paths):
            t = handle_t()
            call("kstage_intern_path", self.h, p.encode(), KSTAGE_NUL_TERMINATED, ctypes.byref(t))
            ids[i] = t.value
        q = handle_t()
        call("kstage_query_paths", self.h, ids, len(paths), ctypes.byref(q))
        return q.value

    def write(self, query, attribute, ordinal, data):
        """kstage_write_attribute + kstage_wait + kstage_release_op."""
        op = handle_t()
        call("kstage_write_attribute", self.h, query, attribute, ordinal, ctypes.byref(data),
             KSTAGE_PRIM_MODE_UPSERT, ctypes.byref(op))
        try:
            call("kstage_wait", self.h, op.value, KSTAGE_TIMEOUT_INFINITE)
        finally:
            call("kstage_release_op", self.h, op.value)

    def write_legacy(self, query, attribute, ordinal, managed, semantic=KSTAGE_SEMANTIC_NONE):
        """A fixed-size write of one legacy DLManagedTensor* (ownership passes to the stage)."""
        arr = (ctypes.POINTER(DLManagedTensor) * 1)(managed)
        w = write_data_init()
        w.semantic = semantic
        w.legacy_managed_tensors = arr
        w.tensor_count = 1
        self.write(query, attribute, ordinal, w)

    def write_tensor(self, query, attribute, ordinal, tensor, semantic=KSTAGE_SEMANTIC_NONE):
        """A fixed-size write of a client DLTensor (copied before this returns)."""
        w = write_data_init()
        w.semantic = semantic
        w.tensors = ctypes.pointer(tensor)
        w.tensor_count = 1
        self.write(query, attribute, ordinal, w)

    def seal(self, ordinal):
        call("kstage_advance_write_floor", self.h, ordinal, None, 0)

    def read_one(self, query, attribute, compact=False):
        """Opens a read of one attribute, fetches its single group, releases the read."""
        desc = read_desc_init()
        desc.compact = compact
        attrs = (handle_t * 1)(attribute)
        r = handle_t()
        call("kstage_read_attributes", self.h, query, attrs, 1, ctypes.byref(desc), ctypes.byref(r))
        try:
            g = kstage_read_group_t()
            call("kstage_fetch_read_next", self.h, r.value, 0, ctypes.byref(g))
            extra = kstage_read_group_t()
            st = call("kstage_fetch_read_next", self.h, r.value, 0, ctypes.byref(extra),
                      ok=(KSTAGE_OK, KSTAGE_END_OF_ITERATION))
            if st == KSTAGE_OK:
                call("kstage_release_group", self.h, extra.handle)
                raise AssertionError("expected a single read group")
        finally:
            call("kstage_release_read", self.h, r.value)
        return Group(self, g)
