// SPDX-License-Identifier: Apache-2.0
#include "core/column.hpp"

#include "core/dtype.hpp"

#include <algorithm>
#include <atomic>
#include <new>
#include <type_traits>

namespace kstage::core {

uint64_t Column::next_serial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

namespace {
// Room for `need` elements, growing by at least half the capacity, so that
// many small appends stay linear and one big append moves nothing.
template <class V>
void reserve_geometric(V& v, size_t need) {
  if (need > v.capacity()) v.reserve(std::max(need, v.capacity() + v.capacity() / 2));
}

// Whether prims[0, n) of `s` are first, first + 1, ..., first + n - 1 (O(1) for a progression).
bool consecutive_from(const PrimSeq& s, size_t n, uint64_t first) {
  if (n == 0 || s[0] != first || first > UINT64_MAX - n) return false;
  if (s.is_progression()) return s.stride() == 1 || n == 1;
  const uint64_t* p = s.data();
  for (size_t i = 1; i < n; ++i)
    if (p[i] != first + i) return false;
  return true;
}
}  // namespace

size_t Column::row_bytes() const { return tuple_bytes(schema_.dtype); }

uint64_t Column::tombstone(uint64_t prim) const {
  auto it = tombstones_.find(prim);
  return it == tombstones_.end() ? 0 : it->second;
}

uint32_t Column::first_stamp_at_or_after(uint64_t ordinal) const {
  return uint32_t(std::lower_bound(stamp_ordinals_.begin(), stamp_ordinals_.end(), ordinal) -
                  stamp_ordinals_.begin());
}

uint32_t Column::stamp_for(uint64_t ordinal) {
  // Seals apply in ordinal order, so a new ordinal is the largest yet.
  if (stamp_ordinals_.back() != ordinal) {
    // Compacted when the table outgrows the rows, and before the stamps would need a wider
    // StampTable (256 and 65536 entries): widen only when the rows really carry that many.
    // A compaction that kept half the limit or more is not repeated at it (one O(rows) pass
    // per new ordinal would follow): the stamps widen instead.
    const size_t entries = stamp_ordinals_.size();
    const bool at_width_limit =
        !stamps_.empty() && (entries == 0x100 || entries == 0x10000) && compacted_to_ < entries / 2;
    if (entries > std::max<size_t>(2 * row_space(), kMinStampTable) || at_width_limit)
      compact_stamps();
    stamp_ordinals_.push_back(ordinal);
  }
  return uint32_t(stamp_ordinals_.size() - 1);
}

void Column::compact_stamps() {
  // Keep only the ordinals some row still carries (at most one per row), so
  // the table stays O(rows) however many ticks the column lives through. The
  // table is in increasing order, so marking the stamps in use and numbering
  // the marked entries in table order keeps it sorted: O(rows + entries), no
  // sort of one ordinal per row.
  const size_t entries = stamp_ordinals_.size();
  std::vector<uint32_t> renumber(entries, 0);  // 1 = in use, then its new stamp
  renumber[0] = 1;
  for (size_t r = 0; r < stamps_.size(); ++r)
    if (row_live(r)) renumber[stamps_.get(r)] = 1;
  std::vector<uint64_t> kept;
  for (size_t e = 0; e < entries; ++e) {
    if (renumber[e] == 0) continue;
    renumber[e] = uint32_t(kept.size());
    kept.push_back(stamp_ordinals_[e]);
  }
  // Renumbering only lowers stamps: the table's width still holds them. A
  // free row's stamp is 0.
  for (size_t r = 0; r < stamps_.size(); ++r)
    stamps_.set(r, row_live(r) ? renumber[stamps_.get(r)] : 0);
  stamp_ordinals_ = std::move(kept);
  stamps_.shrink_to(uint32_t(stamp_ordinals_.size() - 1));
  compacted_to_ = stamp_ordinals_.size();
}

RowMap Column::row_map(const PrimList& prims, size_t n) {
  for (const CachedRowMap& c : cache_)
    if (c.key == prims.get() && c.n == n && c.structure == structure_ && !c.prims.expired())
      return c.map;
  RowMap m;
  if (affine_rows_ != 0 && n == affine_rows_) {  // prim i is row i? then no table at all
    bool identity;
    if (prims->is_progression()) {  // O(1)
      identity = prims->first() == affine_first_ && (prims->stride() == 1 || n == 1);
    } else {
      const uint64_t* p = prims->data();
      identity = true;
      for (size_t i = 0; identity && i < n; ++i) identity = p[i] == affine_first_ + i;
    }
    if (identity) {
      m.all_present = m.identity = true;
      CachedRowMap& slot = cache_[cache_next_++ % 4];
      slot = CachedRowMap{prims, prims.get(), n, structure_, m};
      return m;
    }
  }
  auto rows = std::make_shared<std::vector<uint32_t>>(n);
  m.all_present = true;
  m.identity = n == row_space() && n == live_rows_;
  auto fill = [&](auto prim) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t r = row_of(prim(i));
      (*rows)[i] = r;
      m.all_present = m.all_present && r != kNoRow;
      m.identity = m.identity && r == i;
    }
  };
  if (const uint64_t* p = prims->data()) {
    fill([p](size_t i) { return p[i]; });
  } else {
    const PrimSeq& s = *prims;
    fill([&s](size_t i) { return s[i]; });
  }
  m.identity = m.identity && m.all_present;
  // Prim i is row i (a column whose rows were assigned in this query's order): no table, as
  // for an affine column -- an explicit-path column costs no 4 bytes per prim for it.
  if (!m.identity) m.rows = std::move(rows);
  CachedRowMap& slot = cache_[cache_next_++ % 4];
  slot = CachedRowMap{prims, prims.get(), n, structure_, m};
  return m;
}

Result<const uint32_t*> Column::resident_rows(
    const std::shared_ptr<const std::vector<uint32_t>>& rows) {
  BufferPtr copy;
  KSTAGE_ASSIGN_OR_RETURN(copy, resident_copy(rows));
  return reinterpret_cast<const uint32_t*>(copy->data());
}

Result<BufferPtr> Column::resident_copy(const std::shared_ptr<const std::vector<uint32_t>>& rows) {
  for (const ResidentRows& r : resident_)
    if (r.key == rows.get() && !r.rows.expired()) return r.copy;
  BufferPtr copy;
  KSTAGE_ASSIGN_OR_RETURN(copy, backend_->upload(rows->data(), rows->size() * sizeof(uint32_t)));
  ResidentRows& slot = resident_[resident_next_++ % 4];
  slot = ResidentRows{rows, rows.get(), copy};
  return copy;
}

Result<BufferPtr> Column::gather(const uint32_t* rows, size_t n, std::vector<uint64_t>& starts,
                                 const uint32_t* resident) const {
  BufferPtr out;
  auto row_at = [rows](size_t i) { return rows ? rows[i] : uint32_t(i); };
  if (!schema_.is_array) {
    const size_t rb = row_bytes();
    KSTAGE_ASSIGN_OR_RETURN(out, allocate_written(*backend_, n * rb));
    kernels::RowCopy k;
    k.dst = out->data();
    k.dst_stride = int64_t(rb);
    k.src = values_->data();
    k.src_stride = int64_t(rb);
    k.src_index = resident ? resident : rows;
    k.indices_resident = resident != nullptr;
    k.n = n;
    k.row_bytes = rb;
    backend_->row_copy(k);
    return out;
  }
  // Empty rows take no copy (a column whose rows are all empty has no buffer at all).
  starts.resize(n);
  std::vector<const std::byte*> from;
  std::vector<uint64_t> to, bytes;
  uint64_t cursor = 0, bits = kernels::kRaggedRowAlign;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t len = array_length_[row_at(i)];
    starts[i] = cursor;
    if (len > 0) {
      from.push_back(values_->data() + array_offset_[row_at(i)]);
      to.push_back(cursor);
      bytes.push_back(len);
      bits |= reinterpret_cast<uintptr_t>(from.back()) | cursor | len;
    }
    cursor += kernels::ragged_align_up(len);
  }
  KSTAGE_ASSIGN_OR_RETURN(out, allocate_written(*backend_, cursor));
  if (!from.empty()) {
    kernels::RaggedCopy k{out->data(), to.data(), from.data(), bytes.data(), from.size()};
    backend_->ragged_copy(k, kernels::widest_word(bits));
  }
  return out;
}

void Column::materialize_rows() {
  if (affine_rows_ == 0) return;
  std::vector<bool> live(affine_rows_, true);
  row_of_.reserve(affine_first_, affine_first_ + affine_rows_ - 1);  // every allocation first
  for (size_t r = 0; r < affine_rows_; ++r) row_of_.at(affine_first_ + r) = uint32_t(r);
  row_live_ = std::move(live);
  affine_rows_ = 0;
  ++structure_;
}

bool Column::affine_progression(const PrimSeq& prims, size_t n, size_t& first_row,
                                size_t& row_step) const {
  if (affine_rows_ == 0 || !prims.is_progression() || n == 0) return false;
  const uint64_t first = prims.first(), step = prims.stride();
  if (first < affine_first_ || first - affine_first_ >= affine_rows_) return false;
  const uint64_t row = first - affine_first_;
  if ((affine_rows_ - 1 - row) / step < n - 1) return false;  // the last one is a row too
  first_row = size_t(row);
  row_step = n == 1 ? 1 : size_t(step);  // one row: its step is never taken (and may be huge)
  return true;
}

void Column::reserve_rows(size_t n) {
  const size_t grow = row_live_.size() + n;
  reserve_geometric(row_live_, grow);
  if (!stamps_.empty()) stamps_.reserve_geometric(grow);
  if (schema_.is_array) {
    reserve_geometric(array_offset_, grow);
    reserve_geometric(array_length_, grow);
    scratch_rows_.resize(n);
  }
}

void Column::append_rows(const StagedRows& rows, size_t base, NewPrims& new_prims, TargetRows& t) {
  const size_t grow = base + rows.n;
  row_live_.resize(grow, true);
  if (!stamps_.empty())
    for (size_t i = 0; i < rows.n; ++i) stamps_.push_back_zero();
  if (schema_.is_array) {
    array_offset_.resize(grow, 0);
    array_length_.resize(grow, 0);
  }
  if (rows.prims->data()) {  // the write's own list: every prim of it is new
    new_prims.shared = rows.prims;
    new_prims.shared_n = rows.n;
    new_prims.block = rows.block;
  } else {
    for (size_t i = 0; i < rows.n; ++i) new_prims.list.push_back((*rows.prims)[i]);
  }
  live_rows_ += rows.n;
  ++structure_;
  t.identity = base == 0;  // (then they are all the rows, in order)
  if (t.identity) return;
  if (schema_.is_array) {  // apply_array takes a row per target
    for (size_t i = 0; i < rows.n; ++i) scratch_rows_[i] = uint32_t(base + i);
    t.rows = scratch_rows_.data();
  } else {
    t.first_row = base;
    t.row_step = 1;
  }
}

uint32_t Column::tile_row(uint64_t prim) const {
  for (const Tile& tile : tiles_) {
    const uint64_t off = prim - tile.first;  // (wraps for a prim below the tile)
    if (off >= tile.nt * tile.ns) continue;
    const int32_t j = tile.rank[off % tile.ns];
    return j < 0 ? kNoRow : tile.row(off / tile.ns, size_t(j));
  }
  return kNoRow;
}

void Column::materialize_tiles() {
  for (const Tile& tile : tiles_)
    for (size_t k = 0; k < tile.ns; ++k) {
      if (tile.rank[k] < 0) continue;
      for (size_t t = 0; t < tile.nt; ++t)
        row_of_.at(tile.first + t * tile.ns + k) = tile.row(t, size_t(tile.rank[k]));
    }
  tiles_.clear();
}

Column::TargetRows Column::assign_rows(const StagedRows& rows, NewPrims& new_prims) {
  TargetRows t;
  t.row_space_before = row_space();
  t.prim_bound_before = prim_bound_;
  // Consecutive new prims in order: an empty fixed-size column's first write takes the affine
  // form, and an affine column's write of the prims right after its run (a clone of range
  // member 0 to members 1..N, the next batch of a growing range) grows it -- no per-prim
  // bookkeeping at all.
  const bool empty = row_space() == 0;
  if (!schema_.is_array && (empty || affine_rows_ != 0) && rows.subset == nullptr && rows.n > 0 &&
      rows.n < size_t(kNoRow) - affine_rows_) {
    const PrimSeq& s = *rows.prims;
    const uint64_t first = empty ? s[0] : affine_first_ + affine_rows_;
    if (first != 0 && consecutive_from(s, rows.n, first)) {
      if (empty) {
        affine_first_ = first;
        stamps_.clear();
        t.identity = true;  // row i is target i: apply_fixed takes the staged buffer as it is
      } else {
        if (!stamps_.empty()) {
          stamps_.reserve_geometric(affine_rows_ + rows.n);  // may throw: nothing changed yet
          for (size_t i = 0; i < rows.n; ++i) stamps_.push_back_zero();
        }
        t.first_row = affine_rows_;
        t.row_step = 1;
      }
      new_prims.run_first = first;
      new_prims.run_count = rows.n;
      affine_rows_ += rows.n;
      prim_bound_ = std::max<uint64_t>(prim_bound_, affine_first_ + affine_rows_);
      live_rows_ += rows.n;
      ++structure_;
      return t;
    }
  }
  // A clone's copies made as one block, all at or past this column's bound (new to it, as at
  // the call): their rows are appended in target order as one tile, and only the targets' own
  // rows (the copies of the source itself) take table entries.
  if (rows.block && rows.prims->data() && rows.subset == nullptr && free_rows_.empty() &&
      tiles_.size() < kMaxTiles && rows.block->first >= prim_bound_ &&
      rows.n == rows.block->nt * rows.block->nodes.size() &&
      row_space() + rows.n < size_t(kNoRow)) {
    const CopyBlock& b = *rows.block;
    const uint64_t* ids = rows.prims->data();
    const size_t per = b.nodes.size();
    // The node of each row of a target: the source itself (the target: its own id) at most
    // once, the others nodes of the block.
    size_t root = per;  // per: the source itself has no row here
    bool tiles = true;
    for (size_t j = 0; j < per && tiles; ++j) {
      if (b.nodes[j] != CopyBlock::kRoot) tiles = b.nodes[j] < b.ns;
      else if (root == per) root = j;
      else tiles = false;
    }
    bool absent = tiles;
    if (root < per)
      for (size_t i = 0; absent && i < b.nt; ++i) absent = row_of(ids[i * per + root]) == kNoRow;
    if (absent) {
      materialize_rows();  // (an affine column's run is not followed: the tables from here on)
      const size_t base = row_live_.size();
      // Every allocation first: the tile, the tables' room, the targets' entries' pages.
      Tile tile{b.first, b.ns, b.nt, per, base, std::vector<int32_t>(b.ns, -1)};
      for (size_t j = 0; j < per; ++j)
        if (j != root) tile.rank[b.nodes[j]] = int32_t(j);
      tiles_.reserve(tiles_.size() + 1);
      reserve_rows(rows.n);
      uint64_t largest = b.id(b.nt - 1, b.ns - 1);
      if (root < per) {
        for (size_t i = 0; i < b.nt; ++i) {
          row_of_.at(ids[i * per + root]);
          largest = std::max(largest, ids[i * per + root]);
        }
        // Nothing below allocates.
        for (size_t i = 0; i < b.nt; ++i)
          row_of_.at(ids[i * per + root]) = uint32_t(base + i * per + root);
      }
      tiles_.push_back(std::move(tile));
      prim_bound_ = std::max(prim_bound_, largest + 1);
      append_rows(rows, base, new_prims, t);
      return t;
    }
  }
  // A write none of whose targets holds the attribute (a clone's copies, a batch of new prims)
  // into a column with no free row: the targets take new rows at the end, in target order --
  // no row map made, copied and scanned, and fixed rows written with no index.
  if (rows.subset == nullptr && free_rows_.empty() && rows.n > 0 &&
      row_space() + rows.n < size_t(kNoRow)) {
    const PrimSeq& s = *rows.prims;
    const uint64_t* listed = s.data();
    auto id = [&s, listed](size_t i) { return listed ? listed[i] : s[i]; };
    // (Prims at or past the bound never held a row: a clone's copies are new paths.)
    auto is_new = [this](uint64_t p) { return p >= prim_bound_ || row_of(p) == kNoRow; };
    bool absent = is_new(id(0));        // (an update of prims that hold it stops here)
    if (absent && affine_rows_ != 0) {  // every target looked at before the tables are made
      for (size_t i = 1; absent && i < rows.n; ++i) absent = is_new(id(i));
      if (absent) materialize_rows();  // (the run is not followed: the tables from here on)
    }
    const size_t base = row_live_.size();
    uint64_t largest = 0;
    if (absent) {
      // Every allocation first: the tables' room and the lists (nothing changes yet).
      reserve_rows(rows.n);
      if (!listed) reserve_geometric(new_prims.list, new_prims.list.size() + rows.n);
      // One pass over the ids: each target's entry takes its new row, its page made on the way.
      // A target found holding the attribute, or a page that cannot be made, takes back the
      // entries set so far (their pages exist: that cannot fail).
      size_t set = 0;
      auto take_back = [&] {
        for (size_t i = 0; i < set; ++i) row_of_.at(id(i)) = kNoRow;
      };
      try {
        row_of_.for_entries(rows.n, id, [&](uint32_t& r, size_t i) {
          const uint64_t p = id(i);
          if (p < prim_bound_ && (r != kNoRow || tile_row(p) != kNoRow)) {
            absent = false;
            return false;
          }
          r = uint32_t(base + i);
          largest = std::max(largest, p);
          ++set;
          return true;
        });
      } catch (...) {
        take_back();
        throw;
      }
      if (!absent) take_back();
    }
    if (absent) {
      prim_bound_ = std::max(prim_bound_, largest + 1);
      append_rows(rows, base, new_prims, t);
      return t;
    }
  }
  uint32_t* ids;
  size_t first_row = 0, row_step = 0;
  const bool progression =
      affine_progression(*rows.prims, rows.subset ? rows.span : rows.n, first_row, row_step);
  if (progression && !rows.subset) {
    // Every target present, at rows first_row + j * row_step: no row map to
    // make or read (the identity is the case of step 1 over all the rows).
    if (first_row == 0 && (row_step == 1 || rows.n == 1) && rows.n == affine_rows_) {
      t.identity = true;
    } else {
      t.first_row = first_row;
      t.row_step = row_step;
    }
    return t;
  }
  if (const uint32_t* subset = rows.subset_index()) {
    if (progression) {  // a masked write through a progression query: rows computed
      if (first_row == 0 && row_step == 1) {
        t.rows = subset;
        t.keep = rows.subset;
        return t;
      }
      scratch_rows_.resize(rows.n);
      for (size_t j = 0; j < rows.n; ++j)
        scratch_rows_[j] = uint32_t(first_row + subset[j] * row_step);
      t.rows = scratch_rows_.data();
      return t;
    }
    // A masked write: its rows are a selection of the rows of the query's
    // prefix, whose row map is cached, so this is one gather.
    const RowMap whole = row_map(rows.prims, rows.span);
    if (whole.identity) {  // element e is row e: the selection is the rows
      t.rows = subset;
      t.keep = rows.subset;
      return t;
    }
    scratch_rows_.resize(rows.n);
    ids = scratch_rows_.data();
    const uint32_t* from = whole.rows->data();
    for (size_t j = 0; j < rows.n; ++j) ids[j] = from[subset[j]];
    t.rows = ids;
    if (whole.all_present) return t;
  } else {
    const RowMap m = row_map(rows.prims, rows.n);
    if (!m.rows) {  // an identity map: every target present, row j is target j
      t.identity = true;
      return t;
    }
    t.rows = m.rows->data();
    t.identity = m.identity;
    t.keep = m.rows;
    if (m.all_present) {
      t.row_map = m.rows;
      return t;
    }
    auto copy = std::make_shared<std::vector<uint32_t>>(*m.rows);
    ids = copy->data();
    t.rows = ids;
    t.keep = std::move(copy);
  }
  // Grow the bookkeeping once for every new prim, not one doubling at a time
  // (a first write of 1e8 prims otherwise moves its arrays ~27 times).
  size_t missing = 0;
  for (size_t i = 0; i < rows.n; ++i)
    if (ids[i] == kNoRow) ++missing;
  if (missing > 0) materialize_rows();  // new prims: the tables from here on
  if (missing > free_rows_.size()) {
    const size_t grow = row_live_.size() + (missing - free_rows_.size());
    reserve_geometric(row_live_, grow);
    if (!stamps_.empty()) stamps_.reserve_geometric(grow);
    if (schema_.is_array) {
      reserve_geometric(array_offset_, grow);
      reserve_geometric(array_length_, grow);
    }
  }
  // Every allocation before any change: the pages of the new prims' ids.
  for (size_t i = 0; i < rows.n; ++i)
    if (ids[i] == kNoRow) row_of_.at(rows.prim(i));
  reserve_geometric(new_prims.list, new_prims.list.size() + missing);
  for (size_t i = 0; i < rows.n; ++i) {
    if (ids[i] != kNoRow) continue;
    const uint64_t p = rows.prim(i);
    uint32_t r;
    if (!free_rows_.empty()) {
      r = free_rows_.back();
      free_rows_.pop_back();
    } else {
      r = uint32_t(row_live_.size());
      row_live_.push_back(false);
      if (!stamps_.empty()) stamps_.push_back_zero();
      if (schema_.is_array) {
        array_offset_.push_back(0);
        array_length_.push_back(0);
      }
    }
    row_of_.at(p) = r;
    row_live_[r] = true;
    ++live_rows_;
    new_prims.list.push_back(p);
    prim_bound_ = std::max(prim_bound_, p + 1);
    ids[i] = r;
  }
  ++structure_;
  t.identity = rows.n == row_space() && rows.n == live_rows_;
  for (size_t i = 0; t.identity && i < rows.n; ++i) t.identity = ids[i] == i;
  return t;
}

void Column::unassign_rows(const NewPrims& new_prims, size_t row_space_before,
                           uint64_t prim_bound_before) {
  // (Every prim at or past the old bound that has a row got it from this write: it goes.)
  prim_bound_ = prim_bound_before;
  if (new_prims.run_count != 0) {  // the write that made the column affine, or grew its run
    affine_rows_ = row_space_before;
    live_rows_ -= new_prims.run_count;
    if (!stamps_.empty()) stamps_.truncate(row_space_before);
    ++structure_;
    return;
  }
  // A tile the write made goes (its rows are past row_space_before: they go below).
  if (!tiles_.empty() && tiles_.back().base >= row_space_before) tiles_.pop_back();
  // (No allocation: the pages exist, and free_rows_ gets back at most what assign_rows took.)
  const uint64_t* ids = new_prims.ids();
  for (size_t i = 0; i < new_prims.count(); ++i) {
    const uint64_t p = ids[i];
    const uint32_t r = row_of_.get(p);
    --live_rows_;
    if (r == kNoRow) continue;  // a copy its tile held
    row_live_[r] = false;
    row_of_.at(p) = kNoRow;
    if (r < row_space_before) free_rows_.push_back(r);
  }
  if (row_live_.size() > row_space_before) {
    row_live_.resize(row_space_before);
    stamps_.truncate(row_space_before);
    if (schema_.is_array) {
      array_offset_.resize(row_space_before);
      array_length_.resize(row_space_before);
    }
  }
  ++structure_;
}

Status Column::apply_write(const StagedRows& rows, uint64_t ordinal, NewPrims& new_prims,
                           const std::function<void(const NewPrims&)>& gain,
                           const std::function<void(const NewPrims&)>& undo) {
  if (rows.n == 0) return Status::OK();
  NewPrims added;
  TargetRows t;
  try {
    t = assign_rows(rows, added);  // may throw std::bad_alloc, changing nothing
  } catch (const std::bad_alloc&) {
    return out_of_memory("no host memory for the rows of a write of %zu prims", rows.n);
  }
  // Every other allocation comes before the rows move (the caller's for the new prims, the
  // stamp's table entry, the stamp table itself and its width; the move's own lists): a
  // failure leaves the column as it was.
  // An unused table entry is harmless: the retry of this ordinal takes it, a compaction drops it.
  uint32_t stamp = 0;
  Status st;
  bool gained = false;
  try {
    gain(added);
    gained = true;
    if (!t.identity) {
      stamp = stamp_for(ordinal);
      ensure_stamps();
      stamps_.fit(stamp);
    }
    st = schema_.is_array ? apply_array(rows, t) : apply_fixed(rows, t);
  } catch (const std::bad_alloc&) {
    st = out_of_memory("no host memory to seal a write of %zu rows", rows.n);
  }
  if (!st.ok()) {
    if (gained) undo(added);
    unassign_rows(added, t.row_space_before, t.prim_bound_before);
    return st;
  }
  if (t.identity) {
    all_changed_at_ = ordinal;  // every row changed: O(1), not one store per row
  } else {
    // On the host, in parallel where the stage's host execution is (one store per row).
    auto host_loop = [this](size_t n, const auto& body) {
      using Body = std::decay_t<decltype(body)>;
      backend_->host_for(
          n,
          [](const void* b, size_t begin, size_t end) {
            (*static_cast<const Body*>(b))(begin, end);
          },
          &body);
    };
    if (t.row_step != 0) stamps_.set_progression(t.first_row, t.row_step, rows.n, stamp, host_loop);
    else stamps_.set_rows(t.rows, rows.n, stamp, host_loop);
  }
  if (!tombstones_.empty())
    for (size_t j = 0; j < rows.n; ++j) tombstones_.erase(rows.prim(j));
  // Remember a sparse write's rows when that costs nothing (they are shared,
  // not scratch) and it is the first change at its ordinal.
  if (!t.identity && t.keep && ordinal > last_change_)
    recent_ = RecentWrite{ordinal, last_change_, t.rows, rows.n, t.keep};
  else recent_ = RecentWrite{};
  last_change_ = std::max(last_change_, ordinal);
  new_prims = std::move(added);
  return Status::OK();
}

Status Column::apply_fixed(const StagedRows& rows, const TargetRows& map) {
  const size_t rb = row_bytes();
  const size_t need = row_space() * rb;
  // A write of every row in row order replaces the storage outright: the
  // staged buffer becomes the column (zero-copy seal), and a reader holding
  // the old buffer keeps it.
  if (map.identity && !rows.indexed_source && rows.data->size() >= need) {
    replace_values(rows.data);
    return Status::OK();
  }
  const size_t have = values_ ? values_->size() : 0;
  if (have < need || pinned()) {
    // Grow geometrically so appending prims one write at a time stays linear.
    const size_t capacity = have < need ? std::max(need, have + have / 2) : have;
    BufferPtr fresh;
    KSTAGE_ASSIGN_OR_RETURN(fresh, backend_->allocate(capacity));
    backend_->populate(*fresh, need);  // (the rows up to `need` are written now, not the room)
    // (An adopted source written to every row in order leaves nothing of the old rows.)
    if (have > 0 && !map.identity)
      backend_->copy_bytes(fresh->data(), values_->data(), std::min(have, need));
    replace_values(std::move(fresh));
  }
  kernels::RowCopy c;
  c.dst = values_->data() + map.first_row * rb;
  c.dst_stride = int64_t(rb * (map.row_step != 0 ? map.row_step : 1));
  c.dst_index = map.identity || map.row_step != 0 ? nullptr : map.rows;
  // (Both indices resident or neither: an indexed source's is host memory.)
  if (c.dst_index && map.row_map && !reads_host() && !rows.source_rows()) {
    KSTAGE_ASSIGN_OR_RETURN(c.dst_index, resident_rows(map.row_map));
    c.indices_resident = true;
  }
  c.src = rows.data->data();
  c.src_stride = int64_t(rb);
  // An adopted sparse write, or a clone's repeated source rows: gathered and scattered in one
  // pass, through an index, a periodic source or a strided one.
  if (rows.indexed_source) {
    c.src_index = rows.source_rows();
    if (!c.src_index && rows.source_period != 0) {
      c.src_period = rows.source_period;
    } else if (!c.src_index) {
      c.src += rows.source_first * rb;
      c.src_stride = int64_t(rows.source_step * rb);
    }
  }
  c.n = rows.n;
  c.row_bytes = rb;
  backend_->row_copy(c);
  return Status::OK();
}

Status Column::apply_array(const StagedRows& rows, const TargetRows& map) {
  const uint32_t* row_ids = map.rows;  // null: the identity (target i is row i)
  const std::byte* staged = rows.data ? rows.data->data() : nullptr;
  // Target index per row (or -1), to know which rows the write replaces.
  std::vector<int64_t> target_of_row(row_space(), -1);
  for (size_t i = 0; i < rows.n; ++i) target_of_row[row_ids ? row_ids[i] : i] = int64_t(i);
  auto new_len = [&](size_t i) { return rows.lengths[i]; };

  uint64_t append = 0, live_after = 0;
  for (size_t r = 0; r < row_space(); ++r) {
    if (!row_live(r)) continue;
    const int64_t t = target_of_row[r];
    if (t < 0) {
      live_after += kernels::ragged_align_up(array_length_[r]);
    } else {
      const uint64_t len = new_len(size_t(t));
      live_after += kernels::ragged_align_up(len);
      if (len != array_length_[r]) append += kernels::ragged_align_up(len);
    }
  }
  const uint64_t capacity = values_ ? values_->size() : 0;
  const bool rebuild =
      pinned() || array_used_ + append > capacity || array_garbage_ > array_used_ / 2 + (1u << 20);

  std::vector<const std::byte*> src_rows;
  std::vector<uint64_t> dst_offsets, bytes;
  uint64_t align_bits = kernels::kRaggedRowAlign;
  // One entry per row moved: every live row for a rebuild, the written ones in place.
  const size_t moves = rebuild ? live_rows_ : rows.n;
  src_rows.reserve(moves);
  dst_offsets.reserve(moves);
  bytes.reserve(moves);
  auto add = [&](const std::byte* src, uint64_t dst, uint64_t len) {
    if (len == 0) return;
    src_rows.push_back(src);
    dst_offsets.push_back(dst);
    bytes.push_back(len);
    align_bits |= reinterpret_cast<uintptr_t>(src) | dst | len;
  };

  if (rebuild) {
    // Pack every live row into a new buffer: untouched rows from the old
    // storage, written rows from the staged data.
    BufferPtr fresh;
    KSTAGE_ASSIGN_OR_RETURN(
        fresh, backend_->allocate(std::max<uint64_t>(live_after + live_after / 2, 64)));
    const std::byte* old = values_ ? values_->data() : nullptr;
    uint64_t cursor = 0;
    std::vector<uint64_t> offset(row_space()), length(row_space());
    for (size_t r = 0; r < row_space(); ++r) {
      if (!row_live(r)) continue;
      const int64_t t = target_of_row[r];
      const uint64_t len = t < 0 ? array_length_[r] : new_len(size_t(t));
      add(t < 0 ? old + array_offset_[r] : staged + rows.starts[size_t(t)], cursor, len);
      offset[r] = cursor;
      length[r] = len;
      cursor += kernels::ragged_align_up(len);
    }
    backend_->populate(*fresh, cursor);  // (the packed rows, not the room after them)
    kernels::RaggedCopy c{fresh->data(), dst_offsets.data(), src_rows.data(), bytes.data(),
                          src_rows.size()};
    backend_->ragged_copy(c, kernels::widest_word(align_bits));
    replace_values(std::move(fresh));
    array_offset_ = std::move(offset);
    array_length_ = std::move(length);
    array_used_ = cursor;
    array_garbage_ = 0;
    return Status::OK();
  }
  // In place: same-length rows overwrite, others append after the used bytes.
  for (size_t i = 0; i < rows.n; ++i) {
    const uint32_t r = row_ids ? row_ids[i] : uint32_t(i);
    const uint64_t len = new_len(i);
    if (len != array_length_[r]) {
      array_garbage_ += kernels::ragged_align_up(array_length_[r]);
      array_offset_[r] = array_used_;
      array_length_[r] = len;
      array_used_ += kernels::ragged_align_up(len);
    }
    add(staged + rows.starts[i], array_offset_[r], len);
  }
  kernels::RaggedCopy c{values_ ? values_->data() : nullptr, dst_offsets.data(), src_rows.data(),
                        bytes.data(), src_rows.size()};
  backend_->ragged_copy(c, kernels::widest_word(align_bits));
  return Status::OK();
}

void Column::apply_delete(const PrimSeq& prims, size_t n, uint64_t ordinal,
                          std::vector<uint64_t>& removed) {
  const size_t before = removed.size();
  // Every allocation first (a delete is applied whole or not at all): the tables, the lists'
  // room and the tombstones' entries (0 reads as no tombstone until it is set below).
  size_t present = 0;
  bool tiled = false;  // a prim that has its row from a tile
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = row_of(prims[i]);
    present += r != kNoRow;
    tiled = tiled || (r != kNoRow && affine_rows_ == 0 && row_of_.get(prims[i]) == kNoRow);
  }
  if (present == 0) return;
  materialize_rows();  // a hole: the tables from here on
  if (tiled) materialize_tiles();
  reserve_geometric(free_rows_, free_rows_.size() + present);  // (not exact: deletes repeat)
  reserve_geometric(removed, removed.size() + present);
  for (size_t i = 0; i < n; ++i)
    if (row_of(prims[i]) != kNoRow) tombstones_.try_emplace(prims[i], 0);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t p = prims[i];
    const uint32_t r = row_of(p);
    if (r == kNoRow) continue;
    row_of_.at(p) = kNoRow;
    row_live_[r] = false;
    free_rows_.push_back(r);
    --live_rows_;
    if (schema_.is_array) {
      array_garbage_ += kernels::ragged_align_up(array_length_[r]);
      array_length_[r] = 0;
    }
    tombstones_[p] = ordinal;
    removed.push_back(p);
  }
  if (removed.size() != before) {
    ++structure_;
    last_change_ = std::max(last_change_, ordinal);
    recent_ = RecentWrite{};
  }
}

}  // namespace kstage::core
