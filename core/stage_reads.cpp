// SPDX-License-Identifier: Apache-2.0
// Stage: reads -- group planning over a column's sealed state (zero-copy, compact, change ranges).
#include "core/stage.hpp"

#include "core/device_sync.hpp"
#include "core/dtype.hpp"
#include "core/read_session.hpp"
#include "core/transport.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

namespace kstage::core {

namespace {

// Points the descriptor at the group's own arrays. `count`: its prims.
void finish_desc(ReadGroup& g, size_t count) {
  g.desc.prims = count > 0 ? g.prims->data() : nullptr;  // null for a progression: publish_prims()
  if (g.desc.prims) g.desc.prims += g.from;
  g.desc.prim_count = count;
  g.desc.data.count = count;
  g.desc.data.tensors = g.tensors.empty() ? nullptr : g.tensors.data();
  g.desc.data.tensor_count = g.tensors.size();
  g.desc.data.index_map = g.device_index
                              ? reinterpret_cast<const uint32_t*>(g.device_index->data()) + g.from
                          : g.index_map ? g.index_map->data() + g.from
                                        : nullptr;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    g.tensors[i].shape = &g.shapes[i];
    g.tensors[i].strides = &g.strides[i];
  }
}

// Splits `g` into groups of at most `per` prims, in order (read_desc's
// max_group_prims). They share its prims, index map and buffer; each has its
// slice of them: a fixed-size column's tensor starts at the slice's first
// row when the rows are in prim order, else stays whole with the slice of
// the index map; an array column's tensors are one per prim.
void split_group(std::unique_ptr<ReadGroup> g, size_t per, size_t row_bytes,
                 std::vector<std::unique_ptr<ReadGroup>>& out) {
  const size_t n = g->desc.prim_count;
  if (per == 0 || n <= per) {
    out.push_back(std::move(g));
    return;
  }
  for (size_t from = 0; from < n; from += per) {
    const size_t k = std::min(per, n - from);
    auto c = std::make_unique<ReadGroup>();
    c->desc = g->desc;
    c->from = g->from + from;
    c->prims = g->prims;
    c->index_map = g->index_map;
    c->device_index = g->device_index;
    c->pinned = g->pinned;
    c->owns_buffer = g->owns_buffer;
    c->ready = g->ready;
    c->device = g->device;
    if (g->tensors.empty()) {
      // A tombstone group: prims only.
    } else if (g->desc.is_array) {
      c->tensors.assign(g->tensors.begin() + from, g->tensors.begin() + from + k);
      c->shapes.assign(g->shapes.begin() + from, g->shapes.begin() + from + k);
      c->strides.assign(g->strides.begin() + from, g->strides.begin() + from + k);
    } else {
      c->tensors = g->tensors;
      c->shapes = g->shapes;
      c->strides = g->strides;
      if (!g->index_map) {  // rows in prim order: the slice's rows
        c->tensors[0].data = static_cast<std::byte*>(g->tensors[0].data) + from * row_bytes;
        c->shapes[0] = int64_t(k);
      }
    }
    finish_desc(*c, k);
    out.push_back(std::move(c));
  }
}

// Moves a group's data to `dest` (a read that asked for another device):
// one copy of its buffer, the tensors rebased onto the copy. The old buffer
// goes to `olds`: a copy from the host still reads it.
Status move_group(ReadGroup& g, Backend& dest, Backend& home, std::vector<BufferPtr>& olds) {
  for (DLTensor& t : g.tensors) t.device = dest.device();
  if (!g.pinned) return Status::OK();
  BufferPtr moved;
  KSTAGE_ASSIGN_OR_RETURN(moved, dest.allocate(g.pinned->size()));
  KSTAGE_RETURN_NOT_OK(transfer(dest, moved->data(), home, g.pinned->data(), g.pinned->size()));
  for (DLTensor& t : g.tensors)
    if (t.data) t.data = moved->data() + (static_cast<std::byte*>(t.data) - g.pinned->data());
  olds.push_back(std::move(g.pinned));
  g.pinned = std::move(moved);
  g.owns_buffer = true;
  return Status::OK();
}

DLTensor row_tensor(void* data, DLDevice device, DLDataType dtype) {
  DLTensor t{};
  t.data = data;
  t.device = device;
  t.ndim = 1;
  t.dtype = dtype;
  t.byte_offset = 0;
  return t;
}

}  // namespace

Status Stage::build_groups(Column& c, const PrimList& prims, const kstage_read_desc_t& desc,
                           std::vector<std::unique_ptr<ReadGroup>>& out) {
  const Schema& schema = c.schema();
  auto values = std::make_unique<ReadGroup>();
  auto tombs = std::make_unique<ReadGroup>();
  // The group's prims and their rows: shared with the query and the column's
  // cached row map when the group is the whole query, else collected here.
  const RowMap map = c.row_map(prims, prims->size());
  std::vector<uint32_t> own_rows;
  std::vector<uint64_t> value_prims, tomb_prims;  // when not the query's own
  const uint32_t* rows = nullptr;
  size_t n = 0;
  bool whole_query = false;  // the group's prims are the query's
  // A change range whose last write covered every row (a dense tick) selects
  // every prim of the query, as a latest read does.
  const bool dense_tick_in_range = desc.change_range && c.whole_change() >= desc.range_begin &&
                                   c.whole_change() <= desc.range_end;
  if (map.all_present && (!desc.change_range || dense_tick_in_range)) {
    whole_query = true;
    rows = map.rows ? map.rows->data() : nullptr;  // null: the identity (prim i is row i)
    n = prims->size();
  } else if (const Column::RecentWrite* w = desc.change_range && map.identity
                                                ? c.only_change_since(desc.range_begin)
                                                : nullptr) {
    // The query is the column in row order and one sparse write is the only
    // change in the range (a tick): its rows, in row order, are the answer.
    // O(changed), not O(query). (read() has checked the range end; no
    // tombstone can be newer than that write.)
    own_rows.assign(w->rows, w->rows + w->n);
    if (!std::is_sorted(own_rows.begin(), own_rows.end()))
      std::sort(own_rows.begin(), own_rows.end());
    value_prims.resize(own_rows.size());
    for (size_t i = 0; i < own_rows.size(); ++i) value_prims[i] = (*prims)[own_rows[i]];
    rows = own_rows.data();
    n = own_rows.size();
  } else {
    const PrimSeq& p = *prims;
    const uint32_t* r = map.rows ? map.rows->data() : nullptr;  // null: the identity
    const size_t count = prims->size();
    if (desc.change_range) {
      // read() has checked that no prim of the query changed after the
      // range end, so a row is in the range iff its last change is at or
      // after the beginning: one compare per prim.
      const uint64_t begin = desc.range_begin, end = desc.range_end;
      const bool every_row = c.all_rows_changed_at() >= begin;
      const StampTable& stamps = c.row_stamps();
      const uint32_t first = c.first_stamp_at_or_after(begin);
      const bool tombstones = c.has_tombstones();
      // One loop per stamp width (StampTable::visit): a compare per prim, no call.
      auto scan = [&](const auto* stamp, auto row_of_element) {
        for (size_t i = 0; i < count; ++i) {
          const uint32_t row = row_of_element(i);
          if (row != Column::kNoRow) {
            if (!every_row && (stamp == nullptr || stamp[row] < first)) continue;
            value_prims.push_back(p[i]);
            own_rows.push_back(row);
          } else if (tombstones) {
            const uint64_t t = c.tombstone(p[i]);
            if (t != 0 && begin <= t && t <= end) tomb_prims.push_back(p[i]);
          }
        }
      };
      auto scan_rows = [&](const auto* stamp) {
        if (map.identity) {
          scan(stamp,
               [](size_t i) { return uint32_t(i); });  // the query is the column in row order
        } else {
          scan(stamp, [r](size_t i) { return r[i]; });
        }
      };
      if (stamps.empty()) {
        scan_rows(static_cast<const uint8_t*>(nullptr));
      } else {
        stamps.visit(scan_rows);
      }
    } else {
      for (size_t i = 0; i < count; ++i) {
        if (r[i] == Column::kNoRow) continue;
        value_prims.push_back(p[i]);
        own_rows.push_back(r[i]);
      }
    }
    rows = own_rows.data();
    n = own_rows.size();
  }
  values->prims = whole_query ? prims : std::make_shared<const PrimSeq>(std::move(value_prims));
  const uint64_t floor = floor_of(c.attribute());
  for (ReadGroup* g : {values.get(), tombs.get()}) {
    g->desc.attribute = c.attribute();
    g->desc.ordinal = floor;
    g->desc.dtype = schema.dtype;
    g->desc.is_array = schema.is_array;
    g->desc.semantic = schema.semantic;
  }
  tombs->desc.is_delete = true;

  if (n > 0) {
    ReadGroup& g = *values;
    Backend& backend = c.backend();
    const DLDevice device = backend.device();
    const bool compact = desc.compact;
    g.owns_buffer = compact;
    if (!schema.is_array) {
      const size_t rb = c.row_bytes();
      if (compact && whole_query && map.identity) {
        // Every row, in row order: one contiguous copy, no gather.
        KSTAGE_ASSIGN_OR_RETURN(g.pinned, allocate_written(backend, n * rb));
        backend.copy_bytes(g.pinned->data(), c.values()->data(), n * rb);
        g.shapes.push_back(int64_t(n));
      } else if (compact) {
        const uint32_t* resident = nullptr;
        if (!c.reads_host() && whole_query && rows == map.rows->data()) {
          KSTAGE_ASSIGN_OR_RETURN(resident, c.resident_rows(map.rows));
        }
        std::vector<uint64_t> unused;
        KSTAGE_ASSIGN_OR_RETURN(g.pinned, c.gather(rows, n, unused, resident));
        g.shapes.push_back(int64_t(n));
      } else {
        g.pinned = pin(c.values());
        g.shapes.push_back(int64_t(c.row_space()));
        if (whole_query) {
          if (!map.identity) g.index_map = map.rows;
        } else {
          bool identity = n == c.row_space();
          for (size_t i = 0; identity && i < n; ++i) identity = rows[i] == i;
          if (!identity)
            g.index_map = std::make_shared<const std::vector<uint32_t>>(std::move(own_rows));
        }
        // A GPU consumer's copy of the map on the column's device: the column's cached copy of
        // a whole query's row map, else one upload (ordered before the group's event).
        if (desc.device_index_map && g.index_map && !c.reads_host()) {
          if (whole_query && g.index_map == map.rows) {
            KSTAGE_ASSIGN_OR_RETURN(g.device_index, c.resident_copy(map.rows));
          } else {
            KSTAGE_ASSIGN_OR_RETURN(
                g.device_index,
                backend.upload(g.index_map->data(), g.index_map->size() * sizeof(uint32_t)));
          }
        }
      }
      g.tensors.push_back(row_tensor(g.pinned->data(), device, schema.dtype));
      g.strides.push_back(1);
    } else {
      const size_t eb = c.row_bytes();
      auto row_at = [rows](size_t i) {
        return rows ? rows[i] : uint32_t(i);
      };  // null: the identity
      std::byte* base;
      std::vector<uint64_t> start(n);
      if (compact) {
        // Packed, in prim order, into a buffer of the reader's own.
        KSTAGE_ASSIGN_OR_RETURN(g.pinned, c.gather(rows, n, start));
        base = g.pinned->data();
      } else {
        g.pinned = pin(c.values());
        base = g.pinned ? g.pinned->data() : nullptr;
        for (size_t i = 0; i < n; ++i) start[i] = c.row_offset(row_at(i));
      }
      // One tensor per row (reserved once: no reallocation while filling).
      g.tensors.reserve(n);
      g.shapes.reserve(n);
      g.strides.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        g.tensors.push_back(row_tensor(base ? base + start[i] : nullptr, device, schema.dtype));
        g.shapes.push_back(int64_t(c.row_length(row_at(i)) / eb));
        g.strides.push_back(1);
      }
    }
    finish_desc(g, n);
    out.push_back(std::move(values));
  }
  if (!tomb_prims.empty()) {
    const size_t k = tomb_prims.size();
    tombs->prims = std::make_shared<const PrimSeq>(std::move(tomb_prims));
    finish_desc(*tombs, k);
    out.push_back(std::move(tombs));
  }
  return Status::OK();
}

Status Stage::sync_consumer(const ReadGroup& g, const kstage_device_sync_t& consumer) {
  if (!g.device)
    return check_host_sync(consumer, "consumer", "the group's data is host memory (complete)");
  // After all the work enqueued on the group's device so far, which includes
  // the work that produced it. Under the lock: enqueued in call order with
  // the stage's other work.
  std::lock_guard lock(mutex_);
  return g.device->record_into(consumer, "consumer");
}

Result<std::vector<std::unique_ptr<ReadGroup>>> Stage::read(const PrimList& prims,
                                                            const uint64_t* attributes, uint64_t n,
                                                            const kstage_read_desc_t& desc) {
  if (n == 0 || attributes == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "a read needs at least one attribute (n = %llu%s)",
                 (unsigned long long)n, attributes ? "" : ", attributes NULL");
  KSTAGE_RETURN_NOT_OK(check_distinct_tokens(attributes, n));
  if (desc.change_range && desc.range_begin > desc.range_end)
    return error(KSTAGE_INVALID_ARGUMENT, "change range [%llu, %llu] is empty (begin > end)",
                 (unsigned long long)desc.range_begin, (unsigned long long)desc.range_end);
  Backend* target = nullptr;  // null: each column's own residency
  if (desc.target_device.device_type != 0) {
    KSTAGE_ASSIGN_OR_RETURN(target, backends_->for_device(desc.target_device));
  }

  std::lock_guard lock(mutex_);
  if (desc.change_range) {
    // A range is answerable only if no selected prim changed after its end.
    for (uint64_t i = 0; i < n; ++i) {
      for (const auto& [key, column] : columns_.of(attributes[i])) {
        Column* c = column.get();
        if (c->last_change() <= desc.range_end) continue;  // the usual case: O(1)
        const RowMap rows = c->row_map(prims, prims->size());
        for (size_t k = 0; k < prims->size(); ++k) {
          const uint64_t p = (*prims)[k];
          const uint32_t r = rows.row(k);
          const uint64_t last = r != Column::kNoRow   ? c->changed_at(r)
                                : c->has_tombstones() ? c->tombstone(p)
                                                      : 0;
          if (last > desc.range_end)
            return error(KSTAGE_OUT_OF_RANGE,
                         "prim '%s' changed again at ordinal %llu (attribute '%s'), after the "
                         "range end %llu; read a range that ends at or after it",
                         path_name(p).c_str(), (unsigned long long)last,
                         token_name(attributes[i]).c_str(), (unsigned long long)desc.range_end);
        }
      }
    }
  }
  std::vector<std::unique_ptr<ReadGroup>> groups;
  // Device destinations and the completion of their producing work: the
  // reader's event is recorded once, after all of it.
  std::vector<std::pair<Backend*, CompletionPtr>> devices;
  std::vector<BufferPtr> olds;  // host buffers copies to a device still read
  auto fail = [&](Status st) {
    // Queued copies may still read `olds`: let them finish first.
    for (auto& [b, ready] : devices) b->fence();
    if (target && !target->synchronous()) target->fence();
    return st;
  };
  // Every column of each attribute: a name held in several schemas reads as groups of each.
  std::vector<Column*> read_columns;
  for (uint64_t i = 0; i < n; ++i)
    for (const auto& [key, column] : columns_.of(attributes[i]))
      read_columns.push_back(column.get());
  for (Column* c : read_columns) {
    Backend& home = c->backend();
    Backend& dest = target ? *target : home;
    const size_t first = groups.size();
    std::vector<std::unique_ptr<ReadGroup>> built;
    if (Status st = build_groups(*c, prims, desc, built); !st.ok()) return fail(st);
    // Moved whole (one copy per buffer), then split: the parts share it.
    for (auto& g : built) {
      if (&dest != &home)
        if (Status st = move_group(*g, dest, home, olds); !st.ok()) return fail(st);
      split_group(std::move(g), size_t(desc.max_group_prims), c->row_bytes(), groups);
    }
    if (dest.synchronous()) continue;  // host data: complete, nothing to signal
    CompletionPtr ready = dest.record();
    for (size_t k = first; k < groups.size(); ++k) {
      if (groups[k]->tensors.empty()) continue;
      groups[k]->device = &dest;
      if (!ready) continue;
      groups[k]->ready = ready;
      groups[k]->desc.data.device_sync = ready->sync();
    }
    auto known = std::find_if(devices.begin(), devices.end(),
                              [&](const auto& d) { return d.first == &dest; });
    if (known == devices.end()) {
      devices.emplace_back(&dest, ready);
    } else if (ready) {
      known->second = ready;
    }
  }
  // The reader's sync: a device event is recorded once, on the last device
  // destination, after waiting for the others' producing work. A read whose
  // data is all on the host takes {0, 0}.
  if (devices.empty()) {
    if (!groups.empty())
      if (Status st = backends_->host().record_into(desc.device_sync, "desc.device_sync"); !st.ok())
        return fail(st);
  } else if (is_set(desc.device_sync)) {
    Backend& last = *devices.back().first;
    for (size_t k = 0; k + 1 < devices.size(); ++k)
      if (devices[k].second)
        if (Status st = last.order_after(devices[k].second->sync(), "desc.device_sync"); !st.ok())
          return fail(st);
    if (Status st = last.record_into(desc.device_sync, "desc.device_sync"); !st.ok())
      return fail(st);
  }
  if (!olds.empty()) {
    try {
      std::vector<CompletionPtr> work;
      for (auto& [b, ready] : devices)
        if (ready) work.push_back(ready);
      defer(work, std::make_shared<std::vector<BufferPtr>>(std::move(olds)));
    } catch (const std::bad_alloc&) {
      fence_devices();  // no memory to keep them for later: the work reading them ends first
    }
  }
  // Explicit: nvcc (a CMAKE_CXX_COMPILER of nvcc_wrapper) does not move a local into a
  // converting constructor implicitly.
  return Result<std::vector<std::unique_ptr<ReadGroup>>>(std::move(groups));
}

Result<std::shared_ptr<ReadSession>> Stage::open_read(const PrimList& prims,
                                                      const uint64_t* attributes, uint64_t n,
                                                      const kstage_read_desc_t& desc) {
  // The session first: no memory for it, no read (nothing pinned, no copy enqueued).
  auto session = std::make_shared<ReadSession>();
  std::vector<std::unique_ptr<ReadGroup>> groups;
  KSTAGE_ASSIGN_OR_RETURN(groups, read(prims, attributes, n, desc));
  for (auto& g : groups) {
    g->prims_as_progression = desc.prims_as_progression;
    session->groups_.push_back(std::move(g));
  }
  return Result<std::shared_ptr<ReadSession>>(std::move(session));
}

}  // namespace kstage::core
