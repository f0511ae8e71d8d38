#pragma once

// Mask and score mods as values: the predefined mods of qkv/masks.hpp, ALiBi and soft-capping
// held in immutable trees, so that they can be chosen at run time, kept in a class
// (nn::AttentionCall), passed through autograd and to Python, and composed (& and | for masks,
// then() for scores). They run through the kernels of qkv/flex.hpp as the compile-time mods do:
// create_block_mask classifies tiles from the leaves' closed forms, a partial tile costs one call
// per node per row of keys, and a score mod's derivative comes from dual numbers.
//
//   qkv::MaskMod mask = qkv::MaskMod(qkv::masks::causal()) & qkv::masks::document(ids);
//   qkv::ScoreMod score = qkv::scores::alibi(slopes).then(qkv::scores::softcap(30));
//   qkv::BlockMask blocks = qkv::create_block_mask(mask, 1, 1, T, T);
//   auto [out, lse] = qkv::flex_attention(q, k, v, score, blocks);
//   auto grads = qkv::flex_attention_backward(dout, q, k, v, out, lse, score, blocks);
//
// Mods that need the problem's Tq and Tk (bottom-right alignment, BigBird's layout) are made per
// shape: MaskMod::per_shape defers a leaf until create_block_mask knows them; scores::alibi takes
// them from q and k.

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "qkv/attention.hpp"
#include "qkv/block_mask.hpp"
#include "qkv/captured.hpp"
#include "qkv/flex.hpp"
#include "qkv/masks.hpp"
#include "qkv/tensor.hpp"

namespace qkv {

// A mask mod as a value: a predefined mask of qkv/masks.hpp, or an and (&) / or (|) of MaskMods.
// Cheap to copy (the tree is shared and never changes). It is a mask mod itself (operator(),
// classify_row and drop_row below), with the tile kinds of the compile-time and_masks / or_masks
// of the same leaves and the same kept keys, so the kernels give bitwise the same results.
class MaskMod {
 public:
  class Node;  // src/attention/mask_mod.cpp

  // Keeps every key.
  MaskMod();
  MaskMod(masks::Full mod);
  MaskMod(masks::Causal mod);
  MaskMod(masks::SlidingWindow mod);
  MaskMod(masks::KeyLengths mod);
  MaskMod(masks::PrefixLM mod);
  MaskMod(masks::Document mod);
  MaskMod(masks::GlobalTokens mod);
  MaskMod(masks::BlockLayout mod);  // from_block_layout, bigbird
  MaskMod(masks::Strided mod);
  MaskMod(masks::Fixed mod);
  // and_masks / or_masks of mods a MaskMod can hold (masks::longformer is one).
  template <class A, class B>
  MaskMod(masks::And<A, B> mod)
      : MaskMod(MaskMod(std::move(mod.first)) & MaskMod(std::move(mod.second))) {}
  template <class A, class B>
  MaskMod(masks::Or<A, B> mod)
      : MaskMod(MaskMod(std::move(mod.first)) | MaskMod(std::move(mod.second))) {}

  // A leaf made from the problem's sizes when a block mask is created for them, e.g.
  //   MaskMod::per_shape([](std::int64_t Tq, std::int64_t Tk) {
  //     return qkv::masks::causal_lower_right(Tq, Tk);
  //   })
  static MaskMod per_shape(std::function<MaskMod(std::int64_t Tq, std::int64_t Tk)> make);
  // The tree with every per_shape leaf made for (Tq, Tk) (create_block_mask calls it).
  MaskMod for_shape(std::int64_t Tq, std::int64_t Tk) const;

  // Keep where both keep; where either keeps.
  friend MaskMod operator&(const MaskMod& a, const MaskMod& b);
  friend MaskMod operator|(const MaskMod& a, const MaskMod& b);

  // The mask mod (qkv/masks.hpp): whether row i keeps key j; the kinds of a row of tiles; x[c] <-
  // value for c < cols where row i drops key j0 + c. A per_shape leaf not yet made for a shape
  // throws qkv::Error here.
  bool operator()(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const;
  void classify_row(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t i1,
                    std::int64_t Tk, std::int64_t bk, const TileKind* only, TileKind* kinds) const;
  void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                float value, float* x) const;
  void drop_row(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0, std::int64_t cols,
                double value, double* x) const;

 private:
  explicit MaskMod(std::shared_ptr<const Node> node);
  std::shared_ptr<const Node> node_;
};

// A score mod as a value: s' = mod(s, b, h, i, j), the identity by default, composed in sequence
// with then(). Cheap to copy. Its derivative for the backward is taken on dual numbers
// (qkv/dual.hpp), node by node along a row.
class ScoreMod {
 public:
  class Node;  // src/attention/score_mod.cpp

  ScoreMod() = default;  // s' = s
  explicit ScoreMod(std::shared_ptr<const Node> node) : node_(std::move(node)) {}

  // s -> next(this(s)): scores::softcap(30).then(scores::alibi(slopes)) caps, then adds ALiBi.
  ScoreMod then(const ScoreMod& next) const;
  bool identity() const noexcept { return node_ == nullptr; }
  // The tensors its leaves read that can get gradients (relative_bias tables), in the order the
  // leaves apply.
  std::vector<Captured> captured() const;
  // The tree, for the library's entry points (null: the identity).
  const std::shared_ptr<const Node>& node() const noexcept { return node_; }

 private:
  std::shared_ptr<const Node> node_;
};

namespace scores {

// ALiBi (Press et al. 2022), the rule of AttentionOptions::alibi_slopes: s - slopes[h] |i + Tk -
// Tq - j| (the diagonal bottom-right aligned, Tq and Tk from q and k). slopes [Hq], finite.
ScoreMod alibi(std::vector<double> slopes);
// Soft-capping (Gemma 2), the rule of AttentionOptions::softcap: c tanh(s / c), c finite and > 0.
ScoreMod softcap(double cap);
// A learned relative-position bias (Shaw et al. 2018; T5's bucketed form): s + table[h,
// buckets[j - i + Tq - 1]]. table [Hq, n] (qkv/captured.hpp: f32 or f64, read where it lies);
// buckets [Tq + Tk - 1], each in [0, n): the bucket of every offset j - i from -(Tq - 1) to
// Tk - 1 (T5's log-spaced buckets, a clipped window, anything that depends on j - i only). List
// the table in flex_attention_backward's `captured` for its gradient.
ScoreMod relative_bias(const Captured& table, std::vector<std::int64_t> buckets);

}  // namespace scores

// The block mask of mask_mod for a B x H x Tq x Tk problem, its per_shape leaves made for (Tq,
// Tk). B = 1 or H = 1: the mask serves any batch or head count (give the real counts where a leaf
// depends on b or h: key_lengths, prefix_lm, document of several batches, BigBird of several
// heads).
BlockMask create_block_mask(const MaskMod& mask_mod, std::int64_t B, std::int64_t H,
                            std::int64_t Tq, std::int64_t Tk);

// flex_attention and its backward (qkv/flex.hpp) with a ScoreMod: q [B, Tq, Hq, D], k [B, Tk,
// Hk, D], v [B, Tk, Hk, Dv] -> out [B, Tq, Hq, Dv], lse [B, Hq, Tq]; dout [B, Tq, Hq, Dv] -> dq,
// dk, dv, and grads.captured: the gradients of the tensors in `captured` its leaves read (a
// relative_bias table); P [B, Hq, Tq, Tk] for inspection (flex_attention_weights). The identity
// ScoreMod runs as no score mod.
AttentionOutput flex_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                               const ScoreMod& score_mod, const BlockMask& block_mask,
                               const FlexOptions& options = {});
Tensor flex_attention_weights(const Tensor& q, const Tensor& k, const ScoreMod& score_mod,
                              const BlockMask& block_mask, const FlexOptions& options = {});
AttentionGrads flex_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       const ScoreMod& score_mod, const BlockMask& block_mask,
                                       const FlexOptions& options = {},
                                       const std::vector<Captured>& captured = {});

}  // namespace qkv
