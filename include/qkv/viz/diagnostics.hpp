#pragma once

// Attention as a debugging tool (the seeds: "if attention is uniform, the model hasn't learned
// the task; if it's sharp but on wrong positions, representations need improvement"): per head,
// how spread its rows are, how far they look, and whether their peaks land where a known
// alignment says they should, with a verdict line per head.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qkv/tensor.hpp"

namespace qkv::viz {

// The keys each row may attend (the weights alone cannot tell a masked key from one the head
// ignores): all Tk by default; causal (top-left: row i sees keys 0..i), or the first
// key_lengths[b] of batch b. Rows past query_lengths[b] (padding) are left out.
struct DiagnosticsOptions {
  bool causal = false;
  std::vector<std::int64_t> key_lengths;    // per batch, empty = Tk
  std::vector<std::int64_t> query_lengths;  // per batch, empty = Tq
  // The verdict's thresholds on the mean normalized entropy (entropy / log(keys seen)): at or
  // above `uniform` the head is uniform, at or below `sharp` it is sharp. A head in between is
  // diffuse. With an alignment, a sharp head is right when at least `right` of its rows' argmax
  // lands on an aligned key.
  double uniform = 0.9;
  double sharp = 0.5;
  double right = 0.5;
};

enum class Verdict : std::uint8_t {
  uniform,      // the model has not learned the task (in this head)
  diffuse,      // neither uniform nor sharp
  sharp,        // sharp, with no alignment to judge it by
  sharp_right,  // sharp, and on the aligned positions
  sharp_wrong,  // sharp, but on other positions: the representations need improvement
  empty,        // no row to judge (every row padding, or no key)
};

const char* verdict_name(Verdict verdict);

// One head, over the rows of every batch it was given. Entropies in nats.
struct HeadDiagnostics {
  std::int64_t head = 0;
  std::int64_t rows = 0;          // rows measured (not padding, at least one key)
  double entropy = 0;             // mean over rows of -sum_j p_ij log p_ij
  double uniform_entropy = 0;     // mean over rows of log(keys row i may attend)
  double normalized_entropy = 0;  // mean over rows of the ratio of the two (0 when one key)
  double max_weight = 0;          // mean over rows of max_j p_ij
  double mean_distance = 0;       // mean over rows of sum_j p_ij |i - j|
  std::optional<double> alignment_accuracy;  // rows whose argmax is aligned / rows aligned
  std::int64_t aligned_rows = 0;             // rows with a known alignment
  Verdict verdict = Verdict::empty;
};

// weights [B, H, Tq, Tk] or [H, Tq, Tk] (B = 1), any floating dtype, each row a distribution
// over the keys its row may attend; alignments empty, or [B][Tq] lists of the key positions row
// i should attend (an empty list: unknown for that row) -> one HeadDiagnostics per head.
std::vector<HeadDiagnostics> diagnose(
    const Tensor& weights,
    const std::vector<std::vector<std::vector<std::int64_t>>>& alignments = {},
    const DiagnosticsOptions& options = {});

// "head 2: sharp and right (entropy 0.31 of uniform's 2.64 nats, 0.12; max weight 0.93; mean
// distance 1.4; argmax on the alignment 97.0% of 412 rows)".
std::string verdict_line(const HeadDiagnostics& d);

}  // namespace qkv::viz
