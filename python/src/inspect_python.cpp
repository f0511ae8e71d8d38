// qkv._qkv's diagnose: qkv::viz::diagnose on an array viewed in place (arrays.hpp), each head's
// figures and verdict returned as a dict.
#include "inspect_python.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <vector>

#include "arrays.hpp"
#include "qkv/viz/diagnostics.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace qkv_python {
namespace {

// weights [B, H, Tq, Tk] or [H, Tq, Tk]; alignments [B][rows][keys] (empty: none) -> one dict
// per head.
nb::list diagnose(const Array& weights,
                  const std::vector<std::vector<std::vector<std::int64_t>>>& alignments,
                  bool causal, const std::vector<std::int64_t>& key_lengths,
                  const std::vector<std::int64_t>& query_lengths, double uniform, double sharp,
                  double right) {
  qkv::viz::DiagnosticsOptions o;
  o.causal = causal;
  o.key_lengths = key_lengths;
  o.query_lengths = query_lengths;
  o.uniform = uniform;
  o.sharp = sharp;
  o.right = right;
  const std::vector<qkv::viz::HeadDiagnostics> heads =
      qkv::viz::diagnose(view_of(weights, "weights"), alignments, o);
  nb::list out;
  for (const qkv::viz::HeadDiagnostics& d : heads) {
    nb::dict row;
    row["head"] = d.head;
    row["verdict"] = qkv::viz::verdict_name(d.verdict);
    row["rows"] = d.rows;
    row["entropy"] = d.entropy;
    row["uniform_entropy"] = d.uniform_entropy;
    row["normalized_entropy"] = d.normalized_entropy;
    row["max_weight"] = d.max_weight;
    row["mean_distance"] = d.mean_distance;
    row["aligned_rows"] = d.aligned_rows;
    row["alignment_accuracy"] = d.alignment_accuracy ? nb::cast(*d.alignment_accuracy) : nb::none();
    row["line"] = qkv::viz::verdict_line(d);
    out.append(row);
  }
  return out;
}

}  // namespace

void bind_inspect(nb::module_& m) {
  m.def("diagnose", &diagnose, "weights"_a, "alignments"_a, "causal"_a, "key_lengths"_a,
        "query_lengths"_a, "uniform"_a, "sharp"_a, "right"_a);
}

}  // namespace qkv_python
