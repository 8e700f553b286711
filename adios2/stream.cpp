// SPDX-License-Identifier: Apache-2.0
// The bridge's C API outside the steps: messages, the stream table, open and close, and the
// checkpoint and restart that open a BP5 file themselves.
#include "adios2/bridge.hpp"
#include "adios2/durable.hpp"
#include "adios2/manifest.hpp"

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <unordered_map>

namespace kstage::adios2_bridge {
namespace {

thread_local std::string last_message;

std::mutex table_mutex;
std::unordered_map<kstage_adios2_stream_t, std::shared_ptr<Stream>>& table() {
  static auto* t = new std::unordered_map<kstage_adios2_stream_t, std::shared_ptr<Stream>>();
  return *t;  // never destroyed: streams still open at exit are not closed behind ADIOS2's back
}
kstage_adios2_stream_t next_handle = 1;

void remove_old_manifest(const std::string& folder) {
  const std::string manifest = (std::filesystem::path(folder) / kManifestName).string();
  std::error_code ec;
  if (!std::filesystem::remove(manifest, ec)) return;  // none (or not a folder yet)
  sync_path(folder);
}

// ADIOS2's message without its terminal colours (ESC [ ... m) and trailing line breaks.
std::string plain_text(const char* message) {
  std::string out;
  for (const char* c = message; *c != '\0'; ++c) {
    if (*c == '\x1b' && c[1] == '[') {
      const char* end = c + 2;
      while (*end != '\0' && *end != 'm') ++end;
      if (*end == 'm') {
        c = end;
        continue;
      }
    }
    out += *c;
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

void fail(kstage_status_t status, const char* format, ...) {
  char buffer[2048];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  throw Failure{status, buffer};
}

void check(kstage_status_t status, const char* what) {
  if (status != KSTAGE_OK) fail(status, "%s: %s", what, kstage_last_error());
}

Failure current_failure() noexcept {
  try {
    try {
      throw;
    } catch (const Failure& f) {
      return f;
    } catch (const std::bad_alloc&) {
      return Failure{KSTAGE_OUT_OF_MEMORY, "out of memory"};
    } catch (const std::exception& e) {
      // ADIOS2 reports with exceptions: a file it cannot read, an engine that fails.
      return Failure{KSTAGE_OP_FAILED, "ADIOS2: " + plain_text(e.what())};
    } catch (...) {
      return Failure{KSTAGE_INTERNAL, "an unknown exception"};
    }
  } catch (...) {  // no memory for the message
    return Failure{KSTAGE_OUT_OF_MEMORY, {}};
  }
}

void note(kstage_log_severity_t severity, const char* format, ...) noexcept {
  char buffer[2048];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  (void)kstage_log_message(severity, "adios2", buffer);
}

void note_swallowed(const char* what) noexcept {
  const Failure f = current_failure();
  note(KSTAGE_LOG_WARNING, "%s failed, which nothing else reports: %s", what,
       f.message.empty() ? "out of memory" : f.message.c_str());
}

kstage_status_t guard(const std::function<void()>& body) noexcept {
  try {
    body();
    return KSTAGE_OK;
  } catch (...) {
    Failure f = current_failure();
    try {
      last_message =
          f.message.empty() && f.status == KSTAGE_OUT_OF_MEMORY ? "out of memory" : f.message;
    } catch (...) {
    }
    return f.status;
  }
}

std::vector<std::vector<uint64_t>> allgather_values(Collective& ranks,
                                                    const std::vector<uint64_t>& mine) {
  const std::vector<std::string> all = ranks.allgather(
      std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(uint64_t)));
  std::vector<std::vector<uint64_t>> out(all.size(), std::vector<uint64_t>(mine.size()));
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != mine.size() * sizeof(uint64_t))
      fail(KSTAGE_INTERNAL, "rank %zu sent %zu bytes, not %zu", r, all[r].size(),
           mine.size() * sizeof(uint64_t));
    std::memcpy(out[r].data(), all[r].data(), all[r].size());
  }
  return out;
}

void agree(Collective& ranks, const char* what, const std::function<void()>& local) {
  if (ranks.size() == 1) {
    local();
    return;
  }
  Failure mine{KSTAGE_OK, {}};
  try {
    local();
  } catch (...) {
    mine = current_failure();
  }
  // Each rank's outcome: its status (4 bytes), then its message.
  std::string outcome(sizeof(int32_t), '\0');
  const int32_t status = mine.status;
  std::memcpy(&outcome[0], &status, sizeof status);
  outcome += mine.message;
  const std::vector<std::string> all = ranks.allgather(outcome);
  if (mine.status != KSTAGE_OK) throw mine;
  for (size_t r = 0; r < all.size(); ++r) {
    int32_t st = KSTAGE_OK;
    if (all[r].size() >= sizeof st) std::memcpy(&st, all[r].data(), sizeof st);
    if (st != KSTAGE_OK)
      fail(st, "%s failed on rank %zu of %zu: %s", what, r, all.size(), all[r].c_str() + sizeof st);
  }
}

std::string dtype_name(DLDataType d) {
  const char* kind = nullptr;
  switch (d.code) {
    case kDLInt: kind = "int"; break;
    case kDLUInt: kind = "uint"; break;
    case kDLFloat: kind = "float"; break;
    case kDLBfloat: kind = "bfloat"; break;
    case kDLComplex: kind = "complex"; break;
    case kDLBool: kind = "bool"; break;
  }
  if (kind == nullptr)
    return "{code " + std::to_string(d.code) + ", " + std::to_string(d.bits) + " bits} x " +
           std::to_string(d.lanes);
  return std::string(kind) + std::to_string(d.bits) + " x " + std::to_string(d.lanes);
}

std::shared_ptr<Stream> find_stream(kstage_adios2_stream_t handle) {
  std::lock_guard lock(table_mutex);
  auto it = table().find(handle);
  if (it == table().end())
    fail(KSTAGE_INVALID_HANDLE, "stream %llu is not an open kstage_adios2 stream",
         (unsigned long long)handle);
  return it->second;
}

kstage_adios2_stream_t add_stream(std::shared_ptr<Stream> s) {
  std::lock_guard lock(table_mutex);
  const kstage_adios2_stream_t h = next_handle++;
  table().emplace(h, std::move(s));
  return h;
}

std::shared_ptr<Stream> remove_stream(kstage_adios2_stream_t handle) {
  std::lock_guard lock(table_mutex);
  auto it = table().find(handle);
  if (it == table().end())
    fail(KSTAGE_INVALID_HANDLE, "stream %llu is not an open kstage_adios2 stream (closed twice?)",
         (unsigned long long)handle);
  std::shared_ptr<Stream> s = std::move(it->second);
  table().erase(it);
  return s;
}

kstage_adios2_open_desc_t read_open_desc(const kstage_adios2_open_desc_t* in) {
  kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
  // The first layout ends at inline_writer; `manifest` was appended after it.
  constexpr size_t kFirstLayout = offsetof(kstage_adios2_open_desc_t, manifest);
  copy_descriptor(in, d, "kstage_adios2_open_desc_init", kFirstLayout);
  if (in && in->struct_size < kFirstLayout + sizeof(d.manifest) && d.manifest != 0)
    fail(KSTAGE_INVALID_ARGUMENT,
         "desc.struct_size %u cuts field 'manifest', whose bytes inside it must then be zero",
         unsigned(in->struct_size));
  if (d.manifest < KSTAGE_ADIOS2_MANIFEST_DEFAULT || d.manifest > KSTAGE_ADIOS2_MANIFEST_REQUIRED)
    fail(KSTAGE_INVALID_ARGUMENT,
         "desc.manifest is %d: KSTAGE_ADIOS2_MANIFEST_DEFAULT, _IF_PRESENT or _REQUIRED (0 to 2)",
         int(d.manifest));
  if (d.mode != KSTAGE_ADIOS2_WRITE && d.mode != KSTAGE_ADIOS2_READ)
    fail(KSTAGE_INVALID_ARGUMENT,
         "desc.mode is %d: KSTAGE_ADIOS2_WRITE (0) or KSTAGE_ADIOS2_READ (1)", int(d.mode));
  for (const char* const* p = d.parameters; p && *p; p += 2)
    if (p[1] == nullptr)
      fail(KSTAGE_INVALID_ARGUMENT, "desc.parameters: key '%s' has no value (pairs, then NULL)",
           p[0]);
  return d;
}

kstage_adios2_stream_t open_stream(
    const char* name, const kstage_adios2_open_desc_t* desc,
    const std::function<std::shared_ptr<adios2::ADIOS>()>& make_adios,
    std::shared_ptr<Collective> ranks) {
  if (name == nullptr || *name == '\0') fail(KSTAGE_INVALID_ARGUMENT, "name is NULL or empty");
  const kstage_adios2_open_desc_t d = read_open_desc(desc);
  const std::string engine = d.engine ? d.engine : "BP5";
  std::string engine_lower = engine;
  for (char& c : engine_lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  const bool engine_is_bp5 = engine_lower == "bp5" || engine_lower == "file";
  const bool engine_reads_files = engine_is_bp5 || engine_lower == "bp4" || engine_lower == "bp3";
  auto s = std::make_shared<Stream>();
  s->mode = d.mode;
  s->ranks = std::move(ranks);
  s->keeps_step_data = is_inline_engine(d.engine);
  if (d.inline_writer != 0) {  // (kstage_adios2_open_mpi refuses Inline on several ranks)
    if (d.mode != KSTAGE_ADIOS2_READ)
      fail(KSTAGE_INVALID_ARGUMENT,
           "desc.inline_writer is for a reader (desc.mode KSTAGE_ADIOS2_READ)");
    s->inline_writer = find_stream(d.inline_writer);
    if (s->inline_writer->mode != KSTAGE_ADIOS2_WRITE)
      fail(KSTAGE_INVALID_ARGUMENT, "desc.inline_writer %llu is a reader",
           (unsigned long long)d.inline_writer);
    s->adios = s->inline_writer->adios;
    s->io = s->inline_writer->io;
    s->keeps_step_data = s->inline_writer->keeps_step_data;
  } else {
    s->adios = make_adios();
    s->io = s->adios->DeclareIO(std::string("kstage:") + name);
    s->io.SetEngine(engine);
    for (const char* const* p = d.parameters; p && *p; p += 2) s->io.SetParameter(p[0], p[1]);
    // A reader of files: every read ADIOS2 makes through C stdio, whose read of bytes a file does
    // not have fails at once (OP_FAILED naming the file). ADIOS2's default POSIX transport waits
    // for such bytes to appear -- for a writer still writing, forever; after its close, about a
    // minute with FailOnEOF -- so a file cut short, or cut after its manifest was checked, would
    // hold a restart (docs/adios2.md, "Bounded reads").
    if (d.mode == KSTAGE_ADIOS2_READ && engine_reads_files)
      s->io.AddTransport("File", {{"Library", "stdio"}});
  }
  // A reader that asked: the folder checked against its manifest before ADIOS2 reads a byte
  // (by rank 0, the ranks agreeing on the outcome before ADIOS2's collective open).
  if (d.mode == KSTAGE_ADIOS2_READ && d.manifest != KSTAGE_ADIOS2_MANIFEST_DEFAULT && engine_is_bp5)
    agree(*s->ranks, "kstage_adios2_open", [&] {
      if (s->ranks->rank() == 0 &&
          verify_folder(name, d.manifest, false, "kstage_adios2_open", &s->verified_sizes))
        s->verified_folder = name;
    });
  // A writer replacing a sealed folder: its old manifest goes first (durably), so that no
  // instant of the rewrite shows the old seal over new files.
  if (d.mode == KSTAGE_ADIOS2_WRITE && engine_is_bp5 && s->ranks->rank() == 0)
    remove_old_manifest(name);
  try {
    s->engine =
        s->io.Open(name, d.mode == KSTAGE_ADIOS2_WRITE ? adios2::Mode::Write : adios2::Mode::Read);
  } catch (const std::invalid_argument& e) {
    // An engine type ADIOS2 does not know (or was not built with) is refused here.
    fail(KSTAGE_NOT_SUPPORTED, "ADIOS2 cannot open '%s' with engine '%s': %s", name, engine.c_str(),
         e.what());
  }
  // By the engine ADIOS2 opened (an engine type of "File" is chosen by the file's name and, to
  // read, its format).
  s->device_memory = kTakesDeviceMemory && takes_gpu_buffers(s->engine.Type());
  s->name = name;
  s->seals = d.mode == KSTAGE_ADIOS2_WRITE && s->engine.Type() == "BP5Writer";
  if (d.mode == KSTAGE_ADIOS2_WRITE) {
    s->io.DefineAttribute<std::string>(layout::kFormat, "kstage");
    s->io.DefineAttribute<uint32_t>(layout::kFormatVersion, layout::kVersion);
  }
  return add_stream(std::move(s));
}

void checkpoint_with(kstage_stage_t stage, const char* path, Collective& ranks, const char* what,
                     const Opener& open) {
  struct Held {  // the query, released however this ends
    kstage_stage_t stage;
    kstage_query_t q = 0;
    ~Held() {
      if (q) kstage_query_release(stage, q);
    }
  } held{stage};
  agree(ranks, what, [&] {  // every rank's query, or none
    if (path == nullptr || *path == '\0') fail(KSTAGE_INVALID_ARGUMENT, "path is NULL or empty");
    kstage_filter_t all{};
    check(kstage_query_filter(stage, &all, &held.q),
          (std::string(what) + ": the stage's prims").c_str());
  });
  kstage_adios2_stream_t s = 0;
  kstage_status_t st = open(path, nullptr, &s);
  if (st == KSTAGE_OK) st = kstage_adios2_write_step(s, stage, held.q, nullptr, 0, nullptr);
  const std::string message = st == KSTAGE_OK ? "" : last_message;
  if (s != 0) {
    const kstage_status_t closed = kstage_adios2_close(s);
    if (st == KSTAGE_OK) st = closed;
    else if (closed != KSTAGE_OK)
      note(KSTAGE_LOG_WARNING, "%s: closing '%s' after a failed write also failed: %s", what, path,
           last_message.c_str());
  }
  if (st != KSTAGE_OK) throw Failure{st, message.empty() ? last_message : message};
}

void restart_with(kstage_stage_t stage, const char* path, uint64_t* ordinal, Collective& ranks,
                  const char* what, const Opener& open, kstage_adios2_manifest_t manifest) {
  std::map<std::string, uint64_t> verified_sizes;  // rank 0's, of a folder with a manifest
  agree(ranks, what, [&] {
    if (path == nullptr || *path == '\0') fail(KSTAGE_INVALID_ARGUMENT, "path is NULL or empty");
    if (manifest < KSTAGE_ADIOS2_MANIFEST_DEFAULT || manifest > KSTAGE_ADIOS2_MANIFEST_REQUIRED)
      fail(KSTAGE_INVALID_ARGUMENT,
           "desc.manifest is %d: KSTAGE_ADIOS2_MANIFEST_DEFAULT, _IF_PRESENT or _REQUIRED (0 to "
           "2)",
           int(manifest));
    // Before ADIOS2 opens anything (rank 0 reads the files; the ranks agree on the outcome).
    if (ranks.rank() == 0)
      verify_folder(path, manifest, manifest == KSTAGE_ADIOS2_MANIFEST_DEFAULT, what,
                    &verified_sizes);
  });
  kstage_adios2_open_desc_t d = kstage_adios2_open_desc_init();
  d.mode = KSTAGE_ADIOS2_READ;
  // A file cut short is not waited for (BP5 would wait for a writer to complete it).
  const char* parameters[] = {"OpenTimeoutSecs", "0", nullptr};
  d.parameters = parameters;
  kstage_adios2_stream_t s = 0;
  kstage_status_t st = open(path, &d, &s);
  uint64_t last = 0, steps = 0;
  while (st == KSTAGE_OK) {
    uint64_t o = 0;
    // A file's steps are all there: one that is not ready at once never will be (a file
    // cut short, or one a writer still has open), so do not wait for it. A file cut since its
    // manifest was checked is refused before ADIOS2 reads it (whose read past a file's end
    // waits forever).
    // (Agreed: rank 0 holds the sizes, and a rank that stopped alone would leave the others
    // waiting in the step's collectives.)
    st = guard([&] {
      agree(ranks, what, [&] {
        if (!verified_sizes.empty()) check_extents(path, verified_sizes, what);
      });
    });
    if (st != KSTAGE_OK) break;
    st = kstage_adios2_read_step(s, stage, 0, &o);
    if (st == KSTAGE_TIMEOUT) {
      st = KSTAGE_OP_FAILED;
      last_message =
          std::string(what) + ": '" + path +
          "' ends in an incomplete step (the file was cut short, or a writer still has it open)";
    }
    if (st == KSTAGE_OK) {
      last = o;
      ++steps;
    }
  }
  if (st == KSTAGE_END_OF_ITERATION && steps == 0) {
    st = KSTAGE_INVALID_ARGUMENT;
    last_message = std::string(what) + ": '" + path + "' has no steps";
  }
  const std::string message = st == KSTAGE_END_OF_ITERATION ? "" : last_message;
  if (s != 0 && kstage_adios2_close(s) != KSTAGE_OK)
    note(KSTAGE_LOG_WARNING,
         "%s: closing '%s' after reading it failed, which nothing else "
         "reports: %s",
         what, path, last_message.c_str());
  if (st != KSTAGE_END_OF_ITERATION) throw Failure{st, message};
  if (ordinal) *ordinal = last;
}

namespace {

// The file name a pointer file holds (its first line), or "" when there is no pointer.
std::string read_pointer(const std::string& pointer, const char* what) {
  std::error_code ec;
  if (!std::filesystem::exists(pointer, ec)) return {};
  // A pointer is one short line: a larger file is not one.
  if (std::filesystem::file_size(pointer, ec) > 4096 || ec)
    fail(KSTAGE_INVALID_ARGUMENT, "%s: '%s' is not a checkpoint pointer (one short line)", what,
         pointer.c_str());
  std::ifstream in(pointer);
  std::string name;
  std::getline(in, name);
  if (!in && !in.eof())
    fail(KSTAGE_OP_FAILED, "%s: cannot read the pointer '%s'", what, pointer.c_str());
  return name;
}

std::string beside(const std::string& pointer, const std::string& name) {
  if (!name.empty() && name.front() == '/') return name;
  return (std::filesystem::path(parent_folder(pointer)) / name).string();
}

}  // namespace

void checkpoint_latest_with(kstage_stage_t stage, const char* pointer, Collective& ranks,
                            const char* what, const Opener& open) {
  std::string target;
  agree(ranks, what, [&] {
    if (pointer == nullptr || *pointer == '\0')
      fail(KSTAGE_INVALID_ARGUMENT, "pointer is NULL or empty");
    // The one of the two the pointer does not name: the latest complete one is never touched.
    // (Rank 0 reads the pointer; every rank writes the checkpoint it chose.)
    if (ranks.rank() != 0) return;
    const std::string base = std::filesystem::path(pointer).filename().string();
    const std::string named = read_pointer(pointer, what);
    target = named == base + ".0" ? base + ".1" : base + ".0";
  });
  if (ranks.size() > 1) target = ranks.allgather(target)[0];
  const std::string folder = beside(pointer, target);
  checkpoint_with(stage, folder.c_str(), ranks, what, open);  // flushed and sealed at its close
  agree(ranks, what, [&] {
    if (ranks.rank() == 0) replace_file_durably(pointer, target + "\n");
  });
}

void restart_latest_with(kstage_stage_t stage, const char* pointer, uint64_t* ordinal,
                         Collective& ranks, const char* what, const Opener& open) {
  std::string folder;
  agree(ranks, what, [&] {
    if (pointer == nullptr || *pointer == '\0')
      fail(KSTAGE_INVALID_ARGUMENT, "pointer is NULL or empty");
    if (ranks.rank() != 0) return;  // (rank 0 reads the pointer: every rank restarts the same)
    const std::string named = read_pointer(pointer, what);
    if (named.empty())
      fail(KSTAGE_INVALID_ARGUMENT, "%s: '%s' names no checkpoint (no pointer, or an empty one)",
           what, pointer);
    folder = beside(pointer, named);
  });
  if (ranks.size() > 1) folder = ranks.allgather(folder)[0];
  restart_with(stage, folder.c_str(), ordinal, ranks, what, open, KSTAGE_ADIOS2_MANIFEST_REQUIRED);
}

}  // namespace kstage::adios2_bridge

using namespace kstage::adios2_bridge;

extern "C" {

const char* kstage_adios2_last_error(void) { return last_message.c_str(); }

kstage_status_t kstage_adios2_open(const char* name, const kstage_adios2_open_desc_t* desc,
                                   kstage_adios2_stream_t* stream) {
  return guard([&] {
    if (stream == nullptr) fail(KSTAGE_INVALID_ARGUMENT, "stream is NULL");
    *stream = open_stream(
        name, desc, [] { return std::make_shared<adios2::ADIOS>(); },
        std::make_shared<Collective>());
  });
}

kstage_status_t kstage_adios2_close(kstage_adios2_stream_t stream) {
  return guard([&] {
    std::shared_ptr<Stream> s = remove_stream(stream);
    std::lock_guard lock(s->mutex);
    if (s->step_open) s->engine.EndStep();
    s->engine.Close();
    s->last_step_data.reset();
    s->parked_reads.clear();  // ADIOS2 performs no more Gets
    if (s->seals) {
      // Every rank's files are complete (each closed), then rank 0 seals the folder -- unless a
      // step on some rank failed half-way: a folder holding an incomplete step gets no manifest
      // (a verified restart refuses it).
      Collective& all = *s->ranks;
      bool incomplete = s->incomplete_step;
      if (all.size() > 1)
        for (const std::vector<uint64_t>& r : allgather_values(all, {uint64_t(incomplete)}))
          incomplete = incomplete || r[0] != 0;
      if (incomplete) {
        note(KSTAGE_LOG_WARNING,
             "kstage_adios2_close: '%s' holds a step whose write failed: not sealed (no manifest)",
             s->name.c_str());
        return;
      }
      Collective& ranks = *s->ranks;
      agree(ranks, "kstage_adios2_close: sealing the folder", [&] {
        if (ranks.rank() == 0) seal_folder(s->name, SealFacts{s->steps_written, s->last_ordinal});
      });
    }
  });
}

kstage_status_t kstage_adios2_checkpoint(kstage_stage_t stage, const char* path) {
  return guard([&] {
    Collective alone;
    checkpoint_with(stage, path, alone, "kstage_adios2_checkpoint", kstage_adios2_open);
  });
}

kstage_status_t kstage_adios2_restart(kstage_stage_t stage, const char* path, uint64_t* ordinal) {
  return guard([&] {
    Collective alone;
    restart_with(stage, path, ordinal, alone, "kstage_adios2_restart", kstage_adios2_open);
  });
}

kstage_status_t kstage_adios2_restart_ex(kstage_stage_t stage, const char* path,
                                         const kstage_adios2_restart_desc_t* desc,
                                         uint64_t* ordinal) {
  return guard([&] {
    kstage_adios2_restart_desc_t d = kstage_adios2_restart_desc_init();
    copy_descriptor(desc, d, "kstage_adios2_restart_desc_init");
    Collective alone;
    restart_with(stage, path, ordinal, alone, "kstage_adios2_restart_ex", kstage_adios2_open,
                 d.manifest);
  });
}

kstage_status_t kstage_adios2_checkpoint_latest(kstage_stage_t stage, const char* pointer) {
  return guard([&] {
    Collective alone;
    checkpoint_latest_with(stage, pointer, alone, "kstage_adios2_checkpoint_latest",
                           kstage_adios2_open);
  });
}

kstage_status_t kstage_adios2_restart_latest(kstage_stage_t stage, const char* pointer,
                                             uint64_t* ordinal) {
  return guard([&] {
    Collective alone;
    restart_latest_with(stage, pointer, ordinal, alone, "kstage_adios2_restart_latest",
                        kstage_adios2_open);
  });
}

}  // extern "C"
