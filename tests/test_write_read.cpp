// SPDX-License-Identifier: Apache-2.0
// Fixed-size writes and latest reads: canonical and convenience layouts,
// count / index_map / mask, prim modes, semantics.
#include "support.hpp"

#include <numeric>

using namespace kstage_test;

TEST_CASE("write, seal, read back a float3 column", "[write][read]") {
  Stage s(host_execution());
  auto prims = s.paths("/body", 4);
  kstage_query_t q = s.query(prims);
  kstage_token_t pos = s.token("points");
  std::vector<float> v(12);
  std::iota(v.begin(), v.end(), 0.f);
  s.write_f32(q, pos, 1, v, 3);

  // Unsealed: invisible.
  REQUIRE(s.read(q, {pos}).empty());
  s.seal(1);
  auto groups = s.read(q, {pos});
  REQUIRE(groups.size() == 1);
  const Group& g = groups[0];
  REQUIRE(g.prims == prims);
  REQUIRE(g.dtype.lanes == 3);
  REQUIRE(g.dtype.code == kDLFloat);
  REQUIRE(g.ordinal == 1);
  REQUIRE_FALSE(g.is_array);
  for (size_t i = 0; i < 4; ++i)
    REQUIRE(as_floats(g.values[i]) == std::vector<float>{3.f * i, 3.f * i + 1, 3.f * i + 2});
}
