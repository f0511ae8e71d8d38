#pragma once

#include <array>
#include <cstdint>

namespace qkv {

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
// counter-based generator of cuRAND and FlashAttention: a pure function of a 128-bit counter
// and a 64-bit key, so any thread can draw the numbers of any position in any order.
using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

constexpr PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) noexcept {
  constexpr std::uint32_t kMul0 = 0xD2511F53u;
  constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * counter[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * counter[2];
    counter = {
        static_cast<std::uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<std::uint32_t>(p1),
        static_cast<std::uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<std::uint32_t>(p0)};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

// The top 24 bits of a draw as a float in [0, 1), exact in binary32.
constexpr float uniform_from_bits(std::uint32_t bits) noexcept {
  return static_cast<float>(bits >> 8) * 0x1.0p-24f;
}

// Dropout randomness, keyed by (seed, offset, b, h, i, j) and nothing else, so forward and
// backward regenerate the same mask on any thread count and any backend:
//   key     = (seed low 32 bits, seed high 32 bits XOR offset high 32 bits)
//   counter = (j / 4, i, b * Hq + h, offset low 32 bits); lane j % 4 of the result.
// Entry (i, j) is kept when uniform_from_bits(draw) >= p.
//
// The draws of row i's keys [4 group, 4 group + 4), one Philox call (the fused kernels take
// four keys a call).
constexpr PhiloxCounter dropout_block(std::uint64_t seed, std::uint64_t offset, std::uint32_t bh,
                                      std::uint32_t i, std::uint32_t group) noexcept {
  const PhiloxKey key = {
      static_cast<std::uint32_t>(seed),
      static_cast<std::uint32_t>(seed >> 32) ^ static_cast<std::uint32_t>(offset >> 32)};
  return philox4x32_10({group, i, bh, static_cast<std::uint32_t>(offset)}, key);
}

constexpr std::uint32_t dropout_bits(std::uint64_t seed, std::uint64_t offset, std::uint32_t bh,
                                     std::uint32_t i, std::uint32_t j) noexcept {
  return dropout_block(seed, offset, bh, i, j >> 2)[j & 3u];
}

constexpr bool dropout_keep(std::uint64_t seed, std::uint64_t offset, std::uint32_t bh,
                            std::uint32_t i, std::uint32_t j, double p) noexcept {
  return static_cast<double>(uniform_from_bits(dropout_bits(seed, offset, bh, i, j))) >= p;
}

// A seeded stream of numbers for initializing tensors: draw n is block n / 4 of Philox keyed by
// the seed. Deterministic and cheap to copy.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) noexcept
      : key_{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)} {}

  std::uint32_t next_u32() noexcept {
    if (lane_ == 4) {
      block_ = philox4x32_10(
          {static_cast<std::uint32_t>(index_), static_cast<std::uint32_t>(index_ >> 32), 0u, 0u},
          key_);
      ++index_;
      lane_ = 0;
    }
    return block_[lane_++];
  }

  // Uniform in [0, 1) with 53 random bits.
  double next_uniform() noexcept {
    const std::uint64_t high = next_u32() >> 5;  // 27 bits
    const std::uint64_t low = next_u32() >> 6;   // 26 bits
    return static_cast<double>((high << 26) | low) * 0x1.0p-53;
  }

  // Standard normal, by Box-Muller on two uniforms (the second output is discarded so that
  // every draw consumes the same amount of the stream).
  double next_normal() noexcept;

 private:
  PhiloxKey key_;
  std::uint64_t index_ = 0;
  PhiloxCounter block_{};
  int lane_ = 4;
};

}  // namespace qkv
