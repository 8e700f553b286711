// SPDX-License-Identifier: Apache-2.0
// Reads: kstage.Read (iterates groups) and kstage.ReadGroup, and Stage.read.
//
// A group's C handle is held by a pin shared by the group object, its tensors and every numpy
// view of its prims or index map: release() (or leaving a `with`) ends the group for the
// caller at once, and the handle goes when the last view of its memory does -- a view never
// outlives the data it shows.
#include "binding.hpp"

#include <kstage/kstage_arrow.h>

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

namespace kstage_py {
namespace {

using namespace nb::literals;

struct GroupPin final : TensorSource {
  StageRef stage;
  kstage_read_group_t info{};
  // Whether the group's tensors are its own buffers (a compact read, or a read to another
  // device) or the column's storage: 1 / 0, or -1 until asked (a read to a named device that may
  // be the column's own: the first export without READ_ONLY tells, see is_compact).
  int compact = -1;
  bool released = false;  // by the caller; the C handle goes with the last holder
  // The read asked for device index maps (device_index_map=True): a device group's
  // info.data.index_map is device memory, handed out as a Tensor (IndexMapSource).
  bool device_index_map = false;

  // Exports of a fixed-size group's tensor, read-only and writable (see SharedExport).
  SharedExport* shared[2] = {nullptr, nullptr};

  bool viewed = false;  // numpy views of prims or index_map were made (StageHandle::pinned)

  ~GroupPin() override {
    for (SharedExport* s : shared) {
      if (s != nullptr) s->release();  // kstage's deleter runs with the last lease
    }
    // Short calls keep the GIL (the engine never runs a deleter under its own locks, so no
    // thread waits for the GIL while holding one); calls that copy or wait release it.
    if (kstage_stage_t s = stage->live(); s != 0) kstage_release_group(s, info.handle);
    if (viewed) stage->unpin();
  }
  void check_alive() const override {
    if (released) raise_error(KSTAGE_INVALID_HANDLE, "the read group was released");
    if (stage->id == 0) raise_error(KSTAGE_INVALID_HANDLE, "the read group's stage was closed");
  }
  uint64_t tensor_count() const override { return info.data.tensor_count; }
  DLDevice device() const override {
    return info.data.tensor_count > 0 ? info.data.tensors[0].device : DLDevice{kDLCPU, 0};
  }
  bool default_readonly() const override { return true; }
  bool is_compact() {
    if (compact < 0) {
      if (info.is_delete || info.data.tensor_count == 0) return false;
      // kstage exports a zero-copy group READ_ONLY whatever the flags say.
      DLManagedTensorVersioned* t = export_from_stage(0, false);
      compact = (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0 ? 1 : 0;
      t->deleter(t);
    }
    return compact == 1;
  }
  DLManagedTensorVersioned* repeat_export(uint64_t index) override {
    if (index != 0 || released || shared[0] == nullptr || stage->id == 0) return nullptr;
    const DLDevice d = device();
    if (!is_host_memory(d.device_type)) return nullptr;
    return shared[0]->lease();
  }
  const char* writable_refusal() const override {
    return const_cast<GroupPin*>(this)->is_compact()
               ? ""
               : "a zero-copy read group shares the column's storage and exports read-only: read "
                 "with "
                 "compact=True for tensors of your own, or export with copy=True";
  }
  DLManagedTensorVersioned* export_versioned(uint64_t index, bool readonly,
                                             uintptr_t stream = 0) override {
    if (stream != 0) return export_from_stage(index, readonly, stream);  // this consumer's own
    if (!info.is_array) {
      SharedExport*& s = shared[readonly ? 0 : 1];
      if (s == nullptr) {
        DLManagedTensorVersioned* t = export_from_stage(index, readonly);  // releases the GIL
        if (s == nullptr) {
          s = new SharedExport(t);
        } else {
          t->deleter(t);  // another thread got there first
        }
      }
      return s->lease();
    }
    return export_from_stage(index, readonly);
  }
  DLManagedTensorVersioned* export_from_stage(uint64_t index, bool readonly, uintptr_t stream = 0) {
    DLManagedTensorVersioned* t = nullptr;
    kstage_status_t status;
    {
      ReleaseGil gil;
      status = kstage_group_export_on_stream(stage->id, info.handle, index,
                                             readonly ? KSTAGE_EXPORT_READ_ONLY : 0, stream, &t);
    }
    check(status);
    return t;
  }
  DLManagedTensor* export_legacy(uint64_t index, bool readonly, bool consumer_reads_only,
                                 uintptr_t stream = 0) override {
    uint64_t flags = (readonly ? KSTAGE_EXPORT_READ_ONLY : 0) |
                     (consumer_reads_only ? KSTAGE_EXPORT_CONSUMER_READS_ONLY : 0);
    DLManagedTensor* t = nullptr;
    kstage_status_t status;
    {
      ReleaseGil gil;
      status =
          kstage_group_export_legacy_on_stream(stage->id, info.handle, index, flags, stream, &t);
    }
    check(status);
    return t;
  }
};

// A device group's index map for a DLPack consumer (a read with device_index_map=True): one
// read-only uint32 tensor on the group's device, exported by kstage_group_export_index_map
// (ordered on the consumer's stream, as the group's tensors are).
struct IndexMapSource final : TensorSource {
  explicit IndexMapSource(std::shared_ptr<GroupPin> p) : pin(std::move(p)) {}
  std::shared_ptr<GroupPin> pin;
  void check_alive() const override { pin->check_alive(); }
  uint64_t tensor_count() const override { return 1; }
  DLDevice device() const override { return pin->device(); }
  bool default_readonly() const override { return true; }
  const char* writable_refusal() const override {
    return "a read group's index map is the column's row map and exports read-only: copy it on its "
           "device for one of your own";
  }
  DLManagedTensorVersioned* export_versioned(uint64_t, bool, uintptr_t stream = 0) override {
    DLManagedTensorVersioned* t = nullptr;
    kstage_status_t status;
    {
      ReleaseGil gil;
      status = kstage_group_export_index_map(pin->stage->id, pin->info.handle, stream, &t);
    }
    check(status);
    return t;
  }
  // (Not reached today: an index map is read-only and its Tensor is made without
  // consumer_reads_only, so export_dlpack refuses a legacy export first.)
  DLManagedTensor* export_legacy(uint64_t, bool, bool, uintptr_t stream = 0) override {
    return legacy_of(export_versioned(0, true, stream));
  }
};

// The numpy views' owner: one reference to the pin, which keeps the stage's memory (see
// StageHandle) until the last view goes.
nb::capsule pin_owner(const std::shared_ptr<GroupPin>& pin) {
  if (!pin->viewed) {
    pin->viewed = true;
    pin->stage->pin();
  }
  return nb::capsule(new std::shared_ptr<GroupPin>(pin),
                     [](void* p) noexcept { delete static_cast<std::shared_ptr<GroupPin>*>(p); });
}

class ReadGroup {
 public:
  explicit ReadGroup(std::shared_ptr<GroupPin> pin) : pin_(std::move(pin)) {}
  ReadGroup(ReadGroup&&) noexcept = default;  // the moved-from group holds no pin
  ReadGroup(const ReadGroup&) = delete;
  ~ReadGroup() {
    pin_.reset();  // collected, not released: tensors made from the group stay usable
  }

  void release() {
    if (pin_ && !pin_->released) pin_->released = true;
    pin_.reset();
    tensor0_.reset();
    made_prims_.reset();
  }
  const GroupPin& alive() const {
    if (!pin_ || pin_->released) raise_error(KSTAGE_INVALID_HANDLE, "the read group was released");
    if (pin_->stage->id == 0)
      raise_error(KSTAGE_INVALID_HANDLE, "the read group's stage was closed");
    return *pin_;
  }
  std::string attribute() const {
    const GroupPin& p = alive();
    const char* s = nullptr;
    size_t n = 0;
    check(kstage_token_string(p.stage->id, p.info.attribute, &s, &n));
    return std::string(s, n);
  }
  kstage_token_t attribute_token() const { return alive().info.attribute; }
  // A group of a read with prims_as_progression=True whose prims are a progression has no list
  // of ids (info.prims NULL): prims() makes the ids, once, when asked.
  nb::object prims() {
    const GroupPin& p = alive();
    if (p.info.prims != nullptr || p.info.prim_count == 0)
      return uint64_view(p.info.prims, p.info.prim_count, pin_owner(pin_));
    if (!made_prims_.is_valid()) {
      auto [first, stride] = progression_of(p);
      nb::module_ np = nb::module_::import_("numpy");
      nb::object u8 = np.attr("uint64");
      nb::object ids =
          np.attr("arange")(p.info.prim_count, "dtype"_a = u8) * u8(stride) + u8(first);
      ids.attr("setflags")("write"_a = false);
      made_prims_ = ids;
    }
    return made_prims_;
  }
  // (first, stride) when the prims are a progression (prims[i] = first + i * stride), else None
  // (kstage_group_prim_progression).
  nb::object prim_progression() const {
    const GroupPin& p = alive();
    uint64_t first = 0, stride = 0;
    const kstage_status_t status =
        kstage_group_prim_progression(p.stage->id, p.info.handle, &first, &stride);
    if (status == KSTAGE_NOT_FOUND) return nb::none();
    check(status);
    return nb::make_tuple(first, stride);
  }
  std::vector<std::string> paths() const {
    const GroupPin& p = alive();
    std::vector<std::string> out;
    out.reserve(p.info.prim_count);
    if (p.info.prims != nullptr) {
      for (uint64_t i = 0; i < p.info.prim_count; ++i)
        out.push_back(path_string(p.stage, p.info.prims[i]));
    } else if (p.info.prim_count > 0) {
      auto [first, stride] = progression_of(p);
      for (uint64_t i = 0; i < p.info.prim_count; ++i)
        out.push_back(path_string(p.stage, first + i * stride));
    }
    return out;
  }
  nb::object index_map() const {
    const GroupPin& p = alive();
    if (p.info.data.index_map == nullptr) return nb::none();
    if (p.device_index_map && !is_host_memory(p.device().device_type))
      return make_tensor(std::make_shared<IndexMapSource>(pin_), 0, nb::none(), false);
    return uint32_view(p.info.data.index_map, p.info.data.count, pin_owner(pin_));
  }
  uint64_t ordinal() const { return alive().info.ordinal; }
  bool is_tombstone() const { return alive().info.is_delete; }
  bool is_array() const { return alive().info.is_array; }
  bool compact() const {
    std::shared_ptr<GroupPin> pin = pin_;  // is_compact may release the GIL: our own reference
    alive();
    return pin->is_compact();
  }
  uint64_t count() const { return alive().info.prim_count; }
  uint64_t tensor_count() const { return alive().info.data.tensor_count; }
  std::string semantic() const { return semantic_name(alive().info.semantic); }
  nb::object dtype() const { return numpy_dtype(alive().info.dtype); }
  uint32_t lanes() const { return alive().info.dtype.lanes; }
  nb::tuple device() const { return dlpack_device(alive()); }
  nb::object tensor(uint64_t index, nb::handle readonly, bool consumer_reads_only) {
    if (alive().info.is_delete) raise_invalid_argument("a tombstone group has no tensors");
    bool plain = index == 0 && readonly.is_none() && !consumer_reads_only;
    if (plain && tensor0_.is_valid()) return tensor0_;  // a Tensor is immutable: one serves all
    nb::object t = make_tensor(pin_, index, readonly, consumer_reads_only);
    if (plain) tensor0_ = t;
    return t;
  }
  nb::object dlpack(nb::handle stream, nb::handle max_version, nb::handle dl_device,
                    nb::handle copy, nb::handle readonly) {
    // The repeat path keeps the GIL throughout: no other thread can release the group meanwhile.
    if (pin_) {
      nb::object fast = repeat_dlpack(*pin_, 0, stream, max_version, dl_device, copy, readonly);
      if (fast.is_valid()) return fast;
    }
    // Our own reference: the export may release the GIL, and another thread release the group.
    std::shared_ptr<GroupPin> pin = pin_;
    const GroupPin& p = alive();
    if (p.info.is_delete) buffer_error("a tombstone group has no tensors");
    if (p.info.is_array)
      buffer_error("an array group has one tensor per prim: export group.tensor(i)");
    return export_dlpack(*pin, 0, stream, max_version, dl_device, copy, readonly, false);
  }
  // The Arrow PyCapsule interface (arrow_capsules.cpp), with kstage_arrow.h's flags.
  nb::tuple capsules(ArrowKind kind, nb::handle requested_schema) {
    return arrow(0, kind, requested_schema);
  }
  nb::tuple arrow(uint64_t flags, ArrowKind kind, nb::handle requested_schema) {
    if (!requested_schema.is_none())
      throw nb::type_error("kstage exports its own schema: requested_schema must be None");
    std::shared_ptr<GroupPin> pin = pin_;  // the export releases the GIL
    const GroupPin& p = alive();
    const kstage_stage_t stage = p.stage->id;
    const kstage_group_t group = p.info.handle;
    return arrow_capsules(
        [=](ArrowSchema* s, ArrowDeviceArray* a) {
          return kstage_group_export_arrow(stage, group, flags, s, a);
        },
        kind);
  }
  std::string repr() const {
    if (!pin_ || pin_->released) return "<kstage.ReadGroup (released)>";
    if (pin_->stage->id == 0) return "<kstage.ReadGroup (stage closed)>";
    const GroupPin& p = *pin_;
    std::string kind = p.info.is_delete ? "tombstone" : p.info.is_array ? "array" : "fixed";
    return "<kstage.ReadGroup " + attribute() + ": " + std::to_string(p.info.prim_count) +
           " prims, " + kind + ", ordinal " + std::to_string(p.info.ordinal) + ", " +
           device_string(device_of(p)) + ">";
  }

 private:
  static DLDevice device_of(const GroupPin& p) { return p.device(); }
  // The progression of a group published without a list of ids (the C API names it for such a
  // group always).
  static std::pair<uint64_t, uint64_t> progression_of(const GroupPin& p) {
    uint64_t first = 0, stride = 0;
    check(kstage_group_prim_progression(p.stage->id, p.info.handle, &first, &stride));
    return {first, stride};
  }
  std::shared_ptr<GroupPin> pin_;
  nb::object tensor0_;     // tensor(0) with the default options, made once
  nb::object made_prims_;  // prims() of a progression group, made once
};

class Read {
 public:
  Read(StageRef stage, kstage_read_t id, int compact, bool device_index_map)
      : stage_(std::move(stage)), id_(id), compact_(compact), device_index_map_(device_index_map) {}
  Read(Read&& other) noexcept
      : stage_(std::move(other.stage_)),
        id_(other.id_),
        compact_(other.compact_),
        device_index_map_(other.device_index_map_) {
    other.id_ = 0;
  }
  Read(const Read&) = delete;
  ~Read() { release(); }
  void release() {
    if (id_ == 0) return;
    kstage_read_t id = id_;
    id_ = 0;
    if (stage_->id != 0) kstage_release_read(stage_->id, id);  // short: keeps the GIL
  }
  // The next group, or None at the end (see iternext).
  nb::object next_or_none() {
    if (id_ == 0) return nb::none();
    auto pin = std::make_shared<GroupPin>();
    pin->stage = stage_;
    pin->compact = compact_;
    pin->device_index_map = device_index_map_;
    // Never blocks (kstage.h): keeps the GIL.
    kstage_status_t status =
        kstage_fetch_read_next(stage_->id, id_, KSTAGE_TIMEOUT_INFINITE, &pin->info);
    if (status == KSTAGE_END_OF_ITERATION) {
      pin->stage = std::make_shared<StageHandle>();  // nothing to release
      release();
      return nb::none();
    }
    if (status != KSTAGE_OK) {
      pin->stage = std::make_shared<StageHandle>();
      raise_status(status);
    }
    return nb::cast(ReadGroup(std::move(pin)));
  }

 private:
  StageRef stage_;
  kstage_read_t id_;
  int compact_;            // GroupPin::compact of every group
  bool device_index_map_;  // GroupPin::device_index_map of every group
};

// A group with a path column for Arrow consumers: ReadGroup.arrow(paths=...).
struct ArrowView {
  nb::object group;  // the ReadGroup
  uint64_t flags = 0;
  nb::tuple capsules(ArrowKind kind, nb::handle requested_schema) {
    return nb::cast<ReadGroup&>(group).arrow(flags, kind, requested_schema);
  }
};

uint64_t arrow_flags(nb::handle paths) {
  if (paths.is_none()) return 0;
  const std::string p = nb::cast<std::string>(paths);
  if (p == "ids") return KSTAGE_ARROW_PATH_IDS;
  if (p == "strings") return KSTAGE_ARROW_PATH_STRINGS;
  throw nb::value_error("paths must be None, \"ids\" or \"strings\"");
}

void no_device_kwargs(const nb::kwargs& kwargs) {
  for (auto [key, value] : kwargs)
    if (!value.is_none())
      throw nb::type_error(
          ("__arrow_c_device_array__: kstage does not take " + nb::cast<std::string>(key)).c_str());
}

// Stage.to_arrow: a record batch of a read, exported when a consumer takes it (each take is a
// read of the latest sealed state, or of the change range, at that moment).
struct ArrowBatch {
  StageRef stage;
  nb::object query;  // as given: paths or a Query, resolved at each take
  std::vector<kstage_token_t> tokens;
  kstage_read_desc_t desc = kstage_read_desc_init();
  uint64_t flags = 0;
  nb::tuple capsules(ArrowKind kind, nb::handle requested_schema) {
    if (!requested_schema.is_none())
      throw nb::type_error("kstage exports its own schema: requested_schema must be None");
    QueryArg q = query_arg(stage, query);
    const kstage_stage_t s = stage->id;
    const kstage_query_t id = q.id;
    return arrow_capsules(
        [&](ArrowSchema* out_schema, ArrowDeviceArray* out_array) {
          return kstage_read_export_arrow(s, id, tokens.data(), tokens.size(), &desc, flags,
                                          out_schema, out_array);
        },
        kind);
  }
};

// The Arrow PyCapsule interface on `cls`, whose C::capsules(kind, requested_schema) makes them.
template <class C>
void def_arrow_protocol(nb::class_<C>& cls) {
  cls.def(
         "__arrow_c_array__", [](C& c, nb::handle rs) { return c.capsules(ArrowKind::Host, rs); },
         nb::arg("requested_schema") = nb::none(),
         "Arrow PyCapsules (schema, array) of host data: pyarrow.array(obj), "
         "pyarrow.record_batch(obj).")
      .def(
          "__arrow_c_device_array__",
          [](C& c, nb::handle rs, nb::kwargs kw) {
            no_device_kwargs(kw);
            return c.capsules(ArrowKind::Device, rs);
          },
          nb::arg("requested_schema") = nb::none(), nb::arg("kwargs"),
          "Arrow PyCapsules (schema, device array), on the data's device.")
      .def(
          "__arrow_c_schema__",
          [](C& c) { return nb::object(c.capsules(ArrowKind::Device, nb::none())[0]); },
          "The Arrow schema capsule.");
}

nb::object group_dlpack(nb::handle self, nb::handle stream, nb::handle max_version,
                        nb::handle dl_device, nb::handle copy, nb::handle readonly) {
  return nb::inst_ptr<ReadGroup>(self)->dlpack(stream, max_version, dl_device, copy, readonly);
}

}  // namespace

void register_read(nb::module_& m, nb::handle stage_class) {
  auto group_class =
      nb::class_<ReadGroup>(
          m, "ReadGroup",
          "One group of a read: prims with the same column and device, and their "
          "tensors (pinned snapshot data). A context manager: released on exit, or "
          "when collected.")
          .def_prop_ro("attribute", &ReadGroup::attribute, "The attribute's name.")
          .def_prop_ro("attribute_token", &ReadGroup::attribute_token)
          .def_prop_ro("prims", &ReadGroup::prims,
                       nb::for_getter(nb::sig("def prims(self) -> numpy.ndarray")),
                       "The prims' path ids (a read-only uint64 numpy view). A group of a read "
                       "with prims_as_progression=True that has no list of ids makes them here, "
                       "once, when asked (prim_progression names them without).")
          .def_prop_ro(
              "prim_progression", &ReadGroup::prim_progression,
              nb::for_getter(nb::sig("def prim_progression(self) -> tuple[int, int] | None")),
              "(first, stride) when the prims are a progression -- prims[i] = first + "
              "i * stride: a path-range query's, a filter's that is one run of ids, a "
              "list that steps by one constant --, else None.")
          .def_prop_ro("paths", &ReadGroup::paths, "The prims' paths (strings, made on demand).")
          .def_prop_ro(
              "index_map", &ReadGroup::index_map,
              nb::for_getter(nb::sig("def index_map(self) -> numpy.ndarray | Tensor | None")),
              "None, or prim i's row in the tensor (a read-only uint32 numpy view): zero-copy "
              "groups share the column's storage, whose row order is the column's. A device "
              "group read with device_index_map=True: a read-only uint32 Tensor in the "
              "group's device memory (DLPack, ordered on the consumer's stream).")
          .def_prop_ro("ordinal", &ReadGroup::ordinal,
                       "The attribute's write floor at the snapshot.")
          .def_prop_ro(
              "is_tombstone", &ReadGroup::is_tombstone,
              "A change-range tombstone group: these prims lost the attribute; no tensors.")
          .def_prop_ro("is_array", &ReadGroup::is_array,
                       "An array (ragged) attribute: one tensor per prim.")
          .def_prop_ro("compact", &ReadGroup::compact)
          .def_prop_ro("semantic", &ReadGroup::semantic)
          .def_prop_ro("dtype", &ReadGroup::dtype,
                       nb::for_getter(nb::sig("def dtype(self) -> numpy.dtype | None")),
                       "The element dtype (numpy), without lanes.")
          .def_prop_ro("lanes", &ReadGroup::lanes,
                       "Values per row of a fixed-size column (3 for float32 x 3).")
          .def_prop_ro("tensor_count", &ReadGroup::tensor_count)
          .def_prop_ro("device", &ReadGroup::device,
                       nb::for_getter(nb::sig("def device(self) -> tuple[int, int]")),
                       "(device_type, device_id) of the tensors.")
          .def("__len__", &ReadGroup::count)
          .def(
              "tensor", &ReadGroup::tensor,
              nb::sig("def tensor(self, index: int = 0, *, readonly: bool | None = None, "
                      "consumer_reads_only: bool = False) -> Tensor"),
              nb::arg("index") = 0, nb::kw_only(), nb::arg("readonly") = nb::none(),
              nb::arg("consumer_reads_only") = false,
              "Tensor `index` for a DLPack consumer (numpy.from_dlpack(g.tensor(0))): a fixed-size "
              "group's rows as (rows, lanes) (or (rows,) for one lane), an array group's prim "
              "`index`. Read-only by default; readonly=False on a compact read. "
              "consumer_reads_only=True lets a read-only tensor go to a legacy consumer that never "
              "writes (JAX) without a copy.")
          .def("__dlpack_device__", &ReadGroup::device)
          .def("release", &ReadGroup::release,
               "Ends the group (idempotent). numpy views of its prims or index map keep its memory "
               "until they go; exported tensors keep theirs.")
          .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
          .def("__exit__", [](ReadGroup& g, nb::args) { g.release(); })
          .def("__repr__", &ReadGroup::repr);

  install_dlpack_method<&group_dlpack>(m.attr("ReadGroup"));

  // Arrow (kstage/kstage_arrow.h): the group's column, zero-copy where its memory allows.
  def_arrow_protocol(group_class);
  group_class.def(
      "arrow",
      [](nb::object self, nb::handle paths) {
        ArrowView v;
        v.group = self;
        v.flags = arrow_flags(paths);
        return v;
      },
      nb::arg("paths") = nb::none(),
      "The group for an Arrow consumer with a path column: paths=\"ids\" (uint64) or "
      "\"strings\" (dictionary-encoded) makes a struct of \"path\" and the column "
      "(pyarrow.array(group.arrow(paths=\"strings\"))).");
  nb::class_<ArrowView> view_class(
      m, "ArrowView", "A read group with its prims as a path column, for Arrow consumers.");
  def_arrow_protocol(view_class);

  static PyType_Slot read_slots[] = {{Py_tp_iternext, reinterpret_cast<void*>(&iternext<Read>)},
                                     {0, nullptr}};
  nb::class_<Read>(m, "Read",
                   "An open read: iterate it for its groups. A context manager: released on exit "
                   "(groups already fetched stay valid until released).",
                   nb::type_slots(read_slots))
      .def(
          "__iter__", [](nb::handle self) { return nb::borrow(self); },
          nb::sig("def __iter__(self) -> collections.abc.Iterator[ReadGroup]"))
      .def("release", &Read::release)
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__exit__", [](Read& r, nb::args) { r.release(); });

  nb::class_<ArrowBatch> batch_class(
      m, "ArrowBatch",
      "Stage.to_arrow's record batch for Arrow consumers (the PyCapsule interface): "
      "each consumer's take reads the stage at that moment.");
  def_arrow_protocol(batch_class);

  stage_class.attr("to_arrow") = nb::cpp_function(
      [](Stage& self, nb::object query, nb::handle attrs, nb::handle paths, nb::handle range,
         nb::handle device) {
        ArrowBatch b;
        b.stage = self.ref();
        b.query = std::move(query);
        if (PyUnicode_Check(attrs.ptr()) || PyLong_Check(attrs.ptr())) {
          b.tokens.push_back(attribute_token(b.stage, attrs));
        } else {
          for (nb::handle a : attrs) b.tokens.push_back(attribute_token(b.stage, a));
        }
        if (!range.is_none()) {
          auto [begin, end] = uint_pair(range, "range");
          b.desc.change_range = true;
          b.desc.range_begin = begin;
          b.desc.range_end = end;
        }
        b.desc.target_device = device_arg(device);
        b.flags = arrow_flags(paths);
        return b;
      },
      nb::sig("def to_arrow(self, query: Query | str | collections.abc.Sequence[str] | "
              "collections.abc.Sequence[int], attrs: str | int | collections.abc.Sequence[str | "
              "int], *, paths: str | None = None, range: tuple[int, int] | None = None, device: "
              "typing.Any | None = None) -> ArrowBatch"),
      nb::is_method(), nb::scope(stage_class), nb::arg("query"), nb::arg("attrs"), nb::kw_only(),
      nb::arg("paths") = nb::none(), nb::arg("range") = nb::none(), nb::arg("device") = nb::none(),
      "The query's prims as an Arrow record batch (kstage_read_export_arrow): one row per prim, a "
      "column per attribute (null where a prim does not hold it), after a path column with "
      "paths=\"ids\" or \"strings\". pyarrow.record_batch(stage.to_arrow(q, [\"pos\", \"mass\"])), "
      "pyarrow.table(...), polars.from_arrow(...). Zero-copy for a column one group holds for "
      "every prim in query order. device=\"cpu\" reads device columns to the host.");

  stage_class.attr("read") = nb::cpp_function(
      [](Stage& self, nb::handle query, nb::handle attrs, nb::handle range, bool compact,
         nb::handle device, nb::handle stream, uint64_t max_group_prims, bool device_index_map,
         bool prims_as_progression) {
        const StageRef& stage = self.ref();
        QueryArg q = query_arg(stage, query);
        std::vector<kstage_token_t> tokens;
        if (PyUnicode_Check(attrs.ptr()) || PyLong_Check(attrs.ptr())) {
          tokens.push_back(attribute_token(stage, attrs));
        } else {
          for (nb::handle a : attrs) tokens.push_back(attribute_token(stage, a));
        }
        kstage_read_desc_t desc = kstage_read_desc_init();
        if (!range.is_none()) {
          auto [begin, end] = uint_pair(range, "range");
          desc.change_range = true;
          desc.range_begin = begin;
          desc.range_end = end;
        }
        desc.compact = compact;
        desc.max_group_prims = max_group_prims;
        desc.device_index_map = device_index_map;
        desc.prims_as_progression = prims_as_progression;
        desc.target_device = device_arg(device);
        if (!stream.is_none()) desc.device_sync.stream = stream_arg(stream, 0);
        kstage_read_t id = 0;
        kstage_status_t status;
        {
          ReleaseGil gil;
          status =
              kstage_read_attributes(stage->id, q.id, tokens.data(), tokens.size(), &desc, &id);
        }
        check(status);
        return Read(stage, id,
                    compact                               ? 1
                    : desc.target_device.device_type == 0 ? 0
                                                          : -1,
                    device_index_map);
      },
      nb::sig("def read(self, query: Query | str | collections.abc.Sequence[str] | "
              "collections.abc.Sequence[int], attrs: str | int | collections.abc.Sequence[str | "
              "int], *, range: tuple[int, int] | None = None, compact: bool = False, device: "
              "typing.Any | None = None, stream: int | None = None, max_group_prims: int = 0, "
              "device_index_map: bool = False, prims_as_progression: bool = False) -> Read"),
      nb::is_method(), nb::scope(stage_class), nb::arg("query"), nb::arg("attrs"), nb::kw_only(),
      nb::arg("range") = nb::none(), nb::arg("compact") = false, nb::arg("device") = nb::none(),
      nb::arg("stream") = nb::none(), nb::arg("max_group_prims") = 0,
      nb::arg("device_index_map") = false, nb::arg("prims_as_progression") = false,
      "Opens a read of `attrs` (a name or a list) for the query's prims (a Query, or paths) "
      "against "
      "the latest sealed state. range=(begin, end): only prims that changed at a sealed ordinal in "
      "[begin, end], plus tombstone groups. compact=True: rows gathered into buffers of the read's "
      "own, in prim order (writable exports). device: where the data should land (None: the "
      "column's residency; another device implies compact). stream: a consumer stream made to "
      "wait for the read's device work (-1: none; __dlpack__(stream=...) orders each export). "
      "max_group_prims: groups of at most this many prims, in "
      "order (0: one group per attribute). device_index_map=True: a device group's index_map is a "
      "read-only Tensor in device memory (for torch.from_dlpack, cupy.from_dlpack), not a numpy "
      "view. prims_as_progression=True: a group whose prims are a progression (a range query's, "
      "a filter's that is one run of ids) is published with no list of ids -- no 8 bytes per prim "
      "-- and names them by group.prim_progression.\n\n    for g in stage.read(q, [\"pos\"]):\n    "
      "    "
      "a = numpy.from_dlpack(g.tensor(0))");
}

}  // namespace kstage_py
