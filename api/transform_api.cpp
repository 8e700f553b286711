// SPDX-License-Identifier: Apache-2.0
// World transforms (kstage_compute_world_transforms): the descriptor read, the op handed out.
#include "api/descriptors.hpp"
#include "api/guard.hpp"
#include "api/handles.hpp"

using namespace kstage;
using namespace kstage::capi;

kstage_status_t kstage_compute_world_transforms(kstage_stage_t stage,
                                                const kstage_transform_desc_t* desc,
                                                uint64_t ordinal, kstage_op_t* op) {
  return with_stage("kstage::compute_world_transforms", stage, [&](StageEntry& s) -> Status {
    kstage_transform_desc_t d;
    KSTAGE_ASSIGN_OR_RETURN(d, read_descriptor(desc, "desc"));
    KSTAGE_RETURN_NOT_OK(need(op, "op"));
    auto slot = s.ops.reserve(Kind::Op);  // before the compute: nothing after it can fail
    std::shared_ptr<core::Op> o;
    KSTAGE_ASSIGN_OR_RETURN(o, s.engine->compute_world_transforms(d, ordinal));
    *op = slot.fill(std::move(o));
    return Status::OK();
  });
}
