#include "mods_case.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <utility>

#include "case_text.hpp"
#include "qkv/captured.hpp"
#include "qkv/dual.hpp"
#include "qkv/masks.hpp"
#include "qkv/mod_values.hpp"
#include "qkv/philox.hpp"

namespace qkv::fuzz {
namespace {

constexpr std::int64_t kBlocks[] = {1, 2, 3, 4, 7, 8, 16, 32, 64};
constexpr double kSlopes[] = {0.0, 0.5, -0.25, 1.0, 0.0625, 4.0, 1e-3, 0.125};
constexpr double kCaps[] = {1.0, 5.0, 30.0, 50.0, 0.5, 1000.0, 20.0, 2.0};
constexpr double kFactors[] = {1.0, 0.5, -1.0, 2.0, 0.0, 3.0, -0.25, 8.0};

// A mask leaf as a function of the problem's sizes, so that the tree is made when the case is
// run (an invalid argument then throws where the user's call would).
using Leaf = std::function<MaskMod(std::int64_t Tq, std::int64_t Tk)>;

// The lambda score: s * factor, capped at c (0: not), minus slope[h] |i - j|, plus the table.
struct LambdaParams {
  double factor = 1, cap = 0;
  std::vector<double> slopes;
};

auto make_lambda(const LambdaParams& p, const std::vector<Captured>& captured,
                 const std::vector<std::int64_t>& buckets, std::int64_t Tq) {
  const bool has_table = !captured.empty();
  const Captured table = has_table ? captured[0] : Captured(Tensor::zeros({1}, DType::f32));
  const auto offsets = std::make_shared<const std::vector<std::int64_t>>(buckets);
  return [p, has_table, table, offsets, Tq](auto s, std::int64_t, std::int64_t h, std::int64_t i,
                                            std::int64_t j) {
    using S = decltype(s);
    S x = s * p.factor;
    if (p.cap > 0) x = p.cap * qkv::tanh(x / p.cap);
    x = x - p.slopes[static_cast<std::size_t>(h)] * static_cast<double>(i > j ? i - j : j - i);
    if (has_table) x = x + table.at(s, h, (*offsets)[static_cast<std::size_t>(j - i + Tq - 1)]);
    return x;
  };
}

class ModsBuilder {
 public:
  ModsBuilder(ByteReader& in, std::int64_t B, std::int64_t Hq, std::int64_t Tq, std::int64_t Tk)
      : in_(in), B_(B), Hq_(Hq), Tq_(Tq), Tk_(Tk), T_(std::max(Tq, Tk)) {}

  ModsCase build() {
    const std::uint8_t mode = in_.byte();
    lambda_mask_ = mode & 1;
    lambda_score_ = mode & 2;
    one_batch_ = mode & 4;
    one_head_ = mode & 8;
    const bool mismatched = mode >= 248;  // a block mask made for another Tq: refused
    draw_mask();
    if (lambda_score_) {
      draw_lambda_score();
    } else {
      draw_score_chain();
    }
    // The block mask for one batch or one head only where no leaf depends on b or h.
    const std::int64_t mask_B = one_batch_ && !per_batch_ ? 1 : B_;
    const std::int64_t mask_H = one_head_ && !per_head_ ? 1 : Hq_;
    const std::int64_t mask_Tq = mismatched ? Tq_ + 1 : Tq_;
    note() << "block mask for B " << mask_B << " H " << mask_H << " Tq " << mask_Tq << " Tk " << Tk_
           << (lambda_mask_ ? ", the mask behind a lambda" : "");
    c_.build = [mask = mask_, score = score_, lambda = lambda_mask_, lambda_score = lambda_score_,
                params = lambda_params_, table = c_.table, buckets = c_.buckets, mask_B, mask_H,
                mask_Tq, Tq = Tq_, Tk = Tk_](bool exact) {
      const MaskMod tree = mask(mask_Tq, Tk).for_shape(mask_Tq, Tk);
      ModsCall call;
      call.keep = [tree](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
        return tree(b, h, i, j);
      };
      call.blocks = lambda
                        ? create_block_mask([tree](std::int64_t b, std::int64_t h, std::int64_t i,
                                                   std::int64_t j) { return tree(b, h, i, j); },
                                            mask_B, mask_H, mask_Tq, Tk)
                        : create_block_mask(tree, mask_B, mask_H, mask_Tq, Tk);
      std::vector<Captured> captured;
      if (table.defined()) captured.emplace_back(exact ? table.to(DType::f64) : table);
      if (lambda_score) {
        attach(call, make_lambda(params, captured, buckets, Tq), captured);
      } else {
        attach(call, score(captured), captured);
      }
      return call;
    };
    c_.description = description_.str();
    return std::move(c_);
  }

 private:
  ByteReader& in_;
  std::int64_t B_, Hq_, Tq_, Tk_, T_;
  bool lambda_mask_ = false, lambda_score_ = false, one_batch_ = false, one_head_ = false;
  bool per_batch_ = false, per_head_ = false;
  std::function<MaskMod(std::int64_t, std::int64_t)> mask_;
  std::function<ScoreMod(const std::vector<Captured>&)> score_;
  LambdaParams lambda_params_;
  ModsCase c_;
  std::ostringstream description_;

  std::ostream& note() {
    if (description_.tellp() > 0) description_ << '\n';
    description_ << "  ";
    return description_;
  }

  template <class Score>
  static void attach(ModsCall& call, Score score, const std::vector<Captured>& captured) {
    const BlockMask blocks = call.blocks;
    call.forward = [score, blocks](const Tensor& q, const Tensor& k, const Tensor& v,
                                   const FlexOptions& options) {
      return flex_attention(q, k, v, score, blocks, options);
    };
    call.weights = [score, blocks](const Tensor& q, const Tensor& k, const FlexOptions& options) {
      return flex_attention_weights(q, k, score, blocks, options);
    };
    call.backward = [score, blocks, captured](const Tensor& dout, const Tensor& q, const Tensor& k,
                                              const Tensor& v, const Tensor& out, const Tensor& lse,
                                              const FlexOptions& options) {
      return flex_attention_backward(dout, q, k, v, out, lse, score, blocks, options, captured);
    };
  }

  // A window side: -1 (open), a width, or (one byte in 256) -2 or less, which is refused.
  std::int64_t side() {
    const std::uint8_t kind = in_.byte();
    if (kind < 64) return -1;
    if (kind == 255) return -2 - in_.byte();
    return in_.range(0, Tk_ + 2);
  }

  // One value per batch (or one for all), each in [0, limit]; byte 255 makes one negative.
  std::vector<std::int64_t> per_batch_values(std::int64_t limit) {
    const bool one = in_.byte() >= 200;
    std::vector<std::int64_t> values(one ? 1 : static_cast<std::size_t>(B_));
    for (std::int64_t& value : values) value = in_.range(0, limit);
    if (in_.byte() == 255 && !values.empty()) values.back() = -1;
    if (values.size() > 1) per_batch_ = true;
    return values;
  }

  std::vector<std::int64_t> positions() {
    std::vector<std::int64_t> at(static_cast<std::size_t>(in_.range(0, 4)));
    for (std::int64_t& x : at) x = in_.range(0, T_ + 1);
    return at;
  }

  // Document ids for `batches` rows of T positions: `documents` contiguous runs per row, cut at
  // drawn positions; byte 255 sends a token back to an earlier document (refused).
  std::vector<std::int64_t> document_ids(std::int64_t batches, std::int64_t T) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(batches * T), 0);
    for (std::int64_t b = 0; b < batches; ++b) {
      std::vector<std::int64_t> cuts(static_cast<std::size_t>(in_.range(0, 7)));
      for (std::int64_t& cut : cuts) cut = in_.range(0, T);
      std::sort(cuts.begin(), cuts.end());
      for (std::int64_t t = 0; t < T; ++t) {
        ids[static_cast<std::size_t>(b * T + t)] =
            std::upper_bound(cuts.begin(), cuts.end(), t) - cuts.begin();
      }
    }
    if (in_.byte() == 255 && T >= 3) ids[static_cast<std::size_t>(T - 1)] = -1;
    if (in_.byte() == 254 && T >= 3) {
      std::swap(ids[0], ids[static_cast<std::size_t>(T - 1)]);
    }
    return ids;
  }

  Leaf draw_leaf() {
    switch (in_.byte() % 12) {
      case 0:
        note() << "full";
        return [](std::int64_t, std::int64_t) { return MaskMod(masks::Full{}); };
      case 1: {
        const std::uint8_t kind = in_.byte();
        if (kind < 128) {
          note() << "causal";
          return [](std::int64_t, std::int64_t) { return MaskMod(masks::causal()); };
        }
        if (kind < 192) {
          note() << "causal_lower_right (per_shape)";
          return [](std::int64_t, std::int64_t) {
            return MaskMod::per_shape([](std::int64_t Tq, std::int64_t Tk) {
              return MaskMod(masks::causal_lower_right(Tq, Tk));
            });
          };
        }
        const std::int64_t offset = in_.range(-Tq_ - 2, Tk_ + 2);
        note() << "causal offset " << offset;
        return [offset](std::int64_t, std::int64_t) { return MaskMod(masks::Causal{offset}); };
      }
      case 2: {
        const std::int64_t left = side(), right = side(), offset = in_.range(-8, 8);
        note() << "sliding_window(" << left << ", " << right << ", " << offset << ")";
        return [=](std::int64_t, std::int64_t) {
          return MaskMod(masks::sliding_window(left, right, offset));
        };
      }
      case 3: {
        const std::vector<std::int64_t> lengths = per_batch_values(Tk_);
        note() << "key_lengths " << list(lengths);
        return [=](std::int64_t, std::int64_t) { return MaskMod(masks::key_lengths(lengths)); };
      }
      case 4: {
        const std::vector<std::int64_t> prefix = per_batch_values(T_);
        note() << "prefix_lm " << list(prefix);
        return [=](std::int64_t, std::int64_t) { return MaskMod(masks::prefix_lm(prefix)); };
      }
      case 5: {
        const std::int64_t batches = in_.byte() >= 128 && B_ > 1 ? B_ : 1;
        const std::int64_t T = in_.byte() < 200 ? T_ : in_.range(0, T_ + 2);
        const std::vector<std::int64_t> ids = document_ids(batches, T);
        if (batches > 1) per_batch_ = true;
        note() << "document, " << batches << " rows of " << T << " ids " << list(ids);
        return [=](std::int64_t, std::int64_t) { return MaskMod(masks::document(ids, batches)); };
      }
      case 6: {
        const std::vector<std::int64_t> at = positions();
        note() << "global_tokens " << list(at);
        return [=](std::int64_t, std::int64_t) { return MaskMod(masks::global_tokens(at)); };
      }
      case 7: {
        const std::int64_t window = in_.range(0, 70);
        const std::vector<std::int64_t> at = positions();
        note() << "longformer(" << window << ", " << list(at) << ")";
        return [=](std::int64_t, std::int64_t) { return MaskMod(masks::longformer(window, at)); };
      }
      case 8: {
        const std::int64_t block = in_.pick(kBlocks), window = in_.range(0, 5);
        const std::int64_t global = in_.range(0, 2), random = in_.range(0, 3);
        const std::uint64_t seed = in_.bytes(2);
        const std::int64_t heads = in_.byte() >= 128 ? Hq_ : 1;
        if (heads > 1) per_head_ = true;
        note() << "bigbird(block " << block << ", window " << window << ", global " << global
               << ", random " << random << ", seed " << seed << ", heads " << heads << ")";
        return [=](std::int64_t, std::int64_t) {
          return MaskMod::per_shape([=](std::int64_t Tq, std::int64_t Tk) {
            return MaskMod(masks::bigbird(block, window, global, random, seed, Tq, Tk, heads));
          });
        };
      }
      case 9: {
        const std::int64_t block = in_.pick(kBlocks);
        const std::int64_t q_blocks = (Tq_ + block - 1) / block + in_.range(0, 1);
        const std::int64_t k_blocks = (Tk_ + block - 1) / block + in_.range(0, 1);
        const double density = in_.byte() / 255.0;
        Generator generator(in_.bytes(2));
        std::vector<std::uint8_t> layout(static_cast<std::size_t>(q_blocks * k_blocks));
        for (std::uint8_t& cell : layout) cell = generator.next_uniform() < density ? 1 : 0;
        note() << "from_block_layout(" << q_blocks << " x " << k_blocks << " blocks of " << block
               << ", density " << density << ")";
        return [=](std::int64_t, std::int64_t) {
          return MaskMod(masks::from_block_layout(layout, q_blocks, k_blocks, block));
        };
      }
      case 10: {
        const std::int64_t stride = in_.range(0, 70);
        note() << "strided(" << stride << ")";
        return [=](std::int64_t, std::int64_t) { return MaskMod(masks::strided(stride)); };
      }
      default: {
        const std::int64_t block = in_.range(0, 70), summary = in_.range(0, 71);
        note() << "fixed(" << block << ", " << summary << ")";
        return [=](std::int64_t, std::int64_t) { return MaskMod(masks::fixed(block, summary)); };
      }
    }
  }

  // 0 to 3 leaves, each joined to the tree so far by & (even byte) or | (odd).
  void draw_mask() {
    const std::int64_t leaves = in_.range(0, 3);
    mask_ = [](std::int64_t, std::int64_t) { return MaskMod(); };
    note() << "mask mod of " << leaves << " leaves";
    for (std::int64_t n = 0; n < leaves; ++n) {
      const bool conjunction = n == 0 || in_.byte() % 2 == 0;
      if (n > 0) note() << (conjunction ? "and" : "or");
      const Leaf leaf = draw_leaf();
      mask_ = [conjunction, first = n == 0, tree = mask_, leaf](std::int64_t Tq, std::int64_t Tk) {
        if (first) return leaf(Tq, Tk);
        return conjunction ? tree(Tq, Tk) & leaf(Tq, Tk) : tree(Tq, Tk) | leaf(Tq, Tk);
      };
    }
  }

  std::vector<double> slopes() {
    std::vector<double> values(static_cast<std::size_t>(Hq_));
    for (double& slope : values) slope = in_.pick(kSlopes);
    return values;
  }

  // A table [Hq, n] of normal values times a drawn scale, f32 or f64, and the buckets of the
  // offsets j - i: a clipped window or drawn buckets; byte 255 puts one past n where validation
  // sees the buckets (relative_bias; a lambda must not read outside the table).
  void draw_table(bool checked) {
    const std::int64_t n = in_.range(1, 40);
    const DType dtype = in_.byte() >= 160 ? DType::f64 : DType::f32;
    const double scale = in_.pick(kFactors);
    Generator generator(in_.bytes(2));
    std::vector<double> values(static_cast<std::size_t>(Hq_ * n));
    for (double& x : values) x = generator.next_normal() * scale;
    c_.table = Tensor::from_values({Hq_, n}, values, dtype);
    const std::int64_t offsets = std::max<std::int64_t>(Tq_ + Tk_ - 1, 0);
    c_.buckets.resize(static_cast<std::size_t>(offsets));
    const bool clipped = in_.byte() < 128;
    for (std::int64_t o = 0; o < offsets; ++o) {
      const std::int64_t offset = o - (Tq_ - 1);
      c_.buckets[static_cast<std::size_t>(o)] =
          clipped ? std::clamp<std::int64_t>(offset + n / 2, 0, n - 1)
                  : static_cast<std::int64_t>(generator.next_u32() % static_cast<std::uint32_t>(n));
    }
    if (in_.byte() == 255 && checked && offsets > 0) c_.buckets.back() = n;
    double largest = 0;
    for (const double x : values) largest = std::max(largest, std::abs(x));
    c_.steps.push_back({ScoreStep::add, largest});
    note() << "relative_bias table " << dtype_name(dtype) << " [" << Hq_ << ", " << n << "] scale "
           << scale << (clipped ? ", clipped buckets " : ", drawn buckets ") << list(c_.buckets);
  }

  // 0 to 3 of alibi, softcap and relative_bias, applied in order.
  void draw_score_chain() {
    const std::int64_t leaves = in_.range(0, 3);
    note() << "score mod of " << leaves << " leaves";
    std::vector<std::function<ScoreMod(const std::vector<Captured>&)>> chain;
    for (std::int64_t n = 0; n < leaves; ++n) {
      switch (in_.byte() % 3) {
        case 0: {
          std::vector<double> s = slopes();
          if (in_.byte() == 255) s.push_back(0.5);  // Hq + 1 slopes
          double largest = 0;
          for (const double x : s) largest = std::max(largest, std::abs(x));
          c_.steps.push_back({ScoreStep::add, largest * static_cast<double>(Tq_ + Tk_)});
          note() << "alibi " << list(s);
          chain.emplace_back([s](const std::vector<Captured>&) { return scores::alibi(s); });
          break;
        }
        case 1: {
          const double cap = in_.byte() == 255 ? -1.0 : in_.pick(kCaps);
          c_.steps.push_back({ScoreStep::cap, cap});
          note() << "softcap " << cap;
          chain.emplace_back([cap](const std::vector<Captured>&) { return scores::softcap(cap); });
          break;
        }
        default:
          if (c_.table.defined()) {  // one table per case
            note() << "(a second table skipped)";
            break;
          }
          draw_table(true);
          chain.emplace_back([buckets = c_.buckets](const std::vector<Captured>& captured) {
            return scores::relative_bias(captured[0], buckets);
          });
          break;
      }
    }
    score_ = [chain](const std::vector<Captured>& captured) {
      ScoreMod mod;
      for (const auto& leaf : chain)
        mod = mod.identity() ? leaf(captured) : mod.then(leaf(captured));
      return mod;
    };
  }

  void draw_lambda_score() {
    LambdaParams& p = lambda_params_;
    p.factor = in_.pick(kFactors);
    p.cap = in_.byte() < 128 ? 0.0 : in_.pick(kCaps);
    p.slopes = slopes();
    c_.steps.push_back({ScoreStep::multiply, p.factor});
    if (p.cap > 0) c_.steps.push_back({ScoreStep::cap, p.cap});
    double largest = 0;
    for (const double x : p.slopes) largest = std::max(largest, std::abs(x));
    c_.steps.push_back({ScoreStep::add, largest * static_cast<double>(Tq_ + Tk_)});
    note() << "lambda score: s * " << p.factor << ", cap " << p.cap << ", slopes per head";
    if (in_.byte() >= 128) draw_table(false);
  }
};

}  // namespace

FlexOptions flex_options(const AttentionOptions& o, Backend backend) {
  FlexOptions flex;
  flex.scale = o.scale;
  flex.dropout_p = o.dropout_p;
  flex.seed = o.seed;
  flex.offset = o.offset;
  flex.backend = backend;
  return flex;
}

ModsCase draw_mods(ByteReader& in, std::int64_t B, std::int64_t Hq, std::int64_t Tq,
                   std::int64_t Tk) {
  return ModsBuilder(in, B, Hq, Tq, Tk).build();
}

}  // namespace qkv::fuzz
