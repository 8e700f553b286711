// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/write.hpp
 * \brief The C++ API's writes of several attributes as one op (WriteBatch), and how
 * WriteOptions become a kstage_write_data_t.
 *
 * Part of the C++ API: include `kstage/kstage.hpp`, which includes every part and whose
 * file comment states the rules (handles, the two error forms, Views).
 */
#ifndef KSTAGE_HPP_WRITE_HPP_
#define KSTAGE_HPP_WRITE_HPP_

#include <kstage/dlpack.hpp>
#include <kstage/hpp/options.hpp>
#include <kstage/hpp/status.hpp>
#include <kstage/kstage.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kstage {

namespace detail {

template <class T, bool = Kokkos::is_view<T>::value>
struct is_view_rank_1_to_3 : std::false_type {};
template <class T>
struct is_view_rank_1_to_3<T, true> : std::bool_constant<(T::rank >= 1 && T::rank <= 3)> {};

}  // namespace detail

/**
 * \brief Several attributes written as one op (kstage_write_attributes): all are
 * accepted or none is. Each add() keeps a copy of its View, which the write's
 * Op then keeps until its work is done (see Op); add() ignores options.mode:
 * the batch's mode applies.
 */
class WriteBatch {
 public:
  /// An empty batch whose writes use prim mode `mode`.
  explicit WriteBatch(kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT) : mode_(mode) {}
  /// Adds a write of `attribute` from a View of rank 1-3 (a fixed-size attribute).
  template <class View, class = std::enable_if_t<detail::is_view_rank_1_to_3<View>::value>>
  WriteBatch& add(kstage_token_t attribute, const View& view, const WriteOptions& options = {}) {
    add(attribute, borrow_dlpack(view).tensor(), options);
    items_.back().keep = std::make_shared<View>(view);
    return *this;
  }
  /// A borrowed DLTensor (copied here, with its shape and strides).
  WriteBatch& add(kstage_token_t attribute, const DLTensor& tensor,
                  const WriteOptions& options = {}) {
    Item item;
    item.attribute = attribute;
    item.options = options;
    item.tensor = tensor;
    for (int d = 0; d < tensor.ndim && d < 3; ++d) {
      item.shape[d] = tensor.shape ? tensor.shape[d] : 0;
      item.strides[d] = tensor.strides ? tensor.strides[d] : 0;
    }
    item.ndim_ok = tensor.ndim >= 0 && tensor.ndim <= 3;
    items_.push_back(item);
    return *this;
  }
  /// The batch's prim mode.
  kstage_prim_mode_t mode() const noexcept { return mode_; }
  /// The number of writes added.
  size_t size() const noexcept { return items_.size(); }

 private:
  friend class Stage;
  struct Item {
    kstage_token_t attribute = 0;
    WriteOptions options;
    DLTensor tensor{};
    int64_t shape[3] = {};
    int64_t strides[3] = {};
    bool ndim_ok = true;
    std::shared_ptr<void> keep;  // the View, kept by the write's Op
  };
  kstage_prim_mode_t mode_;
  std::vector<Item> items_;
};

namespace detail {

// The C API reads `count` index_map entries and ceil(count / 64) mask words: spans shorter
// than that are refused here (the C API cannot see their sizes).
inline bool check_selection(const WriteOptions& o, const std::string& where, Status& st) {
  const uint64_t words = o.count / 64 + (o.count % 64 != 0);
  std::string what;
  // The selections set, by the options' names (the C API would name its fields instead).
  std::string set;
  int n_set = 0;
  for (auto [on, name] : {std::pair{!o.index_map.empty(), "options.index_map"},
                          std::pair{!o.device_index_map.empty(), "options.device_index_map"},
                          std::pair{!o.index_map64.empty(), "options.index_map64"},
                          std::pair{!o.device_index_map64.empty(), "options.device_index_map64"},
                          std::pair{!o.mask.empty(), "options.mask"},
                          std::pair{!o.device_mask.empty(), "options.device_mask"}})
    if (on) set += std::string(n_set++ == 0 ? "" : " and ") + name;
  if (n_set > 1) {
    st = Status(KSTAGE_INVALID_ARGUMENT,
                where + set + (n_set == 2 ? " are both set" : " are all set") + "; pass one");
    return false;
  }
  if (!o.device_index_map.empty() && o.device_index_map.size() < o.count)
    what = "options.device_index_map has " + std::to_string(o.device_index_map.size()) + " entries";
  else if (!o.device_index_map64.empty() && o.device_index_map64.size() < o.count)
    what = "options.device_index_map64 has " + std::to_string(o.device_index_map64.size()) +
           " entries";
  else if (!o.index_map64.empty() && o.index_map64.size() < o.count)
    what = "options.index_map64 has " + std::to_string(o.index_map64.size()) + " entries";
  else if (!o.device_mask.empty() && o.device_mask.size() < words)
    what = "options.device_mask has " + std::to_string(o.device_mask.size()) + " words (" +
           std::to_string(o.device_mask.size() * 64) + " prims)";
  else if (!o.index_map.empty() && o.index_map.size() < o.count)
    what = "options.index_map has " + std::to_string(o.index_map.size()) + " entries";
  else if (!o.mask.empty() && o.mask.size() < words)
    what = "options.mask has " + std::to_string(o.mask.size()) + " words (" +
           std::to_string(o.mask.size() * 64) + " prims)";
  if (what.empty()) return true;
  st = Status(KSTAGE_INVALID_ARGUMENT,
              where + what + " but options.count is " + std::to_string(o.count));
  return false;
}

inline kstage_write_data_t write_data(const WriteOptions& o) {
  kstage_write_data_t d = kstage_write_data_init();
  d.semantic = o.semantic;
  d.attribute_mode = uint8_t(o.attribute_mode);
  d.count = o.count;
  d.index_map = o.index_map.empty() ? nullptr : o.index_map.data();
  if (!o.device_index_map.empty()) {
    d.index_map = o.device_index_map.data();
    d.selection_device = o.device_index_map.device();
  }
  d.index_map64 = o.index_map64.empty() ? nullptr : o.index_map64.data();
  if (!o.device_index_map64.empty()) {
    d.index_map64 = o.device_index_map64.data();
    d.selection_device = o.device_index_map64.device();
  }
  d.mask = o.mask.empty() ? nullptr : o.mask.data();
  if (!o.device_mask.empty()) {
    d.mask = o.device_mask.data();
    d.selection_device = o.device_mask.device();
  }
  d.device_sync = o.device_sync;
  d.residency = o.residency;
  return d;
}

}  // namespace detail

}  // namespace kstage

#endif  // KSTAGE_HPP_WRITE_HPP_
