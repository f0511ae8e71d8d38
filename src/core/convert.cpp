#include "core/convert.hpp"

#include <cstring>
#include <type_traits>

#include "core/element.hpp"
#include "core/thread_budget.hpp"
#include "qkv/half.hpp"
#include "qkv/system.hpp"

namespace qkv::detail {
namespace {

// The storage of each floating dtype, and its conversions through f32 (exact for bf16 and f16,
// and f32 rounds f64 to odd first, as store_element does, so nothing rounds twice).
struct F64 {
  using Storage = double;
};
struct F32 {
  using Storage = float;
  static float to_f32(float x) { return x; }
  static float from_f32(float x) { return x; }
};
struct BF16 {
  using Storage = std::uint16_t;
  static float to_f32(std::uint16_t x) { return bf16_bits_to_f32(x); }
  static std::uint16_t from_f32(float x) { return f32_to_bf16_bits(x); }
};
struct FP16 {
  using Storage = std::uint16_t;
  static float to_f32(std::uint16_t x) { return f16_bits_to_f32(x); }
  static std::uint16_t from_f32(float x) { return f32_to_f16_bits(x); }
};

template <class To, class From>
typename To::Storage convert(typename From::Storage x) {
  if constexpr (std::is_same_v<From, F64>) {
    if constexpr (std::is_same_v<To, F32>) return static_cast<float>(x);
    return To::from_f32(f64_to_f32_round_odd(x));
  } else if constexpr (std::is_same_v<To, F64>) {
    return static_cast<double>(From::to_f32(x));
  } else {
    return To::from_f32(From::to_f32(x));
  }
}

// From this many elements the run is split across this call's share of qkv's thread budget
// (core/thread_budget.hpp: none inside a parallel region, what other calls leave otherwise). Median
// of 201 copies, 2 threads of an AMD EPYC (avx2 avx512_bf16 avx512f), 2026-11-24, f32 -> bf16 /
// bf16 -> f32 in us, one thread -> two: 4096 elements 1.46 / 0.47 (one thread either way at this
// threshold); 16384: 4.9 / 1.05 -> 2.8 / 0.9; 65536: 18.5-18.9 / 3.2 -> 9.7 / 1.9-2.5; 1048576:
// 301-305 / 58-60 -> 152 / 35.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 14;

template <class To, class From>
void run(std::byte* dst, const std::byte* src, std::int64_t n) {
  auto* out = reinterpret_cast<typename To::Storage*>(dst);
  const auto* in = reinterpret_cast<const typename From::Storage*>(src);
  if (n < kParallelElements) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = convert<To, From>(in[i]);
    return;
  }
  const ThreadShare threads(num_threads());  // this copy's share of qkv's budget (qkv/system.hpp)
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) out[i] = convert<To, From>(in[i]);
}

// run<To, From> where To is `to` and differs from From, and true; else false.
template <class From>
bool run_from(DType to, std::byte* dst, const std::byte* src, std::int64_t n) {
  const auto try_to = [&]<class To>(DType which) {
    if constexpr (std::is_same_v<To, From>) {
      return false;
    } else {
      if (to != which) return false;
      run<To, From>(dst, src, n);
      return true;
    }
  };
  return try_to.template operator()<F64>(DType::f64) ||
         try_to.template operator()<F32>(DType::f32) ||
         try_to.template operator()<BF16>(DType::bf16) ||
         try_to.template operator()<FP16>(DType::f16);
}

}  // namespace

bool convert_run(DType to, std::byte* dst, DType from, const std::byte* src, std::int64_t n) {
  switch (from) {
    case DType::f64:
      return run_from<F64>(to, dst, src, n);
    case DType::f32:
      return run_from<F32>(to, dst, src, n);
    case DType::bf16:
      return run_from<BF16>(to, dst, src, n);
    case DType::f16:
      return run_from<FP16>(to, dst, src, n);
    case DType::boolean:
      break;
  }
  return false;
}

}  // namespace qkv::detail
