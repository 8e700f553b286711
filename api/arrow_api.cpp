// SPDX-License-Identifier: Apache-2.0
// Arrow C Device Data Interface export of read groups (kstage/kstage_arrow.h).
#include <kstage/kstage_arrow.h>

#include "api/descriptors.hpp"
#include "api/guard.hpp"
#include "api/handles.hpp"
#include "core/arrow_export.hpp"

using namespace kstage;
using namespace kstage::capi;

extern "C" kstage_status_t kstage_group_export_arrow(kstage_stage_t stage, kstage_group_t group,
                                                     uint64_t flags, struct ArrowSchema* schema,
                                                     struct ArrowDeviceArray* array) {
  return with_stage("kstage::group_export_arrow", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(schema, "schema"));
    KSTAGE_RETURN_NOT_OK(need(array, "array"));
    std::shared_ptr<core::ReadGroup> g;
    KSTAGE_ASSIGN_OR_RETURN(g, lookup(s.groups, group, Kind::Group));
    core::Dictionary& dictionary = s.engine->dictionary();
    core::ArrowNames names;
    const std::string* attribute = dictionary.token(g->desc.attribute);
    names.attribute = attribute ? *attribute : std::to_string(g->desc.attribute);
    names.path = [&dictionary](uint64_t p) { return dictionary.path(p); };
    return core::export_group_arrow(*g, names, flags, schema, array);
  });
}

extern "C" kstage_status_t kstage_read_export_arrow(kstage_stage_t stage, kstage_query_t query,
                                                    const kstage_token_t* attributes, uint64_t n,
                                                    const kstage_read_desc_t* desc, uint64_t flags,
                                                    struct ArrowSchema* schema,
                                                    struct ArrowDeviceArray* array) {
  return with_stage("kstage::read_export_arrow", stage, [&](StageEntry& s) -> Status {
    KSTAGE_RETURN_NOT_OK(need(schema, "schema"));
    KSTAGE_RETURN_NOT_OK(need(array, "array"));
    if (n == 0 || attributes == nullptr)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "attributes is %s and n is %llu: a record batch needs at least one",
                   attributes ? "set" : "NULL", (unsigned long long)n);
    core::PrimList prims;
    KSTAGE_ASSIGN_OR_RETURN(prims, lookup(s.queries, query, Kind::Query));
    kstage_read_desc_t d = kstage_read_desc_init();
    if (desc) {
      KSTAGE_ASSIGN_OR_RETURN(d, read_descriptor(desc, "desc"));
    }
    // The batch's rows are the query's prims, compared with each group's list: its groups are
    // never handed out, so a progression's list is made whatever the caller asked.
    d.prims_as_progression = false;
    std::vector<std::unique_ptr<core::ReadGroup>> groups;
    KSTAGE_ASSIGN_OR_RETURN(groups, s.engine->read(prims, attributes, n, d));
    std::vector<const core::ReadGroup*> view;
    for (auto& g : groups) {
      g->publish_prims();
      view.push_back(g.get());
    }
    core::Dictionary& dictionary = s.engine->dictionary();
    std::vector<uint64_t> tokens(attributes, attributes + n);
    std::vector<std::string> names;
    for (uint64_t t : tokens) {
      const std::string* name = dictionary.token(t);
      names.push_back(name ? *name : std::to_string(t));
    }
    core::ArrowNames arrow_names;
    arrow_names.path = [&dictionary](uint64_t p) { return dictionary.path(p); };
    return core::export_read_arrow(*prims, view, tokens, names, arrow_names, flags, schema, array);
  });
}
