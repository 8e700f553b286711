// SPDX-License-Identifier: Apache-2.0
// Maps: Stage.map, kstage.Map (iterates writable groups; a context manager that commits on a
// clean exit and abandons on an exception) and kstage.MapGroup.
#include "binding.hpp"

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>

namespace kstage_py {
namespace {

// The map's C handle and whether it has ended (committed or abandoned), shared with its groups.
struct MapState {
  StageRef stage;
  kstage_map_t id = 0;
  bool ended = false;
  DLDevice device{kDLCPU, 0};  // of the groups fetched so far (one map, one device)
};

// One fetched group; the group's memory is valid until it is committed or the map ends.
struct MapGroupSource final : TensorSource {
  std::shared_ptr<MapState> map;
  kstage_map_group_info_t info{};
  bool committed = false;

  void check_alive() const override {
    if (map->stage->id == 0) raise_error(KSTAGE_INVALID_HANDLE, "the map's stage was closed");
    if (map->ended)
      raise_error(KSTAGE_INVALID_HANDLE, "the map has ended (committed or abandoned)");
    if (committed) raise_error(KSTAGE_INVALID_HANDLE, "the map group was committed");
  }
  uint64_t tensor_count() const override { return info.data.tensor_count; }
  DLDevice device() const override {
    return info.data.tensor_count > 0 ? info.data.tensors[0].device : DLDevice{kDLCPU, 0};
  }
  bool default_readonly() const override { return false; }
  const char* writable_refusal() const override { return ""; }
  // Map buffers are settled when handed out (kstage.h) and committed, not released, by
  // kstage: a consumer stream has nothing to order.
  DLManagedTensorVersioned* export_versioned(uint64_t index, bool readonly,
                                             uintptr_t = 0) override {
    DLManagedTensorVersioned* t = nullptr;
    kstage_status_t status;
    {
      ReleaseGil gil;
      status = kstage_map_group_export(map->stage->id, map->id, info.handle, index,
                                       readonly ? KSTAGE_EXPORT_READ_ONLY : 0, &t);
    }
    check(status);
    return t;
  }
  DLManagedTensor* export_legacy(uint64_t index, bool readonly, bool, uintptr_t = 0) override {
    return legacy_of(export_versioned(index, readonly));
  }
};

// Waits for a commit's op and releases it; raises its failure.
void finish_op(kstage_stage_t stage, kstage_op_t op) {
  kstage_status_t status =
      without_gil([&] { return kstage_wait(stage, op, KSTAGE_TIMEOUT_INFINITE); });
  if (status != KSTAGE_OK) {
    try {
      raise_op_failure(stage, op, status);
    } catch (...) {
      kstage_release_op(stage, op);
      throw;
    }
  }
  kstage_release_op(stage, op);
}

class MapGroup {
 public:
  explicit MapGroup(std::shared_ptr<MapGroupSource> source) : source_(std::move(source)) {}
  const MapGroupSource& alive() const {
    source_->check_alive();
    return *source_;
  }
  nb::object prims() const {
    const MapGroupSource& s = alive();
    // A copy: the map's prim list goes when the map ends, which a view could outlive.
    nb::object view = uint64_view(s.info.prims, s.info.prim_count, nb::none());
    return view.attr("copy")();
  }
  nb::object index_map() const {
    const MapGroupSource& s = alive();
    if (s.info.data.index_map == nullptr) return nb::none();
    return uint32_view(s.info.data.index_map, s.info.data.count, nb::none()).attr("copy")();
  }
  uint64_t count() const { return alive().info.prim_count; }
  uint64_t ordinal() const { return alive().info.ordinal; }
  bool is_array() const { return alive().info.is_array; }
  std::string semantic() const { return semantic_name(alive().info.semantic); }
  uint64_t tensor_count() const { return alive().info.data.tensor_count; }
  nb::object dtype() const { return numpy_dtype(alive().info.dtype); }
  uint32_t lanes() const { return alive().info.dtype.lanes; }
  nb::tuple device() const { return dlpack_device(alive()); }
  nb::object tensor(uint64_t index, nb::handle readonly) const {
    alive();
    return make_tensor(source_, index, readonly, false);
  }
  nb::object dlpack(nb::handle stream, nb::handle max_version, nb::handle dl_device,
                    nb::handle copy, nb::handle readonly) {
    if (alive().info.is_array)
      buffer_error("an array map group has one tensor per prim: export group.tensor(i)");
    return export_dlpack(*source_, 0, stream, max_version, dl_device, copy, readonly, false);
  }
  void commit(nb::handle stream) {
    MapGroupSource& s = *source_;
    s.check_alive();
    // The producer's stream, by the rule writes and __dlpack__ follow (None: the legacy
    // default stream of a device; nothing on the host).
    kstage_device_sync_t done{};
    done.stream = producer_stream(stream, s.device());
    kstage_op_t op = 0;
    kstage_status_t status;
    {
      ReleaseGil gil;
      status = kstage_unmap_group(s.map->stage->id, s.map->id, s.info.handle, done, &op);
    }
    check(status);
    s.committed = true;
    finish_op(s.map->stage->id, op);
  }

 private:
  std::shared_ptr<MapGroupSource> source_;
};

class Map {
 public:
  explicit Map(std::shared_ptr<MapState> state) : state_(std::move(state)) {}
  Map(Map&&) noexcept = default;  // the moved-from map holds no state
  Map(const Map&) = delete;
  ~Map() {
    if (state_) abandon_now();
  }

  // The next group, or None at the end (see iternext).
  nb::object next_or_none() {
    if (state_->ended) return nb::none();
    auto source = std::make_shared<MapGroupSource>();
    source->map = state_;
    kstage_status_t status;
    {
      ReleaseGil gil;
      status = kstage_fetch_map_next(state_->stage->id, state_->id, KSTAGE_TIMEOUT_INFINITE,
                                     &source->info);
    }
    if (status == KSTAGE_END_OF_ITERATION) return nb::none();
    check(status);
    state_->device = source->device();
    return nb::cast(MapGroup(std::move(source)));
  }
  void commit(nb::handle stream) {
    if (state_->ended)
      raise_error(KSTAGE_INVALID_HANDLE, "the map has ended (committed or abandoned)");
    kstage_device_sync_t done{};
    done.stream = producer_stream(stream, state_->device);
    kstage_op_t op = 0;
    kstage_status_t status;
    {
      ReleaseGil gil;
      status = kstage_unmap_attribute(state_->stage->id, state_->id, done, &op);
    }
    check(status);
    state_->ended = true;
    finish_op(state_->stage->id, op);
  }
  // `stream` (not None): the producer's stream, whose writes into the buffers may still be
  // queued -- the buffers are freed after them (kstage_release_map_after).
  void abandon(nb::handle stream) {
    if (stream.is_none() || state_->ended || state_->stage->id == 0) return abandon_now();
    kstage_device_sync_t after{};
    after.stream = producer_stream(stream, state_->device);
    kstage_status_t status;
    {
      ReleaseGil gil;
      status = kstage_release_map_after(state_->stage->id, state_->id, after);
    }
    check(status);  // on failure the map stays open
    state_->ended = true;
  }
  void abandon_now() {
    if (state_->ended) return;
    state_->ended = true;
    if (state_->stage->id != 0) {
      ReleaseGil gil;
      kstage_release_map(state_->stage->id, state_->id);
    }
  }
  bool ended() const { return state_->ended; }
  // Leaving `with`: commit on a clean exit, abandon on an exception (which then propagates).
  bool exit(nb::handle type) {
    if (type.is_none() && !state_->ended) {
      commit(nb::none());
    } else {
      abandon_now();
    }
    return false;
  }

 private:
  std::shared_ptr<MapState> state_;
};

// A DLDataType from a numpy dtype (or anything numpy.dtype takes); a subarray dtype such as
// ("f4", 3) gives the lanes; `lanes` multiplies.
DLDataType dtype_arg(nb::handle dtype, uint32_t lanes) {
  nb::object np = nb::module_::import_("numpy");
  nb::object d = np.attr("dtype")(dtype);
  uint64_t sub_lanes = 1;
  nb::object sub = d.attr("subdtype");
  if (!sub.is_none()) {
    nb::tuple pair = nb::borrow<nb::tuple>(sub);
    d = pair[0];
    for (nb::handle extent : nb::borrow<nb::tuple>(pair[1]))
      sub_lanes *= nb::cast<uint64_t>(extent);
  }
  std::string kind = nb::cast<std::string>(d.attr("kind"));
  DLDataType t{};
  if (kind == "i") t.code = kDLInt;
  else if (kind == "u") t.code = kDLUInt;
  else if (kind == "f") t.code = kDLFloat;
  else if (kind == "c") t.code = kDLComplex;
  else if (kind == "b") t.code = kDLBool;
  else raise_invalid_argument("dtype " + text_of(d) + " has no DLPack equivalent");
  const int bits = nb::cast<int>(d.attr("itemsize")) * 8;
  if (bits > 255)
    raise_invalid_argument("dtype " + text_of(d) + " has " + std::to_string(bits) +
                           "-bit elements: DLPack's are at most 255 bits");
  t.bits = static_cast<uint8_t>(bits);
  uint64_t total = sub_lanes * (lanes == 0 ? 1 : lanes);
  if (total > 65535) raise_invalid_argument("more than 65535 lanes");
  t.lanes = static_cast<uint16_t>(total);
  return t;
}

nb::object group_dlpack(nb::handle self, nb::handle stream, nb::handle max_version,
                        nb::handle dl_device, nb::handle copy, nb::handle readonly) {
  return nb::inst_ptr<MapGroup>(self)->dlpack(stream, max_version, dl_device, copy, readonly);
}

}  // namespace

void register_map(nb::module_& m, nb::handle stage_class) {
  nb::class_<MapGroup>(m, "MapGroup",
                       "One writable group of a map: fill every row of its tensors "
                       "(numpy.from_dlpack(g.tensor(0))[:] = ...), then commit it, or let the map "
                       "commit every group at once.")
      .def_prop_ro("prims", &MapGroup::prims,
                   nb::for_getter(nb::sig("def prims(self) -> numpy.ndarray")),
                   "The prims' path ids (a uint64 numpy copy).")
      .def_prop_ro("index_map", &MapGroup::index_map,
                   "None, or prim i's row in the tensor (a uint32 copy).")
      .def_prop_ro("ordinal", &MapGroup::ordinal)
      .def_prop_ro("is_array", &MapGroup::is_array)
      .def_prop_ro("semantic", &MapGroup::semantic,
                   "The column's semantic (a map with no semantic takes an existing column's).")
      .def_prop_ro("tensor_count", &MapGroup::tensor_count)
      .def_prop_ro("dtype", &MapGroup::dtype)
      .def_prop_ro("lanes", &MapGroup::lanes)
      .def_prop_ro("device", &MapGroup::device)
      .def("__len__", &MapGroup::count)
      .def(
          "tensor", &MapGroup::tensor,
          nb::sig("def tensor(self, index: int = 0, *, readonly: bool | None = None) -> Tensor"),
          nb::arg("index") = 0, nb::kw_only(), nb::arg("readonly") = nb::none(),
          "Tensor `index` (writable), for a DLPack consumer. Writing through it after the group is "
          "committed is refused at export and undefined through an old export.")
      .def("__dlpack_device__", &MapGroup::device)
      .def("commit", &MapGroup::commit, nb::kw_only(), nb::arg("stream") = nb::none(),
           "Commits this group now (unmap; a write at the map's ordinal). stream: a device stream "
           "whose work so far filled the buffers (-1: nothing to wait for).");

  install_dlpack_method<&group_dlpack>(m.attr("MapGroup"));

  static PyType_Slot map_slots[] = {{Py_tp_iternext, reinterpret_cast<void*>(&iternext<Map>)},
                                    {0, nullptr}};
  nb::class_<Map>(m, "Map",
                  "An open map: iterate it for writable groups. As a context manager it commits "
                  "every fetched group on a clean exit and abandons the map on an exception.",
                  nb::type_slots(map_slots))
      .def(
          "__iter__", [](nb::handle self) { return nb::borrow(self); },
          nb::sig("def __iter__(self) -> collections.abc.Iterator[MapGroup]"))
      .def("commit", &Map::commit, nb::kw_only(), nb::arg("stream") = nb::none(),
           "Commits every fetched group not yet committed, and ends the map.")
      .def("abandon", &Map::abandon, nb::kw_only(), nb::arg("stream") = nb::none(),
           "Ends the map without committing what is left (idempotent). stream: the producer's "
           "stream when its writes into the buffers may still be queued there: the buffers are "
           "freed after them (on failure, the map stays open).")
      .def_prop_ro("ended", &Map::ended)
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__",
          [](Map& map, nb::handle type, nb::handle, nb::handle) { return map.exit(type); },
          nb::arg("type").none(), nb::arg("value").none(), nb::arg("traceback").none());

  stage_class.attr("map") = nb::cpp_function(
      [](Stage& self, nb::handle query, nb::handle attr, uint64_t ordinal, nb::handle dtype,
         uint32_t lanes, nb::handle element_counts, std::string_view mode, nb::handle semantic,
         nb::handle residency, uint64_t max_group_prims, std::string_view attribute_mode) {
        const StageRef& stage = self.ref();
        QueryArg q = query_arg(stage, query);
        kstage_map_desc_t desc = kstage_map_desc_init();
        desc.attribute = attribute_token(stage, attr);
        if (!dtype.is_none()) desc.dtype = dtype_arg(dtype, lanes);  // None: the column's
        desc.prim_mode = mode_arg(mode);
        desc.attribute_mode = attribute_mode_arg(attribute_mode);
        desc.semantic = semantic_arg(semantic);
        desc.residency = device_arg(residency);
        desc.max_group_prims = max_group_prims;
        std::vector<uint64_t> counts;
        if (!element_counts.is_none()) {
          desc.is_array = true;
          nb::object a = numpy_1d(element_counts, "element_counts");
          std::string kind = nb::cast<std::string>(a.attr("dtype").attr("kind"));
          if (kind != "u" && (kind != "i" || (nb::cast<size_t>(a.attr("size")) > 0 &&
                                              nb::cast<int64_t>(a.attr("min")()) < 0)))
            raise_invalid_argument("element_counts must hold non-negative integers");
          a = a.attr("astype")("uint64");
          auto arr = nb::cast<
              nb::ndarray<nb::ro, const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(a);
          counts.assign(arr.data(), arr.data() + arr.shape(0));
        }
        auto state = std::make_shared<MapState>();
        state->stage = stage;
        kstage_status_t status;
        {
          ReleaseGil gil;
          status = kstage_map_attribute(stage->id, q.id, &desc, ordinal,
                                        counts.empty() ? nullptr : counts.data(), counts.size(),
                                        &state->id);
        }
        if (status != KSTAGE_OK) state->ended = true;
        check(status);
        return Map(std::move(state));
      },
      nb::sig("def map(self, query: Query | str | collections.abc.Sequence[str] | "
              "collections.abc.Sequence[int], attr: str | int, ordinal: int, *, dtype: typing.Any "
              "| None = None, lanes: int = 1, element_counts: typing.Any | None = None, mode: str "
              "= 'upsert', semantic: str | int | None = None, residency: typing.Any | None = None, "
              "max_group_prims: int = 0, attribute_mode: str = 'reject') -> Map"),
      nb::is_method(), nb::scope(stage_class), nb::arg("query"), nb::arg("attr"),
      nb::arg("ordinal"), nb::kw_only(), nb::arg("dtype") = nb::none(), nb::arg("lanes") = 1,
      nb::arg("element_counts") = nb::none(), nb::arg("mode") = "upsert",
      nb::arg("semantic") = nb::none(), nb::arg("residency") = nb::none(),
      nb::arg("max_group_prims") = 0, nb::arg("attribute_mode") = "reject",
      "Maps `attr` of the query's prims at `ordinal`: writable buffers to fill, committed at that "
      "ordinal. dtype: a numpy dtype; a subarray dtype such as ('f4', 3), or lanes=3, gives the "
      "values per row (None: the existing column's dtype and semantic). attribute_mode: as "
      "Stage.write's. element_counts: one length per prim, for an array (ragged) attribute. "
      "max_group_prims: split into groups of at most this many prims (0: one group).\n\n"
      "    with stage.map(q, \"pos\", 2, dtype=(\"f4\", 3)) as m:\n        for g in m:\n"
      "            numpy.from_dlpack(g.tensor(0))[:] = values");
}

}  // namespace kstage_py
