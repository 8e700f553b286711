# SPDX-License-Identifier: Apache-2.0
"""Legacy DLPack plumbing for the JAX interop tests: capsules and deleter counting."""
import ctypes

from kstage_ctypes import DLManagedTensor, DLManagedTensorDeleter

# Capsule names. PyCapsule_New / PyCapsule_SetName keep the char* (they do not copy it), so
# these module-level bytes objects must live as long as any capsule: they do (module globals).
DLTENSOR = b"dltensor"
USED_DLTENSOR = b"used_dltensor"

_api = ctypes.pythonapi
PyCapsule_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, PyCapsule_Destructor]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
# The destructor gets a borrowed PyObject*: take it as a plain address (no new reference).
_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_GetPointerRaw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))


class Ledger:
    """Counts deleter calls per id (like the Ledger of tests/test_managed.cpp)."""

    def __init__(self):
        self.calls = []

    def open(self):
        self.calls.append(0)
        return len(self.calls) - 1

    def record(self, i):
        self.calls[i] += 1

    def of(self, i):
        return self.calls[i]

    def not_once(self):
        """Ids whose deleter ran other than exactly once."""
        return [(i, c) for i, c in enumerate(self.calls) if c != 1]


# Wrappers whose deleter ran: kept one round longer so that a CFUNCTYPE object is never freed
# while its own callback is still on the stack.
_live = {}
_dead = []


class CountingLegacy:
    """Our own DLManagedTensor in front of a producer's one.

    Its dl_tensor is a copy of the inner tensor's (same data, shape and strides pointers, which
    stay valid until the inner deleter runs); its deleter records the call in `ledger`, then
    calls the inner tensor's deleter on the inner tensor. Pass `self.pointer` to the consumer.
    """

    def __init__(self, inner, ledger):
        del _dead[:]
        if not isinstance(inner, ctypes.POINTER(DLManagedTensor)):
            inner = ctypes.cast(inner, ctypes.POINTER(DLManagedTensor))
        if not inner:
            raise ValueError("NULL DLManagedTensor")
        self.inner = inner
        self.ledger = ledger
        self.id = ledger.open()
        self.wrapper = DLManagedTensor()
        self.wrapper.dl_tensor = inner.contents.dl_tensor
        self.wrapper.manager_ctx = None
        self._callback = DLManagedTensorDeleter(self._delete)
        self.wrapper.deleter = self._callback
        self.pointer = ctypes.pointer(self.wrapper)
        self.address = ctypes.addressof(self.wrapper)
        _live[self.address] = self

    def _delete(self, m):
        assert ctypes.addressof(m.contents) == self.address, "deleter called on a foreign tensor"
        self.ledger.record(self.id)
        if self.ledger.of(self.id) == 1:  # never call the producer's deleter twice
            inner = self.inner
            if inner.contents.deleter:
                inner.contents.deleter(inner)
        _dead.append(_live.pop(self.address, self))


@PyCapsule_Destructor
def _legacy_capsule_destructor(capsule):
    # DLPack's rule: a consumer that takes the tensor renames the capsule "used_dltensor" and
    # owns the deleter; a capsule still named "dltensor" was never consumed: delete it here.
    if _IsValid(capsule, DLTENSOR):
        m = ctypes.cast(_GetPointerRaw(capsule, DLTENSOR), ctypes.POINTER(DLManagedTensor))
        if m and m.contents.deleter:
            m.contents.deleter(m)


def legacy_capsule(managed):
    """A PyCapsule named "dltensor" around a DLManagedTensor* (deleted if never consumed)."""
    address = ctypes.cast(managed, ctypes.c_void_p).value
    return _api.PyCapsule_New(address, DLTENSOR, _legacy_capsule_destructor)


def take_legacy(capsule):
    """Takes ownership of a producer's legacy capsule: its DLManagedTensor*, capsule renamed."""
    address = _api.PyCapsule_GetPointer(capsule, DLTENSOR)
    if _api.PyCapsule_SetName(capsule, USED_DLTENSOR) != 0:
        raise RuntimeError("PyCapsule_SetName failed")
    return ctypes.cast(address, ctypes.POINTER(DLManagedTensor))


class LegacyExporter:
    """What jax.dlpack.from_dlpack takes: an object with __dlpack__ / __dlpack_device__ that hands
    out one legacy capsule (any max_version asked for: legacy is what a producer may answer)."""

    def __init__(self, managed):
        t = managed.contents.dl_tensor
        self._device = (t.device.device_type, t.device.device_id)
        self._capsule = legacy_capsule(managed)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("this exporter does not copy")
        capsule, self._capsule = self._capsule, None
        if capsule is None:
            raise BufferError("the capsule was already handed out")
        return capsule

    def __dlpack_device__(self):
        return self._device
