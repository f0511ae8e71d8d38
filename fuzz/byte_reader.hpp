#pragma once

// The attention fuzz target's input, read front to back as a sequence of small decisions. Past
// the end every read gives 0, so any input, however short, is a case. The format is plain so that
// fuzz/make_corpus.py writes the seed inputs with the same reads (keep the two in step).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace qkv::fuzz {

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

  std::uint8_t byte() { return at_ < bytes_.size() ? bytes_[at_++] : 0; }

  // n little-endian bytes.
  std::uint64_t bytes(int n) {
    std::uint64_t value = 0;
    for (int i = 0; i < n; ++i) value |= static_cast<std::uint64_t>(byte()) << (8 * i);
    return value;
  }

  // An integer in [lo, hi]: one byte when the range has at most 256 values, else two.
  std::int64_t range(std::int64_t lo, std::int64_t hi) {
    const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    const std::uint64_t raw = span <= 256 ? byte() : bytes(2);
    return lo + static_cast<std::int64_t>(raw % span);
  }

  // 8 bytes taken as the bits of a double (any value: NaN, inf, subnormal).
  double real() {
    const std::uint64_t bits = bytes(8);
    double value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }

  template <class T, std::size_t N>
  const T& pick(const T (&choices)[N]) {
    return choices[range(0, static_cast<std::int64_t>(N) - 1)];
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

}  // namespace qkv::fuzz
