// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/read.hpp
 * \brief The C++ API's reads: Read and its ReadGroups, whose tensors are unmanaged
 * Kokkos Views of the group's memory.
 *
 * Part of the C++ API: include `kstage/kstage.hpp`, which includes every part and whose
 * file comment states the rules (handles, the two error forms, Views).
 */
#ifndef KSTAGE_HPP_READ_HPP_
#define KSTAGE_HPP_READ_HPP_

#include <kstage/dlpack.hpp>
#include <kstage/hpp/handles.hpp>
#include <kstage/hpp/span.hpp>
#include <kstage/hpp/status.hpp>
#include <kstage/kstage.h>

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>

namespace kstage {

namespace detail {

// An unmanaged View of tensor `t` (group data), or an empty one and `st` set.
// `usable` false: `st` already says why there is no tensor.
template <class DataType, class MemorySpace, class Layout>
Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view_of(
    const DLTensor* t, uint64_t index, uint64_t count, Status& st, bool usable = true) {
  using View = Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  typename View::pointer_type ptr = nullptr;
  Layout layout = impl::empty_layout<View>();
  if (!usable) return View(ptr, layout);
  if (index >= count) {
    st = Status(KSTAGE_INVALID_ARGUMENT, "tensor " + std::to_string(index) + " of a group with " +
                                             std::to_string(count) + " tensor(s)");
    return View(ptr, layout);
  }
  bool read_only = false;
  const impl::ViewRefusal r =
      impl::check_viewable<View>(t[index], 0, false, ptr, layout, read_only);
  if (!r.ok()) {
    st =
        Status(r.status,
               "tensor " + std::to_string(index) + " as a View of " +
                   impl::dtype_name(impl::DLPackDType<typename View::non_const_value_type>::value) +
                   " (rank " + std::to_string(int(View::rank)) + "): " + r.why);
    return View(nullptr, impl::empty_layout<View>());
  }
  check(KSTAGE_OK, st);
  return View(ptr, layout);
}

}  // namespace detail

namespace detail {

// The range-for iterator of a Read or a Map: the owner holds the current group
// (its `current_`); ++ fetches the next with the throwing next(), and the end
// is a null owner. Made at begin() on the first group. (Used only where
// exceptions are on: next(Group&) without a Status is the throwing form.)
template <class Owner, class Group>
class GroupIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Group;
  using difference_type = std::ptrdiff_t;
  using pointer = Group*;
  using reference = Group&;
  GroupIterator() = default;
  explicit GroupIterator(Owner* owner) : owner_(owner) { ++*this; }
  Group& operator*() const noexcept { return owner_->current_; }
  Group* operator->() const noexcept { return &owner_->current_; }
  GroupIterator& operator++() {
    if (!owner_->next(owner_->current_)) owner_ = nullptr;
    return *this;
  }
  bool operator==(const GroupIterator& o) const noexcept { return owner_ == o.owner_; }
  bool operator!=(const GroupIterator& o) const noexcept { return owner_ != o.owner_; }

 private:
  Owner* owner_ = nullptr;
};

}  // namespace detail

/// \brief One group of a read (kstage_read_group_t), released on destruction. Calls that
/// can fail come in the two forms of the file comment (Errors): with a trailing `Status&`,
/// which records a failure and returns an empty View or a null tensor, and without it,
/// throwing kstage::Error.
class ReadGroup {
 public:
  /// An empty group.
  ReadGroup() = default;
  /// Takes `o`'s group; `o` is left empty.
  ReadGroup(ReadGroup&& o) noexcept
      : h_(std::move(o.h_)),
        g_(std::exchange(o.g_, {})),
        device_map_(std::exchange(o.device_map_, false)),
        first_(std::exchange(o.first_, 0)),
        stride_(std::exchange(o.stride_, 0)) {}
  /// Releases this group, then takes `o`'s.
  ReadGroup& operator=(ReadGroup&& o) noexcept {
    h_ = std::move(o.h_);
    g_ = std::exchange(o.g_, {});
    device_map_ = std::exchange(o.device_map_, false);
    first_ = std::exchange(o.first_, 0);
    stride_ = std::exchange(o.stride_, 0);
    return *this;
  }
  /// The C handle (0 when empty), still owned by this object.
  kstage_group_t handle() const noexcept { return h_.get(); }
  /// True when the object holds a group.
  explicit operator bool() const noexcept { return bool(h_); }
  /// The C descriptor (valid while this group lives).
  const kstage_read_group_t& raw() const noexcept { return g_; }

  /// The attribute read.
  kstage_token_t attribute() const noexcept { return g_.attribute; }
  /// The attribute's write floor at the snapshot.
  uint64_t ordinal() const noexcept { return g_.ordinal; }
  /// The group's prims (path ids); prim i is logical element i. Empty for a group whose prims
  /// are a progression (prims_are_progression()): prim(i) names them.
  span<const kstage_path_t> prims() const noexcept {
    return g_.prims ? span<const kstage_path_t>(g_.prims, size_t(g_.prim_count))
                    : span<const kstage_path_t>();
  }
  /// The number of the group's prims (logical elements), listed or not.
  uint64_t prim_count() const noexcept { return g_.prim_count; }
  /// True when the read asked for ReadOptions::prims_as_progression and this group's prims are a
  /// progression with no list of ids: prim i is progression_first() + i * progression_stride()
  /// (kstage_group_prim_progression).
  bool prims_are_progression() const noexcept { return g_.prims == nullptr && g_.prim_count > 0; }
  /// The first prim of a progression group (prims_are_progression(); else 0).
  kstage_path_t progression_first() const noexcept { return first_; }
  /// The stride of a progression group's ids (prims_are_progression(); else 0).
  uint64_t progression_stride() const noexcept { return stride_; }
  /// Prim i, listed or a progression's (no check: i < prim_count()).
  kstage_path_t prim(uint64_t i) const noexcept {
    return g_.prims ? g_.prims[i] : kstage_path_t(first_ + i * stride_);
  }
  /// Row of prim i (empty: row i, as for compact reads and array groups). Host memory, unless
  /// the read asked for ReadOptions::device_index_map and the group is on a device: then use
  /// device_index_map().
  span<const uint32_t> index_map() const noexcept {
    return g_.data.index_map ? span<const uint32_t>(g_.data.index_map, size_t(g_.data.count))
                             : span<const uint32_t>();
  }
  /// The same map where it lives, labelled with the group's device: the device's memory for a
  /// read with ReadOptions::device_index_map of a group on a device, else host memory.
  device_span<const uint32_t> device_index_map() const noexcept {
    if (!g_.data.index_map || g_.data.tensor_count == 0) return {};
    const DLDevice d = g_.data.tensors[0].device;
    const bool on_device = !is_host_memory(d.device_type) && device_map_;
    return {g_.data.index_map, size_t(g_.data.count), on_device ? d : DLDevice{kDLCPU, 0}};
  }
  /// True for a tombstone group: prims() lost the attribute in the change range; no tensors.
  bool is_tombstone() const noexcept { return g_.is_delete; }
  /// True for an array attribute: one tensor per prim.
  bool is_array() const noexcept { return g_.is_array; }
  /// The column's dtype (lanes = tuple width).
  DLDataType dtype() const noexcept { return g_.dtype; }
  /// The column's semantic.
  kstage_semantic_t semantic() const noexcept { return g_.semantic; }
  /// The stage's {stream, event} for device data ({0, 0}: complete).
  kstage_device_sync_t device_sync() const noexcept { return g_.data.device_sync; }
  /// The number of tensors (see kstage_data_t::tensors).
  uint64_t tensor_count() const noexcept { return g_.data.tensor_count; }
  /// Tensor `i` as the C API describes it (no bounds check: i < tensor_count()).
  const DLTensor& tensor(uint64_t i) const noexcept { return g_.data.tensors[i]; }

  /// Tensor i as an unmanaged View (const data: groups are read-only). See the file comment.
  template <class DataType, class MemorySpace = Kokkos::HostSpace,
            class Layout = Kokkos::LayoutRight>
  Kokkos::View<DataType, Layout, MemorySpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> view(
      uint64_t i, Status& st) const {
    static_assert(
        std::is_const_v<typename Kokkos::ViewTraits<DataType>::value_type>,
        "a read group is read-only: view it as const data, e.g. view<const float*[3]>(i)");
    return detail::view_of<DataType, MemorySpace, Layout>(g_.data.tensors, i, g_.data.tensor_count,
                                                          st);
  }
  /// Tensor i as an owning DLPack tensor (kstage_group_export).
  DLManagedTensorVersioned* export_dlpack(uint64_t i, uint64_t flags, Status& st) const {
    DLManagedTensorVersioned* out = nullptr;
    detail::check(kstage_group_export(h_.stage(), h_.get(), i, flags, &out), st);
    return out;
  }
  /// Tensor i for a consumer on its device stream `stream` (kstage_group_export_on_stream): the
  /// stream is ordered after the data, and the deleter releases the memory only after the work
  /// queued on that stream (for consumers that call deleters without synchronising).
  DLManagedTensorVersioned* export_dlpack_on_stream(uint64_t i, uintptr_t stream, uint64_t flags,
                                                    Status& st) const {
    DLManagedTensorVersioned* out = nullptr;
    detail::check(kstage_group_export_on_stream(h_.stage(), h_.get(), i, flags, stream, &out), st);
    return out;
  }
  /// Orders a consumer's {stream, event} after the work producing the data (kstage_group_sync).
  void sync(kstage_device_sync_t consumer, Status& st) const {
    detail::check(kstage_group_sync(h_.stage(), h_.get(), consumer), st);
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As view(uint64_t, Status&) const, throwing kstage::Error when the tensor does not fit.
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
  /// As export_dlpack_on_stream(uint64_t, uintptr_t, uint64_t, Status&) const, throwing
  /// kstage::Error on failure.
  DLManagedTensorVersioned* export_dlpack_on_stream(uint64_t i, uintptr_t stream,
                                                    uint64_t flags = 0) const {
    return detail::throwing(
        [&](Status& st) { return export_dlpack_on_stream(i, stream, flags, st); });
  }
  /// As sync(kstage_device_sync_t, Status&) const, throwing kstage::Error on failure.
  void sync(kstage_device_sync_t consumer) const {
    detail::throwing([&](Status& st) { sync(consumer, st); });
  }
#endif
  /// Releases the group now (its data stays valid until here).
  void reset() noexcept {
    h_.reset();
    g_ = {};
    device_map_ = false;
    first_ = stride_ = 0;
  }

 private:
  friend class Read;
  detail::UniqueHandle<kstage_release_group> h_;
  kstage_read_group_t g_{};
  bool device_map_ = false;  // the read asked for device index maps
  uint64_t first_ = 0;       // a progression group's first prim and stride
  uint64_t stride_ = 0;
};

/// \brief An open read (kstage_read_t): iterate its groups, with next() or range-for.
class Read {
 public:
  /// An empty Read.
  Read() = default;
  /// The C handle (0 when empty), still owned by this object.
  kstage_read_t handle() const noexcept { return h_.get(); }
  /// True when the object holds a read.
  explicit operator bool() const noexcept { return bool(h_); }

  /// The next group into `group` (releasing what it held): true, or false at the end
  /// (`st` ok) or on failure (`st` set).
  bool next(ReadGroup& group, Status& st, uint64_t timeout_ns = KSTAGE_TIMEOUT_INFINITE) {
    group.reset();
    kstage_read_group_t g{};
    const kstage_status_t code = kstage_fetch_read_next(h_.stage(), h_.get(), timeout_ns, &g);
    if (code == KSTAGE_END_OF_ITERATION) return !detail::check(KSTAGE_OK, st);
    if (!detail::check(code, st)) return false;
    group.h_ = detail::UniqueHandle<kstage_release_group>(h_.stage(), g.handle);
    group.g_ = g;
    group.device_map_ = device_map_;
    if (g.prims == nullptr && g.prim_count > 0 &&
        !detail::check(
            kstage_group_prim_progression(h_.stage(), g.handle, &group.first_, &group.stride_),
            st)) {
      group.reset();
      return false;
    }
    return true;
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As next(ReadGroup&, Status&, uint64_t), throwing kstage::Error on failure (false at
  /// the end).
  bool next(ReadGroup& group, uint64_t timeout_ns = KSTAGE_TIMEOUT_INFINITE) {
    return detail::throwing([&](Status& st) { return next(group, st, timeout_ns); });
  }

  /// Input iterator over the groups; each is released when the iterator moves on
  /// (move it out to keep it). Throws kstage::Error when a fetch fails.
  using iterator = detail::GroupIterator<Read, ReadGroup>;
  /// An iterator at the first group (fetched here).
  iterator begin() { return iterator(this); }
  /// The end iterator.
  iterator end() noexcept { return iterator(); }
#endif
  /// Releases the read (groups already fetched stay valid until released).
  void reset() noexcept {
    current_.reset();
    h_.reset();
  }

 private:
  friend class Stage;
  template <class, class>
  friend class detail::GroupIterator;
  Read(kstage_stage_t s, kstage_read_t h, bool device_map) : h_(s, h), device_map_(device_map) {}
  detail::UniqueHandle<kstage_release_read> h_;
  bool device_map_ = false;  // ReadOptions::device_index_map
  ReadGroup current_;        // the range-for group
};

}  // namespace kstage

#endif  // KSTAGE_HPP_READ_HPP_
