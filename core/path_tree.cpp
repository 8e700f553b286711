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
// Whether this thread's last intern() made a new path: a loop interning new
// paths then goes straight to the writer's lock, without a reader's look first.
thread_local bool t_last_was_new = false;

// "/a/b/c" -> "/a/b"; "/a" -> "" (a top-level path's parent is the root).
std::string_view parent_part(std::string_view path) {
  const size_t slash = path.rfind('/');
  return path.substr(0, slash);
}
std::string_view leaf_part(std::string_view path) { return path.substr(path.rfind('/') + 1); }

inline uint64_t mix(uint64_t x) {
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  return x ^ (x >> 32);
}

}  // namespace

PathTree::PathTree() : serial_(g_next_serial.fetch_add(1)) { index_.assign(1024, 0); }

uint32_t PathTree::hash_of(uint64_t parent, std::string_view leaf) {
  uint64_t h = mix(parent + 0x9E3779B97F4A7C15ull) ^ (uint64_t(leaf.size()) << 56);
  size_t i = 0;
  for (; i + 8 <= leaf.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, leaf.data() + i, 8);
    h = mix(h ^ w);
  }
  uint64_t tail = 0;
  if (i < leaf.size()) std::memcpy(&tail, leaf.data() + i, leaf.size() - i);
  return uint32_t(mix(h ^ tail ^ 0xA5));
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

uint64_t PathTree::find(uint64_t parent, std::string_view leaf, uint32_t hash) const {
  const size_t mask = index_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const uint64_t slot = index_[i];
    if (slot == 0) return 0;
    if (uint32_t(slot >> 32) != hash) continue;
    const uint64_t id = slot & 0xFFFFFFFFu;
    const Node& n = nodes_[id - 1];
    if ((n.parent & ~kVisible) == parent && leaf_of(n) == leaf) return id;
  }
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
    id = find(id, leaf, hash_of(id, leaf));
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
  if (nodes_.size() >= 0xFFFFFFFEu) throw std::bad_alloc();  // ids in the index are 32-bit
  if (4 * (nodes_.size() + 1) > 3 * index_.size()) grow_index();
  // The leaf: LEB128 length, then the bytes, never across a chunk boundary.
  unsigned char len_bytes[10];
  size_t nlen = 0;
  for (size_t v = leaf.size();; v >>= 7) {
    len_bytes[nlen++] = uint8_t((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
    if (v < 0x80) break;
  }
  const size_t need = nlen + leaf.size();
  if (leaf_chunks_.empty() || leaf_used_ + need > leaf_chunk_sizes_.back()) {
    const size_t size = std::max(kLeafChunk, need);
    leaf_chunks_.push_back(std::make_unique<char[]>(size));
    leaf_chunk_sizes_.push_back(size);
    leaf_used_ = 0;
  }
  char* dst = leaf_chunks_.back().get() + leaf_used_;
  std::memcpy(dst, len_bytes, nlen);
  if (!leaf.empty()) std::memcpy(dst + nlen, leaf.data(), leaf.size());
  const uint64_t where = (uint64_t(leaf_chunks_.size() - 1) << 32) | leaf_used_;
  leaf_used_ += need;

  nodes_.push_back(Node{parent | (visible ? kVisible : 0), where});
  const uint64_t id = nodes_.size();
  const size_t mask = index_.size() - 1;
  size_t i = hash & mask;
  while (index_[i] != 0) i = (i + 1) & mask;
  index_[i] = (uint64_t(hash) << 32) | id;
  return id;
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
    const uint64_t found = find(id, leaf, h);
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
    t_parent.serial = serial_;
    t_parent.parent.assign(parent_str.data(), parent_str.size());
    t_parent.id = parent;
  }
  const std::string_view leaf = leaf_part(path);
  const uint32_t h = hash_of(parent, leaf);
  if (const uint64_t id = find(parent, leaf, h)) {
    nodes_[id - 1].parent |= kVisible;  // a hidden ancestor becomes a path: same id
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
      if (!cached && parent != 0) {
        t_parent.serial = serial_;
        t_parent.parent.assign(parent_str.data(), parent_str.size());
        t_parent.id = parent;
      }
      if (parent != 0 || parent_str.empty()) {
        const std::string_view leaf = leaf_part(path);
        const uint64_t id = find(parent, leaf, hash_of(parent, leaf));
        if (id != 0 && (nodes_[id - 1].parent & kVisible)) return id;
      }
    } else if (root_ != 0) {
      return root_;
    }
  }
  std::unique_lock lock(mutex_);
  const uint64_t before = nodes_.size();
  const uint64_t id = intern_locked(path);
  t_last_was_new = nodes_.size() != before;
  return id;
}

void PathTree::intern_many(const std::string_view* paths, size_t n, uint64_t* ids) {
  std::unique_lock lock(mutex_);
  for (size_t i = 0; i < n; ++i) ids[i] = intern_locked(paths[i]);
}

bool PathTree::contains(uint64_t id) const {
  std::shared_lock lock(mutex_);
  return id != 0 && id <= nodes_.size() && (nodes_[id - 1].parent & kVisible);
}

uint64_t PathTree::id_bound() const {
  std::shared_lock lock(mutex_);
  return nodes_.size() + 1;
}

std::string PathTree::path(uint64_t id) const {
  std::shared_lock lock(mutex_);
  if (id == 0 || id > nodes_.size() || !(nodes_[id - 1].parent & kVisible)) return {};
  if (id == root_) return "/";
  // Leaves from the path's end to the root, then joined front to back.
  std::string_view leaves[64];
  std::vector<std::string_view> deep;
  size_t depth = 0, bytes = 0;
  for (uint64_t at = id; at != 0; at = nodes_[at - 1].parent & ~kVisible) {
    const std::string_view leaf = leaf_of(nodes_[at - 1]);
    if (depth < 64) leaves[depth] = leaf; else deep.push_back(leaf);
    ++depth;
    bytes += 1 + leaf.size();
  }
  std::string out;
  out.reserve(bytes);
  for (size_t k = depth; k-- > 0;) {
    out += '/';
    out += k < 64 ? leaves[k] : deep[k - 64];
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

void PathTree::keep_at_or_below(uint64_t prefix, std::vector<uint64_t>& ids) const {
  std::shared_lock lock(mutex_);
  if (prefix == root_ && root_ != 0) return;  // "/" covers every path
  size_t kept = 0;
  for (uint64_t id : ids) {
    uint64_t at = id;
    while (at != 0 && at != prefix && at <= nodes_.size()) at = nodes_[at - 1].parent & ~kVisible;
    if (at == prefix && prefix != 0) ids[kept++] = id;
  }
  ids.resize(kept);
}

size_t PathTree::memory_bytes() const {
  std::shared_lock lock(mutex_);
  size_t b = nodes_.bytes() + index_.capacity() * sizeof(uint64_t);
  for (size_t s : leaf_chunk_sizes_) b += s;
  std::lock_guard strings(strings_mutex_);
  for (const auto& [id, s] : strings_) b += sizeof(std::string) + s->capacity() + 32;
  return b;
}

}  // namespace kstage::core
