// SPDX-License-Identifier: Apache-2.0
// Prim paths as a tree. A path is a node: its parent's id and its last
// component (the leaf), so "/world/particles/p17" stores "p17" once and
// shares "/world/particles" with its siblings. Nodes and leaves live in
// chunked arenas (no per-path heap string, no reallocation spikes); a hash
// index of (parent, leaf) -> node finds them. Ids are dense (node index + 1)
// and never change or go away while the tree lives.
//
// Ancestors a path needs are created as *hidden* nodes: they have ids but are
// not paths of the stage (contains() is false) until someone interns them,
// which keeps their earlier id. So ids follow interning order, except that a
// path first created as another's ancestor keeps the id it got then.
//
// Ranges (kstage_intern_path_range) are N paths that share a parent and differ
// by a number, "<parent>/<prefix><i>": O(1) memory, consecutive ids, names
// made on demand. Interning one of their names on its own gives the member.
//
// Strings are made on demand (messages, kstage_path_string): stable_path()
// keeps the ones handed out through the C API for the tree's lifetime.
//
// Thread safety: every member may be called from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kstage::core {

// A growable array in fixed-size chunks: growth never moves elements nor
// holds two copies of the array.
template <class T, size_t kChunkBits = 16>
class ChunkedArray {
 public:
  static constexpr size_t kChunk = size_t(1) << kChunkBits;
  size_t size() const { return size_; }
  T& operator[](size_t i) { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
  const T& operator[](size_t i) const { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
  void push_back(const T& v) {
    if (chunks_.size() <= (size_ >> kChunkBits)) chunks_.push_back(new_chunk());
    (*this)[size_++] = v;
  }
  // `n` more elements, not initialised (the caller writes each before anything reads it: a
  // clone's block of a million nodes is not written twice), all or none: may throw
  // std::bad_alloc with the size unchanged (chunks made before the failure are kept).
  void grow(size_t n) {
    const size_t chunks = (size_ + n + kChunk - 1) >> kChunkBits;
    chunks_.reserve(chunks);
    while (chunks_.size() < chunks) chunks_.push_back(new_chunk());
    size_ += n;
  }
  size_t bytes() const {
    return chunks_.size() * kChunk * sizeof(T) + chunks_.capacity() * sizeof(void*);
  }

 private:
  static std::unique_ptr<T[]> new_chunk() { return std::unique_ptr<T[]>(new T[kChunk]); }

  std::vector<std::unique_ptr<T[]>> chunks_;
  size_t size_ = 0;
};

class PathTree {
 public:
  // What a path range is (kstage_intern_path_range): `count` paths
  // "<parent>/<prefix><begin + i>" with ids first + i.
  struct Range {
    uint64_t first = 0;
    uint64_t count = 0;
    uint64_t parent = 0;  // the parent's id (0: top level)
    uint64_t begin = 0;
    std::string prefix;
  };

  PathTree();
  PathTree(const PathTree&) = delete;
  PathTree& operator=(const PathTree&) = delete;

  // The id of `path`, a valid absolute path (the caller checks the syntax),
  // interning it (and any missing ancestor, hidden) if needed. A path that
  // names a member of a range is that member.
  uint64_t intern(std::string_view path);
  // intern() for `n` paths under one lock; consecutive paths with the same
  // parent find it once.
  void intern_many(const std::string_view* paths, size_t n, uint64_t* ids);
  // Interns a range under `parent` (a valid path; "/" for top-level members)
  // and returns its first id, or the first id of the same range interned
  // before. `why` says what conflicts when it returns 0: a member interned
  // before, or another range whose members could have the same names.
  // `prefix` holds no '/' or NUL; 1 <= count < 2^32.
  uint64_t intern_range(std::string_view parent, std::string_view prefix, uint64_t begin,
                        uint64_t count, std::string& why);
  // The range `id` is a member of (false: none).
  bool range_of(uint64_t id, Range& out) const;
  // (first id, count) of every range, in id order: a walk over ids finds the ranges among them
  // with one look at the tree, not one per id.
  std::vector<std::pair<uint64_t, uint64_t>> range_extents() const;
  // The parent path ("/" for top-level members) and the prefix of the range whose first id is
  // `first`, kept for the tree's lifetime (kstage_path_range_definition); null if `first` is
  // no range's first id. The parent may be a reserved (never interned) ancestor.
  struct RangeStrings {
    std::string parent;
    std::string prefix;
  };
  const RangeStrings* stable_range_strings(uint64_t first) const;

  // Whether `id` is an interned path (hidden ancestors are not).
  bool contains(uint64_t id) const;
  // Every id is < id_bound() (ids of hidden nodes included).
  uint64_t id_bound() const;
  // The path of `id` ("" when it is not one).
  std::string path(uint64_t id) const;
  // The same, kept for the tree's lifetime (null when `id` is not a path).
  const std::string* stable_path(uint64_t id) const;
  // The parent of path (or hidden ancestor) `id` in the tree of paths: the id of its path
  // minus the last component, which may be a hidden ancestor; for a top-level path, the id of
  // "/" once "/" was interned (else 0); 0 for "/" itself and for ids that are no node.
  uint64_t parent(uint64_t id) const;
  // parent() of ids[0, n) into out[0, n), under one lock (a scene's structure: a parent per prim).
  void parents(const uint64_t* ids, size_t n, uint64_t* out) const;
  // Keeps the ids of `ids` that are `prefix` or lie below it ("/a" covers
  // "/a/b", not "/ab"; "/" covers everything).
  void keep_at_or_below(uint64_t prefix, std::vector<uint64_t>& ids) const;

  // --- copies of a subtree (kstage_clone) -----------------------------------------------
  // One path below a subtree's root: its parent in the shape (kShapeRoot: the root itself),
  // the path it stands for below the source root, and whether that is an interned path (the
  // copies are interned alike; a path that is only an ancestor stays hidden). A member of a
  // path range (`member`) is copied as the same member of a copy of its range: each target
  // gets the range once, under its copy of the range's parent (same prefix, first number and
  // count: O(1) memory, as the source's), whichever of its members the shape holds.
  struct ShapeNode {
    static constexpr uint32_t kShapeRoot = UINT32_MAX;
    uint32_t parent = kShapeRoot;
    uint64_t source = 0;
    bool visible = false;
    bool member = false;
  };
  // The shape below `root` that reaches every path of `ids`: for ids[i] at or below `root`,
  // index[i] is its node (kShapeRoot for `root` itself); for one that is not, kNotBelow. The
  // nodes come parents first. May throw std::bad_alloc.
  static constexpr uint32_t kNotBelow = UINT32_MAX - 1;
  void subtree_shape(uint64_t root, const uint64_t* ids, size_t n, std::vector<ShapeNode>& shape,
                     std::vector<uint32_t>& index) const;
  // For target t of `targets` (count nt) and node k of `shape`: out[t * shape.size() + k] is
  // the id of the target's copy of that node, 0 where it is not in the tree (a look, under
  // one lock; nothing is made). Returns whether any is: when none is, `out` is left alone (no
  // target has a child named like a node right below the root, so nothing deeper exists).
  // `conflict` is set (else left empty) when a range the copies need cannot be made below an
  // existing copy of its parent (an explicit path or another range there has a member's name):
  // which target, which range, and why.
  bool find_copies(const uint64_t* targets, size_t nt, const std::vector<ShapeNode>& shape,
                   std::vector<uint64_t>& out, std::string& conflict) const;
  // The same, making every copy that is not in the tree (visible as its node says; a hidden
  // one a visible node names becomes visible, keeping its id), under one lock, target after
  // target: a target's new copies get consecutive ids. When none existed and the shape holds
  // no range member, they are made as one block, copy (t, k) the id first + t * shape.size() +
  // k: that `first` is returned and `out` is left alone; else 0, with out[t * shape.size() + k]
  // the copy (made room for here). A range that cannot be made (find_copies' `conflict`: a
  // path interned since that check) sets `conflict` and stops there. May throw std::bad_alloc.
  // (Copies made before a failure stay, hidden or visible: no prim exists for them.)
  uint64_t intern_copies(const uint64_t* targets, size_t nt, const std::vector<ShapeNode>& shape,
                         std::vector<uint64_t>& out, std::string& conflict);

  // Bytes the tree holds (nodes, leaves, hash index, ranges, handed-out strings).
  size_t memory_bytes() const;

 private:
  struct Node {
    uint64_t parent;  // parent id (0: a top-level path, or "/" itself) | kVisible | kDigitKids
    uint64_t leaf;    // where the leaf is: leaf_bytes_ chunk << 32 | offset in the chunk
  };
  // Explicit nodes get ids in runs: ids [first_id, first_id + count) are nodes
  // [first_node, first_node + count). Ranges take the ids between runs.
  struct Run {
    uint64_t first_id, first_node, count;
  };
  static constexpr uint64_t kVisible = uint64_t(1) << 63;
  // Set on a node with an explicit child whose leaf ends in a digit (intern_range's check).
  static constexpr uint64_t kDigitKids = uint64_t(1) << 62;
  static constexpr uint64_t kParentBits = kDigitKids - 1;
  static constexpr size_t kLeafChunk = size_t(1) << 20;

  // Require mutex_ (shared or unique).
  std::string_view leaf_of(const Node& n) const;
  uint64_t node_id(uint64_t node) const;            // node index -> id
  bool node_of(uint64_t id, uint64_t& node) const;  // id -> node index
  const Range* range_at(uint64_t id) const;         // the range holding `id`, or null
  uint64_t parent_of(uint64_t id) const;            // 0 at the top
  uint64_t tree_parent(uint64_t id) const;          // parent(): "/" at the top, once it exists
  uint64_t child(uint64_t parent, std::string_view leaf, uint32_t hash) const;  // 0: none
  uint64_t block_child(uint64_t parent, std::string_view leaf) const;           // 0: none
  uint64_t range_member(uint64_t parent, std::string_view leaf) const;          // 0: none
  uint64_t find_parent(std::string_view path) const;  // 0 if an ancestor is missing
  std::string path_locked(uint64_t id) const;         // hidden nodes too
  bool visible(uint64_t id) const;
  // Require mutex_ unique.
  uint64_t insert(uint64_t parent, std::string_view leaf, uint32_t hash, bool visible);
  // insert() of a node whose leaf is stored already (`leaf`: a Node::leaf of another node), and
  // whose digit counter the caller keeps.
  uint64_t insert_shared(uint64_t parent, uint64_t leaf, uint32_t hash, bool visible);
  // Ids [first_id, first_id + count) are nodes [first_node, ...) just pushed: the runs say so
  // (the last run grown when they follow it; room for a new one reserved by the caller).
  void add_ids(uint64_t first_id, uint64_t first_node, uint64_t count);
  // Node `node`'s entry in the hash index (room made by the caller: grow_index).
  void index_node(uint64_t node, uint32_t hash);
  uint64_t intern_locked(std::string_view path);
  uint64_t make_parent(std::string_view path);
  void make_visible(uint64_t id);
  // intern_copies when no copy exists yet: every copy a node in one run of ids, target after
  // target, only those right below a target in the hash index (a Block finds the rest); returns
  // the block's first id. 0, changing nothing, when a copy exists. May throw std::bad_alloc,
  // changing nothing.
  // Per node of a shape: where its source's leaf is stored, the leaf, its hash (leaf_hash) and
  // whether it ends in a digit. Requires mutex_.
  // A range member's leaf is made here (`names`), and its `leaf` is 0 (it has no node); `range`
  // is the index of its range in `ranges` (the distinct ranges of the shape's members).
  struct ShapeLeaves {
    std::vector<uint64_t> leaf;
    std::vector<std::string_view> view;
    std::vector<uint64_t> hash;
    std::vector<char> numeric;
    std::vector<std::string> names;
    std::vector<uint32_t> range;
    std::vector<Range> ranges;           // (copies: making ranges moves ranges_)
    std::vector<uint32_t> range_parent;  // per range: the shape node of its parent
  };
  ShapeLeaves shape_leaves(const std::vector<ShapeNode>& shape) const;
  // Whether a range (prefix, begin, count) can be made under `parent` (intern_range's check):
  // the first id of the same range made before; else 0, with `why` set when another range or
  // an explicit path there could have a member's name (else left empty). Requires mutex_.
  uint64_t range_conflict(uint64_t parent, std::string_view prefix, uint64_t begin, uint64_t count,
                          std::string& why) const;
  // Makes that range (checked by range_conflict) and returns its first id. Requires mutex_
  // unique. May throw std::bad_alloc, changing nothing.
  uint64_t add_range(uint64_t parent, std::string_view prefix, uint64_t begin, uint64_t count);
  // What refuses the copy of range `source` for `target` under `parent` (range_conflict's `why`).
  std::string range_copy_conflict(const Range& source, uint64_t target, uint64_t parent,
                                  const std::string& why) const;
  // find_copies' `conflict` for the ranges of `l` whose parent copies `copy_of(t, node)` gives
  // (0: not in the tree, so nothing is there to conflict). Requires mutex_.
  template <class CopyOf>
  void check_copy_ranges(const uint64_t* targets, size_t nt, const ShapeLeaves& l, CopyOf copy_of,
                         std::string& conflict) const;
  uint64_t make_block(const uint64_t* targets, size_t nt, const std::vector<ShapeNode>& shape,
                      const ShapeLeaves& l);
  // Whether `parent` has an explicit child whose leaf ends in a digit; note one (a node's bit,
  // else numeric_children_'s entry: may throw std::bad_alloc for a range member or the top).
  bool has_digit_children(uint64_t parent) const;
  void note_digit_child(uint64_t parent);
  void grow_index();

  static uint32_t hash_of(uint64_t parent, std::string_view leaf);
  static uint64_t leaf_hash(std::string_view leaf);
  static uint32_t child_hash(uint64_t parent, uint64_t leaf_hash);

  mutable std::shared_mutex mutex_;
  ChunkedArray<Node> nodes_;
  std::vector<Run> runs_;
  std::vector<std::unique_ptr<char[]>> leaf_chunks_;
  std::vector<size_t> leaf_chunk_sizes_;
  size_t leaf_used_ = 0;  // bytes used in the last chunk
  // Open addressing, linear probing: slot = hash << 32 | (node index + 1), 0 = empty.
  std::vector<uint64_t> index_;
  uint64_t next_id_ = 1;
  uint64_t root_ = 0;          // the id of "/" once it exists
  std::vector<Range> ranges_;  // by first id (allocated in increasing order)
  // The copies of one intern_copies that made them all (kstage_clone): ids [first, first + nt *
  // ns), copy k of target t at first + t * ns + k, each a node; those below a copy (not right
  // below a target) have no hash-index entry: child() finds them here, by the shape's children
  // of their parent's node. By first id.
  struct Block {
    uint64_t first = 0, nt = 0, ns = 0;
    std::vector<std::vector<uint32_t>> kids;  // per shape node: its children's nodes
    std::vector<std::string> leaves;          // per shape node
  };
  std::vector<Block> blocks_;
  std::unordered_multimap<uint64_t, size_t> ranges_by_parent_;
  // Explicit children whose leaf ends in a digit, per parent that is not a node (a range
  // member, the top): a range under a parent with none cannot collide with an explicit path
  // (checked in O(1)). A node parent carries kDigitKids instead.
  std::unordered_map<uint64_t, uint64_t> numeric_children_;
  const uint64_t serial_;  // tells this tree apart in the per-thread parent cache

  mutable std::mutex strings_mutex_;
  mutable std::unordered_map<uint64_t, std::unique_ptr<const std::string>> strings_;
  mutable std::unordered_map<uint64_t, std::unique_ptr<const RangeStrings>> range_strings_;
};

}  // namespace kstage::core
