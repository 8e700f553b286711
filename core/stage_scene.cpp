// SPDX-License-Identifier: Apache-2.0
// Stage: the scene -- hierarchy answers (kstage_query_hierarchy) and relational filters
// (kstage_query_filter_ex) over the sealed state. The hierarchy index itself is
// core/scene_hierarchy.hpp; this file caches it and answers with it.
#include "core/stage.hpp"

#include "core/backend.hpp"

#include <algorithm>
#include <cstring>

namespace kstage::core {
namespace {

// What a predicate tests: an ordinary attribute (HAS only) or one of kstage.h's reserved names.
enum class Subject { Attribute, Path, Parent, Children, PrimType, Schemas };

Subject subject_of(const std::string* name) {
  if (name == nullptr) return Subject::Attribute;
  if (*name == KSTAGE_PATH_ATTRIBUTE) return Subject::Path;
  if (*name == KSTAGE_PARENT_ATTRIBUTE) return Subject::Parent;
  if (*name == KSTAGE_CHILDREN_ATTRIBUTE) return Subject::Children;
  if (*name == KSTAGE_PRIM_TYPE) return Subject::PrimType;
  if (*name == KSTAGE_APPLIED_SCHEMAS) return Subject::Schemas;
  return Subject::Attribute;
}

const char* op_name(kstage_filter_op_t op) {
  switch (op) {
    case KSTAGE_FILTER_HAS: return "HAS";
    case KSTAGE_FILTER_IN: return "IN";
    case KSTAGE_FILTER_CONTAINS: return "CONTAINS";
    case KSTAGE_FILTER_PREFIX: return "PREFIX";
    case KSTAGE_FILTER_LT: return "LT";
    case KSTAGE_FILTER_LE: return "LE";
    case KSTAGE_FILTER_GT: return "GT";
    case KSTAGE_FILTER_GE: return "GE";
    default: return "?";
  }
}

// The operator kstage.h supports on a reserved name (HAS aside, which every name takes).
kstage_filter_op_t supported_op(Subject s, kstage_filter_op_t op) {
  switch (s) {
    case Subject::Path: return op == KSTAGE_FILTER_PREFIX ? op : KSTAGE_FILTER_IN;
    case Subject::Parent: return KSTAGE_FILTER_IN;
    case Subject::Children: return KSTAGE_FILTER_CONTAINS;
    case Subject::PrimType: return KSTAGE_FILTER_IN;
    case Subject::Schemas: return KSTAGE_FILTER_CONTAINS;
    case Subject::Attribute: break;
  }
  return KSTAGE_FILTER_HAS;
}

// A predicate once checked: its values sorted and distinct (looked up by binary search).
struct Predicate {
  kstage_filter_op_t op = KSTAGE_FILTER_HAS;
  Subject subject = Subject::Attribute;
  uint64_t attribute = 0;
  std::vector<uint64_t> values;
};

// Checks predicate i of the caller's filter against kstage.h's matrix; every refusal names
// filter.predicates[i], its operator and its attribute.
Result<Predicate> check_predicate(const Dictionary& d, const kstage_predicate_t& p, uint64_t i) {
  const auto index = (unsigned long long)i;
  if (p.reserved != 0)
    return error(KSTAGE_INVALID_ARGUMENT, "filter.predicates[%llu].reserved is %u; it must be 0",
                 index, unsigned(p.reserved));
  if (p.op < KSTAGE_FILTER_HAS || p.op > KSTAGE_FILTER_GE)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "filter.predicates[%llu].op = %d is not a kstage_filter_op_t (HAS 0 .. GE 7)",
                 index, int(p.op));
  const std::string* name = d.token(p.attribute);
  if (name == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "filter.predicates[%llu] (%s): attribute = %llu is not a token of this stage",
                 index, op_name(p.op), (unsigned long long)p.attribute);
  const char* op = op_name(p.op);
  if (p.value_count > 0 && p.values == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "filter.predicates[%llu] (%s on '%s'): values is NULL but value_count is %llu",
                 index, op, name->c_str(), (unsigned long long)p.value_count);
  Predicate out;
  out.op = p.op;
  out.subject = subject_of(name);
  out.attribute = p.attribute;
  if (p.op >= KSTAGE_FILTER_LT)
    return error(KSTAGE_NOT_SUPPORTED,
                 "filter.predicates[%llu]: %s on '%s' is not supported (comparisons LT, LE, GT, "
                 "GE are reserved)",
                 index, op, name->c_str());
  if (p.op == KSTAGE_FILTER_HAS) {
    if (p.value_count != 0)
      return error(KSTAGE_INVALID_ARGUMENT,
                   "filter.predicates[%llu] (HAS on '%s'): HAS takes no values, but value_count "
                   "is %llu",
                   index, name->c_str(), (unsigned long long)p.value_count);
    return out;
  }
  if (out.subject == Subject::Attribute || supported_op(out.subject, p.op) != p.op)
    return error(KSTAGE_NOT_SUPPORTED,
                 "filter.predicates[%llu]: %s on '%s' is not supported (besides HAS on any "
                 "attribute: '%s' IN or PREFIX, '%s' IN, '%s' CONTAINS, '%s' IN, '%s' CONTAINS)",
                 index, op, name->c_str(), KSTAGE_PATH_ATTRIBUTE, KSTAGE_PARENT_ATTRIBUTE,
                 KSTAGE_CHILDREN_ATTRIBUTE, KSTAGE_PRIM_TYPE, KSTAGE_APPLIED_SCHEMAS);
  if (p.op == KSTAGE_FILTER_PREFIX && p.value_count != 1)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "filter.predicates[%llu] (PREFIX on '%s'): PREFIX takes exactly one path, but "
                 "value_count is %llu",
                 index, name->c_str(), (unsigned long long)p.value_count);
  if (p.value_count == 0)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "filter.predicates[%llu] (%s on '%s'): value_count is 0; %s takes at least one "
                 "value",
                 index, op, name->c_str(), op);
  const bool tokens = out.subject == Subject::PrimType || out.subject == Subject::Schemas;
  for (uint64_t j = 0; j < p.value_count; ++j)
    if (tokens ? !d.is_token(p.values[j]) : !d.is_path(p.values[j]))
      return error(KSTAGE_INVALID_ARGUMENT,
                   "filter.predicates[%llu] (%s on '%s'): values[%llu] = %llu is not a %s of "
                   "this stage",
                   index, op, name->c_str(), (unsigned long long)j, (unsigned long long)p.values[j],
                   tokens ? "token" : "path");
  out.values.assign(p.values, p.values + p.value_count);
  std::sort(out.values.begin(), out.values.end());
  out.values.erase(std::unique(out.values.begin(), out.values.end()), out.values.end());
  return out;
}

bool holds(const std::vector<uint64_t>& sorted, uint64_t v) {
  return std::binary_search(sorted.begin(), sorted.end(), v);
}

// The sealed values of column `c` as host words: a device column's copied through its backend
// (the host never reads device memory); `bytes` from its start. Requires the stage's mutex (no
// seal changes them meanwhile).
Result<std::vector<uint64_t>> host_words(Backend& host, const Column& c, size_t bytes) {
  std::vector<uint64_t> words;
  if (!c.values() || bytes == 0) return words;
  bytes = std::min(bytes, c.values()->size()) / sizeof(uint64_t) * sizeof(uint64_t);
  words.resize(bytes / sizeof(uint64_t));
  KSTAGE_RETURN_NOT_OK(transfer(host, reinterpret_cast<std::byte*>(words.data()), c.backend(),
                                c.values()->data(), bytes));
  return words;
}

// A predicate's test of one prim, with what it needs made once.
struct Test {
  const Predicate* p = nullptr;
  std::vector<const Column*> holders;  // HAS on an attribute: its columns (one per schema)
  const Column* column = nullptr;  // the prim-type / schemas column (one schema: reserved names)
  std::vector<uint64_t> words;     // that column's sealed values (prim type, schemas)
  uint64_t only_parent = 0;        // usd-children CONTAINS: the one prim that can match
};

}  // namespace

std::shared_ptr<const SceneHierarchy> Stage::hierarchy_locked() {
  if (!hierarchy_ || hierarchy_generation_ != existence_generation_) {
    hierarchy_ = SceneHierarchy::build(dictionary_, prim_attribute_count_);
    hierarchy_generation_ = existence_generation_;
  }
  return hierarchy_;
}

Result<std::shared_ptr<const HierarchyAnswer>> Stage::query_hierarchy(const PrimSeq& prims,
                                                                      kstage_relation_t relation) {
  if (relation < KSTAGE_RELATION_PARENT || relation > KSTAGE_RELATION_SIBLINGS)
    return error(KSTAGE_INVALID_ARGUMENT,
                 "relation %d is not a kstage_relation_t (PARENT 0, CHILDREN 1, SIBLINGS 2)",
                 int(relation));
  std::shared_ptr<const SceneHierarchy> h;
  {
    std::lock_guard lock(mutex_);
    h = hierarchy_locked();
  }
  // The index is immutable: answered without the lock.
  auto out = std::make_shared<HierarchyAnswer>();
  out->items.reserve(prims.size());
  for (uint64_t p : prims) h->answer(p, relation, *out);
  return std::shared_ptr<const HierarchyAnswer>(std::move(out));
}

Result<PrimList> Stage::query_filter_ex(const kstage_filter_ex_t& f) {
  if (f.predicate_count > 0 && f.predicates == nullptr)
    return error(KSTAGE_INVALID_ARGUMENT, "filter.predicates is NULL but predicate_count is %llu",
                 (unsigned long long)f.predicate_count);
  std::vector<Predicate> preds;
  preds.reserve(f.predicate_count);
  bool relational = false;
  for (uint64_t i = 0; i < f.predicate_count; ++i) {
    Predicate p;
    KSTAGE_ASSIGN_OR_RETURN(p, check_predicate(dictionary_, f.predicates[i], i));
    relational = relational || p.subject == Subject::Parent || p.subject == Subject::Children;
    preds.push_back(std::move(p));
  }

  std::lock_guard lock(mutex_);
  const std::shared_ptr<const SceneHierarchy> h = relational ? hierarchy_locked() : nullptr;
  auto exists = [&](uint64_t p) { return prim_attribute_count_.get(p) != 0; };
  auto none = [] { return PrimList(std::make_shared<const PrimSeq>()); };

  // Each predicate's test, with what it reads made once; a predicate nothing can meet (an
  // attribute without a column) answers at once.
  std::vector<Test> tests(preds.size());
  for (size_t i = 0; i < preds.size(); ++i) {
    Test& t = tests[i];
    t.p = &preds[i];
    const bool column_test = t.p->subject == Subject::Attribute || t.p->op == KSTAGE_FILTER_HAS ||
                             t.p->subject == Subject::PrimType || t.p->subject == Subject::Schemas;
    const bool derived_has = t.p->op == KSTAGE_FILTER_HAS &&
                             (t.p->subject == Subject::Path || t.p->subject == Subject::Parent ||
                              t.p->subject == Subject::Children);
    if (column_test && !derived_has) {
      for (const auto& [key, c] : columns_.of(t.p->attribute)) t.holders.push_back(c.get());
      if (t.holders.empty()) return none();  // nobody holds it
      t.column = t.holders.front();
      if (t.p->op != KSTAGE_FILTER_HAS) {
        const size_t bytes = t.p->subject == Subject::PrimType
                                 ? t.column->row_space() * sizeof(uint64_t)
                                 : (t.column->values() ? t.column->values()->size() : 0);
        KSTAGE_ASSIGN_OR_RETURN(t.words, host_words(backends_->host(), *t.column, bytes));
      }
    }
    if (t.p->subject == Subject::Children && t.p->op == KSTAGE_FILTER_CONTAINS) {
      // The parent of every value, if they share one: the only prim that can match.
      t.only_parent = h->parent(t.p->values[0]);
      for (uint64_t v : t.p->values)
        if (h->parent(v) != t.only_parent) t.only_parent = 0;
      if (t.only_parent == 0) return none();
    }
  }
  auto passes = [&](const Test& t, uint64_t prim) {
    const Predicate& p = *t.p;
    if (p.op == KSTAGE_FILTER_HAS) {
      switch (p.subject) {
        case Subject::Path: return true;
        case Subject::Parent: return h->parent(prim) != 0;
        case Subject::Children: return h->has_children(prim);
        default:
          return std::any_of(t.holders.begin(), t.holders.end(),
                             [prim](const Column* c) { return c->has(prim); });
      }
    }
    switch (p.subject) {
      case Subject::Path: return p.op == KSTAGE_FILTER_PREFIX || holds(p.values, prim);
      case Subject::Parent: return holds(p.values, h->parent(prim));
      case Subject::Children: return prim == t.only_parent;
      case Subject::PrimType: {
        const uint32_t row = t.column->row_of(prim);
        return row != Column::kNoRow && row < t.words.size() && holds(p.values, t.words[row]);
      }
      case Subject::Schemas: {
        const uint32_t row = t.column->row_of(prim);
        if (row == Column::kNoRow) return false;
        const size_t at = t.column->row_offset(row) / sizeof(uint64_t);
        const size_t n = t.column->row_length(row) / sizeof(uint64_t);
        if (at + n > t.words.size()) return false;
        const uint64_t* set = t.words.data() + at;
        for (uint64_t v : p.values)
          if (std::find(set, set + n, v) == set + n) return false;
        return true;
      }
      case Subject::Attribute: break;
    }
    return false;
  };

  // Candidates: those of the most selective predicate that lists prims (paths IN, the children
  // of parents IN, the one parent of children CONTAINS), else every existing prim, as the
  // counts' runs (a range's members are a few runs, not one look each); the tests then keep
  // those that meet every predicate.
  std::vector<uint64_t> candidates;
  bool listed = false;
  for (const Test& t : tests) {
    if (listed || t.p->op == KSTAGE_FILTER_HAS) continue;
    if (t.p->subject == Subject::Path && t.p->op == KSTAGE_FILTER_IN) {
      for (uint64_t v : t.p->values)
        if (exists(v)) candidates.push_back(v);
      listed = true;
    } else if (t.p->subject == Subject::Parent) {
      for (uint64_t v : t.p->values) {
        const auto [spans, n] = h->children(v);
        for (size_t k = 0; k < n; ++k)
          for (uint64_t c = 0; c < spans[k].count; ++c) candidates.push_back(spans[k].first + c);
      }
      std::sort(candidates.begin(), candidates.end());  // (children of parents are disjoint)
      listed = true;
    } else if (t.p->subject == Subject::Children) {
      candidates.push_back(t.only_parent);
      listed = true;
    }
  }
  std::vector<uint64_t> out;
  auto consider = [&](uint64_t prim) {
    for (const Test& t : tests)
      if (!passes(t, prim)) return;
    out.push_back(prim);
  };
  if (listed) {
    for (uint64_t prim : candidates) consider(prim);
  } else {
    const std::vector<std::pair<uint64_t, uint64_t>> runs =
        prim_attribute_count_.joined_runs(dictionary_.path_id_bound());
    uint64_t total = 0;
    for (const auto& run : runs) total += run.second;
    out.reserve(tests.empty() ? total : 0);
    for (const auto& [first, count] : runs)
      for (uint64_t p = first; p < first + count; ++p) consider(p);
  }
  for (const Test& t : tests)
    if (t.p->subject == Subject::Path && t.p->op == KSTAGE_FILTER_PREFIX)
      dictionary_.keep_at_or_below(t.p->values[0], out);
  return PrimList(std::make_shared<const PrimSeq>(PrimSeq::sorted(std::move(out))));
}

}  // namespace kstage::core
