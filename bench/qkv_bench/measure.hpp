#pragma once

// The measurements behind `qkv bench` and bench_attention: the machine's ceilings (f32/f64 FMA
// peak, STREAM triad bandwidth) and timed rows of the fused CPU kernel (Backend::cpu), with the
// FLOP and byte counts that turn a time into a rate. The CLI and the Google Benchmark executable
// share it so that both count the same work the same way.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/attention.hpp"
#include "qkv/block_mask.hpp"
#include "qkv/dtype.hpp"
#include "qkv/linear_attention.hpp"
#include "qkv/system.hpp"
#include "qkv/tensor.hpp"

namespace qkv::bench {

enum class Pass : std::uint8_t { fwd, bwd };

std::string_view pass_name(Pass pass) noexcept;  // "fwd", "bwd"
Pass parse_pass(std::string_view name);          // throws qkv::Error on anything else

// One benchmark shape: H k/v heads and group H query heads (GQA; Hq = Hk = H by default), Dv = D,
// causal is top-left (Tq == Tk in every default row).
struct Shape {
  Pass pass = Pass::fwd;
  std::int64_t B = 1;
  std::int64_t H = 8;
  std::int64_t Tq = 512;
  std::int64_t Tk = 512;
  std::int64_t D = 64;
  bool causal = false;
  DType dtype = DType::f32;
  // `qkv bench --variants`: one of kVariants, run through flex_attention with its block mask
  // (window: the built-in window option; window_lambda: the same band as a user lambda), or one
  // of kLinearVariants, run through linear_attention. Empty: the built-in options above.
  std::string variant;
  // q, k, v, out, dout and the gradients stored [B, H, T, D] and handed to the kernels as views
  // permuted to [B, T, H, D] (lse [B, H, T] either way): the kernels read and write them where they
  // lie, so time and peak RSS should equal the contiguous rows'.
  bool heads_first = false;
  // Query heads per k/v head: q, out and lse have group H heads, k and v H.
  std::int64_t group = 1;

  // A decode row of more than one query (`qkv bench --decode-tq`: a speculative draft or a chunk of
  // a prompt against the cache).
  bool decode = false;

  // Decode: one query (or a few, `decode`) against a long KV cache. Its cost is reading K and V,
  // so it is judged against memory bandwidth, not against the FMA peak.
  bool is_decode() const noexcept { return decode || Tq == 1; }
  // "fwd B=1 H=8 Tq=512 Tk=512 D=64 causal f32", for logs and benchmark names.
  std::string describe() const;
};

// FlashAttention's count (benchmarks/benchmark_flash_attention.py): the two matmuls of the
// forward, 4 * B * H * Tq * Tk * D, halved when causal; the backward is 2.5x the forward (five
// matmuls instead of two). Softmax and masking are not counted.
double flop_count(const Shape& shape) noexcept;
// The type the kernels compute in for inputs stored as `storage`: f64 for f64, else f32 (bf16
// and f16 are read as stored and computed in f32), whose FMA rate is the rows' ceiling.
DType compute_dtype(DType storage) noexcept;

// The bytes of K and V one pass reads: 2 * B * H * Tk * D * sizeof(dtype).
double kv_bytes(const Shape& shape) noexcept;

// The sparse patterns of `qkv bench --variants` (Tq = Tk = T): full; causal; window (a band of
// +-128 keys, Longformer's local window of 256); longformer (that band + 16 global tokens);
// bigbird (blocks of 64: 3 window, 2 global, 3 random); document (8 packed documents of T / 8);
// strided (Sparse Transformer, stride sqrt(T)); window_lambda (the band as a lambda).
inline const std::vector<std::string> kVariants = {
    "full", "causal", "window", "longformer", "bigbird", "document", "strided", "window_lambda"};
BlockMask variant_mask(const std::string& variant, std::int64_t T);
// Linear attention's rows of `qkv bench --variants` (qkv/linear_attention.hpp, Backend::cpu):
// elu + 1, and FAVOR+ with F = 64 and 256 random features, each without and with a causal mask.
inline const std::vector<std::string> kLinearVariants = {
    "elu", "elu_causal", "favor64", "favor64_causal", "favor256", "favor256_causal"};
bool is_linear_variant(const std::string& variant);
LinearOptions linear_variant_options(const std::string& variant);
// The (i, j) pairs the variant's mask keeps, per (b, h): full tiles counted whole, partial ones
// element by element.
double kept_pairs(const BlockMask& mask);

// The tensors of one shape, allocated once (q, k, v from a seeded generator; out, lse, dout and
// the gradients preallocated), so a timed run measures the kernel, not the allocator. For the
// backward, out and lse come from one forward done in the constructor.
class Workload {
 public:
  explicit Workload(const Shape& shape);
  // One attention_forward or attention_backward with Backend::cpu, writing into the
  // preallocated outputs. Threads follow qkv::set_num_threads.
  void run();
  const Shape& shape() const noexcept { return shape_; }

 private:
  Shape shape_;
  AttentionOptions options_;
  Tensor q_, k_, v_;  // [B, Tq, H, D], [B, Tk, H, D], [B, Tk, H, D]
  Tensor out_, lse_;  // [B, Tq, H, D], [B, H, Tq]
  Tensor dout_;       // [B, Tq, H, D]; defined for the backward only
  AttentionGrads grads_;
  BlockMask blocks_;                     // variants run by flex_attention
  std::optional<LinearOptions> linear_;  // variants run by linear_attention
};

// The process's peak resident set (qkv/system.hpp), as the rows measure it.
using qkv::peak_rss_mb;
using qkv::reset_peak_rss;

// How many timed repetitions a row gets. requested > 0 is taken as is; requested == 0 picks,
// from the warm-up's time, enough to fill about kAutoRowSeconds, clamped to [kMinReps, kMaxReps],
// so a 12 s backward gets 3 and a 5 ms forward gets 10.
inline constexpr double kAutoRowSeconds = 10.0;
inline constexpr int kMinReps = 3;
inline constexpr int kMaxReps = 10;
int reps_for(int requested, double warmup_seconds) noexcept;

// The ceilings rows are compared against; 0 where not measured.
struct Peaks {
  double gflops_f32 = 0.0;  // FMA peak, all threads
  double gflops_f64 = 0.0;
  // The bf16 products' peak on bf16_path (qkv::matrix_paths()'s first: amx-bf16, avx512-bf16,
  // or f32-fma where the CPU has neither, and then the f32 FMA peak): the ceiling of bf16 rows.
  double gflops_bf16 = 0.0;
  std::string bf16_path;
  double stream_gbps = 0.0;  // STREAM triad
  double read_gbps = 0.0;    // the read sweep (read_sweep_gbps)
};

// One measured row.
struct RowResult {
  Shape shape;
  int threads = 0;
  int reps = 0;
  double ms = 0.0;      // median over reps, one warm-up excluded
  double ms_min = 0.0;  // the fastest and slowest rep: their spread shows the noise
  double ms_max = 0.0;
  double gflops = 0.0;       // flop_count / median
  double gbps = 0.0;         // kv_bytes / median (decode rows; 0 otherwise)
  double peak_fraction = 0;  // gflops / the dtype's peak (bf16: Peaks::gflops_bf16; f16, which
                             // computes in f32, and f32: the f32 FMA peak), or gbps / stream for
                             // decode rows; 0 when the ceiling was not measured
  double peak_rss_mb = 0.0;  // process VmHWM during the row (allocation, warm-up and reps)
  bool peak_rss_is_row = false;  // false: no reset or no VmHWM, so the process's peak
  // The same ceiling measured while the row ran (0 when the peaks were not measured): for
  // compute rows the median of short FMA bursts run after every timed rep, for decode rows the
  // mean of a STREAM triad just before and just after the row. On a shared VM the ceiling
  // itself moves by 2x within minutes, so a fraction of a peak measured earlier can say more
  // about the neighbours than about the kernel; this one compares like with like.
  double ceiling_during = 0.0;
  double fraction_during = 0.0;  // rate / ceiling_during, rep by rep, median
  // Decode rows: the read sweep measured around the row as the triad is, and gbps over it (0
  // when the peaks were not measured).
  double read_during = 0.0;
  double fraction_of_read = 0.0;
};

// Times one row: builds its Workload with `threads` OpenMP threads, runs it once untimed, then
// reps_for(requested_reps, warm-up time) times, and takes the median.
RowResult run_row(const Shape& shape, int threads, int requested_reps, const Peaks& peaks);

// The FMA peak in GFLOP/s: every OpenMP thread (`threads` of them) runs independent chains of
// vector FMAs (Highway, the best target this CPU has) for a fixed count; best of `runs`.
double fma_peak_gflops(DType dtype, int threads, int runs = 10);
// One short run of the same chains (2^iterations_log2 iterations per thread), in GFLOP/s: the
// probe that run_row interleaves with the timed reps.
double fma_burst_gflops(DType dtype, int threads, int iterations_log2);
// The bf16 products' peak (see Peaks::gflops_bf16) and its burst, as the FMA ones; the path
// they run on.
double bf16_peak_gflops(int threads, int runs = 10);
double bf16_burst_gflops(int threads, int iterations_log2);
std::string bf16_peak_path();
// 2^22 iterations: ~10 ms per burst at full speed on AVX2 f32, so the probes add ~10% to a row.
inline constexpr int kBurstIterationsLog2 = 22;
// STREAM triad a[i] = b[i] + s * c[i] on three f64 arrays of `bytes_per_array` each, OpenMP
// static schedule, first-touched by the threads that use them; 3 * bytes_per_array per sweep
// (STREAM's convention: the write-allocate read of a[] is not counted). Best of `runs`.
inline constexpr std::int64_t kStreamBytesPerArray = std::int64_t{128} << 20;
double stream_triad_gbps(int threads, int runs = 10,
                         std::int64_t bytes_per_array = kStreamBytesPerArray);
// Loads alone, as a decode reads K and V: every thread sums its static share of two arrays of
// `bytes_per_array` each (first-touched by it), 2 * bytes_per_array per sweep; best of `runs`. A
// kernel that only reads cannot pass it. It is the ceiling that decode rows are held against
// beside the triad, which it does not reach: a core's reads wait on memory with a bounded number
// of misses in flight, while the triad's writes, a third of its traffic, do not (Zen 5 VM, 2
// threads, 2026-11-28: 50-55 GB/s read where the triad measured 69-79).
double read_sweep_gbps(int threads, int runs = 10,
                       std::int64_t bytes_per_array = kStreamBytesPerArray);
Peaks measure_peaks(int threads);

// The default suite: B = 1, H = 8, T in ts, D in ds, causal and not, fwd and bwd, then the decode
// rows (B = 1, H = 8, D = 128, Tq = decode_tq, Tk in decode_tks, forward, not causal,
// decode_group query heads per k/v head).
inline const std::vector<std::int64_t> kDefaultTs = {512, 1024, 2048, 4096, 8192};
inline const std::vector<std::int64_t> kDefaultDs = {64, 128};
inline const std::vector<std::int64_t> kDefaultDecodeTks = {4096, 16384, 65536};
std::vector<Shape> suite(const std::vector<std::int64_t>& ts, const std::vector<std::int64_t>& ds,
                         const std::vector<std::int64_t>& decode_tks, DType dtype = DType::f32,
                         std::int64_t decode_group = 1, std::int64_t decode_tq = 1);

}  // namespace qkv::bench
