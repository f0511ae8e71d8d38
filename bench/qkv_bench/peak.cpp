// The machine's ceilings: FMA peak (Highway, dynamic dispatch to the best target of this CPU),
// the bf16 products' peak on the matrix path the kernels use, and STREAM triad bandwidth. A
// kernel's fraction of them says how much is left to win.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "qkv_bench/peak.cpp"
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "qkv/error.hpp"
#include "qkv/system.hpp"
#include "qkv_bench/bf16_peak.hpp"
#include "qkv_bench/measure.hpp"

HWY_BEFORE_NAMESPACE();
namespace qkv::bench::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Zen 3 (and Intel since Haswell) issues two vector FMAs per cycle, each with 4-5 cycles of
// latency, so at least 2 x 5 = 10 independent chains are needed to keep both pipes busy; 12
// leaves a margin and still fits in the 16 AVX2 registers with the two operands.
constexpr int kChains = 12;

// Runs `iterations` x kChains dependent-per-chain FMAs on this thread and returns the FLOPs
// done. The result is written to *sink so that the compiler cannot drop the chains; the
// multiplier below 1 keeps every chain near b / (1 - a) = 1, far from overflow and denormals.
template <class T>
double fma_chains(std::int64_t iterations, T* sink) {
  const hn::ScalableTag<T> d;
  const auto a = hn::Set(d, T(0.999999));
  const auto b = hn::Set(d, T(1e-6));
  auto c0 = hn::Set(d, T(0.0)), c1 = hn::Set(d, T(0.1)), c2 = hn::Set(d, T(0.2));
  auto c3 = hn::Set(d, T(0.3)), c4 = hn::Set(d, T(0.4)), c5 = hn::Set(d, T(0.5));
  auto c6 = hn::Set(d, T(0.6)), c7 = hn::Set(d, T(0.7)), c8 = hn::Set(d, T(0.8));
  auto c9 = hn::Set(d, T(0.9)), c10 = hn::Set(d, T(1.0)), c11 = hn::Set(d, T(1.1));
  static_assert(kChains == 12, "the unrolled chains below must match kChains");
  for (std::int64_t i = 0; i < iterations; ++i) {
    c0 = hn::MulAdd(c0, a, b);
    c1 = hn::MulAdd(c1, a, b);
    c2 = hn::MulAdd(c2, a, b);
    c3 = hn::MulAdd(c3, a, b);
    c4 = hn::MulAdd(c4, a, b);
    c5 = hn::MulAdd(c5, a, b);
    c6 = hn::MulAdd(c6, a, b);
    c7 = hn::MulAdd(c7, a, b);
    c8 = hn::MulAdd(c8, a, b);
    c9 = hn::MulAdd(c9, a, b);
    c10 = hn::MulAdd(c10, a, b);
    c11 = hn::MulAdd(c11, a, b);
  }
  const auto sum = hn::Add(
      hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)), hn::Add(hn::Add(c4, c5), hn::Add(c6, c7))),
      hn::Add(hn::Add(c8, c9), hn::Add(c10, c11)));
  *sink = hn::GetLane(hn::SumOfLanes(d, sum));
  return 2.0 * static_cast<double>(iterations) * kChains * static_cast<double>(hn::Lanes(d));
}

double FmaChainsF32(std::int64_t iterations, float* sink) { return fma_chains(iterations, sink); }
double FmaChainsF64(std::int64_t iterations, double* sink) { return fma_chains(iterations, sink); }

}  // namespace qkv::bench::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv::bench {

HWY_EXPORT(FmaChainsF32);
HWY_EXPORT(FmaChainsF64);

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// About 0.1-0.2 s per run at 3-4 GHz on AVX2 (12 chains at 2 FMAs per cycle = 6 cycles per
// iteration): long enough that the barrier and the clock are noise, short enough for 10 runs.
constexpr int kFmaIterationsLog2 = 26;

// Runs chains(iterations, sink) on `threads` OpenMP threads at once and returns their GFLOP/s.
template <class Chains>
double burst_gflops(int threads, std::int64_t iterations, Chains chains) {
  // One sink per thread, a cache line apart, so the final stores do not share a line.
  constexpr int kStride = 16;
  auto sinks = std::make_unique<double[]>(static_cast<std::size_t>(threads) * kStride);
  double flops = 0.0;
  Clock::time_point start;
#pragma omp parallel num_threads(threads) reduction(+ : flops)
  {
    // Every thread starts together, so the time covers all of them computing at once (a
    // core whose neighbour idles can clock higher than under a real load).
#pragma omp barrier
#pragma omp single
    start = Clock::now();
    flops += chains(iterations, &sinks[static_cast<std::size_t>(omp_get_thread_num()) * kStride]);
  }
  return flops / seconds_since(start) * 1e-9;
}

void check_burst(int threads, int iterations_log2) {
  if (threads < 1) throw Error("threads", "at least 1", std::to_string(threads));
  if (iterations_log2 < 10 || iterations_log2 > 30) {
    throw Error("iterations_log2", "in [10, 30]", std::to_string(iterations_log2));
  }
}

}  // namespace

double fma_burst_gflops(DType dtype, int threads, int iterations_log2) {
  if (dtype != DType::f32 && dtype != DType::f64) {
    throw Error("dtype", "f32 or f64", std::string(dtype_name(dtype)));
  }
  check_burst(threads, iterations_log2);
  return burst_gflops(threads, std::int64_t{1} << iterations_log2,
                      [dtype](std::int64_t iterations, double* sink) {
                        if (dtype == DType::f64) {
                          return HWY_DYNAMIC_DISPATCH(FmaChainsF64)(iterations, sink);
                        }
                        float value = 0.0f;
                        const double flops = HWY_DYNAMIC_DISPATCH(FmaChainsF32)(iterations, &value);
                        *sink = value;
                        return flops;
                      });
}

std::string bf16_peak_path() { return matrix_paths().front(); }

double bf16_burst_gflops(int threads, int iterations_log2) {
  check_burst(threads, iterations_log2);
  const std::string path = bf16_peak_path();
  const auto run = [](double (*chains)(std::int64_t, float*)) {
    return [chains](std::int64_t iterations, double* sink) {
      float value = 0.0f;
      const double flops = chains(iterations, &value);
      *sink = value;
      return flops;
    };
  };
  // A TDPBF16PS takes 16 cycles where the 12 VDPBF16PS or FMA of a step take 6: 16x fewer steps
  // keep a burst as long.
  if (path == "amx-bf16") {
    return burst_gflops(threads, std::int64_t{1} << (iterations_log2 - 4), run(tdpbf16ps_chains));
  }
  if (path == "avx512-bf16") {
    return burst_gflops(threads, std::int64_t{1} << iterations_log2, run(vdpbf16ps_chains));
  }
  return fma_burst_gflops(DType::f32, threads, iterations_log2);
}

double bf16_peak_gflops(int threads, int runs) {
  double best = 0.0;
  for (int run = 0; run < runs; ++run) {
    best = std::max(best, bf16_burst_gflops(threads, kFmaIterationsLog2));
  }
  return best;
}

double fma_peak_gflops(DType dtype, int threads, int runs) {
  double best = 0.0;
  for (int run = 0; run < runs; ++run) {
    best = std::max(best, fma_burst_gflops(dtype, threads, kFmaIterationsLog2));
  }
  return best;
}

double stream_triad_gbps(int threads, int runs, std::int64_t bytes_per_array) {
  if (threads < 1) throw Error("threads", "at least 1", std::to_string(threads));
  if (bytes_per_array < 1 << 20) {
    throw Error("bytes_per_array", "at least 1 MiB", std::to_string(bytes_per_array));
  }
  const std::int64_t n = bytes_per_array / static_cast<std::int64_t>(sizeof(double));
  auto a = hwy::AllocateAligned<double>(static_cast<std::size_t>(n));
  auto b = hwy::AllocateAligned<double>(static_cast<std::size_t>(n));
  auto c = hwy::AllocateAligned<double>(static_cast<std::size_t>(n));
  if (!a || !b || !c)
    throw Error("stream arrays", "3 x " + std::to_string(n) + " f64", "no memory");
  double* pa = a.get();
  double* pb = b.get();
  double* pc = c.get();
  // First touch with the same static schedule as the triad, so each thread's pages are its own
  // (on a NUMA machine: on its node).
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    pa[i] = 0.0;
    pb[i] = 1.0;
    pc[i] = 2.0;
  }
  const double s = 3.0;
  double best = 0.0;
  for (int run = 0; run < runs; ++run) {
    const Clock::time_point start = Clock::now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    best = std::max(best, 3.0 * static_cast<double>(bytes_per_array) / seconds_since(start) * 1e-9);
  }
  // The triad's result must be used, or the sweeps could be elided.
  if (pa[n / 2] != 7.0) throw Error("stream triad", "a[i] = 7", std::to_string(pa[n / 2]));
  return best;
}

double read_sweep_gbps(int threads, int runs, std::int64_t bytes_per_array) {
  if (threads < 1) throw Error("threads", "at least 1", std::to_string(threads));
  if (bytes_per_array < 1 << 20) {
    throw Error("bytes_per_array", "at least 1 MiB", std::to_string(bytes_per_array));
  }
  const std::int64_t n = bytes_per_array / static_cast<std::int64_t>(sizeof(std::uint64_t));
  auto b = hwy::AllocateAligned<std::uint64_t>(static_cast<std::size_t>(n));
  auto c = hwy::AllocateAligned<std::uint64_t>(static_cast<std::size_t>(n));
  if (!b || !c) throw Error("read arrays", "2 x " + std::to_string(n) + " u64", "no memory");
  std::uint64_t* pb = b.get();
  std::uint64_t* pc = c.get();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    pb[i] = static_cast<std::uint64_t>(i);
    pc[i] = static_cast<std::uint64_t>(n - i);
  }
  double best = 0.0;
  for (int run = 0; run < runs; ++run) {
    std::uint64_t sum = 0;  // integers, so that the compiler may vectorize the sum
    const Clock::time_point start = Clock::now();
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : sum)
    for (std::int64_t i = 0; i < n; ++i) sum += pb[i] + pc[i];
    best = std::max(best, 2.0 * static_cast<double>(bytes_per_array) / seconds_since(start) * 1e-9);
    // Each pair sums to n: the loads happened and were not elided.
    if (sum != static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(n)) {
      throw Error("read sweep", "sum n * n", std::to_string(sum));
    }
  }
  return best;
}

Peaks measure_peaks(int threads) {
  Peaks peaks;
  peaks.gflops_f32 = fma_peak_gflops(DType::f32, threads);
  peaks.gflops_f64 = fma_peak_gflops(DType::f64, threads);
  peaks.gflops_bf16 = bf16_peak_gflops(threads);
  peaks.bf16_path = bf16_peak_path();
  peaks.stream_gbps = stream_triad_gbps(threads);
  peaks.read_gbps = read_sweep_gbps(threads);
  return peaks;
}

}  // namespace qkv::bench
#endif  // HWY_ONCE
