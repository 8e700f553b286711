// SPDX-License-Identifier: Apache-2.0
// Clone (kstage_clone, kstage_clone_range): the targets read, the op handed out. The engine
// checks and clones (core/stage_clone.cpp).
#include "api/guard.hpp"
#include "api/handles.hpp"

using namespace kstage;
using namespace kstage::capi;

namespace {

Status clone_to(StageEntry& s, kstage_path_t source, const core::PrimList& targets,
                uint64_t ordinal, kstage_op_t* op) {
  auto slot = s.ops.reserve(Kind::Op);  // before the clone: nothing after it can fail
  std::shared_ptr<core::Op> o;
  KSTAGE_ASSIGN_OR_RETURN(o, s.engine->clone(source, targets, ordinal));
  *op = slot.fill(std::move(o));
  return Status::OK();
}

}  // namespace

extern "C" {

kstage_status_t kstage_clone(kstage_stage_t stage, kstage_path_t source,
                             const kstage_path_t* targets, uint64_t n, uint64_t ordinal,
                             kstage_op_t* op) {
  return with_stage("kstage::clone", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(op, "op"));
    if (n == 0) return error(KSTAGE_INVALID_ARGUMENT, "no targets to clone to (n = 0)");
    KSTAGE_RETURN_NOT_OK(need(targets, "targets"));
    auto list = std::make_shared<const core::PrimSeq>(std::vector<uint64_t>(targets, targets + n));
    return clone_to(s, source, list, ordinal, op);
  });
}

kstage_status_t kstage_clone_range(kstage_stage_t stage, kstage_path_t source, kstage_path_t first,
                                   uint64_t start, uint64_t count, uint64_t ordinal,
                                   kstage_op_t* op) {
  return with_stage("kstage::clone_range", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(op, "op"));
    core::PrimList targets;
    KSTAGE_ASSIGN_OR_RETURN(targets, s.engine->query_range(first, start, count, 1));
    return clone_to(s, source, targets, ordinal, op);
  });
}

}  // extern "C"
