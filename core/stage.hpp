// SPDX-License-Identifier: Apache-2.0
// The stage engine: columns, write floors, pending mutations and sealing,
// queries and reads. The C API (api/) owns handles and argument checks of
// its own kind; everything about data and ordering is decided here.
//
// Concurrency: one mutex guards the engine state. Writes validate and stage
// their data (the expensive copy) outside it and only enqueue under it;
// reads hold it just long enough to pin buffers and build their groups.
#pragma once

#include "core/attribute_counts.hpp"
#include "core/column.hpp"
#include "core/column_table.hpp"
#include "core/dictionary.hpp"
#include "core/managed_tensors.hpp"
#include "core/prim_seq.hpp"
#include "core/scene_hierarchy.hpp"
#include "core/write_check.hpp"

#include <map>
#include <mutex>

namespace kstage::core {

// The sessions a read or a map hands out (core/read_session.hpp, core/map_session.hpp).
class ReadSession;
class MapSession;
struct MapGroup;
// The hierarchy and last compute of a world column (core/world_transforms.hpp).
struct TransformStructure;
struct TransformState;

// An op's outcome, and the device work it completes with (none: host work,
// complete before the call that submitted it returned).
struct Op {
  kstage_status_t status = KSTAGE_OK;
  std::string message;
  std::vector<CompletionPtr> work;
  // The device backends the op's work was enqueued on, once each, whether or not that work
  // is complete yet (kstage_op_sync orders consumers after it there); none: a host op.
  std::vector<Backend*> devices;
  // Makes the work enqueued on `b` so far part of the op: its completion (none when done)
  // and the device. A synchronous (host) backend adds nothing. [throws] as Backend::record.
  void add_work(Backend& b);
  // A write with device index maps: their checks, reported once the work is done.
  std::shared_ptr<const WriteCheck> check;
  bool done() const;
  // True once every piece of work is done; false after `timeout_ns`.
  bool wait(uint64_t timeout_ns) const;
  // Once done: the op's outcome -- `status`, or the device's failure of its
  // work (KSTAGE_DEVICE_ERROR), or a bad entry its device checks found
  // (KSTAGE_INVALID_ARGUMENT), kept so that its message stays valid.
  Status outcome() const;

 private:
  mutable std::mutex failure_mutex_;
  mutable Status failure_;
};

// One read group with everything its descriptor points at.
struct ReadGroup {
  kstage_read_group_t desc{};
  // The group is elements [from, from + desc.prim_count) of `prims` and
  // `index_map`, which it shares with the query, the column's cached row map
  // or the other groups of a split read: never copied per group.
  size_t from = 0;
  // A range query's prims are a progression with no list: publish_prims()
  // makes this group's slice in `prim_ids` when the caller fetches the group.
  PrimList prims;
  std::vector<uint64_t> prim_ids;
  // Prim i's row of tensors[0] is index_map[from + i]; null: row i.
  std::shared_ptr<const std::vector<uint32_t>> index_map;
  // The same map in the group's device memory, when the reader asked for it
  // (kstage_read_desc_t::device_index_map): desc.data.index_map points here.
  BufferPtr device_index;
  std::vector<DLTensor> tensors;
  std::vector<int64_t> shapes;   // one per tensor
  std::vector<int64_t> strides;  // one per tensor (always 1: compact)
  BufferPtr pinned;              // the snapshot buffer the tensors point into
  bool owns_buffer = false;      // compact: `pinned` is this reader's own copy
  CompletionPtr ready;           // device work producing the data (desc.device_sync)
  Backend* device = nullptr;     // the device backend that produces it (null: host data)

  // The reader takes a progression without a list as it is (kstage_read_desc_t::
  // prims_as_progression): `prims` stays null, kstage_group_prim_progression names them.
  bool prims_as_progression = false;

  // Points desc.prims at the group's ids (made now for a progression, unless the reader takes
  // it as one).
  void publish_prims() {
    if (desc.prims == nullptr && desc.prim_count > 0 && !prims_as_progression)
      desc.prims = prims->ids(from, desc.prim_count, prim_ids);
  }
  // prims[i] = first + i * stride: false when the group's prims are no known progression.
  bool prim_progression(uint64_t& first, uint64_t& stride) const {
    if (!prims->is_progression()) return false;
    first = desc.prim_count > 0 ? (*prims)[from] : prims->first();
    stride = prims->stride();
    return true;
  }
};

class Stage {
 public:
  static Result<std::unique_ptr<Stage>> create(const kstage_config_t& config);
  ~Stage();

  Dictionary& dictionary() { return dictionary_; }

  // --- queries (prim lists) ------------------------------------------------
  Result<PrimList> query_paths(const uint64_t* paths, uint64_t n);
  // Members start, start + stride, ... of the range whose first id is `first` (count 0: to
  // the range's end; stride 0: 1).
  Result<PrimList> query_range(uint64_t first, uint64_t start, uint64_t count, uint64_t stride);
  // `path_in` is the resolved path list of filter.path_in, or null.
  Result<PrimList> query_filter(const kstage_filter_t& filter,
                                const std::vector<uint64_t>* path_in);

  // --- the scene (core/stage_scene.cpp) ----------------------------------------
  // The parent, children or siblings of every prim of `prims` over the sealed state
  // (kstage_query_hierarchy). INVALID_ARGUMENT for a relation outside kstage_relation_t.
  Result<std::shared_ptr<const HierarchyAnswer>> query_hierarchy(const PrimSeq& prims,
                                                                 kstage_relation_t relation);
  // The existing prims that meet every predicate of `filter` (a current, full struct: the C
  // API read the caller's), in path-id order (kstage_query_filter_ex).
  Result<PrimList> query_filter_ex(const kstage_filter_ex_t& filter);

  // --- mutations -------------------------------------------------------------
  // `managed` owns the call's managed tensors (may adopt some without a copy).
  Result<std::shared_ptr<Op>> write(const PrimList& prims, const uint64_t* attributes,
                                    const kstage_write_data_t* data, uint64_t n, uint64_t ordinal,
                                    kstage_prim_mode_t mode, ManagedTensors* managed);
  Result<std::shared_ptr<Op>> remove(const PrimList& prims, const uint64_t* attributes, uint64_t n,
                                     uint64_t ordinal);
  Status advance_write_floor(uint64_t ordinal, const uint64_t* attributes, uint64_t n);
  Result<uint64_t> write_floor(uint64_t attribute);

  // --- describing the stage (kstage_list_attributes, kstage_attribute_info) ------
  // The attributes that have a column, in token order.
  std::vector<uint64_t> attributes() const;
  // One attribute's column: schema, residency, write floor, sealed prim count (struct_size 0:
  // the caller's is set by the C API). NOT_FOUND when it has no column.
  Result<kstage_attribute_info_t> attribute_info(uint64_t attribute) const;
  // Column `index` of the attribute's columns (kstage_attribute_schema): NOT_FOUND past the last.
  Result<kstage_attribute_info_t> attribute_schema(uint64_t attribute, uint64_t index) const;

  // --- scene: world transforms (core/world_transforms.cpp) ------------------------
  // kstage_compute_world_transforms: one write of the world column at `ordinal` (and deletes
  // of its rows no local matrix backs any more), computed on the local column's backend.
  Result<std::shared_ptr<Op>> compute_world_transforms(const kstage_transform_desc_t& desc,
                                                       uint64_t ordinal);

  // --- scene: clone (core/stage_clone.cpp) -----------------------------------------
  // kstage_clone: the subtree of `source` copied to every target at `ordinal`, one write per
  // column it holds; everything refused at the call, the stage unchanged.
  Result<std::shared_ptr<Op>> clone(uint64_t source, const PrimList& targets, uint64_t ordinal);

  // --- maps ------------------------------------------------------------------
  // A map session over `prims`: its groups planned and their buffers allocated now.
  Result<std::shared_ptr<MapSession>> open_map(const PrimList& prims, const kstage_map_desc_t& desc,
                                               uint64_t ordinal, const uint64_t* element_counts,
                                               uint64_t n);

  // Keeps `keep` (a write's managed tensors) until `work` is done: the
  // device may still read them. Dropped at once when it already is. Never
  // throws: with no memory to keep it for later, it waits for the work here.
  void defer(const std::vector<CompletionPtr>& work, std::shared_ptr<void> keep) noexcept;
  // Releases what deferred work no longer needs.
  void reap_deferred();

  // --- reads -----------------------------------------------------------------
  // Every group of the read, built now (data that lands on the host is complete on return).
  Result<std::vector<std::unique_ptr<ReadGroup>>> read(const PrimList& prims,
                                                       const uint64_t* attributes, uint64_t n,
                                                       const kstage_read_desc_t& desc);
  // A read session handing out read()'s groups one at a time (kstage_read_attributes).
  Result<std::shared_ptr<ReadSession>> open_read(const PrimList& prims, const uint64_t* attributes,
                                                 uint64_t n, const kstage_read_desc_t& desc);
  // Orders a consumer's {stream, event} after the work producing `g`'s data
  // (kstage_group_sync): host data takes {0, 0} only.
  Status sync_consumer(const ReadGroup& g, const kstage_device_sync_t& consumer);
  // Orders a consumer's {stream, event} after the device work of `op` (kstage_op_sync): a
  // host op takes {0, 0} only, an op on several devices no event.
  Status sync_op(const Op& op, const kstage_device_sync_t& consumer);
  // Waits for the stage's work on `device` and reports a fault of that device
  // (kstage_device_check): for callers that hand the stage's device memory to a library that
  // does not check its own device calls (ADIOS2's GPU copies). Host memory: OK.
  Status check_device(DLDevice device);

 private:
  friend class MapSession;  // commits its groups

  // Commits `groups` of `session` as one op: all are enqueued or none is.
  // `done_sync` is the producer's (docs/design.md "Synchronisation"; host maps: {0, 0}).
  Result<std::shared_ptr<Op>> commit(MapSession& session, const std::vector<MapGroup*>& groups,
                                     const kstage_device_sync_t& done_sync);

  struct Mutation {
    enum class Kind { Write, DeleteAttributes, DeletePrims } kind;
    uint64_t ordinal = 0;
    std::vector<uint64_t> attributes;  // Write: one; DeleteAttributes: those named
    StagedRows rows;                   // targets (rows.prim(j), j < rows.n); data: Write only
    // Write: the column it writes (of attributes[0]; its schema is the write's). Columns are
    // erased only when no pending write names them.
    Column* column = nullptr;
    // Write: KSTAGE_ATTRIBUTE_MODE_FORCE (its targets may hold the attribute in another column).
    bool replaces = false;
    // Write: the call's device checks (null: none); a seal skips the write unless they pass.
    std::shared_ptr<const WriteCheck> check;
    bool created_column = false;  // Write: the call made the column
    bool targets(uint64_t attribute) const;
  };
  using Key = std::pair<uint64_t, uint64_t>;  // (ordinal, submission sequence)

  Stage(std::unique_ptr<BackendSet> backends, DLDevice residency)
      : backends_(std::move(backends)), residency_(residency) {}
  // Waits for all device work (failure paths free what it may still read).
  void fence_devices();

  Status check_token(uint64_t token, const char* what, uint64_t index) const;
  Status check_distinct_tokens(const uint64_t* attributes, uint64_t n) const;
  std::string token_name(uint64_t token) const;
  std::string path_name(uint64_t path) const;
  uint64_t floor_of(uint64_t attribute) const;  // requires mutex_
  uint64_t global_floor() const;                // requires mutex_
  // Whether each target of `t` exists at `key` (sealed state plus pending
  // mutations ordered before it). Requires mutex_.
  std::vector<char> projected_existence(const StagedRows& t, Key key) const;
  // No mutation is pending ahead of `key`: the sealed state is the projected
  // state. Requires mutex_.
  bool nothing_pending_before(Key key) const {
    return pending_.empty() || !(pending_.begin()->first < key);
  }
  // `c`: the column written, if it exists (its cached row maps answer UPDATE
  // without a per-prim lookup when every target holds the attribute).
  Status check_prim_mode(StagedRows& rows, kstage_prim_mode_t mode, Key key, Column* c);
  // A device mask's selection made host bookkeeping (StagedRows::device_mask): waits for the
  // mask's copy and reads it back. Requires mutex_.
  Status resolve_selection(StagedRows& rows);
  Status check_floor(uint64_t attribute, uint64_t ordinal) const;  // requires mutex_
  // The column of `attribute` a write or map declaring `declared` goes to (keeps_schema; null:
  // none, a new one), or INVALID_ARGUMENT when two columns differ only in semantic and the
  // declared semantic is NONE. Requires mutex_.
  Result<Column*> column_for(uint64_t attribute, const Schema& declared) const;
  // The targets of a write of `attribute` in `schema` (its column `target`, null: a new one) at
  // `key`, against the other columns of the name: a target holding the attribute in another
  // schema at `key` (sealed state and the pending mutations before it) is refused unless
  // `replaces`, and so is a target a pending REJECT write after `key` would then move to
  // another schema. Free when the name has no other column. Requires mutex_.
  Status check_schema_conflicts(StagedRows& rows, uint64_t attribute, const Column* target,
                                const Schema& schema, bool replaces, Key key);
  // Applies the pending mutations of `attribute` (all its columns) in (from, to]; on failure
  // returns the ordinal to leave the floor at. `skipped_creators`: columns whose creating write
  // was skipped (its device check failed).
  Status seal_attribute(uint64_t attribute, uint64_t from, uint64_t to, uint64_t& reached,
                        std::vector<Column*>& skipped_creators);
  // One pending write applied at a seal: its column takes the rows, and the name's other
  // columns lose its targets (a replaced schema; nothing to do with one column).
  Status seal_write(Mutation& m, uint64_t attribute);
  // Writes made aside and enqueued all at once, so that a call running out of memory while
  // making them changes nothing: add_write() may throw std::bad_alloc; enqueue() moves the
  // nodes in (std::map::merge allocates nothing). Requires mutex_.
  struct WriteBatch {
    ColumnTable::Map columns;        // the new ones
    std::map<Key, Mutation> writes;  // rows moved in by the caller
  };
  // A write of `attribute` to `column` (null: the batch's new column of `schema`, made on
  // `backend` by the first such call), returned for the caller to fill its rows.
  Mutation& add_write(WriteBatch& b, uint64_t attribute, Column* column, const Schema& schema,
                      Backend* backend, uint64_t ordinal, bool replaces = false);
  void enqueue(WriteBatch& b) noexcept;
  // Moves the mutations every target of which is sealed into `sealed` (released by the caller
  // after the lock).
  void collect_sealed_mutations(std::vector<Mutation>& sealed) noexcept;
  Status build_groups(Column& c, const PrimList& prims, const kstage_read_desc_t& desc,
                      std::vector<std::unique_ptr<ReadGroup>>& out);
  // The targets of a clone of `source`: paths, distinct, none at or below the source or
  // below another target (INVALID_ARGUMENT naming it).
  Status check_clone_targets(uint64_t source, const PrimSeq& targets) const;
  // The source and every existing prim below it (sealed), in id order. Requires mutex_.
  std::vector<uint64_t> existing_subtree(uint64_t source);
  // ALREADY_EXISTS when a target, or a copy of a prim of the shape (is_prim) that is a path
  // already, exists at `ordinal` as the ledger stands, or when a path range the copies need
  // cannot be made under a target's existing copy of its parent. Requires mutex_.
  Status check_copies_absent(const PrimSeq& targets, const std::vector<uint64_t>& target_ids,
                             const std::vector<PathTree::ShapeNode>& shape,
                             const std::vector<char>& is_prim, uint64_t ordinal) const;
  // World transforms (core/world_transforms.cpp). Require mutex_.
  std::vector<uint64_t> prims_holding(const Column& c) const;  // sealed, in path-id order
  std::shared_ptr<const TransformStructure> transform_structure(const Column& local) const;

  Dictionary dictionary_;
  std::unique_ptr<BackendSet> backends_;
  DLDevice residency_;  // config.residency: {0, 0} = where the data lives

  struct Deferred {
    std::vector<CompletionPtr> work;
    std::shared_ptr<void> keep;
  };
  std::mutex deferred_mutex_;
  std::vector<Deferred> deferred_;

  mutable std::mutex mutex_;
  ColumnTable columns_;
  std::map<uint64_t, uint64_t> floors_;  // attributes advanced or written
  uint64_t default_floor_ = 0;           // floor of attributes not in floors_
  std::map<Key, Mutation> pending_;
  uint64_t next_seq_ = 1;
  AttributeCounts prim_attribute_count_;  // sealed, indexed by path id
  // Per world attribute: what its last compute read and wrote (incremental computes).
  std::map<uint64_t, std::shared_ptr<TransformState>> transforms_;
  // Bumped by a seal (seal_column) whenever a prim's attribute count crosses 0: a prim
  // appeared or disappeared. Whatever is derived from existence alone -- the scene
  // hierarchy (nearest existing ancestors), a world-transform pass's parents -- is valid while
  // it has not moved.
  uint64_t existence_generation_ = 0;
  // The hierarchy index of existence_generation_ hierarchy_generation_ (null: none built).
  std::shared_ptr<const SceneHierarchy> hierarchy_;
  uint64_t hierarchy_generation_ = 0;
  // The index of the current sealed state, rebuilt if existence moved. Requires mutex_; may
  // throw std::bad_alloc.
  std::shared_ptr<const SceneHierarchy> hierarchy_locked();
};

}  // namespace kstage::core
