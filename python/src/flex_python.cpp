// qkv._qkv's flex_attention: the mask and score mods as values of <qkv/mod_values.hpp>, made
// from plain arguments (the Python layer, qkv/masks.py and qkv/scores.py, checks and describes
// them), block masks for the sizes of q and k, and the forward and backward on arrays as
// qkv_python.cpp has them. No Python runs inside the kernels: a mod is a C++ tree.
#include "flex_python.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "qkv/captured.hpp"
#include "qkv/error.hpp"
#include "qkv/flex.hpp"
#include "qkv/masks.hpp"
#include "qkv/mod_values.hpp"

namespace qkv_python {
namespace {

namespace nb = nanobind;
using namespace nb::literals;
namespace masks = qkv::masks;

// A mod whose diagonal is key i + offset for row i: offset 0 ("upper_left"), or Tk - Tq
// ("lower_right", made per shape).
template <class Make>
qkv::MaskMod aligned(const std::string& align, Make make) {
  if (align == "upper_left") return make(0);
  if (align == "lower_right") {
    return qkv::MaskMod::per_shape(
        [make](std::int64_t Tq, std::int64_t Tk) { return qkv::MaskMod(make(Tk - Tq)); });
  }
  throw qkv::Error("align", "'upper_left' or 'lower_right'", "'" + align + "'");
}

// flex_attention's keyword options.
struct FlexOptions {
  std::optional<double> scale;
  double dropout_p = 0.0;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  std::string backend = "auto";

  qkv::FlexOptions to_qkv() const {
    qkv::FlexOptions o;
    o.scale = scale;
    o.dropout_p = dropout_p;
    o.seed = seed;
    o.offset = offset;
    o.backend = backend_of(backend);
    return o;
  }
};

// The block mask of mask_mod for q [B, Tq, Hq, D] and k [B, Tk, Hk, D]; None where q or k is not
// 4-D (flex_forward then names what is wrong with it).
std::optional<qkv::BlockMask> block_mask(const qkv::MaskMod& mask_mod, const Array& q,
                                         const Array& k) {
  if (q.ndim() != 4 || k.ndim() != 4) return std::nullopt;
  const auto size = [](const Array& a, std::size_t d) {
    return static_cast<std::int64_t>(a.shape(d));
  };
  return qkv::create_block_mask(mask_mod, size(q, 0), size(q, 2), size(q, 1), size(k, 1));
}

// q [B, Tq, Hq, D], k [B, Tk, Hk, D], v [B, Tk, Hk, Dv] -> (out [B, Tq, Hq, Dv], lse [B, Hq, Tq])
nb::tuple flex_forward(const Array& q, const Array& k, const Array& v,
                       const std::optional<qkv::BlockMask>& blocks,
                       const std::optional<qkv::ScoreMod>& score_mod, const FlexOptions& options,
                       bool torch) {
  const qkv::FlexOptions o = options.to_qkv();
  const qkv::Tensor tq = view_of(q, "q"), tk = view_of(k, "k"), tv = view_of(v, "v");
  qkv::AttentionOutput result;
  {
    nb::gil_scoped_release release;
    result = qkv::flex_attention(tq, tk, tv, score_mod.value_or(qkv::ScoreMod()),
                                 blocks.value_or(qkv::BlockMask()), o);
  }
  return nb::make_tuple(wrap(result.out, torch), wrap(result.lse, torch));
}

// dout [B, Tq, Hq, Dv], q, k, v, out, lse as in the forward -> (dq, dk, dv, then the gradient of
// each captured tensor, shaped like it)
nb::tuple flex_backward(const Array& dout, const Array& q, const Array& k, const Array& v,
                        const Array& out, const Array& lse,
                        const std::optional<qkv::BlockMask>& blocks,
                        const std::optional<qkv::ScoreMod>& score_mod, const FlexOptions& options,
                        const std::vector<qkv::Captured>& captured, bool torch) {
  const qkv::FlexOptions o = options.to_qkv();
  const qkv::Tensor tdout = view_of(dout, "dout"), tq = view_of(q, "q"), tk = view_of(k, "k"),
                    tv = view_of(v, "v"), tout = view_of(out, "out"), tlse = view_of(lse, "lse");
  qkv::AttentionGrads g;
  {
    nb::gil_scoped_release release;
    g = qkv::flex_attention_backward(tdout, tq, tk, tv, tout, tlse,
                                     score_mod.value_or(qkv::ScoreMod()),
                                     blocks.value_or(qkv::BlockMask()), o, captured);
  }
  nb::list grads;
  for (const qkv::Tensor* t : {&g.dq, &g.dk, &g.dv}) grads.append(wrap(*t, torch));
  for (const qkv::Tensor& t : g.captured) grads.append(wrap(t, torch));
  return nb::tuple(grads);
}

}  // namespace

void bind_flex(nb::module_& m) {
  nb::class_<qkv::MaskMod>(m, "MaskMod")
      .def("__and__", [](const qkv::MaskMod& a, const qkv::MaskMod& b) { return a & b; })
      .def("__or__", [](const qkv::MaskMod& a, const qkv::MaskMod& b) { return a | b; });
  nb::class_<qkv::ScoreMod>(m, "ScoreMod").def("then", &qkv::ScoreMod::then, "next"_a);
  nb::class_<qkv::BlockMask>(m, "BlockMask");

  m.def("mask_full", [] { return qkv::MaskMod(); });
  m.def(
      "mask_causal",
      [](const std::string& align) {
        return aligned(align, [](std::int64_t offset) { return masks::Causal{offset}; });
      },
      "align"_a);
  m.def(
      "mask_sliding_window",
      [](std::int64_t left, std::int64_t right, const std::string& align) {
        return aligned(align, [left, right](std::int64_t offset) {
          return masks::sliding_window(left, right, offset);
        });
      },
      "left"_a, "right"_a, "align"_a);
  m.def(
      "mask_key_lengths",
      [](std::vector<std::int64_t> lengths) {
        return qkv::MaskMod(masks::key_lengths(std::move(lengths)));
      },
      "lengths"_a);
  m.def(
      "mask_prefix_lm",
      [](std::vector<std::int64_t> prefix_lengths) {
        return qkv::MaskMod(masks::prefix_lm(std::move(prefix_lengths)));
      },
      "prefix_lengths"_a);
  m.def(
      "mask_document",
      [](std::vector<std::int64_t> ids, std::int64_t batches) {
        return qkv::MaskMod(masks::document(std::move(ids), batches));
      },
      "ids"_a, "batches"_a);
  m.def(
      "mask_global_tokens",
      [](std::vector<std::int64_t> positions) {
        return qkv::MaskMod(masks::global_tokens(std::move(positions)));
      },
      "positions"_a);
  m.def(
      "mask_longformer",
      [](std::int64_t window, std::vector<std::int64_t> global) {
        return qkv::MaskMod(masks::longformer(window, std::move(global)));
      },
      "window"_a, "global_tokens"_a);
  m.def(
      "mask_bigbird",
      [](std::int64_t block, std::int64_t window_blocks, std::int64_t global_blocks,
         std::int64_t random_blocks, std::uint64_t seed, std::int64_t heads) {
        // Checks the arguments now, on a problem of one block, rather than at the first call.
        masks::bigbird(block, window_blocks, global_blocks, random_blocks, seed, 1, 1, heads);
        return qkv::MaskMod::per_shape([=](std::int64_t Tq, std::int64_t Tk) {
          return masks::bigbird(block, window_blocks, global_blocks, random_blocks, seed, Tq, Tk,
                                heads);
        });
      },
      "block"_a, "window_blocks"_a, "global_blocks"_a, "random_blocks"_a, "seed"_a, "heads"_a);
  m.def(
      "mask_strided", [](std::int64_t stride) { return qkv::MaskMod(masks::strided(stride)); },
      "stride"_a);
  m.def(
      "mask_fixed",
      [](std::int64_t block, std::int64_t summary) {
        return qkv::MaskMod(masks::fixed(block, summary));
      },
      "block"_a, "summary"_a);
  m.def(
      "mask_from_block_layout",
      [](std::vector<std::uint8_t> layout, std::int64_t q_blocks, std::int64_t k_blocks,
         std::int64_t block) {
        return qkv::MaskMod(masks::from_block_layout(std::move(layout), q_blocks, k_blocks, block));
      },
      "layout"_a, "q_blocks"_a, "k_blocks"_a, "block"_a);

  m.def("score_alibi", &qkv::scores::alibi, "slopes"_a);
  m.def("score_softcap", &qkv::scores::softcap, "cap"_a);
  // table [Hq, n] (float32 or float64), read where it lies: the caller keeps it alive as long as
  // the score mod -> (the score mod, the table as a captured tensor for flex_backward).
  nb::class_<qkv::Captured>(m, "Captured");
  m.def(
      "score_relative_bias",
      [](const Array& table, std::vector<std::int64_t> buckets) {
        const qkv::Captured captured(view_of(table, "table"));
        return nb::make_tuple(qkv::scores::relative_bias(captured, std::move(buckets)), captured);
      },
      "table"_a, "buckets"_a);

  nb::class_<FlexOptions>(m, "FlexOptions")
      .def(nb::init<>())
      .def_rw("scale", &FlexOptions::scale)
      .def_rw("dropout_p", &FlexOptions::dropout_p)
      .def_rw("seed", &FlexOptions::seed)
      .def_rw("offset", &FlexOptions::offset)
      .def_rw("backend", &FlexOptions::backend);
  m.def("block_mask", &block_mask, "mask_mod"_a, "q"_a, "k"_a);
  // qkv.torch turns nanobind's report of instances alive at exit off (see there).
  m.def("set_leak_warnings", &nb::set_leak_warnings, "value"_a);
  m.def("flex_forward", &flex_forward, "q"_a, "k"_a, "v"_a, "block_mask"_a.none(),
        "score_mod"_a.none(), "options"_a, "torch"_a);
  m.def("flex_backward", &flex_backward, "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a,
        "block_mask"_a.none(), "score_mod"_a.none(), "options"_a, "captured"_a, "torch"_a);
}

}  // namespace qkv_python
