// libFuzzer target for attention (README, "Fuzzing"). Each input is decoded into one call
// (attention_case.hpp: shapes, layouts, every option, dtypes, thread counts, data with NaN, inf,
// huge and subnormal values anywhere), or into a flex_attention call with mods (mods_case.hpp),
// whose table gradient is checked like the others. The call runs forward and backward on the fused
// backend (Backend::cpu, twice, on two thread counts), on the reference backend in the same dtype,
// and, when the fused results are not all within their rounding slack of the reference's, on the
// reference in f64 from the same input values. A finding, reported by abort() with the case and
// what differs, is:
//   - an exception other than qkv::Error, a crash, or a sanitizer report;
//   - one backend throwing qkv::Error where the other does not, or with another message;
//   - a NaN or non-finite pattern of out, lse, dq, dk, dv or dbias that differs between the fused
//     and the reference backends (except that NaN and +-inf may trade places where an infinity
//     meets a P_ij below the smallest normal: attention_check.hpp);
//   - an error against the f64 reference beyond FlashAttention's rule (attention_check.hpp);
//   - different bits from the two thread counts;
//   - a block mask tile called empty or full where the mask mod keeps or drops a pair in it.
// QKV_FUZZ_VERBOSE=1 prints every case, which is how a saved finding is read back.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "attention_case.hpp"
#include "attention_check.hpp"
#include "attention_slack.hpp"
#include "byte_reader.hpp"
#include "kernels/cpu/bf16_gemm.hpp"
#include "qkv/attention.hpp"
#include "qkv/block_mask.hpp"
#include "qkv/error.hpp"
#include "qkv/flex.hpp"
#include "qkv/system.hpp"

namespace qkv::fuzz {
namespace {

bool verbose() {
  static const bool on = [] {
    const char* value = std::getenv("QKV_FUZZ_VERBOSE");
    return value != nullptr && std::string(value) == "1";
  }();
  return on;
}

// What one backend returned for the case, or the message of the qkv::Error it threw.
struct Results {
  AttentionOutput forward;
  AttentionGrads grads;
  std::optional<std::string> error;
};

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv], dout [B, Tq, Hq, Dv] (or what the case
// made invalid): the forward, then the backward on its out and lse, on `threads` threads, into
// the case's output layouts when it has them.
Results run(const AttentionCase& c, const Tensor& q, const Tensor& k, const Tensor& v,
            const Tensor& dout, const AttentionOptions& options, int threads) {
  set_num_threads(threads);
  Results r;
  try {
    if (!c.outputs && !c.alias_output) {
      r.forward = attention_forward(q, k, v, options);
      r.grads = attention_backward(dout, q, k, v, r.forward.out, r.forward.lse, options);
      return r;
    }
    // Outputs in the case's layouts, with NaN around them; the backward's dq is q itself when
    // the case asks for an overlap, which validation must refuse.
    const OutputLayouts layouts = c.outputs.value_or(OutputLayouts{});
    const bool valid = q.dim() == 4 && v.dim() == 4 && is_floating(q.dtype());
    const DType dtype = valid ? q.dtype() : DType::f32;
    const Shape out_shape = valid ? Shape{q.size(0), q.size(1), q.size(2), v.size(3)} : Shape{1};
    const Shape lse_shape = valid ? Shape{q.size(0), q.size(2), q.size(1)} : Shape{1};
    r.forward.out = make_output(out_shape, dtype, layouts.out);
    r.forward.lse = make_output(lse_shape, dtype == DType::f64 ? dtype : DType::f32, layouts.lse);
    attention_forward(q, k, v, options, r.forward.out, r.forward.lse);
    r.grads.dq = c.alias_output ? q : make_output(q.shape(), q.dtype(), layouts.dq);
    r.grads.dk = make_output(k.shape(), k.dtype(), layouts.dk);
    r.grads.dv = make_output(v.shape(), v.dtype(), layouts.dv);
    if (options.bias.defined()) {
      r.grads.dbias = make_output(options.bias.shape(), options.bias.dtype(), layouts.dbias);
    }
    attention_backward(dout, q, k, v, r.forward.out, r.forward.lse, options, r.grads);
  } catch (const Error& e) {
    r.error = e.what();
  }
  return r;
}

// The same for a mods case (c.mods): flex_attention and its backward with the case's mods, the
// table's gradient in grads.captured; exact: the table in f64.
Results run_mods(const AttentionCase& c, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& dout, Backend backend, bool exact, int threads) {
  set_num_threads(threads);
  Results r;
  try {
    const ModsCall call = c.mods->build(exact);
    const FlexOptions options = flex_options(c.options, backend);
    r.forward = call.forward(q, k, v, options);
    r.grads = call.backward(dout, q, k, v, r.forward.out, r.forward.lse, options);
  } catch (const Error& e) {
    r.error = e.what();
  }
  return r;
}

// The case with backend (the fused runs on the case's matrix path).
Results run(const AttentionCase& c, Backend backend, int threads) {
  std::optional<kernels::cpu::ForcedFusedPath> forced;  // else the library's own choice
  if (backend == Backend::cpu && c.matrix_path) forced.emplace(c.matrix_path);
  if (c.mods) return run_mods(c, c.q, c.k, c.v, c.dout, backend, false, threads);
  AttentionOptions options = c.options;
  options.backend = backend;
  return run(c, c.q, c.k, c.v, c.dout, options, threads);
}

// The reference on the same values converted to f64 (exactly: every dtype converts to f64
// without rounding), in contiguous layouts.
Results run_exact(const AttentionCase& c) {
  if (c.mods) {
    return run_mods(c, c.q.to(DType::f64), c.k.to(DType::f64), c.v.to(DType::f64),
                    c.dout.to(DType::f64), Backend::reference, true, c.threads[0]);
  }
  AttentionOptions options = c.options;
  options.backend = Backend::reference;
  if (options.bias.defined()) options.bias = options.bias.to(DType::f64);
  AttentionCase plain;
  return run(plain, c.q.to(DType::f64), c.k.to(DType::f64), c.v.to(DType::f64),
             c.dout.to(DType::f64), options, c.threads[0]);
}

[[noreturn]] void finding(const AttentionCase& c, const std::string& what) {
  std::fprintf(stderr, "attention_fuzz: %s\ncase:\n%s\n", what.c_str(), c.description.c_str());
  std::abort();
}

// A mods case's block mask against its mask mod evaluated element by element: no kept pair in an
// empty tile, no dropped pair in a full one, and the tile counts adding up.
void check_block_mask(const AttentionCase& c) {
  const ModsCall call = c.mods->build(false);
  const BlockMask& blocks = call.blocks;
  const std::int64_t bq = blocks.block_q(), bk = blocks.block_k();
  const std::int64_t Tq = blocks.q_len(), Tk = blocks.kv_len();
  std::int64_t tiles = 0;
  for (std::int64_t b = 0; b < blocks.batches(); ++b) {
    for (std::int64_t h = 0; h < blocks.heads(); ++h) {
      for (std::int64_t qb = 0; qb < blocks.q_blocks(); ++qb) {
        for (std::int64_t kb = 0; kb < blocks.k_blocks(); ++kb, ++tiles) {
          const TileKind kind = blocks.kind(b, h, qb, kb);
          if (kind == TileKind::partial) continue;
          for (std::int64_t i = qb * bq; i < std::min(Tq, (qb + 1) * bq); ++i) {
            for (std::int64_t j = kb * bk; j < std::min(Tk, (kb + 1) * bk); ++j) {
              if (call.keep(b, h, i, j) != (kind == TileKind::full)) {
                finding(c, "the block mask calls tile (b " + std::to_string(b) + ", h " +
                               std::to_string(h) + ", q-block " + std::to_string(qb) +
                               ", k-block " + std::to_string(kb) + ") " +
                               (kind == TileKind::full ? "full" : "empty") + " but the mask mod " +
                               (kind == TileKind::full ? "drops" : "keeps") + " (" +
                               std::to_string(i) + ", " + std::to_string(j) + ")");
              }
            }
          }
        }
      }
    }
  }
  const std::int64_t counted = blocks.count(TileKind::empty) + blocks.count(TileKind::partial) +
                               blocks.count(TileKind::full);
  if (counted != tiles) {
    finding(c, "the block mask counts " + std::to_string(counted) + " tiles of " +
                   std::to_string(tiles));
  }
}

// The gradient of a mods case's table, undefined without one.
Tensor captured(const Results& r) {
  return r.grads.captured.empty() ? Tensor() : r.grads.captured[0];
}

// The patterns, then the accuracy: the f64 reference is computed only when the fused results are
// not all within their slack of the reference's (for f64 inputs the reference is exact).
void check(const AttentionCase& c, const Results& fused, const Results& lo) {
  const Slack slack = compute_slack(c, lo.forward, c.dtype == DType::f64 ? DType::f64 : DType::f32);
  const std::vector<char> no_edge(static_cast<std::size_t>(lo.forward.lse.numel()), 0);
  Versions versions[] = {
      {"out", fused.forward.out, lo.forward.out, {}, &slack.out, &slack.out_edge},
      {"lse", fused.forward.lse, lo.forward.lse, {}, &slack.lse, &no_edge},
      {"dq", fused.grads.dq, lo.grads.dq, {}, &slack.dq, &slack.dq_edge},
      {"dk", fused.grads.dk, lo.grads.dk, {}, &slack.dk, &slack.dk_edge},
      {"dv", fused.grads.dv, lo.grads.dv, {}, &slack.dv, &slack.dv_edge},
      {"dbias", fused.grads.dbias, lo.grads.dbias, {}, &slack.dbias, &slack.dbias_edge},
      {"captured", captured(fused), captured(lo), {}, &slack.captured, &slack.captured_edge},
  };
  bool close = true;
  for (const Versions& v : versions) {
    if (!v.fused.defined()) continue;
    if (std::string why = check_pattern(v); !why.empty()) finding(c, why);
    close = close && within_slack(v);
  }
  if (close) return;
  const Results exact = c.dtype == DType::f64 ? lo : run_exact(c);
  if (exact.error) finding(c, "the f64 reference refuses the case: " + *exact.error);
  const Tensor exact_captured = captured(exact);
  const Tensor* exact_tensors[] = {&exact.forward.out, &exact.forward.lse, &exact.grads.dq,
                                   &exact.grads.dk,    &exact.grads.dv,    &exact.grads.dbias,
                                   &exact_captured};
  for (int t = 0; t < 7; ++t) {
    Versions& v = versions[t];
    if (!v.fused.defined()) continue;
    v.exact = *exact_tensors[t];
    if (std::string why = check_accuracy(v); !why.empty()) finding(c, why);
  }
}

int test_one(std::span<const std::uint8_t> bytes) {
  ByteReader in(bytes);
  const std::optional<AttentionCase> drawn = draw_case(in);
  if (!drawn) return -1;  // over the work budget: not worth keeping in the corpus
  const AttentionCase& c = *drawn;
  if (verbose()) std::fprintf(stderr, "case:\n%s\n", c.description.c_str());

  const Results fused = run(c, Backend::cpu, c.threads[0]);
  const Results lo = run(c, Backend::reference, c.threads[0]);
  if (fused.error != lo.error) {
    finding(c, "the backends disagree on validity: fused " + fused.error.value_or("returns") +
                   "; reference " + lo.error.value_or("returns"));
  }
  if (fused.error) {
    if (verbose()) std::fprintf(stderr, "refused: %s\n", fused.error->c_str());
    return 0;
  }
  const Results again = run(c, Backend::cpu, c.threads[1]);
  const Tensor fused_captured = captured(fused), again_captured = captured(again);
  const std::pair<const char*, const Tensor*> tensors[] = {
      {"out", &fused.forward.out},  {"lse", &fused.forward.lse}, {"dq", &fused.grads.dq},
      {"dk", &fused.grads.dk},      {"dv", &fused.grads.dv},     {"dbias", &fused.grads.dbias},
      {"captured", &fused_captured}};
  const Tensor* others[] = {&again.forward.out, &again.forward.lse, &again.grads.dq,
                            &again.grads.dk,    &again.grads.dv,    &again.grads.dbias,
                            &again_captured};
  for (int t = 0; t < 7; ++t) {
    if (std::string why = check_bitwise(tensors[t].first, *tensors[t].second, *others[t]);
        !why.empty()) {
      finding(c, why);
    }
  }
  if (c.mods) check_block_mask(c);
  check(c, fused, lo);
  return 0;
}

}  // namespace
}  // namespace qkv::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The target compares the backends: a forced backend would compare one with itself.
  unsetenv("QKV_BACKEND");
  // OpenMP threads that sleep as soon as a region ends: the cases run up to 4 threads, and with
  // libomp's default (spinning 200 ms) on the 2 loaded cores of the development VM 300 runs of an
  // 8 x 8 case took 10.0 s on 2 threads and 6.5 s on 4, against 1.5 s with KMP_BLOCKTIME=0 (1.2 s
  // on 1 thread).
  setenv("KMP_BLOCKTIME", "0", /*overwrite=*/0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return qkv::fuzz::test_one({data, size});
}
