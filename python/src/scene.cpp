// SPDX-License-Identifier: Apache-2.0
// The scene's hierarchy and relational filters: kstage.Hierarchy (a kstage_query_hierarchy
// answer), Stage.hierarchy and Stage.query_where (kstage_query_filter_ex). World transforms
// are a write, in write.cpp.
//
// A Hierarchy's C handle is held by a pin shared by the object and every numpy view of its
// arrays (statuses, spans, ...), as a read group's is (read.cpp): release() (or leaving a
// `with`) ends the answer for the caller at once, and the handle goes when the last view of its
// memory does -- a view never outlives the data it shows.
#include "binding.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kstage_py {
namespace {

// The numpy views below read the C structs in place.
static_assert(sizeof(kstage_path_span_t) == 2 * sizeof(uint64_t), "spans are (first, count)");
static_assert(sizeof(kstage_hierarchy_item_t) == 4 * sizeof(uint64_t), "items are 32 bytes");
static_assert(offsetof(kstage_hierarchy_item_t, status) == 0, "status first");
static_assert(offsetof(kstage_hierarchy_item_t, path_count) == 3 * sizeof(uint64_t),
              "path_count last");

// A valid address for views of no element (a NULL data pointer is not one).
alignas(32) const uint64_t kNowhere[4] = {0, 0, 0, 0};

struct HierarchyPin {
  StageRef stage;
  kstage_hierarchy_t handle = 0;
  const kstage_hierarchy_item_t* items = nullptr;
  const kstage_path_span_t* spans = nullptr;
  uint64_t item_count = 0, span_count = 0;
  bool viewed = false;  // numpy views were made (StageHandle::pinned)

  HierarchyPin() = default;
  HierarchyPin(const HierarchyPin&) = delete;
  HierarchyPin& operator=(const HierarchyPin&) = delete;
  ~HierarchyPin() {
    if (handle != 0) {
      if (kstage_stage_t s = stage->live(); s != 0) kstage_hierarchy_release(s, handle);
    }
    if (viewed) stage->unpin();
  }
};

// The owner of numpy views of `pin`'s memory: it keeps the pin, and so the C answer and the
// stage's memory, alive.
nb::capsule view_owner(const std::shared_ptr<HierarchyPin>& pin) {
  if (!pin->viewed) {
    pin->viewed = true;
    pin->stage->pin();
  }
  return nb::capsule(new std::shared_ptr<HierarchyPin>(pin), [](void* p) noexcept {
    delete static_cast<std::shared_ptr<HierarchyPin>*>(p);
  });
}

const char* relation_name(kstage_relation_t r) {
  switch (r) {
    case KSTAGE_RELATION_PARENT: return "parent";
    case KSTAGE_RELATION_CHILDREN: return "children";
    default: return "siblings";
  }
}

kstage_relation_t relation_arg(std::string_view relation) {
  if (relation == "parent") return KSTAGE_RELATION_PARENT;
  if (relation == "children") return KSTAGE_RELATION_CHILDREN;
  if (relation == "siblings") return KSTAGE_RELATION_SIBLINGS;
  raise_invalid_argument(
      "hierarchy: relation must be \"parent\", \"children\" or \"siblings\", not \"" +
      std::string(relation) + "\"");
}

class Hierarchy {
 public:
  Hierarchy(std::shared_ptr<HierarchyPin> pin, kstage_relation_t relation)
      : pin_(std::move(pin)), relation_(relation) {}

  // The pin while the answer is usable, else InvalidHandle.
  const std::shared_ptr<HierarchyPin>& live() const {
    if (!pin_) raise_error(KSTAGE_INVALID_HANDLE, "the hierarchy was released");
    if (pin_->stage->id == 0)
      raise_error(KSTAGE_INVALID_HANDLE, "the hierarchy's stage was closed");
    return pin_;
  }
  // Item `i` (negative: from the end), or IndexError.
  const kstage_hierarchy_item_t& item(int64_t i) const {
    const HierarchyPin& p = *live();
    const int64_t n = static_cast<int64_t>(p.item_count);
    const int64_t k = i < 0 ? i + n : i;
    if (k < 0 || k >= n) {
      PyErr_Format(PyExc_IndexError, "item %lld is out of range: the hierarchy has %lld items",
                   static_cast<long long>(i), static_cast<long long>(n));
      throw nb::python_error();
    }
    return p.items[k];
  }

  uint64_t size() const { return live()->item_count; }
  bool released() const { return !pin_; }
  kstage_hierarchy_t handle() const { return pin_ ? pin_->handle : 0; }
  const char* relation() const { return relation_name(relation_); }
  void release() noexcept { pin_.reset(); }  // the C handle goes with the last view

  int status(int64_t i) const { return item(i).status; }

  // A field of every item (`field` bytes into each), as a read-only strided view.
  template <class T>
  nb::object item_field(size_t offset) const {
    const std::shared_ptr<HierarchyPin>& p = live();
    size_t shape[1] = {static_cast<size_t>(p->item_count)};
    int64_t strides[1] = {static_cast<int64_t>(sizeof(kstage_hierarchy_item_t) / sizeof(T))};
    const void* base =
        p->item_count > 0
            ? static_cast<const void*>(reinterpret_cast<const char*>(p->items) + offset)
            : static_cast<const void*>(kNowhere);
    return nb::cast(nb::ndarray<nb::numpy, const T, nb::ndim<1>>(static_cast<const T*>(base), 1,
                                                                 shape, view_owner(p), strides));
  }
  nb::object statuses() const {
    return item_field<int32_t>(offsetof(kstage_hierarchy_item_t, status));
  }
  nb::object path_counts() const {
    return item_field<uint64_t>(offsetof(kstage_hierarchy_item_t, path_count));
  }

  // Spans [first, first + count) of the spans array as an (count, 2) read-only view.
  nb::object span_view(uint64_t first, uint64_t count) const {
    const std::shared_ptr<HierarchyPin>& p = live();
    size_t shape[2] = {static_cast<size_t>(count), 2};
    const uint64_t* data =
        count > 0 ? reinterpret_cast<const uint64_t*>(p->spans + first) : kNowhere;
    return nb::cast(
        nb::ndarray<nb::numpy, const uint64_t, nb::ndim<2>>(data, 2, shape, view_owner(p)));
  }
  nb::object spans() const { return span_view(0, live()->span_count); }
  nb::object spans_of(int64_t i) const {
    const kstage_hierarchy_item_t& it = item(i);
    return span_view(it.span_offset, it.span_count);
  }

  nb::object span_offsets() {
    const std::shared_ptr<HierarchyPin>& p = live();
    if (!offsets_.is_valid()) {
      std::vector<uint64_t> offsets(static_cast<size_t>(p->item_count) + 1);
      for (uint64_t i = 0; i < p->item_count; ++i) offsets[i] = p->items[i].span_offset;
      offsets[p->item_count] = p->span_count;
      offsets_ = path_array(std::move(offsets));
      offsets_.attr("flags").attr("writeable") = false;  // shared between calls
    }
    return offsets_;
  }

  std::vector<kstage_path_t> ids(int64_t i) const {
    const kstage_hierarchy_item_t& it = item(i);
    const kstage_path_span_t* spans = pin_->spans + it.span_offset;
    std::vector<kstage_path_t> out;
    out.reserve(static_cast<size_t>(it.path_count));
    for (uint64_t k = 0; k < it.span_count; ++k)
      for (uint64_t j = 0; j < spans[k].count; ++j) out.push_back(spans[k].first + j);
    return out;
  }
  nb::object paths(int64_t i) const { return path_array(ids(i)); }
  nb::list path_strings(int64_t i) const {
    nb::list out;
    for (kstage_path_t id : ids(i)) out.append(nb::str(path_string(pin_->stage, id).c_str()));
    return out;
  }

  std::string repr() const {
    if (!pin_) return "<kstage.Hierarchy (released)>";
    return "<kstage.Hierarchy " + std::string(relation()) + ": " +
           std::to_string(pin_->item_count) + " items, " + std::to_string(pin_->span_count) +
           " spans>";
  }

 private:
  std::shared_ptr<HierarchyPin> pin_;
  kstage_relation_t relation_;
  nb::object offsets_;  // span_offsets, made once
};

// ---- filters -----------------------------------------------------------------------------------

kstage_filter_op_t op_arg(nb::handle op, size_t index) {
  static const std::pair<std::string_view, kstage_filter_op_t> names[] = {
      {"has", KSTAGE_FILTER_HAS},
      {"in", KSTAGE_FILTER_IN},
      {"contains", KSTAGE_FILTER_CONTAINS},
      {"prefix", KSTAGE_FILTER_PREFIX},
      {"lt", KSTAGE_FILTER_LT},
      {"le", KSTAGE_FILTER_LE},
      {"gt", KSTAGE_FILTER_GT},
      {"ge", KSTAGE_FILTER_GE}};
  if (PyUnicode_Check(op.ptr())) {
    const std::string name = nb::cast<std::string>(op);
    for (const auto& [n, code] : names) {
      if (name == n) return code;
    }
  }
  raise_invalid_argument("predicates[" + std::to_string(index) + "]: the operator " +
                         text_of(nb::repr(op)) +
                         " is none of 'has', 'in', 'contains', 'prefix', 'lt', 'le', 'gt', 'ge'");
}

bool is_integer_array(nb::handle values) {
  if (!nb::hasattr(values, "__array_interface__") || !nb::hasattr(values, "dtype")) return false;
  const std::string kind = nb::cast<std::string>(values.attr("dtype").attr("kind"));
  return kind == "u" || kind == "i";
}

// Token ids of `values`: a str (a name, interned), an int, or a sequence (or integer array) of
// them. Values of ordinary attributes take this form too.
std::vector<uint64_t> token_ids(const StageRef& stage, nb::handle values) {
  if (PyUnicode_Check(values.ptr())) return {attribute_token(stage, values)};
  if (PyIndex_Check(values.ptr()) && !PySequence_Check(values.ptr()))
    return {to_uint64(values, "a token id")};
  if (is_integer_array(values)) return path_ids(stage, values);  // the ids as they are
  nb::object seq = nb::steal(PySequence_Tuple(values.ptr()));
  if (!seq.is_valid()) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "token values are a str, an int, or a sequence of them, not %s",
                 Py_TYPE(values.ptr())->tp_name);
    throw nb::python_error();
  }
  std::vector<uint64_t> out;
  for (nb::handle v : seq) {
    out.push_back(PyUnicode_Check(v.ptr()) ? attribute_token(stage, v)
                                           : to_uint64(v, "a token id"));
  }
  return out;
}

// Path ids of `values`: a path (str or id), or a sequence (or integer array) of them.
std::vector<uint64_t> path_values(const StageRef& stage, nb::handle values) {
  if (PyIndex_Check(values.ptr()) && !PySequence_Check(values.ptr()))
    return {to_uint64(values, "a path id")};
  return path_ids(stage, values);
}

std::unique_ptr<Query> query_where(Stage& self, nb::handle predicates) {
  const StageRef& stage = self.ref();
  if (PyUnicode_Check(predicates.ptr()))
    raise_invalid_argument(
        "query_where takes a list of predicates (op, attribute[, values]), not a str");
  nb::object seq = nb::steal(PySequence_Tuple(predicates.ptr()));
  if (!seq.is_valid()) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "predicates must be a sequence of (op, attribute[, values]) tuples, not %s",
                 Py_TYPE(predicates.ptr())->tp_name);
    throw nb::python_error();
  }
  // The tokens of the reserved names, to read each predicate's values as paths or tokens.
  const kstage_token_t path = attribute_token(stage, nb::str(KSTAGE_PATH_ATTRIBUTE));
  const kstage_token_t parent = attribute_token(stage, nb::str(KSTAGE_PARENT_ATTRIBUTE));
  const kstage_token_t children = attribute_token(stage, nb::str(KSTAGE_CHILDREN_ATTRIBUTE));

  const size_t n = static_cast<size_t>(PySequence_Fast_GET_SIZE(seq.ptr()));
  std::vector<kstage_predicate_t> preds(n);
  std::vector<std::vector<uint64_t>> values(n);
  for (size_t i = 0; i < n; ++i) {
    nb::handle p = PySequence_Fast_GET_ITEM(seq.ptr(), static_cast<Py_ssize_t>(i));
    nb::object parts =
        PyUnicode_Check(p.ptr()) ? nb::object() : nb::steal(PySequence_Tuple(p.ptr()));
    const Py_ssize_t size = parts.is_valid() ? PySequence_Fast_GET_SIZE(parts.ptr()) : -1;
    if (size != 2 && size != 3) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "predicates[%zu] must be a tuple (op, attribute) or (op, attribute, values), "
                   "not %R",
                   i, p.ptr());
      throw nb::python_error();
    }
    nb::handle op = PySequence_Fast_GET_ITEM(parts.ptr(), 0);
    nb::handle attribute = PySequence_Fast_GET_ITEM(parts.ptr(), 1);
    nb::handle v = size == 3 ? nb::handle(PySequence_Fast_GET_ITEM(parts.ptr(), 2)) : nb::none();
    kstage_predicate_t& c = preds[i];
    c.op = op_arg(op, i);
    c.attribute = attribute_token(stage, attribute);
    // Comparisons are reserved (NOT_SUPPORTED, whatever the values): no values are read.
    if (!v.is_none() && c.op < KSTAGE_FILTER_LT) {
      const bool paths = c.attribute == path || c.attribute == parent || c.attribute == children;
      values[i] = paths ? path_values(stage, v) : token_ids(stage, v);
    }
    c.values = values[i].empty() ? nullptr : values[i].data();
    c.value_count = values[i].size();
  }
  kstage_filter_ex_t filter = kstage_filter_ex_init();
  filter.predicates = preds.empty() ? nullptr : preds.data();
  filter.predicate_count = preds.size();
  kstage_query_t q = 0;
  check(without_gil([&] { return kstage_query_filter_ex(stage->id, &filter, &q); }));
  return std::make_unique<Query>(stage, q);
}

}  // namespace

void register_scene(nb::module_& m, nb::handle stage_class) {
  nb::class_<Hierarchy>(
      m, "Hierarchy",
      "The parent, children or siblings of every prim of a query (kstage_query_hierarchy), "
      "from Stage.hierarchy(query, relation), over the latest sealed state.\n\n"
      "One item per query prim, in query order: len(h) items, each with its own status "
      "(h.statuses, int32: 0 for OK, kstage.NotFound.status for a prim that does not exist, "
      "whose item has no paths; the other items are answered). An item's paths are spans "
      "(first, count) of consecutive path ids, in path-id order -- the members of a path "
      "range are one span, never an id each -- stored one item after another (CSR):\n\n"
      "    h.spans          (S, 2) uint64 view: column 0 the first id, column 1 the count\n"
      "    h.span_offsets   uint64, len(h) + 1: item i's spans are "
      "spans[span_offsets[i]:span_offsets[i + 1]]\n"
      "    h.spans_of(i)    that slice; h.path_counts the paths of each item\n"
      "    h.paths(i)       item i's path ids, one each (a new uint64 array)\n"
      "    h.path_strings(i) their strings\n\n"
      "The views are read-only and over kstage's memory, which they keep alive. A context "
      "manager: release() (or leaving a `with`, or collection) releases the answer; views "
      "already made stay valid.")
      .def("__len__", &Hierarchy::size, "The items: one per prim of the query.")
      .def("status", &Hierarchy::status, nb::arg("i"),
           "The status of item i (0: OK; kstage.NotFound.status: the prim does not exist).")
      .def_prop_ro("statuses", &Hierarchy::statuses,
                   nb::for_getter(nb::sig("def statuses(self) -> numpy.ndarray")),
                   "Every item's status, an int32 read-only view (0: OK).")
      .def_prop_ro("path_counts", &Hierarchy::path_counts,
                   nb::for_getter(nb::sig("def path_counts(self) -> numpy.ndarray")),
                   "Every item's number of paths (the sum of its spans' counts), a uint64 "
                   "read-only view.")
      .def_prop_ro("spans", &Hierarchy::spans,
                   nb::for_getter(nb::sig("def spans(self) -> numpy.ndarray")),
                   "Every item's spans, one item after another: an (S, 2) uint64 read-only view, "
                   "rows (first, count).")
      .def_prop_ro("span_offsets", &Hierarchy::span_offsets,
                   nb::for_getter(nb::sig("def span_offsets(self) -> numpy.ndarray")),
                   "uint64, len(self) + 1 entries (read-only): item i's spans are "
                   "spans[span_offsets[i]:span_offsets[i + 1]].")
      .def("spans_of", &Hierarchy::spans_of, nb::arg("i"),
           nb::sig("def spans_of(self, i: int) -> numpy.ndarray"),
           "Item i's spans: a (k, 2) uint64 read-only view (none for a failed item).")
      .def("paths", &Hierarchy::paths, nb::arg("i"),
           nb::sig("def paths(self, i: int) -> numpy.ndarray"),
           "Item i's path ids, one each, in path-id order (a new uint64 array: a span of 1e6 "
           "range members makes 1e6 ids).")
      .def("path_strings", &Hierarchy::path_strings, nb::arg("i"),
           nb::sig("def path_strings(self, i: int) -> list[str]"),
           "Item i's paths as strings (for small answers).")
      .def_prop_ro("relation", &Hierarchy::relation, "\"parent\", \"children\" or \"siblings\".")
      .def_prop_ro("handle", &Hierarchy::handle,
                   "The C handle (kstage_hierarchy_t; 0 once released), for code that mixes in "
                   "the C API.")
      .def_prop_ro("released", &Hierarchy::released)
      .def("release", &Hierarchy::release,
           "Releases the answer now (idempotent); views already made stay valid.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__", [](Hierarchy& h, nb::args) { h.release(); }, "Releases the answer.")
      .def("__repr__", &Hierarchy::repr);

  stage_class.attr("hierarchy") = nb::cpp_function(
      [](Stage& self, nb::handle query, std::string_view relation) {
        const kstage_relation_t r = relation_arg(relation);
        const StageRef& stage = self.ref();
        QueryArg q = query_arg(stage, query);
        kstage_hierarchy_t h = 0;
        check(without_gil([&] { return kstage_query_hierarchy(stage->id, q.id, r, &h); }));
        auto pin = std::make_shared<HierarchyPin>();
        pin->stage = stage;
        pin->handle = h;  // released by the pin, also when the next call fails
        check(kstage_hierarchy_get(stage->id, h, &pin->items, &pin->item_count, &pin->spans,
                                   &pin->span_count));
        return Hierarchy(std::move(pin), r);
      },
      nb::sig("def hierarchy(self, query: Query | str | collections.abc.Sequence[str] | "
              "collections.abc.Sequence[int], relation: str) -> Hierarchy"),
      nb::is_method(), nb::scope(stage_class), nb::arg("query"), nb::arg("relation"),
      "The parent, children or siblings (relation \"parent\", \"children\", \"siblings\") of "
      "every prim of `query` (a Query, or paths), in one call, over the latest sealed state "
      "(kstage_query_hierarchy): a kstage.Hierarchy, one item per prim. A prim's parent is its "
      "nearest ancestor path that is a prim; siblings leave out the prim itself, and the "
      "siblings of a root are the other roots. A prim that does not exist fails its own item "
      "only.");

  stage_class.attr("query_where") = nb::cpp_function(
      &query_where,
      nb::sig("def query_where(self, predicates: collections.abc.Sequence[tuple[str, str | int] | "
              "tuple[str, str | int, typing.Any]] = ()) -> Query"),
      nb::is_method(), nb::scope(stage_class), nb::arg("predicates") = nb::tuple(),
      "A query over the existing prims (latest sealed state) that meet every predicate, in "
      "path-id order (kstage_query_filter_ex). A predicate is (op, attribute) or (op, "
      "attribute, values); no predicate: every prim. What is supported:\n\n"
      "    (\"has\", any attribute)                      prims that hold it; PATH_ATTRIBUTE: "
      "every prim, PARENT_ATTRIBUTE: non-roots, CHILDREN_ATTRIBUTE: prims with children\n"
      "    (\"in\", kstage.PATH_ATTRIBUTE, paths)        prims in the list\n"
      "    (\"prefix\", kstage.PATH_ATTRIBUTE, path)     prims at or below the path\n"
      "    (\"in\", kstage.PARENT_ATTRIBUTE, paths)      the children of those prims\n"
      "    (\"contains\", kstage.CHILDREN_ATTRIBUTE, paths) the parent of every one\n"
      "    (\"in\", kstage.PRIM_TYPE, types)             prims of one of those types\n"
      "    (\"contains\", kstage.APPLIED_SCHEMAS, schemas) prims with every one applied\n\n"
      "The attribute is a name or a token. Values of the three hierarchy names are paths (str "
      "or ids, one or a sequence); of PRIM_TYPE, APPLIED_SCHEMAS (and any other attribute) "
      "tokens: names (interned) or ids. Anything else -- 'in' on an ordinary attribute, the "
      "reserved comparisons 'lt', 'le', 'gt', 'ge' -- raises kstage.NotSupported naming "
      "predicates[i]; a malformed one kstage.InvalidArgument. A filter is never silently "
      "widened.");
}

}  // namespace kstage_py
