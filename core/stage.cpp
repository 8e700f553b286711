// SPDX-License-Identifier: Apache-2.0
// Stage: lifecycle, deferred releases, and what every concern uses (tokens, floors, columns).
// The concerns have a file each: stage_queries.cpp, stage_mutations.cpp (writes, deletes and
// seals), stage_reads.cpp, stage_maps.cpp; the sessions that reads and maps hand out are objects
// of their own (read_session.cpp, map_session.cpp).
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
  ColumnTable::Map columns;
  {
    std::lock_guard lock(mutex_);
    pending.swap(pending_);
    columns_.swap(columns);
  }
}

void Op::add_work(Backend& b) {
  if (b.synchronous() || std::find(devices.begin(), devices.end(), &b) != devices.end()) return;
  devices.push_back(&b);
  if (CompletionPtr c = b.record()) work.push_back(std::move(c));
}

Status Stage::sync_op(const Op& op, const kstage_device_sync_t& consumer) {
  if (op.devices.empty())
    return check_host_sync(consumer, "consumer",
                           "the op has no device work (complete when the call that made it "
                           "returned)");
  if (consumer.event != 0 && op.devices.size() > 1)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "consumer.event 0x%llx: the op's work ran on %zu devices, and one event cannot "
                 "be recorded after all of them; pass consumer.stream (it waits for each)",
                 (unsigned long long)consumer.event, op.devices.size());
  // After all the work enqueued on each device so far, which includes the op's (as
  // sync_consumer). Under the lock: enqueued in call order with the stage's other work.
  std::lock_guard lock(mutex_);
  for (Backend* b : op.devices) KSTAGE_RETURN_NOT_OK(b->record_into(consumer, "consumer"));
  return Status::OK();
}

Status Stage::check_device(DLDevice device) {
  if (device.device_type == kDLCPU || device.device_type == kDLCUDAHost ||
      device.device_type == kDLROCMHost)
    return Status::OK();
  Backend* b = nullptr;
  KSTAGE_ASSIGN_OR_RETURN(b, backends_->for_device(device));
  // A fault of the device's context (sticky: another library's failed copy or kernel too)
  // surfaces at the stream synchronize of the stage's own stream.
  return b->finish();
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
    // `keep` is copied into the entry, not moved: if the push fails, this copy keeps the
    // memory alive until the wait below has returned.
    Deferred d{work, keep};  // NOLINT(performance-unnecessary-value-param)
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

Result<Column*> Stage::column_for(uint64_t attribute, const Schema& declared) const {
  const ColumnTable::Map::value_type* found = nullptr;
  KSTAGE_ASSIGN_OR_RETURN(
      found, kept_by(
                 columns_.of(attribute), declared,
                 [](const auto& entry) -> const Schema& { return entry.second->schema(); },
                 [&] { return token_name(attribute); }));
  return found ? found->second.get() : nullptr;
}

}  // namespace kstage::core
