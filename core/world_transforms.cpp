// SPDX-License-Identifier: Apache-2.0
// Stage: world transforms (kstage_compute_world_transforms). The compute is a write: it reads
// the local and reset columns' sealed state, runs the kernel (core/kernels/world_transform.hpp)
// on the local column's backend into a buffer of its own, and enqueues that buffer as a staged
// write of the world column at the caller's ordinal -- so the world column is sealed, read,
// exported and change-tracked exactly like a column someone wrote. docs/scene.md has the rules.
#include "core/world_transforms.hpp"

#include "core/dtype.hpp"
#include "core/kernels/transform_ops.hpp"
#include "core/stage.hpp"

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace kstage::core {

namespace {

using kernels::WorldTransform;

bool is_matrix(const Schema& s) {
  return !s.is_array && s.dtype.code == kDLFloat && (s.dtype.bits == 64 || s.dtype.bits == 32) &&
         s.dtype.lanes == 16;
}

std::string describe(const Schema& s) {
  return std::string(s.is_array ? "an array of " : "fixed-size ") + dtype_string(s.dtype);
}

// The per-slot arrays of one compute of n slots, in one block (one upload to a device): local
// rows, reset rows, parents, each starting 8-byte aligned.
struct SlotArrays {
  std::vector<uint64_t> block;  // uint64 words: the int64 parents need 8-byte alignment
  size_t n = 0;
  explicit SlotArrays(size_t slots) : n(slots) { block.resize(2 * words32(n) + n); }
  static size_t words32(size_t n) { return (n + 1) / 2; }  // uint64 words holding n uint32
  uint32_t* local_rows() { return reinterpret_cast<uint32_t*>(block.data()); }
  uint32_t* reset_rows() { return reinterpret_cast<uint32_t*>(block.data() + words32(n)); }
  int64_t* parents() { return reinterpret_cast<int64_t*>(block.data() + 2 * words32(n)); }
  size_t bytes() const { return block.size() * sizeof(uint64_t); }
  // Points `k`'s per-slot arrays into `base`, a copy of the block of n slots.
  static void point_into(WorldTransform& k, const std::byte* base, size_t n) {
    k.local_rows = reinterpret_cast<const uint32_t*>(base);
    k.reset_rows = reinterpret_cast<const uint32_t*>(base + words32(n) * sizeof(uint64_t));
    k.parents = reinterpret_cast<const int64_t*>(base + 2 * words32(n) * sizeof(uint64_t));
  }
};

// What the op keeps until its work is done: the buffers the kernel reads.
struct Pins {
  BufferPtr local, reset, old_world, indices, scratch;
  std::shared_ptr<const std::vector<uint64_t>> host_indices;
};

}  // namespace

std::vector<uint64_t> Stage::prims_holding(const Column& c) const {
  std::vector<uint64_t> out;
  out.reserve(c.live_rows());
  prim_attribute_count_.for_each_run([&](uint64_t first, uint64_t count) {
    for (uint64_t p = first; p < first + count; ++p)
      if (c.has(p)) out.push_back(p);
  });
  return out;
}

std::shared_ptr<const TransformStructure> Stage::transform_structure(const Column& local) const {
  auto s = std::make_shared<TransformStructure>();
  s->local_serial = local.serial();
  s->local_structure = local.structure();
  const std::vector<uint64_t> prims = prims_holding(local);
  const size_t n = prims.size();
  // Each prim's parent: its nearest ancestor path that holds a local matrix. Ancestors that
  // hold none (hidden paths, prims without one) are walked once: `nearest` remembers where
  // each leads, so 4,096 robots under one range parent walk that parent's chain once.
  std::vector<uint64_t> up(n);
  dictionary_.path_parents(prims.data(), n, up.data());
  std::unordered_map<uint64_t, uint64_t> nearest;  // ancestor holding none -> answer (0: none)
  std::vector<uint64_t> chain;
  auto resolve = [&](uint64_t q) {
    chain.clear();
    uint64_t answer = 0;
    while (q != 0) {
      if (local.has(q)) {
        answer = q;
        break;
      }
      if (auto it = nearest.find(q); it != nearest.end()) {
        answer = it->second;
        break;
      }
      chain.push_back(q);
      q = dictionary_.path_parent(q);
    }
    for (uint64_t c : chain) nearest.emplace(c, answer);
    return answer;
  };
  // Prims by local row (rows are dense), to find a parent's index from its path id.
  std::vector<uint32_t> index_of_row(local.row_space(), Column::kNoRow);
  for (size_t i = 0; i < n; ++i) index_of_row[local.row_of(prims[i])] = uint32_t(i);
  std::vector<int64_t> parent(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t q = resolve(up[i]);
    parent[i] = q == 0 ? WorldTransform::kRoot : int64_t(index_of_row[local.row_of(q)]);
  }
  // Depths, walking up to the first known one ("/" may have a larger id than the paths below
  // it, so ids give no order to rely on).
  constexpr uint32_t kUnknown = UINT32_MAX;
  std::vector<uint32_t> depth(n, kUnknown);
  std::vector<size_t> walk;
  for (size_t i = 0; i < n; ++i) {
    size_t at = i;
    walk.clear();
    while (depth[at] == kUnknown && parent[at] != WorldTransform::kRoot) {
      walk.push_back(at);
      at = size_t(parent[at]);
    }
    uint32_t d = depth[at] == kUnknown ? (depth[at] = 0) : depth[at];
    for (size_t k = walk.size(); k-- > 0;) depth[walk[k]] = ++d;
  }
  // Slots: a counting sort by depth, stable (path-id order within a level).
  const size_t levels = n == 0 ? 0 : size_t(*std::max_element(depth.begin(), depth.end())) + 1;
  s->level_offsets.assign(levels + 1, 0);
  for (size_t i = 0; i < n; ++i) ++s->level_offsets[depth[i] + 1];
  for (size_t l = 0; l < levels; ++l) s->level_offsets[l + 1] += s->level_offsets[l];
  std::vector<size_t> next(s->level_offsets.begin(), s->level_offsets.end() - (levels ? 1 : 0));
  std::vector<uint32_t> slot_of(n);
  for (size_t i = 0; i < n; ++i) slot_of[i] = uint32_t(next[depth[i]]++);
  std::vector<uint64_t> by_slot(n);
  s->local_rows.resize(n);
  s->parents.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t slot = slot_of[i];
    by_slot[slot] = prims[i];
    s->local_rows[slot] = local.row_of(prims[i]);
    s->parents[slot] = parent[i] == WorldTransform::kRoot ? WorldTransform::kRoot
                                                          : int64_t(slot_of[size_t(parent[i])]);
  }
  s->prims = std::make_shared<const PrimSeq>(std::move(by_slot));
  // Each local row's slot, and each slot's children (CSR, in slot order): what an incremental
  // compute walks from the prims that changed.
  s->slot_of_row.assign(local.row_space(), Column::kNoRow);
  for (size_t slot = 0; slot < n; ++slot) s->slot_of_row[s->local_rows[slot]] = uint32_t(slot);
  s->child_offsets.assign(n + 1, 0);
  for (size_t slot = 0; slot < n; ++slot)
    if (s->parents[slot] >= 0) ++s->child_offsets[size_t(s->parents[slot]) + 1];
  for (size_t slot = 0; slot < n; ++slot) s->child_offsets[slot + 1] += s->child_offsets[slot];
  s->children.resize(s->child_offsets[n]);
  std::vector<uint32_t> fill(s->child_offsets.begin(), s->child_offsets.end() - 1);
  for (size_t slot = 0; slot < n; ++slot)
    if (s->parents[slot] >= 0) s->children[fill[size_t(s->parents[slot])]++] = uint32_t(slot);
  return s;
}

Result<std::shared_ptr<Op>> Stage::compute_world_transforms(const kstage_transform_desc_t& desc,
                                                            uint64_t ordinal) {
  if (desc.mode != KSTAGE_TRANSFORM_INCREMENTAL && desc.mode != KSTAGE_TRANSFORM_FULL)
    return error(KSTAGE_INVALID_ARGUMENT, "desc.mode %d is not a kstage_transform_mode_t",
                 int(desc.mode));
  // The columns: the caller's tokens, or the default names.
  auto resolve = [&](uint64_t token, const char* field, const char* name) -> Result<uint64_t> {
    if (token == 0) return dictionary_.intern_token(name, std::strlen(name));
    if (!dictionary_.is_token(token))
      return error(KSTAGE_INVALID_ARGUMENT, "desc.%s = %llu is not a token of this stage", field,
                   (unsigned long long)token);
    return token;
  };
  uint64_t local = 0, reset = 0, world = 0;
  KSTAGE_ASSIGN_OR_RETURN(local, resolve(desc.local, "local", KSTAGE_LOCAL_MATRIX));
  KSTAGE_ASSIGN_OR_RETURN(reset, resolve(desc.reset, "reset", KSTAGE_RESET_XFORM_STACK));
  KSTAGE_ASSIGN_OR_RETURN(world, resolve(desc.world, "world", KSTAGE_WORLD_MATRIX));
  auto same = [&](uint64_t a, uint64_t b, const char* fa, const char* fb) -> Status {
    if (a != b) return Status::OK();
    return error(KSTAGE_INVALID_ARGUMENT, "desc.%s and desc.%s both name attribute '%s'", fa, fb,
                 token_name(a).c_str());
  };
  KSTAGE_RETURN_NOT_OK(same(local, world, "local", "world"));
  KSTAGE_RETURN_NOT_OK(same(local, reset, "local", "reset"));
  KSTAGE_RETURN_NOT_OK(same(reset, world, "reset", "world"));
  reap_deferred();

  std::lock_guard lock(mutex_);
  // --- the columns' schemas, the floor --------------------------------------------------
  Column* lc = column(local);
  if (!lc)
    return error(KSTAGE_NOT_FOUND, "the local matrix column '%s' does not exist",
                 token_name(local).c_str());
  if (!is_matrix(lc->schema()))
    return error(KSTAGE_INVALID_ARGUMENT,
                 "the local matrix column '%s' is %s: it must be fixed-size float64 x 16 or "
                 "float32 x 16",
                 token_name(local).c_str(), describe(lc->schema()).c_str());
  Backend& backend = lc->backend();
  Column* rc = column(reset);
  if (rc) {
    const Schema& s = rc->schema();
    if (s.is_array || s.dtype.code != kDLBool || s.dtype.bits != 8 || s.dtype.lanes != 1)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "the reset column '%s' is %s: it must be fixed-size bool (kDLBool, 8 bits)",
                   token_name(reset).c_str(), describe(s).c_str());
    if (&rc->backend() != &backend)
      return error(KSTAGE_NOT_SUPPORTED,
                   "the reset column '%s' lives on %s %d, the local matrix column '%s' on %s %d",
                   token_name(reset).c_str(), device_type_name(rc->backend().device().device_type),
                   int(rc->backend().device().device_id), token_name(local).c_str(),
                   device_type_name(backend.device().device_type), int(backend.device().device_id));
  }
  Column* wc = column(world);
  if (wc) {
    const Schema& s = wc->schema();
    if (s.is_array || !same_dtype(s.dtype, lc->schema().dtype))
      return error(KSTAGE_INVALID_ARGUMENT,
                   "the world matrix column '%s' is %s, the local matrix column '%s' %s: they "
                   "must match",
                   token_name(world).c_str(), describe(s).c_str(), token_name(local).c_str(),
                   describe(lc->schema()).c_str());
    if (&wc->backend() != &backend)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "the world matrix column '%s' lives on %s %d, the local matrix column '%s' on "
                   "%s %d: they must live on one device",
                   token_name(world).c_str(), device_type_name(wc->backend().device().device_type),
                   int(wc->backend().device().device_id), token_name(local).c_str(),
                   device_type_name(backend.device().device_type), int(backend.device().device_id));
  }
  KSTAGE_RETURN_NOT_OK(check_floor(world, ordinal));

  // --- the structure, and whether the last compute's world column can be trusted -------
  std::shared_ptr<TransformState>& state_slot = transforms_[world];
  const TransformState* last = state_slot.get();
  std::shared_ptr<const TransformStructure> structure;
  if (last && last->structure && last->structure->local_serial == lc->serial() &&
      last->structure->local_structure == lc->structure())
    structure = last->structure;
  else structure = transform_structure(*lc);
  const size_t n = structure->size();
  const bool trusted = desc.mode == KSTAGE_TRANSFORM_INCREMENTAL && last && last->local == local &&
                       last->reset == reset && last->structure &&
                       last->structure->local_serial == lc->serial() && wc &&
                       wc->serial() == last->world_serial && floor_of(world) >= last->output &&
                       (rc ? rc->serial() : 0) == last->reset_serial &&
                       !(last->op && last->op->done() && !last->op->outcome().ok());

  // --- which slots to compute -------------------------------------------------------------
  // Incremental work is proportional to what changed: the seeds are found from the columns'
  // change records (O(1) to O(changed) in the common cases), their descendants through the
  // structure's child lists, and only those slots are touched again.
  const uint64_t* prim_of = structure->prims->data();
  std::vector<char> dirty;       // per slot (trusted only)
  std::vector<uint32_t> chosen;  // the dirty slots (trusted only)
  auto seed = [&](size_t slot) {
    if (!dirty[slot]) {
      dirty[slot] = 1;
      chosen.push_back(uint32_t(slot));
    }
  };
  if (trusted) {
    dirty.assign(n, 0);
    // Prims that appeared or have another parent than at the last compute.
    if (structure != last->structure) {
      const TransformStructure& old = *last->structure;
      std::unordered_map<uint64_t, uint64_t> old_parent;  // prim -> parent prim (0: a root)
      old_parent.reserve(old.size());
      const uint64_t* old_prims = old.prims->data();
      for (size_t s = 0; s < old.size(); ++s)
        old_parent.emplace(old_prims[s],
                           old.parents[s] < 0 ? 0 : old_prims[size_t(old.parents[s])]);
      for (size_t s = 0; s < n; ++s) {
        const uint64_t parent =
            structure->parents[s] < 0 ? 0 : prim_of[size_t(structure->parents[s])];
        auto it = old_parent.find(prim_of[s]);
        if (it == old_parent.end() || it->second != parent) seed(s);
      }
    }
    // Local matrices sealed since: the last write's rows when it is the only change, else a
    // look at every slot's row stamp.
    if (lc->last_change() > last->local_seen) {
      if (const Column::RecentWrite* w = lc->only_change_since(last->local_seen + 1)) {
        const std::vector<uint32_t>& slot_of_row = structure->slot_of_row;
        for (size_t j = 0; j < w->n; ++j)
          if (w->rows[j] < slot_of_row.size() && slot_of_row[w->rows[j]] != Column::kNoRow)
            seed(slot_of_row[w->rows[j]]);
      } else {
        for (size_t s = 0; s < n; ++s)
          if (lc->changed_at(structure->local_rows[s]) > last->local_seen) seed(s);
      }
    }
    // Reset flags sealed since, and flags deleted since (rare: a look at every slot).
    if (rc && (rc->last_change() > last->reset_seen || rc->structure() != last->reset_structure)) {
      for (size_t s = 0; s < n; ++s) {
        const uint32_t row = rc->row_of(prim_of[s]);
        if (row != Column::kNoRow ? rc->changed_at(row) > last->reset_seen
                                  : rc->tombstone(prim_of[s]) > last->reset_seen)
          seed(s);
      }
    }
    // World rows someone else wrote or deleted since: computed again (no drift). The last
    // compute's own write, sealed, is the only change since when nobody else wrote (an O(1)
    // answer); a write at the compute's own ordinal is not told apart from it.
    const Column::RecentWrite* own = wc->only_change_since(last->world_seen + 1);
    const bool foreign = wc->last_change() > last->world_seen &&
                         wc->whole_change() != last->output &&
                         !(own && own->ordinal == last->output);
    if (foreign || !wc->holds_all(structure->prims, n)) {
      for (size_t s = 0; s < n; ++s) {
        const uint32_t row = wc->row_of(prim_of[s]);
        if (row == Column::kNoRow) {
          seed(s);
          continue;
        }
        const uint64_t changed = wc->changed_at(row);
        if (changed > last->world_seen && changed != last->output) seed(s);
      }
    }
    // Descendants, through the child lists (chosen grows as it is walked).
    for (size_t i = 0; i < chosen.size(); ++i) {
      const size_t s = chosen[i];
      for (uint32_t c = structure->child_offsets[s]; c < structure->child_offsets[s + 1]; ++c)
        seed(structure->children[c]);
    }
    // Level order: slots are numbered level by level.
    std::sort(chosen.begin(), chosen.end());
  }
  const bool full = !trusted;

  // World rows no local matrix backs: deleted by this compute.
  std::vector<uint64_t> stray;
  if (wc && wc->live_rows() > 0) {
    size_t backed = n;
    if (!wc->holds_all(structure->prims, n)) {
      backed = 0;
      for (size_t s = 0; s < n; ++s) backed += wc->has(prim_of[s]);
    }
    if (wc->live_rows() > backed)
      for (uint64_t p : prims_holding(*wc))
        if (!lc->has(p)) stray.push_back(p);
  }

  // --- the kernel's slots: every one, or the dirty ones (level order kept) ----------------
  std::vector<size_t> level_offsets;
  if (full) {
    level_offsets = structure->level_offsets;
  } else {
    level_offsets.push_back(0);
    size_t level = 0;
    for (size_t i = 0; i < chosen.size(); ++i) {
      const size_t l = structure->level_of(chosen[i]);
      if (l != level && i > 0) level_offsets.push_back(i);
      level = l;
    }
    if (!chosen.empty()) level_offsets.push_back(chosen.size());
  }
  const size_t m = full ? n : chosen.size();
  const size_t levels = level_offsets.empty() ? 0 : level_offsets.size() - 1;

  WorldTransform k;
  k.n = m;
  k.f32 = lc->schema().dtype.bits == 32;
  k.level_offsets = level_offsets.data();
  k.levels = levels;
  auto pins = std::make_shared<Pins>();
  pins->local = lc->values();
  k.local = lc->values() ? lc->values()->data() : nullptr;
  if (rc && rc->live_rows() > 0) {
    pins->reset = rc->values();
    k.reset = rc->values()->data();
  }
  const bool on_host = lc->reads_host();
  // The per-slot arrays: a full compute's are kept with the state (uploaded once per
  // structure and reset rows); an incremental one's are made for its slots.
  BufferPtr kept_full;
  if (m > 0) {
    const bool reuse = full && last && last->full_indices && last->full_for == structure &&
                       last->full_reset_serial == (rc ? rc->serial() : 0) &&
                       last->full_reset_structure == (rc ? rc->structure() : 0) && !on_host;
    if (reuse) {
      kept_full = last->full_indices;
      SlotArrays::point_into(k, kept_full->data(), m);
    } else {
      auto arrays = std::make_shared<SlotArrays>(m);
      uint32_t* local_rows = arrays->local_rows();
      uint32_t* reset_rows = arrays->reset_rows();
      int64_t* parents = arrays->parents();
      if (full) {
        std::copy(structure->local_rows.begin(), structure->local_rows.end(), local_rows);
        std::copy(structure->parents.begin(), structure->parents.end(), parents);
        for (size_t s = 0; s < n; ++s)
          reset_rows[s] = k.reset ? rc->row_of(prim_of[s]) : WorldTransform::kNoReset;
      } else {
        // A dirty slot's parent is dirty too (computed earlier in this pass) or not (its world
        // matrix is the column's, which holds every slot that is not dirty: checked above).
        bool old_world = false;
        for (size_t i = 0; i < m; ++i) {
          const size_t s = chosen[i];
          local_rows[i] = structure->local_rows[s];
          reset_rows[i] = k.reset ? rc->row_of(prim_of[s]) : WorldTransform::kNoReset;
          const int64_t p = structure->parents[s];
          if (p < 0) {
            parents[i] = WorldTransform::kRoot;
          } else if (dirty[size_t(p)]) {  // chosen is sorted: its compute slot by search
            parents[i] =
                std::lower_bound(chosen.begin(), chosen.end(), uint32_t(p)) - chosen.begin();
          } else {
            parents[i] = WorldTransform::kOldWorld - int64_t(wc->row_of(prim_of[size_t(p)]));
            old_world = true;
          }
        }
        if (old_world) {
          pins->old_world = wc->values();
          k.old_world = wc->values()->data();
        }
      }
      if (on_host) {
        SlotArrays::point_into(k, reinterpret_cast<const std::byte*>(arrays->block.data()), m);
        pins->host_indices = std::shared_ptr<const std::vector<uint64_t>>(arrays, &arrays->block);
      } else {
        BufferPtr uploaded;
        KSTAGE_ASSIGN_OR_RETURN(uploaded, backend.upload(arrays->block.data(), arrays->bytes()));
        SlotArrays::point_into(k, uploaded->data(), m);
        if (full) kept_full = uploaded;
        pins->indices = std::move(uploaded);
      }
    }
  }
  // The output, and pointer jumping's scratch for deep trees.
  BufferPtr out;
  if (m > 0) {
    KSTAGE_ASSIGN_OR_RETURN(out, backend.allocate(m * k.matrix_bytes()));
    k.world = out->data();
    if (levels > kernels::kMaxLevelPasses) {
      BufferPtr scratch;
      KSTAGE_ASSIGN_OR_RETURN(scratch,
                              backend.allocate(m * k.matrix_bytes() + 2 * m * sizeof(int64_t)));
      k.scratch = scratch->data();
      k.jumps = reinterpret_cast<int64_t*>(scratch->data() + m * k.matrix_bytes());
      pins->scratch = std::move(scratch);
    }
  }

  // --- enqueue: the write (and the deletes) at `ordinal`, all or nothing -------------------
  PrimList targets = structure->prims;
  if (!full) {
    std::vector<uint64_t> ids(m);
    for (size_t i = 0; i < m; ++i) ids[i] = prim_of[chosen[i]];
    targets = std::make_shared<const PrimSeq>(std::move(ids));
  }
  auto next_state = std::make_shared<TransformState>();
  next_state->local = local;
  next_state->reset = reset;
  next_state->structure = structure;
  next_state->local_seen = lc->last_change();
  next_state->reset_serial = rc ? rc->serial() : 0;
  next_state->reset_structure = rc ? rc->structure() : 0;
  next_state->reset_seen = rc ? rc->last_change() : 0;
  next_state->output = ordinal;
  next_state->world_seen = wc ? wc->last_change() : 0;
  next_state->full_indices = full && !on_host ? kept_full : (last ? last->full_indices : nullptr);
  next_state->full_for = full && !on_host ? structure : (last ? last->full_for : nullptr);
  next_state->full_reset_serial =
      full && !on_host ? next_state->reset_serial : (last ? last->full_reset_serial : 0);
  next_state->full_reset_structure =
      full && !on_host ? next_state->reset_structure : (last ? last->full_reset_structure : 0);
  auto op = std::make_shared<Op>();
  WriteBatch batch;
  try {
    if (m > 0) {
      add_write(batch, world, Schema{false, lc->schema().dtype, KSTAGE_SEMANTIC_MATRIX}, &backend,
                ordinal);
      Mutation& w = batch.writes.begin()->second;
      w.rows.prims = targets;
      w.rows.n = m;
      w.rows.data = out;
      w.created_column = batch.columns.count(world) != 0;
    }
    if (!stray.empty()) {
      Mutation d;
      d.kind = Mutation::Kind::DeleteAttributes;
      d.ordinal = ordinal;
      d.attributes = {world};
      d.rows.prims = std::make_shared<const PrimSeq>(std::move(stray));
      d.rows.n = d.rows.prims->size();
      batch.writes.emplace(Key{ordinal, next_seq_ + batch.writes.size()}, std::move(d));
    }
  } catch (const std::bad_alloc&) {
    return out_of_memory("no host memory to enqueue the world transforms");
  }
  // The kernel, after the seals that made what it reads (the backend's stream order).
  backend.world_transform(k);
  if (!backend.synchronous())
    if (CompletionPtr c = backend.record()) op->work.push_back(std::move(c));
  enqueue(batch);
  const Column* written = column(world);
  next_state->world_serial = written ? written->serial() : 0;
  next_state->op = op;
  state_slot = std::move(next_state);
  defer(op->work, std::move(pins));
  return op;
}

}  // namespace kstage::core
