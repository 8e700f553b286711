// SPDX-License-Identifier: Apache-2.0
// Stage: maps -- planning a map's groups (open_map) and committing them as writes (commit). The
// session that hands them out is core/map_session.hpp.
#include "core/stage.hpp"

#include "core/map_session.hpp"

#include "core/device_sync.hpp"
#include "core/dtype.hpp"
#include "core/reserved_names.hpp"
#include "core/transport.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

namespace kstage::core {

namespace {

// Allocates one group's buffer and describes it. `rows_prims` are the prims
// of the buffer's rows (row order), `prims` the group's prims (query order).
Result<std::unique_ptr<MapGroup>> make_map_group(
    const MapSession& s, PrimList prims, PrimList rows_prims,
    std::shared_ptr<const std::vector<uint32_t>> index_map, const uint64_t* counts) {
  auto g = std::make_unique<MapGroup>();
  g->prims = std::move(prims);
  g->index_map = std::move(index_map);
  const size_t n = g->prims->size();
  const size_t eb = tuple_bytes(s.schema.dtype);
  const DLDevice device = s.backend->device();
  auto tensor = [&](std::byte* data, int64_t rows) {
    DLTensor t{};
    t.data = data;
    t.device = device;
    t.ndim = 1;
    t.dtype = s.schema.dtype;
    g->tensors.push_back(t);
    g->shapes.push_back(rows);
    g->strides.push_back(1);
  };
  StagedRows& r = g->rows;
  r.n = rows_prims->size();
  r.prims = std::move(rows_prims);
  if (!s.schema.is_array) {
    KSTAGE_ASSIGN_OR_RETURN(r.data, s.backend->allocate(std::max<size_t>(r.n * eb, 1)));
    tensor(r.data->data(), int64_t(r.n));
  } else {
    r.starts.resize(n);
    r.lengths.resize(n);
    uint64_t cursor = 0;
    // The group's buffer holds every row: its size must not wrap, whatever
    // the counts (each is bounded, their sum is checked as it grows).
    constexpr uint64_t kMaxBytes = UINT64_MAX / 2;
    for (size_t i = 0; i < n; ++i) {
      if (counts[i] > kMaxBytes / eb)
        return error(KSTAGE_INVALID_ARGUMENT, "element_counts entry %llu is too large",
                     (unsigned long long)counts[i]);
      r.starts[i] = cursor;
      r.lengths[i] = counts[i] * eb;
      const uint64_t row = kernels::ragged_align_up(r.lengths[i]);
      if (row > kMaxBytes - cursor)
        return error(KSTAGE_INVALID_ARGUMENT,
                     "element_counts add up to more than 2^63 bytes of %zu-byte elements in one "
                     "group (at its prim %zu, count %llu)",
                     eb, i, (unsigned long long)counts[i]);
      cursor += row;
    }
    KSTAGE_ASSIGN_OR_RETURN(r.data, s.backend->allocate(std::max<uint64_t>(cursor, 1)));
    g->tensors.reserve(n);
    for (size_t i = 0; i < n; ++i) tensor(r.data->data() + r.starts[i], int64_t(counts[i]));
  }
  for (size_t i = 0; i < g->tensors.size(); ++i) {
    g->tensors[i].shape = &g->shapes[i];
    g->tensors[i].strides = &g->strides[i];
  }
  kstage_map_group_info_t& d = g->desc;
  d.attribute = s.attribute;
  d.prims = g->prims->data();  // null for a progression: MapGroup::publish_prims()
  d.prim_count = n;
  d.ordinal = s.ordinal;
  d.data.tensors = g->tensors.empty() ? nullptr : g->tensors.data();
  d.data.tensor_count = g->tensors.size();
  d.data.count = n;
  d.data.index_map = g->index_map ? g->index_map->data() : nullptr;
  d.dtype = s.schema.dtype;
  d.is_array = s.schema.is_array;
  d.semantic = s.schema.semantic;
  return Result<std::unique_ptr<MapGroup>>(std::move(g));  // explicit, for nvcc (above)
}

}  // namespace

Status Stage::check_floor(uint64_t attribute, uint64_t ordinal) const {
  const uint64_t floor = floor_of(attribute);
  if (ordinal <= floor)
    return error(KSTAGE_WRITE_FLOOR_VIOLATION,
                 "ordinal %llu is not above the write floor %llu of attribute '%s'",
                 (unsigned long long)ordinal, (unsigned long long)floor,
                 token_name(attribute).c_str());
  return Status::OK();
}

Result<std::shared_ptr<MapSession>> Stage::open_map(const PrimList& prims,
                                                    const kstage_map_desc_t& d, uint64_t ordinal,
                                                    const uint64_t* counts, uint64_t n) {
  if (!dictionary_.is_token(d.attribute))
    return error(KSTAGE_INVALID_ARGUMENT, "desc.attribute = %llu is not a token of this stage",
                 (unsigned long long)d.attribute);
  if (d.prim_mode < KSTAGE_PRIM_MODE_UPSERT || d.prim_mode > KSTAGE_PRIM_MODE_UPDATE)
    return error(KSTAGE_INVALID_ARGUMENT, "desc.prim_mode %d is not a kstage_prim_mode_t",
                 int(d.prim_mode));
  if (d.attribute_mode > KSTAGE_ATTRIBUTE_MODE_FORCE)
    return error(KSTAGE_INVALID_ARGUMENT, "desc.attribute_mode %u is not a kstage_attribute_mode_t",
                 unsigned(d.attribute_mode));
  // The map's schema: the declared one, a NONE semantic keeping its column's; an unset dtype
  // ({0, 0, 0}) takes the attribute's column of that kind.
  Schema schema{d.is_array, d.dtype, d.semantic};
  bool existing = false;
  {
    std::lock_guard lock(mutex_);
    if (d.dtype.code == 0 && d.dtype.bits == 0 && d.dtype.lanes == 0) {
      const Column* found = nullptr;
      for (const auto& [key, c] : columns_.of(d.attribute)) {
        if (c->schema().is_array != d.is_array ||
            (d.semantic != KSTAGE_SEMANTIC_NONE && d.semantic != c->schema().semantic))
          continue;
        if (found)
          return error(KSTAGE_INVALID_ARGUMENT,
                       "desc.dtype is unset, but '%s' holds %s and %s: name the dtype",
                       token_name(d.attribute).c_str(), schema_string(found->schema()).c_str(),
                       schema_string(c->schema()).c_str());
        found = c.get();
      }
      if (!found)
        return error(KSTAGE_INVALID_ARGUMENT,
                     "desc.dtype is unset, but '%s' has no %s column to take it from",
                     token_name(d.attribute).c_str(), d.is_array ? "array" : "fixed-size");
      schema = found->schema();
      existing = true;
    } else {
      const Column* c = nullptr;
      KSTAGE_ASSIGN_OR_RETURN(c, column_for(d.attribute, schema));
      if (c) schema.semantic = c->schema().semantic;
      existing = c != nullptr;
    }
  }
  KSTAGE_RETURN_NOT_OK(check_reserved_name(token_name(d.attribute), schema));
  if (!existing) {
    KSTAGE_RETURN_NOT_OK(validate_dtype(d.dtype, "desc.dtype"));
    KSTAGE_RETURN_NOT_OK(validate_semantic(d.semantic, d.dtype, d.is_array));
  }
  const size_t count = prims->size();
  if (!d.is_array && (counts != nullptr || n != 0))
    return error(KSTAGE_INVALID_ARGUMENT,
                 "element_counts are for array attributes; a fixed-size map passes NULL and 0 "
                 "(got %s and %llu)",
                 counts ? "a pointer" : "NULL", (unsigned long long)n);
  if (d.is_array && (n != count || (count > 0 && counts == nullptr)))
    return error(KSTAGE_INVALID_ARGUMENT,
                 "an array map needs one element count per prim: the query has %zu prims, "
                 "element_counts has %llu%s",
                 count, (unsigned long long)n, counts ? "" : " (NULL)");
  const DLDevice residency = d.residency.device_type != 0  ? d.residency
                             : residency_.device_type != 0 ? residency_
                                                           : DLDevice{kDLCPU, 0};

  auto s = std::make_shared<MapSession>(*this);
  s->attribute = d.attribute;
  s->ordinal = ordinal;
  s->schema = schema;
  s->mode = d.prim_mode;
  s->replaces = d.attribute_mode == KSTAGE_ATTRIBUTE_MODE_FORCE;
  const size_t per_group =
      d.max_group_prims == 0 ? std::max<size_t>(count, 1) : size_t(d.max_group_prims);
  // Plan the groups under the lock (row assignments), allocate outside it.
  RowMap whole;  // all_present: one group covering every row of the column
  {
    std::lock_guard lock(mutex_);
    KSTAGE_RETURN_NOT_OK(check_floor(d.attribute, ordinal));
    Column* c = columns_.find(d.attribute, s->schema);
    if (c) {
      s->backend = &c->backend();
    } else {
      KSTAGE_ASSIGN_OR_RETURN(s->backend, backends_->for_device(residency));
    }
    StagedRows all;
    all.prims = prims;
    all.n = count;
    const Key key{ordinal, next_seq_};
    KSTAGE_RETURN_NOT_OK(check_prim_mode(all, d.prim_mode, key, c));
    KSTAGE_RETURN_NOT_OK(check_schema_conflicts(all, d.attribute, c, s->schema, s->replaces, key));
    // One fixed-size group covering every row of the column: hand out the
    // buffer in row order (with an index_map), so it can become the storage.
    if (c && !d.is_array && per_group >= count && count == c->row_space() &&
        c->live_rows() == count && count > 0)
      whole = c->row_map(prims, count);  // cached: no per-prim work on repeated ticks
  }
  if (whole.all_present) {
    PrimList row_prims = prims;
    std::shared_ptr<const std::vector<uint32_t>> index;
    if (!whole.identity) {
      std::vector<uint64_t> order(count);
      for (size_t i = 0; i < count; ++i) order[(*whole.rows)[i]] = (*prims)[i];
      row_prims = std::make_shared<const PrimSeq>(std::move(order));
      index = whole.rows;
    }
    std::unique_ptr<MapGroup> g;
    KSTAGE_ASSIGN_OR_RETURN(g, make_map_group(*s, prims, row_prims, index, nullptr));
    s->groups.push_back(std::move(g));
    // (As below: the stream has passed the allocations.)
    KSTAGE_RETURN_NOT_OK(wait_on_host(*s->backend));
    return s;
  }
  for (size_t first = 0; first < count || (count == 0 && first == 0); first += per_group) {
    const size_t last = std::min(count, first + per_group);
    PrimList chunk = (first == 0 && last == count)
                         ? prims
                         : std::make_shared<const PrimSeq>(prims->slice(first, last - first));
    std::unique_ptr<MapGroup> g;
    KSTAGE_ASSIGN_OR_RETURN(
        g, make_map_group(*s, chunk, chunk, nullptr, d.is_array ? counts + first : nullptr));
    s->groups.push_back(std::move(g));
    if (count == 0) break;
  }
  // A device map's buffers come from the stream-ordered allocator: a block may have been freed
  // on the stage's stream with work still queued before the free, and it is usable only in
  // stream order. A producer on another stream, or the host, is not ordered after the stage's
  // stream, so the groups are handed out once the stream has passed the allocations: their
  // {0, 0} device_sync is then true ("fresh, no work pending").
  KSTAGE_RETURN_NOT_OK(wait_on_host(*s->backend));
  return s;
}

Result<std::shared_ptr<Op>> Stage::commit(MapSession& s, const std::vector<MapGroup*>& groups,
                                          const kstage_device_sync_t& done_sync) {
  // The producer filled the buffers: the seals that read them come after
  // its event (host buffers take {0, 0}).
  KSTAGE_RETURN_NOT_OK(s.backend->order_after(done_sync, "done_sync"));
  auto op = std::make_shared<Op>();
  op->add_work(*s.backend);
  if (groups.empty()) return op;  // nothing filled: no trace, not even a schema
  std::lock_guard lock(mutex_);
  KSTAGE_RETURN_NOT_OK(check_floor(s.attribute, s.ordinal));
  Column* c = columns_.find(s.attribute, s.schema);
  if (c && &c->backend() != s.backend)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "column '%s' (%s) was created on another device since the map opened",
                 token_name(s.attribute).c_str(), schema_string(s.schema).c_str());
  const Key key{s.ordinal, next_seq_};
  for (MapGroup* g : groups) {
    KSTAGE_RETURN_NOT_OK(check_prim_mode(g->rows, s.mode, key, c));
    KSTAGE_RETURN_NOT_OK(
        check_schema_conflicts(g->rows, s.attribute, c, s.schema, s.replaces, key));
  }
  // Every group or none, as a write (the groups keep their rows for a retry).
  WriteBatch batch;
  std::vector<Mutation*> writes;
  try {
    writes.reserve(groups.size());
    for (size_t k = 0; k < groups.size(); ++k)
      writes.push_back(
          &add_write(batch, s.attribute, c, s.schema, s.backend, s.ordinal, s.replaces));
  } catch (const std::bad_alloc&) {
    return out_of_memory("no host memory to commit the map's groups");
  }
  for (size_t k = 0; k < groups.size(); ++k) {
    writes[k]->rows = std::move(groups[k]->rows);  // the group's buffer is the staged data
    groups[k]->state = MapGroup::State::Committed;
  }
  enqueue(batch);
  return op;
}

}  // namespace kstage::core
