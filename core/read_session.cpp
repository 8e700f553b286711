// SPDX-License-Identifier: Apache-2.0
// Read sessions: handing out the groups a read built. Building them is the stage's
// (stage_reads.cpp).
#include "core/read_session.hpp"

namespace kstage::core {

std::unique_ptr<ReadGroup> ReadSession::next() {
  std::lock_guard lock(mutex_);
  if (groups_.empty()) return nullptr;
  groups_.front()->publish_prims();  // first: may run out of memory, and then nothing changed
  std::unique_ptr<ReadGroup> g = std::move(groups_.front());
  groups_.pop_front();
  return g;
}

}  // namespace kstage::core
