#include "kernels/cpu/bf16_dots.hpp"

#include <bit>
#include <cmath>
#include <limits>

#include "kernels/cpu/tile_traits.hpp"
#include "qkv/half.hpp"

namespace qkv::kernels::cpu {
namespace {

// x, or a zero of its sign where it is subnormal (VDPBF16PS's DAZ and FTZ).
float flushed(float x) { return std::fabs(x) < std::numeric_limits<float>::min() ? 0.0f * x : x; }

float bf16_value(std::uint16_t bits) {
  return flushed(std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16));
}

// acc + a * b rounded once: the product of two bf16 values is exact in double and the double sum
// rounds to the correctly rounded float sum (53 >= 2 x 24 + 2 bits), with no libm call.
float add_product(float acc, float a, float b) {
  return flushed(static_cast<float>(static_cast<double>(a) * static_cast<double>(b) +
                                    static_cast<double>(acc)));
}

// scale * (q . k) over dim elements, bf16_dots.hpp's chain and tree.
float emulated_dot(const std::uint16_t* q, const std::uint16_t* k, std::int64_t dim, float scale) {
  float lanes[16] = {};
  for (std::int64_t x = 0; x < dim; x += 32) {
    for (std::int64_t l = 0; l < 16; ++l) {
      const std::int64_t even = x + 2 * l, odd = even + 1;
      const float qo = odd < dim ? bf16_value(q[odd]) : 0.0f;
      const float ko = odd < dim ? bf16_value(k[odd]) : 0.0f;
      const float qe = even < dim ? bf16_value(q[even]) : 0.0f;
      const float ke = even < dim ? bf16_value(k[even]) : 0.0f;
      lanes[l] = add_product(add_product(lanes[l], qo, ko), qe, ke);
    }
  }
  for (int width = 8; width >= 1; width /= 2) {
    for (int i = 0; i < width; ++i) lanes[i] = lanes[i] + lanes[i + width];
  }
  return lanes[0] * scale;
}

}  // namespace

void bf16_score_dots_emulated(const std::uint16_t* const* q, std::int64_t rows,
                              const std::uint16_t* k, std::int64_t ldk, std::int64_t n,
                              std::int64_t dim, float scale, float* const* s) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < n; ++c) s[r][c] = emulated_dot(q[r], k + c * ldk, dim, scale);
  }
}

bool decode_bf16_dots(const Dims& d, MatrixPath& path) {
  return TileTraits::decode_shape(d.Tq, d.Tk) && d.group() * d.Tq >= kBf16DecodeRows &&
         decode_bf16_path(path);
}

void bf16_values_emulated(const float* const* p, std::int64_t rows, const std::uint16_t* v,
                          std::int64_t ldv, std::int64_t n, std::int64_t dv, float* const* acc) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t col = 0; col < dv; ++col) {
      float sum = acc[r][col];
      for (std::int64_t c = 0; c < n; c += 2) {
        if (c + 1 < n) {
          sum = add_product(sum, bf16_value(f32_to_bf16_bits(p[r][c + 1])),
                            bf16_value(v[(c + 1) * ldv + col]));
        } else {
          sum = add_product(sum, 0.0f, 0.0f);
        }
        sum = add_product(sum, bf16_value(f32_to_bf16_bits(p[r][c])), bf16_value(v[c * ldv + col]));
      }
      acc[r][col] = sum;
    }
  }
}

void bf16_values(MatrixPath path, const float* const* p, std::int64_t rows, const std::uint16_t* v,
                 std::int64_t ldv, std::int64_t n, std::int64_t dv, float* const* acc) {
  if (path == MatrixPath::amx_emulated) {
    bf16_values_emulated(p, rows, v, ldv, n, dv, acc);
  } else {
    bf16_values_avx512(p, rows, v, ldv, n, dv, acc);
  }
}

void bf16_score_dots(MatrixPath path, const std::uint16_t* const* q, std::int64_t rows,
                     const std::uint16_t* k, std::int64_t ldk, std::int64_t n, std::int64_t dim,
                     float scale, float* const* s) {
  if (path == MatrixPath::amx_emulated) {
    bf16_score_dots_emulated(q, rows, k, ldk, n, dim, scale, s);
  } else if (rows >= kBf16LaneRows && dim <= 32 * kBf16LaneSteps) {
    bf16_score_lanes_avx512(q, rows, k, ldk, n, dim, scale, s);
  } else {
    bf16_score_dots_avx512(q, rows, k, ldk, n, dim, scale, s);
  }
}

}  // namespace qkv::kernels::cpu
