// SPDX-License-Identifier: Apache-2.0
// Handle tables. Every handle is a process-wide unique uint64 whose top byte
// says what kind of object it names, so a stale handle, a handle of another
// stage, or a query passed as a read can never alias a live object: each
// gives KSTAGE_INVALID_HANDLE.
#pragma once

#include "core/map_session.hpp"
#include "core/read_session.hpp"
#include "core/stage.hpp"

#include <memory>
#include <mutex>
#include <unordered_map>

namespace kstage::capi {

enum class Kind : uint64_t {
  Stage = 1,
  PathList,
  Query,
  Read,
  Group,
  Op,
  Map,
  MapGroup,
  Hierarchy
};

uint64_t new_handle(Kind kind);
const char* kind_name(Kind kind);

template <class T>
class HandleTable {
 public:
  uint64_t add(Kind kind, std::shared_ptr<T> value) {
    const uint64_t h = new_handle(kind);
    std::lock_guard lock(mutex_);
    items_.emplace(h, std::move(value));
    return h;
  }
  // A handle whose entry is made before the work it will name (a write that is enqueued must
  // not then fail to get its op's handle): fill() cannot fail, and a slot never filled is
  // removed. Until filled the handle is not live.
  class Slot {
   public:
    Slot(HandleTable& table, uint64_t h) : table_(&table), h_(h) {}
    Slot(HandleTable& table, Kind kind) : Slot(table, table.add(kind, nullptr)) {}
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    ~Slot() {
      if (table_) table_->take(h_);
    }
    uint64_t fill(std::shared_ptr<T> value) noexcept {
      {
        std::lock_guard lock(table_->mutex_);
        auto it = table_->items_.find(h_);
        if (it != table_->items_.end())
          it->second = std::move(value);  // (gone: the stage was destroyed)
      }
      table_ = nullptr;
      return h_;
    }

   private:
    HandleTable* table_;
    uint64_t h_;
  };
  Slot reserve(Kind kind) { return Slot(*this, kind); }
  std::shared_ptr<T> find(uint64_t h) const {
    std::lock_guard lock(mutex_);
    auto it = items_.find(h);
    return it == items_.end() ? nullptr : it->second;
  }
  // The removed value (null if `h` was not here).
  std::shared_ptr<T> take(uint64_t h) {
    std::lock_guard lock(mutex_);
    auto it = items_.find(h);
    if (it == items_.end()) return nullptr;
    auto v = std::move(it->second);
    items_.erase(it);
    return v;
  }
  void clear() {
    std::unordered_map<uint64_t, std::shared_ptr<T>> doomed;
    {
      std::lock_guard lock(mutex_);
      doomed.swap(items_);
    }
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, std::shared_ptr<T>> items_;
};

struct PathList {
  std::mutex mutex;
  uint64_t refs = 1;
  std::shared_ptr<const std::vector<uint64_t>> paths;
};

// A stage and every handle it issued; destroying it frees them all.
struct StageEntry {
  std::unique_ptr<core::Stage> engine;
  HandleTable<PathList> path_lists;
  HandleTable<const core::PrimSeq> queries;
  HandleTable<core::ReadSession> reads;
  HandleTable<core::ReadGroup> groups;
  HandleTable<core::Op> ops;
  HandleTable<core::MapSession> maps;
  HandleTable<const core::HierarchyAnswer> hierarchies;

  ~StageEntry() {
    // Groups, reads and maps hold buffers; drop them before the engine.
    maps.clear();
    groups.clear();
    reads.clear();
    engine.reset();
  }
};

// The live stage behind `h`, or INVALID_HANDLE.
Result<std::shared_ptr<StageEntry>> find_stage(kstage_stage_t h);
uint64_t register_stage(std::shared_ptr<StageEntry> entry);
std::shared_ptr<StageEntry> unregister_stage(kstage_stage_t h);

// Looks `h` up in `table`; INVALID_HANDLE naming the kind otherwise.
template <class T>
Result<std::shared_ptr<T>> lookup(const HandleTable<T>& table, uint64_t h, Kind kind) {
  auto v = table.find(h);
  if (!v)
    return error(KSTAGE_INVALID_HANDLE,
                 "%s handle %llu is not live on this stage (unknown, "
                 "released, or of another kind or stage)",
                 kind_name(kind), (unsigned long long)h);
  return v;
}

// Drops handle `h` from `table` (the release calls of groups, reads, queries and ops): the
// object goes with its last holder. INVALID_HANDLE naming the kind if `h` was not there.
template <class T>
Status release(HandleTable<T>& table, uint64_t h, Kind kind) {
  if (!table.take(h))
    return error(KSTAGE_INVALID_HANDLE, "%s handle %llu is not live (double release?)",
                 kind_name(kind), (unsigned long long)h);
  return Status::OK();
}

}  // namespace kstage::capi
