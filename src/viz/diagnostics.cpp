// Per-head diagnostics of attention weights: entropy against the uniform distribution's, peak
// weight, attended distance, argmax against a known alignment, and the seeds' verdict.
#include "qkv/viz/diagnostics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "qkv/error.hpp"

namespace qkv::viz {

namespace {

std::string number(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", x);
  return buffer;
}

std::string index_string(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  return "[" + std::to_string(b) + ", " + std::to_string(h) + ", " + std::to_string(i) + ", " +
         std::to_string(j) + "]";
}

// lengths (per batch, empty = all `full`) checked against B and [0, full].
void check_lengths(const std::vector<std::int64_t>& lengths, std::int64_t B, std::int64_t full,
                   const char* argument) {
  if (lengths.empty()) return;
  if (static_cast<std::int64_t>(lengths.size()) != B) {
    throw Error(argument, std::to_string(B) + " lengths (one per batch) or none",
                std::to_string(lengths.size()));
  }
  for (const std::int64_t n : lengths) {
    if (n < 0 || n > full) {
      throw Error(argument, "lengths in [0, " + std::to_string(full) + "]", std::to_string(n));
    }
  }
}

void check_options(const DiagnosticsOptions& o) {
  const auto fraction = [](double x) { return x >= 0 && x <= 1; };
  if (!fraction(o.sharp) || !fraction(o.uniform) || o.sharp > o.uniform) {
    throw Error("options.sharp, options.uniform", "0 <= sharp <= uniform <= 1",
                number(o.sharp) + ", " + number(o.uniform));
  }
  if (!fraction(o.right)) throw Error("options.right", "a fraction in [0, 1]", number(o.right));
}

}  // namespace

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::uniform:
      return "uniform";
    case Verdict::diffuse:
      return "diffuse";
    case Verdict::sharp:
      return "sharp";
    case Verdict::sharp_right:
      return "sharp and right";
    case Verdict::sharp_wrong:
      return "sharp and wrong";
    case Verdict::empty:
      return "empty";
  }
  return "?";
}

// weights [B, H, Tq, Tk] or [H, Tq, Tk], alignments [B][<= Tq][...] -> one per head
std::vector<HeadDiagnostics> diagnose(
    const Tensor& weights, const std::vector<std::vector<std::vector<std::int64_t>>>& alignments,
    const DiagnosticsOptions& options) {
  if (!weights.defined()) throw Error("weights", "a defined tensor", "an undefined tensor");
  if (weights.dim() != 3 && weights.dim() != 4) {
    throw Error("weights", "3 dimensions [H, Tq, Tk] or 4 [B, H, Tq, Tk]",
                std::to_string(weights.dim()) + " dimensions " + shape_string(weights.shape()));
  }
  if (!is_floating(weights.dtype())) {
    throw Error("weights", "a floating dtype", std::string(dtype_name(weights.dtype())));
  }
  const bool batched = weights.dim() == 4;
  const std::int64_t B = batched ? weights.size(0) : 1;
  const std::int64_t H = weights.size(-3), Tq = weights.size(-2), Tk = weights.size(-1);
  check_options(options);
  check_lengths(options.key_lengths, B, Tk, "options.key_lengths");
  check_lengths(options.query_lengths, B, Tq, "options.query_lengths");
  if (!alignments.empty() && static_cast<std::int64_t>(alignments.size()) != B) {
    throw Error("alignments", std::to_string(B) + " lists (one per batch) or none",
                std::to_string(alignments.size()));
  }
  for (std::size_t b = 0; b < alignments.size(); ++b) {
    if (static_cast<std::int64_t>(alignments[b].size()) > Tq) {
      throw Error("alignments[" + std::to_string(b) + "]",
                  "at most " + std::to_string(Tq) + " rows", std::to_string(alignments[b].size()));
    }
    for (const std::vector<std::int64_t>& row : alignments[b]) {
      for (const std::int64_t j : row) {
        if (j < 0 || j >= Tk) {
          throw Error("alignments[" + std::to_string(b) + "]",
                      "key positions in [0, " + std::to_string(Tk) + ")", std::to_string(j));
        }
      }
    }
  }

  const std::vector<double> w = weights.contiguous().to_vector();
  std::vector<HeadDiagnostics> out(static_cast<std::size_t>(H));
  std::vector<double> normalized(static_cast<std::size_t>(H), 0.0);
  std::vector<std::int64_t> hits(static_cast<std::size_t>(H), 0);
  for (std::int64_t h = 0; h < H; ++h) out[h].head = h;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t q_len = options.query_lengths.empty() ? Tq : options.query_lengths[b];
    const std::int64_t k_len = options.key_lengths.empty() ? Tk : options.key_lengths[b];
    for (std::int64_t h = 0; h < H; ++h) {
      HeadDiagnostics& d = out[h];
      for (std::int64_t i = 0; i < q_len; ++i) {
        const std::int64_t keys = options.causal ? std::min(i + 1, k_len) : k_len;
        if (keys == 0) continue;
        const double* p = w.data() + ((b * H + h) * Tq + i) * Tk;
        double entropy = 0, distance = 0;
        std::int64_t argmax = 0;
        for (std::int64_t j = 0; j < keys; ++j) {
          if (!std::isfinite(p[j]) || p[j] < 0) {
            throw Error("weights", "finite, non-negative values",
                        number(p[j]) + " at " + index_string(b, h, i, j));
          }
          if (p[j] > 0) entropy -= p[j] * std::log(p[j]);
          distance += p[j] * static_cast<double>(std::llabs(i - j));
          if (p[j] > p[argmax]) argmax = j;
        }
        const double uniform = std::log(static_cast<double>(keys));
        d.rows += 1;
        d.entropy += entropy;
        d.uniform_entropy += uniform;
        normalized[h] += keys > 1 ? entropy / uniform : 0.0;
        d.max_weight += p[argmax];
        d.mean_distance += distance;
        const bool known = b < static_cast<std::int64_t>(alignments.size()) &&
                           i < static_cast<std::int64_t>(alignments[b].size()) &&
                           !alignments[b][i].empty();
        if (known) {
          d.aligned_rows += 1;
          const std::vector<std::int64_t>& aligned = alignments[b][i];
          hits[h] += std::find(aligned.begin(), aligned.end(), argmax) != aligned.end() ? 1 : 0;
        }
      }
    }
  }
  for (std::int64_t h = 0; h < H; ++h) {
    HeadDiagnostics& d = out[h];
    if (d.rows == 0) continue;  // Verdict::empty, zeros
    const auto rows = static_cast<double>(d.rows);
    d.entropy /= rows;
    d.uniform_entropy /= rows;
    d.normalized_entropy = normalized[h] / rows;
    d.max_weight /= rows;
    d.mean_distance /= rows;
    if (d.aligned_rows > 0) {
      d.alignment_accuracy = static_cast<double>(hits[h]) / static_cast<double>(d.aligned_rows);
    }
    if (d.normalized_entropy >= options.uniform) {
      d.verdict = Verdict::uniform;
    } else if (d.normalized_entropy > options.sharp) {
      d.verdict = Verdict::diffuse;
    } else if (!d.alignment_accuracy) {
      d.verdict = Verdict::sharp;
    } else {
      d.verdict =
          *d.alignment_accuracy >= options.right ? Verdict::sharp_right : Verdict::sharp_wrong;
    }
  }
  return out;
}

std::string verdict_line(const HeadDiagnostics& d) {
  std::string line = "head " + std::to_string(d.head) + ": " + verdict_name(d.verdict);
  if (d.verdict == Verdict::empty) return line + " (no row with a key to attend)";
  line += " (entropy " + number(d.entropy) + " of uniform's " + number(d.uniform_entropy) +
          " nats, " + number(d.normalized_entropy) + "; max weight " + number(d.max_weight) +
          "; mean distance " + number(d.mean_distance);
  if (d.alignment_accuracy) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "; argmax on the alignment %.1f%% of %lld rows",
                  100 * *d.alignment_accuracy, static_cast<long long>(d.aligned_rows));
    line += buffer;
  } else {
    line += "; " + std::to_string(d.rows) + " rows";
  }
  return line + ")";
}

}  // namespace qkv::viz
