// SPDX-License-Identifier: Apache-2.0
//
// Particles, in C++ with Kokkos Views (kstage/kstage.hpp): the work of
// examples/c/particles, through the C++ API.
//
//   kstage_example_cpp_particles [-n N] [-t T] [-f PERCENT]
//
// Ordinal 1 holds every particle's "position" (float32 x 3, POINT) and
// "velocity" (float32 x 3, VECTOR), inserted as one batch. Tick k = 1..T
// moves about PERCENT % of the particles (a kernel over the moved ones) and
// writes both attributes at ordinal k + 1, then seals it. Odd ticks send the
// whole arrays with a mask over all particles; even ticks send a query over
// just the moved ones and a compact tensor in shuffled order with an
// index_map. A consumer reads the change range [k + 1, k + 1] of "position":
// exactly the moved particles must come back, with the producer's values. At
// the end every particle's position and velocity are checked.
#include <kstage/kstage.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Float3 = Kokkos::View<float* [3], Kokkos::HostSpace>;

struct Rng {  // xorshift64*, as in the C example
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  float unit() { return float(next() >> 40) / float(1u << 24); }
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "cpp particles: %s\n", what.c_str());
  std::exit(1);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) try {
  uint64_t n = 100000, ticks = 50, percent = 5;
  for (int a = 1; a + 1 < argc; a += 2) {
    const uint64_t v = std::strtoull(argv[a + 1], nullptr, 10);
    if (!std::strcmp(argv[a], "-n")) n = v;
    else if (!std::strcmp(argv[a], "-t")) ticks = v;
    else if (!std::strcmp(argv[a], "-f")) percent = v;
  }
  if (n == 0 || n > UINT32_MAX || percent == 0 || percent > 100) fail("bad arguments");
  const uint64_t moved = std::max<uint64_t>(1, n * percent / 100);

  kstage::Stage stage = kstage::Stage::create();  // initialises Kokkos
  const kstage_token_t position = stage.token("position"), velocity = stage.token("velocity");
  std::vector<std::string> names(n);
  for (uint64_t i = 0; i < n; ++i) names[i] = "/particles/p" + std::to_string(i);
  const std::vector<kstage_path_t> paths =
      stage.paths(std::vector<std::string_view>(names.begin(), names.end()));
  const kstage::Query all = stage.query(paths);

  // The host model, and the initial state at ordinal 1.
  Float3 pos("pos", n), vel("vel", n), pos_out("pos_out", n), vel_out("vel_out", n);
  Rng rng;
  for (uint64_t i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) pos(i, c) = 10.f * rng.unit();
  for (uint64_t i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) vel(i, c) = rng.unit() - 0.5f;
  kstage::WriteOptions point, vector;
  point.semantic = KSTAGE_SEMANTIC_POINT;
  vector.semantic = KSTAGE_SEMANTIC_VECTOR;
  stage
      .write(all,
             kstage::WriteBatch(KSTAGE_PRIM_MODE_INSERT)
                 .add(position, pos, point)
                 .add(velocity, vel, vector),
             1)
      .wait();
  stage.seal(1);

  Kokkos::View<uint32_t*, Kokkos::HostSpace> perm("perm", n), sorted("sorted", moved),
      index_map("index_map", moved), slot("slot", n);
  for (uint64_t i = 0; i < n; ++i) perm(i) = uint32_t(i);
  std::vector<uint64_t> mask((n + 63) / 64);
  double t_write = 0, t_read = 0;
  for (uint64_t k = 1; k <= ticks; ++k) {
    const uint64_t ordinal = k + 1;
    // Pick `moved` particles (partial Fisher-Yates), kick their velocity, then step them.
    for (uint64_t i = 0; i < moved; ++i) std::swap(perm(i), perm(i + rng.next() % (n - i)));
    for (uint64_t i = 0; i < moved; ++i) {
      const uint32_t p = perm(i);
      vel(p, 2) -= 0.0981f;
      for (int c = 0; c < 3; ++c) vel(p, c) += 0.01f * (rng.unit() - 0.5f);
    }
    Kokkos::parallel_for(
        "step", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, moved),
        KOKKOS_LAMBDA(uint64_t i) {
          for (int c = 0; c < 3; ++c) pos(perm(i), c) += 0.1f * vel(perm(i), c);
        });
    Kokkos::fence();
    for (uint64_t i = 0; i < moved; ++i) sorted(i) = perm(i);
    std::sort(sorted.data(), sorted.data() + moved);

    const auto t0 = std::chrono::steady_clock::now();
    kstage::WriteOptions p = point, v = vector;
    kstage::Query target;
    Float3 pos_src = pos, vel_src = vel;
    if (k % 2 == 1) {  // the whole arrays; the mask selects the moved particles of `all`
      std::fill(mask.begin(), mask.end(), 0);
      for (uint64_t i = 0; i < moved; ++i) mask[perm(i) / 64] |= 1ull << (perm(i) % 64);
      p.mask = v.mask = mask;
      p.count = v.count = n;
    } else {  // the moved particles' rows in shuffled order; index_map(i) is query prim i's row
      std::vector<kstage_path_t> moved_paths(moved);
      for (uint64_t i = 0; i < moved; ++i) {
        for (int c = 0; c < 3; ++c)
          pos_out(i, c) = pos(perm(i), c), vel_out(i, c) = vel(perm(i), c);
        slot(perm(i)) = uint32_t(i);
      }
      for (uint64_t i = 0; i < moved; ++i) {
        moved_paths[i] = paths[sorted(i)];
        index_map(i) = slot(sorted(i));
      }
      target = stage.query(moved_paths);
      pos_src = Kokkos::subview(pos_out, std::make_pair(uint64_t(0), moved), Kokkos::ALL());
      vel_src = Kokkos::subview(vel_out, std::make_pair(uint64_t(0), moved), Kokkos::ALL());
      p.index_map = v.index_map = index_map;
      p.count = v.count = moved;
    }
    kstage::WriteBatch batch(KSTAGE_PRIM_MODE_UPDATE);
    batch.add(position, pos_src, p).add(velocity, vel_src, v);
    stage.write(target ? target : all, batch, ordinal).wait();
    stage.seal(ordinal);
    t_write += seconds_since(t0);

    // The consumer: what changed at this ordinal? Exactly the moved particles.
    const auto t1 = std::chrono::steady_clock::now();
    uint64_t seen = 0;
    for (auto& g : stage.read(all, {position}, kstage::ReadOptions::changes(ordinal, ordinal))) {
      if (g.is_tombstone() || g.ordinal() != ordinal || g.semantic() != KSTAGE_SEMANTIC_POINT)
        fail("tick " + std::to_string(k) + ": unexpected group");
      const auto values = g.view<const float* [3]>(0);
      for (size_t i = 0; i < g.prims().size(); ++i, ++seen) {
        const uint64_t row = g.index_map().empty() ? i : g.index_map()[i];
        const uint32_t q = seen < moved ? sorted(seen) : 0;
        if (seen >= moved || g.prims()[i] != paths[q])
          fail("tick " + std::to_string(k) + ": change " + std::to_string(seen) +
               " is not a moved particle");
        for (int c = 0; c < 3; ++c)
          if (values(row, c) != pos(q, c))
            fail("tick " + std::to_string(k) + ": particle " + std::to_string(q));
      }
    }
    t_read += seconds_since(t1);
    if (seen != moved)
      fail("tick " + std::to_string(k) + ": " + std::to_string(seen) + " changes reported");
  }

  // The final state: every particle, both attributes.
  for (auto& g : stage.read(all, {position, velocity})) {
    const Float3& model = g.attribute() == position ? pos : vel;
    const auto values = g.view<const float* [3]>(0);
    if (g.prims().size() != n || g.ordinal() != ticks + 1) fail("final read: wrong group");
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t row = g.index_map().empty() ? i : g.index_map()[i];
      for (int c = 0; c < 3; ++c)
        if (values(row, c) != model(i, c)) fail("final state of particle " + std::to_string(i));
    }
  }

  std::printf("kstage %u.%u.%u C++ particles example\n", KSTAGE_VERSION_MAJOR, KSTAGE_VERSION_MINOR,
              KSTAGE_VERSION_PATCH);
  std::printf("  particles %llu, ticks %llu, moved per tick %llu\n", (unsigned long long)n,
              (unsigned long long)ticks, (unsigned long long)moved);
  std::printf("  producer  %.3g rows/s (position + velocity)\n",
              2.0 * double(moved * ticks) / t_write);
  std::printf("  consumer  %.3g rows/s (position change ranges)\n", double(moved * ticks) / t_read);
  std::printf("cpp particles: OK\n");
  return 0;
} catch (const kstage::Error& e) {
  fail(e.what());
}
