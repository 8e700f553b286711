// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/stage.hpp
 * \brief The C++ API's Stage, through which every other object is made, and
 * build_info().
 *
 * Part of the C++ API: include `kstage/kstage.hpp`, which includes every part and whose
 * file comment states the rules (handles, the two error forms, Views).
 */
#ifndef KSTAGE_HPP_STAGE_HPP_
#define KSTAGE_HPP_STAGE_HPP_

#include <kstage/dlpack.hpp>
#include <kstage/hpp/handles.hpp>
#include <kstage/hpp/map.hpp>
#include <kstage/hpp/options.hpp>
#include <kstage/hpp/read.hpp>
#include <kstage/hpp/scene.hpp>
#include <kstage/hpp/span.hpp>
#include <kstage/hpp/status.hpp>
#include <kstage/hpp/write.hpp>
#include <kstage/kstage.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kstage {

/**
 * \brief A stage (kstage_stage_t), destroyed with the object.
 *
 * Each call names the C function it makes; kstage.h has the rules. Every call that can
 * fail comes in the two forms of the file comment (Errors): the one with a trailing
 * `Status&` records a failure there and returns an empty value (0, an empty handle
 * object, an empty string or vector); the one without it throws kstage::Error and is
 * declared only when KSTAGE_CPP_EXCEPTIONS is 1.
 */
class Stage {
 public:
  /// An empty Stage; use Stage::create.
  Stage() = default;
  /// A Stage over a stage that C code created and destroys (never destroyed here): for
  /// C++ parts of a code whose stage lives in C.
  static Stage borrow(kstage_stage_t stage) noexcept {
    Stage s;
    s.stage_ = stage;
    s.owned_ = false;
    return s;
  }
  /// Takes `o`'s stage; `o` is left empty.
  Stage(Stage&& o) noexcept : stage_(std::exchange(o.stage_, 0)), owned_(o.owned_) {}
  /// Destroys this object's stage (unless borrowed; see reset()), then takes `o`'s.
  Stage& operator=(Stage&& o) noexcept {
    if (this != &o) {
      reset();
      stage_ = std::exchange(o.stage_, 0);
      owned_ = o.owned_;
    }
    return *this;
  }
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;
  ~Stage() { reset(); }

  /// The C handle (0 when empty), still owned by this object (unless borrowed).
  kstage_stage_t handle() const noexcept { return stage_; }
  /// True when the object holds a stage.
  explicit operator bool() const noexcept { return stage_ != 0; }
  /// Destroys the stage now: every handle of it becomes stale.
  void reset() noexcept {
    if (stage_ != 0 && owned_) kstage_destroy(stage_);
    stage_ = 0;
  }

  /// A new stage with `config` (kstage_create).
  static Stage create(const kstage_config_t& config, Status& st) {
    Stage s;
    detail::check(kstage_create(&config, &s.stage_), st);
    return s;
  }

  // --- dictionary -------------------------------------------------------------------------------
  /// Interns an attribute name (kstage_intern_token).
  kstage_token_t token(std::string_view name, Status& st) const {
    kstage_token_t t = 0;
    detail::check(kstage_intern_token(stage_, name.data(), name.size(), &t), st);
    return t;
  }
  /// Interns a prim path (kstage_intern_path).
  kstage_path_t path(std::string_view name, Status& st) const {
    kstage_path_t p = 0;
    detail::check(kstage_intern_path(stage_, name.data(), name.size(), &p), st);
    return p;
  }
  /// Interns every path of `names` at once (kstage_intern_paths): all, or none when one is bad.
  std::vector<kstage_path_t> paths(array_ref<std::string_view> names, Status& st) const {
    std::vector<const char*> strs(names.size());
    std::vector<size_t> lengths(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      strs[i] = names[i].data();
      lengths[i] = names[i].size();
    }
    std::vector<kstage_path_t> ids(names.size());
    if (!detail::check(
            kstage_intern_paths(stage_, strs.data(), lengths.data(), ids.size(), ids.data()), st))
      return {};
    return ids;
  }
  /// Interns the paths "<parent>/<prefix><n>", n in [begin, begin + count): O(1), consecutive ids.
  PathRange path_range(std::string_view parent, std::string_view prefix, uint64_t begin,
                       uint64_t count, Status& st) const {
    PathRange r;
    if (detail::check(kstage_intern_path_range(stage_, parent.data(), parent.size(),
                                               prefix.empty() ? "" : prefix.data(), prefix.size(),
                                               begin, count, &r.first),
                      st))
      r.count = count;
    return r;
  }
  /// How the range whose first id is range.first was made (kstage_path_range_definition).
  PathRangeDefinition path_range_definition(kstage_path_t first, Status& st) const {
    PathRangeDefinition d;
    const char *parent = nullptr, *prefix = nullptr;
    size_t parent_length = 0, prefix_length = 0;
    if (!detail::check(kstage_path_range_definition(stage_, first, &parent, &parent_length, &prefix,
                                                    &prefix_length, &d.begin),
                       st) ||
        !detail::check(kstage_path_range_info(stage_, first, nullptr, &d.count, nullptr), st))
      return {};
    d.parent = {parent, parent_length};
    d.prefix = {prefix, prefix_length};
    return d;
  }
  /// The string of a token (kstage_token_string), valid for the stage's lifetime.
  std::string_view token_string(kstage_token_t token, Status& st) const {
    const char* s = nullptr;
    size_t n = 0;
    if (!detail::check(kstage_token_string(stage_, token, &s, &n), st)) return {};
    return {s, n};
  }
  /// The string of a path (kstage_path_string), valid for the stage's lifetime.
  std::string_view path_string(kstage_path_t path, Status& st) const {
    const char* s = nullptr;
    size_t n = 0;
    if (!detail::check(kstage_path_string(stage_, path, &s, &n), st)) return {};
    return {s, n};
  }
  /// A PathList holding a copy of `paths` (kstage_path_list_create).
  PathList path_list(array_ref<kstage_path_t> paths, Status& st) const {
    kstage_path_list_t list = 0;
    if (!detail::check(kstage_path_list_create(stage_, paths.data(), paths.size(), &list), st))
      return {};
    return PathList(stage_, list);
  }

  // --- queries ----------------------------------------------------------------------------------
  /// A query over `paths`, in this order (kstage_query_paths); they may name prims that do
  /// not exist yet.
  Query query(array_ref<kstage_path_t> paths, Status& st) const {
    kstage_query_t q = 0;
    if (!detail::check(kstage_query_paths(stage_, paths.data(), paths.size(), &q), st)) return {};
    return Query(stage_, q);
  }
  /// A query over members start, start + stride, ... of `range` (kstage_query_range; count 0:
  /// to its end; stride 0: 1).
  Query query(const PathRange& range, uint64_t start, uint64_t count, uint64_t stride,
              Status& st) const {
    kstage_query_t q = 0;
    if (!detail::check(kstage_query_range(stage_, range.first, start, count, stride, &q), st))
      return {};
    return Query(stage_, q);
  }
  /// A query over the existing prims that match `filter` (kstage_query_filter), in path-id
  /// order.
  Query query(const Filter& filter, Status& st) const {
    kstage_filter_t f{};
    f.has_attributes = filter.has.data();
    f.has_attribute_count = filter.has.size();
    f.path_in = filter.path_in;
    f.path_prefix = filter.path_prefix;
    kstage_query_t q = 0;
    if (!detail::check(kstage_query_filter(stage_, &f, &q), st)) return {};
    return Query(stage_, q);
  }
  /// A query over the existing prims that meet every predicate of `filter`
  /// (kstage_query_filter_ex), in path-id order.
  Query query(const FilterEx& filter, Status& st) const {
    const std::vector<kstage_predicate_t> predicates = filter.predicates();
    kstage_filter_ex_t f = kstage_filter_ex_init();
    f.predicates = predicates.empty() ? nullptr : predicates.data();
    f.predicate_count = predicates.size();
    kstage_query_t q = 0;
    if (!detail::check(kstage_query_filter_ex(stage_, &f, &q), st)) return {};
    return Query(stage_, q);
  }

  // --- the scene --------------------------------------------------------------------------------
  /// The parent, children or siblings (`relation`) of every prim of `query` over the sealed
  /// state (kstage_query_hierarchy): one item per prim, a missing prim's item KSTAGE_NOT_FOUND.
  Hierarchy hierarchy(const Query& query, kstage_relation_t relation, Status& st) const {
    kstage_hierarchy_t h = 0;
    if (!detail::check(kstage_query_hierarchy(stage_, query.handle(), relation, &h), st)) return {};
    return Hierarchy(stage_, h, st);
  }

  // --- writes -----------------------------------------------------------------------------------
  /// Writes `attribute` of the query's prims at `ordinal` from a View of rank 1-3, a
  /// fixed-size attribute (kstage_write_attribute); the Op keeps a copy of the View until
  /// the work is done (see Op).
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write(kstage_token_t attribute, const Query& query, const View& view, uint64_t ordinal,
           const WriteOptions& options, Status& st) const {
    return submit(attribute, query, &borrow_dlpack(view).tensor(), 1, false, ordinal, options, st,
                  std::make_shared<View>(view));
  }
  /// Writes `attribute` of the query's prims at `ordinal` from a borrowed DLTensor, a
  /// fixed-size attribute (kstage_write_attribute); the tensor must stay valid until the op
  /// completes.
  Op write(kstage_token_t attribute, const Query& query, const DLTensor& tensor, uint64_t ordinal,
           const WriteOptions& options, Status& st) const {
    return submit(attribute, query, &tensor, 1, false, ordinal, options, st, nullptr);
  }
  /// Writes every attribute of `batch` for the query's prims at `ordinal`, as one op with
  /// the batch's prim mode (kstage_write_attributes): all are accepted or none is.
  Op write(const Query& query, const WriteBatch& batch, uint64_t ordinal, Status& st) const {
    std::vector<kstage_token_t> attributes(batch.items_.size());
    std::vector<DLTensor> tensors(batch.items_.size());
    std::vector<kstage_write_data_t> data(batch.items_.size());
    for (size_t i = 0; i < batch.items_.size(); ++i) {
      const WriteBatch::Item& item = batch.items_[i];
      if (!item.ndim_ok) {
        st = Status(KSTAGE_INVALID_ARGUMENT,
                    "batch entry " + std::to_string(i) + ": a tensor of rank 1-3 is written");
        return {};
      }
      if (!detail::check_selection(item.options, "batch entry " + std::to_string(i) + ": ", st))
        return {};
      attributes[i] = item.attribute;
      tensors[i] = item.tensor;
      tensors[i].shape = item.tensor.shape ? const_cast<int64_t*>(item.shape) : nullptr;
      tensors[i].strides = item.tensor.strides ? const_cast<int64_t*>(item.strides) : nullptr;
      data[i] = detail::write_data(item.options);
      data[i].tensors = &tensors[i];
      data[i].tensor_count = 1;
    }
    // What the Op keeps is made first: nothing may fail once the stage has the write.
    std::vector<std::shared_ptr<void>> keep;
    for (const WriteBatch::Item& item : batch.items_)
      if (item.keep) keep.push_back(item.keep);
    auto kept = keep.empty() ? nullptr : std::make_shared<decltype(keep)>(std::move(keep));
    kstage_op_t op = 0;
    if (!detail::check(kstage_write_attributes(stage_, query.handle(), attributes.data(),
                                               data.data(), data.size(), ordinal, batch.mode_, &op),
                       st))
      return {};
    return Op(stage_, op, std::move(kept));
  }
  /// Writes an array attribute (kstage_write_attribute), one View per source row (any range
  /// of Views); the Op keeps copies of the Views until the work is done.
  template <class Rows, class = std::enable_if_t<!Kokkos::is_view<Rows>::value>>
  Op write_ragged(kstage_token_t attribute, const Query& query, const Rows& rows, uint64_t ordinal,
                  const WriteOptions& options, Status& st) const {
    using RowView = std::decay_t<decltype(*std::begin(rows))>;
    static_assert(detail::is_view_rank_1_to_3<RowView>::value,
                  "write_ragged: a range of Views of rank 1-3");
    auto keep = std::make_shared<std::vector<RowView>>(std::begin(rows), std::end(rows));
    if (keep->size() == 1 && !one_source_row(query, options, "one View", st)) return {};
    std::vector<BorrowedTensor> held;
    held.reserve(keep->size());
    for (const RowView& row : *keep) held.push_back(borrow_dlpack(row));
    std::vector<DLTensor> tensors;
    tensors.reserve(held.size());
    for (const BorrowedTensor& b : held) tensors.push_back(b.tensor());
    return submit(attribute, query, tensors.data(), tensors.size(), true, ordinal, options, st,
                  std::move(keep));
  }
  /// An array attribute from one packed View: source row i is the next
  /// `row_counts[i]` entries of its leading axis (no copy: one DLTensor per row
  /// into the View's memory).
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write_ragged(kstage_token_t attribute, const Query& query, const View& packed,
                  array_ref<uint64_t> row_counts, uint64_t ordinal, const WriteOptions& options,
                  Status& st) const {
    if (row_counts.size() == 1 && !one_source_row(query, options, "row_counts with one entry", st))
      return {};
    const BorrowedTensor whole = borrow_dlpack(packed);
    const DLTensor& w = whole.tensor();
    const uint64_t entries = uint64_t(w.shape[0]);
    uint64_t total = 0;
    for (uint64_t c : row_counts) {
      if (c > entries - total) {  // (total <= entries: no overflow)
        st = Status(KSTAGE_INVALID_ARGUMENT, "row_counts add up to more than the packed View's " +
                                                 std::to_string(entries) + " entries");
        return {};
      }
      total += c;
    }
    if (total != entries) {
      st = Status(KSTAGE_INVALID_ARGUMENT, "row_counts add up to " + std::to_string(total) +
                                               " entries, but the packed View has " +
                                               std::to_string(w.shape[0]));
      return {};
    }
    const size_t elem = size_t(w.dtype.bits / 8) * w.dtype.lanes;
    std::vector<DLTensor> tensors(row_counts.size(), w);
    std::vector<int64_t> shapes(row_counts.size() * size_t(w.ndim));
    uint64_t first = 0;
    for (size_t i = 0; i < row_counts.size(); ++i) {
      int64_t* shape = &shapes[i * size_t(w.ndim)];
      for (int d = 0; d < w.ndim; ++d) shape[d] = w.shape[d];
      shape[0] = int64_t(row_counts[i]);
      tensors[i].shape = shape;
      tensors[i].byte_offset = row_counts[i] ? first * uint64_t(w.strides[0]) * elem : 0;
      if (row_counts[i] == 0) tensors[i].data = w.data;
      first += row_counts[i];
    }
    return submit(attribute, query, tensors.data(), tensors.size(), true, ordinal, options, st,
                  std::make_shared<View>(packed));
  }
  /**
   * \brief A fixed-size attribute whose memory passes to the stage (a managed
   * tensor): a compact dense write on the column's device is adopted without a
   * copy. Taken by value: when the write holds the View's last reference (it was
   * moved in), the stage may write into it in place; otherwise it is handed over
   * read-only, so the copies the caller keeps never see the stage's later
   * writes (a sparse write copies the column first). Kokkos 3's View move
   * copies, so there the caller's View always keeps a reference and the
   * hand-over is read-only. An unmanaged View owns nothing to hand over:
   * INVALID_ARGUMENT.
   */
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write_managed(kstage_token_t attribute, const Query& query, View view, uint64_t ordinal,
                   const WriteOptions& options, Status& st) const {
    if (view.use_count() == 0 && view.size() > 0) {
      st = Status(KSTAGE_INVALID_ARGUMENT,
                  "write_managed: the View is unmanaged, so it owns no memory to hand to the "
                  "stage; write it with write() instead");
      return {};
    }
    if (!detail::check_selection(options, "write_managed: ", st)) return {};
    ExportOptions eo;
    eo.read_only = view.use_count() > 1;
    DLManagedTensorVersioned* managed = export_dlpack_versioned(std::move(view), eo);
    kstage_write_data_t d = detail::write_data(options);
    d.managed_tensors = &managed;
    d.tensor_count = 1;
    kstage_op_t op = 0;
    // The stage calls the deleter exactly once, also when it rejects the write.
    if (!detail::check(kstage_write_attribute(stage_, query.handle(), attribute, ordinal, &d,
                                              options.mode, &op),
                       st))
      return {};
    return Op(stage_, op);
  }
  /// Deletes `attributes` of the query's prims at `ordinal` (none: the prims themselves;
  /// kstage_delete_attributes).
  Op delete_attributes(const Query& query, array_ref<kstage_token_t> attributes, uint64_t ordinal,
                       Status& st) const {
    kstage_op_t op = 0;
    if (!detail::check(kstage_delete_attributes(stage_, query.handle(), attributes.data(),
                                                attributes.size(), ordinal, &op),
                       st))
      return {};
    return Op(stage_, op);
  }
  /// Deletes the query's prims (every attribute they hold) at `ordinal`.
  Op delete_prims(const Query& query, uint64_t ordinal, Status& st) const {
    return delete_attributes(query, {}, ordinal, st);
  }
  /// Seals: advances the write floor of `attributes` (none: every attribute) to `ordinal`
  /// (kstage_advance_write_floor).
  void seal(uint64_t ordinal, array_ref<kstage_token_t> attributes, Status& st) const {
    detail::check(kstage_advance_write_floor(stage_, ordinal, attributes.data(), attributes.size()),
                  st);
  }
  /// Advances every attribute's write floor to `ordinal`.
  void seal(uint64_t ordinal, Status& st) const { seal(ordinal, {}, st); }
  /// Waits for the stage's work on `device` and reports a fault of that device
  /// (kstage_device_check): after handing the stage's device memory to a library that does not
  /// check its own device calls. Host memory: nothing to check.
  void device_check(DLDevice device, Status& st) const {
    detail::check(kstage_device_check(stage_, device), st);
  }
  /// Computes world matrices from local ones, as one write of the world column at `ordinal`
  /// that the caller seals (kstage_compute_world_transforms; docs/scene.md).
  Op compute_world_transforms(uint64_t ordinal, const TransformOptions& options, Status& st) const {
    kstage_transform_desc_t d = kstage_transform_desc_init();
    d.mode = options.mode;
    d.local = options.local;
    d.reset = options.reset;
    d.world = options.world;
    kstage_op_t op = 0;
    if (!detail::check(kstage_compute_world_transforms(stage_, &d, ordinal, &op), st)) return {};
    return Op(stage_, op);
  }
  /// Clones the prim `source` and every existing prim below it to each path of `targets`
  /// (source/x -> target/x), creating them, as one op at `ordinal` that the caller seals
  /// (kstage_clone): create-only and all-or-nothing, every refusal at the call.
  Op clone(kstage_path_t source, array_ref<kstage_path_t> targets, uint64_t ordinal,
           Status& st) const {
    kstage_op_t op = 0;
    if (!detail::check(kstage_clone(stage_, source, targets.data(), targets.size(), ordinal, &op),
                       st))
      return {};
    return Op(stage_, op);
  }
  /// clone() to `count` members of the path range whose first id is `first`, from member
  /// `start` (count 0: to the range's end; kstage_clone_range).
  Op clone_range(kstage_path_t source, kstage_path_t first, uint64_t start, uint64_t count,
                 uint64_t ordinal, Status& st) const {
    kstage_op_t op = 0;
    if (!detail::check(kstage_clone_range(stage_, source, first, start, count, ordinal, &op), st))
      return {};
    return Op(stage_, op);
  }
  /// The write floor of `attribute` (0: the global floor; kstage_get_write_floor).
  uint64_t write_floor(kstage_token_t attribute, Status& st) const {
    uint64_t f = 0;
    detail::check(kstage_get_write_floor(stage_, attribute, &f), st);
    return f;
  }

  // --- describing the stage ---------------------------------------------------------------------
  /// The attributes that have a column, in token order (kstage_list_attributes).
  std::vector<kstage_token_t> attributes(Status& st) const {
    std::vector<kstage_token_t> out;
    uint64_t n = 0;
    // Another thread may create columns between the two calls: ask until the count holds.
    for (;;) {
      if (!detail::check(kstage_list_attributes(stage_, out.data(), out.size(), &n), st)) return {};
      if (n <= out.size()) break;
      out.resize(n);
    }
    out.resize(n);
    return out;
  }
  /// An attribute's schema, residency, write floor and sealed prim count
  /// (kstage_attribute_info).
  kstage_attribute_info_t attribute_info(kstage_token_t attribute, Status& st) const {
    kstage_attribute_info_t info = kstage_attribute_info_init();
    if (!detail::check(kstage_attribute_info(stage_, attribute, &info), st))
      return kstage_attribute_info_init();
    return info;
  }
  /// Each of an attribute's schemas, oldest first: one info per column, prim_count its own
  /// (kstage_attribute_schema; usually one).
  std::vector<kstage_attribute_info_t> attribute_schemas(kstage_token_t attribute,
                                                         Status& st) const {
    const kstage_attribute_info_t all = attribute_info(attribute, st);
    if (!st.ok()) return {};
    std::vector<kstage_attribute_info_t> out(size_t(all.schema_count),
                                             kstage_attribute_info_init());
    for (uint64_t i = 0; i < all.schema_count; ++i)
      if (!detail::check(kstage_attribute_schema(stage_, attribute, i, &out[size_t(i)]), st))
        return {};
    return out;
  }

  // --- reads and maps ---------------------------------------------------------------------------
  /// Opens a read of `attributes` for the query's prims against the latest sealed state
  /// (kstage_read_attributes).
  Read read(const Query& query, array_ref<kstage_token_t> attributes, const ReadOptions& options,
            Status& st) const {
    kstage_read_desc_t d = kstage_read_desc_init();
    d.compact = options.compact;
    d.change_range = options.change_range;
    d.range_begin = options.range_begin;
    d.range_end = options.range_end;
    d.target_device = options.target_device;
    d.device_sync = options.device_sync;
    d.max_group_prims = options.max_group_prims;
    d.device_index_map = options.device_index_map;
    d.prims_as_progression = options.prims_as_progression;
    kstage_read_t r = 0;
    if (!detail::check(kstage_read_attributes(stage_, query.handle(), attributes.data(),
                                              attributes.size(), &d, &r),
                       st))
      return {};
    return Read(stage_, r, options.device_index_map);
  }
  /// Maps the query's prims for `attribute` of `dtype` at `ordinal` (kstage_map_attribute):
  /// writable groups to fill and commit.
  Map map(const Query& query, kstage_token_t attribute, uint64_t ordinal, DLDataType dtype,
          const MapOptions& options, Status& st) const {
    kstage_map_desc_t d = kstage_map_desc_init();
    d.semantic = options.semantic;
    d.attribute = attribute;
    d.dtype = dtype;
    d.prim_mode = options.mode;
    d.attribute_mode = uint8_t(options.attribute_mode);
    d.residency = options.residency;
    d.max_group_prims = options.max_group_prims;
    d.is_array = options.is_array;
    kstage_map_t m = 0;
    if (!detail::check(kstage_map_attribute(
                           stage_, query.handle(), &d, ordinal,
                           options.element_counts.empty() ? nullptr : options.element_counts.data(),
                           options.element_counts.size(), &m),
                       st))
      return {};
    return Map(stage_, m);
  }

#if KSTAGE_CPP_EXCEPTIONS
  // --- the throwing forms -----------------------------------------------------------------------
  /// As create(const kstage_config_t&, Status&), throwing kstage::Error on failure.
  static Stage create(const kstage_config_t& config = kstage_config_init()) {
    return detail::throwing([&](Status& st) { return create(config, st); });
  }
  /// As token(std::string_view, Status&) const, throwing kstage::Error on failure.
  kstage_token_t token(std::string_view name) const {
    return detail::throwing([&](Status& st) { return token(name, st); });
  }
  /// As path(std::string_view, Status&) const, throwing kstage::Error on failure.
  kstage_path_t path(std::string_view name) const {
    return detail::throwing([&](Status& st) { return path(name, st); });
  }
  /// As paths(array_ref<std::string_view>, Status&) const, throwing kstage::Error on failure.
  std::vector<kstage_path_t> paths(array_ref<std::string_view> names) const {
    return detail::throwing([&](Status& st) { return paths(names, st); });
  }
  /// As path_range(std::string_view, std::string_view, uint64_t, uint64_t, Status&) const,
  /// throwing kstage::Error on failure.
  PathRange path_range(std::string_view parent, std::string_view prefix, uint64_t begin,
                       uint64_t count) const {
    return detail::throwing(
        [&](Status& st) { return path_range(parent, prefix, begin, count, st); });
  }
  /// As path_range_definition(kstage_path_t, Status&) const, throwing kstage::Error on failure.
  PathRangeDefinition path_range_definition(kstage_path_t first) const {
    return detail::throwing([&](Status& st) { return path_range_definition(first, st); });
  }
  /// As query(const PathRange&, uint64_t, uint64_t, uint64_t, Status&) const, throwing
  /// kstage::Error on failure.
  Query query(const PathRange& range, uint64_t start = 0, uint64_t count = 0,
              uint64_t stride = 1) const {
    return detail::throwing([&](Status& st) { return query(range, start, count, stride, st); });
  }
  /// As token_string(kstage_token_t, Status&) const, throwing kstage::Error on failure.
  std::string_view token_string(kstage_token_t token) const {
    return detail::throwing([&](Status& st) { return token_string(token, st); });
  }
  /// As path_string(kstage_path_t, Status&) const, throwing kstage::Error on failure.
  std::string_view path_string(kstage_path_t path) const {
    return detail::throwing([&](Status& st) { return path_string(path, st); });
  }
  /// As path_list(array_ref<kstage_path_t>, Status&) const, throwing kstage::Error on failure.
  PathList path_list(array_ref<kstage_path_t> paths) const {
    return detail::throwing([&](Status& st) { return path_list(paths, st); });
  }
  /// As query(array_ref<kstage_path_t>, Status&) const, throwing kstage::Error on failure.
  Query query(array_ref<kstage_path_t> paths) const {
    return detail::throwing([&](Status& st) { return query(paths, st); });
  }
  /// As query(const Filter&, Status&) const, throwing kstage::Error on failure.
  Query query(const Filter& filter) const {
    return detail::throwing([&](Status& st) { return query(filter, st); });
  }
  /// As query(const FilterEx&, Status&) const, throwing kstage::Error on failure.
  Query query(const FilterEx& filter) const {
    return detail::throwing([&](Status& st) { return query(filter, st); });
  }
  /// As hierarchy(const Query&, kstage_relation_t, Status&) const, throwing kstage::Error on
  /// failure.
  Hierarchy hierarchy(const Query& query, kstage_relation_t relation) const {
    return detail::throwing([&](Status& st) { return hierarchy(query, relation, st); });
  }
  /// As the write of a View taking a Status&, throwing kstage::Error on failure.
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write(kstage_token_t attribute, const Query& query, const View& view, uint64_t ordinal,
           const WriteOptions& options = {}) const {
    return detail::throwing(
        [&](Status& st) { return write(attribute, query, view, ordinal, options, st); });
  }
  /// As the write of a DLTensor taking a Status&, throwing kstage::Error on failure.
  Op write(kstage_token_t attribute, const Query& query, const DLTensor& tensor, uint64_t ordinal,
           const WriteOptions& options = {}) const {
    return detail::throwing(
        [&](Status& st) { return write(attribute, query, tensor, ordinal, options, st); });
  }
  /// As write(const Query&, const WriteBatch&, uint64_t, Status&) const, throwing kstage::Error on
  /// failure.
  Op write(const Query& query, const WriteBatch& batch, uint64_t ordinal) const {
    return detail::throwing([&](Status& st) { return write(query, batch, ordinal, st); });
  }
  /// As the write_ragged of a range of Views taking a Status&, throwing kstage::Error on failure.
  template <class Rows, class = std::enable_if_t<!Kokkos::is_view<Rows>::value>>
  Op write_ragged(kstage_token_t attribute, const Query& query, const Rows& rows, uint64_t ordinal,
                  const WriteOptions& options = {}) const {
    return detail::throwing(
        [&](Status& st) { return write_ragged(attribute, query, rows, ordinal, options, st); });
  }
  /// As the write_ragged of a packed View taking a Status&, throwing kstage::Error on failure.
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write_ragged(kstage_token_t attribute, const Query& query, const View& packed,
                  array_ref<uint64_t> row_counts, uint64_t ordinal,
                  const WriteOptions& options = {}) const {
    return detail::throwing([&](Status& st) {
      return write_ragged(attribute, query, packed, row_counts, ordinal, options, st);
    });
  }
  /// As the write_managed taking a Status&, throwing kstage::Error on failure.
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  Op write_managed(kstage_token_t attribute, const Query& query, View view, uint64_t ordinal,
                   const WriteOptions& options = {}) const {
    return detail::throwing([&](Status& st) {
      return write_managed(attribute, query, std::move(view), ordinal, options, st);
    });
  }
  /// As delete_attributes(const Query&, array_ref<kstage_token_t>, uint64_t, Status&) const,
  /// throwing kstage::Error on failure.
  Op delete_attributes(const Query& query, array_ref<kstage_token_t> attributes,
                       uint64_t ordinal) const {
    return detail::throwing(
        [&](Status& st) { return delete_attributes(query, attributes, ordinal, st); });
  }
  /// As delete_prims(const Query&, uint64_t, Status&) const, throwing kstage::Error on failure.
  Op delete_prims(const Query& query, uint64_t ordinal) const {
    return detail::throwing([&](Status& st) { return delete_prims(query, ordinal, st); });
  }
  /// As compute_world_transforms(uint64_t, const TransformOptions&, Status&) const, throwing
  /// kstage::Error on failure.
  Op compute_world_transforms(uint64_t ordinal, const TransformOptions& options = {}) const {
    return detail::throwing(
        [&](Status& st) { return compute_world_transforms(ordinal, options, st); });
  }
  /// As clone(kstage_path_t, array_ref<kstage_path_t>, uint64_t, Status&) const, throwing
  /// kstage::Error on failure.
  Op clone(kstage_path_t source, array_ref<kstage_path_t> targets, uint64_t ordinal) const {
    return detail::throwing([&](Status& st) { return clone(source, targets, ordinal, st); });
  }
  /// As clone_range(kstage_path_t, kstage_path_t, uint64_t, uint64_t, uint64_t, Status&) const,
  /// throwing kstage::Error on failure.
  Op clone_range(kstage_path_t source, kstage_path_t first, uint64_t start, uint64_t count,
                 uint64_t ordinal) const {
    return detail::throwing(
        [&](Status& st) { return clone_range(source, first, start, count, ordinal, st); });
  }
  /// As seal(uint64_t, array_ref<kstage_token_t>, Status&) const, throwing kstage::Error on
  /// failure.
  void seal(uint64_t ordinal, array_ref<kstage_token_t> attributes = {}) const {
    detail::throwing([&](Status& st) { seal(ordinal, attributes, st); });
  }
  /// As device_check(DLDevice, Status&) const, throwing kstage::Error on failure.
  void device_check(DLDevice device) const {
    detail::throwing([&](Status& st) { device_check(device, st); });
  }
  /// As write_floor(kstage_token_t, Status&) const, throwing kstage::Error on failure.
  uint64_t write_floor(kstage_token_t attribute = 0) const {
    return detail::throwing([&](Status& st) { return write_floor(attribute, st); });
  }
  /// As attributes(Status&) const, throwing kstage::Error on failure.
  std::vector<kstage_token_t> attributes() const {
    return detail::throwing([&](Status& st) { return attributes(st); });
  }
  /// As attribute_info(kstage_token_t, Status&) const, throwing kstage::Error on failure.
  kstage_attribute_info_t attribute_info(kstage_token_t attribute) const {
    return detail::throwing([&](Status& st) { return attribute_info(attribute, st); });
  }
  /// As attribute_schemas(kstage_token_t, Status&) const, throwing kstage::Error on failure.
  std::vector<kstage_attribute_info_t> attribute_schemas(kstage_token_t attribute) const {
    return detail::throwing([&](Status& st) { return attribute_schemas(attribute, st); });
  }
  /// As read(const Query&, array_ref<kstage_token_t>, const ReadOptions&, Status&) const,
  /// throwing kstage::Error on failure.
  Read read(const Query& query, array_ref<kstage_token_t> attributes,
            const ReadOptions& options = {}) const {
    return detail::throwing([&](Status& st) { return read(query, attributes, options, st); });
  }
  /// As map(const Query&, kstage_token_t, uint64_t, DLDataType, const MapOptions&, Status&)
  /// const, throwing kstage::Error on failure.
  Map map(const Query& query, kstage_token_t attribute, uint64_t ordinal, DLDataType dtype,
          const MapOptions& options = {}) const {
    return detail::throwing(
        [&](Status& st) { return map(query, attribute, ordinal, dtype, options, st); });
  }
#endif

 private:
  // A ragged write of a single tensor is the C API's packed form when more than one source
  // row is wanted; the C++ API's one-View-per-row forms must be one row.
  bool one_source_row(const Query& query, const WriteOptions& o, const char* what,
                      Status& st) const {
    uint64_t wanted = o.count;
    if (!o.index_map.empty()) {
      wanted = 0;
      const size_t n =
          o.count ? std::min<size_t>(o.index_map.size(), size_t(o.count)) : o.index_map.size();
      for (size_t i = 0; i < n; ++i)
        wanted = std::max<uint64_t>(wanted, uint64_t(o.index_map[i]) + 1);
    } else if (wanted == 0) {
      wanted = query.count(st);
      if (!st.ok()) return false;
    }
    if (wanted == 1) return true;
    st = Status(
        KSTAGE_INVALID_ARGUMENT,
        std::string("write_ragged: ") + what + " for " + std::to_string(wanted) +
            " source rows: give one View per row, or a packed View with one row count per row");
    return false;
  }
  Op submit(kstage_token_t attribute, const Query& query, const DLTensor* tensors, size_t n,
            bool is_array, uint64_t ordinal, const WriteOptions& options, Status& st,
            std::shared_ptr<void> keep) const {
    if (!detail::check_selection(options, "", st)) return {};
    kstage_write_data_t d = detail::write_data(options);
    d.tensors = tensors;
    d.tensor_count = n;
    d.is_array = is_array;
    kstage_op_t op = 0;
    if (!detail::check(kstage_write_attribute(stage_, query.handle(), attribute, ordinal, &d,
                                              options.mode, &op),
                       st))
      return {};
    return Op(stage_, op, std::move(keep));
  }

  kstage_stage_t stage_ = 0;
  bool owned_ = true;
};

/// How the library was built and what it runs on: kstage_build_info's "key: value" lines
/// (kstage, kokkos_built, kokkos_running, host_execution, host_threads, backends, devices).
inline std::string build_info(Status& st) {
  const char* text = nullptr;
  if (!detail::check(kstage_build_info(&text), st)) return {};
  return text;
}
#if KSTAGE_CPP_EXCEPTIONS
/// As build_info(Status&), throwing kstage::Error on failure.
inline std::string build_info() {
  return detail::throwing([&](Status& st) { return build_info(st); });
}
#endif

}  // namespace kstage

#endif  // KSTAGE_HPP_STAGE_HPP_
