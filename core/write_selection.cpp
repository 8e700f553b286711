// SPDX-License-Identifier: Apache-2.0
#include "core/write_selection.hpp"

#include "core/dtype.hpp"
#include "core/transport.hpp"

#include <algorithm>
#include <atomic>

namespace kstage::core {
namespace {

// Lowers `first` to `k` unless it already is lower: the first bad position that parallel chunks
// of a check find.
void lower_to(std::atomic<size_t>& first, size_t k) {
  size_t seen = first.load();
  while (k < seen && !first.compare_exchange_weak(seen, k)) {
  }
}

// A host index_map64 as uint32 entries (Selection::converted), in parallel chunks on a parallel
// host; an entry outside [0, 2^32) becomes UINT32_MAX, and the first one is `first_wide`.
Status convert_index_map64(Selection& sel, Backend& host) {
  const size_t n = size_t(sel.count);
  KSTAGE_ASSIGN_OR_RETURN(sel.converted, host.allocate(std::max<size_t>(n * sizeof(uint32_t), 1)));
  struct Convert {
    const int64_t* from;
    uint32_t* to;
    std::atomic<size_t> first_wide;
  } convert{sel.index_map64, reinterpret_cast<uint32_t*>(sel.converted->data()), {SIZE_MAX}};
  host.host_for(
      n,
      [](const void* context, size_t begin, size_t end) {
        auto& c = *static_cast<Convert*>(const_cast<void*>(context));
        bool wide = false;
        for (size_t k = begin; k < end; ++k) {
          const uint64_t v = uint64_t(c.from[k]);  // a negative entry: above 2^63
          wide |= v > UINT32_MAX;
          c.to[k] = v > UINT32_MAX ? UINT32_MAX : uint32_t(v);
        }
        if (!wide) return;
        size_t k = begin;
        while (uint64_t(c.from[k]) <= UINT32_MAX) ++k;
        lower_to(c.first_wide, k);
      },
      &convert);
  sel.first_wide = convert.first_wide.load();
  sel.index_map = reinterpret_cast<const uint32_t*>(sel.converted->data());
  return Status::OK();
}

}  // namespace

Status wide_entry_error(const Selection& sel) {
  return error(KSTAGE_INVALID_ARGUMENT,
               "index_map64[%zu] = %lld is not a source row kstage can address (0 <= row < 2^32)",
               sel.first_wide, (long long)sel.index_map64[sel.first_wide]);
}

Result<Selection> decode_selection(const kstage_write_data_t& d, uint64_t query_count,
                                   Backend& host) {
  Selection sel;
  std::string set;  // the selections the write sets, by name
  int n_set = 0;
  for (auto [on, name] :
       {std::pair{d.index_map != nullptr, "index_map"},
        std::pair{d.index_map64 != nullptr, "index_map64"}, std::pair{d.mask != nullptr, "mask"}})
    if (on) set += std::string(n_set++ == 0 ? "" : " and ") + name;
  if (n_set > 1)
    return error(KSTAGE_INVALID_ARGUMENT, "%s are mutually exclusive; pass one", set.c_str());
  const char* const map = d.index_map64 ? "index_map64" : "index_map";
  if ((d.index_map || d.index_map64 || d.mask) && d.count == 0)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "count must be non-zero when %s is supplied (count = 0 means every prim of the "
                 "query, which is never what a sparse write means)",
                 d.mask ? "a mask" : map);
  if (d.count > query_count)
    return error(KSTAGE_INVALID_ARGUMENT, "count %llu exceeds the query's %llu prims",
                 (unsigned long long)d.count, (unsigned long long)query_count);
  sel.count = d.count ? d.count : query_count;
  if (sel.count > UINT32_MAX)
    return error(KSTAGE_INVALID_ARGUMENT, "count %llu exceeds 2^32-1 rows",
                 (unsigned long long)sel.count);
  sel.index_map = d.index_map;
  sel.index_map64 = d.index_map64;
  const DLDevice where = d.selection_device;
  sel.on_device = (d.index_map || d.index_map64 || d.mask) && where.device_type != 0 &&
                  where.device_type != kDLCPU;
  if (sel.on_device && d.is_array)
    return error(KSTAGE_NOT_SUPPORTED,
                 "%s in device memory (selection_device %s:%d) for an array attribute is not "
                 "supported yet (fixed-size attributes take one); pass a host %s",
                 d.mask ? "mask" : map, device_type_name(where.device_type), int(where.device_id),
                 d.mask ? "mask" : map);
  if (d.index_map64 && !sel.on_device) KSTAGE_RETURN_NOT_OK(convert_index_map64(sel, host));
  if (sel.on_device && d.mask) {
    // Read on the device only: every element may be selected until the host learns the
    // selection (MaskSelection), when the write is sealed or its prim mode is checked.
    sel.mask = d.mask;
    sel.selected = size_t(sel.count);
  } else if (d.mask) {
    sel.selected = kernels::mask_popcount(d.mask, size_t(sel.count));
    if (sel.selected != sel.count) sel.mask = d.mask;
  }
  return sel;
}

Status check_device_selection(const kstage_write_data_t& d, const Selection& sel, DLDevice tensors,
                              Backend& column, const char* attr) {
  const DLDevice where = d.selection_device, resident = column.device();
  const char* const what = d.mask ? "mask" : sel.map_name();
  if (where.device_type != tensors.device_type || where.device_id != tensors.device_id)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "selection_device is %s:%d but %s is on %s:%d: a device index_map or mask "
                 "must be on the tensors' device",
                 device_type_name(where.device_type), int(where.device_id),
                 tensor_name(d, 0).c_str(), device_type_name(tensors.device_type),
                 int(tensors.device_id));
  if (column.synchronous() || !column.can_access(where))
    return error(KSTAGE_INVALID_ARGUMENT,
                 "the %s is on %s:%d (selection_device) but column '%s' lives on %s:%d, "
                 "whose kernels cannot read it: a device %s must be on the column's device",
                 what, device_type_name(where.device_type), int(where.device_id), attr,
                 device_type_name(resident.device_type), int(resident.device_id), what);
  const void* selection = d.index_map     ? static_cast<const void*>(d.index_map)
                          : d.index_map64 ? static_cast<const void*>(d.index_map64)
                                          : static_cast<const void*>(d.mask);
  return column.check_memory(selection, where, what);
}

Status index_map_error(const Selection& sel, size_t i, uint64_t rows, const char* rows_from) {
  const long long value =
      sel.index_map64 ? (long long)sel.index_map64[i] : (long long)sel.index_map[i];
  return error(KSTAGE_INVALID_ARGUMENT,
               "%s[%zu] = %lld references a source row outside the transported row count %llu "
               "(%s)",
               sel.map_name(), i, value, (unsigned long long)rows, rows_from);
}

Status check_row_count(const kstage_write_data_t& d, const Selection& sel, uint64_t rows,
                       const char* rows_from) {
  if (rows != sel.count)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "%llu source row(s) (%s) but the write addresses %llu prim(s) (%s)%s",
                 (unsigned long long)rows, rows_from, (unsigned long long)sel.count,
                 d.count ? "count" : "count = 0: all of the query's prims",
                 d.mask ? "; with a mask, source row i belongs to element i" : "");
  return Status::OK();
}

uint64_t index_map_rows(const Selection& sel) {
  uint64_t hi = 0;
  for (uint64_t i = 0; i < sel.count; ++i)
    hi = std::max<uint64_t>(hi, uint64_t(sel.index_map[i]) + 1);
  return hi;
}

Status check_index_map(const Selection& sel, uint64_t rows, const char* rows_from) {
  for (size_t i = 0; i < sel.count; ++i)
    if (sel.index_map[i] >= rows) return index_map_error(sel, i, rows, rows_from);
  return Status::OK();
}

Status select_masked(Selection& sel, Backend& host) {
  KSTAGE_ASSIGN_OR_RETURN(sel.subset,
                          host.allocate(std::max<size_t>(sel.selected * sizeof(uint32_t), 1)));
  kernels::MaskedGather g;
  g.mask = sel.mask;
  g.n = size_t(sel.count);
  g.selected = reinterpret_cast<uint32_t*>(sel.subset->data());
  host.masked_gather(g);
  return Status::OK();
}

// The first entries answer for most maps that are not progressions; the rest is checked in
// parallel blocks (compares without branches: a block costs what reading it does), each stopping
// once any block found a difference.
bool index_map_progression(const uint32_t* map, size_t n, Backend& host, uint64_t& first,
                           uint64_t& step) {
  first = map[0];
  step = n > 1 && map[1] >= map[0] ? map[1] - map[0] : 0;
  if (first + (n - 1) * step > UINT32_MAX) return false;
  size_t i = 1;
  while (i < n && i < 64 && map[i] == first + i * step) ++i;
  if (i < std::min<size_t>(n, 64)) return false;
  if (n <= 64) return true;
  struct Check {
    const uint32_t* map;
    uint64_t first, step;
    std::atomic<bool> differs;
  } check{map, first, step, {false}};
  host.host_for(
      n,
      [](const void* context, size_t begin, size_t end) {
        auto& c = *static_cast<Check*>(const_cast<void*>(context));
        constexpr size_t kBlock = 4096;
        for (size_t b = begin; b < end && !c.differs.load(std::memory_order_relaxed); b += kBlock) {
          const size_t e = std::min(end, b + kBlock);
          // (No entry of a candidate passes 2^32 - 1: the expected value never wraps.)
          uint32_t diff = 0, expected = uint32_t(c.first + b * c.step);
          const uint32_t inc = uint32_t(c.step);
          for (size_t k = b; k < e; ++k, expected += inc) diff |= c.map[k] ^ expected;
          if (diff != 0) c.differs.store(true, std::memory_order_relaxed);
        }
      },
      &check);
  return !check.differs.load();
}

// Copied and checked in one pass, in parallel chunks on a parallel host: the first bad entry
// is the lowest any chunk found.
Status copy_index_map(const Selection& sel, uint64_t rows, const char* rows_from, Backend& host,
                      StagedRows& out) {
  const size_t n = size_t(sel.count);
  KSTAGE_ASSIGN_OR_RETURN(out.source_index, host.allocate(n * sizeof(uint32_t)));
  struct Copy {
    const uint32_t* from;
    uint32_t* to;
    uint64_t rows;
    std::atomic<size_t> first_bad;
  } copy{sel.index_map, reinterpret_cast<uint32_t*>(out.source_index->data()), rows, {n}};
  host.host_for(
      n,
      [](const void* context, size_t begin, size_t end) {
        auto& c = *static_cast<Copy*>(const_cast<void*>(context));
        uint32_t high = 0;
        for (size_t k = begin; k < end; ++k) {
          c.to[k] = c.from[k];
          high = std::max(high, c.from[k]);
        }
        if (high < c.rows) return;
        size_t k = begin;
        while (c.from[k] < c.rows) ++k;
        lower_to(c.first_bad, k);
      },
      &copy);
  const size_t bad = copy.first_bad.load();
  if (bad < n) return index_map_error(sel, bad, rows, rows_from);
  return Status::OK();
}

}  // namespace kstage::core
