// Timed rows of the fused CPU kernel: FLOP and byte counts, workloads, medians.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/flex.hpp"
#include "qkv/masks.hpp"
#include "qkv/system.hpp"
#include "qkv_bench/measure.hpp"

namespace qkv::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

void check_shape(const Shape& shape) {
  const auto positive = [](const char* name, std::int64_t value) {
    if (value < 1) throw Error(name, "at least 1", std::to_string(value));
  };
  positive("B", shape.B);
  positive("H", shape.H);
  positive("Tq", shape.Tq);
  positive("Tk", shape.Tk);
  positive("D", shape.D);
  positive("group", shape.group);
  if (!is_floating(shape.dtype)) {
    throw Error("dtype", "f32, f64, bf16 or f16", std::string(dtype_name(shape.dtype)));
  }
}

}  // namespace

std::string_view pass_name(Pass pass) noexcept { return pass == Pass::fwd ? "fwd" : "bwd"; }

Pass parse_pass(std::string_view name) {
  if (name == "fwd") return Pass::fwd;
  if (name == "bwd") return Pass::bwd;
  throw Error("pass", "fwd or bwd", std::string(name));
}

std::string Shape::describe() const {
  return std::string(pass_name(pass)) + " B=" + std::to_string(B) + " H=" + std::to_string(H) +
         " Tq=" + std::to_string(Tq) + " Tk=" + std::to_string(Tk) + " D=" + std::to_string(D) +
         (causal ? " causal " : " ") + std::string(dtype_name(dtype)) +
         (variant.empty() ? "" : " " + variant) + (heads_first ? " heads_first" : "") +
         (group > 1 ? " group=" + std::to_string(group) : "");
}

double flop_count(const Shape& shape) noexcept {
  const double forward = 4.0 * static_cast<double>(shape.B) *
                         static_cast<double>(shape.H * shape.group) *
                         static_cast<double>(shape.Tq) * static_cast<double>(shape.Tk) *
                         static_cast<double>(shape.D) / (shape.causal ? 2.0 : 1.0);
  return shape.pass == Pass::fwd ? forward : 2.5 * forward;
}

DType compute_dtype(DType storage) noexcept {
  return storage == DType::f64 ? DType::f64 : DType::f32;
}

double kv_bytes(const Shape& shape) noexcept {
  return 2.0 * static_cast<double>(shape.B) * static_cast<double>(shape.H) *
         static_cast<double>(shape.Tk) * static_cast<double>(shape.D) *
         static_cast<double>(dtype_size(shape.dtype));
}

BlockMask variant_mask(const std::string& variant, std::int64_t T) {
  constexpr std::int64_t kBand = 128;
  if (variant == "full") return create_block_mask(masks::Full{}, 1, 1, T, T);
  if (variant == "causal") return create_block_mask(masks::causal(), 1, 1, T, T);
  if (variant == "window")
    return create_block_mask(masks::sliding_window(kBand, kBand), 1, 1, T, T);
  if (variant == "window_lambda") {
    const auto band = [](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
      return i - j <= kBand && j - i <= kBand;
    };
    return create_block_mask(band, 1, 1, T, T);
  }
  if (variant == "longformer") {
    std::vector<std::int64_t> global(16);
    for (std::int64_t n = 0; n < 16; ++n) global[static_cast<std::size_t>(n)] = n;
    return create_block_mask(masks::longformer(kBand, global), 1, 1, T, T);
  }
  if (variant == "bigbird")
    return create_block_mask(masks::bigbird(64, 3, 2, 3, 2026, T, T), 1, 1, T, T);
  if (variant == "document") {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) ids[static_cast<std::size_t>(t)] = t * 8 / T;
    return create_block_mask(masks::document(ids), 1, 1, T, T);
  }
  if (variant == "strided") {
    const auto stride = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(T))));
    return create_block_mask(masks::strided(std::max<std::int64_t>(stride, 1)), 1, 1, T, T);
  }
  throw Error("variant",
              "one of full, causal, window, longformer, bigbird, document, strided, "
              "window_lambda",
              variant);
}

bool is_linear_variant(const std::string& variant) {
  return std::find(kLinearVariants.begin(), kLinearVariants.end(), variant) !=
         kLinearVariants.end();
}

LinearOptions linear_variant_options(const std::string& variant) {
  if (!is_linear_variant(variant)) {
    throw Error("variant",
                "one of elu, elu_causal, favor64, favor64_causal, favor256, favor256_causal",
                variant);
  }
  LinearOptions o;
  o.backend = Backend::cpu;
  if (variant.rfind("favor", 0) == 0) {
    o.feature_map = FeatureMap::favor;
    o.num_features = variant.rfind("favor64", 0) == 0 ? 64 : 256;
  }
  if (variant.size() > 7 && variant.substr(variant.size() - 7) == "_causal") {
    o.causal = Causal::top_left;
  }
  return o;
}

double kept_pairs(const BlockMask& m) {
  double kept = 0;
  for (std::int64_t qb = 0; qb < m.q_blocks(); ++qb) {
    const std::int64_t i0 = qb * m.block_q(), i1 = std::min(i0 + m.block_q(), m.q_len());
    for (std::int64_t kb = 0; kb < m.k_blocks(); ++kb) {
      const std::int64_t j0 = kb * m.block_k(), j1 = std::min(j0 + m.block_k(), m.kv_len());
      const TileKind kind = m.kind(0, 0, qb, kb);
      if (kind == TileKind::full) kept += static_cast<double>((i1 - i0) * (j1 - j0));
      if (kind != TileKind::partial) continue;
      for (std::int64_t i = i0; i < i1; ++i) {
        for (std::int64_t j = j0; j < j1; ++j) kept += m.keep(0, 0, i, j) ? 1.0 : 0.0;
      }
    }
  }
  return kept;
}

// q [B, Tq, H, D], k [B, Tk, H, D], v [B, Tk, H, D] -> out [B, Tq, H, D], lse [B, H, Tq];
// the backward adds dout [B, Tq, H, D] and dq, dk, dv shaped like q, k, v. With heads_first, each
// of them a view of [B, H, T, D] memory.
Workload::Workload(const Shape& shape) : shape_(shape) {
  check_shape(shape);
  options_.backend = Backend::cpu;
  options_.causal = shape.causal ? Causal::top_left : Causal::none;
  if (shape.variant == "window") {
    options_.window = {128, 128};
  } else if (is_linear_variant(shape.variant)) {
    linear_ = linear_variant_options(shape.variant);
  } else if (!shape.variant.empty()) {
    if (shape.Tq != shape.Tk) throw Error("Tk", "Tq for a variant", std::to_string(shape.Tk));
    blocks_ = variant_mask(shape.variant, shape.Tq);
  }
  // A fixed seed: every run of the benchmark sees the same numbers (timing does not depend on
  // them, but a reproducible input keeps a surprising result reproducible too).
  Generator gen(2026);
  const DType dt = shape.dtype;
  // [B, T, heads, D], stored as such or as [B, heads, T, D]; random or left empty. Queries have
  // group H heads, keys and values H.
  const std::int64_t Hq = shape.H * shape.group;
  const auto rows = [&](std::int64_t T, bool random, std::int64_t heads) {
    const qkv::Shape stored = shape.heads_first ? qkv::Shape{shape.B, heads, T, shape.D}
                                                : qkv::Shape{shape.B, T, heads, shape.D};
    const Tensor t = random ? Tensor::randn(stored, gen, dt) : Tensor::empty(stored, dt);
    return shape.heads_first ? t.permute({0, 2, 1, 3}) : t;
  };
  q_ = rows(shape.Tq, true, Hq);
  k_ = rows(shape.Tk, true, shape.H);
  v_ = rows(shape.Tk, true, shape.H);
  out_ = rows(shape.Tq, false, Hq);
  lse_ = Tensor::empty({shape.B, Hq, shape.Tq}, dt == DType::f64 ? DType::f64 : DType::f32);
  if (shape.pass == Pass::bwd) {
    if (linear_) {
      dout_ = rows(shape.Tq, true, Hq);
      return;
    }
    if (blocks_.defined()) {
      AttentionOutput f = flex_attention(q_, k_, v_, blocks_);
      out_ = f.out;
      lse_ = f.lse;
    } else {
      attention_forward(q_, k_, v_, options_, out_, lse_);
    }
    dout_ = rows(shape.Tq, true, Hq);
    grads_.dq = rows(shape.Tq, false, Hq);
    grads_.dk = rows(shape.Tk, false, shape.H);
    grads_.dv = rows(shape.Tk, false, shape.H);
  }
}

void Workload::run() {
  // Into the outputs allocated once, as the built-in rows below: fresh dq, dk, dv per call (16 MiB
  // each at T = 8192, H = 8, D = 64, f32) cost their page faults, 12% of a window's backward on the
  // AMD EPYC Zen 3 VM (114 against 100 ms, median of 21 alternating pairs, 2 threads), which made
  // the lambda window's row 1.14x the built-in one; the forward's one output showed none.
  if (linear_) {  // its API allocates the outputs
    if (shape_.pass == Pass::fwd) {
      out_ = linear_attention(q_, k_, v_, *linear_);
    } else {
      const LinearGrads g = linear_attention_backward(dout_, q_, k_, v_, *linear_);
      grads_.dq = g.dq;
    }
    return;
  }
  if (blocks_.defined()) {
    if (shape_.pass == Pass::fwd) {
      flex_attention(q_, k_, v_, blocks_, {}, out_, lse_);
    } else {
      flex_attention_backward(dout_, q_, k_, v_, out_, lse_, blocks_, {}, grads_);
    }
    return;
  }
  if (shape_.pass == Pass::fwd) {
    attention_forward(q_, k_, v_, options_, out_, lse_);
  } else {
    attention_backward(dout_, q_, k_, v_, out_, lse_, options_, grads_);
  }
}

int reps_for(int requested, double warmup_seconds) noexcept {
  if (requested > 0) return requested;
  if (warmup_seconds <= 0.0) return kMaxReps;
  const double fit = kAutoRowSeconds / warmup_seconds;
  return fit >= kMaxReps ? kMaxReps : std::max(kMinReps, static_cast<int>(fit));
}

RowResult run_row(const Shape& shape, int threads, int requested_reps, const Peaks& peaks) {
  if (threads < 1) throw Error("threads", "at least 1", std::to_string(threads));
  if (requested_reps < 0) throw Error("reps", "0 (auto) or more", std::to_string(requested_reps));
  set_num_threads(threads);
  RowResult result;
  const bool bf16 = shape.dtype == DType::bf16 && !shape.is_decode();
  const double peak = shape.is_decode()           ? peaks.stream_gbps
                      : shape.dtype == DType::f64 ? peaks.gflops_f64
                      : bf16                      ? peaks.gflops_bf16
                                                  : peaks.gflops_f32;
  const bool probe = peak > 0.0;
  // Decode rows: the bandwidth just before the row (its arrays are freed before the RSS reset).
  const double stream_before = probe && shape.is_decode() ? stream_triad_gbps(threads, 3) : 0.0;
  const double read_before = probe && shape.is_decode() ? read_sweep_gbps(threads, 3) : 0.0;
  const bool reset = reset_peak_rss();
  result.shape = shape;
  result.threads = threads;
  std::vector<double> bursts;
  std::vector<double> fractions;
  {
    Workload work(shape);
    // The warm-up faults in the kernel's scratch and the outputs' pages, and sizes the reps.
    const Clock::time_point warm = Clock::now();
    work.run();
    result.reps = reps_for(requested_reps, seconds_since(warm));
    std::vector<double> times;
    times.reserve(static_cast<std::size_t>(result.reps));
    for (int rep = 0; rep < result.reps; ++rep) {
      const Clock::time_point start = Clock::now();
      work.run();
      times.push_back(seconds_since(start));
      if (probe && !shape.is_decode()) {
        bursts.push_back(
            bf16 ? bf16_burst_gflops(threads, kBurstIterationsLog2)
                 : fma_burst_gflops(compute_dtype(shape.dtype), threads, kBurstIterationsLog2));
        fractions.push_back(flop_count(shape) / times.back() * 1e-9 / bursts.back());
      }
    }
    const auto [fastest, slowest] = std::minmax_element(times.begin(), times.end());
    result.ms_min = *fastest * 1e3;
    result.ms_max = *slowest * 1e3;
    const double seconds = median(std::move(times));
    result.ms = seconds * 1e3;
    result.gflops = flop_count(shape) / seconds * 1e-9;
    if (shape.is_decode()) result.gbps = kv_bytes(shape) / seconds * 1e-9;
  }
  bool from_procfs = false;
  result.peak_rss_mb = peak_rss_mb(&from_procfs);
  result.peak_rss_is_row = reset && from_procfs;
  if (!probe) return result;
  if (shape.is_decode()) {
    result.peak_fraction = result.gbps / peak;
    result.ceiling_during = 0.5 * (stream_before + stream_triad_gbps(threads, 3));
    result.fraction_during = result.gbps / result.ceiling_during;
    result.read_during = 0.5 * (read_before + read_sweep_gbps(threads, 3));
    result.fraction_of_read = result.gbps / result.read_during;
  } else {
    result.peak_fraction = result.gflops / peak;
    result.ceiling_during = median(std::move(bursts));
    result.fraction_during = median(std::move(fractions));
  }
  return result;
}

std::vector<Shape> suite(const std::vector<std::int64_t>& ts, const std::vector<std::int64_t>& ds,
                         const std::vector<std::int64_t>& decode_tks, DType dtype,
                         std::int64_t decode_group, std::int64_t decode_tq) {
  std::vector<Shape> shapes;
  for (const Pass pass : {Pass::fwd, Pass::bwd}) {
    for (const std::int64_t d : ds) {
      for (const bool causal : {false, true}) {
        for (const std::int64_t t : ts) {
          shapes.push_back({pass, 1, 8, t, t, d, causal, dtype, {}});
        }
      }
    }
  }
  for (const std::int64_t tk : decode_tks) {
    Shape decode{Pass::fwd, 1, 8, decode_tq, tk, 128, false, dtype, {}};
    decode.group = decode_group;
    decode.decode = decode_tq > 1;
    shapes.push_back(decode);
  }
  return shapes;
}

}  // namespace qkv::bench
