// SPDX-License-Identifier: Apache-2.0
// Handing kstage's tensors to DLPack consumers: the Python array API's __dlpack__ and
// __dlpack_device__ over read and map groups (kstage.Tensor), and the capsules they return.
#include "binding.hpp"

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/tuple.h>

#include <cstdlib>
#include <cstring>

namespace kstage_py {

void buffer_error(const std::string& message) {
  PyErr_SetString(PyExc_BufferError, message.c_str());
  throw nb::python_error();
}

namespace {

constexpr const char* kVersionedName = "dltensor_versioned";
constexpr const char* kLegacyName = "dltensor";

// A capsule nobody consumed still owns its tensor. The destructor runs with the GIL held; the
// kstage deleters it calls never need Python.
void versioned_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kVersionedName)) {
    auto* t = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersionedName));
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }  // else a consumer took it (PyCapsule_IsValid sets no error: an exception in flight stays)
}

void legacy_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kLegacyName)) {
    auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kLegacyName));
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }  // else a consumer took it (PyCapsule_IsValid sets no error: an exception in flight stays)
}

bool truth(nb::handle value) {
  int t = PyObject_IsTrue(value.ptr());
  if (t < 0) throw nb::python_error();
  return t != 0;
}

// A host copy of an exported tensor (__dlpack__(copy=True)): its own buffer, writable.
struct HostCopy {
  DLManagedTensorVersioned managed{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  void* data = nullptr;
  ~HostCopy() { std::free(data); }
};

void host_copy_deleter(DLManagedTensorVersioned* self) {
  delete static_cast<HostCopy*>(self->manager_ctx);
}

DLManagedTensorVersioned* host_copy(DLManagedTensorVersioned* source, bool readonly) {
  const DLTensor& t = source->dl_tensor;
  auto copy = std::make_unique<HostCopy>();
  copy->shape.assign(t.shape, t.shape + t.ndim);
  copy->strides.resize(static_cast<size_t>(t.ndim));
  uint64_t elements = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    copy->strides[i] = static_cast<int64_t>(elements);
    elements *= static_cast<uint64_t>(t.shape[i]);
  }
  // kstage's exports are compact (row-major, strides filled): checked, not assumed.
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] > 1 && t.strides != nullptr && t.strides[i] != copy->strides[i])
      buffer_error("__dlpack__(copy=True): the tensor is not compact");
  }
  size_t bytes = elements * ((t.dtype.bits * t.dtype.lanes + 7) / 8);
  copy->data = std::aligned_alloc(
      KSTAGE_BUFFER_ALIGNMENT,
      (bytes + KSTAGE_BUFFER_ALIGNMENT - 1) / KSTAGE_BUFFER_ALIGNMENT * KSTAGE_BUFFER_ALIGNMENT +
          KSTAGE_BUFFER_ALIGNMENT);
  if (copy->data == nullptr) throw std::bad_alloc();
  if (bytes > 0) std::memcpy(copy->data, static_cast<const char*>(t.data) + t.byte_offset, bytes);
  DLManagedTensorVersioned& m = copy->managed;
  m.version.major = DLPACK_MAJOR_VERSION;
  m.version.minor = DLPACK_MINOR_VERSION;
  m.manager_ctx = copy.get();
  m.deleter = host_copy_deleter;
  m.flags = DLPACK_FLAG_BITMASK_IS_COPIED | (readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0);
  m.dl_tensor = t;
  m.dl_tensor.data = copy->data;
  m.dl_tensor.byte_offset = 0;
  m.dl_tensor.shape = copy->shape.data();
  m.dl_tensor.strides = copy->strides.data();
  return &copy.release()->managed;
}

// A legacy view of a versioned tensor (a map group for a pre-1.0 consumer): its deleter
// deletes the versioned one.
struct LegacyOfVersioned {
  DLManagedTensor legacy{};
  DLManagedTensorVersioned* versioned = nullptr;
};

void legacy_of_versioned_deleter(DLManagedTensor* self) {
  auto* box = static_cast<LegacyOfVersioned*>(self->manager_ctx);
  if (box->versioned->deleter != nullptr) box->versioned->deleter(box->versioned);
  delete box;
}

class Tensor {
 public:
  Tensor(std::shared_ptr<TensorSource> source, uint64_t index, nb::object readonly,
         bool consumer_reads_only)
      : source_(std::move(source)),
        index_(index),
        readonly_(std::move(readonly)),
        consumer_reads_only_(consumer_reads_only) {}

  nb::object dlpack(nb::handle stream, nb::handle max_version, nb::handle dl_device,
                    nb::handle copy, nb::handle readonly) {
    if (readonly_.is_none() && !consumer_reads_only_) {
      nb::object fast =
          repeat_dlpack(*source_, index_, stream, max_version, dl_device, copy, readonly);
      if (fast.is_valid()) return fast;
    }
    return export_dlpack(*source_, index_, stream, max_version, dl_device, copy,
                         readonly.is_none() ? nb::handle(readonly_) : readonly,
                         consumer_reads_only_);
  }
  nb::tuple device() const { return dlpack_device(*source_); }
  uint64_t index() const { return index_; }

 private:
  std::shared_ptr<TensorSource> source_;
  uint64_t index_;
  nb::object readonly_;
  bool consumer_reads_only_;
};

struct Lease {
  DLManagedTensorVersioned managed;
  SharedExport* shared;
};

void lease_deleter(DLManagedTensorVersioned* self) {
  auto* lease = static_cast<Lease*>(self->manager_ctx);
  SharedExport* shared = lease->shared;
  delete lease;
  shared->release();
}

nb::object tensor_dlpack(nb::handle self, nb::handle stream, nb::handle max_version,
                         nb::handle dl_device, nb::handle copy, nb::handle readonly) {
  return nb::inst_ptr<Tensor>(self)->dlpack(stream, max_version, dl_device, copy, readonly);
}

}  // namespace

SharedExport::SharedExport(DLManagedTensorVersioned* master) : master_(master) {}

SharedExport::~SharedExport() {
  if (master_->deleter != nullptr) master_->deleter(master_);
}

DLManagedTensorVersioned* SharedExport::lease() {
  auto* lease = new Lease{*master_, this};
  lease->managed.manager_ctx = lease;
  lease->managed.deleter = lease_deleter;
  refs_.fetch_add(1, std::memory_order_relaxed);
  return &lease->managed;
}

void SharedExport::release() noexcept {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

DLManagedTensor* legacy_of(DLManagedTensorVersioned* versioned) {
  auto* box = new LegacyOfVersioned{};
  box->versioned = versioned;
  box->legacy.dl_tensor = versioned->dl_tensor;
  box->legacy.manager_ctx = box;
  box->legacy.deleter = legacy_of_versioned_deleter;
  return &box->legacy;
}

nb::object versioned_capsule(DLManagedTensorVersioned* tensor) {
  PyObject* capsule = PyCapsule_New(tensor, kVersionedName, versioned_capsule_destructor);
  if (capsule == nullptr) {
    tensor->deleter(tensor);
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

nb::object legacy_capsule(DLManagedTensor* tensor) {
  PyObject* capsule = PyCapsule_New(tensor, kLegacyName, legacy_capsule_destructor);
  if (capsule == nullptr) {
    tensor->deleter(tensor);
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

nb::object repeat_dlpack(TensorSource& source, uint64_t index, nb::handle stream,
                         nb::handle max_version, nb::handle dl_device, nb::handle copy,
                         nb::handle readonly) {
  if (!(stream.is_none() && dl_device.is_none() && copy.is_none() && readonly.is_none() &&
        PyTuple_CheckExact(max_version.ptr()) && PyTuple_GET_SIZE(max_version.ptr()) == 2))
    return nb::object();
  long major = PyLong_AsLong(PyTuple_GET_ITEM(max_version.ptr(), 0));
  if (major < 1) {
    PyErr_Clear();  // not an int: the full path says so
    return nb::object();
  }
  DLManagedTensorVersioned* t = source.repeat_export(index);
  if (t == nullptr) return nb::object();
  return versioned_capsule(t);
}

nb::tuple dlpack_device(const TensorSource& source) {
  source.check_alive();
  DLDevice d = source.device();
  return nb::make_tuple(static_cast<int>(d.device_type), static_cast<int>(d.device_id));
}

nb::object export_dlpack(TensorSource& source, uint64_t index, nb::handle stream,
                         nb::handle max_version, nb::handle dl_device, nb::handle copy,
                         nb::handle readonly_arg, bool consumer_reads_only) {
  source.check_alive();
  if (index >= source.tensor_count()) {
    PyErr_Format(PyExc_IndexError,
                 "tensor index %llu is out of range: the group has %llu tensor(s)",
                 static_cast<unsigned long long>(index),
                 static_cast<unsigned long long>(source.tensor_count()));
    throw nb::python_error();
  }
  DLDevice device = source.device();
  if (!dl_device.is_none()) {
    DLDevice wanted = device_arg(dl_device);
    if (wanted.device_type != device.device_type || wanted.device_id != device.device_id)
      buffer_error("kstage exports a group where its data lives (" + device_string(device) +
                   "), not on " + device_string(wanted) +
                   ": read with device=... to get the data there");
  }
  bool want_copy = !copy.is_none() && truth(copy);
  bool readonly = readonly_arg.is_none() ? source.default_readonly() : truth(readonly_arg);
  if (!readonly && !want_copy && source.writable_refusal()[0] != '\0')
    buffer_error(source.writable_refusal());

  // The stream: the consumer's, to be ordered after the group's producing work (array API).
  const bool host = is_host_memory(device.device_type);
  uintptr_t consumer = 0;  // the consumer's stream: ordered, and the release ordered after it
  // -1 (no synchronisation) and 0 (not allowed for CUDA) are told apart from handles here.
  int overflow = 0;
  bool is_int = !stream.is_none() && PyLong_Check(stream.ptr());
  long long value = is_int ? PyLong_AsLongLongAndOverflow(stream.ptr(), &overflow) : 0;
  if (is_int && value == -1 && overflow == 0 && PyErr_Occurred()) throw nb::python_error();
  bool no_sync = is_int && overflow == 0 && value == -1;
  if (host) {
    if (!stream.is_none() && !no_sync)
      buffer_error("__dlpack__(stream=...) for data on the host must be None (or -1)");
  } else if (no_sync) {
    // Nothing ordered now, and no stream to order the release after: the deleter waits for the
    // whole device before the memory goes (KSTAGE_STREAM_UNORDERED).
    consumer = KSTAGE_STREAM_UNORDERED;
  } else {
    if (is_int && overflow == 0 && value == 0 && device.device_type != kDLROCM)
      buffer_error(
          "__dlpack__(stream=0) is ambiguous for a device other than ROCm and not allowed (array "
          "API): use 1 or 2");
    // None: the legacy default stream (CUDA) or the default stream (ROCm, which also calls it 0);
    // kstage_device_sync_t says 1 for both.
    uintptr_t s = stream_arg(stream, 1);
    if (device.device_type == kDLROCM && is_int && overflow == 0 && value == 0) s = 1;
    consumer = s;
  }

  // The hot path (np.from_dlpack in a loop) parses with the C API, not nb::cast.
  bool versioned = false;
  if (!max_version.is_none()) {
    PyObject* v = max_version.ptr();
    if (!PyTuple_Check(v) || PyTuple_GET_SIZE(v) != 2) {
      PyErr_SetString(PyExc_TypeError, "max_version must be a (major, minor) tuple");
      throw nb::python_error();
    }
    long major = PyLong_AsLong(PyTuple_GET_ITEM(v, 0));
    if (major == -1 && PyErr_Occurred()) throw nb::python_error();
    versioned = major >= 1;
  }
  if (want_copy) {
    if (!host)
      buffer_error(
          "__dlpack__(copy=True): kstage copies device data only at read time (compact=True)");
    DLManagedTensorVersioned* exported = source.export_versioned(index, true);
    DLManagedTensorVersioned* copied = nullptr;
    try {
      // A copy is the consumer's own: writable unless read-only was asked for by name.
      copied = host_copy(exported, versioned && !readonly_arg.is_none() && readonly);
    } catch (...) {
      exported->deleter(exported);
      throw;
    }
    exported->deleter(exported);
    if (versioned) return versioned_capsule(copied);
    return legacy_capsule(legacy_of(copied));
  }
  if (versioned) {
    DLManagedTensorVersioned* t = source.export_versioned(index, readonly, consumer);
    if (!readonly && (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0) {
      t->deleter(t);
      buffer_error(
          "this group's tensor shares the column's storage and exports read-only: read with "
          "compact=True for tensors of your own, or export with copy=True");
    }
    return versioned_capsule(t);
  }
  if (readonly && !consumer_reads_only)
    buffer_error(
        "a read-only tensor cannot go out as legacy DLPack (it cannot say read-only): the consumer "
        "must ask "
        "for max_version >= (1, 0), or take tensor(i, consumer_reads_only=True) for a consumer "
        "that never "
        "writes (JAX)");
  return legacy_capsule(source.export_legacy(index, readonly, consumer_reads_only, consumer));
}

nb::object make_tensor(std::shared_ptr<TensorSource> source, uint64_t index, nb::handle readonly,
                       bool consumer_reads_only) {
  source->check_alive();
  if (index >= source->tensor_count()) {
    PyErr_Format(PyExc_IndexError,
                 "tensor index %llu is out of range: the group has %llu tensor(s)",
                 static_cast<unsigned long long>(index),
                 static_cast<unsigned long long>(source->tensor_count()));
    throw nb::python_error();
  }
  return nb::cast(Tensor(std::move(source), index, nb::borrow(readonly), consumer_reads_only));
}

nb::object call_dlpack_impl(DlpackImpl impl, PyObject* self, PyObject* const* args,
                            Py_ssize_t nargs, PyObject* kwnames) {
  require_ready(self);
  if (nargs != 0) {
    PyErr_SetString(PyExc_TypeError, "__dlpack__() takes keyword arguments only");
    throw nb::python_error();
  }
  static const char* names[] = {"stream", "max_version", "dl_device", "copy", "readonly"};
  // Callers' keyword names are interned strings (CPython interns identifiers and numpy its
  // keywords): compare pointers first, text only when that fails.
  static PyObject* interned[5] = {
      PyUnicode_InternFromString(names[0]), PyUnicode_InternFromString(names[1]),
      PyUnicode_InternFromString(names[2]), PyUnicode_InternFromString(names[3]),
      PyUnicode_InternFromString(names[4])};
  PyObject* values[5] = {Py_None, Py_None, Py_None, Py_None, Py_None};
  Py_ssize_t n = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, i);
    int k = 0;
    while (k < 5 && name != interned[k]) ++k;
    if (k == 5) {
      k = 0;
      while (k < 5 && PyUnicode_CompareWithASCIIString(name, names[k]) != 0)
        ++k;  // public API: 3.13 dropped the private one
    }
    if (k == 5) {
      PyErr_Format(PyExc_TypeError, "__dlpack__() got an unexpected keyword argument %R", name);
      throw nb::python_error();
    }
    values[k] = args[i];
  }
  return impl(self, values[0], values[1], values[2], values[3], values[4]);
}

void install_dlpack_method(nb::handle cls, FastMethod function) {
  // One definition per installed type; they live as long as the module (forever).
  auto* def = new PyMethodDef{
      "__dlpack__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(function)),
      METH_FASTCALL | METH_KEYWORDS,
      "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None, "
      "readonly=None)\n--\n\n"
      "The Python array API's __dlpack__: a versioned capsule when max_version >= (1, 0), else "
      "legacy "
      "(refused for a read-only tensor, as numpy does, unless the tensor was made with "
      "consumer_reads_only=True). stream: the consumer's stream, ordered after the data's "
      "producing "
      "work (None for host data). dl_device: must be where the data is. copy=True: a copy of the "
      "consumer's own (host data). readonly (kstage's extension; None: read groups True, map "
      "groups "
      "False) sets the export's READ_ONLY flag."};
  nb::object descr = nb::steal(PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def));
  if (!descr.is_valid()) throw nb::python_error();
  if (PyObject_SetAttrString(cls.ptr(), "__dlpack__", descr.ptr()) != 0) throw nb::python_error();
}

uintptr_t stream_arg(nb::handle stream, uintptr_t none_value) {
  if (stream.is_none()) return none_value;
  long long v = PyLong_AsLongLong(stream.ptr());
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  if (v == -1) return 0;  // the array API's "no synchronisation": nothing to order
  if (v < 0)
    raise_invalid_argument("a stream is None, -1, 1, 2 or a stream handle, not " +
                           std::to_string(v));
  return static_cast<uintptr_t>(v);
}

uintptr_t producer_stream(nb::handle stream, DLDevice device) {
  if (is_host_memory(device.device_type)) return stream_arg(stream, 0);  // the engine checks
  // 0, as __dlpack__ takes it: ROCm's default stream (kstage_device_sync_t's 1); for CUDA (and
  // the emulated device, which follows CUDA's rules) ambiguous, and the array API disallows it.
  // Passed on as 0 it would order nothing: a race with the producer.
  if (!stream.is_none() && PyLong_Check(stream.ptr())) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(stream.ptr(), &overflow);
    if (v == -1 && overflow == 0 && PyErr_Occurred()) throw nb::python_error();
    if (v == 0 && overflow == 0) {
      if (device.device_type == kDLROCM) return 1;
      raise_invalid_argument(
          "stream=0 is ambiguous for a device other than ROCm (the array API disallows it): "
          "use 1 (the legacy default stream), 2 (per-thread), a stream handle, or -1 (none)");
    }
  }
  // The array API's default: None is the legacy default stream (kstage_device_sync_t's 1).
  return stream_arg(stream, 1);
}

void require_ready(PyObject* self) {
  if (nb::inst_ready(self)) return;
  PyErr_Format(PyExc_TypeError, "this %s was not made by kstage (its __init__ never ran)",
               Py_TYPE(self)->tp_name);
  throw nb::python_error();
}

void register_tensor(nb::module_& m) {
  nb::class_<Tensor>(
      m, "Tensor",
      "One tensor of a read or map group, for DLPack consumers: numpy.from_dlpack(t), "
      "torch.from_dlpack(t), cupy.from_dlpack(t), jax.dlpack.from_dlpack(t). Each "
      "export keeps its data alive until the consumer lets go, whatever is sealed or "
      "released meanwhile.")
      .def("__dlpack_device__", &Tensor::device, "(device_type, device_id) of the data.")
      .def_prop_ro("index", &Tensor::index);
  install_dlpack_method<&tensor_dlpack>(m.attr("Tensor"));
}

}  // namespace kstage_py
