// SPDX-License-Identifier: Apache-2.0
// kstage.Stage and kstage.Query: the stage handle, the dictionary (tokens, paths, path
// ranges), queries, seals and write floors. Writes are in write.cpp, reads in read.cpp, maps in
// map.cpp.
#include "binding.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <charconv>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace kstage_py {
namespace {

// Every stage still open, so that an atexit hook can destroy them while Python still runs:
// their producers' deleters need the interpreter (dlpack_import.cpp). Touched with the GIL held.
std::unordered_set<StageHandle*>& open_stages() {
  static auto* stages = new std::unordered_set<StageHandle*>();  // never destroyed: used at exit
  return *stages;
}

// Attribute tokens by name, per stage id (interning is cheap, a dict lookup is cheaper).
struct TokenCache {
  std::unordered_map<std::string, kstage_token_t> tokens;
};
std::unordered_map<kstage_stage_t, TokenCache>& token_caches() {
  static auto* caches = new std::unordered_map<kstage_stage_t, TokenCache>();
  return *caches;
}

std::string_view utf8(nb::handle str) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(str.ptr(), &size);
  if (data == nullptr) throw nb::python_error();
  return {data, static_cast<size_t>(size)};
}

kstage_host_execution_t host_execution_arg(std::string_view name) {
  if (name == "default") return KSTAGE_HOST_EXECUTION_DEFAULT;
  if (name == "serial") return KSTAGE_HOST_EXECUTION_SERIAL;
  if (name == "parallel") return KSTAGE_HOST_EXECUTION_PARALLEL;
  raise_invalid_argument("host_execution must be \"default\", \"serial\" or \"parallel\", not \"" +
                         std::string(name) + "\"");
}

}  // namespace

// Path ids from a sequence of str (interned in one bulk call) or of ints / an integer array.
std::vector<kstage_path_t> path_ids(const StageRef& stage, nb::handle paths) {
  if (PyUnicode_Check(paths.ptr())) {
    kstage_path_t id = 0;
    std::string_view s = utf8(paths);
    check(kstage_intern_path(stage->id, s.data(), s.size(), &id));
    return {id};
  }
  if (PyBytes_Check(paths.ptr()) || PyByteArray_Check(paths.ptr())) {
    // A sequence of ints to Python, but never meant as path ids (b"/a" is not ids 47, 97).
    PyErr_Format(PyExc_TypeError, "paths are str (or path ids), not %s: decode it first",
                 Py_TYPE(paths.ptr())->tp_name);
    throw nb::python_error();
  }
  if (nb::hasattr(paths, "__array_interface__") && nb::hasattr(paths, "dtype")) {
    // An integer array of ids (numpy, ...): converted in one numpy call, not item by item.
    nb::object np = nb::module_::import_("numpy");
    nb::object a = np.attr("asarray")(paths);
    std::string kind = nb::cast<std::string>(a.attr("dtype").attr("kind"));
    if (kind != "u" && kind != "i")
      raise_invalid_argument(std::string("an array of path ids must hold integers, not ") +
                             text_of(nb::object(a.attr("dtype"))));
    if (nb::cast<int>(a.attr("ndim")) != 1)
      raise_invalid_argument("an array of path ids must be one-dimensional");
    if (kind == "i" && nb::cast<size_t>(a.attr("size")) > 0 &&
        nb::cast<int64_t>(a.attr("min")()) < 0)
      raise_invalid_argument("path ids are non-negative");
    nb::object u = np.attr("ascontiguousarray")(a, "uint64");
    auto arr =
        nb::cast<nb::ndarray<nb::ro, const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(
            u);
    return std::vector<kstage_path_t>(arr.data(), arr.data() + arr.shape(0));
  }
  // A tuple of our own: the strings' UTF-8 buffers are used with the GIL released, while
  // another thread could empty the caller's list and free them.
  nb::object seq = nb::steal(PySequence_Tuple(paths.ptr()));
  if (!seq.is_valid()) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "paths must be a str, a sequence of str, or a sequence of path ids, not %s",
                 Py_TYPE(paths.ptr())->tp_name);
    throw nb::python_error();
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
  std::vector<kstage_path_t> ids(static_cast<size_t>(n));
  if (n == 0) return ids;
  if (PyUnicode_Check(items[0])) {
    std::vector<const char*> strings(static_cast<size_t>(n));
    std::vector<size_t> lengths(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!PyUnicode_Check(items[i])) {
        PyErr_Format(PyExc_TypeError, "paths[%zd] is %s; a path list holds str (or only ids)", i,
                     Py_TYPE(items[i])->tp_name);
        throw nb::python_error();
      }
      std::string_view s = utf8(items[i]);
      strings[i] = s.data();
      lengths[i] = s.size();
    }
    check(without_gil([&] {
      return kstage_intern_paths(stage->id, strings.data(), lengths.data(),
                                 static_cast<uint64_t>(n), ids.data());
    }));
    return ids;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::object index = nb::steal(PyNumber_Index(items[i]));  // ints, numpy integers
    unsigned long long v = index.is_valid() ? PyLong_AsUnsignedLongLong(index.ptr())
                                            : static_cast<unsigned long long>(-1);
    if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "paths[%zd] must be a str or a non-negative path id, not %R", i,
                   items[i]);
      throw nb::python_error();
    }
    ids[i] = v;
  }
  return ids;
}

// A numpy array that owns `ids` (writable: it is the caller's copy).
nb::object path_array(std::vector<kstage_path_t> ids) {
  auto* heap = new std::vector<kstage_path_t>(std::move(ids));
  nb::capsule owner(heap,
                    [](void* p) noexcept { delete static_cast<std::vector<kstage_path_t>*>(p); });
  size_t shape[1] = {heap->size()};
  return nb::cast(
      nb::ndarray<nb::numpy, kstage_path_t, nb::ndim<1>>(heap->data(), 1, shape, owner));
}

std::string path_string(const StageRef& stage, kstage_path_t path) {
  const char* s = nullptr;
  size_t n = 0;
  check(kstage_path_string(stage->id, path, &s, &n));
  return std::string(s, n);
}

Stage::Stage(std::string_view host_execution, nb::handle residency)
    : handle_(std::make_shared<StageHandle>()) {
  kstage_config_t config = kstage_config_init();
  config.host_execution = host_execution_arg(host_execution);
  config.residency = device_arg(residency);
  kstage_stage_t id = 0;
  check(without_gil([&] { return kstage_create(&config, &id); }));
  handle_->id = id;
  open_stages().insert(handle_.get());
}

void Stage::close() { handle_->destroy(); }
bool Stage::closed() const { return handle_->id == 0; }
uint64_t Stage::id() const { return handle_->id; }

kstage_token_t Stage::token(nb::handle name) { return attribute_token(handle_, name); }
std::string Stage::token_name(kstage_token_t token) {
  const char* s = nullptr;
  size_t n = 0;
  check(kstage_token_string(handle_->id, token, &s, &n));
  return std::string(s, n);
}

nb::object Stage::intern(nb::handle paths) {
  if (PyUnicode_Check(paths.ptr())) return nb::int_(path_ids(handle_, paths)[0]);
  return path_array(path_ids(handle_, paths));
}
std::string Stage::path(kstage_path_t id) { return path_string(handle_, id); }

kstage_path_t Stage::intern_range(std::string_view parent, std::string_view prefix, uint64_t begin,
                                  uint64_t count) {
  kstage_path_t first = 0;
  check(without_gil([&] {
    return kstage_intern_path_range(handle_->id, parent.data(), parent.size(), prefix.data(),
                                    prefix.size(), begin, count, &first);
  }));
  return first;
}
std::tuple<kstage_path_t, uint64_t, uint64_t> Stage::range_info(kstage_path_t path) {
  kstage_path_t first = 0;
  uint64_t count = 0, index = 0;
  check(kstage_path_range_info(handle_->id, path, &first, &count, &index));
  return {first, count, index};
}
kstage_path_t Stage::range_member(kstage_path_t first, uint64_t index) {
  kstage_path_t path = 0;
  check(kstage_path_range_member(handle_->id, first, index, &path));
  return path;
}

std::tuple<std::string, std::string, uint64_t, uint64_t> Stage::range_definition(
    kstage_path_t first) {
  const char *parent = nullptr, *prefix = nullptr;
  size_t parent_length = 0, prefix_length = 0;
  uint64_t begin = 0, count = 0;
  check(kstage_path_range_definition(handle_->id, first, &parent, &parent_length, &prefix,
                                     &prefix_length, &begin));
  check(kstage_path_range_info(handle_->id, first, nullptr, &count, nullptr));
  return {std::string(parent, parent_length), std::string(prefix, prefix_length), begin, count};
}

std::unique_ptr<Query> Stage::query(nb::handle paths, nb::handle prefix, nb::handle has,
                                    nb::handle path_in) {
  kstage_query_t q = 0;
  if (!paths.is_none()) {
    if (!prefix.is_none() || !has.is_none() || !path_in.is_none())
      raise_invalid_argument("query(paths) or query(prefix=, has=, path_in=): not both");
    std::vector<kstage_path_t> ids = path_ids(handle_, paths);
    check(without_gil([&] { return kstage_query_paths(handle_->id, ids.data(), ids.size(), &q); }));
    return std::make_unique<Query>(handle_, q);
  }
  kstage_filter_t filter{};
  std::vector<kstage_token_t> tokens;
  if (!has.is_none()) {
    if (PyUnicode_Check(has.ptr())) {
      tokens.push_back(attribute_token(handle_, has));
    } else {
      for (nb::handle a : has) tokens.push_back(attribute_token(handle_, a));
    }
    filter.has_attributes = tokens.data();
    filter.has_attribute_count = tokens.size();
  }
  if (!prefix.is_none()) {
    filter.path_prefix =
        PyUnicode_Check(prefix.ptr()) ? path_ids(handle_, prefix)[0] : to_uint64(prefix, "prefix");
  }
  kstage_path_list_t list = 0;
  if (!path_in.is_none()) {
    std::vector<kstage_path_t> ids = path_ids(handle_, path_in);
    check(kstage_path_list_create(handle_->id, ids.data(), ids.size(), &list));
    filter.path_in = list;
  }
  kstage_status_t status;
  {
    ReleaseGil gil;
    status = kstage_query_filter(handle_->id, &filter, &q);
  }
  if (list != 0) {
    std::string message = status != KSTAGE_OK ? kstage_last_error() : "";
    kstage_path_list_release(handle_->id, list);
    if (status != KSTAGE_OK) raise_error(status, message);
  }
  check(status);
  return std::make_unique<Query>(handle_, q);
}

std::unique_ptr<Query> Stage::query_range(kstage_path_t first, uint64_t start, uint64_t count,
                                          uint64_t stride) {
  kstage_query_t q = 0;
  check(without_gil(
      [&] { return kstage_query_range(handle_->id, first, start, count, stride, &q); }));
  return std::make_unique<Query>(handle_, q);
}

void Stage::seal(uint64_t ordinal, nb::handle attributes) {
  std::vector<kstage_token_t> tokens;
  if (!attributes.is_none()) {
    if (PyUnicode_Check(attributes.ptr())) {
      tokens.push_back(attribute_token(handle_, attributes));
    } else {
      for (nb::handle a : attributes) tokens.push_back(attribute_token(handle_, a));
    }
    if (tokens.empty())
      raise_invalid_argument(
          "seal(ordinal, attrs=[]): name at least one attribute, or attrs=None for all");
  }
  check(without_gil([&] {
    return kstage_advance_write_floor(handle_->id, ordinal, tokens.data(), tokens.size());
  }));
}

uint64_t Stage::write_floor(nb::handle attribute) {
  kstage_token_t token = attribute.is_none() ? 0 : attribute_token(handle_, attribute);
  uint64_t ordinal = 0;
  check(without_gil([&] { return kstage_get_write_floor(handle_->id, token, &ordinal); }));
  return ordinal;
}

// A kstage_attribute_info_t as a dict (the names of its fields).
nb::dict Stage::info_dict(kstage_token_t token, const kstage_attribute_info_t& info) {
  nb::dict d;
  d["name"] = token_name(token);
  d["attribute"] = token;
  d["is_array"] = info.is_array;
  d["dtype"] = numpy_dtype(DLDataType{info.dtype.code, info.dtype.bits, 1});
  d["lanes"] = info.dtype.lanes;
  d["semantic"] = semantic_name(info.semantic);
  d["residency"] = nb::make_tuple(int(info.residency.device_type), int(info.residency.device_id));
  d["write_floor"] = info.write_floor;
  d["prim_count"] = info.prim_count;
  d["schema_count"] = info.schema_count;
  return d;
}

// kstage_attribute_info as a dict.
nb::dict Stage::attribute_info(nb::handle attribute) {
  const kstage_token_t token = attribute_token(handle_, attribute);
  kstage_attribute_info_t info = kstage_attribute_info_init();
  check(kstage_attribute_info(handle_->id, token, &info));
  return info_dict(token, info);
}

// kstage_attribute_schema for each of the attribute's schemas.
nb::list Stage::attribute_schemas(nb::handle attribute) {
  const kstage_token_t token = attribute_token(handle_, attribute);
  kstage_attribute_info_t info = kstage_attribute_info_init();
  check(kstage_attribute_info(handle_->id, token, &info));
  nb::list out;
  for (uint64_t i = 0; i < info.schema_count; ++i) {
    kstage_attribute_info_t one = kstage_attribute_info_init();
    check(kstage_attribute_schema(handle_->id, token, i, &one));
    out.append(info_dict(token, one));
  }
  return out;
}

nb::list Stage::attributes() {
  std::vector<kstage_token_t> tokens;
  uint64_t n = 0;
  for (;;) {  // another thread may make columns between the two calls
    check(kstage_list_attributes(handle_->id, tokens.data(), tokens.size(), &n));
    if (n <= tokens.size()) break;
    tokens.resize(n);
  }
  tokens.resize(n);
  nb::list out;
  for (kstage_token_t t : tokens) out.append(attribute_info(nb::int_(t)));
  return out;
}

StageHandle::~StageHandle() { destroy(); }

void StageHandle::destroy() noexcept {
  if (id == 0) return;
  closing = id;
  id = 0;
  open_stages().erase(this);
  token_caches().erase(closing);
  if (pinned == 0) run_destroy();  // else the last view's unpin does
}

void StageHandle::unpin() noexcept {
  if (--pinned == 0 && closing != 0 && !destroying) run_destroy();
}

void StageHandle::run_destroy() noexcept {
  destroying = true;
  {
    ReleaseGil gil;  // destroy waits for work in flight and runs producers' deleters
    kstage_destroy(closing);
  }
  destroying = false;
  closing = 0;
  parked.clear();  // the work that read them is done
}

void Query::release() noexcept {
  if (id == 0) return;
  kstage_query_t q = id;
  id = 0;
  if (stage->id != 0) kstage_query_release(stage->id, q);
}

QueryArg query_arg(const StageRef& stage, nb::handle query) {
  QueryArg arg;
  if (nb::isinstance<Query>(query)) {
    Query& q = nb::cast<Query&>(query);
    if (q.stage.get() != stage.get()) raise_invalid_argument("the query belongs to another stage");
    if (q.id == 0) raise_error(KSTAGE_INVALID_HANDLE, "the query was released");
    arg.id = q.id;
    return arg;
  }
  std::vector<kstage_path_t> ids = path_ids(stage, query);
  kstage_query_t q = 0;
  check(without_gil([&] { return kstage_query_paths(stage->id, ids.data(), ids.size(), &q); }));
  arg.owned = std::make_unique<Query>(stage, q);
  arg.id = q;
  return arg;
}

kstage_token_t attribute_token(const StageRef& stage, nb::handle attribute) {
  if (PyUnicode_Check(attribute.ptr())) {
    std::string_view name = utf8(attribute);
    TokenCache& cache = token_caches()[stage->id];
    auto it = cache.tokens.find(std::string(name));
    if (it != cache.tokens.end()) return it->second;
    kstage_token_t token = 0;
    check(kstage_intern_token(stage->id, name.data(), name.size(), &token));
    cache.tokens.emplace(std::string(name), token);
    return token;
  }
  if (PyLong_Check(attribute.ptr())) return to_uint64(attribute, "an attribute token");
  PyErr_Format(PyExc_TypeError, "an attribute is a str (its name) or an int (its token), not %s",
               Py_TYPE(attribute.ptr())->tp_name);
  throw nb::python_error();
}

DLDevice device_arg(nb::handle device) {
  DLDevice d{static_cast<DLDeviceType>(0), 0};
  if (device.is_none()) return d;
  if (PyUnicode_Check(device.ptr())) {
    std::string_view s = utf8(device);
    std::string_view type = s.substr(0, s.find(':'));
    int32_t ordinal = 0;
    if (type.size() < s.size()) {
      std::string_view digits = s.substr(type.size() + 1);
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
      if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty() ||
          ordinal < 0)
        raise_invalid_argument("device \"" + std::string(s) +
                               "\": the ordinal after ':' must be a non-negative integer");
    }
    static const std::pair<std::string_view, DLDeviceType> names[] = {
        {"cpu", kDLCPU},
        {"cuda", kDLCUDA},
        {"cuda_host", kDLCUDAHost},
        {"cuda_managed", kDLCUDAManaged},
        {"rocm", kDLROCM},
        {"hip", kDLROCM},
        {"rocm_host", kDLROCMHost},
        {"ext_dev", kDLExtDev}};
    for (const auto& [name, t] : names) {
      if (type == name) return DLDevice{t, ordinal};
    }
    raise_invalid_argument(
        "unknown device \"" + std::string(s) +
        "\" (cpu, cuda[:N], cuda_host, cuda_managed[:N], rocm[:N], rocm_host, ext_dev[:N])");
  }
  nb::object pair = nb::borrow(device);
  if (nb::hasattr(device, "__dlpack_device__")) pair = device.attr("__dlpack_device__")();
  try {
    auto [type, ordinal] = nb::cast<std::tuple<int, int>>(pair);
    return DLDevice{static_cast<DLDeviceType>(type), ordinal};
  } catch (const nb::cast_error&) {
    PyErr_Format(PyExc_TypeError,
                 "a device is None, a str (\"cpu\", \"cuda:0\"), a (device_type, device_id) pair "
                 "or an object "
                 "with __dlpack_device__, not %R",
                 device.ptr());
    throw nb::python_error();
  }
}

uint64_t to_uint64(nb::handle obj, const char* what) {
  nb::object index = nb::steal(PyNumber_Index(obj.ptr()));
  if (!index.is_valid()) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be an integer, not %s", what,
                 Py_TYPE(obj.ptr())->tp_name);
    throw nb::python_error();
  }
  unsigned long long v = PyLong_AsUnsignedLongLong(index.ptr());
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    raise_invalid_argument(std::string(what) + " must be a non-negative integer below 2^64, not " +
                           text_of(obj));
  }
  return v;
}

std::tuple<uint64_t, uint64_t> uint_pair(nb::handle obj, const char* what) {
  nb::object seq = nb::steal(PySequence_Fast(obj.ptr(), ""));
  if (!seq.is_valid() || PySequence_Fast_GET_SIZE(seq.ptr()) != 2) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be a pair (begin, end) of non-negative integers, not %R",
                 what, obj.ptr());
    throw nb::python_error();
  }
  uint64_t v[2];
  for (int i = 0; i < 2; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq.ptr(), i);
    nb::object index = nb::steal(PyNumber_Index(item));
    unsigned long long x = index.is_valid() ? PyLong_AsUnsignedLongLong(index.ptr())
                                            : static_cast<unsigned long long>(-1);
    if (x == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "%s must be a pair (begin, end) of non-negative integers, not %R", what,
                   obj.ptr());
      throw nb::python_error();
    }
    v[i] = x;
  }
  return {v[0], v[1]};
}

std::string device_string(DLDevice device) {
  const char* name = "device type ";
  switch (device.device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: name = "cuda"; break;
    case kDLCUDAHost: return "cuda_host";
    case kDLCUDAManaged: name = "cuda_managed"; break;
    case kDLROCM: name = "rocm"; break;
    case kDLROCMHost: return "rocm_host";
    case kDLExtDev: name = "ext_dev"; break;
    default:
      return std::string(name) + std::to_string(static_cast<int>(device.device_type)) + ":" +
             std::to_string(device.device_id);
  }
  return std::string(name) + ":" + std::to_string(device.device_id);
}

void register_stage(nb::module_& m) {
  nb::class_<Query>(m, "Query",
                    "A fixed, ordered list of prims (kstage_query_t). Make one with Stage.query or "
                    "Stage.query_range; it is released when collected, or by release().")
      .def("__len__",
           [](const Query& q) {
             uint64_t n = 0;
             check(kstage_query_count(q.stage->id, q.id, &n));
             return n;
           })
      .def_prop_ro(
          "paths",
          [](const Query& q) {
            kstage_path_list_t list = 0;
            check(kstage_query_get_paths(q.stage->id, q.id, &list));
            const kstage_path_t* ids = nullptr;
            uint64_t n = 0;
            kstage_status_t status = kstage_path_list_get(q.stage->id, list, &ids, &n);
            std::vector<kstage_path_t> copy;
            std::string message =
                status == KSTAGE_OK ? "" : kstage_last_error();  // before the next call
            if (status == KSTAGE_OK) copy.assign(ids, ids + n);
            kstage_path_list_release(q.stage->id, list);
            if (status != KSTAGE_OK) raise_error(status, message);
            return path_array(std::move(copy));
          },
          "The prims' path ids, in query order (a new uint64 numpy array).")
      .def_prop_ro(
          "handle", [](const Query& q) { return q.id; },
          "The C handle (kstage_query_t), for code that mixes in the C API.")
      .def("release", &Query::release, "Releases the query now (idempotent).")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__", [](Query& q, nb::args) { q.release(); }, "Releases the query.")
      .def_prop_ro("released", [](const Query& q) { return q.id == 0; });

  nb::class_<Stage>(m, "Stage",
                    "A columnar attribute store (kstage_stage_t): prims named by paths, attributes "
                    "written at ordinals, sealed, and read as DLPack tensors.")
      .def(nb::init<std::string_view, nb::handle>(),
           nb::sig("def __init__(self, *, host_execution: str = 'default', residency: typing.Any | "
                   "None = None) -> None"),
           nb::kw_only(), nb::arg("host_execution") = "default", nb::arg("residency") = nb::none(),
           "host_execution: \"default\", \"serial\" or \"parallel\" (kernels on host columns).\n"
           "residency: where new columns live unless a write or a map names one: None (where "
           "the first write's data lives), \"cpu\", \"cuda:0\", (device_type, device_id), ...")
      .def("close", &Stage::close,
           "Destroys the stage now: everything made from it becomes stale (InvalidHandle). "
           "Data exported through DLPack stays valid. Idempotent.")
      .def_prop_ro("closed", &Stage::closed)
      .def_prop_ro("handle", &Stage::id,
                   "The C handle (kstage_stage_t), for code that mixes in the C API.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__", [](Stage& s, nb::args) { s.close(); }, "Closes the stage.")
      .def("token", &Stage::token, nb::arg("name"), "The token of an attribute name (interned).")
      .def("token_name", &Stage::token_name, nb::arg("token"), "The name of an attribute token.")
      .def("intern", &Stage::intern,
           nb::sig("def intern(self, paths: str | collections.abc.Sequence[str]) -> int | "
                   "numpy.ndarray"),
           nb::arg("paths"),
           "Interns a path (returns its id) or a sequence of paths in one call (returns a uint64 "
           "numpy array of ids; all or nothing).")
      .def("path", &Stage::path, nb::arg("id"),
           "The string of a path id (made on demand for range members).")
      .def("intern_range", &Stage::intern_range, nb::arg("parent"), nb::arg("prefix"),
           nb::arg("begin"), nb::arg("count"),
           "Interns the path range \"<parent>/<prefix><n>\" for n in [begin, begin + count) in "
           "O(1); "
           "returns the first id (the others follow it).")
      .def("range_info", &Stage::range_info, nb::arg("path"),
           "(first, count, index) of the range `path` belongs to; NotFound if none.")
      .def("range_member", &Stage::range_member, nb::arg("first"), nb::arg("index"),
           "The path id of member `index` of the range whose first id is `first`.")
      .def("range_definition", &Stage::range_definition, nb::arg("first"),
           "(parent, prefix, begin, count): how the range whose first id is `first` was made "
           "(kstage_path_range_definition), so that intern_range(*it) makes it again elsewhere.")
      .def("query", &Stage::query,
           nb::sig("def query(self, paths: str | collections.abc.Sequence[str] | "
                   "collections.abc.Sequence[int] | None = None, *, prefix: str | int | None = "
                   "None, has: str | int | collections.abc.Sequence[str | int] | None = None, "
                   "path_in: collections.abc.Sequence[str] | collections.abc.Sequence[int] | None "
                   "= None) -> Query"),
           nb::arg("paths") = nb::none(), nb::kw_only(), nb::arg("prefix") = nb::none(),
           nb::arg("has") = nb::none(), nb::arg("path_in") = nb::none(),
           "query(paths): the prims of these paths (str or ids), in this order; they need not "
           "exist yet.\nquery(prefix=, has=, path_in=): the existing prims (sealed state) at or "
           "below `prefix`, holding every attribute in `has`, whose path is in `path_in`, in "
           "path-id order.")
      .def("query_range", &Stage::query_range, nb::arg("first"), nb::arg("start") = 0,
           nb::arg("count") = 0, nb::arg("stride") = 1,
           "Members start, start + stride, ... of the range whose first id is `first` (count 0: "
           "to the end of the range).")
      .def("seal", &Stage::seal, nb::arg("ordinal"), nb::arg("attrs") = nb::none(),
           "Advances the write floor of `attrs` (None: every attribute) to `ordinal`, applying "
           "their pending writes; never moves a floor backwards.")
      .def(
          "device_check",
          [](Stage& self, nb::handle device) {
            const DLDevice d = device_arg(device);
            check(without_gil([&] { return kstage_device_check(self.ref()->id, d); }));
          },
          nb::arg("device"),
          "Waits for the stage's work on `device` (\"cuda:0\", (type, id), ...) and raises "
          "DeviceError for a fault of that device (kstage_device_check): after handing the "
          "stage's device memory to a library that does not check its own device calls.")
      .def("write_floor", &Stage::write_floor, nb::arg("attr") = nb::none(),
           "The write floor of `attr`, or the global floor (the minimum) for None.")
      .def("attributes", &Stage::attributes,
           nb::sig("def attributes(self) -> list[dict[str, typing.Any]]"),
           "Every attribute with a column, in token order, as attribute_info() describes it "
           "(kstage_list_attributes). stage.query() is then every existing prim, "
           "stage.query(has=name) the prims holding one.")
      .def("attribute_schemas", &Stage::attribute_schemas, nb::arg("attr"),
           nb::sig("def attribute_schemas(self, attr: str | int) -> list[dict[str, typing.Any]]"),
           "Each of the attribute's schemas, oldest first (kstage_attribute_schema): a dict as "
           "attribute_info's, prim_count that schema's own. A name holds several schemas when "
           "prims hold it with different dtypes, kinds or semantics.")
      .def("attribute_info", &Stage::attribute_info, nb::arg("attr"),
           nb::sig("def attribute_info(self, attr: str | int) -> dict[str, typing.Any]"),
           "An attribute's column (kstage_attribute_info): name, attribute (its token), "
           "is_array, dtype (numpy, without lanes), lanes, semantic, residency "
           "((device_type, device_id)), write_floor and prim_count (the prims holding it, "
           "sealed). kstage.NotFound (a KeyError) when it has no column.");

  nb::module_::import_("atexit").attr("register")(nb::cpp_function([] {
    // Destroy what is still open while Python runs: producers' deleters need it.
    std::vector<StageHandle*> stages(open_stages().begin(), open_stages().end());
    for (StageHandle* s : stages) s->destroy();
  }));
}

}  // namespace kstage_py
