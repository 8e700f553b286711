// SPDX-License-Identifier: Apache-2.0
/**
 * \file kstage/hpp/handles.hpp
 * \brief The C++ API's handles of paths, queries and ops: PathList, Query and Op,
 * each releasing its C handle once.
 *
 * Part of the C++ API: include `kstage/kstage.hpp`, which includes every part and whose
 * file comment states the rules (handles, the two error forms, Views).
 */
#ifndef KSTAGE_HPP_HANDLES_HPP_
#define KSTAGE_HPP_HANDLES_HPP_

#include <kstage/hpp/span.hpp>
#include <kstage/hpp/status.hpp>
#include <kstage/kstage.h>

#include <cstdint>
#include <memory>
#include <utility>

namespace kstage {

namespace detail {

// One C handle of a stage, released once with Release(stage, handle).
template <kstage_status_t (*Release)(kstage_stage_t, uint64_t)>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  // `owned` false: a handle someone else releases (see Query::borrow).
  UniqueHandle(kstage_stage_t stage, uint64_t handle, bool owned = true) noexcept
      : stage_(stage), handle_(handle), owned_(owned) {}
  UniqueHandle(UniqueHandle&& o) noexcept
      : stage_(std::exchange(o.stage_, 0)),
        handle_(std::exchange(o.handle_, 0)),
        owned_(o.owned_) {}
  UniqueHandle& operator=(UniqueHandle&& o) noexcept {
    if (this != &o) {
      reset();
      stage_ = std::exchange(o.stage_, 0);
      handle_ = std::exchange(o.handle_, 0);
      owned_ = o.owned_;
    }
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;
  ~UniqueHandle() { reset(); }

  kstage_stage_t stage() const noexcept { return stage_; }
  uint64_t get() const noexcept { return handle_; }
  explicit operator bool() const noexcept { return handle_ != 0; }
  /// Releases the handle now (a status other than OK is that of the release).
  kstage_status_t reset() noexcept {
    kstage_status_t st = KSTAGE_OK;
    if (handle_ != 0 && owned_) st = Release(stage_, handle_);
    stage_ = 0;
    handle_ = 0;
    return st;
  }
  /// Gives the handle up without releasing it.
  uint64_t release() noexcept {
    stage_ = 0;
    return std::exchange(handle_, 0);
  }

 private:
  kstage_stage_t stage_ = 0;
  uint64_t handle_ = 0;
  bool owned_ = true;
};

}  // namespace detail

// ---- handles -----------------------------------------------------------------------------------

class Stage;
class Map;

/// \brief A refcounted, immutable array of path ids (kstage_path_list_t), one reference.
class PathList {
 public:
  /// An empty PathList.
  PathList() = default;
  /// The C handle (0 when empty); this object still holds its reference.
  kstage_path_list_t handle() const noexcept { return h_.get(); }
  /// True when the object holds a list.
  explicit operator bool() const noexcept { return bool(h_); }
  /// The ids (empty for an empty PathList).
  span<const kstage_path_t> paths() const noexcept {
    const kstage_path_t* p = nullptr;
    uint64_t n = 0;
    if (!h_ || kstage_path_list_get(h_.stage(), h_.get(), &p, &n) != KSTAGE_OK) return {};
    return {p, size_t(n)};
  }
  /// Drops this object's reference now (kstage_path_list_release).
  void reset() noexcept { h_.reset(); }

 private:
  friend class Stage;
  friend class Query;
  PathList(kstage_stage_t s, kstage_path_list_t h) : h_(s, h) {}
  detail::UniqueHandle<kstage_path_list_release> h_;
};

/// \brief A fixed, ordered list of prims (kstage_query_t). Calls that can fail come in
/// the two forms of the file comment (Errors): with a trailing `Status&`, which records a
/// failure and returns an empty value, and without it, throwing kstage::Error.
class Query {
 public:
  /// An empty Query.
  Query() = default;
  /// A Query over a handle that C code owns and releases (never released here).
  static Query borrow(kstage_stage_t stage, kstage_query_t query) noexcept {
    Query q;
    q.h_ = detail::UniqueHandle<kstage_query_release>(stage, query, false);
    return q;
  }
  /// The C handle (0 when empty), still owned by this object (unless borrowed).
  kstage_query_t handle() const noexcept { return h_.get(); }
  /// The stage the query belongs to (0 when empty).
  kstage_stage_t stage() const noexcept { return h_.stage(); }
  /// True when the object holds a query.
  explicit operator bool() const noexcept { return bool(h_); }

  /// The number of prims in the query (kstage_query_count); 0 on failure.
  uint64_t count(Status& st) const {
    uint64_t n = 0;
    detail::check(kstage_query_count(h_.stage(), h_.get(), &n), st);
    return n;
  }
  /// The query's prims as a new PathList (kstage_query_get_paths); empty on failure.
  PathList paths(Status& st) const {
    kstage_path_list_t list = 0;
    if (!detail::check(kstage_query_get_paths(h_.stage(), h_.get(), &list), st)) return {};
    return PathList(h_.stage(), list);
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As count(Status&) const, throwing kstage::Error on failure.
  uint64_t count() const {
    return detail::throwing([&](Status& st) { return count(st); });
  }
  /// As paths(Status&) const, throwing kstage::Error on failure.
  PathList paths() const {
    return detail::throwing([&](Status& st) { return paths(st); });
  }
#endif
  /// Releases the query now (kstage_query_release; nothing for a borrowed one). Reads, maps
  /// and ops made from it are unaffected.
  void reset() noexcept { h_.reset(); }

 private:
  friend class Stage;
  Query(kstage_stage_t s, kstage_query_t h) : h_(s, h) {}
  detail::UniqueHandle<kstage_query_release> h_;
};

/**
 * \brief A submitted mutation (kstage_op_t). Releasing it does not cancel its work.
 *
 * The sources of a write must stay valid until its work is done (kstage.h): a
 * write from a host View into a device column copies after the call returns.
 * An Op of a write from Views therefore keeps those Views (and so their
 * memory, for managed Views) until wait() sees the work done; destroying or
 * resetting it before then waits for the work first. Unmanaged Views and
 * DLTensors own no memory: their memory must outlive the op, as in C.
 */
class Op {
 public:
  /// An empty Op.
  Op() = default;
  /// Takes `o`'s op and the Views it keeps; `o` is left empty.
  Op(Op&& o) noexcept = default;
  /// Releases this op (see reset()), then takes `o`'s.
  Op& operator=(Op&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::move(o.h_);
      keep_ = std::move(o.keep_);
    }
    return *this;
  }
  ~Op() { reset(); }
  /// The C handle (0 when empty), still owned by this object.
  kstage_op_t handle() const noexcept { return h_.get(); }
  /// True when the object holds an op.
  explicit operator bool() const noexcept { return bool(h_); }

  /// True once the op's work is done; false if `timeout_ns` ran out (KSTAGE_TIMEOUT is
  /// not an error). A failed op leaves its code and kstage_op_error() in `st`.
  bool wait(uint64_t timeout_ns, Status& st) {
    const kstage_status_t code = kstage_wait(h_.stage(), h_.get(), timeout_ns);
    if (code != KSTAGE_TIMEOUT) keep_.reset();  // done (or failed): the sources are free
    if (code == KSTAGE_TIMEOUT || code == KSTAGE_OK) {
      if (!st.ok()) st = Status();
      return code == KSTAGE_OK;
    }
    const char* why = nullptr;
    if (kstage_op_error(h_.stage(), h_.get(), &why) == KSTAGE_OK && why != nullptr && *why)
      st = Status(code, why);
    else st = Status(code, kstage_last_error());
    return false;
  }
  /// Waits until the op's work is done: wait(KSTAGE_TIMEOUT_INFINITE, st).
  bool wait(Status& st) { return wait(KSTAGE_TIMEOUT_INFINITE, st); }
#if KSTAGE_CPP_EXCEPTIONS
  /// As wait(uint64_t, Status&), throwing kstage::Error when the op failed (a timeout is
  /// still false, not an error).
  bool wait(uint64_t timeout_ns = KSTAGE_TIMEOUT_INFINITE) {
    return detail::throwing([&](Status& st) { return wait(timeout_ns, st); });
  }
#endif
  /// Orders a consumer's {stream, event} after the op's device work (kstage_op_sync): for a
  /// write, its copies out of the producer's buffers, which the producer may reuse once the
  /// consumer's stream or event is past them. A host op takes {0, 0} only.
  void sync(kstage_device_sync_t consumer, Status& st) const {
    detail::check(kstage_op_sync(h_.stage(), h_.get(), consumer), st);
  }
#if KSTAGE_CPP_EXCEPTIONS
  /// As sync(kstage_device_sync_t, Status&) const, throwing kstage::Error on failure.
  void sync(kstage_device_sync_t consumer) const {
    detail::throwing([&](Status& st) { sync(consumer, st); });
  }
#endif
  /// Releases the op (after waiting for its work if it still holds the write's Views).
  void reset() noexcept {
    if (keep_ && h_) kstage_wait(h_.stage(), h_.get(), KSTAGE_TIMEOUT_INFINITE);
    keep_.reset();
    h_.reset();
  }

 private:
  friend class Stage;
  friend class Map;
  friend class MapGroup;
  Op(kstage_stage_t s, kstage_op_t h, std::shared_ptr<void> keep = nullptr)
      : h_(s, h), keep_(std::move(keep)) {}
  detail::UniqueHandle<kstage_release_op> h_;
  std::shared_ptr<void> keep_;  // the write's source Views, until its work is done
};

}  // namespace kstage

#endif  // KSTAGE_HPP_HANDLES_HPP_
