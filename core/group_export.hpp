// SPDX-License-Identifier: Apache-2.0
// DLPack export of a read group's tensors. The export holds the group's
// snapshot buffer, so the data outlives kstage_release_group and any later
// seal until the consumer calls the deleter.
#pragma once

#include "core/stage.hpp"

namespace kstage::core {

Result<DLManagedTensorVersioned*> export_group_versioned(const ReadGroup& group, uint64_t index,
                                                         uint64_t flags);
Result<DLManagedTensor*> export_group_legacy(const ReadGroup& group, uint64_t index, uint64_t flags);

}  // namespace kstage::core
