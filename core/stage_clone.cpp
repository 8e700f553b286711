// SPDX-License-Identifier: Apache-2.0
// Stage: clone (kstage_clone) -- a prim's subtree copied to N targets as one op.
//
// A clone is N x S writes made at once: for every column the subtree holds, one write whose
// targets are the copies of the subtree's prims that hold it, target after target, and whose
// rows are the source's rows repeated. Nothing is copied N times at the call: the call gathers
// the source's S rows of each column into a compact buffer on the column's own device (its
// latest sealed state, kept as the op's), and the seal gathers row j of that buffer to every
// copy j (StagedRows::indexed_source: one gather-scatter pass over the produced rows, on the
// column's device). Only PATH_ID columns, whose values differ per target once rebased, are
// made whole on the host and copied in once.
//
// Everything is checked before anything changes, under the stage's lock: the source, the
// targets, the floors of the columns the subtree holds, and that no path the copies would make
// exists at the op's place in the ledger. The copies' paths are then interned in one batch
// (PathTree::intern_copies) and the writes enqueued together.
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

// One column the subtree holds: which of its prims hold it (their shape nodes, kRoot for the
// source itself) and their rows, in the subtree's id order.
struct ClonedColumn {
  Column* column = nullptr;
  std::vector<uint32_t> nodes;
  std::vector<uint32_t> rows;
  bool path_ids = false;  // KSTAGE_SEMANTIC_PATH_ID: values rebased per target
};

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

  auto op = std::make_shared<Op>();
  std::unique_lock lock(mutex_);
  // Anything enqueued on a device before a refusal is waited for: the caller may free memory
  // those copies still touch only through buffers this call owns, but they must not outlive it.
  bool device_work = false;
  auto reject = [&](Status st) {
    lock.unlock();
    if (device_work) fence_devices();
    return st;
  };
  try {
    if (prim_attribute_count_.get(source) == 0)
      return error(KSTAGE_NOT_FOUND, "source '%s' does not exist (it holds no attribute)",
                   path_name(source).c_str());

    // The subtree: the source and every existing prim below it, in id order.
    std::vector<uint64_t> prims;
    {
      const std::shared_ptr<const SceneHierarchy> h = hierarchy_locked();
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
    }

    // The columns it holds, their floors, and the PATH_ID values that name paths.
    std::vector<ClonedColumn> cloned;
    std::vector<uint64_t> shape_ids(prims.begin(), prims.end());
    for (const auto& [attr, col] : columns_) {
      ClonedColumn cc;
      for (size_t k = 0; k < prims.size(); ++k) {
        const uint32_t r = col->row_of(prims[k]);
        if (r == Column::kNoRow) continue;
        cc.nodes.push_back(uint32_t(k));  // (a prim index for now: shape nodes below)
        cc.rows.push_back(r);
      }
      if (cc.rows.empty()) continue;
      if (Status st = check_floor(attr, ordinal); !st.ok()) return st;
      cc.column = col.get();
      cc.path_ids = col->schema().semantic == KSTAGE_SEMANTIC_PATH_ID;
      cloned.push_back(std::move(cc));
    }

    // The source rows of every column, gathered now on the column's device: the latest
    // sealed state, which later seals of the source cannot change.
    std::vector<BufferPtr> compact(cloned.size());
    std::vector<std::vector<uint64_t>> starts(cloned.size()), lengths(cloned.size());
    for (size_t c = 0; c < cloned.size(); ++c) {
      ClonedColumn& cc = cloned[c];
      Column& col = *cc.column;
      Backend& b = col.backend();
      device_work = device_work || !b.synchronous();
      const size_t s = cc.rows.size();
      if (!col.schema().is_array) {
        const size_t rb = col.row_bytes();
        KSTAGE_ASSIGN_OR_RETURN(compact[c], b.allocate(std::max<size_t>(s * rb, 1)));
        kernels::RowCopy g;
        g.dst = compact[c]->data();
        g.dst_stride = int64_t(rb);
        g.src = col.values()->data();
        g.src_stride = int64_t(rb);
        g.src_index = cc.rows.data();
        g.n = s;
        g.row_bytes = rb;
        b.row_copy(g);
        continue;
      }
      std::vector<const std::byte*> from;
      std::vector<uint64_t> to, bytes;
      uint64_t cursor = 0, bits = kernels::kRaggedRowAlign;
      for (uint32_t r : cc.rows) {
        const uint64_t len = col.row_length(r);
        starts[c].push_back(cursor);
        lengths[c].push_back(len);
        if (len > 0) {
          from.push_back(col.values()->data() + col.row_offset(r));
          to.push_back(cursor);
          bytes.push_back(len);
          bits |= reinterpret_cast<uintptr_t>(from.back()) | cursor | len;
        }
        cursor += kernels::ragged_align_up(len);
      }
      KSTAGE_ASSIGN_OR_RETURN(compact[c], b.allocate(std::max<uint64_t>(cursor, 64)));
      kernels::RaggedCopy g{compact[c]->data(), to.data(), from.data(), bytes.data(), from.size()};
      if (g.n > 0) b.ragged_copy(g, kernels::widest_word(bits));
    }

    // PATH_ID values, read on the host (the source's rows only), and what they name.
    std::vector<std::vector<uint64_t>> path_values(cloned.size());
    for (size_t c = 0; c < cloned.size(); ++c) {
      if (!cloned[c].path_ids) continue;
      Column& col = *cloned[c].column;
      const size_t bytes =
          col.schema().is_array
              ? size_t(starts[c].empty()
                           ? 0
                           : starts[c].back() + kernels::ragged_align_up(lengths[c].back()))
              : cloned[c].rows.size() * col.row_bytes();
      std::vector<uint64_t>& v = path_values[c];
      v.resize(bytes / sizeof(uint64_t));
      if (Status st = transfer(backends_->host(), reinterpret_cast<std::byte*>(v.data()),
                               col.backend(), compact[c]->data(), bytes);
          !st.ok())
        return reject(st);
      shape_ids.insert(shape_ids.end(), v.begin(), v.end());
    }

    // The shape below the source: its prims and the paths PATH_ID values name there.
    std::vector<PathTree::ShapeNode> shape;
    std::vector<uint32_t> node_of;
    uint64_t member = 0;
    if (!dictionary_.subtree_shape(source, shape_ids.data(), shape_ids.size(), shape, node_of,
                                   member))
      return reject(error(KSTAGE_NOT_SUPPORTED,
                          "'%s' below the source '%s' is a member of a path range: clone does "
                          "not copy path ranges",
                          path_name(member).c_str(), path_name(source).c_str()));
    for (ClonedColumn& cc : cloned)
      for (uint32_t& k : cc.nodes) k = node_of[k];

    // The targets as ids (a range's are made only when there are paths below them to find).
    const size_t ns = shape.size();
    std::vector<uint64_t> target_ids;
    if (ns > 0) {
      target_ids.resize(nt);
      for (size_t t = 0; t < nt; ++t) target_ids[t] = (*targets)[t];
    }

    // Nothing the copies make may exist at the op's place: the targets, and the copies of the
    // subtree's prims that are already paths.
    const Key key{ordinal, next_seq_};
    {
      std::vector<uint64_t> found(nt * ns);
      if (ns > 0) dictionary_.find_copies(target_ids.data(), nt, shape, found.data());
      std::vector<char> is_prim(ns, 0);
      for (size_t k = 0; k < prims.size(); ++k)
        if (node_of[k] != kRoot) is_prim[node_of[k]] = 1;
      StagedRows made;  // (t, k) of each candidate: k == ns for the target itself
      std::vector<std::pair<size_t, size_t>> which;
      std::vector<uint64_t> ids;
      for (size_t t = 0; t < nt; ++t) {
        ids.push_back((*targets)[t]);
        which.emplace_back(t, ns);
        for (size_t k = 0; k < ns; ++k)
          if (is_prim[k] && found[t * ns + k] != 0) {
            ids.push_back(found[t * ns + k]);
            which.emplace_back(t, k);
          }
      }
      made.n = ids.size();
      made.prims = std::make_shared<const PrimSeq>(std::move(ids));
      const std::vector<char> exists = projected_existence(made, key);
      for (size_t i = 0; i < exists.size(); ++i) {
        if (!exists[i]) continue;
        const auto [t, k] = which[i];
        if (k == ns)
          return reject(error(KSTAGE_ALREADY_EXISTS,
                              "clone: targets[%zu] '%s' already exists at ordinal %llu", t,
                              path_name(made.prim(i)).c_str(), (unsigned long long)ordinal));
        return reject(error(KSTAGE_ALREADY_EXISTS,
                            "clone: '%s' (the copy of '%s' for targets[%zu]) already exists at "
                            "ordinal %llu",
                            path_name(made.prim(i)).c_str(), path_name(shape[k].source).c_str(), t,
                            (unsigned long long)ordinal));
      }
    }

    // The copies' paths, interned in one batch.
    std::vector<uint64_t> copies(nt * ns);
    if (ns > 0) dictionary_.intern_copies(target_ids.data(), nt, shape, copies.data());
    auto copy_of = [&](size_t t, uint32_t k) {
      return k == kRoot ? (*targets)[t] : copies[t * ns + k];
    };

    // One write per column.
    WriteBatch batch;
    Backend& host = backends_->host();
    auto m = batch.writes.end();
    for (size_t c = 0; c < cloned.size(); ++c) {
      ClonedColumn& cc = cloned[c];
      Column& col = *cc.column;
      const size_t s = cc.rows.size();
      const size_t n = nt * s;
      add_write(batch, col.attribute(), col.schema(), &col.backend(), ordinal);
      m = std::prev(batch.writes.end());
      StagedRows& rows = m->second.rows;
      rows.n = n;
      if (s == 1 && cc.nodes[0] == kRoot) {
        rows.prims = targets;  // the targets themselves: a range's stay a progression
      } else {
        std::vector<uint64_t> ids(n);
        for (size_t t = 0; t < nt; ++t)
          for (size_t k = 0; k < s; ++k) ids[t * s + k] = copy_of(t, cc.nodes[k]);
        rows.prims = std::make_shared<const PrimSeq>(std::move(ids));
      }
      if (cc.path_ids) {
        // Rebased on the host, target after target, and copied in once.
        std::unordered_map<uint64_t, uint32_t> rebase;  // value -> shape node
        const size_t first_value = prims.size() + [&] {
          size_t before = 0;
          for (size_t d = 0; d < c; ++d) before += path_values[d].size();
          return before;
        }();
        const std::vector<uint64_t>& v = path_values[c];
        for (size_t i = 0; i < v.size(); ++i)
          if (node_of[first_value + i] != PathTree::kNotBelow)
            rebase.emplace(v[i], node_of[first_value + i]);
        std::vector<uint64_t> out;
        out.reserve(nt * v.size());
        for (size_t t = 0; t < nt; ++t)
          for (uint64_t value : v) {
            auto it = rebase.find(value);
            out.push_back(it == rebase.end() ? value : copy_of(t, it->second));
          }
        if (col.schema().is_array) {
          const uint64_t per_target = v.size() * sizeof(uint64_t);
          rows.starts.resize(n);
          rows.lengths.resize(n);
          for (size_t t = 0; t < nt; ++t)
            for (size_t k = 0; k < s; ++k) {
              rows.starts[t * s + k] = t * per_target + starts[c][k];
              rows.lengths[t * s + k] = lengths[c][k];
            }
        }
        const size_t bytes = out.size() * sizeof(uint64_t);
        if (col.reads_host()) {
          KSTAGE_ASSIGN_OR_RETURN(rows.data, col.backend().allocate(std::max<size_t>(bytes, 1)));
          if (bytes > 0) std::memcpy(rows.data->data(), out.data(), bytes);
        } else {
          KSTAGE_ASSIGN_OR_RETURN(rows.data, col.backend().upload(out.data(), bytes));
        }
        continue;
      }
      rows.data = compact[c];
      if (col.schema().is_array) {
        rows.starts.resize(n);
        rows.lengths.resize(n);
        for (size_t j = 0; j < n; ++j) {
          rows.starts[j] = starts[c][j % s];
          rows.lengths[j] = lengths[c][j % s];
        }
        continue;
      }
      // Row j of the write is row j mod s of the compact source: one gather at the seal.
      rows.indexed_source = true;
      if (s == 1) {
        rows.source_first = 0;
        rows.source_step = 0;
      } else {
        KSTAGE_ASSIGN_OR_RETURN(rows.source_index, host.allocate(n * sizeof(uint32_t)));
        auto* index = reinterpret_cast<uint32_t*>(rows.source_index->data());
        for (size_t j = 0; j < n; ++j) index[j] = uint32_t(j % s);
      }
    }
    if (device_work)
      for (const ClonedColumn& cc : cloned) {
        Backend& b = cc.column->backend();
        if (b.synchronous()) continue;
        if (CompletionPtr done = b.record()) op->work.push_back(std::move(done));
      }
    enqueue(batch);
    return op;
  } catch (const std::bad_alloc&) {
    return reject(out_of_memory("no host memory to clone '%s' to %zu targets",
                                path_name(source).c_str(), nt));
  }
}

}  // namespace kstage::core
