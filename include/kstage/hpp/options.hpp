// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/options.hpp
 * \brief The values the C++ API's calls take: dtype_of, the options of writes, reads
 * and maps, path ranges and filters.
 *
 * Part of the C++ API: include `kstage/kstage.hpp`, which includes every part and whose
 * file comment states the rules (handles, the two error forms, Views).
 */
#ifndef KSTAGE_HPP_OPTIONS_HPP_
#define KSTAGE_HPP_OPTIONS_HPP_

#include <kstage/dlpack.hpp>
#include <kstage/hpp/span.hpp>
#include <kstage/kstage.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace kstage {

// ---- dtypes ------------------------------------------------------------------------------------

/**
 * \brief The DLPack dtype of a C++ value type, with its array extents as lanes:
 * dtype_of<float>() is float32 lanes 1, dtype_of<float[3]>() lanes 3,
 * dtype_of<double[4][4]>() float64 lanes 16. Uses the DLPack bridge's table.
 */
template <class T>
constexpr DLDataType dtype_of() {
  using E = std::remove_cv_t<std::remove_all_extents_t<T>>;
  DLDataType d = impl::DLPackDType<E>::value;
  static_assert(std::rank_v<T> <= 3, "dtype_of: at most three array extents");
  constexpr uint64_t lanes = (std::rank_v<T> >= 1 ? std::extent_v<T, 0> : 1) *
                             (std::rank_v<T> >= 2 ? std::extent_v<T, 1> : 1) *
                             (std::rank_v<T> >= 3 ? std::extent_v<T, 2> : 1);
  static_assert(lanes >= 1 && lanes <= 65535, "dtype_of: DLPack lanes are 1..65535");
  d.lanes = uint16_t(lanes);
  return d;
}

// ---- options -----------------------------------------------------------------------------------

/// \brief Options of a write (kstage_write_data_t's fields; zero is every default).
struct WriteOptions {
  /// Source row of logical element i (host memory, `count` entries).
  span<const uint32_t> index_map;
  /// Bit i%64 of word i/64 selects logical element i (host memory, ceil(count/64) words).
  span<const uint64_t> mask;
  /// The leading `count` prims of the query; 0: all of them.
  uint64_t count = 0;
  /// UPSERT, INSERT or UPDATE (a WriteBatch has its own).
  kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT;
  /// Semantic of the values (NONE: an existing column's; kstage_write_data_t::semantic).
  kstage_semantic_t semantic = KSTAGE_SEMANTIC_NONE;
  /// REJECT or FORCE: what the write does to a prim holding the attribute with another schema
  /// (kstage_attribute_mode_t).
  kstage_attribute_mode_t attribute_mode = KSTAGE_ATTRIBUTE_MODE_REJECT;
  /// The producer's {stream, event} for device data (kstage.h).
  kstage_device_sync_t device_sync{0, 0};
  /// Where a column this write creates lives ({0, 0}: the stage's choice).
  DLDevice residency{DLDeviceType(0), 0};
  /// Source row of logical element i in device memory (`count` entries, on the write's
  /// device; exclusive with index_map): read in place by the device's gather and checked
  /// there, a bad entry failing the op (kstage.h "Device index maps and masks"). Host memory here
  /// (a HostSpace View) is a host index_map.
  device_span<const uint32_t> device_index_map;
  /// Mask words in device memory (ceil(count/64) words, on the write's device; exclusive with
  /// mask): read in place by the device's gather; the host reads the words back when it needs
  /// the selection (kstage.h "Device index maps and masks").
  device_span<const uint64_t> device_mask;
  /// index_map with int64 entries (host memory, `count` entries; exclusive with the other
  /// index maps and masks): a negative entry is out of range.
  span<const int64_t> index_map64;
  /// device_index_map with int64 entries (a device View<int64_t*>, as torch's index tensors),
  /// read in place as int64 by the device's gather and checked there.
  device_span<const int64_t> device_index_map64;
};

/// \brief Options of a read (kstage_read_desc_t's fields): the latest sealed values, zero-copy.
struct ReadOptions {
  /// Rows gathered into a buffer of the group's own, in prim order (no index map).
  bool compact = false;
  /// Only prims that changed at a sealed ordinal in [range_begin, range_end], plus tombstones.
  bool change_range = false;
  /// First ordinal of the change range (inclusive).
  uint64_t range_begin = 0;
  /// Last ordinal of the change range (inclusive).
  uint64_t range_end = 0;
  /// Where the reader wants the data ({0, 0}: the column's residency); another device implies
  /// compact.
  DLDevice target_device{DLDeviceType(0), 0};
  /// The reader's {stream, event}: a non-zero event is recorded after the work that produces
  /// the groups' data, a non-zero stream made to wait for it (kstage.h).
  kstage_device_sync_t device_sync{0, 0};
  /// Groups of at most this many prims, in query order (0: one group per attribute).
  uint64_t max_group_prims = 0;
  /// A zero-copy group on a device hands out its index map in device memory
  /// (ReadGroup::device_index_map; kstage_read_desc_t::device_index_map).
  bool device_index_map = false;
  /// A group whose prims are a progression with no list of ids (of a path-range query, or of a
  /// filter whose result is every prim and they are one run of ids) names them by their first id
  /// and stride (ReadGroup::prims_are_progression, ReadGroup::prim): no 8-byte id per prim is
  /// made for it (kstage_read_desc_t::prims_as_progression).
  bool prims_as_progression = false;

  /// The changes sealed at ordinals in [begin, end].
  static ReadOptions changes(uint64_t begin, uint64_t end) {
    ReadOptions o;
    o.change_range = true;
    o.range_begin = begin;
    o.range_end = end;
    return o;
  }
};

/// \brief Options of a map (kstage_map_desc_t's fields besides attribute and dtype).
struct MapOptions {
  /// Semantic of the values (NONE: an existing column's; kstage_map_desc_t::semantic).
  kstage_semantic_t semantic = KSTAGE_SEMANTIC_NONE;
  /// REJECT or FORCE, as a write's (kstage_attribute_mode_t).
  kstage_attribute_mode_t attribute_mode = KSTAGE_ATTRIBUTE_MODE_REJECT;
  /// UPSERT, INSERT or UPDATE (kstage_map_desc_t::prim_mode).
  kstage_prim_mode_t mode = KSTAGE_PRIM_MODE_UPSERT;
  /// Where a new column lives ({0, 0}: the stage's config residency, or the host).
  DLDevice residency{DLDeviceType(0), 0};
  /// Groups of at most this many prims (0: one group).
  uint64_t max_group_prims = 0;
  /// An array attribute: element_counts[i] is prim i's new length.
  bool is_array = false;
  /// An array map's new lengths, one per prim of the query (empty for a fixed-size map).
  span<const uint64_t> element_counts;
};

// ---- path ranges and filters ------------------------------------------------------------------

/// \brief A path range (kstage_intern_path_range): `count` paths with ids first, first + 1, ...
struct PathRange {
  PathRange() noexcept {}  // not an aggregate: a braced list passed to query() is a path list
  /// The id of member 0 (0 for an empty PathRange).
  kstage_path_t first = 0;
  /// The number of members.
  uint64_t count = 0;
  /// Member i's id (no check: i < count).
  kstage_path_t operator[](uint64_t i) const noexcept { return first + i; }
};

/// \brief How a path range was made (kstage_path_range_definition): kstage_intern_path_range's
/// arguments. The strings are the stage's, valid for its lifetime.
struct PathRangeDefinition {
  std::string_view parent;  ///< the parent path ("/" for top-level members)
  std::string_view prefix;  ///< the prefix ("" for none)
  uint64_t begin = 0;       ///< the number of the first member
  uint64_t count = 0;       ///< the number of members
};

/// \brief Which columns Stage::compute_world_transforms reads and writes
/// (kstage_transform_desc_t; a token 0 means the default name).
struct TransformOptions {
  /// INCREMENTAL (the default) or FULL.
  kstage_transform_mode_t mode = KSTAGE_TRANSFORM_INCREMENTAL;
  /// The local matrices (0: KSTAGE_LOCAL_MATRIX, "omni:xform").
  kstage_token_t local = 0;
  /// The reset flags (0: KSTAGE_RESET_XFORM_STACK, "omni:resetXformStack").
  kstage_token_t reset = 0;
  /// The world matrices written (0: KSTAGE_WORLD_MATRIX, "omni:fabric:worldMatrix").
  kstage_token_t world = 0;
};

/// \brief A filter over existing prims (kstage_filter_t): the AND of what is set.
struct Filter {
  Filter() noexcept {}  // not an aggregate: a braced list passed to query() is a path list
  /// Prims that hold every one of these attributes (sealed).
  span<const kstage_token_t> has;
  /// Prims whose path is in this list (an empty PathList handle: no constraint).
  kstage_path_list_t path_in = 0;
  /// Prims at or below this path (0: none).
  kstage_path_t path_prefix = 0;
};

}  // namespace kstage

#endif  // KSTAGE_HPP_OPTIONS_HPP_
