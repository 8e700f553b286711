// SPDX-License-Identifier: Apache-2.0
// Stage: writes, deletes and seals -- the ledger of pending mutations, sealed in ordinal order.
#include "core/stage.hpp"

#include "core/device_sync.hpp"
#include "core/dtype.hpp"
#include "core/transport.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

namespace kstage::core {

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
    KSTAGE_ASSIGN_OR_RETURN(subset,
                            backends_->host().allocate(std::max<size_t>(k, 1) * sizeof(uint32_t)));
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
                                      req.attribute_name.c_str()) +
                                   st.message());
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
    check->add(rows.index_check, rows.index_map_name, rows.index_rows, rows.index_rows_from,
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
    return error(KSTAGE_INVALID_ARGUMENT, "attributes is NULL but n is %llu",
                 (unsigned long long)n);
  for (uint64_t i = 0; i < n; ++i)
    KSTAGE_RETURN_NOT_OK(check_token(attributes[i], "attributes", i));
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
        Status checked = m.check->status();
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
      bool appeared = false;
      for (uint64_t p : added.list) appeared = prim_attribute_count_.increment(p) || appeared;
      appeared = prim_attribute_count_.increment_run(added.run_first, added.run_count) || appeared;
      if (appeared) ++existence_generation_;
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
      bool disappeared = false;
      for (uint64_t p : removed) disappeared = prim_attribute_count_.decrement(p) || disappeared;
      if (disappeared) ++existence_generation_;
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
    return error(KSTAGE_INVALID_ARGUMENT, "attributes is NULL but n is %llu",
                 (unsigned long long)n);
  for (uint64_t i = 0; i < n; ++i)
    KSTAGE_RETURN_NOT_OK(check_token(attributes[i], "attributes", i));
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

}  // namespace kstage::core
