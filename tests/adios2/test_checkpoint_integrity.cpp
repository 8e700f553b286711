// SPDX-License-Identifier: Apache-2.0
// Checkpoints that can be trusted (#50): the manifest that seals a BP5 folder, checked before
// ADIOS2 opens anything; many damaged copies of a real checkpoint, each refused cleanly (naming
// the file, the stage unchanged) or restarted exactly; verified restarts only; the pointer
// procedure of kstage_adios2_checkpoint_latest, and a simulated power loss at every instant of
// it, with and without its flushes. Runs in the default and asan legs (label adios2).
#include <kstage/hpp/adios2.hpp>
#include <kstage/kstage_adios2.h>

#include "adios2_support.hpp"
#include "log_support.hpp"
#include "stage_state.hpp"
#include "support.hpp"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

using namespace kstage_test;
namespace fs = std::filesystem;

// LeakSanitizer: allocations ADIOS2's own libraries make and never free (as test_adios2.cpp).
extern "C" const char* __lsan_default_suppressions() { return "leak:libadios2_\n"; }

namespace {

using State = kstage_adios2_test::StageState;
State state_of(kstage_stage_t stage) { return kstage_adios2_test::stage_state(stage); }

std::string scratch(const std::string& name) {
  return kstage_adios2_test::scratch_path("kstage-adios2-integrity-", name);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// The checkpoint's files (not its manifest), by name.
std::vector<std::string> files_of(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().filename() != "kstage.manifest") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A stage with every kind of thing a checkpoint keeps: a path range and explicit paths, a
// float32 x 3 POINT column, a ragged int32 column (an empty row), a string column (UTF-8 rows),
// a token column, a deleted prim and an attribute deleted from one prim. `scale` changes the
// values, not the shapes: two such checkpoints have files of the same names and sizes.
struct Rich {
  Stage s{host_execution()};
  Rich(float scale) {
    const kstage_token_t pos = s.token("position"), nbrs = s.token("neighbours"),
                         name = s.token("name"), kind = s.token("kind");
    const kstage_path_t first = s.range("/world/particles", "p", 0, 6);
    const kstage_path_t a = s.path("/world/walls/a"), b = s.path("/world/walls/b");
    std::vector<kstage_path_t> prims;
    for (int i = 0; i < 6; ++i) prims.push_back(first + i);
    prims.push_back(a);
    prims.push_back(b);
    const kstage_query_t q = s.query(prims);
    std::vector<float> p(8 * 3);
    for (size_t i = 0; i < p.size(); ++i) p[i] = float(i) * scale + 12345.7f;
    int64_t shape[1] = {8};
    DLTensor t = tensor(p.data(), f32(3), 1, shape);
    kstage_write_data_t w = write_data(&t);
    w.semantic = KSTAGE_SEMANTIC_POINT;
    KS_OK(s.write(q, pos, 1, w));
    std::vector<std::vector<int32_t>> rows = {{1, 2}, {}, {3, 4, int32_t(scale)}};
    std::vector<int64_t> shapes = {2, 0, 3};
    std::vector<DLTensor> rt;
    for (size_t i = 0; i < rows.size(); ++i)
      rt.push_back(tensor(rows[i].empty() ? nullptr : rows[i].data(), i32(), 1, &shapes[i]));
    KS_OK(s.write(s.query({first + 1, first + 2, a}), nbrs, 1,
                  write_data(rt.data(), rt.size(), true)));
    std::vector<std::string> names = {"wall a", scale > 1 ? "WALL B" : "wall b"};
    std::vector<int64_t> lengths = {int64_t(names[0].size()), int64_t(names[1].size())};
    DLTensor nt[2] = {tensor(names[0].data(), u8(), 1, &lengths[0]),
                      tensor(names[1].data(), u8(), 1, &lengths[1])};
    kstage_write_data_t wn = write_data(nt, 2, true);
    wn.semantic = KSTAGE_SEMANTIC_STRING;
    KS_OK(s.write(s.query({a, b}), name, 1, wn));
    KS_OK(write_ids(s, s.query({a, b}), kind, 1, {s.token("wall"), s.token("door")},
                    KSTAGE_SEMANTIC_TOKEN_ID));
    s.seal(1);
    KS_OK(s.remove(s.query({first + 3}), {}, 2));  // a prim deleted
    KS_OK(s.remove(s.query({b}), {pos}, 2));       // an attribute deleted from one prim
    s.seal(2, {pos});
    s.seal(3, {kind});
  }
};

// A stage that already holds something: a refused restart must leave it exactly so.
struct Target {
  Stage s{host_execution()};
  Target() {
    s.write_f32(s.query({s.path("/keep")}), s.token("k"), 1, {7.f});
    s.seal(1);
  }
};

void copy_folder(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
}

void flip_byte(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  char c = 0;
  f.get(c);
  f.seekp(std::streamoff(at));
  f.put(char(c ^ 0x5a));
}

// Whether two folders hold the same files with the same bytes.
bool same_files(const std::string& a, const std::string& b) {
  std::vector<std::string> names_a, names_b;
  for (const auto& e : fs::directory_iterator(a)) names_a.push_back(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(b)) names_b.push_back(e.path().filename().string());
  std::sort(names_a.begin(), names_a.end());
  std::sort(names_b.begin(), names_b.end());
  if (names_a != names_b) return false;
  for (const std::string& n : names_a)
    if (read_text(a + "/" + n) != read_text(b + "/" + n)) return false;
  return true;
}

}  // namespace

TEST_CASE("a checkpoint is sealed by a manifest of every file, its size and XXH3-64",
          "[adios2][integrity]") {
  Rich r(1.f);
  const std::string path = scratch("sealed.bp");
  A2_OK(kstage_adios2_checkpoint(r.s.stage, path.c_str()));
  const std::string manifest = read_text(path + "/kstage.manifest");
  INFO(manifest);
  CHECK(manifest.rfind("kstage-manifest 1\nkstage 0.", 0) == 0);
  CHECK(manifest.find("\nadios2 2.") != std::string::npos);
  CHECK(manifest.find("\nsteps 1\nlast_ordinal 3\n") != std::string::npos);
  const std::vector<std::string> files = files_of(path);
  REQUIRE(files.size() >= 3);  // data.0, md.0, md.idx, ...
  for (const std::string& name : files) {
    const std::string line = "file " + std::to_string(fs::file_size(path + "/" + name)) + " ";
    CHECK(manifest.find(line) != std::string::npos);
    CHECK(manifest.find(" " + name + "\n") != std::string::npos);
  }
  CHECK(manifest.find("\nseal ") == manifest.size() - 23);  // "\nseal " + 16 digits + "\n"
  Stage fresh(host_execution());
  uint64_t ordinal = 0;
  A2_OK(kstage_adios2_restart(fresh.stage, path.c_str(), &ordinal));
  CHECK(ordinal == 3);
  CHECK(state_of(fresh.stage) == state_of(r.s.stage));
}

TEST_CASE("damaged copies of a checkpoint are refused before ADIOS2 reads them, or restart exact",
          "[adios2][integrity]") {
  Rich one(1.f), two(3.f);
  const std::string a = scratch("original.bp"), b = scratch("other.bp");
  A2_OK(kstage_adios2_checkpoint(one.s.stage, a.c_str()));
  A2_OK(kstage_adios2_checkpoint(two.s.stage, b.c_str()));
  const State want = state_of(one.s.stage);
  const std::string copy = scratch("damaged.bp");
  struct Damage {
    std::string what;    // for the report
    std::string needle;  // what the refusal's message must name
    std::function<void(const std::string&)> apply;
  };
  std::vector<Damage> damages;
  for (const std::string& name : files_of(a)) {
    const uint64_t size = fs::file_size(a + "/" + name);
    std::set<uint64_t> cuts = {1, size - 1};  // and 0, 1/10, ..., 9/10 of it
    for (uint64_t k = 0; k < 10; ++k) cuts.insert(size * k / 10);
    for (uint64_t cut : cuts)
      if (cut < size)
        damages.push_back({"'" + name + "' cut at " + std::to_string(cut), name,
                           [=](const std::string& d) { fs::resize_file(d + "/" + name, cut); }});
    std::set<uint64_t> flips = {size - 1};  // and 0, 1/16, ..., 15/16 of it
    for (uint64_t k = 0; k < 16; ++k) flips.insert(size * k / 16);
    for (uint64_t at : flips)
      damages.push_back({"'" + name + "' byte " + std::to_string(at) + " flipped", name,
                         [=](const std::string& d) { flip_byte(d + "/" + name, at); }});
    damages.push_back({"'" + name + "' from another checkpoint", name, [=](const std::string& d) {
                         fs::copy_file(b + "/" + name, d + "/" + name,
                                       fs::copy_options::overwrite_existing);
                       }});
    damages.push_back({"'" + name + "' removed", name,
                       [=](const std::string& d) { fs::remove(d + "/" + name); }});
  }
  damages.push_back(
      {"a file added", "stray.0", [](const std::string& d) { write_text(d + "/stray.0", "x"); }});
  damages.push_back({"a folder added", "stray.dir",
                     [](const std::string& d) { fs::create_directories(d + "/stray.dir"); }});
  damages.push_back(
      {"the other checkpoint's manifest", "from another checkpoint", [=](const std::string& d) {
         fs::copy_file(b + "/kstage.manifest", d + "/kstage.manifest",
                       fs::copy_options::overwrite_existing);
       }});
  const uint64_t manifest_size = fs::file_size(a + "/kstage.manifest");
  for (uint64_t at = 0; at < manifest_size; at += 7)
    damages.push_back({"manifest byte " + std::to_string(at) + " flipped", "manifest",
                       [=](const std::string& d) { flip_byte(d + "/kstage.manifest", at); }});
  for (uint64_t cut : {uint64_t(0), manifest_size / 2, manifest_size - 1})
    damages.push_back(
        {"manifest cut at " + std::to_string(cut), "manifest",
         [=](const std::string& d) { fs::resize_file(d + "/kstage.manifest", cut); }});
  REQUIRE(damages.size() >= 180);

  size_t refused = 0, unchanged = 0;
  for (const Damage& damage : damages) {
    INFO(damage.what);
    copy_folder(a, copy);
    damage.apply(copy);
    if (same_files(a, copy)) {  // a file swapped for an identical one: the checkpoint itself
      ++unchanged;
      Stage fresh(host_execution());
      A2_OK(kstage_adios2_restart(fresh.stage, copy.c_str(), nullptr));
      CHECK(state_of(fresh.stage) == want);
      continue;
    }
    // Onto a stage that holds something: a refusal leaves it exactly so.
    Target t;
    const State before = state_of(t.s.stage);
    const kstage_status_t st = kstage_adios2_restart(t.s.stage, copy.c_str(), nullptr);
    INFO(kstage_adios2_last_error());
    ++refused;
    CHECK(st == KSTAGE_OP_FAILED);
    CHECK(std::string(kstage_adios2_last_error()).find(damage.needle) != std::string::npos);
    CHECK(state_of(t.s.stage) == before);
  }
  CHECK(refused + unchanged == damages.size());
  CHECK(refused >= 180);
}

TEST_CASE("a checkpoint without its manifest (a legacy one) restarts as before, with a warning",
          "[adios2][integrity]") {
  Rich one(1.f);
  const std::string a = scratch("legacy-original.bp"), copy = scratch("legacy-copy.bp");
  A2_OK(kstage_adios2_checkpoint(one.s.stage, a.c_str()));
  const State want = state_of(one.s.stage);
  {
    copy_folder(a, copy);
    fs::remove(copy + "/kstage.manifest");
    LogRecorder log;
    Recording recording(log, KSTAGE_LOG_WARNING);
    Stage fresh(host_execution());
    A2_OK(kstage_adios2_restart(fresh.stage, copy.c_str(), nullptr));
    CHECK(state_of(fresh.stage) == want);
    KS_OK(kstage_flush_log());
    const auto warnings = log.find("adios2", "has no manifest");
    REQUIRE(warnings.size() == 1);
    CHECK(warnings.front().severity == KSTAGE_LOG_WARNING);
    CHECK(warnings.front().message.find(copy) != std::string::npos);
  }
}

TEST_CASE("verified restarts only, and the descriptors' struct_size rules",
          "[adios2][integrity][errors]") {
  Rich r(1.f);
  const std::string path = scratch("legacy.bp");
  A2_OK(kstage_adios2_checkpoint(r.s.stage, path.c_str()));
  fs::remove(path + "/kstage.manifest");
  Target t;
  const State before = state_of(t.s.stage);
  kstage_adios2_restart_desc_t d = kstage_adios2_restart_desc_init();
  d.manifest = KSTAGE_ADIOS2_MANIFEST_REQUIRED;
  A2_FAILS(kstage_adios2_restart_ex(t.s.stage, path.c_str(), &d, nullptr), KSTAGE_INVALID_ARGUMENT,
           "has no manifest");
  CHECK(std::string(kstage_adios2_last_error()).find(path) != std::string::npos);
  CHECK(state_of(t.s.stage) == before);
  d.manifest = 7;
  A2_FAILS(kstage_adios2_restart_ex(t.s.stage, path.c_str(), &d, nullptr), KSTAGE_INVALID_ARGUMENT,
           "desc.manifest is 7");
  d = kstage_adios2_restart_desc_init();
  d.struct_size = 4;
  A2_FAILS(kstage_adios2_restart_ex(t.s.stage, path.c_str(), &d, nullptr), KSTAGE_INVALID_ARGUMENT,
           "struct_size is 4");
  CHECK(state_of(t.s.stage) == before);
  {  // IF_PRESENT: read unchecked, and silently
    LogRecorder log;
    Recording recording(log, KSTAGE_LOG_WARNING);
    d = kstage_adios2_restart_desc_init();
    d.manifest = KSTAGE_ADIOS2_MANIFEST_IF_PRESENT;
    Stage fresh(host_execution());
    A2_OK(kstage_adios2_restart_ex(fresh.stage, path.c_str(), &d, nullptr));
    CHECK(state_of(fresh.stage) == state_of(r.s.stage));
    KS_OK(kstage_flush_log());
    CHECK(log.find("adios2", "no manifest").empty());
  }
  // The open descriptor: the first layout (32 bytes, no `manifest`) is still accepted; a size
  // that cuts `manifest` with a byte of it set is refused; a reader that asks is checked.
  const std::string sealed = scratch("sealed-open.bp");
  A2_OK(kstage_adios2_checkpoint(r.s.stage, sealed.c_str()));
  kstage_adios2_open_desc_t o = kstage_adios2_open_desc_init();
  o.mode = KSTAGE_ADIOS2_READ;
  o.struct_size = 32;
  kstage_adios2_stream_t h = 0;
  A2_OK(kstage_adios2_open(sealed.c_str(), &o, &h));
  A2_OK(kstage_adios2_close(h));
  o.struct_size = 33;
  o.manifest = 1;
  A2_FAILS(kstage_adios2_open(sealed.c_str(), &o, &h), KSTAGE_INVALID_ARGUMENT,
           "cuts field 'manifest'");
  o = kstage_adios2_open_desc_init();
  o.mode = KSTAGE_ADIOS2_READ;
  o.manifest = KSTAGE_ADIOS2_MANIFEST_REQUIRED;
  flip_byte(sealed + "/md.idx", 70);
  A2_FAILS(kstage_adios2_open(sealed.c_str(), &o, &h), KSTAGE_OP_FAILED, "md.idx");
  A2_FAILS(kstage_adios2_open(path.c_str(), &o, &h), KSTAGE_INVALID_ARGUMENT, "has no manifest");
}

TEST_CASE("checkpoint_latest writes the one the pointer does not name, then names it",
          "[adios2][integrity]") {
  const std::string pointer = scratch("run");
  scratch("run.0");
  scratch("run.1");
  Target t;
  A2_FAILS(kstage_adios2_restart_latest(t.s.stage, pointer.c_str(), nullptr),
           KSTAGE_INVALID_ARGUMENT, "names no checkpoint");
  A2_FAILS(kstage_adios2_checkpoint_latest(t.s.stage, ""), KSTAGE_INVALID_ARGUMENT,
           "pointer is NULL or empty");
  Rich one(1.f), two(3.f);
  A2_OK(kstage_adios2_checkpoint_latest(one.s.stage, pointer.c_str()));
  CHECK(read_text(pointer) == "run.0\n");
  A2_OK(kstage_adios2_checkpoint_latest(two.s.stage, pointer.c_str()));
  CHECK(read_text(pointer) == "run.1\n");
  {
    Stage fresh(host_execution());
    uint64_t ordinal = 0;
    A2_OK(kstage_adios2_restart_latest(fresh.stage, pointer.c_str(), &ordinal));
    CHECK(ordinal == 3);
    CHECK(state_of(fresh.stage) == state_of(two.s.stage));
  }
  A2_OK(kstage_adios2_checkpoint_latest(one.s.stage, pointer.c_str()));
  CHECK(read_text(pointer) == "run.0\n");
  {
    Stage fresh(host_execution());
    A2_OK(kstage_adios2_restart_latest(fresh.stage, pointer.c_str(), nullptr));
    CHECK(state_of(fresh.stage) == state_of(one.s.stage));
  }
  // The latest damaged: refused (its manifest is required), the stage unchanged.
  flip_byte(pointer + ".0/data.0", 9);
  const State before = state_of(t.s.stage);
  A2_FAILS(kstage_adios2_restart_latest(t.s.stage, pointer.c_str(), nullptr), KSTAGE_OP_FAILED,
           "data.0");
  CHECK(state_of(t.s.stage) == before);
}

namespace {

// What a power loss after the first `cut` lines of a durability log leaves on disk, worst case
// (docs/adios2.md, "A checkpoint that survives a crash"): a file's bytes survive only if it was
// flushed ("sync <path>", or its temporary name's) within the cut; otherwise it keeps half of
// them. A rename within the cut survives, or -- unless its folder was flushed after it within the
// cut -- not (`keep_unsynced_renames` picks). `final_folder` is the real disk after the write;
// the simulated one is made at `simulated`. Files untouched by the logged write are durable.
void simulate_power_loss(const std::vector<std::string>& log, size_t cut,
                         bool keep_unsynced_renames, const std::string& pointer,
                         const std::string& old_pointer_text, const std::string& simulated) {
  std::set<std::string> synced;
  std::vector<std::pair<std::string, std::string>> renames;  // from, to
  std::set<std::string> renamed_and_synced;
  for (size_t i = 0; i < cut; ++i) {
    const std::string& line = log[i];
    if (line.rfind("sync ", 0) == 0) {
      const std::string p = line.substr(5);
      synced.insert(p);
      for (const auto& [from, to] : renames)
        if (fs::path(to).parent_path() == fs::path(p)) renamed_and_synced.insert(to);
    } else if (line.rfind("rename ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string from, to;
      f >> from >> to;
      renames.emplace_back(from, to);
    }
  }
  const fs::path root = fs::path(pointer).parent_path();
  fs::remove_all(simulated);
  fs::create_directories(simulated);
  const std::string base = fs::path(pointer).filename().string();
  auto durable = [&](const std::string& real) {
    if (synced.count(real)) return true;
    for (const auto& [from, to] : renames)
      if (to == real && synced.count(from)) return true;
    return false;
  };
  auto renamed = [&](const std::string& real) {
    for (const auto& [from, to] : renames)
      if (to == real) return renamed_and_synced.count(real) || keep_unsynced_renames;
    return false;
  };
  // The pointer: the new one if its rename survives (its bytes if flushed), else the old one.
  {
    std::string text = old_pointer_text;
    if (renamed(pointer)) {
      text = read_text(pointer);
      if (!durable(pointer)) text = text.substr(0, text.size() / 2);
    }
    write_text(simulated + "/" + base, text);
  }
  for (const char* suffix : {".0", ".1"}) {
    const std::string real = (root / (base + suffix)).string();
    if (!fs::exists(real)) continue;
    const std::string sim = simulated + "/" + base + suffix;
    fs::create_directories(sim);
    for (const auto& e : fs::directory_iterator(real)) {
      const std::string file = e.path().string();
      const std::string name = e.path().filename().string();
      const bool logged = std::any_of(log.begin(), log.end(), [&](const std::string& l) {
        return l.find(real + "/") != std::string::npos;
      });
      const bool written_now = logged;
      if (name == "kstage.manifest" && written_now && !renamed(file)) continue;  // not named yet
      std::string bytes = read_text(file);
      if (written_now && !durable(file)) bytes = bytes.substr(0, bytes.size() / 2);
      write_text(sim + "/" + name, bytes);
    }
  }
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("a power loss at any instant of checkpoint_latest keeps a complete checkpoint named",
          "[adios2][integrity][durability]") {
  Rich one(1.f), two(3.f);
  const State first = state_of(one.s.stage), second = state_of(two.s.stage);
  for (const bool flushes : {true, false}) {
    INFO((flushes ? "with the flushes" : "without the flushes (KSTAGE_ADIOS2_TEST_SKIP_FSYNC)"));
    const std::string pointer = scratch("power");
    scratch("power.0");
    scratch("power.1");
    A2_OK(kstage_adios2_checkpoint_latest(one.s.stage, pointer.c_str()));  // durable before
    const std::string old_pointer_text = read_text(pointer);
    const std::string log = scratch("durability.log");
    ::setenv("KSTAGE_ADIOS2_DURABILITY_LOG", log.c_str(), 1);
    if (!flushes) ::setenv("KSTAGE_ADIOS2_TEST_SKIP_FSYNC", "1", 1);
    const kstage_status_t st = kstage_adios2_checkpoint_latest(two.s.stage, pointer.c_str());
    ::unsetenv("KSTAGE_ADIOS2_DURABILITY_LOG");
    ::unsetenv("KSTAGE_ADIOS2_TEST_SKIP_FSYNC");
    A2_OK(st);
    const std::vector<std::string> lines = lines_of(log);
    REQUIRE(!lines.empty());
    size_t lost = 0, states = 0, old_kept = 0, new_kept = 0;
    for (size_t cut = 0; cut <= lines.size(); ++cut) {
      for (const bool keep_unsynced_renames : {false, true}) {
        INFO("power lost after log line "
             << cut << " of " << lines.size()
             << (keep_unsynced_renames ? ", unflushed renames kept" : ", unflushed renames lost"));
        const std::string sim = scratch("power-sim");
        simulate_power_loss(lines, cut, keep_unsynced_renames, pointer, old_pointer_text, sim);
        Stage fresh(host_execution());
        const kstage_status_t restarted =
            kstage_adios2_restart_latest(fresh.stage, (sim + "/power").c_str(), nullptr);
        ++states;
        if (restarted != KSTAGE_OK) {
          INFO(kstage_adios2_last_error());
          ++lost;
          CHECK(!flushes);  // with the flushes, never
          continue;
        }
        const State got = state_of(fresh.stage);
        CHECK((got == first || got == second));
        old_kept += got == first ? 1 : 0;
        new_kept += got == second ? 1 : 0;
      }
    }
    CHECK(states == 2 * (lines.size() + 1));
    // With the flushes, a loss before the pointer's rename keeps the old checkpoint and one
    // after it the new: both outcomes are reached, and nothing else.
    if (flushes) CHECK((old_kept > 0 && new_kept > 0 && old_kept + new_kept == states));
    // Without the flushes some instant loses every checkpoint: the pointer names one whose bytes
    // never reached the disk. The procedure's flushes are what make it safe.
    if (!flushes) CHECK(lost > 0);
  }
}

TEST_CASE("a flipped value is refused naming its attribute, also without the manifest",
          "[adios2][integrity]") {
  Rich r(1.f);
  const std::string path = scratch("values.bp");
  A2_OK(kstage_adios2_checkpoint(r.s.stage, path.c_str()));
  // The manifest gone (as for a stream, or a file copied without it): the step's own per
  // attribute checksums still refuse a value changed in data.0.
  fs::remove(path + "/kstage.manifest");
  const std::string data = read_text(path + "/data.0");
  const float first = 12345.7f;  // position[0].x (Rich's values start there)
  const std::string needles[2][2] = {
      {std::string(reinterpret_cast<const char*>(&first), sizeof first), "attribute 'position'"},
      {"wall a", "attribute 'name'"}};  // a string column's bytes (an array attribute)
  for (const auto& [bytes, attribute] : needles) {
    INFO(attribute);
    const size_t at = data.find(bytes);
    REQUIRE(at != std::string::npos);
    REQUIRE(data.find(bytes, at + 1) == std::string::npos);  // one place: that value's
    const std::string copy = scratch("values-flipped.bp");
    copy_folder(path, copy);
    flip_byte(copy + "/data.0", at + 1);
    // A fresh stage (every floor 0: the step fits it), so that the values' check is what
    // refuses; nothing of the step may reach it.
    Stage empty(host_execution());
    struct {
      Stage& s;
    } t{empty};
    const State before = state_of(t.s.stage);
    REQUIRE(before.columns.empty());
    A2_FAILS(kstage_adios2_restart(t.s.stage, copy.c_str(), nullptr), KSTAGE_OP_FAILED, attribute);
    CHECK(std::string(kstage_adios2_last_error()).find("do not match their checksum") !=
          std::string::npos);
    CHECK(state_of(t.s.stage) == before);
  }
  Stage fresh(host_execution());  // the undamaged file restarts (its checksums match)
  A2_OK(kstage_adios2_restart(fresh.stage, path.c_str(), nullptr));
  CHECK(state_of(fresh.stage) == state_of(r.s.stage));
}

TEST_CASE("a file cut after its manifest was checked is refused before ADIOS2 reads it",
          "[adios2][integrity]") {
  Rich r(1.f);
  const std::string path = scratch("cut-later.bp");
  A2_OK(kstage_adios2_checkpoint(r.s.stage, path.c_str()));
  kstage_adios2_open_desc_t o = kstage_adios2_open_desc_init();
  o.mode = KSTAGE_ADIOS2_READ;
  o.manifest = KSTAGE_ADIOS2_MANIFEST_REQUIRED;
  kstage_adios2_stream_t h = 0;
  A2_OK(kstage_adios2_open(path.c_str(), &o, &h));  // checked here
  // Cut after the check: ADIOS2 alone would wait forever for the missing bytes of data.0.
  fs::resize_file(path + "/data.0", fs::file_size(path + "/data.0") / 2);
  Stage fresh(host_execution());
  uint64_t ordinal = 0;
  A2_FAILS(kstage_adios2_read_step(h, fresh.stage, 0, &ordinal), KSTAGE_OP_FAILED, "data.0' is ");
  CHECK(std::string(kstage_adios2_last_error()).find("cut since") != std::string::npos);
  CHECK(state_of(fresh.stage).columns.empty());
  A2_OK(kstage_adios2_close(h));
}

TEST_CASE("a writer replacing a sealed folder removes its old manifest first, and seals it anew",
          "[adios2][integrity]") {
  Rich one(1.f), two(3.f);
  const std::string path = scratch("rewritten.bp");
  A2_OK(kstage_adios2_checkpoint(one.s.stage, path.c_str()));
  const std::string old_manifest = read_text(path + "/kstage.manifest");
  kstage_adios2_stream_t w = 0;
  A2_OK(kstage_adios2_open(path.c_str(), nullptr, &w));
  // While the new steps are written, the folder has no seal: a restart now is refused as
  // unsealed (verified only), never accepted against the old seal.
  CHECK(!fs::exists(path + "/kstage.manifest"));
  kstage_adios2_restart_desc_t d = kstage_adios2_restart_desc_init();
  d.manifest = KSTAGE_ADIOS2_MANIFEST_REQUIRED;
  Stage probe(host_execution());
  A2_FAILS(kstage_adios2_restart_ex(probe.stage, path.c_str(), &d, nullptr),
           KSTAGE_INVALID_ARGUMENT, "has no manifest");
  kstage_filter_t all{};
  kstage_query_t q = 0;
  KS_OK(kstage_query_filter(two.s.stage, &all, &q));
  A2_OK(kstage_adios2_write_step(w, two.s.stage, q, nullptr, 0, nullptr));
  KS_OK(kstage_query_release(two.s.stage, q));
  A2_OK(kstage_adios2_close(w));
  const std::string new_manifest = read_text(path + "/kstage.manifest");
  CHECK(new_manifest != old_manifest);
  Stage fresh(host_execution());
  A2_OK(kstage_adios2_restart_ex(fresh.stage, path.c_str(), &d, nullptr));
  CHECK(state_of(fresh.stage) == state_of(two.s.stage));
  // A stream of another engine never touches a folder of its name.
  const std::string sst_named = scratch("stream-name");
  fs::create_directories(sst_named);
  write_text(sst_named + "/kstage.manifest", "not mine");
  kstage_adios2_open_desc_t o = kstage_adios2_open_desc_init();
  o.engine = "Inline";
  kstage_adios2_stream_t inline_writer = 0;
  A2_OK(kstage_adios2_open(sst_named.c_str(), &o, &inline_writer));
  CHECK(read_text(sst_named + "/kstage.manifest") == "not mine");
  A2_OK(kstage_adios2_close(inline_writer));
}

TEST_CASE("the C++ form: checkpoint_latest, restart_latest and restart's manifest policy",
          "[adios2][integrity][cpp]") {
  namespace ka = kstage::adios2;
  Rich r(1.f);
  const std::string pointer = scratch("cpp-run");
  scratch("cpp-run.0");
  scratch("cpp-run.1");
  ka::checkpoint_latest(r.s.stage, pointer);
  CHECK(read_text(pointer) == "cpp-run.0\n");
  {
    Stage fresh(host_execution());
    CHECK(ka::restart_latest(fresh.stage, pointer) == 3);
    CHECK(state_of(fresh.stage) == state_of(r.s.stage));
  }
  const std::string path = scratch("cpp.bp");
  ka::checkpoint(r.s.stage, path);
  fs::remove(path + "/kstage.manifest");
  {  // the throwing form: Error with the bridge's status and message
    Stage fresh(host_execution());
    bool thrown = false;
    try {
      (void)ka::restart(fresh.stage, path, ka::Manifest::Required);
    } catch (const kstage::Error& e) {
      thrown = true;
      CHECK(e.status() == KSTAGE_INVALID_ARGUMENT);
      CHECK(e.message().find("has no manifest") != std::string::npos);
    }
    CHECK(thrown);
  }
  {  // the Status form
    Stage fresh(host_execution());
    kstage::Status st;
    CHECK(ka::restart(fresh.stage, path, ka::Manifest::Required, st) == 0);
    CHECK(st.code() == KSTAGE_INVALID_ARGUMENT);
    CHECK(ka::restart(fresh.stage, path, ka::Manifest::IfPresent, st) == 3);
    CHECK(st.ok());
    CHECK(state_of(fresh.stage) == state_of(r.s.stage));
    CHECK(ka::restart_latest(fresh.stage, scratch("cpp-none"), st) == 0);
    CHECK(st.code() == KSTAGE_INVALID_ARGUMENT);
    CHECK(st.message().find("names no checkpoint") != std::string::npos);
  }
}

TEST_CASE("a stream's reader checks the values' checksums of every step it reads",
          "[adios2][integrity]") {
  // A BP5 stream of two steps read step by step (kstage_adios2_open: the manifest is not
  // checked by default): a value flipped in the second step is refused when that step is read,
  // naming the attribute; the first step was read whole and stays.
  Stage s(host_execution());
  const kstage_token_t mass = s.token("mass");
  const kstage_path_t p = s.path("/body");
  s.write_f32(s.query({p}), mass, 1, {1234.5f});
  s.seal(1);
  const std::string path = scratch("stream.bp");
  kstage_adios2_stream_t w = 0;
  A2_OK(kstage_adios2_open(path.c_str(), nullptr, &w));
  kstage_filter_t all{};
  kstage_query_t q = 0;
  KS_OK(kstage_query_filter(s.stage, &all, &q));
  A2_OK(kstage_adios2_write_step(w, s.stage, q, nullptr, 0, nullptr));
  s.write_f32(s.query({p}), mass, 2, {6789.25f});
  s.seal(2);
  kstage_adios2_step_desc_t d = kstage_adios2_step_desc_init();
  d.change_range = true;
  d.range_begin = d.range_end = 2;
  A2_OK(kstage_adios2_write_step(w, s.stage, q, nullptr, 0, &d));
  KS_OK(kstage_query_release(s.stage, q));
  A2_OK(kstage_adios2_close(w));
  const std::string data = read_text(path + "/data.0");
  const float second = 6789.25f;
  const size_t at = data.find(std::string(reinterpret_cast<const char*>(&second), sizeof second));
  REQUIRE(at != std::string::npos);
  flip_byte(path + "/data.0", at + 1);
  kstage_adios2_open_desc_t o = kstage_adios2_open_desc_init();
  o.mode = KSTAGE_ADIOS2_READ;
  kstage_adios2_stream_t r = 0;
  A2_OK(kstage_adios2_open(path.c_str(), &o, &r));
  Stage reader(host_execution());
  uint64_t ordinal = 0;
  A2_OK(kstage_adios2_read_step(r, reader.stage, 0, &ordinal));
  CHECK(ordinal == 1);
  const State after_first = state_of(reader.stage);
  A2_FAILS(kstage_adios2_read_step(r, reader.stage, 0, &ordinal), KSTAGE_OP_FAILED,
           "attribute 'mass'");
  CHECK(state_of(reader.stage) == after_first);
  A2_OK(kstage_adios2_close(r));
}

namespace {

// An environment variable set for a scope (the bridge's test hooks, adios2/test_hooks.hpp).
struct Setting {
  const char* name;
  Setting(const char* n, const std::string& value) : name(n) { ::setenv(n, value.c_str(), 1); }
  ~Setting() { ::unsetenv(name); }
  Setting(const Setting&) = delete;
  Setting& operator=(const Setting&) = delete;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ADIOS2's POSIX reads past a file's end wait for the bytes (about a minute after the writer
// closed, with its FailOnEOF): a read that is refused must be refused well before.
constexpr double kBoundSeconds = 10;

}  // namespace

TEST_CASE("a file cut after every check, as ADIOS2 reads the step, is refused at once",
          "[adios2][integrity]") {
  Rich r(1.f);
  const std::string path = scratch("cut-while-read.bp");
  A2_OK(kstage_adios2_checkpoint(r.s.stage, path.c_str()));
  const std::string data = path + "/data.0";
  // Cut once the step has begun: past the manifest's check and the extents' check before it.
  const Setting cut("KSTAGE_ADIOS2_TEST_CUT_BEFORE_READ",
                    std::to_string(fs::file_size(data) / 2) + ":" + data);
  kstage_adios2_restart_desc_t d = kstage_adios2_restart_desc_init();
  d.manifest = KSTAGE_ADIOS2_MANIFEST_REQUIRED;
  Target t;
  const State before = state_of(t.s.stage);
  const auto start = std::chrono::steady_clock::now();
  A2_FAILS(kstage_adios2_restart_ex(t.s.stage, path.c_str(), &d, nullptr), KSTAGE_OP_FAILED, data);
  CHECK(seconds_since(start) < kBoundSeconds);
  CHECK(state_of(t.s.stage) == before);
}

TEST_CASE("an unsealed folder whose data.0 is shorter than its metadata says is refused at once",
          "[adios2][integrity]") {
  Rich r(1.f);
  const std::string a = scratch("unsealed-original.bp"), copy = scratch("unsealed-cut.bp");
  A2_OK(kstage_adios2_checkpoint(r.s.stage, a.c_str()));
  const uint64_t size = fs::file_size(a + "/data.0");
  std::set<uint64_t> cuts = {1, size - 1};
  for (uint64_t k = 0; k < 10; ++k) cuts.insert(size * k / 10);
  for (uint64_t at : cuts) {
    INFO("data.0 cut at " << at << " of " << size);
    copy_folder(a, copy);
    fs::remove(copy + "/kstage.manifest");  // no seal: nothing checked before ADIOS2 reads
    fs::resize_file(copy + "/data.0", at);
    Target t;
    const State before = state_of(t.s.stage);
    const auto start = std::chrono::steady_clock::now();
    A2_FAILS(kstage_adios2_restart(t.s.stage, copy.c_str(), nullptr), KSTAGE_OP_FAILED,
             copy + "/data.0");
    CHECK(seconds_since(start) < kBoundSeconds);
    CHECK(state_of(t.s.stage) == before);
  }
  // ... and a stream's reader of such a folder, step by step.
  copy_folder(a, copy);
  fs::remove(copy + "/kstage.manifest");
  fs::resize_file(copy + "/data.0", size / 2);
  kstage_adios2_open_desc_t o = kstage_adios2_open_desc_init();
  o.mode = KSTAGE_ADIOS2_READ;
  kstage_adios2_stream_t h = 0;
  A2_OK(kstage_adios2_open(copy.c_str(), &o, &h));
  Stage fresh(host_execution());
  uint64_t ordinal = 0;
  const auto start = std::chrono::steady_clock::now();
  A2_FAILS(kstage_adios2_read_step(h, fresh.stage, 0, &ordinal), KSTAGE_OP_FAILED,
           copy + "/data.0");
  CHECK(seconds_since(start) < kBoundSeconds);
  CHECK(state_of(fresh.stage).columns.empty());
  A2_OK(kstage_adios2_close(h));
}

TEST_CASE("a step that failed half-way leaves its folder unsealed: verified restarts refuse it",
          "[adios2][integrity]") {
  Rich r(1.f);
  SECTION("a checkpoint") {
    const std::string path = scratch("half-way.bp");
    LogRecorder log;
    {
      Recording recording(log, KSTAGE_LOG_WARNING);
      const Setting fail("KSTAGE_ADIOS2_TEST_FAIL_PUT", "neighbours");
      A2_FAILS(kstage_adios2_checkpoint(r.s.stage, path.c_str()), KSTAGE_OP_FAILED,
               "attribute 'neighbours'");
      KS_OK(kstage_flush_log());
    }
    REQUIRE(fs::exists(path + "/data.0"));  // ADIOS2 wrote what the step held
    CHECK(!fs::exists(path + "/kstage.manifest"));
    CHECK(log.find("adios2", "not sealed").size() == 1);
    kstage_adios2_restart_desc_t d = kstage_adios2_restart_desc_init();
    d.manifest = KSTAGE_ADIOS2_MANIFEST_REQUIRED;
    Target t;
    const State before = state_of(t.s.stage);
    A2_FAILS(kstage_adios2_restart_ex(t.s.stage, path.c_str(), &d, nullptr),
             KSTAGE_INVALID_ARGUMENT, "has no manifest");
    CHECK(state_of(t.s.stage) == before);
    // Unverified (a folder without a manifest: read as it is): its one step is incomplete,
    // and refused whole.
    const kstage_status_t st = kstage_adios2_restart(t.s.stage, path.c_str(), nullptr);
    INFO(kstage_adios2_last_error());
    CHECK(st != KSTAGE_OK);
    CHECK(state_of(t.s.stage) == before);
  }
  SECTION("a stream whose second step failed: the first restarts, the second is refused") {
    const std::string path = scratch("half-way-stream.bp");
    kstage_adios2_stream_t w = 0;
    A2_OK(kstage_adios2_open(path.c_str(), nullptr, &w));
    kstage_filter_t all{};
    kstage_query_t q = 0;
    KS_OK(kstage_query_filter(r.s.stage, &all, &q));
    A2_OK(kstage_adios2_write_step(w, r.s.stage, q, nullptr, 0, nullptr));
    {
      const Setting fail("KSTAGE_ADIOS2_TEST_FAIL_PUT", "name");
      A2_FAILS(kstage_adios2_write_step(w, r.s.stage, q, nullptr, 0, nullptr), KSTAGE_OP_FAILED,
               "attribute 'name'");
    }
    KS_OK(kstage_query_release(r.s.stage, q));
    A2_OK(kstage_adios2_close(w));  // closed, not sealed
    CHECK(!fs::exists(path + "/kstage.manifest"));
    kstage_adios2_restart_desc_t d = kstage_adios2_restart_desc_init();
    d.manifest = KSTAGE_ADIOS2_MANIFEST_REQUIRED;
    Stage probe(host_execution());
    A2_FAILS(kstage_adios2_restart_ex(probe.stage, path.c_str(), &d, nullptr),
             KSTAGE_INVALID_ARGUMENT, "has no manifest");
    CHECK(state_of(probe.stage).columns.empty());
    kstage_adios2_open_desc_t o = kstage_adios2_open_desc_init();
    o.mode = KSTAGE_ADIOS2_READ;
    kstage_adios2_stream_t h = 0;
    A2_OK(kstage_adios2_open(path.c_str(), &o, &h));
    Stage fresh(host_execution());
    uint64_t ordinal = 0;
    A2_OK(kstage_adios2_read_step(h, fresh.stage, 0, &ordinal));
    CHECK(state_of(fresh.stage) == state_of(r.s.stage));
    const State first = state_of(fresh.stage);
    const kstage_status_t st = kstage_adios2_read_step(h, fresh.stage, 0, &ordinal);
    INFO(kstage_adios2_last_error());
    CHECK(st != KSTAGE_OK);
    CHECK(st != KSTAGE_END_OF_ITERATION);
    CHECK(state_of(fresh.stage) == first);
    A2_OK(kstage_adios2_close(h));
  }
}

TEST_CASE("a step whose data cannot be written at its end (a full disk) leaves the folder unsealed",
          "[adios2][integrity]") {
  // The file size limit stands for a full disk: ADIOS2 writes the step's data at EndStep, and
  // that write fails (EFBIG; SIGXFSZ ignored for it).
  Stage s(host_execution());
  std::vector<kstage_path_t> prims;
  for (int i = 0; i < 16384; ++i) prims.push_back(s.path("/big/p" + std::to_string(i)));
  s.write_f32(s.query(prims), s.token("v"), 1, std::vector<float>(prims.size(), 1.5f));
  s.seal(1);
  const std::string path = scratch("full-disk.bp");
  kstage_adios2_stream_t w = 0;
  A2_OK(kstage_adios2_open(path.c_str(), nullptr, &w));
  kstage_filter_t all{};
  kstage_query_t everything = 0;
  KS_OK(kstage_query_filter(s.stage, &all, &everything));
  struct rlimit old {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 1024;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  const kstage_status_t st = kstage_adios2_write_step(w, s.stage, everything, nullptr, 0, nullptr);
  const std::string message = kstage_adios2_last_error();
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &old) == 0);
  std::signal(SIGXFSZ, old_handler);
  KS_OK(kstage_query_release(s.stage, everything));
  INFO(message);
  CHECK(st == KSTAGE_OP_FAILED);
  (void)kstage_adios2_close(w);  // whatever ADIOS2 makes of it: no seal
  CHECK(!fs::exists(path + "/kstage.manifest"));
}
