// SPDX-License-Identifier: Apache-2.0
#include "core/stage.hpp"

#include "core/device_sync.hpp"
#include "core/dtype.hpp"
#include "core/transport.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

namespace kstage::core {

Result<std::unique_ptr<Stage>> Stage::create(const kstage_config_t& config) {
  std::unique_ptr<BackendSet> backends;
  KSTAGE_ASSIGN_OR_RETURN(backends, make_backend_set(config));
  return std::unique_ptr<Stage>(new Stage(std::move(backends), config.residency));
}

Stage::~Stage() {
  // Device work in flight still reads staged data, columns and deferred
  // managed tensors: let it finish, then release everything while Kokkos
  // lives (the backends, destroyed last, return memory in stream order).
  fence_devices();
  decltype(deferred_) deferred;  // released after the lock, as below
  {
    std::lock_guard lock(deferred_mutex_);
    deferred.swap(deferred_);
  }
  // Released after the lock, as at a seal (deleters may take Python's GIL).
  decltype(pending_) pending;
  decltype(columns_) columns;
  {
    std::lock_guard lock(mutex_);
    pending.swap(pending_);
    columns.swap(columns_);
  }
}

bool Op::done() const {
  for (const CompletionPtr& w : work)
    if (!w->done()) return false;
  return true;
}

bool Op::wait(uint64_t timeout_ns) const {
  const auto start = std::chrono::steady_clock::now();
  for (const CompletionPtr& w : work) {
    uint64_t left = timeout_ns;
    if (timeout_ns != KSTAGE_TIMEOUT_INFINITE) {
      const auto spent = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::steady_clock::now() - start)
                                      .count());
      left = spent >= timeout_ns ? 0 : timeout_ns - spent;
    }
    if (!w->wait(left)) return false;
  }
  return true;
}

Status Op::outcome() const {
  std::lock_guard lock(failure_mutex_);
  if (!failure_.ok()) return failure_;
  for (const CompletionPtr& w : work) {
    Status st = w->status();
    if (!st.ok()) return failure_ = std::move(st);
  }
  if (check && status == KSTAGE_OK) {
    Status st = check->status();
    if (!st.ok()) return failure_ = std::move(st);
  }
  return Status(status, message);
}

void Stage::fence_devices() {
  for (Backend* b : backends_->active())
    if (!b->synchronous()) b->fence();
}

void Stage::defer(const std::vector<CompletionPtr>& work, std::shared_ptr<void> keep) noexcept {
  // No reaping here: callers may hold mutex_, and reaping runs producers'
  // deleters, which must never run under it. Calls that hold no lock reap.
  try {
    Deferred d{work, keep};
    std::lock_guard lock(deferred_mutex_);
    deferred_.push_back(std::move(d));
    return;
  } catch (...) {
  }
  for (const CompletionPtr& w : work) w->wait(KSTAGE_TIMEOUT_INFINITE);
  // `keep` is let go on return, the work done. (The one caller that holds mutex_, a read,
  // keeps staging buffers: no producer's deleter runs under the lock.)
}

void Stage::reap_deferred() {
  std::vector<Deferred> done;  // released outside the lock (deleters run)
  {
    std::lock_guard lock(deferred_mutex_);
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      bool finished = true;
      for (const CompletionPtr& w : it->work) finished = finished && w->done();
      if (finished) {
        done.push_back(std::move(*it));
        it = deferred_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

bool Stage::Mutation::targets(uint64_t attribute) const {
  if (kind == Kind::DeletePrims) return true;
  return std::find(attributes.begin(), attributes.end(), attribute) != attributes.end();
}

Status Stage::check_token(uint64_t token, const char* what, uint64_t index) const {
  if (!dictionary_.is_token(token))
    return error(KSTAGE_INVALID_ARGUMENT, "%s[%llu] = %llu is not a token of this stage", what,
                 (unsigned long long)index, (unsigned long long)token);
  return Status::OK();
}

Status Stage::check_distinct_tokens(const uint64_t* attributes, uint64_t n) const {
  for (uint64_t i = 0; i < n; ++i) {
    KSTAGE_RETURN_NOT_OK(check_token(attributes[i], "attributes", i));
    for (uint64_t j = 0; j < i; ++j)  // batches are a handful of attributes
      if (attributes[j] == attributes[i])
        return error(KSTAGE_INVALID_ARGUMENT, "attributes[%llu] ('%s') repeats attributes[%llu]",
                     (unsigned long long)i, token_name(attributes[i]).c_str(),
                     (unsigned long long)j);
  }
  return Status::OK();
}

std::string Stage::token_name(uint64_t token) const {
  const std::string* s = dictionary_.token(token);
  return s ? *s : format("#%llu", (unsigned long long)token);
}

std::string Stage::path_name(uint64_t path) const {
  std::string s = dictionary_.path(path);
  return !s.empty() ? s : format("#%llu", (unsigned long long)path);
}

uint64_t Stage::floor_of(uint64_t attribute) const {
  auto it = floors_.find(attribute);
  return it == floors_.end() ? default_floor_ : it->second;
}

uint64_t Stage::global_floor() const {
  uint64_t f = default_floor_;
  for (const auto& [attr, floor] : floors_) f = std::min(f, floor);
  return f;
}

Column* Stage::column(uint64_t attribute) const {
  auto it = columns_.find(attribute);
  return it == columns_.end() ? nullptr : it->second.get();
}

// ---------------------------------------------------------------------------
// Queries

Result<PrimList> Stage::query_paths(const uint64_t* paths, uint64_t n) {
  if (n > 0 && paths == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "paths is NULL but count is %llu", (unsigned long long)n);
  for (uint64_t i = 0; i < n; ++i)
    if (!dictionary_.is_path(paths[i]))
      return error(KSTAGE_INVALID_ARGUMENT, "paths[%llu] = %llu is not a path of this stage",
                   (unsigned long long)i, (unsigned long long)paths[i]);
  // Repeats: a bitmap over the ids the list spans (ids are dense), or, for a
  // short list of far-apart ids (ranges take large blocks of ids), a sorted copy.
  uint64_t lo = UINT64_MAX, hi = 0;
  for (uint64_t i = 0; i < n; ++i) lo = std::min(lo, paths[i]), hi = std::max(hi, paths[i]);
  uint64_t repeat = n;
  if (n > 1 && hi - lo < 64 * n + 4096) {
    std::vector<bool> seen(hi - lo + 1);
    for (uint64_t i = 0; i < n && repeat == n; ++i) {
      if (seen[paths[i] - lo]) repeat = i;
      seen[paths[i] - lo] = true;
    }
  } else if (n > 1) {
    std::unordered_set<uint64_t> seen;
    seen.reserve(n);
    for (uint64_t i = 0; i < n && repeat == n; ++i)
      if (!seen.insert(paths[i]).second) repeat = i;
  }
  if (repeat != n) {
    const uint64_t first = uint64_t(std::find(paths, paths + repeat, paths[repeat]) - paths);
    return error(KSTAGE_INVALID_ARGUMENT, "paths[%llu] ('%s') repeats paths[%llu]",
                 (unsigned long long)repeat, path_name(paths[repeat]).c_str(), (unsigned long long)first);
  }
  // Ids that step by one constant in order (paths interned one after another,
  // or every k-th of them) are known to be a progression, as a range query is,
  // so writes compute their rows; the list is kept too (8 bytes per prim, as
  // any explicit query): read and map groups hand it out as it is, where a
  // progression alone would make an array at every fetch. (The ids are
  // distinct, checked above, so the step is never 0.)
  std::vector<uint64_t> ids(paths, paths + n);
  if (n > 1 && paths[1] > paths[0]) {
    const uint64_t step = paths[1] - paths[0];
    bool progression = (UINT64_MAX - paths[0]) / step >= n - 1;
    for (uint64_t i = 2; progression && i < n; ++i) progression = paths[i] == paths[0] + i * step;
    if (progression)
      return PrimList(std::make_shared<const PrimSeq>(PrimSeq::listed_progression(std::move(ids), step)));
  }
  return PrimList(std::make_shared<const PrimSeq>(std::move(ids)));
}

Result<PrimList> Stage::query_range(uint64_t first, uint64_t start, uint64_t count, uint64_t stride) {
  PathTree::Range r;
  if (!dictionary_.path_range(first, r) || r.first != first)
    return error(KSTAGE_INVALID_ARGUMENT, "range %llu is not the first path of a path range of this stage",
                 (unsigned long long)first);
  if (stride == 0) stride = 1;
  if (start >= r.count)
    return error(KSTAGE_INVALID_ARGUMENT, "start %llu is beyond the range's %llu paths",
                 (unsigned long long)start, (unsigned long long)r.count);
  const uint64_t available = (r.count - start - 1) / stride + 1;
  if (count == 0) count = available;
  if (count > available)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "count %llu with stride %llu from %llu reaches beyond the range's %llu paths (at most %llu)",
                 (unsigned long long)count, (unsigned long long)stride, (unsigned long long)start,
                 (unsigned long long)r.count, (unsigned long long)available);
  // No list: prim k is first + start + k * stride (the ids of a range are consecutive).
  return PrimList(std::make_shared<const PrimSeq>(PrimSeq::progression(first + start, count, stride)));
}

Result<PrimList> Stage::query_filter(const kstage_filter_t& f, const std::vector<uint64_t>* path_in) {
  if (f.has_attribute_count > 0 && f.has_attributes == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "filter.has_attributes is NULL but has_attribute_count is %llu",
                 (unsigned long long)f.has_attribute_count);
  for (uint64_t i = 0; i < f.has_attribute_count; ++i)
    KSTAGE_RETURN_NOT_OK(check_token(f.has_attributes[i], "filter.has_attributes", i));
  if (f.path_prefix != 0 && !dictionary_.is_path(f.path_prefix))
    return error(KSTAGE_INVALID_ARGUMENT, "filter.path_prefix = %llu is not a path of this stage",
                 (unsigned long long)f.path_prefix);
  std::lock_guard lock(mutex_);
  std::vector<const Column*> has;
  for (uint64_t i = 0; i < f.has_attribute_count; ++i) {
    const Column* c = column(f.has_attributes[i]);
    if (!c) return PrimList(std::make_shared<const PrimSeq>());  // nobody holds it
    has.push_back(c);
  }
  std::vector<uint64_t> candidates;
  if (path_in) {
    candidates = *path_in;
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  } else {
    prim_attribute_count_.for_each([&](uint64_t p) { candidates.push_back(p); });
  }
  std::vector<uint64_t> out;
  for (uint64_t p : candidates) {
    if (prim_attribute_count_.get(p) == 0) continue;
    bool keep = true;
    for (const Column* c : has) keep = keep && c->has(p);
    if (keep) out.push_back(p);
  }
  if (f.path_prefix != 0) dictionary_.keep_at_or_below(f.path_prefix, out);
  return PrimList(std::make_shared<const PrimSeq>(std::move(out)));
}

// ---------------------------------------------------------------------------
// Mutations

std::vector<char> Stage::projected_existence(const StagedRows& t, Key key) const {
  const size_t n = t.n;
  // Nothing pending before `key` (the usual case: writers seal every tick):
  // existence is the sealed attribute count, O(1) per prim.
  if (nothing_pending_before(key)) {
    std::vector<char> exists(n);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t p = t.prim(i);
      exists[i] = prim_attribute_count_.get(p) > 0;
    }
    return exists;
  }
  std::unordered_map<uint64_t, size_t> index;
  index.reserve(n);
  for (size_t i = 0; i < n; ++i) index.emplace(t.prim(i), i);
  std::vector<char> exists(n, 0);
  std::vector<char> present(n);
  // Per column: sealed presence, then that column's pending mutations above
  // its floor and ordered before `key`.
  for (const auto& [attr, col] : columns_) {
    for (size_t i = 0; i < n; ++i) present[i] = col->has(t.prim(i));
    const uint64_t floor = floor_of(attr);
    for (auto it = pending_.begin(); it != pending_.end() && it->first < key; ++it) {
      const Mutation& m = it->second;
      if (m.ordinal <= floor || !m.targets(attr)) continue;
      const char value = m.kind == Mutation::Kind::Write;
      for (size_t j = 0; j < m.rows.n; ++j) {
        auto hit = index.find(m.rows.prim(j));
        if (hit != index.end()) present[hit->second] = value;
      }
    }
    for (size_t i = 0; i < n; ++i) exists[i] |= present[i];
  }
  return exists;
}

Status Stage::resolve_selection(StagedRows& rows) {
  if (!rows.device_mask) return Status::OK();
  std::vector<uint64_t> words;
  KSTAGE_ASSIGN_OR_RETURN(words, rows.device_mask->words());
  const size_t count = rows.span;
  const size_t k = kernels::mask_popcount(words.data(), count);
  BufferPtr subset;
  if (k != count) {  // (every bit set: prims[0, count), as a host mask with every bit set)
    KSTAGE_ASSIGN_OR_RETURN(subset, backends_->host().allocate(std::max<size_t>(k, 1) * sizeof(uint32_t)));
    kernels::select_mask_bits(words.data(), count, reinterpret_cast<uint32_t*>(subset->data()));
  }
  rows.subset = std::move(subset);
  rows.n = k;
  rows.device_mask.reset();
  return Status::OK();
}

Status Stage::check_prim_mode(StagedRows& rows, kstage_prim_mode_t mode, Key key, Column* c) {
  if (mode == KSTAGE_PRIM_MODE_UPSERT || rows.n == 0) return Status::OK();
  // Steady-state UPDATE ticks: with nothing pending before `key`, a target
  // that holds the written attribute exists, and the column says whether all
  // of them do (its cached row map of the query, or no map at all). (A device mask's
  // targets are among prims[0, span): no need to know which.)
  if (mode == KSTAGE_PRIM_MODE_UPDATE && c && nothing_pending_before(key) &&
      c->holds_all(rows.prims, rows.subset || rows.device_mask ? rows.span : rows.n))
    return Status::OK();
  // Otherwise the targets themselves, and those of the writes pending before this one: device
  // masks are read back here (the prim mode is checked at the call).
  KSTAGE_RETURN_NOT_OK(resolve_selection(rows));
  for (auto it = pending_.begin(); it != pending_.end() && it->first < key; ++it)
    KSTAGE_RETURN_NOT_OK(resolve_selection(it->second.rows));
  std::vector<char> exists = projected_existence(rows, key);
  // Elements are numbered as the caller numbers them: in the query (a
  // masked write's i-th target is element subset[i]).
  const uint32_t* subset = rows.subset_index();
  for (size_t i = 0; i < rows.n; ++i) {
    const size_t element = subset ? subset[i] : i;
    if (mode == KSTAGE_PRIM_MODE_INSERT && exists[i])
      return error(KSTAGE_ALREADY_EXISTS, "INSERT: prim '%s' (element %zu) already exists",
                   path_name(rows.prim(i)).c_str(), element);
    if (mode == KSTAGE_PRIM_MODE_UPDATE && !exists[i])
      return error(KSTAGE_NOT_FOUND, "UPDATE: prim '%s' (element %zu) does not exist",
                   path_name(rows.prim(i)).c_str(), element);
  }
  return Status::OK();
}

Result<std::shared_ptr<Op>> Stage::write(const PrimList& prims, const uint64_t* attributes,
                                         const kstage_write_data_t* data, uint64_t n,
                                         uint64_t ordinal, kstage_prim_mode_t mode,
                                         ManagedTensors* managed) {
  if (mode < KSTAGE_PRIM_MODE_UPSERT || mode > KSTAGE_PRIM_MODE_UPDATE)
    return error(KSTAGE_INVALID_ARGUMENT, "prim_mode %d is not a kstage_prim_mode_t", int(mode));
  if (n == 0) return error(KSTAGE_INVALID_ARGUMENT, "no attributes to write (n = 0)");
  if (attributes == nullptr || data == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "%s is NULL", attributes ? "data" : "attributes");
  KSTAGE_RETURN_NOT_OK(check_distinct_tokens(attributes, n));
  reap_deferred();  // what finished device work no longer needs

  // Phase 1 (locked): floors, and the schema each write must match.
  std::vector<Schema> existing(n);
  std::vector<Backend*> existing_backend(n, nullptr);
  auto check_floors_and_snapshot_schemas = [&]() -> Status {
    for (uint64_t i = 0; i < n; ++i) {
      KSTAGE_RETURN_NOT_OK(check_floor(attributes[i], ordinal));
      if (Column* c = column(attributes[i])) {
        existing[i] = c->schema();
        existing_backend[i] = &c->backend();
      } else {
        existing_backend[i] = nullptr;
      }
    }
    return Status::OK();
  };
  {
    std::lock_guard lock(mutex_);
    KSTAGE_RETURN_NOT_OK(check_floors_and_snapshot_schemas());
  }

  // Phase 2 (unlocked): validate the payloads and copy them in.
  std::vector<StagedWrite> staged(n);
  for (uint64_t i = 0; i < n; ++i) {
    WriteRequest req;
    req.data = &data[i];
    req.attribute_name = token_name(attributes[i]);
    req.prims = prims;
    req.existing = existing_backend[i] ? &existing[i] : nullptr;
    req.existing_backend = existing_backend[i];
    req.managed = managed;
    req.residency = data[i].residency.device_type != 0 ? data[i].residency : residency_;
    auto r = stage_write(req, *backends_);
    if (!r.ok()) {
      if (i > 0) fence_devices();  // earlier attributes' copies may still read their sources
      Status st = r.status();
      if (n == 1) return st;
      return Status(st.code(), format("data[%llu] ('%s'): ", (unsigned long long)i,
                                      req.attribute_name.c_str()) + st.message());
    }
    staged[i] = std::move(r.value());
  }

  // The op completes when the staging copies have read the sources.
  auto op = std::make_shared<Op>();
  for (const StagedWrite& w : staged) {
    if (w.backend->synchronous()) continue;
    const StagedWrite* first = staged.data();
    if (std::any_of(first, &w, [&](const StagedWrite& o) { return o.backend == w.backend; }))
      continue;  // recorded already
    if (CompletionPtr c = w.backend->record()) op->work.push_back(std::move(c));
  }
  for (StagedWrite& w : staged)
    if (w.keep) defer(op->work, std::move(w.keep));
  // Device index maps: checked by the device, reported by the op, and enforced by the seal.
  std::shared_ptr<WriteCheck> check;
  for (uint64_t i = 0; i < n; ++i) {
    const StagedRows& rows = staged[i].rows;
    if (!rows.index_check) continue;
    if (!check) check = std::make_shared<WriteCheck>();
    check->add(rows.index_check, rows.index_rows, rows.index_rows_from,
               n == 1 ? std::string()
                      : format("data[%llu] ('%s'): ", (unsigned long long)i,
                               token_name(attributes[i]).c_str()));
  }
  op->check = check;
  // Phase 3 (locked): re-check against what other threads did meanwhile,
  // check prim modes, then enqueue every attribute or none. A rejection
  // waits for the staging copies: the caller frees the sources next.
  std::unique_lock lock(mutex_);
  auto reject = [&](Status st) {
    lock.unlock();
    if (!op->work.empty()) fence_devices();
    return st;
  };
  for (uint64_t i = 0; i < n; ++i) {
    if (Status st = check_floor(attributes[i], ordinal); !st.ok()) return reject(st);
    Column* c = column(attributes[i]);
    if (c && !existing_backend[i]) {  // created concurrently: compare schemas now
      if (Status st = check_schema(*c, staged[i].schema); !st.ok()) return reject(st);
      if (&c->backend() != staged[i].backend)
        return reject(error(KSTAGE_INVALID_ARGUMENT,
                            "column '%s' was created concurrently on another device",
                            token_name(attributes[i]).c_str()));
    }
  }
  const Key key{ordinal, next_seq_};
  for (uint64_t i = 0; i < n; ++i) {
    Status st = check_prim_mode(staged[i].rows, mode, key, column(attributes[i]));
    if (!st.ok()) {
      if (n == 1) return reject(st);
      return reject(Status(st.code(), format("data[%llu] ('%s'): ", (unsigned long long)i,
                                             token_name(attributes[i]).c_str()) +
                                          st.message()));
    }
  }
  // Every attribute or none.
  WriteBatch batch;
  try {
    for (uint64_t i = 0; i < n; ++i)
      add_write(batch, attributes[i], staged[i].schema, staged[i].backend, ordinal);
  } catch (const std::bad_alloc&) {
    return reject(out_of_memory("no host memory to enqueue the write"));
  }
  auto m = batch.writes.begin();
  for (StagedWrite& w : staged) {
    Mutation& mutation = (m++)->second;
    mutation.rows = std::move(w.rows);
    mutation.rows.index_check.reset();  // the call's WriteCheck holds it
    mutation.check = check;
    mutation.created_column = batch.columns.count(mutation.attributes[0]) != 0;
  }
  enqueue(batch);
  return op;
}

void Stage::add_write(WriteBatch& b, uint64_t attribute, const Schema& schema, Backend* backend,
                      uint64_t ordinal) {
  if (!column(attribute) && !b.columns.count(attribute))
    b.columns.emplace(attribute, std::make_unique<Column>(attribute, schema, backend));
  Mutation m;
  m.kind = Mutation::Kind::Write;
  m.ordinal = ordinal;
  m.attributes = {attribute};
  b.writes.emplace(Key{ordinal, next_seq_ + b.writes.size()}, std::move(m));
}

void Stage::enqueue(WriteBatch& b) noexcept {
  next_seq_ += b.writes.size();
  columns_.merge(b.columns);
  pending_.merge(b.writes);
}

Result<std::shared_ptr<Op>> Stage::remove(const PrimList& prims, const uint64_t* attributes,
                                          uint64_t n, uint64_t ordinal) {
  if (n > 0 && attributes == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "attributes is NULL but n is %llu", (unsigned long long)n);
  for (uint64_t i = 0; i < n; ++i) KSTAGE_RETURN_NOT_OK(check_token(attributes[i], "attributes", i));
  std::lock_guard lock(mutex_);
  if (n > 0) {
    for (uint64_t i = 0; i < n; ++i) KSTAGE_RETURN_NOT_OK(check_floor(attributes[i], ordinal));
  } else {
    // Deleting prims touches every column holding one of them.
    for (const auto& [attr, col] : columns_) {
      const uint64_t floor = floor_of(attr);
      if (ordinal > floor) continue;
      for (uint64_t p : *prims)
        if (col->has(p))
          return error(KSTAGE_WRITE_FLOOR_VIOLATION,
                       "ordinal %llu is not above the write floor %llu of attribute '%s', which "
                       "prim '%s' holds",
                       (unsigned long long)ordinal, (unsigned long long)floor,
                       token_name(attr).c_str(), path_name(p).c_str());
    }
    if (ordinal <= default_floor_)
      return error(KSTAGE_WRITE_FLOOR_VIOLATION,
                   "ordinal %llu is not above the global write floor %llu",
                   (unsigned long long)ordinal, (unsigned long long)default_floor_);
  }
  Mutation m;
  m.kind = n > 0 ? Mutation::Kind::DeleteAttributes : Mutation::Kind::DeletePrims;
  m.ordinal = ordinal;
  m.attributes.assign(attributes, attributes + n);
  m.rows.prims = prims;
  m.rows.n = prims->size();
  pending_.emplace(Key{ordinal, next_seq_++}, std::move(m));
  return std::make_shared<Op>();
}

Status Stage::seal_column(Column& c, uint64_t from, uint64_t to, uint64_t& reached,
                          bool& skipped_creator) {
  reached = to;
  skipped_creator = false;
  NewPrims added;
  std::vector<uint64_t> removed;
  const uint64_t attr = c.attribute();
  for (auto it = pending_.upper_bound(Key{from, UINT64_MAX});
       it != pending_.end() && it->first.first <= to; ++it) {
    Mutation& m = it->second;
    if (!m.targets(attr)) continue;
    if (m.kind == Mutation::Kind::Write) {
      if (Status st = resolve_selection(m.rows); !st.ok()) {  // a device mask's targets
        reached = m.ordinal - 1;
        return st;
      }
      if (m.check) {
        // A device index_map with a bad entry: the call's writes are never applied. Its check
        // is the call's own work, so this waits for that, not for anything after it.
        const Status checked = m.check->status();
        if (checked.code() == KSTAGE_INVALID_ARGUMENT) {
          skipped_creator = skipped_creator || m.created_column;
          continue;
        }
        if (!checked.ok()) {
          reached = m.ordinal - 1;
          return checked;
        }
      }
      added.clear();
      // The counts' memory for the new prims is made before the rows move: their count
      // cannot then fail after the column took them (a retry would find them present).
      Status st = c.apply_write(m.rows, m.ordinal, added, [this](const NewPrims& fresh) {
        prim_attribute_count_.prepare_increments(fresh.list, fresh.run_first, fresh.run_count);
      });
      if (!st.ok()) {
        // Stop below this ordinal; mutations already applied at it are
        // re-applied on the next seal, which gives the same result.
        reached = m.ordinal - 1;
        return st;
      }
      for (uint64_t p : added.list) prim_attribute_count_.increment(p);
      prim_attribute_count_.increment_run(added.run_first, added.run_count);
    } else {
      removed.clear();
      // The counts' bytes first: a delete that cannot record its prims' new
      // counts must not happen at all.
      try {
        prim_attribute_count_.prepare_decrements(*m.rows.prims, m.rows.n);
      } catch (const std::bad_alloc&) {
        reached = m.ordinal - 1;
        return out_of_memory("no memory for the attribute counts of a delete's prims");
      }
      try {
        c.apply_delete(*m.rows.prims, m.rows.n, m.ordinal, removed);  // all or nothing
      } catch (const std::bad_alloc&) {
        reached = m.ordinal - 1;
        return out_of_memory("no host memory to delete %zu prims' attribute", m.rows.n);
      }
      for (uint64_t p : removed) prim_attribute_count_.decrement(p);
    }
  }
  return Status::OK();
}

void Stage::collect_sealed_mutations(std::vector<Mutation>& sealed) noexcept {
  // Sealed mutations are never applied again (a seal starts above each floor): those `sealed`
  // has no room for stay pending, for a later call to collect.
  const uint64_t global = global_floor();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Mutation& m = it->second;
    bool done;
    if (m.kind == Mutation::Kind::DeletePrims) {
      done = m.ordinal <= global;
    } else {
      done = true;
      for (uint64_t a : m.attributes) done = done && m.ordinal <= floor_of(a);
    }
    if (done) {
      try {
        sealed.push_back(std::move(m));  // (on failure m stays as it was)
      } catch (...) {
        return;
      }
    }
    it = done ? pending_.erase(it) : std::next(it);
  }
}

Status Stage::advance_write_floor(uint64_t ordinal, const uint64_t* attributes, uint64_t n) {
  if (n > 0 && attributes == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "attributes is NULL but n is %llu", (unsigned long long)n);
  for (uint64_t i = 0; i < n; ++i) KSTAGE_RETURN_NOT_OK(check_token(attributes[i], "attributes", i));
  // What the seal lets go of -- sealed writes (an adopted tensor among them) and storage the
  // columns replaced -- is released after the lock (declared first, destroyed last): a
  // producer's deleter may call back into the stage, or take Python's GIL, which another
  // thread may hold while it waits for this stage.
  std::vector<Mutation> sealed;
  std::vector<BufferPtr> replaced;
  std::lock_guard lock(mutex_);
  std::vector<uint64_t> targets;
  if (n == 0) {
    for (const auto& [attr, floor] : floors_) targets.push_back(attr);
    for (const auto& [attr, col] : columns_)
      if (!floors_.count(attr)) targets.push_back(attr);
  } else {
    targets.assign(attributes, attributes + n);
  }
  // Each target's floor entry is made before any column changes: a floor that cannot be
  // recorded after its column took the writes would leave them visible below it. (An entry
  // equal to floor_of(attr) changes no floor.)
  for (uint64_t attr : targets) floors_.try_emplace(attr, floor_of(attr));
  Status result;
  for (uint64_t attr : targets) {
    const uint64_t from = floor_of(attr);
    if (ordinal <= from) continue;  // never backwards
    uint64_t reached = ordinal;
    if (Column* c = column(attr)) {
      bool skipped_creator = false;
      Status st = seal_column(*c, from, ordinal, reached, skipped_creator);
      if (!st.ok() && result.ok()) result = st;
      c->take_replaced(replaced);
      // The write that made the column was refused by its device check: unless something
      // else wrote or will write it, the column goes too, as if that call had been refused.
      if (skipped_creator && c->row_space() == 0 && !c->has_tombstones() &&
          std::none_of(pending_.begin(), pending_.end(), [&](const auto& p) {
            return p.second.ordinal > reached && p.second.targets(attr);
          }))
        columns_.erase(attr);
    }
    floors_[attr] = reached;
  }
  if (n == 0 && result.ok()) default_floor_ = std::max(default_floor_, ordinal);
  collect_sealed_mutations(sealed);
  return result;
}

Result<uint64_t> Stage::write_floor(uint64_t attribute) {
  if (attribute != 0) KSTAGE_RETURN_NOT_OK(check_token(attribute, "attribute", 0));
  std::lock_guard lock(mutex_);
  return attribute == 0 ? global_floor() : floor_of(attribute);
}

// ---------------------------------------------------------------------------
// Reads

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
    if (t.data)
      t.data = moved->data() + (static_cast<std::byte*>(t.data) - g.pinned->data());
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
  } else if (const Column::RecentWrite* w =
                 desc.change_range && map.identity ? c.only_change_since(desc.range_begin)
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
          scan(stamp, [](size_t i) { return uint32_t(i); });  // the query is the column in row order
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
        KSTAGE_ASSIGN_OR_RETURN(g.pinned, backend.allocate(std::max<size_t>(n * rb, 1)));
        backend.copy_bytes(g.pinned->data(), c.values()->data(), n * rb);
        g.shapes.push_back(int64_t(n));
      } else if (compact) {
        KSTAGE_ASSIGN_OR_RETURN(g.pinned, backend.allocate(std::max<size_t>(n * rb, 1)));
        kernels::RowCopy k;
        k.dst = g.pinned->data();
        k.dst_stride = int64_t(rb);
        k.src = c.values()->data();
        k.src_stride = int64_t(rb);
        k.src_index = rows;
        k.n = n;
        k.row_bytes = rb;
        if (!c.reads_host() && whole_query && rows == map.rows->data()) {
          KSTAGE_ASSIGN_OR_RETURN(k.src_index, c.resident_rows(map.rows));
          k.indices_resident = true;
        }
        backend.row_copy(k);
        g.shapes.push_back(int64_t(n));
      } else {
        g.pinned = pin(c.values());
        g.shapes.push_back(int64_t(c.row_space()));
        if (whole_query) {
          if (!map.identity) g.index_map = map.rows;
        } else {
          bool identity = n == c.row_space();
          for (size_t i = 0; identity && i < n; ++i) identity = rows[i] == i;
          if (!identity) g.index_map = std::make_shared<const std::vector<uint32_t>>(std::move(own_rows));
        }
        // A GPU consumer's copy of the map on the column's device: the column's cached copy of
        // a whole query's row map, else one upload (ordered before the group's event).
        if (desc.device_index_map && g.index_map && !c.reads_host()) {
          if (whole_query && g.index_map == map.rows) {
            KSTAGE_ASSIGN_OR_RETURN(g.device_index, c.resident_copy(map.rows));
          } else {
            KSTAGE_ASSIGN_OR_RETURN(g.device_index,
                                    backend.upload(g.index_map->data(),
                                                   g.index_map->size() * sizeof(uint32_t)));
          }
        }
      }
      g.tensors.push_back(row_tensor(g.pinned->data(), device, schema.dtype));
      g.strides.push_back(1);
    } else {
      const size_t eb = c.row_bytes();
      auto row_at = [rows](size_t i) { return rows ? rows[i] : uint32_t(i); };  // null: the identity
      std::byte* base;
      std::vector<uint64_t> start(n);
      if (compact) {
        // Pack the rows, in prim order, into a buffer of the reader's own.
        // A column whose rows are all empty has no buffer at all.
        const std::byte* src = c.values() ? c.values()->data() : nullptr;
        std::vector<const std::byte*> from(n);
        std::vector<uint64_t> bytes(n);
        uint64_t cursor = 0, bits = kernels::kRaggedRowAlign;
        for (size_t i = 0; i < n; ++i) {
          from[i] = src ? src + c.row_offset(row_at(i)) : nullptr;
          bytes[i] = c.row_length(row_at(i));
          start[i] = cursor;
          bits |= reinterpret_cast<uintptr_t>(from[i]) | cursor | bytes[i];
          cursor += kernels::ragged_align_up(bytes[i]);
        }
        KSTAGE_ASSIGN_OR_RETURN(g.pinned, backend.allocate(std::max<uint64_t>(cursor, 1)));
        kernels::RaggedCopy k{g.pinned->data(), start.data(), from.data(), bytes.data(), n};
        backend.ragged_copy(k, kernels::widest_word(bits));
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
      Column* c = column(attributes[i]);
      if (!c || c->last_change() <= desc.range_end) continue;  // the usual case: O(1)
      const RowMap rows = c->row_map(prims, prims->size());
      for (size_t k = 0; k < prims->size(); ++k) {
        const uint64_t p = (*prims)[k];
        const uint32_t r = rows.row(k);
        const uint64_t last = r != Column::kNoRow ? c->changed_at(r)
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
  for (uint64_t i = 0; i < n; ++i) {
    Column* c = column(attributes[i]);
    if (!c) continue;
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
      if (Status st = backends_->host().record_into(desc.device_sync, "desc.device_sync");
          !st.ok())
        return fail(st);
  } else if (is_set(desc.device_sync)) {
    Backend& last = *devices.back().first;
    for (size_t k = 0; k + 1 < devices.size(); ++k)
      if (devices[k].second)
        if (Status st = last.order_after(devices[k].second->sync(), "desc.device_sync");
            !st.ok())
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

}  // namespace kstage::core

// ---------------------------------------------------------------------------
// Maps

namespace kstage::core {
namespace {


// Allocates one group's buffer and describes it. `rows_prims` are the prims
// of the buffer's rows (row order), `prims` the group's prims (query order).
Result<std::unique_ptr<MapGroup>> make_map_group(const MapSession& s, PrimList prims,
                                                 PrimList rows_prims,
                                                 std::shared_ptr<const std::vector<uint32_t>> index_map,
                                                 const uint64_t* counts) {
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

// A device map's buffers come from the stream-ordered allocator: a block may have been freed
// on the stage's stream with work still queued before the free, and it is usable only in
// stream order. A producer on another stream, or the host, is not ordered after the stage's
// stream, so the groups are handed out once the stream has passed the allocations: their
// {0, 0} device_sync is then true ("fresh, no work pending").
static Status settle_map_buffers(Backend& backend) {
  if (backend.synchronous()) return Status::OK();
  CompletionPtr c = backend.record();
  if (!c) return Status::OK();
  c->wait(KSTAGE_TIMEOUT_INFINITE);
  return c->status();
}

Status Stage::check_floor(uint64_t attribute, uint64_t ordinal) const {
  const uint64_t floor = floor_of(attribute);
  if (ordinal <= floor)
    return error(KSTAGE_WRITE_FLOOR_VIOLATION,
                 "ordinal %llu is not above the write floor %llu of attribute '%s'",
                 (unsigned long long)ordinal, (unsigned long long)floor,
                 token_name(attribute).c_str());
  return Status::OK();
}

Status Stage::check_schema(const Column& c, const Schema& s) const {
  const Schema& e = c.schema();
  const std::string attr = token_name(c.attribute());
  if (e.is_array != s.is_array)
    return error(KSTAGE_INVALID_ARGUMENT, "'%s' is %s but is_array = %s was declared",
                 attr.c_str(), e.is_array ? "an array column" : "a fixed-size column",
                 s.is_array ? "true" : "false");
  if (!same_dtype(e.dtype, s.dtype))
    return error(KSTAGE_INVALID_ARGUMENT,
                 "dtype %s does not match column '%s' dtype %s: the dtype must match the "
                 "column's",
                 dtype_string(s.dtype).c_str(), attr.c_str(), dtype_string(e.dtype).c_str());
  if (e.semantic != s.semantic)
    return error(KSTAGE_INVALID_ARGUMENT, "semantic %s does not match column '%s' semantic %s",
                 semantic_name(s.semantic), attr.c_str(), semantic_name(e.semantic));
  return Status::OK();
}

Result<std::shared_ptr<MapSession>> Stage::map(const PrimList& prims, const kstage_map_desc_t& d,
                                               uint64_t ordinal, const uint64_t* counts,
                                               uint64_t n) {
  if (!dictionary_.is_token(d.attribute))
    return error(KSTAGE_INVALID_ARGUMENT, "desc.attribute = %llu is not a token of this stage",
                 (unsigned long long)d.attribute);
  if (d.prim_mode < KSTAGE_PRIM_MODE_UPSERT || d.prim_mode > KSTAGE_PRIM_MODE_UPDATE)
    return error(KSTAGE_INVALID_ARGUMENT, "desc.prim_mode %d is not a kstage_prim_mode_t",
                 int(d.prim_mode));
  {
    // An existing column's schema is what the map must declare: say so, with
    // both dtypes, before judging the declared dtype on its own.
    std::lock_guard lock(mutex_);
    if (Column* c = column(d.attribute))
      KSTAGE_RETURN_NOT_OK(check_schema(*c, Schema{d.is_array, d.dtype, d.semantic}));
  }
  KSTAGE_RETURN_NOT_OK(validate_dtype(d.dtype, "desc.dtype"));
  KSTAGE_RETURN_NOT_OK(validate_semantic(d.semantic, d.dtype, d.is_array));
  const size_t count = prims->size();
  if (!d.is_array && (counts != nullptr || n != 0))
    return error(KSTAGE_INVALID_ARGUMENT,
                 "element_counts are for array attributes; a fixed-size map passes NULL and 0 "
                 "(got %s and %llu)", counts ? "a pointer" : "NULL", (unsigned long long)n);
  if (d.is_array && (n != count || (count > 0 && counts == nullptr)))
    return error(KSTAGE_INVALID_ARGUMENT,
                 "an array map needs one element count per prim: the query has %zu prims, "
                 "element_counts has %llu%s",
                 count, (unsigned long long)n, counts ? "" : " (NULL)");
  const DLDevice residency = d.residency.device_type != 0 ? d.residency
                             : residency_.device_type != 0 ? residency_
                                                            : DLDevice{kDLCPU, 0};

  auto s = std::make_shared<MapSession>();
  s->attribute = d.attribute;
  s->ordinal = ordinal;
  s->schema = Schema{d.is_array, d.dtype, d.semantic};
  s->mode = d.prim_mode;
  const size_t per_group = d.max_group_prims == 0 ? std::max<size_t>(count, 1)
                                                  : size_t(d.max_group_prims);
  // Plan the groups under the lock (row assignments), allocate outside it.
  RowMap whole;  // all_present: one group covering every row of the column
  {
    std::lock_guard lock(mutex_);
    KSTAGE_RETURN_NOT_OK(check_floor(d.attribute, ordinal));
    Column* c = column(d.attribute);
    if (c) {
      KSTAGE_RETURN_NOT_OK(check_schema(*c, s->schema));
      s->backend = &c->backend();
    } else {
      KSTAGE_ASSIGN_OR_RETURN(s->backend, backends_->for_device(residency));
    }
    StagedRows all;
    all.prims = prims;
    all.n = count;
    KSTAGE_RETURN_NOT_OK(check_prim_mode(all, d.prim_mode, Key{ordinal, next_seq_}, c));
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
    KSTAGE_RETURN_NOT_OK(settle_map_buffers(*s->backend));
    return s;
  }
  for (size_t first = 0; first < count || (count == 0 && first == 0); first += per_group) {
    const size_t last = std::min(count, first + per_group);
    PrimList chunk = (first == 0 && last == count)
                         ? prims
                         : std::make_shared<const PrimSeq>(prims->slice(first, last - first));
    std::unique_ptr<MapGroup> g;
    KSTAGE_ASSIGN_OR_RETURN(g, make_map_group(*s, chunk, chunk, nullptr,
                                              d.is_array ? counts + first : nullptr));
    s->groups.push_back(std::move(g));
    if (count == 0) break;
  }
  KSTAGE_RETURN_NOT_OK(settle_map_buffers(*s->backend));
  return s;
}

Result<std::shared_ptr<Op>> Stage::commit(MapSession& s, const std::vector<MapGroup*>& groups,
                                          const kstage_device_sync_t& done_sync) {
  // The producer filled the buffers: the seals that read them come after
  // its event (host buffers take {0, 0}).
  KSTAGE_RETURN_NOT_OK(s.backend->order_after(done_sync, "done_sync"));
  auto op = std::make_shared<Op>();
  if (CompletionPtr c = s.backend->record()) op->work.push_back(std::move(c));
  if (groups.empty()) return op;  // nothing filled: no trace, not even a schema
  std::lock_guard lock(mutex_);
  KSTAGE_RETURN_NOT_OK(check_floor(s.attribute, s.ordinal));
  Column* c = column(s.attribute);
  if (c) {
    KSTAGE_RETURN_NOT_OK(check_schema(*c, s.schema));
    if (&c->backend() != s.backend)
      return error(KSTAGE_INVALID_ARGUMENT, "column '%s' was created on another device since the map opened",
                   token_name(s.attribute).c_str());
  }
  const Key key{s.ordinal, next_seq_};
  for (MapGroup* g : groups) KSTAGE_RETURN_NOT_OK(check_prim_mode(g->rows, s.mode, key, c));
  // Every group or none, as a write (the groups keep their rows for a retry).
  WriteBatch batch;
  try {
    for (size_t k = 0; k < groups.size(); ++k)
      add_write(batch, s.attribute, s.schema, s.backend, s.ordinal);
  } catch (const std::bad_alloc&) {
    return out_of_memory("no host memory to commit the map's groups");
  }
  auto m = batch.writes.begin();
  for (MapGroup* g : groups) {
    (m++)->second.rows = std::move(g->rows);  // the group's buffer is the staged data: no copy
    g->state = MapGroup::State::Committed;
  }
  enqueue(batch);
  return op;
}

}  // namespace kstage::core
