// SPDX-License-Identifier: Apache-2.0
// A column: one attribute's sealed values for every prim that holds it.
//
// Storage is a DeviceBuffer in the column's residency. Fixed-size columns
// hold one tuple per row; array columns hold ragged rows packed into one
// buffer with per-row byte ranges. Bookkeeping (which prim owns which row,
// when each row last changed, tombstones) is host-side.
//
// Snapshots: readers pin the current buffer (a shared_ptr copy). Sealing
// modifies the buffer in place only when nobody else holds it; otherwise it
// copies first (copy-on-write), so a held read group never changes.
#pragma once

#include "core/backend.hpp"
#include "core/buffer.hpp"
#include "core/paged_array.hpp"
#include "core/prim_seq.hpp"
#include "core/stamp_table.hpp"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <vector>

namespace kstage::core {

struct Schema {
  bool is_array = false;
  DLDataType dtype{};  // lanes = tuple width
  kstage_semantic_t semantic = KSTAGE_SEMANTIC_NONE;
};

// A clone's copies made as one block of path ids (PathTree::make_block): the copy of shape node
// k for target t is the path first + t * ns + k. A write whose targets are copies, target after
// target -- row t * nodes.size() + j the copy of node nodes[j] (kRoot: the target itself, a path
// of its own) -- says so (StagedRows::block): a column can then record their rows as one Tile
// rather than one table entry per copy. Its prims are listed all the same.
struct CopyBlock {
  static constexpr uint32_t kRoot = UINT32_MAX;
  uint64_t first = 0;
  size_t ns = 0, nt = 0;
  std::vector<uint32_t> nodes;
  // The copy of shape node k (not kRoot) for target t.
  uint64_t id(size_t t, size_t k) const { return first + t * ns + k; }
};

// A write's data after staging: `n` target prims, their rows in logical order
// in a compact buffer on the column's residency. The targets are prims[0, n),
// or, for a masked write, prims[subset[j]] for j in [0, n): the query's prim
// list is shared, not copied, and only the selected positions are stored.
struct StagedRows {
  PrimList prims;
  size_t n = 0;
  BufferPtr subset;  // host memory, n uint32 ascending, each < span; null: prims[0, n)
  size_t span = 0;   // with subset: the prefix of prims it selects from (the write's count)
  BufferPtr data;
  std::vector<uint64_t> starts, lengths;  // array columns: per row, bytes into data
  // A sparse write whose managed tensor was adopted (host columns): `data` is the producer's
  // whole tensor, and staged row j is its row source_row(j), moved by the seal in the same
  // pass as the scatter. Unset: staged row j is row j of `data` (a compact copy).
  bool indexed_source = false;
  BufferPtr source_index;  // host, n uint32 (the mask's selection, or a copied index_map)
  size_t source_first = 0, source_step = 0;  // without source_index: row first + j * step
  // Without source_index, when set: staged row j is row j % source_period of a compact `data`
  // (a clone's source rows, repeated target after target; first and step unused).
  size_t source_period = 0;

  // A device mask's selection, not known on the host yet: the rows are packed in element order
  // and `n` is the mask's bit count (`span`) until Stage::resolve_selection reads the mask back
  // and sets `n` and `subset` as for a host mask.
  std::shared_ptr<const MaskSelection> device_mask;
  // A device index_map's check, made by the gather that staged these rows (null: none, or a
  // host map checked at the call), with the row count its entries were checked against.
  std::shared_ptr<const IndexCheck> index_check;
  uint64_t index_rows = 0;
  const char* index_rows_from = "";
  const char* index_map_name = "index_map";  // or "index_map64": for the check's message
  std::shared_ptr<const CopyBlock> block;    // the targets are a clone's copies (or null)

  const uint32_t* source_rows() const {
    return source_index ? reinterpret_cast<const uint32_t*>(source_index->data()) : nullptr;
  }

  const uint32_t* subset_index() const {
    return subset ? reinterpret_cast<const uint32_t*>(subset->data()) : nullptr;
  }
  uint64_t prim(size_t j) const { return (*prims)[subset ? subset_index()[j] : j]; }
};

// The prims a write made new in a column: a list, or, for the first write of
// an affine column, a run [run_first, run_first + run_count) (no list of 1e8
// ids to make and walk). When every target of a write is new, the list is the
// write's own (`shared`, kept alive by it: not copied).
struct NewPrims {
  std::vector<uint64_t> list;
  PrimList shared;
  size_t shared_n = 0;
  std::shared_ptr<const CopyBlock> block;  // with `shared`: its prims are a clone's copies
  uint64_t run_first = 0, run_count = 0;

  const uint64_t* ids() const { return shared ? shared->data() : list.data(); }
  size_t count() const { return shared ? shared_n : list.size(); }
  bool empty() const { return count() == 0 && run_count == 0; }
  // f(ids, n) for batches of the prims of ids()[0, count()), in the same order every time: a
  // clone's copies computed from their block (the targets' own ids, elsewhere in the id
  // space, first), in batches of a buffer here.
  template <class F>
  void for_each_batch(F&& f) const {
    const uint64_t* p = ids();
    if (!block) {
      if (count() > 0) f(p, count());
      return;
    }
    constexpr size_t kBatch = 256;
    uint64_t buffer[kBatch];
    size_t used = 0;
    auto add = [&](uint64_t id) {
      buffer[used++] = id;
      if (used == kBatch) {
        f(static_cast<const uint64_t*>(buffer), used);
        used = 0;
      }
    };
    const std::vector<uint32_t>& nodes = block->nodes;
    const size_t per = nodes.size();
    for (size_t j = 0; j < per; ++j)
      if (nodes[j] == CopyBlock::kRoot)
        for (size_t t = 0; t < block->nt; ++t) add(p[t * per + j]);
    for (size_t t = 0; t < block->nt; ++t)
      for (uint32_t k : nodes)
        if (k != CopyBlock::kRoot) add(block->id(t, k));
    if (used > 0) f(static_cast<const uint64_t*>(buffer), used);
  }
  // f(prim) for each of them, in that order.
  template <class F>
  void for_each(F&& f) const {
    for_each_batch([&](const uint64_t* ids, size_t n) {
      for (size_t i = 0; i < n; ++i) f(ids[i]);
    });
  }
};

// Where a list of prims sits in a column: computed once per (prim list,
// column structure) and shared, so steady-state writes and reads of the same
// query do no per-prim host work.
struct RowMap {
  // Per prim; kNoRow if absent. Null for an identity map (prim i is row i, and
  // those are all the rows), affine column or not: no 4 bytes per prim for the
  // commonest map of all.
  std::shared_ptr<const std::vector<uint32_t>> rows;
  bool all_present = false;
  bool identity = false;  // all present, rows[i] == i, and they are all the rows
  uint32_t row(size_t i) const { return rows ? (*rows)[i] : uint32_t(i); }
};

class Column {
 public:
  static constexpr uint32_t kNoRow = UINT32_MAX;
  // The stamp table is compacted when it outgrows max(2 x rows, this).
  static constexpr size_t kMinStampTable = 4096;

  Column(uint64_t attribute, Schema schema, Backend* backend)
      : attribute_(attribute), schema_(schema), backend_(backend), serial_(next_serial()) {}

  uint64_t attribute() const { return attribute_; }
  const Schema& schema() const { return schema_; }
  Backend& backend() const { return *backend_; }
  size_t row_bytes() const;  // fixed: tuple bytes; array: bytes of one element
  // Tells this column apart from every other column of the process, one deleted and made
  // again included (what remembers a column by its address could be fooled).
  uint64_t serial() const { return serial_; }
  // Changes whenever rows are assigned or freed (a prim gains or loses the attribute).
  uint64_t structure() const { return structure_; }

  // --- sealed state -------------------------------------------------------
  uint32_t row_of(uint64_t prim) const {
    if (affine_rows_ != 0)
      return prim - affine_first_ < affine_rows_ ? uint32_t(prim - affine_first_) : kNoRow;
    const uint32_t r = row_of_.get(prim);
    return r != kNoRow || tiles_.empty() ? r : tile_row(prim);
  }
  bool has(uint64_t prim) const { return row_of(prim) != kNoRow; }
  uint64_t changed_at(uint32_t row) const {
    return stamps_.empty() ? all_changed_at_
                           : std::max(all_changed_at_, stamp_ordinals_[stamps_.get(row)]);
  }
  // The parts of changed_at, for scans: a row's last change is the larger of
  // the ordinal of the last write of every row and the ordinal of its stamp.
  // Stamps grow with the ordinal, so "changed at or after `ordinal`" is
  // stamp >= first_stamp_at_or_after(ordinal): one compare per row. Null
  // stamps: every row's stamp is 0 (only writes of every row so far).
  uint64_t all_rows_changed_at() const { return all_changed_at_; }
  // Empty while every row's stamp is 0; else one per row, 1, 2 or 4 bytes wide.
  const StampTable& row_stamps() const { return stamps_; }
  uint32_t first_stamp_at_or_after(uint64_t ordinal) const;
  // Ordinal at which `prim` lost this attribute (0: no tombstone).
  uint64_t tombstone(uint64_t prim) const;
  bool has_tombstones() const { return !tombstones_.empty(); }
  // The highest ordinal any row or tombstone of this column carries (seals
  // apply in ordinal order): a change range ending at or after it is
  // answerable without looking at a single prim.
  uint64_t last_change() const { return last_change_; }
  // The ordinal of the last change if it was a write of every row (so every
  // row's last change is that ordinal), else 0.
  uint64_t whole_change() const { return all_changed_at_ == last_change_ ? all_changed_at_ : 0; }
  // The last write, when it was sparse and is the only change at or after
  // `begin`: then its rows are exactly the rows changed in [begin, any end],
  // and a change-range read need not scan the column. Null otherwise.
  struct RecentWrite {
    uint64_t ordinal = 0;
    uint64_t previous_change = 0;  // last_change() before this write
    const uint32_t* rows = nullptr;
    size_t n = 0;
    std::shared_ptr<const void> keep;  // owns `rows`
  };
  const RecentWrite* only_change_since(uint64_t begin) const {
    return recent_.rows && recent_.previous_change < begin && begin <= recent_.ordinal ? &recent_
                                                                                       : nullptr;
  }
  size_t live_rows() const { return live_rows_; }
  size_t row_space() const {
    return affine_rows_ != 0 ? affine_rows_ : row_live_.size();
  }  // high-water mark of rows

  // The buffer readers pin. Fixed: row r at r*row_bytes(). Array: see row_range.
  const BufferPtr& values() const { return values_; }
  // Array columns: byte offset and byte length of a row's elements.
  uint64_t row_offset(uint32_t row) const { return array_offset_[row]; }
  uint64_t row_length(uint32_t row) const { return array_length_[row]; }

  // Rows of prims[0, n) (cached while the column's rows do not change).
  RowMap row_map(const PrimList& prims, size_t n);
  // Whether every prim of prims[0, n) holds this attribute: O(1) for a progression within an
  // affine column's rows (an UPDATE tick through a strided range query), else the row map's.
  bool holds_all(const PrimList& prims, size_t n) {
    size_t first_row, row_step;
    return affine_progression(*prims, n, first_row, row_step) || row_map(prims, n).all_present;
  }
  // Whether the column's kernels read host arrays where they are (else
  // index arrays go to the device: see resident_rows).
  bool reads_host() const { return backend_->can_access(DLDevice{kDLCPU, 0}); }
  // A cached row map's copy on the column's device, uploaded the first time
  // it is used and then kept while the row map lives.
  Result<const uint32_t*> resident_rows(const std::shared_ptr<const std::vector<uint32_t>>& rows);
  // The same copy itself, for a holder that outlives the cache slot (a read group's device
  // index map).
  Result<BufferPtr> resident_copy(const std::shared_ptr<const std::vector<uint32_t>>& rows);

  // A compact copy of rows[0, n) (null: rows 0 .. n-1) in a new buffer on the column's device,
  // enqueued there (a read's compact group, a clone's source rows): fixed rows row_bytes()
  // apart; array rows packed 8-byte aligned, row i at starts[i] (filled here; unused for fixed
  // columns). `resident`: the same row numbers already in the column's memory (a cached row
  // map's copy, resident_rows), gathered through instead of `rows`.
  Result<BufferPtr> gather(const uint32_t* rows, size_t n, std::vector<uint64_t>& starts,
                           const uint32_t* resident = nullptr) const;

  // --- sealing ------------------------------------------------------------
  // Applies a staged write at `ordinal`. `new_prims` collects prims that gain
  // this attribute. `gain(new_prims)` runs before any row moves (while the new
  // prims' bookkeeping is in cache), so that what the caller does with them
  // cannot fail after the column took them (it may throw std::bad_alloc,
  // changing nothing); if the write fails after it, `undo(new_prims)` takes it
  // back (it must not throw). On failure (OUT_OF_MEMORY) the column is unchanged.
  Status apply_write(const StagedRows& rows, uint64_t ordinal, NewPrims& new_prims,
                     const std::function<void(const NewPrims&)>& gain,
                     const std::function<void(const NewPrims&)>& undo);
  // Storage the seals since the last call replaced, for the stage to release after its lock
  // (an adopted buffer's deleter may call back into the stage).
  // Never throws: what `into` has no room for stays here, for the next call.
  void take_replaced(std::vector<BufferPtr>& into) noexcept {
    try {
      const size_t need = into.size() + replaced_.size();
      if (need > into.capacity()) into.reserve(std::max(need, 2 * into.capacity()));
    } catch (...) {
      return;
    }
    for (BufferPtr& b : replaced_) into.push_back(std::move(b));
    replaced_.clear();
  }
  // Removes prims[0, n) (those present) at `ordinal`; collects them in `removed`. May throw
  // std::bad_alloc, changing nothing.
  void apply_delete(const PrimSeq& prims, size_t n, uint64_t ordinal,
                    std::vector<uint64_t>& removed);

 private:
  // The column rows of a write's targets, in target order.
  struct TargetRows {
    const uint32_t* rows = nullptr;
    bool identity = false;  // rows[j] == j and they are all the rows
    // Target j is row first_row + j * row_step (an affine column written
    // through a progression query, every k-th prim say): no table. 0: not so.
    size_t row_step = 0, first_row = 0;
    std::shared_ptr<const void> keep;  // owns `rows`; null when scratch_rows_ holds them
    // Set when `rows` is a cached row map (kept on the device, not re-uploaded).
    std::shared_ptr<const std::vector<uint32_t>> row_map;
    size_t row_space_before = 0;     // row_space() before assign_rows added rows
    uint64_t prim_bound_before = 0;  // prim_bound_ before it
  };
  Status apply_fixed(const StagedRows& rows, const TargetRows& t);
  Status apply_array(const StagedRows& rows, const TargetRows& t);
  // Rows for the targets; allocates rows for new prims (bookkeeping only).
  TargetRows assign_rows(const StagedRows& rows, NewPrims& new_prims);
  // Undoes assign_rows(): the new prims lose their rows, and rows it added past
  // `row_space_before` go (a read's whole-column tensor must not outgrow the values).
  void unassign_rows(const NewPrims& new_prims, size_t row_space_before,
                     uint64_t prim_bound_before);
  // For an affine column: whether prims[0, n) of `prims` are rows first_row +
  // j * row_step of it (a progression query within the column's rows).
  bool affine_progression(const PrimSeq& prims, size_t n, size_t& first_row,
                          size_t& row_step) const;
  // Room in the row tables for n more rows, and scratch_rows_ for n rows of an array column
  // (may throw std::bad_alloc, changing nothing).
  void reserve_rows(size_t n);
  // Rows appended for a write of new prims, target j at row base + j (the write's row table
  // room reserved): the tables grown, the prims counted, the targets' rows in `t`.
  void append_rows(const StagedRows& rows, size_t base, NewPrims& new_prims, TargetRows& t);
  // The row of a prim a tile holds (kNoRow: none does).
  uint32_t tile_row(uint64_t prim) const;
  // Writes every tile's rows into row_of_ and drops the tiles (before a change that gives a
  // copy's row away). May throw std::bad_alloc part way: the entries made agree with the tiles.
  void materialize_tiles();
  // Whether row r holds a prim (else it is a free row).
  bool row_live(size_t r) const { return affine_rows_ != 0 || row_live_[r]; }
  // Leaves the affine form for the tables (any change but writes of its rows
  // needs them). May throw std::bad_alloc before changing anything.
  void materialize_rows();
  // Stamps for every row (they are kept empty while every row's is 0).
  void ensure_stamps() {
    if (stamps_.empty()) stamps_.assign_zeros(row_space());
  }
  // The stamp of `ordinal` (a new table entry if it is a new ordinal).
  uint32_t stamp_for(uint64_t ordinal);
  // Drops table entries no row refers to, renumbering the stamps.
  void compact_stamps();
  // A reader holds the buffer (a read group or an export: its pin), someone
  // else shares it, or it is not ours to write. The pin check comes first
  // and is an acquire: a reader's release of its pin happens-before an
  // in-place write that finds no pin (use_count() alone orders nothing).
  void replace_values(BufferPtr b) {
    if (values_) replaced_.push_back(std::move(values_));
    values_ = std::move(b);
  }
  bool pinned() const {
    return values_ && (values_->pinned() || values_.use_count() > 1 || values_->read_only());
  }

  static uint64_t next_serial();

  uint64_t attribute_;
  Schema schema_;
  Backend* backend_;
  uint64_t serial_;

  BufferPtr values_;
  std::vector<BufferPtr> replaced_;  // see take_replaced()
  // The affine form: rows [0, affine_rows_) are prims affine_first_ + row, and
  // the column holds nothing else -- no per-prim tables at all. A column
  // takes it when its first write targets consecutive new prims in order (a
  // path range's query, or paths interned one after another), and leaves it
  // (materialize_rows) at the first change that is not a write of its rows.
  uint64_t affine_first_ = 0;
  size_t affine_rows_ = 0;                   // 0: the tables below
  PagedArray<uint32_t, UINT32_MAX> row_of_;  // indexed by path id; UINT32_MAX = kNoRow
  // Rows of a clone's copies (StagedRows::block), each tile one write's: rows base + t * s + j
  // are the copies of its nodes[j] for targets t < nt, the block's ids first + t * ns + node;
  // rank[node] is that j, or -1 (no row: the node does not hold this attribute). The targets'
  // own rows are in row_of_. At most kMaxTiles (a lookup walks them); materialized into
  // row_of_ before a delete.
  struct Tile {
    uint64_t first = 0;
    size_t ns = 0, nt = 0, s = 0, base = 0;
    std::vector<int32_t> rank;
    uint32_t row(size_t t, size_t j) const { return uint32_t(base + t * s + j); }
  };
  static constexpr size_t kMaxTiles = 16;
  std::vector<Tile> tiles_;
  // No prim at or past this id has ever held a row here (whatever form the column had): a
  // write of new paths (a clone's copies) knows them absent without a look at row_of_.
  uint64_t prim_bound_ = 0;
  // Per row, whether a prim holds it (1 bit a row: which prim is row_of_'s
  // to say, and nothing needs the reverse).
  std::vector<bool> row_live_;
  // Per row, the last change as an index into stamp_ordinals_ (one entry per
  // distinct ordinal this column applied, increasing): a sparse seal stores 1-4
  // bytes per row (StampTable), not an 8-byte ordinal. See also all_changed_at_.
  // Empty until the first sparse write (every stamp 0).
  StampTable stamps_;
  std::vector<uint64_t> stamp_ordinals_{0};
  size_t compacted_to_ = 0;  // stamp_ordinals_.size() after the last compaction
  // A write of every row sets this instead of each row's stamp: a
  // row's last change is the larger of the two.
  uint64_t all_changed_at_ = 0;
  uint64_t last_change_ = 0;
  RecentWrite recent_;
  uint64_t structure_ = 0;  // bumped whenever rows are assigned or freed
  struct CachedRowMap {
    std::weak_ptr<const PrimSeq> prims;
    const PrimSeq* key = nullptr;
    size_t n = 0;
    uint64_t structure = 0;
    RowMap map;
  };
  CachedRowMap cache_[4];
  size_t cache_next_ = 0;
  struct ResidentRows {
    std::weak_ptr<const std::vector<uint32_t>> rows;
    const std::vector<uint32_t>* key = nullptr;
    BufferPtr copy;
  };
  ResidentRows resident_[4];
  size_t resident_next_ = 0;
  // Rows of a masked write's targets, reused from seal to seal.
  std::vector<uint32_t> scratch_rows_;
  std::vector<uint32_t> free_rows_;
  size_t live_rows_ = 0;
  std::unordered_map<uint64_t, uint64_t> tombstones_;  // prim -> ordinal
  // Array columns only.
  std::vector<uint64_t> array_offset_, array_length_;  // per row, bytes
  uint64_t array_used_ = 0;                            // bytes appended so far
  uint64_t array_garbage_ = 0;                         // bytes no row refers to any more
};

}  // namespace kstage::core
