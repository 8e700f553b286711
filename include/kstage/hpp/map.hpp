// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/map.hpp
 * \brief The C++ API's maps: Map and its writable MapGroups.
 *
 * Part of the C++ API: include `kstage/kstage.hpp`, which includes every part and whose
 * file comment states the rules (handles, the two error forms, Views).
 *
 * A map group's Views and the range-for iterator are read.hpp's (detail::view_of,
 * detail::GroupIterator).
 */
#ifndef KSTAGE_HPP_MAP_HPP_
#define KSTAGE_HPP_MAP_HPP_

#include <kstage/hpp/handles.hpp>
#include <kstage/hpp/read.hpp>
#include <kstage/hpp/span.hpp>
#include <kstage/hpp/status.hpp>
#include <kstage/kstage.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace kstage {

/// \brief One writable group of a map (kstage_map_group_info_t). Owns nothing: its
/// buffers belong to the Map, and are committed by commit() or Map::commit(). Once
/// its map is committed, abandoned or destroyed, or the group itself committed,
/// view(), export_dlpack() and commit() refuse it (INVALID_HANDLE); the raw
/// accessors (tensor(), prims(), raw()) then point at freed memory.
class MapGroup {
 public:
  /// An empty group.
  MapGroup() = default;
  /// Takes `o`'s group; `o` is left empty.
  MapGroup(MapGroup&& o) noexcept
      : stage_(std::exchange(o.stage_, 0)),
        map_(std::exchange(o.map_, 0)),
        g_(std::exchange(o.g_, {})),
        alive_(std::move(o.alive_)) {}
  /// Takes `o`'s group; `o` is left empty. The group this object held stays mapped (its
  /// Map owns it).
  MapGroup& operator=(MapGroup&& o) noexcept {
    if (this == &o) return *this;
    stage_ = std::exchange(o.stage_, 0);
    map_ = std::exchange(o.map_, 0);
    g_ = std::exchange(o.g_, {});
    alive_ = std::move(o.alive_);
    return *this;
  }
  /// The C handle of the group (0 when empty).
  kstage_map_group_t handle() const noexcept { return g_.handle; }
  /// True when the object holds a group (not committed, moved from or never fetched).
  explicit operator bool() const noexcept { return g_.handle != 0; }
  /// The C descriptor.
  const kstage_map_group_info_t& raw() const noexcept { return g_; }
  /// The mapped attribute.
  kstage_token_t attribute() const noexcept { return g_.attribute; }
  /// The map's ordinal, at which the group is committed.
  uint64_t ordinal() const noexcept { return g_.ordinal; }
  /// The group's prims (path ids); prim i is logical element i.
  span<const kstage_path_t> prims() const noexcept { return {g_.prims, size_t(g_.prim_count)}; }
  /// Row of prim i in a fixed-size group's tensor (empty: row i).
  span<const uint32_t> index_map() const noexcept {
    return g_.data.index_map ? span<const uint32_t>(g_.data.index_map, size_t(g_.data.count))
                             : span<const uint32_t>();
  }
  /// The column's dtype (lanes = tuple width).
  DLDataType dtype() const noexcept { return g_.dtype; }
  /// The number of tensors (1 for a fixed-size map, one per prim for an array map).
  uint64_t tensor_count() const noexcept { return g_.data.tensor_count; }
  /// Tensor `i` as the C API describes it (no bounds check: i < tensor_count()).
  const DLTensor& tensor(uint64_t i) const noexcept { return g_.data.tensors[i]; }

  /// Tensor i as a writable unmanaged View (fill every row before committing).
  template <class DataType, class MemorySpace = Kokkos::HostSpace,
            class Layout = Kokkos::LayoutRight>
  Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view(
      uint64_t i, Status& st) const {
    const bool ok = live(st);
    return detail::view_of<DataType, MemorySpace, Layout>(g_.data.tensors, i,
                                                          ok ? g_.data.tensor_count : 0, st, ok);
  }
  /// Tensor i as a writable DLPack tensor (kstage_map_group_export).
  DLManagedTensorVersioned* export_dlpack(uint64_t i, uint64_t flags, Status& st) const {
    DLManagedTensorVersioned* out = nullptr;
    if (live(st))
      detail::check(kstage_map_group_export(stage_, map_, g_.handle, i, flags, &out), st);
    return out;
  }
  /// Commits this group alone (kstage_unmap_group); on failure it stays mapped. A committed
  /// group is empty.
  Op commit(kstage_device_sync_t done_sync, Status& st) {
    kstage_op_t op = 0;
    if (!live(st) ||
        !detail::check(kstage_unmap_group(stage_, map_, g_.handle, done_sync, &op), st))
      return {};
    const kstage_stage_t stage = stage_;
    *this = MapGroup();
    return Op(stage, op);
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As view(uint64_t, Status&) const, throwing kstage::Error on failure.
  template <class DataType, class MemorySpace = Kokkos::HostSpace,
            class Layout = Kokkos::LayoutRight>
  Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view(
      uint64_t i) const {
    return detail::throwing([&](Status& st) { return view<DataType, MemorySpace, Layout>(i, st); });
  }
  /// As export_dlpack(uint64_t, uint64_t, Status&) const, throwing kstage::Error on failure.
  DLManagedTensorVersioned* export_dlpack(uint64_t i, uint64_t flags = 0) const {
    return detail::throwing([&](Status& st) { return export_dlpack(i, flags, st); });
  }
  /// As commit(kstage_device_sync_t, Status&), throwing kstage::Error on failure.
  Op commit(kstage_device_sync_t done_sync = {0, 0}) {
    return detail::throwing([&](Status& st) { return commit(done_sync, st); });
  }
#endif

 private:
  friend class Map;
  bool live(Status& st) const {
    if (g_.handle == 0) {
      st = Status(KSTAGE_INVALID_HANDLE,
                  "an empty map group (committed, moved from or never fetched)");
      return false;
    }
    if (alive_.expired()) {
      st = Status(KSTAGE_INVALID_HANDLE,
                  "map group " + std::to_string(g_.handle) +
                      ": its map was committed, abandoned or destroyed, and its "
                      "buffers with it");
      return false;
    }
    uint64_t floor = 0;  // the stage destroyed under a live Map took the buffers too
    if (kstage_get_write_floor(stage_, 0, &floor) != KSTAGE_OK) {
      st = Status(KSTAGE_INVALID_HANDLE,
                  "map group " + std::to_string(g_.handle) +
                      ": its stage was destroyed, and the map's buffers with it");
      return false;
    }
    return true;
  }
  kstage_stage_t stage_ = 0;
  kstage_map_t map_ = 0;
  kstage_map_group_info_t g_{};
  std::weak_ptr<const char> alive_;  // expires with the map
};

/// \brief An open map (kstage_map_t). Destroyed without commit(), it is abandoned
/// (kstage_release_map): nothing it handed out is written. Calls that can fail come in the
/// two forms of the file comment (Errors).
class Map {
 public:
  /// An empty Map.
  Map() = default;
  /// The C handle (0 when empty), still owned by this object.
  kstage_map_t handle() const noexcept { return h_.get(); }
  /// True when the object holds an open map.
  explicit operator bool() const noexcept { return bool(h_); }

  /// The next writable group: true, or false at the end (`st` ok) or on failure.
  bool next(MapGroup& group, Status& st, uint64_t timeout_ns = KSTAGE_TIMEOUT_INFINITE) {
    group = MapGroup();
    kstage_map_group_info_t g{};
    const kstage_status_t code = kstage_fetch_map_next(h_.stage(), h_.get(), timeout_ns, &g);
    if (code == KSTAGE_END_OF_ITERATION) return !detail::check(KSTAGE_OK, st);
    if (!detail::check(code, st)) return false;
    group.stage_ = h_.stage();
    group.map_ = h_.get();
    group.g_ = g;
    group.alive_ = alive_;
    return true;
  }
  /// Commits every fetched group not yet committed, as one op, and ends the map
  /// (kstage_unmap_attribute). On failure nothing is committed and the map stays open.
  Op commit(kstage_device_sync_t done_sync, Status& st) {
    kstage_op_t op = 0;
    if (!detail::check(kstage_unmap_attribute(h_.stage(), h_.get(), done_sync, &op), st)) return {};
    const kstage_stage_t stage = h_.stage();
    h_.release();  // unmapping ended the map: nothing left to release
    current_ = MapGroup();
    alive_.reset();
    return Op(stage, op);
  }
  /// Commits with done_sync {0, 0}: commit({0, 0}, st).
  Op commit(Status& st) { return commit({0, 0}, st); }
  /// Abandons the map once the work `producer` has queued so far has run
  /// (kstage_release_map_after): for a producer that gives the map up with its writes into
  /// device buffers still queued. On failure the map stays open.
  bool abandon_after(kstage_device_sync_t producer, Status& st) {
    if (!detail::check(kstage_release_map_after(h_.stage(), h_.get(), producer), st)) return false;
    h_.release();  // released: nothing left to release
    current_ = MapGroup();
    alive_.reset();
    return true;
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As abandon_after(kstage_device_sync_t, Status&), throwing kstage::Error on failure.
  void abandon_after(kstage_device_sync_t producer) {
    detail::throwing([&](Status& st) { return abandon_after(producer, st); });
  }
  /// As next(MapGroup&, Status&, uint64_t), throwing kstage::Error on failure (false at
  /// the end).
  bool next(MapGroup& group, uint64_t timeout_ns = KSTAGE_TIMEOUT_INFINITE) {
    return detail::throwing([&](Status& st) { return next(group, st, timeout_ns); });
  }
  /// As commit(kstage_device_sync_t, Status&), throwing kstage::Error on failure.
  Op commit(kstage_device_sync_t done_sync = {0, 0}) {
    return detail::throwing([&](Status& st) { return commit(done_sync, st); });
  }
  /// Input iterator over the groups (each stays mapped until committed).
  using iterator = detail::GroupIterator<Map, MapGroup>;
  /// An iterator at the first group (fetched here).
  iterator begin() { return iterator(this); }
  /// The end iterator.
  iterator end() noexcept { return iterator(); }
#endif
  /// Abandons the map now (kstage_release_map).
  void reset() noexcept {
    current_ = MapGroup();
    alive_.reset();
    h_.reset();
  }

 private:
  friend class Stage;
  template <class, class>
  friend class detail::GroupIterator;
  Map(kstage_stage_t s, kstage_map_t h) : h_(s, h), alive_(std::make_shared<const char>('\0')) {}
  detail::UniqueHandle<kstage_release_map> h_;
  MapGroup current_;
  std::shared_ptr<const char> alive_;  // its groups' weak_ptrs expire with it
};

}  // namespace kstage

#endif  // KSTAGE_HPP_MAP_HPP_
