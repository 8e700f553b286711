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
  for (const auto& [column_key, col] : columns_) {
    const uint64_t attr = column_key.first;
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

Status Stage::check_schema_conflicts(StagedRows& rows, uint64_t attribute, const Column* target,
                                     const Schema& schema, bool replaces, Key key) {
  const ColumnTable::Range columns = columns_.of(attribute);
  // With no other column of the name, every target holds it in this one or not at all.
  if (columns.empty() || (target && !columns.several())) return Status::OK();
  KSTAGE_RETURN_NOT_OK(resolve_selection(rows));
  const size_t n = rows.n;
  if (n == 0) return Status::OK();
  const uint64_t floor = floor_of(attribute);
  for (auto& [k, m] : pending_)
    if (m.ordinal > floor && m.kind == Mutation::Kind::Write && m.targets(attribute))
      KSTAGE_RETURN_NOT_OK(resolve_selection(m.rows));
  std::unordered_map<uint64_t, size_t> index;
  index.reserve(n);
  for (size_t i = 0; i < n; ++i) index.emplace(rows.prim(i), i);
  // Which column holds each target, replayed through the ledger with this write at `key`
  // (`self`: this write's column, which may not exist yet).
  const void* self = target ? static_cast<const void*>(target) : static_cast<const void*>(&rows);
  std::vector<const void*> holder(n, nullptr);
  std::vector<uint64_t> since(n, 0);  // the ordinal of the holder's write (0: sealed)
  for (const auto& [k, c] : columns)
    for (size_t i = 0; i < n; ++i)
      if (c->has(rows.prim(i))) holder[i] = c.get();
  const uint32_t* subset = rows.subset_index();
  auto held_schema = [&](size_t i) -> const Schema& {
    for (const auto& [k, c] : columns)
      if (c.get() == holder[i]) return c->schema();
    return schema;  // (not reached: a holder other than `self` is one of the columns)
  };
  auto visit = [&](const Mutation& m, auto&& fn) {
    for (size_t j = 0; j < m.rows.n; ++j) {
      auto hit = index.find(m.rows.prim(j));
      if (hit != index.end()) fn(hit->second);
    }
  };
  bool placed = false;
  auto place = [&]() -> Status {
    placed = true;
    for (size_t i = 0; i < n; ++i) {
      if (!replaces && holder[i] != nullptr && holder[i] != self) {
        const Schema& held = held_schema(i);
        return error(
            KSTAGE_INVALID_ARGUMENT,
            "prim '%s' (element %zu) holds '%s' as %s%s: %s; a prim holds one value "
            "per name (delete it first, or write with KSTAGE_ATTRIBUTE_MODE_FORCE)",
            path_name(rows.prim(i)).c_str(), subset ? size_t(subset[i]) : i,
            token_name(attribute).c_str(), schema_string(held).c_str(),
            since[i] ? format(" (the pending write at ordinal %llu)", (unsigned long long)since[i])
                           .c_str()
                     : "",
            schema_mismatch(held, schema).c_str());
      }
      holder[i] = self;
    }
    return Status::OK();
  };
  for (const auto& entry : pending_) {
    const Mutation& m = entry.second;  // (a reference, not a binding: the lambdas capture it)
    if (m.ordinal <= floor || !m.targets(attribute)) continue;
    if (!placed && !(entry.first < key)) KSTAGE_RETURN_NOT_OK(place());
    if (m.kind != Mutation::Kind::Write) {
      visit(m, [&](size_t i) { holder[i] = nullptr; });
      continue;
    }
    Status conflict;
    visit(m, [&](size_t i) {
      // A REJECT write after this one, finding this write's value in another schema.
      if (placed && !m.replaces && holder[i] == self && m.column != self && conflict.ok())
        conflict = error(KSTAGE_INVALID_ARGUMENT,
                         "prim '%s' (element %zu): the pending write of '%s' as %s at ordinal "
                         "%llu (KSTAGE_ATTRIBUTE_MODE_REJECT) would then find this write's %s; "
                         "a prim holds one value per name",
                         path_name(rows.prim(i)).c_str(), subset ? size_t(subset[i]) : i,
                         token_name(attribute).c_str(), schema_string(m.column->schema()).c_str(),
                         (unsigned long long)m.ordinal, schema_string(schema).c_str());
      holder[i] = m.column;
      since[i] = m.ordinal;
    });
    KSTAGE_RETURN_NOT_OK(conflict);
  }
  return placed ? Status::OK() : place();
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
  for (uint64_t i = 0; i < n; ++i)
    if (data[i].attribute_mode > KSTAGE_ATTRIBUTE_MODE_FORCE)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "data[%llu].attribute_mode %u is not a kstage_attribute_mode_t",
                   (unsigned long long)i, unsigned(data[i].attribute_mode));
  reap_deferred();  // what finished device work no longer needs

  // Phase 1 (locked): floors, and the columns (schemas) each write may go to.
  std::vector<std::vector<std::pair<Schema, Backend*>>> existing(n);
  {
    std::lock_guard lock(mutex_);
    for (uint64_t i = 0; i < n; ++i) {
      KSTAGE_RETURN_NOT_OK(check_floor(attributes[i], ordinal));
      for (const auto& [key, c] : columns_.of(attributes[i]))
        existing[i].emplace_back(c->schema(), &c->backend());
    }
  }

  // Phase 2 (unlocked): validate the payloads and copy them in.
  std::vector<StagedWrite> staged(n);
  for (uint64_t i = 0; i < n; ++i) {
    WriteRequest req;
    req.data = &data[i];
    req.attribute_name = token_name(attributes[i]);
    req.prims = prims;
    req.existing = std::move(existing[i]);
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
    op->add_work(*w.backend);
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
  // The column each write goes to, as it stands now (another thread may have made it since
  // phase 1: then on the staged device only).
  std::vector<Column*> target(n, nullptr);
  for (uint64_t i = 0; i < n; ++i) {
    if (Status st = check_floor(attributes[i], ordinal); !st.ok()) return reject(st);
    target[i] = columns_.find(attributes[i], staged[i].schema);
    if (target[i] && &target[i]->backend() != staged[i].backend)
      return reject(error(
          KSTAGE_INVALID_ARGUMENT, "column '%s' (%s) was created concurrently on another device",
          token_name(attributes[i]).c_str(), schema_string(staged[i].schema).c_str()));
  }
  const Key key{ordinal, next_seq_};
  for (uint64_t i = 0; i < n; ++i) {
    Status st = check_prim_mode(staged[i].rows, mode, key, target[i]);
    if (st.ok())
      st = check_schema_conflicts(staged[i].rows, attributes[i], target[i], staged[i].schema,
                                  data[i].attribute_mode == KSTAGE_ATTRIBUTE_MODE_FORCE, key);
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
    for (uint64_t i = 0; i < n; ++i) {
      Mutation& m = add_write(batch, attributes[i], target[i], staged[i].schema, staged[i].backend,
                              ordinal, data[i].attribute_mode == KSTAGE_ATTRIBUTE_MODE_FORCE);
      m.rows = std::move(staged[i].rows);
      m.rows.index_check.reset();  // the call's WriteCheck holds it
      m.check = check;
    }
  } catch (const std::bad_alloc&) {
    return reject(out_of_memory("no host memory to enqueue the write"));
  }
  enqueue(batch);
  return op;
}

Stage::Mutation& Stage::add_write(WriteBatch& b, uint64_t attribute, Column* column,
                                  const Schema& schema, Backend* backend, uint64_t ordinal,
                                  bool replaces) {
  bool created = false;
  if (!column) {
    for (const auto& [key, c] : b.columns)
      if (key.first == attribute && same_schema(c->schema(), schema)) column = c.get();
    if (!column) {
      auto made = std::make_unique<Column>(attribute, schema, backend);
      column = made.get();
      b.columns.emplace(columns_.next_key(attribute, b.columns), std::move(made));
    }
    created = true;
  }
  Mutation m;
  m.kind = Mutation::Kind::Write;
  m.ordinal = ordinal;
  m.attributes = {attribute};
  m.column = column;
  m.replaces = replaces;
  m.created_column = created;
  return b.writes.emplace(Key{ordinal, next_seq_ + b.writes.size()}, std::move(m)).first->second;
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
    for (const auto& [key, col] : columns_) {
      const uint64_t attr = key.first;
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

Status Stage::seal_write(Mutation& m, uint64_t attribute) {
  NewPrims added;
  // The counts of the new prims change before the rows move (a list's, all or nothing, while
  // its prims are in cache; a failed write takes them back: their bytes exist, so that cannot
  // fail), or their memory is made then (a run's, counted after): counting them cannot fail
  // after the column took them (a retry would find them present).
  bool appeared = false;
  KSTAGE_RETURN_NOT_OK(m.column->apply_write(
      m.rows, m.ordinal, added,
      [&](const NewPrims& fresh) {
        prim_attribute_count_.prepare_run(fresh.run_first, fresh.run_count);
        appeared =
            prim_attribute_count_.increment_each([&](const auto& f) { fresh.for_each_batch(f); });
      },
      [&](const NewPrims& fresh) {
        fresh.for_each([&](uint64_t p) { prim_attribute_count_.decrement(p); });
      }));
  appeared = prim_attribute_count_.increment_run(added.run_first, added.run_count) || appeared;
  if (appeared) ++existence_generation_;
  const ColumnTable::Range columns = columns_.of(attribute);
  if (!columns.several()) return Status::OK();
  // The targets leave the name's other columns at this ordinal (a replaced schema: the ledger
  // let only FORCE writes, or writes ordered after them, find a target in another column).
  // After the write, so that no target's count passes through 0.
  PrimSeq selected;
  const PrimSeq* targets = m.rows.prims.get();
  std::vector<uint64_t> removed;
  try {
    if (m.rows.subset) {
      std::vector<uint64_t> ids(m.rows.n);
      for (size_t j = 0; j < m.rows.n; ++j) ids[j] = m.rows.prim(j);
      selected = PrimSeq(std::move(ids));
      targets = &selected;
    }
    for (const auto& [key, c] : columns) {
      if (c.get() == m.column || c->live_rows() == 0) continue;
      prim_attribute_count_.prepare_decrements(*targets, m.rows.n);
      removed.clear();
      c->apply_delete(*targets, m.rows.n, m.ordinal, removed);  // all or nothing
      bool disappeared = false;
      for (uint64_t p : removed) disappeared = prim_attribute_count_.decrement(p) || disappeared;
      if (disappeared) ++existence_generation_;
    }
  } catch (const std::bad_alloc&) {
    return out_of_memory("no host memory to move %zu prims' '%s' to another schema", m.rows.n,
                         token_name(attribute).c_str());
  }
  return Status::OK();
}

Status Stage::seal_attribute(uint64_t attribute, uint64_t from, uint64_t to, uint64_t& reached,
                             std::vector<Column*>& skipped_creators) {
  reached = to;
  std::vector<uint64_t> removed;
  for (auto it = pending_.upper_bound(Key{from, UINT64_MAX});
       it != pending_.end() && it->first.first <= to; ++it) {
    Mutation& m = it->second;
    if (!m.targets(attribute)) continue;
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
          if (m.created_column) skipped_creators.push_back(m.column);
          continue;
        }
        if (!checked.ok()) {
          reached = m.ordinal - 1;
          return checked;
        }
      }
      if (Status st = seal_write(m, attribute); !st.ok()) {
        // Stop below this ordinal; mutations already applied at it are
        // re-applied on the next seal, which gives the same result.
        reached = m.ordinal - 1;
        return st;
      }
      continue;
    }
    // A delete: from every column of the name (a prim is in one of them).
    for (const auto& [key, c] : columns_.of(attribute)) {
      if (c->live_rows() == 0) continue;
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
        c->apply_delete(*m.rows.prims, m.rows.n, m.ordinal, removed);  // all or nothing
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
    for (const auto& [key, col] : columns_)  // (a name's columns are adjacent)
      if (!floors_.count(key.first) && (targets.empty() || targets.back() != key.first))
        targets.push_back(key.first);
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
    if (columns_.contains(attr)) {
      std::vector<Column*> skipped;
      Status st = seal_attribute(attr, from, ordinal, reached, skipped);
      if (!st.ok() && result.ok()) result = st;
      for (const auto& [key, c] : columns_.of(attr)) c->take_replaced(replaced);
      // The write that made a column was refused by its device check: unless something else
      // writes it later, the column goes too, as if that call had been refused.
      std::sort(skipped.begin(), skipped.end());
      skipped.erase(std::unique(skipped.begin(), skipped.end()), skipped.end());
      for (Column* c : skipped)
        if (c->row_space() == 0 && !c->has_tombstones() &&
            std::none_of(pending_.begin(), pending_.end(), [&](const auto& p) {
              return p.second.ordinal > reached && p.second.column == c;
            }))
          columns_.erase(c);
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
