// SPDX-License-Identifier: Apache-2.0
// Read sessions: the groups a read built when it opened (Stage::open_read), handed out one at
// a time. As an ArrowArrayStream's producer owns get_next, the session owns next(); the C API
// only names the session and each group it hands out (api/read_api.cpp).
#pragma once

#include "core/stage.hpp"

#include <deque>
#include <mutex>

namespace kstage::core {

// Safe from several threads. Freed with its last holder, and with it the groups never handed
// out (a group handed out lives on with its own holder).
class ReadSession {
 public:
  // The next group, its prims published (ReadGroup::publish_prims); null once every group was
  // handed out. Never waits: data that lands on the host was complete when the read opened,
  // device data carries its event in desc.data.device_sync. Making a range query's prims array
  // may run out of memory (std::bad_alloc): then the group stays first and nothing changed.
  std::unique_ptr<ReadGroup> next();

 private:
  friend class Stage;  // Stage::open_read makes the session, then builds the groups into it

  std::mutex mutex_;
  std::deque<std::unique_ptr<ReadGroup>> groups_;
};

}  // namespace kstage::core
