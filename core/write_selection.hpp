// SPDX-License-Identifier: Apache-2.0
// The selection of one write: which of the query's prims it targets (count, mask) and which
// source row feeds each (index_map, index_map64). Read from the caller's descriptor once
// (decode_selection), checked against where it lives and against the source's row count, and
// converted into what the staging kernels take (uint32 entries, a mask's selected ids). The
// write path (core/transport.cpp) only asks it questions; the rows themselves move there.
#pragma once

#include "core/backend.hpp"
#include "core/column.hpp"

#include <cstdint>

namespace kstage::core {

// Validation of count against the query happens when the selection is decoded; index_map
// entries are checked where they are used (fused into the gather for fixed-size rows).
struct Selection {
  uint64_t count = 0;              // logical elements addressed: query prims [0, count)
  const uint64_t* mask = nullptr;  // set only when some of the first `count` bits are clear
  // The index map as uint32 entries, read by the host's code and kernels: the caller's
  // index_map, or a host index_map64 converted (`converted`). Null for a device index_map64,
  // which only the device's gather reads.
  const uint32_t* index_map = nullptr;
  // The caller's index_map64: its values name bad entries; a device one is the gather's index.
  const int64_t* index_map64 = nullptr;
  // A host index_map64's entries as uint32, an entry outside [0, 2^32) as UINT32_MAX (out of
  // range of every row count below 2^32); the first such entry is `first_wide`.
  BufferPtr converted;
  size_t first_wide = SIZE_MAX;
  // The index map or mask is device memory (selection_device): read and checked on the device
  // only.
  bool on_device = false;
  size_t selected = 0;  // mask: set bits among the first `count`
  // A mask with some bits clear: the selected element ids (host memory);
  // source row e feeds element e. A mask with every bit set selects like
  // no mask at all, and leaves this null.
  BufferPtr subset;
  const uint32_t* subset_index() const {
    return subset ? reinterpret_cast<const uint32_t*>(subset->data()) : nullptr;
  }
  size_t targets() const { return mask ? selected : size_t(count); }
  bool indexed() const { return index_map != nullptr || index_map64 != nullptr; }
  const char* map_name() const { return index_map64 ? "index_map64" : "index_map"; }
};

// --- decoding: before any tensor is looked at --------------------------------------------------
// The write's selection against a query of `query_count` prims: which fields may go together,
// count, a device selection's kind, a host mask's set bits, and a host index_map64 converted on
// `host`.
Result<Selection> decode_selection(const kstage_write_data_t& d, uint64_t query_count,
                                   Backend& host);

// --- checks: once the tensors and the column are known ------------------------------------------
// A device index_map or mask lives with the tensors, on the column's device, where the gather
// reads it: what can be checked without reading it. `tensors` is tensor 0's device; `attr`
// names the column.
Status check_device_selection(const kstage_write_data_t& d, const Selection& sel, DLDevice tensors,
                              Backend& column, const char* attr);
// An index_map64 entry no row count kstage takes can hold (below 0, or 2^32 and above).
Status wide_entry_error(const Selection& sel);
// Entry `i` of the index map is `rows` or more (`rows_from` says where that count came from).
Status index_map_error(const Selection& sel, size_t i, uint64_t rows, const char* rows_from);
// Without an index_map, source row i feeds target element i: the source must
// have exactly one row per addressed element.
Status check_row_count(const kstage_write_data_t& d, const Selection& sel, uint64_t rows,
                       const char* rows_from);
// Source rows the index_map requires: one past its highest entry.
uint64_t index_map_rows(const Selection& sel);
Status check_index_map(const Selection& sel, uint64_t rows, const char* rows_from);

// --- conversions: what staging and an adopted write keep --------------------------------------
// The selected element ids of a mask (Selection::subset), without moving rows.
Status select_masked(Selection& sel, Backend& host);
// Whether an index_map is an arithmetic progression (ascending or constant, as a local
// index_map often is, every entry below 2^32): then it is its first entry and step, and an
// adopted write keeps those instead of a copy.
bool index_map_progression(const uint32_t* map, size_t n, Backend& host, uint64_t& first,
                           uint64_t& step);
// The index_map of an adopted write (out.source_index), checked against the tensor's `rows` as
// it is copied (the caller's map is free once the op completes).
Status copy_index_map(const Selection& sel, uint64_t rows, const char* rows_from, Backend& host,
                      StagedRows& out);

}  // namespace kstage::core
