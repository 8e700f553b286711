// SPDX-License-Identifier: Apache-2.0
// Stage: clone (kstage_clone) -- a prim's subtree copied to N targets as one op.
//
// A clone is N x S writes made at once: for every column the subtree holds, one write whose
// targets are the copies of the subtree's prims that hold it, target after target, and whose
// rows are the source's rows repeated. Nothing is copied N times at the call: the call gathers
// the source's S rows of each column into a compact buffer on the column's own device (its
// latest sealed state, kept as the op's), and the seal gathers row j of that buffer to every
// copy j (StagedRows::source_period: one periodic gather over the produced rows, on the
// column's device). Only PATH_ID columns, whose values differ per target once rebased, are
// made whole on the host and copied in once.
//
// Everything is checked before anything changes, under the stage's lock: the source, the
// targets, the floors of the columns the subtree holds, and that no path the copies would make
// exists at the op's place in the ledger. The copies' paths are then interned in one batch
// (PathTree::intern_copies) and the writes enqueued together. A path range below the source is
// copied as a range: each target gets one range with the source's prefix, numbers and count
// under its copy of the range's parent (O(1) paths per target), its members the copies of the
// source's members.
#include "core/stage.hpp"

#include "core/dtype.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

namespace kstage::core {

namespace {

constexpr uint32_t kRoot = PathTree::ShapeNode::kShapeRoot;

// Which uint64 words of a column's values name paths, and are rebased by a clone: every
// `stride`-th word from `lane` (stride 0: none). PATH_ID and RELATIONSHIP_PATH_ID: every word;
// CONNECTION_PATH_ID (uint64 x 2: path, token): word 0 of each pair (its array rows are whole
// pairs, 16 bytes each, so a row never moves the pairs off even words); ASSET_PATH_ID holds
// token ids, not prim paths: none.
struct PathWords {
  size_t stride = 0, lane = 0;
  bool any() const { return stride != 0; }
  bool at(size_t word) const { return stride != 0 && word % stride == lane; }
};
PathWords path_words(const Schema& s) {
  switch (s.semantic) {
    case KSTAGE_SEMANTIC_PATH_ID:
    case KSTAGE_SEMANTIC_RELATIONSHIP_PATH_ID: return {1, 0};
    case KSTAGE_SEMANTIC_CONNECTION_PATH_ID: return {2, 0};
    default: return {};
  }
}

// One column the subtree holds: which of its prims hold it (their shape nodes, kRoot for the
// source itself) and their rows, in the subtree's id order; then the source rows gathered.
struct ClonedColumn {
  Column* column = nullptr;
  std::vector<uint32_t> nodes;
  std::vector<uint32_t> rows;
  PathWords paths;  // the words that name paths (rebased per target); none: copied as they are
  // The source's rows, compact, on the column's device: fixed rows row_bytes() apart, or
  // array rows at starts[k] (8-byte aligned), lengths[k] bytes.
  BufferPtr compact;
  std::vector<uint64_t> starts, lengths;
  // Columns with path words: the compact rows as host words, and where their path words sit in
  // the shape's ids (the k-th path word at first_value + k).
  std::vector<uint64_t> path_values;
  size_t first_value = 0;
};

// Gathers the source's rows of `cc` into cc.compact on the column's own device (enqueued there:
// later seals of the source, in the same stream, cannot reach it first).
Status gather_source(ClonedColumn& cc) {
  const Column& col = *cc.column;
  KSTAGE_ASSIGN_OR_RETURN(cc.compact, col.gather(cc.rows.data(), cc.rows.size(), cc.starts));
  if (col.schema().is_array)
    for (uint32_t r : cc.rows) cc.lengths.push_back(col.row_length(r));
  return Status::OK();
}

// The gathered rows of a column with path words, as host words (the source's rows only).
Status read_path_values(Backend& host, ClonedColumn& cc) {
  const Column& col = *cc.column;
  const size_t bytes =
      col.schema().is_array
          ? size_t(cc.starts.empty()
                       ? 0
                       : cc.starts.back() + kernels::ragged_align_up(cc.lengths.back()))
          : cc.rows.size() * col.row_bytes();
  cc.path_values.resize(bytes / sizeof(uint64_t));
  return transfer(host, reinterpret_cast<std::byte*>(cc.path_values.data()), col.backend(),
                  cc.compact->data(), bytes);
}

// The ids of the copies: of shape node k for target t (kRoot: the target itself).
struct CopyIds {
  const PrimSeq& targets;
  const uint64_t* target_ids;  // the targets as ids (null when the shape is empty)
  size_t ns;
  uint64_t block;          // the copies made as one block: copy (t, k) is block + t * ns + k
  const uint64_t* copies;  // else target after target, ns each

  uint64_t below(size_t t, uint32_t k) const {
    return block != 0 ? block + t * ns + k : copies[t * ns + k];
  }
  uint64_t of(size_t t, uint32_t k) const { return k == kRoot ? targets[t] : below(t, k); }
  // The copies of nodes[0, s) for every target, target after target, into out[0, nt * s).
  void fill(size_t nt, const uint32_t* nodes, size_t s, uint64_t* out) const {
    const size_t root = size_t(std::find(nodes, nodes + s, kRoot) - nodes);  // s: none
    for (size_t t = 0; t < nt; ++t, out += s) {
      if (block != 0) {  // (a loop the compiler vectorises)
        const uint64_t first = block + t * ns;
        for (size_t k = 0; k < s; ++k) out[k] = first + nodes[k];
      } else {
        for (size_t k = 0; k < s; ++k) out[k] = k == root ? 0 : copies[t * ns + nodes[k]];
      }
      if (root < s) out[root] = target_ids[t];
    }
  }
};

// The staged rows of the clone's write of `cc`: its targets (copy of node k for target t, target
// after target) and their data. `node_of` is the shape's index of the ids it was made from (for
// the PATH_ID values' nodes).
Status stage_copies(const ClonedColumn& cc, const PrimList& targets, const CopyIds& copy,
                    const std::vector<uint32_t>& node_of, StagedRows& rows) {
  const Column& col = *cc.column;
  const size_t nt = targets->size(), s = cc.rows.size(), n = nt * s;
  rows.n = n;
  if (s == 1 && cc.nodes[0] == kRoot) {
    rows.prims = targets;  // the targets themselves: a range's stay a progression
  } else {
    std::vector<uint64_t> ids(n);
    copy.fill(nt, cc.nodes.data(), s, ids.data());
    rows.prims = std::make_shared<const PrimSeq>(std::move(ids));
    if (copy.block != 0) {
      static_assert(CopyBlock::kRoot == kRoot);
      auto block = std::make_shared<CopyBlock>();
      block->first = copy.block;
      block->ns = copy.ns;
      block->nt = nt;
      block->nodes = cc.nodes;
      rows.block = std::move(block);
    }
  }
  if (cc.paths.any()) {
    // Rebased on the host, target after target, and copied in once.
    const std::vector<uint64_t>& v = cc.path_values;
    std::unordered_map<uint64_t, uint32_t> rebase;  // path below the source -> shape node
    for (size_t i = 0, k = 0; i < v.size(); ++i)
      if (cc.paths.at(i)) {
        const uint32_t node = node_of[cc.first_value + k++];
        if (node != PathTree::kNotBelow) rebase.emplace(v[i], node);
      }
    std::vector<uint64_t> out;
    out.reserve(nt * v.size() + 1);
    for (size_t t = 0; t < nt; ++t)
      for (size_t i = 0; i < v.size(); ++i) {
        auto it = cc.paths.at(i) ? rebase.find(v[i]) : rebase.end();
        out.push_back(it == rebase.end() ? v[i] : copy.of(t, it->second));
      }
    if (col.schema().is_array) {
      const uint64_t per_target = v.size() * sizeof(uint64_t);
      rows.starts.resize(n);
      rows.lengths.resize(n);
      for (size_t t = 0; t < nt; ++t) {
        std::transform(cc.starts.begin(), cc.starts.end(), rows.starts.begin() + t * s,
                       [&](uint64_t start) { return t * per_target + start; });
        std::copy(cc.lengths.begin(), cc.lengths.end(), rows.lengths.begin() + t * s);
      }
    }
    if (out.empty()) out.push_back(0);  // (every row empty: no zero-byte buffer)
    const size_t bytes = out.size() * sizeof(uint64_t);
    if (col.reads_host()) {
      KSTAGE_ASSIGN_OR_RETURN(rows.data, col.backend().allocate(bytes));
      std::memcpy(rows.data->data(), out.data(), bytes);
    } else {
      KSTAGE_ASSIGN_OR_RETURN(rows.data, col.backend().upload(out.data(), bytes));
    }
    return Status::OK();
  }
  rows.data = cc.compact;
  // (Target after target: no division per row.)
  if (col.schema().is_array) {
    rows.starts.resize(n);
    rows.lengths.resize(n);
    for (size_t t = 0; t < nt; ++t) {
      std::copy(cc.starts.begin(), cc.starts.end(), rows.starts.begin() + t * s);
      std::copy(cc.lengths.begin(), cc.lengths.end(), rows.lengths.begin() + t * s);
    }
    return Status::OK();
  }
  // Row j of the write is row j mod s of the compact source: one periodic gather at the seal
  // (no index of n entries made, nor uploaded to a device).
  rows.indexed_source = true;
  rows.source_period = s;
  return Status::OK();
}

}  // namespace

Status Stage::check_clone_targets(uint64_t source, const PrimSeq& targets) const {
  const size_t n = targets.size();
  auto name = [&](uint64_t p) { return path_name(p); };
  if (targets.data() != nullptr) {
    // Listed targets: each a path, none twice.
    const uint64_t* ids = targets.data();
    std::unordered_map<uint64_t, size_t> index;
    index.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (!dictionary_.is_path(ids[i]))
        return error(KSTAGE_INVALID_ARGUMENT, "targets[%zu] (%llu) is not a path of this stage", i,
                     (unsigned long long)ids[i]);
      auto [it, fresh] = index.emplace(ids[i], i);
      if (!fresh)
        return error(KSTAGE_INVALID_ARGUMENT, "targets[%zu] and targets[%zu] are both '%s'",
                     it->second, i, name(ids[i]).c_str());
    }
    // Up the tree one level at a time for every target together (one look at the tree per
    // level): a target at or below the source, or below another target, is refused.
    std::vector<uint64_t> at(ids, ids + n), up(n);
    std::vector<size_t> who(n);
    std::iota(who.begin(), who.end(), size_t(0));
    for (size_t i = 0; i < n; ++i)
      if (ids[i] == source)
        return error(KSTAGE_INVALID_ARGUMENT, "targets[%zu] is the source '%s'", i,
                     name(source).c_str());
    while (!at.empty()) {
      dictionary_.path_parents(at.data(), at.size(), up.data());
      size_t kept = 0;
      for (size_t k = 0; k < at.size(); ++k) {
        const uint64_t p = up[k];
        const size_t i = who[k];
        if (p == 0) continue;
        if (p == source)
          return error(KSTAGE_INVALID_ARGUMENT, "targets[%zu] ('%s') lies below the source '%s'", i,
                       name(ids[i]).c_str(), name(source).c_str());
        if (auto it = index.find(p); it != index.end())
          return error(KSTAGE_INVALID_ARGUMENT,
                       "targets[%zu] ('%s') lies below targets[%zu] ('%s'): their copies would "
                       "overlap",
                       i, name(ids[i]).c_str(), it->second, name(p).c_str());
        at[kept] = p;
        who[kept] = i;
        ++kept;
      }
      at.resize(kept);
      up.resize(kept);
      who.resize(kept);
    }
    return Status::OK();
  }
  // Members of one range (a progression of its ids): distinct siblings, never nested. The
  // source may be one of them, or an ancestor of them all.
  const uint64_t first = targets.first(), stride = targets.stride();
  if (source >= first && (source - first) % stride == 0 && (source - first) / stride < n)
    return error(KSTAGE_INVALID_ARGUMENT, "targets[%llu] is the source '%s'",
                 (unsigned long long)((source - first) / stride), name(source).c_str());
  for (uint64_t p = dictionary_.path_parent(first); p != 0; p = dictionary_.path_parent(p))
    if (p == source)
      return error(KSTAGE_INVALID_ARGUMENT, "the targets ('%s' ...) lie below the source '%s'",
                   name(first).c_str(), name(source).c_str());
  return Status::OK();
}

Result<std::shared_ptr<Op>> Stage::clone(uint64_t source, const PrimList& targets,
                                         uint64_t ordinal) {
  if (!dictionary_.is_path(source))
    return error(KSTAGE_INVALID_ARGUMENT, "source %llu is not a path of this stage",
                 (unsigned long long)source);
  const size_t nt = targets->size();
  if (nt == 0) return error(KSTAGE_INVALID_ARGUMENT, "no targets to clone to (n = 0)");
  KSTAGE_RETURN_NOT_OK(check_clone_targets(source, *targets));
  reap_deferred();

  std::unique_lock lock(mutex_);
  // A refusal after device work was enqueued (the source gathers) waits for it: the buffers
  // it writes are freed with this call's state.
  bool device_work = false;
  Result<std::shared_ptr<Op>> result = [&]() -> Result<std::shared_ptr<Op>> {
    try {
      if (prim_attribute_count_.get(source) == 0)
        return error(KSTAGE_NOT_FOUND, "source '%s' does not exist (it holds no attribute)",
                     path_name(source).c_str());
      const std::vector<uint64_t> prims = existing_subtree(source);

      // The columns the subtree holds (each above its floor), their source rows gathered.
      std::vector<ClonedColumn> cloned;
      for (const auto& [key, col] : columns_) {  // (every schema of every name)
        ClonedColumn cc;
        for (size_t k = 0; k < prims.size(); ++k) {
          const uint32_t r = col->row_of(prims[k]);
          if (r == Column::kNoRow) continue;
          cc.nodes.push_back(uint32_t(k));  // (a prim index for now: shape nodes below)
          cc.rows.push_back(r);
        }
        if (cc.rows.empty()) continue;
        KSTAGE_RETURN_NOT_OK(check_floor(key.first, ordinal));
        cc.column = col.get();
        cc.paths = path_words(col->schema());
        cloned.push_back(std::move(cc));
      }
      std::vector<uint64_t> shape_ids(prims.begin(), prims.end());
      for (ClonedColumn& cc : cloned) {
        device_work = device_work || !cc.column->backend().synchronous();
        KSTAGE_RETURN_NOT_OK(gather_source(cc));
        if (!cc.paths.any()) continue;
        KSTAGE_RETURN_NOT_OK(read_path_values(backends_->host(), cc));
        cc.first_value = shape_ids.size();
        for (size_t i = 0; i < cc.path_values.size(); ++i)
          if (cc.paths.at(i)) shape_ids.push_back(cc.path_values[i]);
      }

      // The shape below the source: its prims and the paths PATH_ID values name there.
      std::vector<PathTree::ShapeNode> shape;
      std::vector<uint32_t> node_of;
      dictionary_.subtree_shape(source, shape_ids.data(), shape_ids.size(), shape, node_of);
      for (ClonedColumn& cc : cloned)
        for (uint32_t& k : cc.nodes) k = node_of[k];
      std::vector<char> is_prim(shape.size(), 0);
      for (size_t k = 0; k < prims.size(); ++k)
        if (node_of[k] != kRoot) is_prim[node_of[k]] = 1;

      // The targets as ids (a range's are made only when there are paths below them to find).
      const size_t ns = shape.size();
      std::vector<uint64_t> target_ids;
      if (ns > 0) {
        target_ids.resize(nt);
        for (size_t t = 0; t < nt; ++t) target_ids[t] = (*targets)[t];
      }
      KSTAGE_RETURN_NOT_OK(check_copies_absent(*targets, target_ids, shape, is_prim, ordinal));

      // The copies' paths, interned in one batch, and one write per column.
      std::vector<uint64_t> copies;
      std::string conflict;
      const uint64_t block =
          ns > 0 ? dictionary_.intern_copies(target_ids.data(), nt, shape, copies, conflict) : 0;
      if (!conflict.empty())  // (a path interned by another thread since the check)
        return error(KSTAGE_ALREADY_EXISTS, "clone: %s", conflict.c_str());
      const CopyIds copy{*targets, target_ids.data(), ns, block, copies.data()};
      WriteBatch batch;
      for (const ClonedColumn& cc : cloned) {
        Mutation& m = add_write(batch, cc.column->attribute(), cc.column, cc.column->schema(),
                                &cc.column->backend(), ordinal);
        KSTAGE_RETURN_NOT_OK(stage_copies(cc, targets, copy, node_of, m.rows));
      }
      // The op completes when the source gathers are done: one event per device they ran on.
      auto op = std::make_shared<Op>();
      for (const ClonedColumn& cc : cloned) op->add_work(cc.column->backend());
      enqueue(batch);
      return op;
    } catch (const std::bad_alloc&) {
      return out_of_memory("no host memory to clone '%s' to %zu targets", path_name(source).c_str(),
                           nt);
    }
  }();
  if (!result.ok() && device_work) {
    lock.unlock();
    fence_devices();
  }
  return result;
}

std::vector<uint64_t> Stage::existing_subtree(uint64_t source) {
  const std::shared_ptr<const SceneHierarchy> h = hierarchy_locked();
  std::vector<uint64_t> prims;
  std::vector<uint64_t> stack{source};
  while (!stack.empty()) {
    const uint64_t p = stack.back();
    stack.pop_back();
    prims.push_back(p);
    auto [spans, count] = h->children(p);
    for (size_t i = 0; i < count; ++i)
      for (uint64_t k = 0; k < spans[i].count; ++k) stack.push_back(spans[i].first + k);
  }
  std::sort(prims.begin(), prims.end());
  return prims;
}

Status Stage::check_copies_absent(const PrimSeq& targets, const std::vector<uint64_t>& target_ids,
                                  const std::vector<PathTree::ShapeNode>& shape,
                                  const std::vector<char>& is_prim, uint64_t ordinal) const {
  const size_t nt = targets.size(), ns = shape.size();
  // The copies that are paths already (nothing made); (t, k) of each candidate, k == ns for the
  // target itself.
  // (Usually none is: the targets are new, or have nothing where the copies go.)
  std::vector<uint64_t> found;
  std::string conflict;
  const bool any_found =
      ns > 0 && dictionary_.find_copies(target_ids.data(), nt, shape, found, conflict);
  if (!conflict.empty()) return error(KSTAGE_ALREADY_EXISTS, "clone: %s", conflict.c_str());
  std::vector<std::pair<size_t, size_t>> which;
  std::vector<uint64_t> ids;
  ids.reserve(nt);
  which.reserve(nt);
  for (size_t t = 0; t < nt; ++t) {
    ids.push_back(targets[t]);
    which.emplace_back(t, ns);
    for (size_t k = 0; any_found && k < ns; ++k)
      if (is_prim[k] && found[t * ns + k] != 0) {
        ids.push_back(found[t * ns + k]);
        which.emplace_back(t, k);
      }
  }
  StagedRows made;
  made.n = ids.size();
  made.prims = std::make_shared<const PrimSeq>(std::move(ids));
  const std::vector<char> exists = projected_existence(made, Key{ordinal, next_seq_});
  for (size_t i = 0; i < exists.size(); ++i) {
    if (!exists[i]) continue;
    const auto [t, k] = which[i];
    if (k == ns)
      return error(KSTAGE_ALREADY_EXISTS, "clone: targets[%zu] '%s' already exists at ordinal %llu",
                   t, path_name(made.prim(i)).c_str(), (unsigned long long)ordinal);
    return error(KSTAGE_ALREADY_EXISTS,
                 "clone: '%s' (the copy of '%s' for targets[%zu]) already exists at ordinal %llu",
                 path_name(made.prim(i)).c_str(), path_name(shape[k].source).c_str(), t,
                 (unsigned long long)ordinal);
  }
  return Status::OK();
}

}  // namespace kstage::core
