#pragma once

// The mods of a flex_attention case drawn from a fuzz input (fuzz/attention_case.cpp reads this
// part when the options' byte asks for it): a MaskMod tree of the predefined masks of
// qkv/masks.hpp joined by & and |, or the same tree behind a user lambda (its tiles then
// classified element by element); a ScoreMod chain of ALiBi, soft-capping and a learned
// relative_bias table, or a generic lambda that scales, caps, adds a per-head slope and reads
// the table; the block mask made for the batch and head counts or for one of each where the
// mods allow it. Some bytes make one argument invalid, so that validation is fuzzed too.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "byte_reader.hpp"
#include "qkv/attention.hpp"
#include "qkv/block_mask.hpp"
#include "qkv/flex.hpp"
#include "qkv/tensor.hpp"

namespace qkv::fuzz {

// The calls of one mods case, made by ModsCase::build: q [B, Tq, Hq, D], k [B, Tk, Hk, D],
// v [B, Tk, Hk, Dv], dout [B, Tq, Hq, Dv]; the backward returns the table's gradient in
// grads.captured when the case has a table.
struct ModsCall {
  std::function<AttentionOutput(const Tensor& q, const Tensor& k, const Tensor& v,
                                const FlexOptions& options)>
      forward;
  std::function<AttentionGrads(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const FlexOptions& options)>
      backward;
  // P [B, Hq, Tq, Tk] with the mods.
  std::function<Tensor(const Tensor& q, const Tensor& k, const FlexOptions& options)> weights;
  BlockMask blocks;
  // Whether the mask mod keeps key j for query i, evaluated directly (not through the tiles).
  std::function<bool(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j)> keep;
};

// One step of the score mod, in order, for a bound on |s'| (attention_slack.cpp).
struct ScoreStep {
  enum Kind { multiply, cap, add } kind;
  double value;  // the factor, the cap c, or the largest magnitude added
};

struct ModsCase {
  // Makes the block mask and the calls; throws qkv::Error for an invalid argument, as a user's
  // call would. exact: the table in f64 (for the f64 reference).
  std::function<ModsCall(bool exact)> build;
  std::vector<ScoreStep> steps;
  // The relative_bias table [Hq, n] (undefined without one) and the buckets [Tq + Tk - 1] of the
  // offsets j - i: pair (h, i, j) reads table[h, buckets[j - i + Tq - 1]].
  Tensor table;
  std::vector<std::int64_t> buckets;
  std::string description;
};

// The options of a mods case as flex_attention takes them: scale and dropout of o.
FlexOptions flex_options(const AttentionOptions& o, Backend backend);

// B, Hq, Tq, Tk: the case's sizes (before any shape was made invalid).
ModsCase draw_mods(ByteReader& in, std::int64_t B, std::int64_t Hq, std::int64_t Tq,
                   std::int64_t Tk);

}  // namespace qkv::fuzz
