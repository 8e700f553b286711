// SPDX-License-Identifier: Apache-2.0
// What the parts of the extension share: the status check that raises kstage's Python
// exceptions, GIL helpers, argument conversions, and the classes other files use.
//
// The extension is a thin layer over the C API: it converts arguments, calls one C function
// (with the GIL released when the call can take long or run a producer's deleter), and turns
// the status into an exception. Every rule -- validation, isolation, lifetimes -- is the
// engine's; nothing here re-implements one.
#pragma once

#include <functional>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <dlpack/dlpack.h>
#include <kstage/kstage.h>
#include <kstage/kstage_arrow.h>

namespace kstage_py {

namespace nb = nanobind;

// ---- errors (errors.cpp) ------------------------------------------------------------------------
/// Registers kstage.Error and its subclasses on the module.
void register_errors(nb::module_& m);
/// Raises the exception of `status` with kstage_last_error() (read now, on this thread).
[[noreturn]] void raise_status(kstage_status_t status);
/// Raises the exception of `status` with `message` (a message saved before another C call).
[[noreturn]] void raise_error(kstage_status_t status, const std::string& message);
/// Raises the failure of an op (kstage_wait's status, kstage_op_error's message).
[[noreturn]] void raise_op_failure(kstage_stage_t stage, kstage_op_t op, kstage_status_t status);
/// Raises kstage.InvalidArgument (a ValueError) with `message`: for checks the binding makes
/// itself before a C call (the seeds' Python rules: count=0 in any of its three forms).
[[noreturn]] void raise_invalid_argument(const std::string& message);
inline void check(kstage_status_t status) {
  if (status != KSTAGE_OK) raise_status(status);
}

/// Runs `call` (a C call returning a status) with the GIL released; raise on the result only
/// after it is back: `check(without_gil([&] { return kstage_...(...); }))`.
template <class Call>
kstage_status_t without_gil(Call&& call);

/// True while Python code may still run (not during or after interpreter finalisation).
bool python_is_running();

/// Releases the GIL for a C call when this thread holds it (it always does, from a bound
/// function): the call may block on the stage's locks, wait for device work, or run a
/// producer's DLPack deleter, which takes the GIL itself (dlpack_import.cpp).
struct ReleaseGil {
  PyThreadState* state;
  ReleaseGil() : state(python_is_running() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~ReleaseGil() {
    if (state != nullptr) PyEval_RestoreThread(state);
  }
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;
};

template <class Call>
kstage_status_t without_gil(Call&& call) {
  ReleaseGil gil;
  return call();
}

// ---- the log (log.cpp) --------------------------------------------------------------------------
/// Registers _set_log_callback, flush_log and log_message on the module.
void register_log(nb::module_& m);

// ---- the stage (stage.cpp) ----------------------------------------------------------------------
/// The C stage handle, shared by the Stage object and everything made from it (queries, reads,
/// maps, ops), so that a stage is destroyed after the last of them, or by Stage.close().
///
/// numpy views of a read group's prims and index map point into memory the stage owns, which
/// kstage_destroy frees. So a close while such views live only makes the stage unusable (id 0:
/// every call is InvalidHandle); kstage_destroy runs when the last view goes (`pinned`).
struct StageHandle {
  kstage_stage_t id = 0;       // 0 once closed
  kstage_stage_t closing = 0;  // the C handle from close() until kstage_destroy has returned
  bool destroying = false;     // kstage_destroy is running (the GIL released)
  int64_t pinned = 0;          // read groups with numpy views alive
  /// What must outlive kstage_destroy (the arrays of ops whose work it waits for), handed over
  /// by an op released while another thread destroys the stage; freed once it has returned.
  std::vector<std::shared_ptr<void>> parked;
  ~StageHandle();
  void destroy() noexcept;
  void pin() { ++pinned; }
  void unpin() noexcept;
  /// The C handle while the C stage exists (open, or closed but waiting for views), else 0.
  kstage_stage_t live() const { return id != 0 ? id : destroying ? 0 : closing; }

 private:
  void run_destroy() noexcept;
};
using StageRef = std::shared_ptr<StageHandle>;

/// kstage.Query: a fixed, ordered list of prims (owns one C query handle).
struct Query {
  StageRef stage;
  kstage_query_t id = 0;
  Query(StageRef s, kstage_query_t q) : stage(std::move(s)), id(q) {}
  ~Query() { release(); }
  void release() noexcept;
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
};

/// kstage.Stage. Its methods are bound in the file of their concept (stage.cpp: dictionary,
/// queries, seals; write.cpp; read.cpp; map.cpp).
class Stage {
 public:
  Stage(std::string_view host_execution, nb::handle residency);
  const StageRef& ref() const { return handle_; }
  void close();
  bool closed() const;
  uint64_t id() const;
  kstage_token_t token(nb::handle name);
  std::string token_name(kstage_token_t token);
  nb::object intern(nb::handle paths);
  std::string path(kstage_path_t id);
  kstage_path_t intern_range(std::string_view parent, std::string_view prefix, uint64_t begin,
                             uint64_t count);
  std::tuple<kstage_path_t, uint64_t, uint64_t> range_info(kstage_path_t path);
  kstage_path_t range_member(kstage_path_t first, uint64_t index);
  std::tuple<std::string, std::string, uint64_t, uint64_t> range_definition(kstage_path_t first);
  std::unique_ptr<Query> query(nb::handle paths, nb::handle prefix, nb::handle has,
                               nb::handle path_in);
  std::unique_ptr<Query> query_range(kstage_path_t first, uint64_t start, uint64_t count,
                                     uint64_t stride);
  void seal(uint64_t ordinal, nb::handle attributes);
  uint64_t write_floor(nb::handle attribute);
  nb::list attributes();
  nb::dict attribute_info(nb::handle attribute);
  nb::list attribute_schemas(nb::handle attribute);

 private:
  nb::dict info_dict(kstage_token_t token, const kstage_attribute_info_t& info);
  StageRef handle_;
};

/// A query argument: a Query, or paths (strings or ids) made into a query for one call.
struct QueryArg {
  kstage_query_t id = 0;
  std::unique_ptr<Query> owned;  // a temporary query, released when the call is done
};
QueryArg query_arg(const StageRef& stage, nb::handle query);

/// The token of an attribute argument (a str, interned and cached per stage, or an int).
kstage_token_t attribute_token(const StageRef& stage, nb::handle attribute);

/// Path ids of a path argument: a str (one path), a sequence of str (interned in one call), a
/// sequence of ids or a one-dimensional integer array.
std::vector<kstage_path_t> path_ids(const StageRef& stage, nb::handle paths);
/// A numpy array that owns `ids` (writable: it is the caller's copy).
nb::object path_array(std::vector<kstage_path_t> ids);

/// A DLDevice from None ({0, 0}), "cpu", "cuda", "cuda:1", a (type, id) pair, or an object
/// with __dlpack_device__.
DLDevice device_arg(nb::handle device);
/// A kstage_device_sync_t stream from a Python array API stream value (None: `none_value`;
/// -1, "no synchronisation": 0).
uintptr_t stream_arg(nb::handle stream, uintptr_t none_value);
/// The stream a producer of device data filled it on, as writes and map commits take it (one
/// rule, the array API's, as __dlpack__ takes a consumer's): None is the legacy default stream
/// (1) for device data, nothing for host data; -1 nothing to order; else the handle.
uintptr_t producer_stream(nb::handle stream, DLDevice device);

/// Memory the host reads directly (CPU, CUDA/ROCm pinned host memory): no stream applies.
inline bool is_host_memory(int device_type) {
  return device_type == kDLCPU || device_type == kDLCUDAHost || device_type == kDLROCMHost;
}

/// The name of a kstage_semantic_t ("point", ...; "unknown" for a code kstage.h does not have).
const char* semantic_name(kstage_semantic_t semantic);
/// "upsert" / "insert" / "update", and a semantic name ("point", ...) or code (None: none).
kstage_prim_mode_t mode_arg(std::string_view mode);
// "reject" or "force": a kstage_attribute_mode_t (ValueError otherwise).
uint8_t attribute_mode_arg(std::string_view mode);
kstage_semantic_t semantic_arg(nb::handle semantic);

/// A contiguous one-dimensional numpy array of `obj` (anything numpy.asarray takes);
/// InvalidArgument naming `what` when it has another rank.
nb::object numpy_1d(nb::handle obj, const char* what);
/// A non-negative integer (int, numpy integer, anything with __index__), or TypeError /
/// ValueError naming `what`.
uint64_t to_uint64(nb::handle obj, const char* what);
/// A pair of non-negative integers, or TypeError naming `what`.
std::tuple<uint64_t, uint64_t> uint_pair(nb::handle obj, const char* what);

/// str(obj), for messages.
inline std::string text_of(nb::handle obj) { return nb::str(obj).c_str(); }

/// DLPack's device-type names, for messages and __repr__.
std::string device_string(DLDevice device);

// ---- DLPack import (dlpack_import.cpp) ----------------------------------------------------------
/// One producer tensor taken from `__dlpack__` (or a capsule), owned until released: the
/// producer's deleter runs exactly once, with the GIL taken for it.
class Imported {
 public:
  Imported() = default;
  Imported(Imported&& other) noexcept;
  Imported& operator=(Imported&& other) noexcept;
  ~Imported();
  const DLTensor& tensor() const;
  /// Hands the tensor over as a versioned managed tensor whose deleter takes the GIL before
  /// it calls the producer's (from any thread) and is marked READ_ONLY, so the stage never
  /// writes into memory the caller may still look at.
  DLManagedTensorVersioned* release_to_stage();

 private:
  friend Imported import_dlpack(nb::handle source, nb::handle stream);
  DLManagedTensorVersioned* versioned_ = nullptr;
  DLManagedTensor* legacy_ = nullptr;
};
/// Takes a tensor from any DLPack producer: an object with __dlpack__ (asked for a versioned
/// tensor first, legacy if it does not know max_version) or a "dltensor(_versioned)" capsule.
Imported import_dlpack(nb::handle source, nb::handle stream);

// ---- DLPack export (dlpack_export.cpp) ----------------------------------------------------------
/// Makes a PyCapsule of a versioned or legacy managed tensor; its destructor deletes the tensor
/// unless a consumer took it (renamed the capsule "used_...").
nb::object versioned_capsule(DLManagedTensorVersioned* tensor);
nb::object legacy_capsule(DLManagedTensor* tensor);

/// One kstage export shared by many consumers: each lease() is a DLManagedTensorVersioned of
/// its own (the same data, shape, strides and flags) whose deleter drops one reference; the
/// last one runs kstage's deleter. A group exported again and again (np.from_dlpack(g) in a
/// loop) then costs an allocation per export, not a C call. Deleters may run on any thread.
class SharedExport {
 public:
  /// Takes `master` (a kstage export) with one reference, the caller's.
  explicit SharedExport(DLManagedTensorVersioned* master);
  DLManagedTensorVersioned* lease();
  /// Drops one reference (the caller's, or a lease's).
  void release() noexcept;

 private:
  ~SharedExport();
  DLManagedTensorVersioned* master_;
  std::atomic<int64_t> refs_{1};
};

/// What a kstage.Tensor exports from: a read group (read.cpp) or a map group (map.cpp).
struct TensorSource {
  virtual ~TensorSource() = default;
  /// Raises InvalidHandle when the group was released, unmapped or its map ended.
  virtual void check_alive() const = 0;
  virtual uint64_t tensor_count() const = 0;
  virtual DLDevice device() const = 0;
  /// Read groups export read-only unless asked otherwise, map groups writable.
  virtual bool default_readonly() const = 0;
  /// Why a writable export is impossible ("" when it is possible): a zero-copy read group
  /// shares the column's storage.
  virtual const char* writable_refusal() const = 0;
  /// An export for a consumer on `stream` (kstage_device_sync_t's values; 0: none): the
  /// stream is ordered after the group's producing work, and the export's deleter releases
  /// the memory after the consumer's work (kstage_group_export_on_stream).
  virtual DLManagedTensorVersioned* export_versioned(uint64_t index, bool readonly,
                                                     uintptr_t stream = 0) = 0;
  /// A legacy export; `readonly` only with `consumer_reads_only` (checked by the caller).
  virtual DLManagedTensor* export_legacy(uint64_t index, bool readonly, bool consumer_reads_only,
                                         uintptr_t stream = 0) = 0;
  /// Another read-only versioned export of tensor `index` when one was made before and
  /// nothing needs checking again (host data, alive), else nullptr: the hot path of
  /// np.from_dlpack in a loop.
  virtual DLManagedTensorVersioned* repeat_export(uint64_t) { return nullptr; }
};

/// The Python array API's `__dlpack__` over tensor `index` of `source`: versioned or legacy by
/// `max_version`, the stream ordered first, `dl_device` and `copy` honoured, `readonly` (None:
/// the source's default) and `consumer_reads_only` (a legacy read-only export for consumers
/// that never write, such as JAX) as kstage's export flags.
nb::object export_dlpack(TensorSource& source, uint64_t index, nb::handle stream,
                         nb::handle max_version, nb::handle dl_device, nb::handle copy,
                         nb::handle readonly, bool consumer_reads_only);
/// A legacy DLManagedTensor in front of a versioned one (its deleter deletes the versioned).
DLManagedTensor* legacy_of(DLManagedTensorVersioned* versioned);
/// Installs `__dlpack__` on `cls` as a vectorcall method (METH_FASTCALL | METH_KEYWORDS) that
/// parses the array API's keywords itself and calls `impl(self, stream, max_version, dl_device,
/// copy, readonly)`: np.from_dlpack(g) in a loop is the hot path of the whole package, and
/// generic keyword matching was a third of its cost. `doc` starts with the text signature.
using DlpackImpl = nb::object (*)(nb::handle self, nb::handle stream, nb::handle max_version,
                                  nb::handle dl_device, nb::handle copy, nb::handle readonly);
template <DlpackImpl Impl>
void install_dlpack_method(nb::handle cls);
using FastMethod = PyObject* (*)(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                                 PyObject* kwnames);
void install_dlpack_method(nb::handle cls, FastMethod function);
nb::object call_dlpack_impl(DlpackImpl impl, PyObject* self, PyObject* const* args,
                            Py_ssize_t nargs, PyObject* kwnames);
/// Raises TypeError unless `self`, a kstage instance, was made by its constructor: the C entry
/// points that nanobind does not wrap must check what its bound methods do (Cls.__new__(Cls),
/// or a subclass whose __init__ skips the base's, gives an instance with nothing in it).
void require_ready(PyObject* self);
/// Raises BufferError (what DLPack consumers catch for "cannot export this").
[[noreturn]] void buffer_error(const std::string& message);
/// Sets the Python error of the exception in flight (call it in a catch (...) block): the C
/// entry points that nanobind does not wrap (vectorcall methods, tp_iternext) let nothing
/// escape into CPython.
void set_error_from_current_exception() noexcept;
template <DlpackImpl Impl>
PyObject* dlpack_vectorcall(PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                            PyObject* kwnames) {
  try {
    return call_dlpack_impl(Impl, self, args, nargs, kwnames).release().ptr();
  } catch (...) {
    set_error_from_current_exception();
    return nullptr;
  }
}
template <DlpackImpl Impl>
void install_dlpack_method(nb::handle cls) {
  install_dlpack_method(cls, &dlpack_vectorcall<Impl>);
}
/// export_dlpack's hot path: a capsule of source.repeat_export(index) when the call asks for
/// nothing but a versioned export (every other argument None), else a null object.
nb::object repeat_dlpack(TensorSource& source, uint64_t index, nb::handle stream,
                         nb::handle max_version, nb::handle dl_device, nb::handle copy,
                         nb::handle readonly);
/// tp_iternext of an iterator whose `T::next_or_none()` gives the next item or None: the end
/// returns NULL with no exception set, so a loop's StopIteration costs nothing (a C++ exception
/// per read, or a Python generator, would cost more than the read).
template <class T>
PyObject* iternext(PyObject* self) {
  try {
    require_ready(self);
    nb::object next = nb::inst_ptr<T>(self)->next_or_none();
    return next.is_none() ? nullptr : next.release().ptr();
  } catch (...) {
    set_error_from_current_exception();
    return nullptr;
  }
}

/// `__dlpack_device__` of `source`.
nb::tuple dlpack_device(const TensorSource& source);
/// A kstage.Tensor: tensor `index` of `source`, with export defaults.
nb::object make_tensor(std::shared_ptr<TensorSource> source, uint64_t index, nb::handle readonly,
                       bool consumer_reads_only);

// ---- module parts -------------------------------------------------------------------------------
/// Strings of a path id, and the DLDataType <-> numpy dtype pair.
std::string path_string(const StageRef& stage, kstage_path_t path);
nb::object numpy_dtype(DLDataType dtype);
/// A uint64 / uint32 numpy array over memory `owner` keeps alive (read-only when `readonly`).
nb::object uint64_view(const uint64_t* data, size_t n, nb::handle owner);
nb::object uint32_view(const uint32_t* data, size_t n, nb::handle owner);

void register_stage(nb::module_& m);  // also kstage.Query
/// Each adds its methods to kstage.Stage (`stage_class`) and binds its own classes.
void register_write(nb::module_& m, nb::handle stage_class);  // kstage.Op
void register_read(nb::module_& m, nb::handle stage_class);   // kstage.Read, kstage.ReadGroup
void register_map(nb::module_& m, nb::handle stage_class);    // kstage.Map, kstage.MapGroup
void register_tensor(nb::module_& m);                         // kstage.Tensor
void register_scene(nb::module_& m, nb::handle stage_class);  // kstage.Hierarchy, filters

// The Arrow PyCapsule interface (arrow_capsules.cpp): (schema, array) capsules of an export
// (`make`: kstage_group_export_arrow or kstage_read_export_arrow, called without the GIL) --
// "arrow_array" (Host: host data only) or "arrow_device_array".
enum class ArrowKind { Host, Device };
using ArrowExport = std::function<kstage_status_t(ArrowSchema*, ArrowDeviceArray*)>;
nb::tuple arrow_capsules(const ArrowExport& make, ArrowKind kind);

}  // namespace kstage_py
