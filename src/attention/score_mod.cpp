// ScoreMod: score mods as an immutable tree of leaves applied in sequence, and flex_attention
// with one. Each leaf does a row of a tile at a time, on plain numbers for the forward and on dual
// numbers (s, ds/ds) for the backward, so that a sequence chains the derivatives node by node.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention/validate.hpp"
#include "kernels/cpu/entry.hpp"
#include "kernels/mods.hpp"
#include "qkv/dual.hpp"
#include "qkv/error.hpp"
#include "qkv/mod_values.hpp"

namespace qkv {

class ScoreMod::Node {
 public:
  // What a score mod may depend on besides (s, b, h, i, j): the problem's sizes, and the dtype
  // its inputs arrive in (for the bounds qkv/attention.hpp's options have).
  struct Sizes {
    std::int64_t Tq = 0, Tk = 0, Hq = 0;
    DType inputs = DType::f32;
  };

  Node() = default;
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Throws qkv::Error where the mod does not fit the problem.
  virtual void check(const Sizes& sizes) const = 0;
  // s [cols] <- mod(s) for keys j0 + c of row i; with grad, each (s, grad) is the dual number s +
  // grad ε, so grad <- grad ds'/ds.
  virtual void row(const Sizes& sizes, std::int64_t b, std::int64_t h, std::int64_t i,
                   std::int64_t j0, std::int64_t cols, float* s, float* grad) const = 0;
  virtual void row(const Sizes& sizes, std::int64_t b, std::int64_t h, std::int64_t i,
                   std::int64_t j0, std::int64_t cols, double* s, double* grad) const = 0;
  // Appends the captured tensors this node reads (ScoreMod::captured).
  virtual void captured(std::vector<Captured>&) const {}
};

namespace {

using Node = ScoreMod::Node;
using Sizes = Node::Sizes;

// A leaf: both row overloads through the leaf's one template, run<T>.
template <class Derived>
class Leaf : public Node {
 public:
  void row(const Sizes& sizes, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
           std::int64_t cols, float* s, float* grad) const override {
    static_cast<const Derived*>(this)->run(sizes, b, h, i, j0, cols, s, grad);
  }
  void row(const Sizes& sizes, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
           std::int64_t cols, double* s, double* grad) const override {
    static_cast<const Derived*>(this)->run(sizes, b, h, i, j0, cols, s, grad);
  }
};

// ALiBi or soft-capping: the built-in options' own score mod (kernels::BuiltinScore) with only
// that option set, so that the rule and its rounding are the built-in ones.
class Builtin final : public Leaf<Builtin> {
 public:
  Builtin(std::vector<double> alibi_slopes, double softcap)
      : alibi_slopes_(std::move(alibi_slopes)), softcap_(softcap) {}

  void check(const Sizes& sizes) const override {
    if (!alibi_slopes_.empty()) {
      const auto n = static_cast<std::int64_t>(alibi_slopes_.size());
      if (n != sizes.Hq) {
        throw Error("score_mod: alibi slopes",
                    std::to_string(sizes.Hq) + " slopes (one per query head, from q)",
                    std::to_string(n));
      }
      for (const double slope : alibi_slopes_) {
        if (!attention::finite_in_compute(slope, sizes.inputs)) {
          throw Error("score_mod: alibi slopes",
                      attention::finite_for(sizes.inputs, "finite slopes"), attention::num(slope));
        }
      }
    }
    if (!attention::finite_in_compute(softcap_, sizes.inputs)) {
      throw Error("score_mod: softcap", attention::finite_for(sizes.inputs, "a finite cap > 0"),
                  attention::num(softcap_));
    }
  }

 public:
  template <class T>
  void run(const Sizes& sizes, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
           std::int64_t cols, T* s, T* grad) const {
    if (softcap_ > 0) {
      // In f64 lanes as the fused kernels cap the built-in option (on the reference backend too):
      // with libm's tanh per element scores::softcap's forward took 1.4x compiled FlexAttention's
      // time (bench/compare_flex.py, T = 4096, AMD EPYC Zen 3). The incoming tangent is then
      // multiplied by the derivative (1 for a cap applied first, the product exact).
      if (grad == nullptr) {
        kernels::cpu::soft_cap(static_cast<T>(softcap_), s, grad, cols);
        return;
      }
      constexpr std::int64_t kStack = 128;
      T stack[kStack];
      std::vector<T> heap(static_cast<std::size_t>(cols > kStack ? cols : 0));
      T* slope = cols > kStack ? heap.data() : stack;
      kernels::cpu::soft_cap(static_cast<T>(softcap_), s, slope, cols);
      for (std::int64_t c = 0; c < cols; ++c) grad[c] *= slope[c];
      return;
    }
    kernels::BuiltinScore<T> mod;
    mod.lengths = {sizes.Tq, sizes.Tk, nullptr, nullptr};
    mod.softcap = static_cast<T>(softcap_);
    mod.alibi_slopes = alibi_slopes_.empty() ? nullptr : alibi_slopes_.data();
    if (grad == nullptr) {
      for (std::int64_t c = 0; c < cols; ++c) s[c] = mod(s[c], b, h, i, j0 + c);
    } else {
      for (std::int64_t c = 0; c < cols; ++c) {
        const Dual<T> r = mod(Dual<T>{s[c], grad[c]}, b, h, i, j0 + c);
        s[c] = r.v;
        grad[c] = r.d;
      }
    }
  }

 private:
  std::vector<double> alibi_slopes_;
  double softcap_;  // 0: off
};

// s + table[h, buckets[j - i + Tq - 1]]; on dual numbers the table's element carries the tape's
// tangent (qkv/captured.hpp), so the backward's captured pass sees the read.
class RelativeBias final : public Leaf<RelativeBias> {
 public:
  RelativeBias(Captured table, std::vector<std::int64_t> buckets)
      : table_(std::move(table)), buckets_(std::move(buckets)) {}

  void captured(std::vector<Captured>& out) const override { out.push_back(table_); }
  void check(const Sizes& sizes) const override {
    const Tensor& t = table_.tensor();
    if (t.size(0) != sizes.Hq) {
      throw Error("score_mod: relative_bias table",
                  std::to_string(sizes.Hq) + " rows (one per query head, from q)", t.describe());
    }
    const auto n = static_cast<std::int64_t>(buckets_.size());
    if (n != sizes.Tq + sizes.Tk - 1) {
      throw Error("score_mod: relative_bias buckets",
                  std::to_string(sizes.Tq + sizes.Tk - 1) + " (Tq + Tk - 1, from q and k)",
                  std::to_string(n));
    }
  }

 public:
  template <class T>
  void run(const Sizes& sizes, std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j0,
           std::int64_t cols, T* s, T* grad) const {
    const std::int64_t* bucket = buckets_.data() + (j0 - i + sizes.Tq - 1);
    for (std::int64_t c = 0; c < cols; ++c) {
      if (grad == nullptr) {
        s[c] += table_.at(T(0), h, bucket[c]);
      } else {  // (s, grad) + (t, dt): dt 1 on the read the tape seeds, else 0
        const Dual<T> t = table_.at(Dual<T>{T(0), T(0)}, h, bucket[c]);
        s[c] += t.v;
        grad[c] += t.d;
      }
    }
  }

 private:
  Captured table_;
  std::vector<std::int64_t> buckets_;
};

// first, then second.
class Sequence final : public Node {
 public:
  Sequence(std::shared_ptr<const Node> first, std::shared_ptr<const Node> second)
      : first_(std::move(first)), second_(std::move(second)) {}

  void check(const Sizes& sizes) const override {
    first_->check(sizes);
    second_->check(sizes);
  }
  void captured(std::vector<Captured>& out) const override {
    first_->captured(out);
    second_->captured(out);
  }
  void row(const Sizes& sizes, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
           std::int64_t cols, float* s, float* grad) const override {
    first_->row(sizes, b, h, i, j0, cols, s, grad);
    second_->row(sizes, b, h, i, j0, cols, s, grad);
  }
  void row(const Sizes& sizes, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
           std::int64_t cols, double* s, double* grad) const override {
    first_->row(sizes, b, h, i, j0, cols, s, grad);
    second_->row(sizes, b, h, i, j0, cols, s, grad);
  }

 private:
  std::shared_ptr<const Node> first_, second_;
};

// The tree with the sizes of one problem, behind flex_attention's function pointers.
struct Bound {
  std::shared_ptr<const Node> root;
  Sizes sizes;
};

template <class T>
void bound_row(const void* mod, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
               std::int64_t cols, T* s, T* grad) {
  const Bound& m = *static_cast<const Bound*>(mod);
  if (grad != nullptr) std::fill(grad, grad + cols, T(1));  // ds/ds: the dual numbers' seed
  m.root->row(m.sizes, b, h, i, j0, cols, s, grad);
}

// The captured pass (detail::captured_pass) through the tree, s's own tangent 0.
template <class T>
void bound_captured(const void* mod, std::int64_t b, std::int64_t h, std::int64_t i,
                    std::int64_t j0, std::int64_t cols, const T* s, const T* ds,
                    const detail::CaptureSink<T>& sink) {
  const Bound& m = *static_cast<const Bound*>(mod);
  detail::captured_pass(cols, s, ds, sink, [&](T x, std::int64_t c) {
    T tangent = 0;
    m.root->row(m.sizes, b, h, i, j0 + c, 1, &x, &tangent);
    return Dual<T>{x, tangent};
  });
}

// q, k, v checked as flex_attention checks them, then the mod against their sizes.
detail::ErasedScore bind(const ScoreMod& score_mod, const Tensor& q, const Tensor& k,
                         const Tensor& v) {
  const kernels::Dims d = attention::validate_inputs(q, k, v, AttentionOptions{});
  const Sizes sizes{d.Tq, d.Tk, d.Hq, q.dtype()};
  score_mod.node()->check(sizes);
  detail::ErasedScore erased;
  erased.mod = std::make_shared<const Bound>(Bound{score_mod.node(), sizes});
  erased.row_f32 = &bound_row<float>;
  erased.row_f64 = &bound_row<double>;
  erased.captured_f32 = &bound_captured<float>;
  erased.captured_f64 = &bound_captured<double>;
  return erased;
}

}  // namespace

std::vector<Captured> ScoreMod::captured() const {
  std::vector<Captured> out;
  if (node_ != nullptr) node_->captured(out);
  return out;
}

ScoreMod ScoreMod::then(const ScoreMod& next) const {
  if (identity()) return next;
  if (next.identity()) return *this;
  return ScoreMod(std::make_shared<const Sequence>(node_, next.node_));
}

namespace scores {

ScoreMod alibi(std::vector<double> slopes) {
  if (slopes.empty()) throw Error("slopes", "one slope per query head", "none");
  for (std::size_t n = 0; n < slopes.size(); ++n) {
    if (!std::isfinite(slopes[n])) {
      throw Error("slopes[" + std::to_string(n) + "]", "a finite slope", attention::num(slopes[n]));
    }
  }
  return ScoreMod(std::make_shared<const Builtin>(std::move(slopes), 0.0));
}

ScoreMod relative_bias(const Captured& table, std::vector<std::int64_t> buckets) {
  if (table.tensor().dim() != 2) {
    throw Error("table", "a [Hq, buckets] tensor", table.tensor().describe());
  }
  const std::int64_t n = table.tensor().size(1);
  for (std::size_t x = 0; x < buckets.size(); ++x) {
    if (buckets[x] < 0 || buckets[x] >= n) {
      throw Error("buckets[" + std::to_string(x) + "]",
                  "a bucket in [0, " + std::to_string(n) + ") (the table's columns)",
                  std::to_string(buckets[x]));
    }
  }
  return ScoreMod(std::make_shared<const RelativeBias>(table, std::move(buckets)));
}

ScoreMod softcap(double cap) {
  if (!(cap > 0) || !std::isfinite(cap)) {
    throw Error("softcap", "a finite cap > 0", attention::num(cap));
  }
  return ScoreMod(std::make_shared<const Builtin>(std::vector<double>(), cap));
}

}  // namespace scores

AttentionOutput flex_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                               const ScoreMod& score_mod, const BlockMask& block_mask,
                               const FlexOptions& options) {
  if (score_mod.identity()) return detail::flex_forward(q, k, v, nullptr, block_mask, options);
  const detail::ErasedScore score = bind(score_mod, q, k, v);
  return detail::flex_forward(q, k, v, &score, block_mask, options);
}

Tensor flex_attention_weights(const Tensor& q, const Tensor& k, const ScoreMod& score_mod,
                              const BlockMask& block_mask, const FlexOptions& options) {
  if (score_mod.identity()) return detail::flex_weights(q, k, nullptr, block_mask, options);
  const detail::ErasedScore score = bind(score_mod, q, k, k);
  return detail::flex_weights(q, k, &score, block_mask, options);
}

AttentionGrads flex_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       const ScoreMod& score_mod, const BlockMask& block_mask,
                                       const FlexOptions& options,
                                       const std::vector<Captured>& captured) {
  if (score_mod.identity()) {
    return detail::flex_backward(dout, q, k, v, out, lse, nullptr, block_mask, options, captured);
  }
  const detail::ErasedScore score = bind(score_mod, q, k, v);
  return detail::flex_backward(dout, q, k, v, out, lse, &score, block_mask, options, captured);
}

}  // namespace qkv
