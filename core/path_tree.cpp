// SPDX-License-Identifier: Apache-2.0
#include "core/path_tree.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

namespace kstage::core {

namespace {

std::atomic<uint64_t> g_next_serial{1};

// The last parent a thread interned under, per tree (a loop interning
// "/world/particles/p<i>" walks "/world/particles" once). Parent ids never
// change, so an entry stays right for as long as its tree lives.
struct ParentCache {
  uint64_t serial = 0;
  std::string parent;
  uint64_t id = 0;
};
thread_local ParentCache t_parent;

// Never a half-updated entry: the string may throw, so the serial that makes
// the entry count is set last.
void remember_parent(uint64_t serial, std::string_view parent, uint64_t id) {
  t_parent.serial = 0;
  t_parent.parent.assign(parent.data(), parent.size());
  t_parent.id = id;
  t_parent.serial = serial;
}
// Whether this thread's last intern() made a new path: a loop interning new
// paths then goes straight to the writer's lock, without a reader's look first.
thread_local bool t_last_was_new = false;

// "/a/b/c" -> "/a/b"; "/a" -> "" (a top-level path's parent is the root).
std::string_view parent_part(std::string_view path) {
  const size_t slash = path.rfind('/');
  return path.substr(0, slash);
}
std::string_view leaf_part(std::string_view path) { return path.substr(path.rfind('/') + 1); }

// A range member's number: canonical decimal (no sign, no leading zero), fits 64 bits.
bool parse_number(std::string_view digits, uint64_t& v) {
  if (digits.empty() || digits.size() > 20 || (digits.size() > 1 && digits[0] == '0')) return false;
  v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || v > (UINT64_MAX - uint64_t(c - '0')) / 10) return false;
    v = v * 10 + uint64_t(c - '0');
  }
  return true;
}

// Whether `leaf` is `prefix` and a number in [begin, last], which goes to `v`.
bool names_member(std::string_view leaf, std::string_view prefix, uint64_t begin, uint64_t last,
                  uint64_t& v) {
  return leaf.size() > prefix.size() && leaf.compare(0, prefix.size(), prefix) == 0 &&
         parse_number(leaf.substr(prefix.size()), v) && v >= begin && v <= last;
}

inline uint64_t mix(uint64_t x) {
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  return x ^ (x >> 32);
}

}  // namespace

PathTree::PathTree() : serial_(g_next_serial.fetch_add(1)) { index_.assign(1024, 0); }

// A child's slot hash is its leaf's hash combined with its parent's id: the leaf's part is the
// same under every parent, so copies of one leaf below many parents (kstage_clone) hash it once.
uint64_t PathTree::leaf_hash(std::string_view leaf) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(leaf.size()) << 56);
  size_t i = 0;
  for (; i + 8 <= leaf.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, leaf.data() + i, 8);
    h = mix(h ^ w);
  }
  uint64_t tail = 0;
  if (i < leaf.size()) std::memcpy(&tail, leaf.data() + i, leaf.size() - i);
  return mix(h ^ tail ^ 0xA5);
}

uint32_t PathTree::child_hash(uint64_t parent, uint64_t leaf_hash) {
  return uint32_t(mix(parent * 0xD1B54A32D192ED03ull ^ leaf_hash));
}

uint32_t PathTree::hash_of(uint64_t parent, std::string_view leaf) {
  return child_hash(parent, leaf_hash(leaf));
}

std::string_view PathTree::leaf_of(const Node& n) const {
  const char* chunk = leaf_chunks_[n.leaf >> 32].get();
  const unsigned char* p = reinterpret_cast<const unsigned char*>(chunk + (n.leaf & 0xFFFFFFFFu));
  size_t len = 0;
  int shift = 0;
  while (*p & 0x80) {  // LEB128 length
    len |= size_t(*p++ & 0x7F) << shift;
    shift += 7;
  }
  len |= size_t(*p++) << shift;
  return {reinterpret_cast<const char*>(p), len};
}

uint64_t PathTree::node_id(uint64_t node) const {
  const Run* r = &runs_.back();
  if (node < r->first_node) {  // an earlier run: ranges were interned between runs
    auto it = std::upper_bound(runs_.begin(), runs_.end(), node,
                               [](uint64_t n, const Run& x) { return n < x.first_node; });
    r = &*(it - 1);
  }
  return r->first_id + (node - r->first_node);
}

bool PathTree::node_of(uint64_t id, uint64_t& node) const {
  if (runs_.empty() || id < runs_.front().first_id) return false;
  const Run* r = &runs_.back();
  if (id < r->first_id) {
    auto it = std::upper_bound(runs_.begin(), runs_.end(), id,
                               [](uint64_t v, const Run& x) { return v < x.first_id; });
    r = &*(it - 1);
  }
  if (id - r->first_id >= r->count) return false;
  node = r->first_node + (id - r->first_id);
  return true;
}

const PathTree::Range* PathTree::range_at(uint64_t id) const {
  if (ranges_.empty() || id < ranges_.front().first) return nullptr;
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), id,
                             [](uint64_t v, const Range& r) { return v < r.first; });
  const Range& r = *(it - 1);
  return id - r.first < r.count ? &r : nullptr;
}

bool PathTree::visible(uint64_t id) const {
  uint64_t node = 0;
  if (node_of(id, node)) return (nodes_[node].parent & kVisible) != 0;
  return range_at(id) != nullptr;
}

uint64_t PathTree::parent_of(uint64_t id) const {
  uint64_t node = 0;
  if (node_of(id, node)) return nodes_[node].parent & kParentBits;
  const Range* r = range_at(id);
  return r ? r->parent : 0;
}

// The member of a range under `parent` that `leaf` names: the range's prefix,
// then the member's number in canonical decimal (no sign, no leading zero).
uint64_t PathTree::range_member(uint64_t parent, std::string_view leaf) const {
  auto [lo, hi] = ranges_by_parent_.equal_range(parent);
  for (auto it = lo; it != hi; ++it) {
    const Range& r = ranges_[it->second];
    uint64_t v = 0;
    if (names_member(leaf, r.prefix, r.begin, r.begin + (r.count - 1), v))
      return r.first + (v - r.begin);
  }
  return 0;
}

uint64_t PathTree::child(uint64_t parent, std::string_view leaf, uint32_t hash) const {
  if (!ranges_.empty())
    if (const uint64_t member = range_member(parent, leaf)) return member;
  const size_t mask = index_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const uint64_t slot = index_[i];
    if (slot == 0) break;
    if (uint32_t(slot >> 32) != hash) continue;
    const uint64_t node = (slot & 0xFFFFFFFFu) - 1;
    const Node& n = nodes_[node];
    if ((n.parent & kParentBits) == parent && leaf_of(n) == leaf) return node_id(node);
  }
  // Not in the index: a copy below a copy is found through its block.
  return blocks_.empty() ? 0 : block_child(parent, leaf);
}

uint64_t PathTree::block_child(uint64_t parent, std::string_view leaf) const {
  // The block whose copies hold `parent` (blocks are in id order, as ranges are).
  auto it = std::upper_bound(blocks_.begin(), blocks_.end(), parent,
                             [](uint64_t v, const Block& b) { return v < b.first; });
  if (it == blocks_.begin()) return 0;
  const Block& b = *(it - 1);
  if (parent - b.first >= b.nt * b.ns) return 0;
  const uint64_t t = (parent - b.first) / b.ns, k = (parent - b.first) % b.ns;
  for (uint32_t kid : b.kids[k])
    if (b.leaves[kid] == leaf) return b.first + t * b.ns + kid;
  return 0;
}

uint64_t PathTree::find_parent(std::string_view path) const {
  const std::string_view parent = parent_part(path);
  if (parent.empty()) return 0;  // the root: not a node
  uint64_t id = 0;
  size_t at = 1;
  while (at <= parent.size()) {
    size_t end = parent.find('/', at);
    if (end == std::string_view::npos) end = parent.size();
    const std::string_view leaf = parent.substr(at, end - at);
    id = child(id, leaf, hash_of(id, leaf));
    if (id == 0) return 0;
    at = end + 1;
  }
  return id;
}

void PathTree::grow_index() {
  std::vector<uint64_t> bigger(index_.size() * 2, 0);
  const size_t mask = bigger.size() - 1;
  for (uint64_t slot : index_) {
    if (slot == 0) continue;
    size_t i = (slot >> 32) & mask;
    while (bigger[i] != 0) i = (i + 1) & mask;
    bigger[i] = slot;
  }
  index_.swap(bigger);
}

uint64_t PathTree::insert(uint64_t parent, std::string_view leaf, uint32_t hash, bool visible) {
  // The leaf: LEB128 length, then the bytes, never across a chunk boundary.
  unsigned char len_bytes[10];
  size_t nlen = 0;
  for (size_t v = leaf.size();; v >>= 7) {
    len_bytes[nlen++] = uint8_t((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
    if (v < 0x80) break;
  }
  const size_t need = nlen + leaf.size();
  // Every allocation first (each may throw std::bad_alloc), so that a failed
  // insert leaves the tree exactly as it was: a new leaf chunk (an unused one
  // is harmless), the digit counter's entry, then insert_shared's own.
  if (leaf_chunks_.empty() || leaf_used_ + need > leaf_chunk_sizes_.back()) {
    const size_t size = std::max(kLeafChunk, need);
    leaf_chunks_.reserve(leaf_chunks_.size() + 1);
    leaf_chunk_sizes_.reserve(leaf_chunk_sizes_.size() + 1);
    // (Not zeroed: a chunk's bytes are read only where a leaf was written. Zeroing a fresh
    // 1 MiB chunk touched all of it for a stage's first path.)
    leaf_chunks_.push_back(std::unique_ptr<char[]>(new char[size]));
    leaf_chunk_sizes_.push_back(size);
    leaf_used_ = 0;
  }
  const bool numeric = !leaf.empty() && leaf.back() >= '0' && leaf.back() <= '9';
  uint64_t parent_node = 0;
  if (numeric && !node_of(parent, parent_node)) numeric_children_.try_emplace(parent, 0);
  const uint64_t where = (uint64_t(leaf_chunks_.size() - 1) << 32) | leaf_used_;
  const uint64_t id = insert_shared(parent, where, hash, visible);
  // Nothing below allocates: the leaf's bytes where the node says, its parent's digit mark.
  char* dst = leaf_chunks_.back().get() + leaf_used_;
  std::memcpy(dst, len_bytes, nlen);
  if (!leaf.empty()) std::memcpy(dst + nlen, leaf.data(), leaf.size());
  leaf_used_ += need;
  if (numeric) note_digit_child(parent);
  return id;
}

uint64_t PathTree::insert_shared(uint64_t parent, uint64_t leaf, uint32_t hash, bool visible) {
  if (nodes_.size() >= 0xFFFFFFFEu || next_id_ >= kDigitKids)
    throw std::bad_alloc();  // 32-bit nodes in the index
  if (4 * (nodes_.size() + 1) > 3 * index_.size()) grow_index();
  if (runs_.size() == runs_.capacity()) runs_.reserve(runs_.size() + runs_.size() / 2 + 4);
  const uint64_t id = next_id_;
  const uint64_t node = nodes_.size();
  nodes_.push_back(Node{parent | (visible ? kVisible : 0), leaf});
  // Nothing below allocates.
  add_ids(id, node, 1);
  index_node(node, hash);
  return id;
}

void PathTree::add_ids(uint64_t first_id, uint64_t first_node, uint64_t count) {
  Run* last = runs_.empty() ? nullptr : &runs_.back();
  if (last && last->first_id + last->count == first_id &&
      last->first_node + last->count == first_node)
    last->count += count;
  else runs_.push_back(Run{first_id, first_node, count});  // (room reserved by the caller)
  next_id_ += count;
}

void PathTree::index_node(uint64_t node, uint32_t hash) {
  const size_t mask = index_.size() - 1;
  size_t i = hash & mask;
  while (index_[i] != 0) i = (i + 1) & mask;
  index_[i] = (uint64_t(hash) << 32) | (node + 1);
}

void PathTree::make_visible(uint64_t id) {
  uint64_t node = 0;
  if (node_of(id, node)) nodes_[node].parent |= kVisible;  // range members always are
}

bool PathTree::has_digit_children(uint64_t parent) const {
  uint64_t node = 0;
  if (node_of(parent, node)) return (nodes_[node].parent & kDigitKids) != 0;
  auto it = numeric_children_.find(parent);
  return it != numeric_children_.end() && it->second > 0;
}

void PathTree::note_digit_child(uint64_t parent) {
  uint64_t node = 0;
  if (node_of(parent, node)) nodes_[node].parent |= kDigitKids;
  else ++numeric_children_[parent];
}

uint64_t PathTree::make_parent(std::string_view path) {
  const std::string_view parent = parent_part(path);
  uint64_t id = 0;
  size_t at = 1;
  while (at <= parent.size() && !parent.empty()) {
    size_t end = parent.find('/', at);
    if (end == std::string_view::npos) end = parent.size();
    const std::string_view leaf = parent.substr(at, end - at);
    const uint32_t h = hash_of(id, leaf);
    const uint64_t found = child(id, leaf, h);
    id = found ? found : insert(id, leaf, h, false);
    at = end + 1;
  }
  return id;
}

uint64_t PathTree::intern_locked(std::string_view path) {
  if (path == "/") {
    if (root_ == 0) root_ = insert(0, std::string_view(), hash_of(0, std::string_view()), true);
    return root_;
  }
  const std::string_view parent_str = parent_part(path);
  uint64_t parent;
  if (t_parent.serial == serial_ && t_parent.parent == parent_str) {
    parent = t_parent.id;
  } else {
    parent = make_parent(path);
    remember_parent(serial_, parent_str, parent);
  }
  const std::string_view leaf = leaf_part(path);
  const uint32_t h = hash_of(parent, leaf);
  if (const uint64_t id = child(parent, leaf, h)) {
    make_visible(id);  // a hidden ancestor becomes a path: same id
    return id;
  }
  return insert(parent, leaf, h, true);
}

uint64_t PathTree::intern(std::string_view path) {
  if (!t_last_was_new) {
    // Interning a known path needs no writer.
    std::shared_lock lock(mutex_);
    if (path != "/") {
      const std::string_view parent_str = parent_part(path);
      const bool cached = t_parent.serial == serial_ && t_parent.parent == parent_str;
      const uint64_t parent = cached ? t_parent.id : find_parent(path);
      if (!cached && parent != 0) remember_parent(serial_, parent_str, parent);
      if (parent != 0 || parent_str.empty()) {
        const std::string_view leaf = leaf_part(path);
        const uint64_t id = child(parent, leaf, hash_of(parent, leaf));
        if (id != 0 && visible(id)) return id;
      }
    } else if (root_ != 0) {
      return root_;
    }
  }
  std::unique_lock lock(mutex_);
  const uint64_t before = next_id_;
  const uint64_t id = intern_locked(path);
  t_last_was_new = next_id_ != before;
  return id;
}

void PathTree::intern_many(const std::string_view* paths, size_t n, uint64_t* ids) {
  std::unique_lock lock(mutex_);
  for (size_t i = 0; i < n; ++i) ids[i] = intern_locked(paths[i]);
}

uint64_t PathTree::intern_range(std::string_view parent_path, std::string_view prefix,
                                uint64_t begin, uint64_t count, std::string& why) {
  std::unique_lock lock(mutex_);
  uint64_t parent = 0;
  if (parent_path != "/") {
    parent = make_parent(std::string(parent_path) + "/x");  // the parent itself, hidden if new
  }
  if (const uint64_t same = range_conflict(parent, prefix, begin, count, why)) return same;
  if (!why.empty()) return 0;
  return add_range(parent, prefix, begin, count);
}

uint64_t PathTree::range_conflict(uint64_t parent, std::string_view prefix, uint64_t begin,
                                  uint64_t count, std::string& why) const {
  const uint64_t last = begin + (count - 1);  // no overflow: checked by the caller
  // Another range whose names could be these: the same prefix with overlapping numbers, or
  // one prefix a prefix of the other ("p" 15 = "p1" 5).
  auto [lo, hi] = ranges_by_parent_.equal_range(parent);
  for (auto it = lo; it != hi; ++it) {
    const Range& r = ranges_[it->second];
    if (r.prefix == prefix && r.begin == begin && r.count == count)
      return r.first;  // the same range
    // Two prefixes name the same path only if the longer one is the shorter one
    // and digits that do not start with 0 ("p" 15 and "p1" 5): a member's number
    // is canonical decimal.
    const std::string_view shorter =
        r.prefix.size() <= prefix.size() ? std::string_view(r.prefix) : prefix;
    const std::string_view longer =
        r.prefix.size() <= prefix.size() ? prefix : std::string_view(r.prefix);
    bool meet = longer.compare(0, shorter.size(), shorter) == 0;
    if (meet && longer.size() > shorter.size()) {
      const std::string_view extra = longer.substr(shorter.size());
      meet = extra[0] != '0' && extra.find_first_not_of("0123456789") == std::string_view::npos;
    } else if (meet) {  // the same prefix: overlapping numbers
      meet = begin <= r.begin + (r.count - 1) && r.begin <= last;
    }
    if (meet) {
      const std::string under = parent == 0 ? std::string() : path_locked(parent);
      why = "its names could be those of the range '" + under + "/" + r.prefix + "[" +
            std::to_string(r.begin) + ".." + std::to_string(r.begin + (r.count - 1)) +
            "]' interned before";
      return 0;
    }
  }
  // A member interned before as a path of its own (or as an ancestor of one). Only parents
  // with children whose names end in a digit need a look: at most min(count, nodes) of them.
  if (has_digit_children(parent)) {
    uint64_t clash = 0;
    // A lookup costs a cache miss or two (~200 ns), a scan step ~1 ns per path.
    if (count <= nodes_.size() / 128) {
      std::string leaf(prefix);
      for (uint64_t k = 0; k < count && clash == 0; ++k) {
        leaf.resize(prefix.size());
        leaf += std::to_string(begin + k);
        clash = child(parent, leaf, hash_of(parent, leaf));
      }
    } else {
      for (uint64_t node = 0; node < nodes_.size() && clash == 0; ++node) {
        if ((nodes_[node].parent & kParentBits) != parent) continue;
        const std::string_view leaf = leaf_of(nodes_[node]);
        uint64_t v = 0;
        if (names_member(leaf, prefix, begin, last, v)) clash = node_id(node);
      }
    }
    if (clash != 0) {
      why = "its member '" + path_locked(clash) + "' was interned before" +
            (visible(clash) ? "" : " (as the ancestor of another path)");
      return 0;
    }
  }
  return 0;
}

uint64_t PathTree::add_range(uint64_t parent, std::string_view prefix, uint64_t begin,
                             uint64_t count) {
  if (next_id_ > kDigitKids - 1 - count) throw std::bad_alloc();
  // Every allocation before the commit: room in ranges_, the parent index's entry.
  if (ranges_.size() == ranges_.capacity()) ranges_.reserve(2 * ranges_.size() + 4);
  Range r{next_id_, count, parent, begin, std::string(prefix)};
  auto entry = ranges_by_parent_.emplace(parent, ranges_.size());
  ranges_.push_back(std::move(r));  // cannot throw: reserved, and Range moves without allocating
  (void)entry;
  next_id_ += count;
  return ranges_.back().first;
}

std::vector<std::pair<uint64_t, uint64_t>> PathTree::range_extents() const {
  std::shared_lock lock(mutex_);
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(ranges_.size());
  for (const Range& r : ranges_) out.emplace_back(r.first, r.count);
  return out;
}

bool PathTree::range_of(uint64_t id, Range& out) const {
  std::shared_lock lock(mutex_);
  const Range* r = range_at(id);
  if (!r) return false;
  out = *r;
  return true;
}

bool PathTree::contains(uint64_t id) const {
  std::shared_lock lock(mutex_);
  return id != 0 && visible(id);
}

uint64_t PathTree::id_bound() const {
  std::shared_lock lock(mutex_);
  return next_id_;
}

std::string PathTree::path(uint64_t id) const {
  std::shared_lock lock(mutex_);
  if (id == 0 || !visible(id)) return {};
  return path_locked(id);
}

std::string PathTree::path_locked(uint64_t id) const {
  if (id == root_) return "/";
  // Leaves from the path's end to the root, then joined front to back. A
  // range member's leaf is made here (its prefix and number).
  std::vector<std::string> leaves;
  for (uint64_t at = id; at != 0;) {
    uint64_t node = 0;
    if (node_of(at, node)) {
      leaves.emplace_back(leaf_of(nodes_[node]));
      at = nodes_[node].parent & kParentBits;
    } else if (const Range* r = range_at(at)) {
      leaves.push_back(r->prefix + std::to_string(r->begin + (at - r->first)));
      at = r->parent;
    } else {
      break;
    }
  }
  std::string out;
  for (size_t k = leaves.size(); k-- > 0;) {
    out += '/';
    out += leaves[k];
  }
  return out;
}

const std::string* PathTree::stable_path(uint64_t id) const {
  std::string p = path(id);
  if (p.empty()) return nullptr;
  std::lock_guard lock(strings_mutex_);
  auto& slot = strings_[id];
  if (!slot) slot = std::make_unique<const std::string>(std::move(p));
  return slot.get();
}

const PathTree::RangeStrings* PathTree::stable_range_strings(uint64_t first) const {
  RangeStrings made;
  {
    std::shared_lock lock(mutex_);
    const Range* r = range_at(first);
    if (!r || r->first != first) return nullptr;
    made.parent = r->parent == 0 ? std::string("/") : path_locked(r->parent);
    made.prefix = r->prefix;
  }
  std::lock_guard lock(strings_mutex_);
  auto& slot = range_strings_[first];
  if (!slot) slot = std::make_unique<const RangeStrings>(std::move(made));
  return slot.get();
}

uint64_t PathTree::tree_parent(uint64_t id) const {
  if (id == 0 || id == root_ || id >= next_id_) return 0;
  const uint64_t p = parent_of(id);
  return p != 0 ? p : root_;
}

uint64_t PathTree::parent(uint64_t id) const {
  std::shared_lock lock(mutex_);
  return tree_parent(id);
}

void PathTree::parents(const uint64_t* ids, size_t n, uint64_t* out) const {
  std::shared_lock lock(mutex_);
  for (size_t i = 0; i < n; ++i) out[i] = tree_parent(ids[i]);
}

void PathTree::keep_at_or_below(uint64_t prefix, std::vector<uint64_t>& ids) const {
  std::shared_lock lock(mutex_);
  if (prefix == root_ && root_ != 0) return;  // "/" covers every path
  size_t kept = 0;
  for (uint64_t id : ids) {
    uint64_t at = id;
    while (at != 0 && at != prefix && at < next_id_) at = parent_of(at);
    if (at == prefix && prefix != 0) ids[kept++] = id;
  }
  ids.resize(kept);
}

void PathTree::subtree_shape(uint64_t root, const uint64_t* ids, size_t n,
                             std::vector<ShapeNode>& shape, std::vector<uint32_t>& index) const {
  std::shared_lock lock(mutex_);
  std::unordered_map<uint64_t, uint32_t> node_of_path;  // path below root -> shape node
  std::vector<uint64_t> chain;
  index.assign(n, kNotBelow);
  for (size_t i = 0; i < n; ++i) {
    // Up from ids[i] to the root or the top (not below), or to a path already in the shape.
    chain.clear();
    uint64_t at = ids[i];
    uint32_t above = kNotBelow;
    while (at != 0 && at < next_id_) {
      if (at == root) {
        above = ShapeNode::kShapeRoot;
        break;
      }
      if (auto it = node_of_path.find(at); it != node_of_path.end()) {
        above = it->second;
        break;
      }
      chain.push_back(at);
      at = parent_of(at);
    }
    if (above == kNotBelow) continue;
    // The chain's paths become nodes, top down (a range member: always a path).
    for (size_t k = chain.size(); k-- > 0;) {
      const uint64_t path = chain[k];
      uint64_t node = 0;
      const bool explicit_node = node_of(path, node);
      const uint32_t made = uint32_t(shape.size());
      shape.push_back(ShapeNode{
          above, path, !explicit_node || (nodes_[node].parent & kVisible) != 0, !explicit_node});
      node_of_path.emplace(path, made);
      above = made;
    }
    index[i] = above;
  }
}

PathTree::ShapeLeaves PathTree::shape_leaves(const std::vector<ShapeNode>& shape) const {
  ShapeLeaves l;
  const size_t s = shape.size();
  l.leaf.resize(s);
  l.view.resize(s);
  l.hash.resize(s);
  l.numeric.resize(s);
  l.range.assign(s, 0);
  l.names.reserve(s);  // (views into its strings: never reallocated)
  std::unordered_map<uint64_t, uint32_t> range_index;  // a range's first id -> its index
  for (size_t k = 0; k < s; ++k) {
    uint64_t node = 0;
    if (shape[k].member) {
      const Range& r = *range_at(shape[k].source);
      auto [it, fresh] = range_index.emplace(r.first, uint32_t(l.ranges.size()));
      if (fresh) {
        l.ranges.push_back(r);
        l.range_parent.push_back(shape[k].parent);
      }
      l.range[k] = it->second;
      l.names.push_back(r.prefix + std::to_string(r.begin + (shape[k].source - r.first)));
      l.view[k] = l.names.back();
      l.leaf[k] = 0;
    } else {
      node_of(shape[k].source, node);  // (subtree_shape made only paths)
      l.leaf[k] = nodes_[node].leaf;
      l.view[k] = leaf_of(nodes_[node]);
    }
    l.hash[k] = leaf_hash(l.view[k]);
    l.numeric[k] = !l.view[k].empty() && l.view[k].back() >= '0' && l.view[k].back() <= '9';
  }
  return l;
}

std::string PathTree::range_copy_conflict(const Range& source, uint64_t target, uint64_t parent,
                                          const std::string& why) const {
  return "the copy of the path range '" + path_locked(source.first) + "' ... for '" +
         path_locked(target) + "' cannot be made under '" + path_locked(parent) + "': " + why;
}

template <class CopyOf>
void PathTree::check_copy_ranges(const uint64_t* targets, size_t nt, const ShapeLeaves& l,
                                 CopyOf copy_of, std::string& conflict) const {
  std::string why;
  for (size_t r = 0; r < l.ranges.size(); ++r) {
    const Range& range = l.ranges[r];
    const uint32_t p = l.range_parent[r];
    for (size_t t = 0; t < nt; ++t) {
      const uint64_t parent = p == ShapeNode::kShapeRoot ? targets[t] : copy_of(t, p);
      if (parent == 0) continue;
      range_conflict(parent, range.prefix, range.begin, range.count, why);
      if (why.empty()) continue;
      conflict = range_copy_conflict(range, targets[t], parent, why);
      return;
    }
  }
}

bool PathTree::find_copies(const uint64_t* targets, size_t nt, const std::vector<ShapeNode>& shape,
                           std::vector<uint64_t>& ids, std::string& conflict) const {
  std::shared_lock lock(mutex_);
  const size_t s = shape.size();
  const ShapeLeaves l = shape_leaves(shape);
  std::vector<size_t> top;  // the nodes right below the root: without their copies, none
  for (size_t k = 0; k < s; ++k)
    if (shape[k].parent == ShapeNode::kShapeRoot) top.push_back(k);
  bool any = false;
  for (size_t t = 0; t < nt && !any; ++t)
    for (size_t k : top)
      any = any || child(targets[t], l.view[k], child_hash(targets[t], l.hash[k])) != 0;
  if (!any) {  // (only ranges right below the targets have parents to conflict with)
    check_copy_ranges(
        targets, nt, l, [](size_t, uint32_t) { return uint64_t(0); }, conflict);
    return false;
  }
  ids.assign(nt * s, 0);
  uint64_t* const out = ids.data();
  for (size_t t = 0; t < nt; ++t) {
    uint64_t* copy = out + t * s;
    for (size_t k = 0; k < s; ++k) {
      const uint32_t p = shape[k].parent;
      const uint64_t parent = p == ShapeNode::kShapeRoot ? targets[t] : copy[p];
      copy[k] = parent == 0 ? 0 : child(parent, l.view[k], child_hash(parent, l.hash[k]));
    }
  }
  check_copy_ranges(
      targets, nt, l, [&](size_t t, uint32_t k) { return out[t * s + k]; }, conflict);
  return true;
}

uint64_t PathTree::intern_copies(const uint64_t* targets, size_t nt,
                                 const std::vector<ShapeNode>& shape, std::vector<uint64_t>& ids,
                                 std::string& conflict) {
  std::unique_lock lock(mutex_);
  const size_t s = shape.size();
  if (s == 0 || nt == 0) return 0;
  // Per node: where its leaf is (shared by every copy: leaves never move or change), its hash,
  // and whether it ends in a digit (intern_range's collision check asks which parents have such
  // children).
  const ShapeLeaves l = shape_leaves(shape);
  if (l.ranges.empty())
    if (const uint64_t first = make_block(targets, nt, shape, l)) return first;
  ids.resize(nt * s);
  uint64_t* const out = ids.data();
  // The index's room for every copy at once (one growth, not one per doubling).
  while (4 * (nodes_.size() + nt * s) > 3 * index_.size()) grow_index();
  std::vector<char> made(s);  // the copy of node k was made for the current target
  std::vector<uint64_t> range_first(l.ranges.size());  // the target's copy of each range
  std::vector<char> range_new(l.ranges.size());        // ... made for it here
  std::string why;
  for (size_t t = 0; t < nt; ++t) {
    uint64_t* copy = out + t * s;
    std::fill(range_first.begin(), range_first.end(), uint64_t(0));
    for (size_t k = 0; k < s; ++k) {
      const uint32_t p = shape[k].parent;
      const bool under_target = p == ShapeNode::kShapeRoot;
      const uint64_t parent = under_target ? targets[t] : copy[p];
      if (shape[k].member) {
        // The member of the target's copy of its range, made with its first member here.
        const Range& r = l.ranges[l.range[k]];
        uint64_t& first = range_first[l.range[k]];
        if (first == 0) {
          first = range_conflict(parent, r.prefix, r.begin, r.count, why);
          if (!why.empty()) {
            conflict = range_copy_conflict(r, targets[t], parent, why);
            return 0;
          }
          range_new[l.range[k]] = first == 0;
          if (first == 0) first = add_range(parent, r.prefix, r.begin, r.count);
        }
        copy[k] = first + (shape[k].source - r.first);
        made[k] = range_new[l.range[k]];  // (a member of a range made just now has no children)
        continue;
      }
      const uint32_t h = child_hash(parent, l.hash[k]);
      // A copy made just now has no children yet: its children need no look.
      uint64_t id = (under_target || !made[p]) ? child(parent, l.view[k], h) : 0;
      made[k] = id == 0;
      if (id == 0) {
        id = insert_shared(parent, l.leaf[k], h, shape[k].visible);
        if (l.numeric[k]) note_digit_child(parent);
      } else if (shape[k].visible) {
        make_visible(id);
      }
      copy[k] = id;
    }
  }
  return 0;
}

uint64_t PathTree::make_block(const uint64_t* targets, size_t nt,
                              const std::vector<ShapeNode>& shape, const ShapeLeaves& l) {
  const size_t s = shape.size();
  // Only when no copy exists yet: then none of the targets has a child named like a node
  // right below the source (and nothing deeper can exist without those).
  std::vector<uint32_t> top;
  for (size_t k = 0; k < s; ++k)
    if (shape[k].parent == ShapeNode::kShapeRoot) top.push_back(uint32_t(k));
  for (size_t t = 0; t < nt; ++t)
    for (uint32_t k : top)
      if (child(targets[t], l.view[k], child_hash(targets[t], l.hash[k])) != 0) return 0;
  const uint64_t total = uint64_t(nt) * s;
  if (nodes_.size() + total >= 0xFFFFFFFEu || next_id_ > kDigitKids - 1 - total)
    throw std::bad_alloc();
  // Every allocation first: the block's record, the index's room for the top copies, the
  // targets' digit counters, room for a run.
  Block b;
  b.first = next_id_;
  b.nt = nt;
  b.ns = s;
  b.kids.resize(s);
  std::vector<char> digit_kids(s, 0);
  std::vector<uint64_t> flags(s);  // per node, what its copies' nodes carry beside the parent
  bool digit_top = false;
  for (size_t k = 0; k < s; ++k) {
    b.leaves.emplace_back(l.view[k]);
    const uint32_t p = shape[k].parent;
    if (p == ShapeNode::kShapeRoot) {
      digit_top = digit_top || l.numeric[k];
    } else {
      b.kids[p].push_back(uint32_t(k));
      if (l.numeric[k]) digit_kids[p] = 1;
    }
  }
  for (size_t k = 0; k < s; ++k)
    flags[k] = (shape[k].visible ? kVisible : 0) | (digit_kids[k] ? kDigitKids : 0);
  if (blocks_.size() == blocks_.capacity()) blocks_.reserve(2 * blocks_.size() + 4);
  while (4 * (nodes_.size() + nt * top.size()) > 3 * index_.size()) grow_index();
  if (digit_top)
    for (size_t t = 0; t < nt; ++t) {
      uint64_t node = 0;
      if (!node_of(targets[t], node)) numeric_children_.try_emplace(targets[t], 0);
    }
  if (runs_.size() == runs_.capacity()) runs_.reserve(runs_.size() + runs_.size() / 2 + 4);
  nodes_.grow(total);  // (all of them or none; every one written below)
  // Nothing below allocates. Copy (t, k) is node `base + t * s + k` with id first + t * s + k:
  // the nodes right below a target are in the hash index (a target may get other children);
  // the deeper ones are found through the block (block_child).
  const uint64_t base = nodes_.size() - total;
  for (size_t t = 0; t < nt; ++t) {
    const uint64_t first = b.first + t * s, node = base + t * s;
    for (size_t k = 0; k < s; ++k) {
      const uint32_t p = shape[k].parent;
      const uint64_t parent = p == ShapeNode::kShapeRoot ? targets[t] : first + p;
      nodes_[node + k] = Node{parent | flags[k], l.leaf[k]};
    }
    for (uint32_t k : top) index_node(node + k, child_hash(targets[t], l.hash[k]));
    if (digit_top) note_digit_child(targets[t]);  // (made above: no allocation)
  }
  const uint64_t first = b.first;
  add_ids(first, base, total);
  blocks_.push_back(std::move(b));
  return first;
}

size_t PathTree::memory_bytes() const {
  std::shared_lock lock(mutex_);
  size_t b = nodes_.bytes() + index_.capacity() * sizeof(uint64_t) + runs_.capacity() * sizeof(Run);
  for (size_t s : leaf_chunk_sizes_) b += s;
  for (const Range& r : ranges_) b += sizeof(Range) + r.prefix.capacity() + 32;
  for (const Block& k : blocks_) {
    b += sizeof(Block) + k.kids.capacity() * sizeof(std::vector<uint32_t>) +
         k.leaves.capacity() * sizeof(std::string);
    for (const auto& kids : k.kids) b += kids.capacity() * sizeof(uint32_t);
    for (const auto& l : k.leaves) b += l.capacity();
  }
  std::lock_guard strings(strings_mutex_);
  for (const auto& [id, s] : strings_) b += sizeof(std::string) + s->capacity() + 32;
  for (const auto& [id, s] : range_strings_)
    b += sizeof(RangeStrings) + s->parent.capacity() + s->prefix.capacity() + 32;
  return b;
}

}  // namespace kstage::core
