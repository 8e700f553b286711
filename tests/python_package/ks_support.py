# SPDX-License-Identifier: Apache-2.0
"""Helpers of the kstage package tests: DLPack structs through ctypes (to read a capsule's flags
and pointers, and to make producers whose deleters are counted), the libkstage the extension
loaded (for the C-level column storage address and the emulated device's test API), a
subprocess runner for checks that may crash the interpreter, and resident memory.

Nothing here imports the source tree's python/ folder: `kstage` is the package on sys.path.
"""
import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np

import kstage

# DLPack structs: tests/python/dlpack_ctypes.py (shared with the C API's ctypes tests).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
from dlpack_ctypes import (  # noqa: E402,F401
    DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY,
    DLDataType,
    DLDevice,
    DLManagedTensor,
    DLManagedTensorDeleter as LegacyDeleter,
    DLManagedTensorVersioned,
    DLManagedTensorVersionedDeleter as VersionedDeleter,
    DLPackVersion,
    DLTensor,
    kDLCPU,
    kDLExtDev,
)

VERSIONED = b"dltensor_versioned"
LEGACY = b"dltensor"

_api = ctypes.pythonapi
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, CapsuleDestructor]
_api.PyCapsule_New.restype = ctypes.py_object
# The destructor gets a borrowed PyObject*: look at it as a plain address (no new reference).
_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_GetPointerRaw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))


def capsule_name(capsule):
    return _api.PyCapsule_GetName(capsule).decode()


class CapsuleView:
    """What a DLPack capsule holds, read without consuming it (the capsule keeps ownership)."""

    def __init__(self, capsule):
        self.name = capsule_name(capsule)
        if self.name == "dltensor_versioned":
            m = ctypes.cast(_api.PyCapsule_GetPointer(capsule, VERSIONED), ctypes.POINTER(DLManagedTensorVersioned))
            self.versioned = True
            self.version = (m.contents.version.major, m.contents.version.minor)
            self.flags = m.contents.flags
            t = m.contents.dl_tensor
        elif self.name == "dltensor":
            m = ctypes.cast(_api.PyCapsule_GetPointer(capsule, LEGACY), ctypes.POINTER(DLManagedTensor))
            self.versioned = False
            self.version = None
            self.flags = None
            t = m.contents.dl_tensor
        else:
            raise AssertionError(f"not a DLPack capsule: {self.name!r}")
        self.data = (t.data or 0) + t.byte_offset
        self.device = (t.device.device_type, t.device.device_id)
        self.ndim = t.ndim
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.strides = None if not t.strides else tuple(t.strides[i] for i in range(t.ndim))
        self.dtype = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * (t.dtype.bits * t.dtype.lanes // 8)

    @property
    def read_only(self):
        return bool(self.flags & DLPACK_FLAG_BITMASK_READ_ONLY)

    @property
    def is_copied(self):
        return bool(self.flags & DLPACK_FLAG_BITMASK_IS_COPIED)


# ------------------------------------------------------------------------------------------------
# Producers with counted deleters
# ------------------------------------------------------------------------------------------------
# Every managed tensor made here, by address, with what its memory depends on (the numpy array,
# shape and strides arrays). The deleter drops the entry; entries of deleted tensors move to
# _graveyard (emptied at the next creation) so that no ctypes object is freed while C code
# that called the deleter might still hold a pointer into it.
_registry = {}
_graveyard = []


class Counter:
    """Counts deleter calls per producer."""

    def __init__(self):
        self.calls = {}

    def open(self, key):
        self.calls[key] = 0

    def total(self):
        return sum(self.calls.values())

    def not_once(self):
        return {k: v for k, v in self.calls.items() if v != 1}


def _on_delete(address):
    entry = _registry.pop(address, None)
    if entry is None:  # a second call: record it against the tensor's ledger if we still know it
        for e in _graveyard:
            if e["address"] == address:
                e["counter"].calls[e["key"]] += 1
                return
        raise AssertionError(f"deleter called for an unknown tensor 0x{address:x}")
    entry["counter"].calls[entry["key"]] += 1
    entry["array"] = None  # drop the producer's reference to the data now
    inner = entry.pop("inner", None)
    if inner is not None and inner.contents.deleter:  # a wrapped producer's own tensor
        inner.contents.deleter(inner)
    _graveyard.append(entry)


@VersionedDeleter
def _versioned_deleter(m):
    _on_delete(ctypes.addressof(m.contents))


@LegacyDeleter
def _legacy_deleter(m):
    _on_delete(ctypes.addressof(m.contents))


@CapsuleDestructor
def _versioned_capsule_destructor(capsule):
    # Not consumed (still "dltensor_versioned"): the capsule deletes its tensor (DLPack's rule).
    if _IsValid(capsule, VERSIONED):
        m = ctypes.cast(_GetPointerRaw(capsule, VERSIONED), ctypes.POINTER(DLManagedTensorVersioned))
        if m and m.contents.deleter:
            m.contents.deleter(m)


@CapsuleDestructor
def _legacy_capsule_destructor(capsule):
    if _IsValid(capsule, LEGACY):
        m = ctypes.cast(_GetPointerRaw(capsule, LEGACY), ctypes.POINTER(DLManagedTensor))
        if m and m.contents.deleter:
            m.contents.deleter(m)


_DL_CODES = {"i": 0, "u": 1, "f": 2, "b": 6, "c": 5}


def make_capsule(array, counter, key, *, versioned=True, read_only=False, major=1):
    """A DLPack capsule over `array`'s memory (kept alive until the deleter runs) whose deleter is
    counted in `counter` under `key`."""
    del _graveyard[:]
    array = np.asarray(array)
    shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
    strides = (ctypes.c_int64 * max(array.ndim, 1))(*[s // array.itemsize for s in array.strides])
    managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = managed.dl_tensor
    t.data = array.ctypes.data
    t.device = DLDevice(kDLCPU, 0)
    t.ndim = array.ndim
    t.dtype = DLDataType(_DL_CODES[array.dtype.kind], array.dtype.itemsize * 8, 1)
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    if versioned:
        managed.version = DLPackVersion(major, 0)
        managed.flags = DLPACK_FLAG_BITMASK_READ_ONLY if read_only else 0
        managed.deleter = _versioned_deleter
    else:
        managed.deleter = _legacy_deleter
    address = ctypes.addressof(managed)
    counter.open(key)
    _registry[address] = {"managed": managed, "shape": shape, "strides": strides, "array": array,
                          "counter": counter, "key": key, "address": address}
    if versioned:
        return _api.PyCapsule_New(address, VERSIONED, _versioned_capsule_destructor)
    return _api.PyCapsule_New(address, LEGACY, _legacy_capsule_destructor)


class CountingProducer:
    """A DLPack producer over a numpy array whose managed tensors' deleters are counted in
    `counter` (first export under `key`, later ones under key#2, ...)."""

    def __init__(self, array, counter, key, *, read_only=False, major=1):
        self.array = np.asarray(array)
        self.counter = counter
        self.key = key
        self.read_only = read_only
        self.major = major
        self.exports = 0

    def _next_key(self):
        self.exports += 1
        return self.key if self.exports == 1 else f"{self.key}#{self.exports}"

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        assert stream is None
        versioned = max_version is not None and max_version[0] >= 1
        return make_capsule(self.array, self.counter, self._next_key(), versioned=versioned,
                            read_only=self.read_only, major=self.major)

    def __dlpack_device__(self):
        return (kDLCPU, 0)


USED_LEGACY = b"used_dltensor"  # PyCapsule_SetName keeps the pointer: a module constant


def wrap_legacy_capsule(capsule, counter, key):
    """Consumes a producer's legacy "dltensor" capsule (JAX's) and returns a new one over a
    DLManagedTensor of our own -- the same dl_tensor -- whose deleter is counted in `counter`
    under `key`, then calls the producer's deleter."""
    del _graveyard[:]
    address = _api.PyCapsule_GetPointer(capsule, LEGACY)
    if _api.PyCapsule_SetName(capsule, USED_LEGACY) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
    inner = ctypes.cast(address, ctypes.POINTER(DLManagedTensor))
    managed = DLManagedTensor()
    managed.dl_tensor = inner.contents.dl_tensor
    managed.deleter = _legacy_deleter
    mine = ctypes.addressof(managed)
    counter.open(key)
    _registry[mine] = {"managed": managed, "inner": inner, "array": None, "counter": counter, "key": key,
                       "address": mine}
    return _api.PyCapsule_New(mine, LEGACY, _legacy_capsule_destructor)


class CountedLegacyExport:
    """A producer in front of another legacy producer (a JAX array): each __dlpack__ hands out
    the inner producer's tensor with a counted deleter."""

    def __init__(self, inner, counter, key):
        self.inner = inner
        self.counter = counter
        self.key = key
        self.exports = 0

    def __dlpack__(self, stream=None):
        self.exports += 1
        key = self.key if self.exports == 1 else f"{self.key}#{self.exports}"
        return wrap_legacy_capsule(self.inner.__dlpack__(), self.counter, key)

    def __dlpack_device__(self):
        return self.inner.__dlpack_device__()


class LegacyCountingProducer(CountingProducer):
    """A producer from before DLPack 1.0: its __dlpack__ knows no max_version (a TypeError when
    given one) and always gives a legacy "dltensor" capsule, as JAX's does."""

    def __dlpack__(self, stream=None):
        assert stream is None
        return make_capsule(self.array, self.counter, self._next_key(), versioned=False)


# ------------------------------------------------------------------------------------------------
# The libkstage the extension runs against
# ------------------------------------------------------------------------------------------------
def libkstage_path():
    """Path of the libkstage shared object loaded in this process (the extension's)."""
    import kstage._kstage  # noqa: F401  (loads it)

    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if os.path.basename(path).startswith("libkstage.so"):
                return path
    raise RuntimeError("libkstage is not loaded in this process")


_lib = None


def lib():
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL(libkstage_path())
        h = ctypes.c_uint64
        P = ctypes.POINTER
        for name, args in {
            "kstage_query_paths": [h, P(h), ctypes.c_uint64, P(h)],
            "kstage_query_release": [h, h],
            "kstage_intern_token": [h, ctypes.c_char_p, ctypes.c_size_t, P(h)],
            "kstage_read_attributes": [h, h, P(h), ctypes.c_uint64, ctypes.c_void_p, P(h)],
            "kstage_fetch_read_next": [h, h, ctypes.c_uint64, P(KstageReadGroup)],
            "kstage_release_group": [h, h],
            "kstage_release_read": [h, h],
        }.items():
            f = getattr(_lib, name)
            f.argtypes = args
            f.restype = ctypes.c_int32
        _lib.kstage_last_error.restype = ctypes.c_char_p
    return _lib


class KstageDeviceSync(ctypes.Structure):
    _fields_ = [("stream", ctypes.c_size_t), ("event", ctypes.c_size_t)]


class KstageData(ctypes.Structure):
    _fields_ = [
        ("tensors", ctypes.POINTER(DLTensor)),
        ("tensor_count", ctypes.c_uint64),
        ("count", ctypes.c_uint64),
        ("index_map", ctypes.POINTER(ctypes.c_uint32)),
        ("mask", ctypes.POINTER(ctypes.c_uint64)),
        ("device_sync", KstageDeviceSync),
    ]


class KstageReadGroup(ctypes.Structure):
    _fields_ = [
        ("handle", ctypes.c_uint64),
        ("attribute", ctypes.c_uint64),
        ("prims", ctypes.POINTER(ctypes.c_uint64)),
        ("prim_count", ctypes.c_uint64),
        ("ordinal", ctypes.c_uint64),
        ("data", KstageData),
        ("dtype", DLDataType),
        ("is_delete", ctypes.c_bool),
        ("is_array", ctypes.c_bool),
        ("semantic", ctypes.c_int32),
    ]


assert ctypes.sizeof(KstageReadGroup) == 112 and KstageReadGroup.data.offset == 40


def _check(status, what):
    if status != 0:
        raise AssertionError(f"{what}: status {status}: {lib().kstage_last_error().decode()}")


def column_storage_address(stage, paths, attr):
    """The data pointer of the first group of a zero-copy read through the C API itself
    (kstage_read_attributes on stage.handle): where the column's rows live."""
    L = lib()
    ids = (ctypes.c_uint64 * len(paths))(*[int(p) for p in paths])
    q = ctypes.c_uint64()
    _check(L.kstage_query_paths(stage.handle, ids, len(paths), ctypes.byref(q)), "kstage_query_paths")
    token = ctypes.c_uint64()
    name = attr.encode()
    _check(L.kstage_intern_token(stage.handle, name, len(name), ctypes.byref(token)), "kstage_intern_token")
    read = ctypes.c_uint64()
    try:
        _check(L.kstage_read_attributes(stage.handle, q, ctypes.byref(token), 1, None, ctypes.byref(read)),
               "kstage_read_attributes")
        g = KstageReadGroup()
        _check(L.kstage_fetch_read_next(stage.handle, read, (1 << 64) - 1, ctypes.byref(g)), "kstage_fetch_read_next")
        t = g.data.tensors[0]
        address = (t.data or 0) + t.byte_offset
        L.kstage_release_group(stage.handle, g.handle)
        L.kstage_release_read(stage.handle, read)
    finally:
        L.kstage_query_release(stage.handle, q)
    return address


# ------------------------------------------------------------------------------------------------
# The emulated device (test builds with KSTAGE_EMULATED_DEVICE=ON)
# ------------------------------------------------------------------------------------------------
def emulated_device_present():
    """True when this kstage has the emulated device (DLPack kDLExtDev, ordinals 0 and 1): a
    write that names it as residency succeeds. A pip build has no such device."""
    import numpy as _np

    with kstage.Stage() as s:
        try:
            s.write("probe", ["/probe"], _np.zeros(1, _np.float32), 1, residency=(kDLExtDev, 0)).wait(10)
        except (kstage.NotSupported, kstage.InvalidArgument):
            return False
    return True


def emulated_api():
    """libkstage's kstage_emulated_* test functions (None when this build has none)."""
    L = lib()
    if not hasattr(L, "kstage_emulated_live_bytes"):
        return None
    L.kstage_emulated_live_bytes.argtypes = [ctypes.c_int32]
    L.kstage_emulated_live_bytes.restype = ctypes.c_size_t
    L.kstage_emulated_set_kernel_delay_us.argtypes = [ctypes.c_uint32]
    L.kstage_emulated_set_kernel_delay_us.restype = None
    L.kstage_emulated_memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    L.kstage_emulated_memcpy.restype = ctypes.c_int
    L.kstage_emulated_memcpy_async.argtypes = [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                                               ctypes.c_size_t]
    L.kstage_emulated_memcpy_async.restype = ctypes.c_int
    L.kstage_emulated_device_synchronize.argtypes = [ctypes.c_int32]
    L.kstage_emulated_device_synchronize.restype = None
    L.kstage_emulated_stream_hold.argtypes = [ctypes.c_size_t]
    L.kstage_emulated_stream_hold.restype = None
    L.kstage_emulated_stream_release.argtypes = [ctypes.c_size_t]
    L.kstage_emulated_stream_release.restype = None
    L.kstage_emulated_ordinal_of.argtypes = [ctypes.c_void_p]
    L.kstage_emulated_ordinal_of.restype = ctypes.c_int32
    L.kstage_emulated_copy_counts.argtypes = [ctypes.c_int32, ctypes.POINTER(ctypes.c_uint64),
                                              ctypes.POINTER(ctypes.c_uint64)]
    L.kstage_emulated_copy_counts.restype = None
    L.kstage_emulated_stream_create.argtypes = [ctypes.c_int32]
    L.kstage_emulated_stream_create.restype = ctypes.c_size_t
    L.kstage_emulated_stream_destroy.argtypes = [ctypes.c_size_t]
    L.kstage_emulated_stream_destroy.restype = None
    L.kstage_emulated_event_create.argtypes = []
    L.kstage_emulated_event_create.restype = ctypes.c_size_t
    L.kstage_emulated_event_destroy.argtypes = [ctypes.c_size_t]
    L.kstage_emulated_event_destroy.restype = None
    L.kstage_emulated_event_record.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    L.kstage_emulated_event_record.restype = None
    L.kstage_emulated_event_query.argtypes = [ctypes.c_size_t]
    L.kstage_emulated_event_query.restype = ctypes.c_int
    L.kstage_emulated_event_synchronize.argtypes = [ctypes.c_size_t]
    L.kstage_emulated_event_synchronize.restype = None
    return L


# ------------------------------------------------------------------------------------------------
# Processes and memory
# ------------------------------------------------------------------------------------------------
def run_python(code, timeout=60):
    """Runs `code` in a fresh interpreter that imports the same kstage; returns (returncode,
    output). For checks whose failure mode is a crash (a signal), which would end the whole
    pytest run if made in-process."""
    env = dict(os.environ)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(kstage.__file__)))
    env["PYTHONPATH"] = package_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def describe_exit(rc):
    if rc < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def rss_bytes():
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def values_in_prim_order(group):
    """A fixed-size read group's rows in the group's prim order (through index_map when the
    group is zero-copy), as a numpy copy."""
    table = np.from_dlpack(group.tensor(0))
    m = group.index_map
    if m is None:
        return table[: len(group)].copy()
    return table[np.asarray(m)].copy()


def kstage_has_cuda():
    """Whether this kstage can put a column on CUDA device 0 (a CUDA build on a machine with a GPU)."""
    with kstage.Stage() as s:
        try:
            s.write("probe", ["/probe"], np.zeros(1, np.float32), 1, residency=(2, 0)).wait(10)
        except (kstage.NotSupported, kstage.InvalidArgument):
            return False
    return True
