// SPDX-License-Identifier: Apache-2.0
// Taking tensors from DLPack producers: numpy, PyTorch, CuPy, JAX, or a raw capsule.
//
// A producer's deleter may need the GIL (numpy's and CuPy's drop a Python reference), but the
// stage may run it from any thread: while a call has released the GIL, on a device backend's
// worker thread, or at kstage_destroy. So a tensor handed to the stage goes in a box whose own
// deleter takes the GIL around the producer's -- or, once the interpreter is finalising, leaks
// it rather than touch a dead interpreter.
#include "binding.hpp"

#include <cstring>
#include <new>

namespace kstage_py {
namespace {

constexpr const char* kVersionedName = "dltensor_versioned";
constexpr const char* kUsedVersionedName = "used_dltensor_versioned";
constexpr const char* kLegacyName = "dltensor";
constexpr const char* kUsedLegacyName = "used_dltensor";

// The GIL for a producer's deleter, from any thread; false once Python is finalising.
struct GilForDeleter {
  bool held = false;
  PyGILState_STATE state{};
  GilForDeleter() {
    if (python_is_running()) {
      state = PyGILState_Ensure();
      held = true;
    }
  }
  ~GilForDeleter() {
    if (held) PyGILState_Release(state);
  }
};

void delete_producer_tensor(DLManagedTensorVersioned* versioned, DLManagedTensor* legacy) {
  GilForDeleter gil;
  if (!gil.held) return;  // the interpreter is gone: leaking is all that is safe
  if (versioned != nullptr && versioned->deleter != nullptr) versioned->deleter(versioned);
  if (legacy != nullptr && legacy->deleter != nullptr) legacy->deleter(legacy);
}

// A producer's tensor as the stage takes it: a versioned managed tensor of our own.
struct Box {
  DLManagedTensorVersioned outer;
  DLManagedTensorVersioned* versioned;
  DLManagedTensor* legacy;
};

void box_deleter(DLManagedTensorVersioned* self) {
  Box* box = static_cast<Box*>(self->manager_ctx);
  delete_producer_tensor(box->versioned, box->legacy);
  delete box;
}

// obj.__dlpack__(stream=..., max_version=(major, minor)) as one vectorcall with interned
// keyword names (a keyword dict per write cost more than the rest of the import).
nb::object call_dlpack(nb::handle source, nb::handle stream, bool versioned) {
  // Leaked on purpose, like every module-lifetime object here (see numpy_1d).
  static PyObject* name = PyUnicode_InternFromString("__dlpack__");
  static PyObject* kwnames_versioned = Py_BuildValue("(ss)", "stream", "max_version");
  static PyObject* kwnames_stream = Py_BuildValue("(s)", "stream");
  static PyObject* max_version = Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
  // storage[0] is the slot PY_VECTORCALL_ARGUMENTS_OFFSET lets the callee use.
  PyObject* storage[4] = {nullptr, source.ptr(), stream.ptr(), max_version};
  PyObject** args = storage + 1;
  PyObject* result;
  if (versioned) {
    result = PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                       kwnames_versioned);
  } else if (stream.is_none()) {
    result = PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
  } else {
    result =
        PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames_stream);
  }
  if (result == nullptr) throw nb::python_error();
  return nb::steal(result);
}

}  // namespace

Imported::Imported(Imported&& other) noexcept
    : versioned_(other.versioned_), legacy_(other.legacy_) {
  other.versioned_ = nullptr;
  other.legacy_ = nullptr;
}

Imported& Imported::operator=(Imported&& other) noexcept {
  if (this != &other) {
    Imported gone(std::move(*this));
    versioned_ = other.versioned_;
    legacy_ = other.legacy_;
    other.versioned_ = nullptr;
    other.legacy_ = nullptr;
  }
  return *this;
}

Imported::~Imported() {
  if (versioned_ != nullptr || legacy_ != nullptr) delete_producer_tensor(versioned_, legacy_);
}

const DLTensor& Imported::tensor() const {
  return versioned_ != nullptr ? versioned_->dl_tensor : legacy_->dl_tensor;
}

DLManagedTensorVersioned* Imported::release_to_stage() {
  Box* box = new Box{};
  box->versioned = versioned_;
  box->legacy = legacy_;
  box->outer.version.major = DLPACK_MAJOR_VERSION;
  box->outer.version.minor = DLPACK_MINOR_VERSION;
  box->outer.manager_ctx = box;
  box->outer.deleter = box_deleter;
  box->outer.flags =
      (versioned_ != nullptr ? versioned_->flags : 0) | DLPACK_FLAG_BITMASK_READ_ONLY;
  box->outer.dl_tensor = tensor();
  versioned_ = nullptr;
  legacy_ = nullptr;
  return &box->outer;
}

Imported import_dlpack(nb::handle source, nb::handle stream) {
  nb::object capsule;
  if (PyCapsule_CheckExact(source.ptr())) {
    capsule = nb::borrow(source);
  } else {
    if (!nb::hasattr(source, "__dlpack__")) {
      PyErr_Format(PyExc_TypeError,
                   "kstage takes tensors through DLPack: %s has no __dlpack__ (pass a numpy, "
                   "PyTorch, CuPy or JAX array, or numpy.asarray(data))",
                   Py_TYPE(source.ptr())->tp_name);
      throw nb::python_error();
    }
    // A stream concerns device data only: a host producer (numpy) refuses one. A device
    // producer is asked for the stream kstage then orders its work after (producer_stream in
    // dlpack_export.cpp): None is the legacy default stream, which __dlpack__ calls 1 on CUDA
    // (and on the emulated device, which follows CUDA's rules) and 0 on ROCm -- named, not left
    // to the producer's reading of None.
    // (numpy's arrays are host memory: no __dlpack_device__ call for the commonest source.)
    const bool numpy_array = std::strcmp(Py_TYPE(source.ptr())->tp_name, "numpy.ndarray") == 0;
    nb::object producer_stream = nb::borrow(stream);
    if (numpy_array) {
      producer_stream = nb::none();
    } else if (nb::hasattr(source, "__dlpack_device__")) {
      nb::object device = source.attr("__dlpack_device__")();
      const int type = nb::cast<int>(device[0]);
      if (is_host_memory(type)) producer_stream = nb::none();
      else if (stream.is_none()) producer_stream = nb::int_(type == kDLROCM ? 0 : 1);
    }
    stream = producer_stream;
    try {
      capsule = call_dlpack(source, stream, true);
    } catch (nb::python_error& e) {
      // A producer from before DLPack 1.0 does not know max_version: ask it for legacy.
      if (!e.matches(PyExc_TypeError)) throw;
      capsule = call_dlpack(source, stream, false);
    }
  }
  Imported imported;
  const char* name = PyCapsule_GetName(capsule.ptr());
  if (name == nullptr) throw nb::python_error();
  if (std::string_view(name) == kVersionedName) {
    auto* t =
        static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule.ptr(), kVersionedName));
    if (t == nullptr) throw nb::python_error();
    if (PyCapsule_SetName(capsule.ptr(), kUsedVersionedName) != 0) throw nb::python_error();
    imported.versioned_ = t;
    if (t->version.major != DLPACK_MAJOR_VERSION) {
      unsigned major = t->version.major;
      imported = Imported();  // deletes it: we cannot read a layout of another major version
      PyErr_Format(PyExc_BufferError,
                   "the producer gave a DLPack %u.x tensor; kstage reads DLPack %d.x", major,
                   DLPACK_MAJOR_VERSION);
      throw nb::python_error();
    }
  } else if (std::string_view(name) == kLegacyName) {
    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kLegacyName));
    if (t == nullptr) throw nb::python_error();
    if (PyCapsule_SetName(capsule.ptr(), kUsedLegacyName) != 0) throw nb::python_error();
    imported.legacy_ = t;
  } else {
    PyErr_Format(
        PyExc_ValueError,
        "a DLPack capsule must be named \"dltensor\" or \"dltensor_versioned\", not \"%s\" "
        "(a used capsule cannot be imported twice)",
        name);
    throw nb::python_error();
  }
  return imported;
}

}  // namespace kstage_py
