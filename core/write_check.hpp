// SPDX-License-Identifier: Apache-2.0
// The device checks of one write call: each device index map's entries are checked on the
// device by the gather that reads it (Backend::checked_gather_resident), so a bad entry is
// known only once that work has run. The call's op reports it (kstage_wait, kstage_op_error),
// and a seal applies the call's writes only once every check passed: a failed call is never
// applied (kstage.h, "Device index maps and masks").
#pragma once

#include "core/backend.hpp"

#include <mutex>
#include <string>
#include <vector>

namespace kstage::core {

class WriteCheck {
 public:
  // `rows` and `rows_from`: the source row count the entries were checked against and where it
  // came from; `prefix` names the write in a batch call ("data[1] ('vel'): "), or is empty.
  // `map`: "index_map" or "index_map64".
  void add(std::shared_ptr<const IndexCheck> check, const char* map, uint64_t rows,
           const char* rows_from, std::string prefix) {
    entries_.push_back(Entry{std::move(check), map, rows, rows_from, std::move(prefix)});
  }
  bool empty() const { return entries_.empty(); }

  // Waits for every check (their work is the call's, on the stage's stream): OK, or
  // INVALID_ARGUMENT naming the first bad entry of the first write that has one, or
  // DEVICE_ERROR when the device failed. Worked out once; later calls return the same.
  Status status() const {
    std::lock_guard lock(mutex_);
    if (!known_) {
      outcome_ = evaluate();
      known_ = true;
    }
    return outcome_;
  }

 private:
  struct Entry {
    std::shared_ptr<const IndexCheck> check;
    const char* map;
    uint64_t rows;
    const char* rows_from;
    std::string prefix;
  };
  Status evaluate() const {
    for (const Entry& e : entries_) {
      Result<IndexCheck::Bad> bad = e.check->first_bad();
      if (!bad.ok()) return Status(bad.status().code(), e.prefix + bad.status().message());
      if (bad.value().position == IndexCheck::kNone) continue;
      return error(KSTAGE_INVALID_ARGUMENT,
                   "%s%s[%llu] = %lld references a source row outside the transported row "
                   "count %llu (%s); checked on the device: the write was not applied",
                   e.prefix.c_str(), e.map, (unsigned long long)bad.value().position,
                   (long long)bad.value().value, (unsigned long long)e.rows, e.rows_from);
    }
    return Status::OK();
  }

  std::vector<Entry> entries_;
  mutable std::mutex mutex_;
  mutable bool known_ = false;
  mutable Status outcome_;
};

}  // namespace kstage::core
