// SPDX-License-Identifier: Apache-2.0
// Mutations: Stage.write, Stage.write_batch (kstage.Write), Stage.delete, the scene's writes
// (Stage.compute_world_transforms, Stage.clone, Stage.clone_range), and kstage.Op.
//
// Client data is taken through DLPack and passed as client tensors, which the stage copies
// (host columns: during the call); the caller's array stays the caller's. adopt=True hands it
// over instead (managed tensors, marked read-only): a dense write then becomes the column's
// storage with no copy, an index_map or mask write to a host column is read by its seal (no
// copy at write time), and the caller promises not to write to the array again.
#include "binding.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace kstage_py {

kstage_prim_mode_t mode_arg(std::string_view mode) {
  if (mode == "upsert") return KSTAGE_PRIM_MODE_UPSERT;
  if (mode == "insert") return KSTAGE_PRIM_MODE_INSERT;
  if (mode == "update") return KSTAGE_PRIM_MODE_UPDATE;
  raise_invalid_argument("mode must be \"upsert\", \"insert\" or \"update\", not \"" +
                         std::string(mode) + "\"");
}

uint8_t attribute_mode_arg(std::string_view mode) {
  if (mode == "reject") return KSTAGE_ATTRIBUTE_MODE_REJECT;
  if (mode == "force") return KSTAGE_ATTRIBUTE_MODE_FORCE;
  raise_invalid_argument("attribute_mode must be \"reject\" or \"force\", not \"" +
                         std::string(mode) + "\"");
}

const char* semantic_name(kstage_semantic_t s) {
  static const char* names[] = {"none",
                                "point",
                                "vector",
                                "normal",
                                "color",
                                "quaternion",
                                "matrix",
                                "texcoord",
                                "token_id",
                                "path_id",
                                "string",
                                "asset_path_id",
                                "path_expression_id",
                                "relationship_path_id",
                                "connection_path_id",
                                "time_code",
                                "frame"};
  static_assert(sizeof names / sizeof names[0] == KSTAGE_SEMANTIC_FRAME + 1,
                "one name per kstage_semantic_t");
  return s >= 0 && s <= KSTAGE_SEMANTIC_FRAME ? names[s] : "unknown";
}

kstage_semantic_t semantic_arg(nb::handle semantic) {
  if (semantic.is_none()) return KSTAGE_SEMANTIC_NONE;
  if (PyLong_Check(semantic.ptr())) {
    uint64_t code = to_uint64(semantic, "semantic");
    if (code > 0x7fffffff)
      raise_invalid_argument("semantic " + std::to_string(code) + " is not a semantic code");
    return static_cast<kstage_semantic_t>(code);
  }
  if (!PyUnicode_Check(semantic.ptr())) {
    PyErr_Format(PyExc_TypeError, "semantic must be a name (\"point\", ...) or a code, not %s",
                 Py_TYPE(semantic.ptr())->tp_name);
    throw nb::python_error();
  }
  std::string s = nb::cast<std::string>(semantic);
  for (kstage_semantic_t i = KSTAGE_SEMANTIC_NONE; i <= KSTAGE_SEMANTIC_FRAME; ++i) {
    if (s == semantic_name(i)) return i;
  }
  raise_invalid_argument(
      "unknown semantic \"" + s +
      "\" (none, point, vector, normal, color, quaternion, matrix, texcoord, token_id, "
      "path_id, string, asset_path_id, path_expression_id, relationship_path_id, "
      "connection_path_id, time_code, frame)");
}

// A contiguous 1-D numpy array of `obj`.
nb::object numpy_1d(nb::handle obj, const char* what) {
  // Leaked on purpose: a static nb::object would be released by C++ exit, after Python is gone.
  static nb::handle ascontiguousarray =
      nb::object(nb::module_::import_("numpy").attr("ascontiguousarray")).release();
  nb::object a = ascontiguousarray(obj);
  if (nb::cast<int>(a.attr("ndim")) != 1)
    raise_invalid_argument(std::string(what) + " must be one-dimensional");
  // Native byte order (a '>u4' index_map is integers too): nanobind's cast takes no other.
  if (!nb::cast<bool>(a.attr("dtype").attr("isnative")))
    a = a.attr("astype")(a.attr("dtype").attr("newbyteorder")("="));
  return a;
}

namespace {

// One write's arguments, as given (kstage.Write; Stage.write makes one).
struct WriteSpec {
  nb::object data;
  nb::object index_map;
  nb::object mask;
  nb::object count;
  nb::object semantic;
  nb::object row_counts;
  bool adopt = false;
  nb::object residency;
  nb::object stream;
  std::string attribute_mode = "reject";
};

// Everything a write's C descriptor points at, kept until the op is done with it.
struct Payload {
  std::vector<Imported> imports;
  std::vector<DLTensor> tensors;
  std::vector<std::vector<int64_t>> row_shapes;
  std::vector<DLManagedTensorVersioned*> managed;
  std::vector<uint32_t> index_map;
  std::vector<uint64_t> mask;
  std::vector<Imported> index_imports;  // a device index_map, read in place by the device
};

using HostArray = nb::ndarray<nb::ro, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// index_map: source row of each logical element, copied as uint32 (always a copy: the engine
// reads it with the GIL released, while another thread could change the caller's array between
// the engine's bounds check and its gather).
const uint32_t* index_map_arg(nb::handle obj, Payload& payload, uint64_t& length) {
  nb::object a = numpy_1d(obj, "index_map");
  if (nb::cast<size_t>(a.attr("size")) == 0)  // before the dtype: [] is float64 to numpy
    raise_invalid_argument(
        "index_map is empty: an empty index map would mean count=0, which means every prim "
        "of the query; skip the write instead");
  std::string kind = nb::cast<std::string>(a.attr("dtype").attr("kind"));
  if (kind != "i" && kind != "u")
    raise_invalid_argument("index_map must hold integers, not " +
                           text_of(nb::object(a.attr("dtype"))));
  HostArray arr = nb::cast<HostArray>(a);
  length = arr.shape(0);
  nb::dlpack::dtype t = arr.dtype();
  payload.index_map.resize(length);
  if (t == nb::dtype<uint32_t>()) {
    std::memcpy(payload.index_map.data(), arr.data(), length * sizeof(uint32_t));
    return payload.index_map.data();
  }
  auto convert = [&](auto* p) {
    for (uint64_t i = 0; i < length; ++i) {
      auto v = p[i];
      if (v < 0 || static_cast<uint64_t>(v) > std::numeric_limits<uint32_t>::max())
        raise_invalid_argument("index_map[" + std::to_string(i) + "] = " + std::to_string(v) +
                               " is not a source row (0 <= row < 2^32)");
      // NOLINTNEXTLINE(bugprone-signed-char-misuse): an int8 row number checked >= 0, not a char
      payload.index_map[i] = static_cast<uint32_t>(v);
    }
  };
  const void* d = arr.data();
  bool is_signed = t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int);
  switch (t.bits) {
    case 8:
      is_signed ? convert(static_cast<const int8_t*>(d)) : convert(static_cast<const uint8_t*>(d));
      break;
    case 16:
      is_signed ? convert(static_cast<const int16_t*>(d))
                : convert(static_cast<const uint16_t*>(d));
      break;
    case 32: convert(static_cast<const int32_t*>(d)); break;  // uint32 copied above
    case 64:
      is_signed ? convert(static_cast<const int64_t*>(d))
                : convert(static_cast<const uint64_t*>(d));
      break;
    default: raise_invalid_argument("index_map: unsupported integer width");
  }
  return payload.index_map.data();
}

// A device index_map or mask (a DLPack producer whose __dlpack_device__ is not host memory:
// torch, cupy, a kstage device group): imported and kept in `payload` as it is -- no copy --
// ordered on the write's stream (the producer's, as for the data), and checked for what the
// stage reads there: one contiguous, non-empty axis. Null when `obj` is host data.
const DLTensor* device_selection_arg(nb::handle obj, nb::handle stream, Payload& payload,
                                     const char* what) {
  if (!nb::hasattr(obj, "__dlpack_device__") || !nb::hasattr(obj, "__dlpack__")) return nullptr;
  nb::tuple where = nb::borrow<nb::tuple>(obj.attr("__dlpack_device__")());
  if (nb::len(where) != 2 || is_host_memory(nb::cast<int>(where[0]))) return nullptr;
  payload.index_imports.push_back(import_dlpack(obj, stream));
  const DLTensor& t = payload.index_imports.back().tensor();
  const std::string name = what;
  if (t.ndim != 1)
    raise_invalid_argument(name + " must be one-dimensional, not " + std::to_string(t.ndim) + "-D");
  if (t.strides != nullptr && t.shape[0] > 1 && t.strides[0] != 1)
    raise_invalid_argument("a device " + name + " must be contiguous (stride " +
                           std::to_string(t.strides[0]) +
                           "); make a contiguous copy on its device first");
  if (t.shape[0] == 0)
    raise_invalid_argument(
        name + " is empty: an empty " + name +
        " would mean count=0, which means every prim of the query; skip the write instead");
  return &t;
}

template <class T>
const T* device_data(const DLTensor& t) {
  return reinterpret_cast<const T*>(static_cast<const char*>(t.data) + t.byte_offset);
}

// A DLPack dtype for a message: "int16", "uint64 x 2", "code 4, 16 bits".
std::string dlpack_dtype_text(DLDataType t) {
  const char* code = t.code == kDLInt     ? "int"
                     : t.code == kDLUInt  ? "uint"
                     : t.code == kDLFloat ? "float"
                                          : nullptr;
  std::string text =
      code ? code + std::to_string(t.bits)
           : "code " + std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits";
  return t.lanes > 1 ? text + " x " + std::to_string(t.lanes) : text;
}

// A device index_map, passed through as it is: 32-bit entries as kstage_write_data_t's
// index_map (int32 read as uint32: a negative entry is out of range), int64 entries (torch's
// and cupy's index dtype) as its index_map64. kstage reads it in place on the device and checks
// it there, a bad entry failing the op (kstage.h "Device index maps and masks"). False when
// `obj` is host data.
bool device_index_map_arg(nb::handle obj, nb::handle stream, Payload& payload, uint64_t& length,
                          kstage_write_data_t& d) {
  const DLTensor* t = device_selection_arg(obj, stream, payload, "index_map");
  if (t == nullptr) return false;
  const bool integer = (t->dtype.code == kDLInt || t->dtype.code == kDLUInt) && t->dtype.lanes == 1;
  if (integer && t->dtype.bits == 32) {
    d.index_map = device_data<uint32_t>(*t);
  } else if (integer && t->dtype.bits == 64 && t->dtype.code == kDLInt) {
    d.index_map64 = device_data<int64_t>(*t);
  } else {
    raise_invalid_argument("a device index_map must hold int64, int32 or uint32 entries, not " +
                           dlpack_dtype_text(t->dtype) + "; convert it on its device first");
  }
  length = uint64_t(t->shape[0]);
  d.selection_device = t->device;
  return true;
}

// A device mask: uint64 words (bit i%64 of word i/64) on a device (a bool array would have to
// be packed on its device first).
const uint64_t* device_mask_arg(nb::handle obj, nb::handle stream, Payload& payload,
                                uint64_t& elements, DLDevice& device) {
  const DLTensor* t = device_selection_arg(obj, stream, payload, "mask");
  if (t == nullptr) return nullptr;
  if (!(t->dtype.code == kDLUInt && t->dtype.bits == 64 && t->dtype.lanes == 1))
    raise_invalid_argument(
        "a device mask must be uint64 words (bit i%64 of word i/64, with count=); pack a "
        "bool mask on its device first");
  elements = uint64_t(t->shape[0]) * 64;
  device = t->device;
  return device_data<uint64_t>(*t);
}

// mask: a bool array (one entry per logical element, packed here) or uint64 words (bit i%64 of
// word i/64; count required), copied for the same reason as index_map.
const uint64_t* mask_arg(nb::handle obj, Payload& payload, uint64_t& elements, bool& words) {
  nb::object a = numpy_1d(obj, "mask");
  if (nb::cast<size_t>(a.attr("size")) == 0)  // before the dtype: [] is float64 to numpy
    raise_invalid_argument(
        "mask is empty: an empty mask would mean count=0, which means every prim of the query; "
        "skip the write instead");
  std::string dtype = text_of(nb::object(a.attr("dtype")));
  if (dtype != "bool" && dtype != "uint64")
    raise_invalid_argument("mask must be a bool array (one entry per prim) or uint64 words, not " +
                           dtype);
  HostArray arr = nb::cast<HostArray>(a);
  uint64_t n = arr.shape(0);
  if (dtype == "bool") {
    words = false;
    elements = n;
    payload.mask.assign((n + 63) / 64, 0);
    const bool* b = static_cast<const bool*>(arr.data());
    for (uint64_t i = 0; i < n; ++i)
      payload.mask[i / 64] |= static_cast<uint64_t>(b[i]) << (i % 64);
    return payload.mask.data();
  }
  words = true;
  elements = n * 64;
  const uint64_t* w = static_cast<const uint64_t*>(arr.data());
  payload.mask.assign(w, w + n);
  return payload.mask.data();
}

// Fills `d` (and `payload`) from `spec`.
void build_write(const WriteSpec& spec, Payload& payload, kstage_write_data_t& d) {
  d = kstage_write_data_init();
  d.semantic = semantic_arg(spec.semantic);
  d.attribute_mode = attribute_mode_arg(spec.attribute_mode);
  d.residency = device_arg(spec.residency);

  // count, index_map, mask: the seeds' rule -- count 0 in any form is refused, never widened.
  bool has_count = !spec.count.is_none();
  uint64_t count = has_count ? to_uint64(spec.count, "count") : 0;
  if (has_count && count == 0)
    raise_invalid_argument(
        "count=0 would mean every prim of the query: pass count=None for all of them, or "
        "skip the write");
  if (!spec.index_map.is_none() && !spec.mask.is_none())
    raise_invalid_argument("index_map and mask are exclusive");
  if (!spec.index_map.is_none()) {
    uint64_t length = 0;
    if (!device_index_map_arg(spec.index_map, spec.stream, payload, length, d))
      d.index_map = index_map_arg(spec.index_map, payload, length);
    if (!has_count) count = length;
    else if (count > length)
      raise_invalid_argument("count=" + std::to_string(count) + " but index_map has " +
                             std::to_string(length) + " entries");
  }
  if (!spec.mask.is_none()) {
    uint64_t elements = 0;
    bool words = false;
    d.mask = device_mask_arg(spec.mask, spec.stream, payload, elements, d.selection_device);
    if (d.mask != nullptr) words = true;
    else d.mask = mask_arg(spec.mask, payload, elements, words);
    if (!has_count) {
      if (words)
        raise_invalid_argument(
            "a mask of uint64 words needs count= (the number of prims it covers)");
      count = elements;
    } else if (count > elements) {
      raise_invalid_argument("count=" + std::to_string(count) + " but the mask covers " +
                             std::to_string(elements) + " prims");
    }
  }
  d.count = count;

  // The payload: one tensor, a list of row tensors, or a packed tensor with row counts.
  bool list = PyList_Check(spec.data.ptr()) || PyTuple_Check(spec.data.ptr());
  d.is_array = list || !spec.row_counts.is_none();
  if (list) {
    nb::sequence rows = nb::borrow<nb::sequence>(spec.data);
    size_t n = nb::len(rows);
    if (n == 0) raise_invalid_argument("a ragged write needs at least one row tensor");
    payload.imports.reserve(n);
    for (nb::handle row : rows) payload.imports.push_back(import_dlpack(row, spec.stream));
  } else {
    payload.imports.push_back(import_dlpack(spec.data, spec.stream));
  }
  const DLTensor& first = payload.imports.front().tensor();
  if (!is_host_memory(first.device.device_type))
    d.device_sync.stream = producer_stream(spec.stream, first.device);

  if (!spec.row_counts.is_none()) {
    if (spec.adopt)
      raise_invalid_argument("adopt=True takes whole tensors: not a packed tensor with row_counts");
    if (first.ndim < 1) raise_invalid_argument("a packed ragged tensor has at least one dimension");
    nb::object counts = numpy_1d(spec.row_counts, "row_counts");
    std::string kind = nb::cast<std::string>(counts.attr("dtype").attr("kind"));
    if (kind != "i" && kind != "u")
      raise_invalid_argument("row_counts must hold integers, not " +
                             text_of(nb::object(counts.attr("dtype"))));
    nb::object as64 = counts.attr("astype")("int64");
    auto c =
        nb::cast<nb::ndarray<nb::ro, const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(
            as64);
    uint64_t rows = c.shape(0);
    if (rows == 0) raise_invalid_argument("row_counts is empty");
    int64_t elem_bytes = (first.dtype.bits * first.dtype.lanes + 7) / 8;
    int64_t row_stride = elem_bytes;
    if (first.strides != nullptr) {
      row_stride = first.strides[0] * elem_bytes;
    } else {
      for (int i = 1; i < first.ndim; ++i) row_stride *= first.shape[i];
    }
    payload.row_shapes.resize(rows);
    payload.tensors.resize(rows);
    // Row i starts `offset` elements in, which is before the first element's address for a
    // negative stride (a[::-1]): each row's address is its own data pointer, byte_offset 0.
    const uintptr_t base = reinterpret_cast<uintptr_t>(first.data) + uintptr_t(first.byte_offset);
    int64_t offset = 0;
    for (uint64_t i = 0; i < rows; ++i) {
      int64_t k = c.data()[i];
      if (k < 0) raise_invalid_argument("row_counts[" + std::to_string(i) + "] is negative");
      if (k > first.shape[0] - offset)  // (offset <= shape[0]: no overflow)
        raise_invalid_argument("row_counts add up to more than the packed tensor's " +
                               std::to_string(first.shape[0]) + " elements");
      payload.row_shapes[i].assign(first.shape, first.shape + first.ndim);
      payload.row_shapes[i][0] = k;
      DLTensor t = first;
      t.shape = payload.row_shapes[i].data();
      t.data = reinterpret_cast<void*>(base + uintptr_t(offset * row_stride));
      t.byte_offset = 0;
      payload.tensors[i] = t;
      offset += k;
    }
    if (offset != first.shape[0])
      raise_invalid_argument("row_counts add up to " + std::to_string(offset) +
                             ", the packed tensor has " + std::to_string(first.shape[0]) +
                             " elements");
    d.tensors = payload.tensors.data();
    d.tensor_count = rows;
    return;
  }
  if (spec.adopt) {
    for (Imported& imported : payload.imports)
      payload.managed.push_back(imported.release_to_stage());
    payload.imports.clear();
    d.managed_tensors = payload.managed.data();
    d.tensor_count = payload.managed.size();
    return;
  }
  payload.tensors.reserve(payload.imports.size());
  for (const Imported& imported : payload.imports) payload.tensors.push_back(imported.tensor());
  d.tensors = payload.tensors.data();
  d.tensor_count = payload.tensors.size();
}

// Managed tensors built but not handed over (an error before the C call): delete them.
void drop_managed(Payload& payload) {
  for (DLManagedTensorVersioned* t : payload.managed) t->deleter(t);
  payload.managed.clear();
}

class Op {
 public:
  Op(StageRef stage, kstage_op_t id, std::vector<std::unique_ptr<Payload>> payloads)
      : stage_(std::move(stage)), id_(id), payloads_(std::move(payloads)) {
    // Host work is done when the call returns: the client tensors can go now.
    if (!payloads_.empty() && kstage_wait(stage_->id, id_, 0) != KSTAGE_TIMEOUT) payloads_.clear();
  }
  Op(Op&& other) noexcept
      : stage_(std::move(other.stage_)), id_(other.id_), payloads_(std::move(other.payloads_)) {
    other.id_ = 0;
  }
  Op(const Op&) = delete;
  ~Op() { release(); }

  bool wait(nb::handle timeout) {
    uint64_t ns = KSTAGE_TIMEOUT_INFINITE;
    if (!timeout.is_none()) {
      double seconds = PyFloat_AsDouble(timeout.ptr());
      if (seconds == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "timeout must be a number of seconds or None, not %s",
                     Py_TYPE(timeout.ptr())->tp_name);
        throw nb::python_error();
      }
      if (!(seconds >= 0)) raise_invalid_argument("timeout must be >= 0 seconds (or None)");
      ns = seconds >= 1.8e10 ? KSTAGE_TIMEOUT_INFINITE
                             : static_cast<uint64_t>(std::llround(seconds * 1e9));
    }
    if (id_ == 0) raise_error(KSTAGE_INVALID_HANDLE, "the op was released");
    kstage_stage_t stage = stage_->live();
    if (stage == 0) {
      settle();
      raise_error(KSTAGE_INVALID_HANDLE, "the op's stage was closed");
    }
    kstage_status_t status = without_gil([&] { return kstage_wait(stage, id_, ns); });
    if (status == KSTAGE_TIMEOUT) return false;
    if (status == KSTAGE_OK) {
      payloads_.clear();  // done: the stage no longer reads the caller's tensors
      return true;
    }
    std::string message;
    const char* m = nullptr;
    message =
        kstage_op_error(stage, id_, &m) == KSTAGE_OK && m != nullptr ? m : kstage_last_error();
    settle();
    raise_error(status, message);
  }
  bool done() {
    if (id_ == 0) return true;
    kstage_stage_t stage = stage_->live();
    if (stage == 0) return !stage_->destroying;
    return without_gil([&] { return kstage_wait(stage, id_, 0); }) != KSTAGE_TIMEOUT;
  }
  // kstage_op_sync: `stream` as read(stream=)'s (None or -1: none), `event` an event handle.
  void sync(nb::handle stream, nb::handle event) {
    if (id_ == 0) raise_error(KSTAGE_INVALID_HANDLE, "the op was released");
    kstage_stage_t stage = stage_->live();
    if (stage == 0) raise_error(KSTAGE_INVALID_HANDLE, "the op's stage was closed");
    const kstage_device_sync_t consumer{stream_arg(stream, 0),
                                        event.is_none() ? 0 : uintptr_t(to_uint64(event, "event"))};
    check(without_gil([&] { return kstage_op_sync(stage, id_, consumer); }));
  }
  std::string error() {
    if (id_ == 0) raise_error(KSTAGE_INVALID_HANDLE, "the op was released");
    const char* message = nullptr;
    check(kstage_op_error(stage_->live(), id_, &message));
    return message != nullptr ? message : "";
  }
  void release() {
    if (id_ == 0) return;
    settle();
    kstage_op_t id = id_;
    id_ = 0;
    if (stage_->live() != 0) kstage_release_op(stage_->live(), id);
  }

 private:
  // Frees the caller's arrays once the stage's reads of them are surely over: after a wait
  // while the C stage exists (open, or closed but waiting for numpy views); parked with the
  // stage while another thread's kstage_destroy runs (it waits for the work, then frees them);
  // at once when kstage_destroy has returned.
  void settle() {
    if (payloads_.empty()) return;
    kstage_stage_t stage = stage_->live();
    if (stage != 0) {
      without_gil([&] { return kstage_wait(stage, id_, KSTAGE_TIMEOUT_INFINITE); });
    } else if (stage_->destroying) {
      for (auto& p : payloads_) stage_->parked.push_back(std::shared_ptr<Payload>(std::move(p)));
    }
    payloads_.clear();
  }

  StageRef stage_;
  kstage_op_t id_;
  std::vector<std::unique_ptr<Payload>> payloads_;
};

WriteSpec make_spec(nb::object data, nb::object index_map, nb::object mask, nb::object count,
                    nb::object semantic, nb::object row_counts, bool adopt, nb::object residency,
                    nb::object stream, std::string_view attribute_mode) {
  return WriteSpec{
      std::move(data),     std::move(index_map),       std::move(mask), std::move(count),
      std::move(semantic), std::move(row_counts),      adopt,           std::move(residency),
      std::move(stream),   std::string(attribute_mode)};
}

std::vector<kstage_token_t> attribute_list(const StageRef& stage, nb::handle attrs) {
  std::vector<kstage_token_t> tokens;
  if (attrs.is_none()) return tokens;
  if (PyUnicode_Check(attrs.ptr()) || PyLong_Check(attrs.ptr())) {
    tokens.push_back(attribute_token(stage, attrs));
  } else {
    for (nb::handle a : attrs) tokens.push_back(attribute_token(stage, a));
  }
  return tokens;
}

Op submit(const StageRef& stage, nb::handle query, const std::vector<nb::handle>& attrs,
          const std::vector<const WriteSpec*>& specs, uint64_t ordinal, std::string_view mode) {
  kstage_prim_mode_t prim_mode = mode_arg(mode);
  QueryArg q = query_arg(stage, query);
  std::vector<kstage_token_t> tokens;
  tokens.reserve(attrs.size());
  for (nb::handle a : attrs) tokens.push_back(attribute_token(stage, a));
  std::vector<std::unique_ptr<Payload>> payloads;
  std::vector<kstage_write_data_t> data(specs.size());
  try {
    for (size_t i = 0; i < specs.size(); ++i) {
      payloads.push_back(std::make_unique<Payload>());
      build_write(*specs[i], *payloads.back(), data[i]);
    }
  } catch (...) {
    for (auto& p : payloads) drop_managed(*p);
    throw;
  }
  kstage_op_t op = 0;
  kstage_status_t status;
  {
    ReleaseGil gil;  // copies run now; a rejected write deletes managed tensors (with the GIL)
    status = data.size() == 1 ? kstage_write_attribute(stage->id, q.id, tokens[0], ordinal,
                                                       &data[0], prim_mode, &op)
                              : kstage_write_attributes(stage->id, q.id, tokens.data(), data.data(),
                                                        data.size(), ordinal, prim_mode, &op);
  }
  for (auto& p : payloads) p->managed.clear();  // the stage's now, whatever the status
  check(status);
  return Op(stage, op, std::move(payloads));
}

}  // namespace

// One path: a str (interned) or a path id, as query's prefix= takes it.
kstage_path_t one_path(const StageRef& stage, nb::handle path, const char* what) {
  return PyUnicode_Check(path.ptr()) ? path_ids(stage, path)[0] : to_uint64(path, what);
}

void register_write(nb::module_& m, nb::handle stage_class) {
  nb::class_<Op>(
      m, "Op",
      "A submitted mutation (kstage_op_t). Host writes are done when the call returns; a "
      "write to a device column completes when its copies have run. Until then the op "
      "keeps the caller's arrays alive; collecting it waits for them.")
      .def("wait", &Op::wait, nb::arg("timeout") = nb::none(),
           "Waits for the op's work (timeout in seconds; None: as long as it takes). True when "
           "done, "
           "False when the timeout ran out; raises the op's error if it failed.")
      .def("sync", &Op::sync, nb::arg("stream") = nb::none(), nb::arg("event") = nb::none(),
           "Orders a consumer after the op's device work, on the device (kstage_op_sync): "
           "`stream` (None or -1: none; 1, 2 or a stream handle) waits for it, and `event` (an "
           "event handle) is recorded after it -- for a write, its copies out of the caller's "
           "arrays, which a device producer may then reuse without a host wait. A host op takes "
           "neither (InvalidArgument).")
      .def_prop_ro("done", &Op::done)
      .def_prop_ro("error", &Op::error, "The op's failure message (\"\" if it did not fail).")
      .def("release", &Op::release,
           "Releases the op (waits first if it still reads the caller's arrays).");

  nb::class_<WriteSpec>(
      m, "Write",
      "One attribute's data and options in Stage.write_batch: "
      "Write(data, index_map=..., mask=..., count=..., semantic=..., row_counts=..., "
      "adopt=..., residency=..., stream=..., attribute_mode=...), as Stage.write takes them.")
      .def(nb::new_(&make_spec), nb::arg("data"), nb::kw_only(), nb::arg("index_map") = nb::none(),
           nb::arg("mask") = nb::none(), nb::arg("count") = nb::none(),
           nb::arg("semantic") = nb::none(), nb::arg("row_counts") = nb::none(),
           nb::arg("adopt") = false, nb::arg("residency") = nb::none(),
           nb::arg("stream") = nb::none(), nb::arg("attribute_mode") = "reject");

  stage_class.attr("write") = nb::cpp_function(
      [](Stage& self, nb::handle attr, nb::handle query, nb::object data, uint64_t ordinal,
         nb::object index_map, nb::object mask, nb::object count, std::string_view mode,
         nb::object semantic, nb::object row_counts, bool adopt, nb::object residency,
         nb::object stream, std::string_view attribute_mode) {
        WriteSpec spec = make_spec(std::move(data), std::move(index_map), std::move(mask),
                                   std::move(count), std::move(semantic), std::move(row_counts),
                                   adopt, std::move(residency), std::move(stream), attribute_mode);
        return submit(self.ref(), query, {attr}, {&spec}, ordinal, mode);
      },
      nb::sig("def write(self, attr: str | int, query: Query | str | collections.abc.Sequence[str] "
              "| collections.abc.Sequence[int], data: typing.Any, ordinal: int, *, index_map: "
              "typing.Any | None = None, mask: typing.Any | None = None, count: int | None = None, "
              "mode: str = 'upsert', semantic: str | int | None = None, row_counts: typing.Any | "
              "None = None, adopt: bool = False, residency: typing.Any | None = None, stream: int "
              "| None = None, attribute_mode: str = 'reject') -> Op"),
      nb::is_method(), nb::scope(stage_class), nb::arg("attr"), nb::arg("query"), nb::arg("data"),
      nb::arg("ordinal"), nb::kw_only(), nb::arg("index_map") = nb::none(),
      nb::arg("mask") = nb::none(), nb::arg("count") = nb::none(), nb::arg("mode") = "upsert",
      nb::arg("semantic") = nb::none(), nb::arg("row_counts") = nb::none(),
      nb::arg("adopt") = false, nb::arg("residency") = nb::none(), nb::arg("stream") = nb::none(),
      nb::arg("attribute_mode") = "reject",
      "Writes `attr` of the query's prims (a Query, or paths) at `ordinal`; visible once "
      "sealed.\n\n"
      "data: any DLPack producer (numpy, torch, cupy, jax): (N,), (N, L) or (N, a, b) rows of a "
      "fixed-size attribute. A ragged (array) attribute takes a list of row tensors, or one packed "
      "tensor with row_counts=[...].\n"
      "index_map: source row of each prim written (gather, reorder, broadcast); count defaults to "
      "its length. mask: a bool array (or uint64 words with count=) choosing the prims written. "
      "count: the leading `count` prims (None: all). count=0, an empty index_map and an empty mask "
      "are refused (ValueError): 0 would mean every prim.\n"
      "mode: \"upsert\", \"insert\" or \"update\". semantic: \"point\", \"color\", ... (None: "
      "an existing column's). attribute_mode: \"reject\" (a prim holding `attr` with another "
      "dtype, kind or semantic is refused) or \"force\" (its schema is replaced at `ordinal`). "
      "adopt=True: hand the array over (no copy for a dense write, nor, mostly, for an index_map "
      "or mask write to a host column, which keeps it until its seal reads it; never written by "
      "the stage, and the caller must not write to it again). residency: where a new column lives. "
      "stream: "
      "the producer's CUDA/ROCm stream (None: the legacy default stream; -1: the data is ready, "
      "nothing to "
      "wait for).\n"
      "Returns a kstage.Op.");

  stage_class.attr("write_batch") = nb::cpp_function(
      [](Stage& self, nb::handle query, uint64_t ordinal, nb::dict writes, std::string_view mode) {
        // The keys are held (not borrowed from the dict): converting the query runs Python code,
        // which may change `writes`.
        std::vector<nb::object> keys;
        std::vector<nb::handle> attrs;
        std::vector<WriteSpec> owned;
        owned.reserve(writes.size());
        for (auto [attr, value] : writes) {
          keys.push_back(nb::borrow(attr));
          attrs.push_back(attr);
          if (nb::isinstance<WriteSpec>(value)) {
            owned.push_back(nb::cast<WriteSpec>(value));
          } else {
            owned.push_back(make_spec(nb::borrow(value), nb::none(), nb::none(), nb::none(),
                                      nb::none(), nb::none(), false, nb::none(), nb::none(),
                                      "reject"));
          }
        }
        if (owned.empty()) raise_invalid_argument("write_batch needs at least one attribute");
        std::vector<const WriteSpec*> specs;
        specs.reserve(owned.size());
        for (const WriteSpec& s : owned) specs.push_back(&s);
        return submit(self.ref(), query, attrs, specs, ordinal, mode);
      },
      nb::sig("def write_batch(self, query: Query | str | collections.abc.Sequence[str] | "
              "collections.abc.Sequence[int], ordinal: int, writes: collections.abc.Mapping[str | "
              "int, typing.Any], *, mode: str = 'upsert') -> Op"),
      nb::is_method(), nb::scope(stage_class), nb::arg("query"), nb::arg("ordinal"),
      nb::arg("writes"), nb::kw_only(), nb::arg("mode") = "upsert",
      "Writes several attributes of the query's prims as one op: all are accepted or none is. "
      "`writes` maps each attribute to its data, or to a kstage.Write with per-attribute options.");

  stage_class.attr("delete") = nb::cpp_function(
      [](Stage& self, nb::handle query, uint64_t ordinal, nb::handle attrs) {
        const StageRef& stage = self.ref();
        QueryArg q = query_arg(stage, query);
        std::vector<kstage_token_t> tokens = attribute_list(stage, attrs);
        if (!attrs.is_none() && tokens.empty())
          raise_invalid_argument(
              "delete(..., attrs=[]): name at least one attribute, or attrs=None to delete the "
              "prims");
        kstage_op_t op = 0;
        kstage_status_t status;
        {
          ReleaseGil gil;
          status =
              kstage_delete_attributes(stage->id, q.id, tokens.data(), tokens.size(), ordinal, &op);
        }
        check(status);
        return Op(stage, op, {});
      },
      nb::sig("def delete(self, query: Query | str | collections.abc.Sequence[str] | "
              "collections.abc.Sequence[int], ordinal: int, attrs: str | int | "
              "collections.abc.Sequence[str | int] | None = None) -> Op"),
      nb::is_method(), nb::scope(stage_class), nb::arg("query"), nb::arg("ordinal"),
      nb::arg("attrs") = nb::none(),
      "Deletes `attrs` (None: every attribute, so the prims themselves) from the query's prims at "
      "`ordinal`. Absent prims or attributes are ignored. Returns a kstage.Op.");

  // World transforms are a write too: of the world column, at the caller's ordinal.
  stage_class.attr("compute_world_transforms") = nb::cpp_function(
      [](Stage& self, uint64_t ordinal, std::string_view mode, nb::handle local, nb::handle reset,
         nb::handle world) {
        const StageRef& stage = self.ref();
        kstage_transform_desc_t d = kstage_transform_desc_init();
        if (mode == "incremental") d.mode = KSTAGE_TRANSFORM_INCREMENTAL;
        else if (mode == "full") d.mode = KSTAGE_TRANSFORM_FULL;
        else
          raise_invalid_argument("compute_world_transforms: mode '" + std::string(mode) +
                                 "' is neither 'incremental' nor 'full'");
        d.local = local.is_none() ? 0 : attribute_token(stage, local);
        d.reset = reset.is_none() ? 0 : attribute_token(stage, reset);
        d.world = world.is_none() ? 0 : attribute_token(stage, world);
        kstage_op_t op = 0;
        kstage_status_t status;
        {
          ReleaseGil gil;
          status = kstage_compute_world_transforms(stage->id, &d, ordinal, &op);
        }
        check(status);
        return Op(stage, op, {});
      },
      nb::sig("def compute_world_transforms(self, ordinal: int, *, mode: str = 'incremental', "
              "local: str | int | None = None, reset: str | int | None = None, world: str | int "
              "| None = None) -> Op"),
      nb::is_method(), nb::scope(stage_class), nb::arg("ordinal"), nb::kw_only(),
      nb::arg("mode") = "incremental", nb::arg("local") = nb::none(), nb::arg("reset") = nb::none(),
      nb::arg("world") = nb::none(),
      "Computes world matrices from local ones as one write of the world column at `ordinal`, "
      "which the caller seals (kstage_compute_world_transforms): world = local @ parent_world "
      "(USD's row-vector convention: 4x4 row-major, translation in row 3), the parent being the "
      "nearest ancestor that holds a local matrix; a true reset flag makes a prim a root. "
      "Columns default to 'omni:xform', 'omni:resetXformStack' and 'omni:fabric:worldMatrix'. "
      "mode='incremental' recomputes exactly what changed since the last compute and its "
      "descendants; 'full' everything. Returns a kstage.Op.");

  // A clone is a write too: create-only, of every attribute of a subtree, at the caller's
  // ordinal.
  stage_class.attr("clone") = nb::cpp_function(
      [](Stage& self, nb::handle source, nb::handle targets, uint64_t ordinal) {
        const StageRef& stage = self.ref();
        const kstage_path_t s = one_path(stage, source, "source");
        std::vector<kstage_path_t> ids = path_ids(stage, targets);
        kstage_op_t op = 0;
        kstage_status_t status;
        {
          ReleaseGil gil;
          status = kstage_clone(stage->id, s, ids.data(), ids.size(), ordinal, &op);
        }
        check(status);
        return Op(stage, op, {});
      },
      nb::sig("def clone(self, source: str | int, targets: str | collections.abc.Sequence[str] | "
              "collections.abc.Sequence[int], ordinal: int) -> Op"),
      nb::is_method(), nb::scope(stage_class), nb::arg("source"), nb::arg("targets"),
      nb::arg("ordinal"),
      "Clones the prim `source` and every existing prim below it (the sealed state) to each "
      "target T, as one op at `ordinal` that the caller seals (kstage_clone): the copy of "
      "source/x is T/x, with every attribute source/x holds (values, prim type, applied schemas). "
      "path_id values naming a path at or below `source` are rebased below the target; others "
      "are copied as they are. A path range below `source` is copied as a range below each "
      "target (same prefix, numbers and count). `source` is a path (str) or a path id; "
      "`targets` a path, a "
      "sequence of paths (str) or of path ids, or a one-dimensional integer array of ids "
      "(range(first + a, first + b) names range members by id; clone_range names them without "
      "a list). Create-only and all-or-nothing: every refusal is raised here and leaves the stage "
      "unchanged -- kstage.NotFound (no source), kstage.InvalidArgument (a target that is "
      "`source`, lies below it, is listed twice or below another target; no target), "
      "kstage.AlreadyExists (a path the copy would create exists at `ordinal`, or a path "
      "there has the name of a member of a range the copy needs), kstage.WriteFloorViolation. "
      "Returns a kstage.Op.");

  stage_class.attr("clone_range") = nb::cpp_function(
      [](Stage& self, nb::handle source, uint64_t first, uint64_t ordinal, uint64_t start,
         uint64_t count) {
        const StageRef& stage = self.ref();
        const kstage_path_t s = one_path(stage, source, "source");
        kstage_op_t op = 0;
        kstage_status_t status;
        {
          ReleaseGil gil;
          status = kstage_clone_range(stage->id, s, first, start, count, ordinal, &op);
        }
        check(status);
        return Op(stage, op, {});
      },
      nb::sig("def clone_range(self, source: str | int, first: int, ordinal: int, *, start: int = "
              "0, count: int = 0) -> Op"),
      nb::is_method(), nb::scope(stage_class), nb::arg("source"), nb::arg("first"),
      nb::arg("ordinal"), nb::kw_only(), nb::arg("start") = 0, nb::arg("count") = 0,
      "clone() to members start, start + 1, ... (count of them; 0: to the end) of the path range "
      "whose first id is `first` (intern_range's result; kstage_clone_range), as query_range "
      "names them: 1e6 targets without a list. kstage.InvalidArgument when `first` is no range's "
      "first id or start and count reach beyond the range; otherwise as clone. Returns a "
      "kstage.Op.");
}

}  // namespace kstage_py
