// SPDX-License-Identifier: Apache-2.0
#include "api/handles.hpp"

#include <atomic>

namespace kstage::capi {
namespace {

std::mutex g_stages_mutex;
std::unordered_map<uint64_t, std::shared_ptr<StageEntry>>& stages() {
  static auto* s = new std::unordered_map<uint64_t, std::shared_ptr<StageEntry>>();
  return *s;  // never destroyed: destroy_all_stages_at_exit empties it before Kokkos::finalize
}

}  // namespace

uint64_t new_handle(Kind kind) {
  static std::atomic<uint64_t> counter{0};
  return (uint64_t(kind) << 56) | (counter.fetch_add(1, std::memory_order_relaxed) + 1);
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Stage: return "stage";
    case Kind::PathList: return "path list";
    case Kind::Query: return "query";
    case Kind::Read: return "read";
    case Kind::Group: return "group";
    case Kind::Op: return "op";
    case Kind::Map: return "map";
    case Kind::MapGroup: return "map group";
    case Kind::Hierarchy: return "hierarchy";
  }
  return "unknown";
}

Result<std::shared_ptr<StageEntry>> find_stage(kstage_stage_t h) {
  std::lock_guard lock(g_stages_mutex);
  auto it = stages().find(h);
  if (it == stages().end())
    return error(KSTAGE_INVALID_HANDLE, "stage handle %llu is not a live stage",
                 (unsigned long long)h);
  return it->second;
}

uint64_t register_stage(std::shared_ptr<StageEntry> entry) {
  const uint64_t h = new_handle(Kind::Stage);
  std::lock_guard lock(g_stages_mutex);
  stages().emplace(h, std::move(entry));
  return h;
}

std::shared_ptr<StageEntry> unregister_stage(kstage_stage_t h) {
  std::lock_guard lock(g_stages_mutex);
  auto it = stages().find(h);
  if (it == stages().end()) return nullptr;
  auto e = std::move(it->second);
  stages().erase(it);
  return e;
}

void destroy_all_stages_at_exit() {
  std::unordered_map<uint64_t, std::shared_ptr<StageEntry>> doomed;
  {
    std::lock_guard lock(g_stages_mutex);
    doomed.swap(stages());
  }
}

}  // namespace kstage::capi
