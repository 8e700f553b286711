// SPDX-License-Identifier: Apache-2.0
// Stage: world transforms (kstage_compute_world_transforms). The compute is a write: it reads
// the local and reset columns' sealed state, runs the kernel (core/kernels/world_transform.hpp)
// on the local column's backend into a buffer of its own, and enqueues that buffer as a staged
// write of the world column at the caller's ordinal -- so the world column is sealed, read,
// exported and change-tracked exactly like a column someone wrote. docs/scene.md has the rules.
#include "core/world_transforms.hpp"

#include "core/dtype.hpp"
#include "core/kernels/transform_ops.hpp"
#include "core/scene_hierarchy.hpp"
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

// Where a column's storage lives, as the other messages write a device ("kDLCPU:0").
std::string where(const Column& c) {
  const DLDevice d = c.backend().device();
  return std::string(device_type_name(d.device_type)) + ":" + std::to_string(d.device_id);
}

// Each node's children, in node order (CSR): node i's are children[offsets[i] .. offsets[i + 1]),
// from each node's parent (an earlier or later node, or negative: none).
struct ChildLists {
  std::vector<uint32_t> offsets, children;
};
ChildLists child_lists(const std::vector<int64_t>& parent) {
  const size_t n = parent.size();
  ChildLists c;
  c.offsets.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i)
    if (parent[i] >= 0) ++c.offsets[size_t(parent[i]) + 1];
  for (size_t i = 0; i < n; ++i) c.offsets[i + 1] += c.offsets[i];
  c.children.resize(c.offsets[n]);
  std::vector<uint32_t> fill(c.offsets.begin(), c.offsets.end() - 1);
  for (size_t i = 0; i < n; ++i)
    if (parent[i] >= 0) c.children[fill[size_t(parent[i])]++] = uint32_t(i);
  return c;
}

// What the op keeps until its work is done: the buffers the kernel reads.
struct Pins {
  BufferPtr local, reset, old_world, indices, scratch;
  std::shared_ptr<const TransformArrays> host_indices;
};

// The passes of a compute of a.m slots (core/kernels/transform_ops.hpp): `depth` and `end`
// per slot, relative to the compute (a slot whose parent is not computed has depth 0; `end` 0:
// its subtree is not a run of slots).
void plan_passes(TransformArrays& a, const std::vector<uint32_t>& depth,
                 const std::vector<uint32_t>& end) {
  const size_t m = a.m;
  if (m == 0) return;
  const size_t levels = size_t(*std::max_element(depth.begin(), depth.end())) + 1;
  std::vector<size_t> count(levels + 1, 0);
  std::vector<char> runs(levels + 1, 1);  // per level: every subtree a run of slots
  for (size_t i = 0; i < m; ++i) {
    ++count[depth[i]];
    if (end[i] == 0) runs[depth[i]] = 0;
  }
  // The chunks' level: the first with a slot for every kMaxChunkSlots slots whose subtrees are
  // runs; none: every level a pass.
  size_t chunk_level = levels;
  for (size_t l = 0; l < levels && l <= kernels::kMaxLevelPasses && chunk_level == levels; ++l)
    if (runs[l] && count[l] * kernels::kMaxChunkSlots >= m) chunk_level = l;
  if (chunk_level > kernels::kMaxLevelPasses) {
    a.jump = true;
    a.depth = levels;
    return;
  }
  // The levels above it, level by level (a counting sort, slots in order within a level).
  a.level_offsets.assign(chunk_level + 1, 0);
  for (size_t l = 0; l < chunk_level; ++l) a.level_offsets[l + 1] = a.level_offsets[l] + count[l];
  a.order.resize(a.level_offsets[chunk_level]);
  std::vector<size_t> next(a.level_offsets.begin(), a.level_offsets.end());
  for (size_t i = 0; i < m; ++i) {
    if (depth[i] < chunk_level) a.order[next[depth[i]]++] = uint32_t(i);
    else if (depth[i] == chunk_level) a.chunks.insert(a.chunks.end(), {uint32_t(i), end[i]});
  }
  if (chunk_level == 0) a.level_offsets.clear();
}

// The slots an incremental compute must start from: prims that appeared or have another parent
// than at the last compute, whose local matrix or reset flag changed (sealed) since, or whose
// world row someone else wrote or deleted since. Found from the columns' change records: O(1)
// to O(changed) in the common cases, a look at every slot where a record cannot say.
std::vector<uint32_t> changed_slots(const TransformStructure& st, const TransformState& last,
                                    const Column& lc, const Column* rc, const Column& wc,
                                    bool world_complete) {
  const size_t n = st.size();
  const uint64_t* prim_of = st.prims->data();
  std::vector<uint32_t> seeds;
  // Prims that appeared or have another parent than at the last compute.
  if (&st != last.structure.get()) {
    const TransformStructure& old = *last.structure;
    std::unordered_map<uint64_t, uint64_t> old_parent;  // prim -> parent prim (0: a root)
    old_parent.reserve(old.size());
    const uint64_t* old_prims = old.prims->data();
    for (size_t s = 0; s < old.size(); ++s)
      old_parent.emplace(old_prims[s], old.parents[s] < 0 ? 0 : old_prims[size_t(old.parents[s])]);
    for (size_t s = 0; s < n; ++s) {
      const uint64_t parent = st.parents[s] < 0 ? 0 : prim_of[size_t(st.parents[s])];
      auto it = old_parent.find(prim_of[s]);
      if (it == old_parent.end() || it->second != parent) seeds.push_back(uint32_t(s));
    }
  }
  // Local matrices sealed since: the last write's rows when it is the only change, else a
  // look at every slot's row stamp.
  if (lc.last_change() > last.local_seen) {
    if (const Column::RecentWrite* w = lc.only_change_since(last.local_seen + 1)) {
      const std::vector<uint32_t>& slot_of_row = st.slot_of_row;
      for (size_t j = 0; j < w->n; ++j)
        if (w->rows[j] < slot_of_row.size() && slot_of_row[w->rows[j]] != Column::kNoRow)
          seeds.push_back(slot_of_row[w->rows[j]]);
    } else {
      for (size_t s = 0; s < n; ++s)
        if (lc.changed_at(st.local_rows[s]) > last.local_seen) seeds.push_back(uint32_t(s));
    }
  }
  // Reset flags sealed since, and flags deleted since (rare: a look at every slot).
  if (rc && (rc->last_change() > last.reset_seen || rc->structure() != last.reset_structure)) {
    for (size_t s = 0; s < n; ++s) {
      const uint32_t row = rc->row_of(prim_of[s]);
      if (row != Column::kNoRow ? rc->changed_at(row) > last.reset_seen
                                : rc->tombstone(prim_of[s]) > last.reset_seen)
        seeds.push_back(uint32_t(s));
    }
  }
  // World rows someone else wrote or deleted since: computed again (no drift). The last
  // compute's own write, sealed, is the only change since when nobody else wrote (an O(1)
  // answer); a write at the compute's own ordinal is not told apart from it.
  const Column::RecentWrite* own = wc.only_change_since(last.world_seen + 1);
  const bool foreign = wc.last_change() > last.world_seen && wc.whole_change() != last.output &&
                       !(own && own->ordinal == last.output);
  if (foreign || !world_complete) {
    for (size_t s = 0; s < n; ++s) {
      const uint32_t row = wc.row_of(prim_of[s]);
      const uint64_t changed = row == Column::kNoRow ? UINT64_MAX : wc.changed_at(row);
      if (changed > last.world_seen && changed != last.output) seeds.push_back(uint32_t(s));
    }
  }
  return seeds;
}

// Incremental: the seeds' subtrees -- a run of slots where the subtree is one, else through
// the child lists -- in slot order (parents first). Runs need no marks: seeds in order, a
// seed inside the last run is already in it. Subtrees that are not runs are walked, with a
// mark per slot (made only then) so that none is taken twice.
std::vector<uint32_t> grow_to_subtrees(const TransformStructure& st, std::vector<uint32_t> seeds) {
  const size_t n = st.size();
  std::vector<uint32_t> chosen;
  std::sort(seeds.begin(), seeds.end());
  seeds.erase(std::unique(seeds.begin(), seeds.end()), seeds.end());
  uint32_t run_end = 0;
  std::vector<uint32_t> walked;
  for (uint32_t seed : seeds) {
    if (seed < run_end) continue;
    if (const uint32_t end = st.subtree_end[seed]) {
      for (uint32_t t = seed; t < end; ++t) chosen.push_back(t);
      run_end = end;
    } else {
      walked.push_back(seed);
    }
  }
  if (!walked.empty()) {
    std::vector<char> marked(n, 0);
    for (uint32_t t : chosen) marked[t] = 1;
    std::vector<uint32_t> stack;
    for (uint32_t seed : walked) {
      stack.push_back(seed);
      while (!stack.empty()) {
        const uint32_t t = stack.back();
        stack.pop_back();
        if (marked[t]) continue;
        marked[t] = 1;
        chosen.push_back(t);
        for (uint32_t c = st.child_offsets[t]; c < st.child_offsets[t + 1]; ++c)
          stack.push_back(st.children[c]);
      }
    }
    std::sort(chosen.begin(), chosen.end());
  }
  return chosen;
}

// The arrays of a compute of `m` slots -- every slot (full) or the `chosen` ones -- and the plan
// of its passes. A computed slot's parent is computed before it in the same pass, or is not
// recomputed (old_world: its world row is the world column's `wc`). `reset`: the reset column
// when it has rows.
std::shared_ptr<TransformArrays> make_arrays(const TransformStructure& st,
                                             const std::vector<uint32_t>& chosen, bool full,
                                             const Column* reset, const Column* wc,
                                             bool& old_world) {
  const size_t m = full ? st.size() : chosen.size();
  const uint64_t* prim_of = st.prims->data();
  auto a = std::make_shared<TransformArrays>();
  a->m = m;
  a->local_rows.resize(m);
  a->reset_rows.resize(m);
  a->parents.resize(m);
  std::vector<uint32_t> depth(m), end(m);
  old_world = false;
  // Where slot p lies among the computed slots before compute slot i (i: it is not there):
  // by offset within the block of consecutive slots i lies in (a subtree's run), else by a
  // search.
  size_t block_first = 0;  // the compute slot that starts the current block
  auto parent_index = [&](size_t i, uint32_t p) {
    if (p >= chosen[block_first]) return block_first + (p - chosen[block_first]);
    const auto it = std::lower_bound(chosen.begin(), chosen.begin() + long(block_first), p);
    return it != chosen.begin() + long(block_first) && *it == p ? size_t(it - chosen.begin()) : i;
  };
  for (size_t i = 0; i < m; ++i) {
    const size_t s = full ? i : chosen[i];
    if (!full && (i == 0 || chosen[i - 1] + 1 != s)) block_first = i;
    a->local_rows[i] = st.local_rows[s];
    a->reset_rows[i] = reset ? reset->row_of(prim_of[s]) : WorldTransform::kNoReset;
    const uint32_t subtree_end = st.subtree_end[s];
    // (A subtree of a computed slot is computed whole: a run of slots stays one.)
    end[i] = subtree_end == 0 ? 0 : uint32_t(i + (subtree_end - s));
    const int64_t p = st.parents[s];
    if (p < 0) {
      a->parents[i] = WorldTransform::kRoot;
      depth[i] = 0;
    } else if (const size_t at = full ? size_t(p) : parent_index(i, uint32_t(p));
               at < i) {  // computed before it in this pass
      a->parents[i] = int64_t(at);
      depth[i] = depth[at] + 1;
    } else {  // not recomputed: the world column holds its row (the caller made sure)
      a->parents[i] = WorldTransform::kOldWorld - int64_t(wc->row_of(prim_of[size_t(p)]));
      depth[i] = 0;
      old_world = true;
    }
  }
  plan_passes(*a, depth, end);
  a->pack();
  return a;
}

// What a compute leaves for the next one (TransformState), but for the world column it wrote
// and its op, known once it is enqueued. A full compute's kept arrays carry over from `last`.
TransformState next_state_of(const TransformState* last, uint64_t local, uint64_t reset,
                             const std::shared_ptr<const TransformStructure>& structure,
                             const Column& lc, const Column* rc, const Column* wc,
                             bool world_complete, uint64_t ordinal) {
  TransformState next;
  next.local = local;
  next.reset = reset;
  next.structure = structure;
  next.local_seen = lc.last_change();
  next.reset_serial = rc ? rc->serial() : 0;
  next.reset_structure = rc ? rc->structure() : 0;
  next.reset_seen = rc ? rc->last_change() : 0;
  next.output = ordinal;
  next.world_seen = wc ? wc->last_change() : 0;
  next.world_structure = wc ? wc->structure() : 0;
  next.world_complete = world_complete;
  if (last) {
    next.full = last->full;
    next.full_device = last->full_device;
    next.full_for = last->full_for;
    next.full_reset_serial = last->full_reset_serial;
    next.full_reset_structure = last->full_reset_structure;
  }
  return next;
}

}  // namespace

void TransformArrays::pack() {
  const auto words = [](size_t n32) { return (n32 + 1) / 2; };
  at_reset = words(m);
  at_parents = at_reset + words(m);
  at_order = at_parents + m;
  at_chunks = at_order + words(order.size());
  block.assign(at_chunks + words(chunks.size()), 0);
  auto* base = reinterpret_cast<std::byte*>(block.data());
  std::memcpy(base, local_rows.data(), m * sizeof(uint32_t));
  std::memcpy(base + at_reset * 8, reset_rows.data(), m * sizeof(uint32_t));
  std::memcpy(base + at_parents * 8, parents.data(), m * sizeof(int64_t));
  if (!order.empty()) std::memcpy(base + at_order * 8, order.data(), order.size() * 4);
  if (!chunks.empty()) std::memcpy(base + at_chunks * 8, chunks.data(), chunks.size() * 4);
}

namespace {
// Points `k` at the arrays of `a` whose block was copied to `base`.
void point_into(kernels::WorldTransform& k, const std::byte* base, const TransformArrays& a) {
  k.local_rows = reinterpret_cast<const uint32_t*>(base);
  k.reset_rows = reinterpret_cast<const uint32_t*>(base + a.at_reset * 8);
  k.parents = reinterpret_cast<const int64_t*>(base + a.at_parents * 8);
  k.order = reinterpret_cast<const uint32_t*>(base + a.at_order * 8);
  k.chunks = reinterpret_cast<const uint32_t*>(base + a.at_chunks * 8);
  k.level_offsets = a.level_offsets.empty() ? nullptr : a.level_offsets.data();
  k.levels = a.level_offsets.empty() ? 0 : a.level_offsets.size() - 1;
  k.n_chunks = a.chunks.size() / 2;
  k.jump = a.jump;
  k.depth = a.depth;
}
}  // namespace

std::vector<uint64_t> Stage::prims_holding(const Column& c) const {
  std::vector<uint64_t> out;
  out.reserve(c.live_rows());
  prim_attribute_count_.for_each_run(dictionary_.path_id_bound(),
                                     [&](uint64_t first, uint64_t count) {
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
  // Each prim's parent: its nearest ancestor path that holds a local matrix.
  std::vector<uint64_t> up(n);
  dictionary_.path_parents(prims.data(), n, up.data());
  NearestHolder nearest(dictionary_, [&](uint64_t p) { return local.has(p); });
  // Prims by local row (rows are dense), to find a parent's index from its path id.
  std::vector<uint32_t> index_of_row(local.row_space(), Column::kNoRow);
  for (size_t i = 0; i < n; ++i) index_of_row[local.row_of(prims[i])] = uint32_t(i);
  std::vector<int64_t> parent(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t q = nearest.at_or_above(up[i]);
    parent[i] = q == 0 ? WorldTransform::kRoot : int64_t(index_of_row[local.row_of(q)]);
  }
  // The slots' order: the local column's row order when every parent's row comes before its
  // children's (prims written parents first, as a scene is built): an in-order pass then reads
  // the local matrices as they lie in memory. Otherwise depth-first order -- each root (by path
  // id) then its subtree, children by path id. Either way a parent comes before its children.
  std::vector<uint32_t> order;  // slot -> index into prims
  order.reserve(n);
  bool by_rows = true;
  for (size_t i = 0; i < n && by_rows; ++i)
    by_rows = parent[i] < 0 || local.row_of(prims[size_t(parent[i])]) < local.row_of(prims[i]);
  if (by_rows) {
    for (uint32_t index : index_of_row)
      if (index != Column::kNoRow) order.push_back(index);
  } else {
    const ChildLists c = child_lists(parent);
    std::vector<uint32_t> stack;
    for (size_t r = 0; r < n; ++r) {
      if (parent[r] >= 0) continue;
      stack.push_back(uint32_t(r));
      while (!stack.empty()) {
        const uint32_t i = stack.back();
        stack.pop_back();
        order.push_back(i);
        for (uint32_t k = c.offsets[i + 1]; k-- > c.offsets[i];) stack.push_back(c.children[k]);
      }
    }
  }
  std::vector<uint32_t> slot_of(n);
  for (size_t slot = 0; slot < n; ++slot) slot_of[order[slot]] = uint32_t(slot);
  std::vector<uint64_t> by_slot(n);
  s->local_rows.resize(n);
  s->parents.resize(n);
  for (size_t slot = 0; slot < n; ++slot) {
    const size_t i = order[slot];
    by_slot[slot] = prims[i];
    s->local_rows[slot] = local.row_of(prims[i]);
    s->parents[slot] = parent[i] < 0 ? WorldTransform::kRoot : int64_t(slot_of[size_t(parent[i])]);
  }
  s->prims = std::make_shared<const PrimSeq>(std::move(by_slot));
  // Depths (parents first), subtrees (children last): a subtree is a run of slots when its
  // last slot is its size away (slots after their parent), always so in depth-first order.
  s->depth.assign(n, 0);
  for (size_t slot = 0; slot < n; ++slot)
    if (s->parents[slot] >= 0) s->depth[slot] = s->depth[size_t(s->parents[slot])] + 1;
  std::vector<uint32_t> size(n, 1), last(n);
  for (size_t slot = 0; slot < n; ++slot) last[slot] = uint32_t(slot);
  for (size_t slot = n; slot-- > 0;) {
    if (s->parents[slot] < 0) continue;
    const size_t p = size_t(s->parents[slot]);
    size[p] += size[slot];
    last[p] = std::max(last[p], last[slot]);
  }
  s->subtree_end.resize(n);
  for (size_t slot = 0; slot < n; ++slot)
    s->subtree_end[slot] = last[slot] + 1 - slot == size[slot] ? uint32_t(slot) + size[slot] : 0;
  // Children by slot, for the subtrees that are not runs.
  ChildLists c = child_lists(s->parents);
  s->child_offsets = std::move(c.offsets);
  s->children = std::move(c.children);
  s->slot_of_row.assign(local.row_space(), Column::kNoRow);
  for (size_t slot = 0; slot < n; ++slot) s->slot_of_row[s->local_rows[slot]] = uint32_t(slot);
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
  // Each name in one schema: a matrix held as float64 on some prims and float32 on others has
  // no one world column to compute.
  for (auto [token, field] : {std::pair{local, "local"}, {reset, "reset"}, {world, "world"}})
    if (columns_.of(token).several())
      return error(KSTAGE_INVALID_ARGUMENT,
                   "the %s column '%s' holds several schemas: world transforms need one", field,
                   token_name(token).c_str());
  Column* lc = columns_.sole(local);
  if (!lc)
    return error(KSTAGE_NOT_FOUND, "the local matrix column '%s' does not exist",
                 token_name(local).c_str());
  if (!is_matrix(lc->schema()))
    return error(KSTAGE_INVALID_ARGUMENT,
                 "the local matrix column '%s' is %s: it must be fixed-size float64 x 16 or "
                 "float32 x 16",
                 token_name(local).c_str(), describe(lc->schema()).c_str());
  Backend& backend = lc->backend();
  Column* rc = columns_.sole(reset);
  if (rc) {
    const Schema& s = rc->schema();
    if (s.is_array || s.dtype.code != kDLBool || s.dtype.bits != 8 || s.dtype.lanes != 1)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "the reset column '%s' is %s: it must be fixed-size bool (kDLBool, 8 bits)",
                   token_name(reset).c_str(), describe(s).c_str());
    if (&rc->backend() != &backend)
      return error(KSTAGE_NOT_SUPPORTED,
                   "the reset column '%s' lives on %s, the local matrix column '%s' on %s",
                   token_name(reset).c_str(), where(*rc).c_str(), token_name(local).c_str(),
                   where(*lc).c_str());
  }
  Column* wc = columns_.sole(world);
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
                   "the world matrix column '%s' lives on %s, the local matrix column '%s' on %s: "
                   "they must live on one device",
                   token_name(world).c_str(), where(*wc).c_str(), token_name(local).c_str(),
                   where(*lc).c_str());
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
  // Incremental work is proportional to what changed: seeds from the columns' change records
  // (O(1) to O(changed) in the common cases), each grown to its subtree, and only those slots
  // computed.
  const uint64_t* prim_of = structure->prims->data();
  // Whether the world column holds a row for every slot: what the last compute saw, while the
  // column's rows stayed as they were (else a look, kept for the next compute).
  bool world_complete = false;
  if (wc) {
    world_complete = last && trusted && wc->structure() == last->world_structure
                         ? last->world_complete
                         : wc->holds_all(structure->prims, n);
  }
  const bool full = !trusted;  // an incremental compute cannot vouch for the world column
  std::vector<uint32_t> chosen;
  if (!full)
    chosen = grow_to_subtrees(*structure,
                              changed_slots(*structure, *last, *lc, rc, *wc, world_complete));
  const size_t m = full ? n : chosen.size();

  // World rows no local matrix backs: deleted by this compute.
  std::vector<uint64_t> stray;
  if (wc && wc->live_rows() > 0) {
    size_t backed = n;
    if (!world_complete) {
      backed = 0;
      for (size_t s = 0; s < n; ++s) backed += wc->has(prim_of[s]);
    }
    if (wc->live_rows() > backed)
      for (uint64_t p : prims_holding(*wc))
        if (!lc->has(p)) stray.push_back(p);
  }

  // --- the kernel's arrays: a full compute's are kept (uploaded once per structure) -------
  kernels::WorldTransform k;
  k.n = m;
  k.f32 = lc->schema().dtype.bits == 32;
  auto pins = std::make_shared<Pins>();
  pins->local = lc->values();
  k.local = lc->values() ? lc->values()->data() : nullptr;
  const bool resets = rc && rc->live_rows() > 0;
  if (resets) {
    pins->reset = rc->values();
    k.reset = rc->values()->data();
  }
  const bool on_host = lc->reads_host();
  std::shared_ptr<const TransformArrays> arrays;
  BufferPtr device_arrays;
  const uint64_t reset_serial = rc ? rc->serial() : 0, reset_structure = rc ? rc->structure() : 0;
  if (full && last && last->full && last->full_for == structure &&
      last->full_reset_serial == reset_serial && last->full_reset_structure == reset_structure) {
    arrays = last->full;
    device_arrays = last->full_device;
  } else if (m > 0) {
    bool old_world = false;
    arrays = make_arrays(*structure, chosen, full, resets ? rc : nullptr, wc, old_world);
    if (old_world) {
      pins->old_world = wc->values();
      k.old_world = wc->values()->data();
    }
  }
  if (arrays && !on_host && !device_arrays) {
    KSTAGE_ASSIGN_OR_RETURN(device_arrays, backend.upload(arrays->block.data(),
                                                          arrays->block.size() * sizeof(uint64_t)));
  }
  if (arrays) {
    point_into(
        k,
        on_host ? reinterpret_cast<const std::byte*>(arrays->block.data()) : device_arrays->data(),
        *arrays);
    pins->host_indices = arrays;
    pins->indices = device_arrays;
  }
  // The output, and pointer jumping's scratch.
  BufferPtr out;
  if (m > 0) {
    KSTAGE_ASSIGN_OR_RETURN(out, backend.allocate(m * k.matrix_bytes()));
    k.world = out->data();
    if (k.jump) {
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
  auto next_state = std::make_shared<TransformState>(
      next_state_of(last, local, reset, structure, *lc, rc, wc, world_complete, ordinal));
  if (full && arrays) {  // the arrays a later full compute reuses
    next_state->full = arrays;
    next_state->full_device = device_arrays;
    next_state->full_for = structure;
    next_state->full_reset_serial = reset_serial;
    next_state->full_reset_structure = reset_structure;
  }
  auto op = std::make_shared<Op>();
  WriteBatch batch;
  try {
    if (m > 0) {
      Mutation& w =
          add_write(batch, world, wc, Schema{false, lc->schema().dtype, KSTAGE_SEMANTIC_MATRIX},
                    &backend, ordinal);
      w.rows.prims = targets;
      w.rows.n = m;
      w.rows.data = out;
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
  op->add_work(backend);
  enqueue(batch);
  const Column* written = columns_.sole(world);
  next_state->world_serial = written ? written->serial() : 0;
  next_state->op = op;
  state_slot = std::move(next_state);
  // Host work is done: the buffers it read go now (a pin held until a later reap would make
  // the seal copy the world column it writes). Device work keeps them until it completes.
  if (!op->work.empty()) defer(op->work, std::move(pins));
  return op;
}

}  // namespace kstage::core
