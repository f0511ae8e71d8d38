#include "attention_case.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>
#include <sstream>
#include <vector>

#include "case_text.hpp"
#include "dtype_limits.hpp"
#include "qkv/philox.hpp"

namespace qkv::fuzz {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// At most 2^17 (query, key) pairs B Hq Tq Tk and 2^26 multiply-adds B Hq Tq Tk (D + Dv) per
// product. A case costs about 6 us per pair at D = 8 in this build on the 2-core Zen 3
// development VM (the references, the fused
// kernel twice, the slack), so the largest take a second or more; the median case of a fuzzing
// corpus took 2 ms. The 128-row q-blocks of the forward need Tq > 128 and K and V above 1 MiB
// per head (f32: Tk (D + Dv) > 2^18), which fits: Tq = 129, Tk = 513, D = Dv = 256 (2^16.0
// pairs, 2^25.0 multiply-adds, 5.8 s of CPU; f64 needs half the keys).
constexpr std::int64_t kMaxPairs = std::int64_t{1} << 17;
constexpr std::int64_t kMaxWork = std::int64_t{1} << 26;

// Sizes at the kernels' edges (src/kernels/cpu/tile_traits.hpp): 64-key blocks, 64- and 128-row
// q-blocks, the decode path up to 16 queries with splits of 1024 keys, backward key chunks of 4
// or more blocks (512, 1024, 2048 keys), vectors of 2 to 16 lanes and 6-row register tiles.
constexpr std::int64_t kQueryEdges[] = {1,  2,  3,  5,  6,  7,   15,  16,  17,  24,  25,
                                        31, 33, 63, 64, 65, 127, 128, 129, 130, 192, 193};
constexpr std::int64_t kKeyEdges[] = {1,    2,    15,   16,   17,   63,   64,  65,  127,
                                      128,  129,  255,  256,  257,  511,  512, 513, 1023,
                                      1024, 1025, 1089, 2048, 2049, 4095, 4096};
constexpr std::int64_t kDimEdges[] = {1,  2,  3,  4,  5,  7,  8,  9,  12,  15,  16,  17, 24,
                                      31, 32, 33, 48, 63, 64, 65, 96, 127, 128, 129, 256};

// A size: mostly small, often at an edge, sometimes anything up to `large`, 0 now and then.
std::int64_t draw_size(ByteReader& in, std::span<const std::int64_t> edges, std::int64_t small,
                       std::int64_t large) {
  const std::uint8_t kind = in.byte();
  if (kind < 120) return in.range(1, small);
  if (kind < 200) return edges[in.range(0, static_cast<std::int64_t>(edges.size()) - 1)];
  if (kind < 248) return in.range(1, large);
  return 0;
}

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t size : shape) n *= size;
  return n;
}

// The n-th permutation of [0, rank) in lexicographic order (n taken modulo rank!).
std::vector<std::int64_t> permutation(std::int64_t rank, std::int64_t n) {
  std::vector<std::int64_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::int64_t count = 1;
  for (std::int64_t r = 2; r <= rank; ++r) count *= r;
  for (n %= count; n > 0; --n) std::next_permutation(order.begin(), order.end());
  return order;
}

// Memory for a tensor of `shape` in `layout` (make_view), every element `fill`, and the view of it
// that has the logical shape. Padding is one element before and two after in every dimension.
Tensor laid_out(const Shape& shape, DType dtype, std::uint8_t layout, double fill) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  const std::vector<std::int64_t> order = permutation(rank, layout % 24);
  const bool pad = (layout / 24 % 4) & 1;
  const bool step = (layout / 24 % 4) & 2;
  Shape memory(rank);
  for (std::int64_t m = 0; m < rank; ++m) {
    memory[m] = shape[order[m]] * (step && m == rank - 1 ? 2 : 1) + (pad ? 3 : 0);
  }
  Tensor view = Tensor::full(memory, fill, dtype);
  for (std::int64_t m = 0; m < rank; ++m) {
    const std::int64_t begin = pad ? 1 : 0;
    const std::int64_t stride = step && m == rank - 1 ? 2 : 1;
    view = view.slice(m, begin, begin + shape[order[m]] * stride, stride);
  }
  Shape inverse(rank);
  for (std::int64_t m = 0; m < rank; ++m) inverse[order[m]] = m;
  return view.permute(inverse);
}

struct Shapes {
  Shape q, k, v;  // [B, Tq, Hq, D], [B, Tk, Hk, D], [B, Tk, Hk, Dv] unless made invalid
  DType k_dtype, q_dtype;
};

// The largest finite magnitude that cannot overflow the kernels' sums of products in f32 (and so
// a result that differs between backends is a bug, not rounding at the edge of the range): 2^20,
// whose products with each other and with Tk D such terms stay below 2^60. f16 holds at most
// 65504, so 2^14 there.
double huge(DType dtype) { return dtype == DType::f16 ? 0x1p14 : 0x1p20; }

// Any double for an option that validation checks: NaN and inf; finite ones past f32's largest
// as +-1e39, which validation refuses for inputs computed in f32 and f64 inputs take (their
// scores stay far below f64's range); the others at most huge(f32) in magnitude: past that the
// f32 scores overflow, and whether (scale q) . k or scale (q . k) then gives inf or NaN is the
// order of the arithmetic, not a bug (README, "Fuzzing", has what the backends did).
double bounded(double x) {
  if (!std::isfinite(x)) return x;
  if (std::abs(x) > static_cast<double>(std::numeric_limits<float>::max())) {
    return std::copysign(1e39, x);
  }
  return std::clamp(x, -huge(DType::f32), huge(DType::f32));
}

// Values placed over the normal data: NaN, infinities, huge, subnormal, zeros and large ones (a
// large q or k entry makes large scores; 2^5 keeps the softmax's rounding moderate).
double special(std::uint8_t kind, DType dtype) {
  switch (kind % 10) {
    case 0:
      return kNaN;
    case 1:
      return kInf;
    case 2:
      return -kInf;
    case 3:
      return huge(dtype);
    case 4:
      return -huge(dtype);
    case 5:
      return limits(dtype).subnormal;
    case 6:
      return -limits(dtype).subnormal;
    case 7:
      return 0.0;
    case 8:
      return -0.0;
    default:
      return 0x1p5;
  }
}

class CaseBuilder {
 public:
  explicit CaseBuilder(ByteReader& in) : in_(in) {}

  std::optional<AttentionCase> build() {
    draw_dtype();
    if (!draw_shapes()) return std::nullopt;
    draw_specials();
    draw_options();
    layouts_ = {in_.byte(), in_.byte(), in_.byte(), in_.byte()};
    c_.threads[0] = static_cast<int>(in_.range(1, 4));
    c_.threads[1] = static_cast<int>(in_.range(1, 4));
    note() << "threads " << c_.threads[0] << " and " << c_.threads[1];
    draw_data();
    c_.description = description_.str();
    return std::move(c_);
  }

 private:
  ByteReader& in_;
  AttentionCase c_;
  std::ostringstream description_;
  std::int64_t B_ = 0, Tq_ = 0, Tk_ = 0, Hq_ = 0, Hk_ = 0, D_ = 0, Dv_ = 0;
  Shapes shapes_;
  std::array<std::uint8_t, 4> layouts_{};  // q, k, v, dout
  // Special values to place over the data: which tensor (q, k, v, dout, bias), where (an index
  // into it, modulo its size) and what (see special()).
  struct Special {
    std::int64_t target;
    std::uint64_t index;
    std::uint8_t kind;
  };
  std::vector<Special> specials_;
  bool has_mask_ = false, has_bias_ = false;
  Shape mask_shape_, bias_shape_;
  DType mask_dtype_ = DType::boolean, bias_dtype_ = DType::f32;
  std::uint8_t mask_layout_ = 0, bias_layout_ = 0;
  double keep_probability_ = 1.0;

  std::ostream& note() {
    if (description_.tellp() > 0) description_ << '\n';
    description_ << "  ";
    return description_;
  }

  // The dtype from the byte's low 3 bits; for bf16 the next two bits force its bf16 products
  // onto a matrix path in half the cases: the CPU's best, or the emulated AMX tiles (which every
  // CPU runs).
  void draw_dtype() {
    constexpr DType kDTypes[] = {DType::f32, DType::f32, DType::f32,  DType::f32,
                                 DType::f64, DType::f64, DType::bf16, DType::f16};
    const std::uint8_t byte = in_.byte();
    c_.dtype = kDTypes[byte % 8];
    if (c_.dtype != DType::bf16 || byte / 8 % 4 < 2) return;
    kernels::cpu::MatrixPath path = kernels::cpu::MatrixPath::amx_emulated;
    if (byte / 8 % 4 == 2) kernels::cpu::best_bf16_path(path);
    c_.matrix_path = path;
  }

  bool draw_shapes() {
    B_ = in_.byte() >= 248 ? 0 : in_.range(1, 3);
    Tq_ = draw_size(in_, kQueryEdges, 20, 200);
    Tk_ = draw_size(in_, kKeyEdges, 20, 320);
    Hk_ = in_.range(1, 3);
    Hq_ = Hk_ * in_.range(1, 4);
    D_ = std::max<std::int64_t>(draw_size(in_, kDimEdges, 8, 160), 1);
    Dv_ = std::max<std::int64_t>(draw_size(in_, kDimEdges, 8, 160), 1);
    const std::int64_t pairs = B_ * Hq_ * Tq_ * Tk_;
    if (pairs > kMaxPairs || pairs * (D_ + Dv_) > kMaxWork) return false;
    shapes_ = {{B_, Tq_, Hq_, D_}, {B_, Tk_, Hk_, D_}, {B_, Tk_, Hk_, Dv_}, c_.dtype, c_.dtype};
    note() << dtype_name(c_.dtype) << " B " << B_ << " Tq " << Tq_ << " Tk " << Tk_ << " Hq " << Hq_
           << " Hk " << Hk_ << " D " << D_ << " Dv " << Dv_;
    if (c_.matrix_path) {
      note() << "bf16 products forced onto " << kernels::cpu::path_name(*c_.matrix_path);
    }
    // One byte in 16 makes the shapes invalid in one way.
    const std::uint8_t invalid = in_.byte();
    if (invalid >= 240) invalidate_shapes(invalid - 240);
    return true;
  }

  void invalidate_shapes(int which) {
    Shapes& s = shapes_;
    switch (which % 12) {
      case 0:
        s.k[2] = s.v[2] = Hq_ + 1;  // Hk does not divide Hq
        break;
      case 1:
        s.q[3] = s.k[3] = 0;  // D = 0
        break;
      case 2:
        s.v[3] = 0;  // Dv = 0
        break;
      case 3:
        s.k[2] = s.v[2] = 0;  // Hk = 0
        break;
      case 4:
        s.k[0] += 1;  // batch of k differs
        break;
      case 5:
        s.v[1] += 1;  // length of v differs
        break;
      case 6:
        s.k[3] += 1;  // head dim of k differs
        break;
      case 7:
        s.q.pop_back();  // 3 dimensions
        break;
      case 8:
        s.k_dtype = c_.dtype == DType::f64 ? DType::f32 : DType::f64;
        break;
      case 9:
        s.q_dtype = DType::boolean;
        break;
      case 10:
        s.v[2] += 1;  // heads of v differ
        break;
      default:
        s.q[2] = 0;  // Hq = 0
        break;
    }
    note() << "invalid shapes " << which % 12 << ": q " << shape_string(s.q) << " k "
           << shape_string(s.k) << " v " << shape_string(s.v);
  }

  std::int64_t draw_window_side() {
    const std::uint8_t kind = in_.byte();
    if (kind < 64) return -1;
    if (kind == 255) return -2 - in_.byte();  // invalid
    return in_.range(0, Tk_ + 2);
  }

  std::vector<std::int64_t> draw_lengths(std::int64_t limit) {
    std::vector<std::int64_t> lengths(B_);
    for (std::int64_t& length : lengths) length = in_.range(0, limit);
    const std::uint8_t invalid = in_.byte();
    if (invalid == 255) lengths.push_back(0);                            // B + 1 lengths
    if (invalid == 254 && !lengths.empty()) lengths.back() = limit + 1;  // too long
    if (invalid == 253 && !lengths.empty()) lengths.front() = -1;        // negative
    return lengths;
  }

  // A shape that broadcasts to [B, Hq, Tq, Tk]: the last `rank` dimensions, each full or 1; one
  // byte in 32 makes one dimension neither.
  Shape draw_broadcast_shape() {
    const std::uint8_t bits = in_.byte();
    const std::int64_t rank = 4 - in_.range(0, 4);
    const std::int64_t full[4] = {B_, Hq_, Tq_, Tk_};
    Shape shape;
    for (std::int64_t d = 4 - rank; d < 4; ++d) shape.push_back(bits >> d & 1 ? full[d] : 1);
    if (bits >= 248 && rank > 0) shape[0] += 2;
    return shape;
  }

  void draw_options() {
    AttentionOptions& o = c_.options;
    const std::uint8_t flags = in_.byte();
    const std::uint8_t more = in_.byte();
    if (flags & 1) {
      constexpr double kScales[] = {1.0, 0.5, 0.125, 2.0, -1.0, 1e-3, 0.0, 10.0};
      o.scale = in_.byte() == 255 ? bounded(in_.real()) : in_.pick(kScales);
      note() << "scale " << *o.scale;
    }
    constexpr Causal kCausal[] = {Causal::none, Causal::top_left, Causal::bottom_right,
                                  Causal::none};
    o.causal = kCausal[flags >> 1 & 3];
    if (o.causal != Causal::none) {
      note() << "causal " << (o.causal == Causal::top_left ? "top_left" : "bottom_right");
    }
    if (flags & 8) {
      o.window.left = draw_window_side();
      o.window.right = draw_window_side();
      note() << "window [" << o.window.left << ", " << o.window.right << "]";
    }
    if (flags & 16) {
      o.key_lengths = draw_lengths(Tk_);
      note() << "key_lengths " << list(o.key_lengths);
    }
    if (flags & 32) {
      o.query_lengths = draw_lengths(Tq_);
      note() << "query_lengths " << list(o.query_lengths);
    }
    has_mask_ = flags & 64;
    if (has_mask_) {
      mask_shape_ = draw_broadcast_shape();
      // One byte in 32 gives the mask a floating dtype, which validation refuses.
      mask_dtype_ = in_.byte() >= 248 ? DType::f32 : DType::boolean;
      mask_layout_ = in_.byte();
      keep_probability_ = (in_.byte() + 1) / 256.0;
      note() << "mask " << dtype_name(mask_dtype_) << shape_string(mask_shape_) << " layout "
             << int{mask_layout_} << " keeping " << keep_probability_;
    }
    has_bias_ = flags & 128;
    if (has_bias_) {
      bias_shape_ = draw_broadcast_shape();
      constexpr DType kBiasDTypes[] = {DType::f32, DType::f32, DType::f64, DType::bf16,
                                       DType::f16, DType::f32, DType::f64, DType::f32};
      const std::uint8_t dtype = in_.byte();
      bias_dtype_ = dtype == 255 ? DType::boolean : kBiasDTypes[dtype % 8];
      bias_layout_ = in_.byte();
      note() << "bias " << dtype_name(bias_dtype_) << shape_string(bias_shape_) << " layout "
             << int{bias_layout_};
    }
    if (more & 1) {
      o.alibi_slopes.resize(Hq_);
      const std::uint8_t kind = in_.byte();
      for (std::int64_t h = 0; h < Hq_; ++h) {
        constexpr double kSlopes[] = {0.0, 0.5, -0.25, 1.0, 0.0625, 4.0, 1e-3, 0.125};
        // The slopes of the ALiBi paper for even kinds: 2^(-8 (h + 1) / Hq).
        o.alibi_slopes[h] =
            kind % 2 == 0 ? std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(Hq_))
                          : in_.pick(kSlopes);
      }
      if (kind == 255) o.alibi_slopes.push_back(0.5);        // Hq + 1 slopes
      if (kind == 253 && Hq_ > 0) o.alibi_slopes[0] = kNaN;  // not finite
      note() << "alibi_slopes " << list(o.alibi_slopes);
    }
    if (more & 2) {
      constexpr double kCaps[] = {1.0, 5.0, 30.0, 50.0, 0.5, 1000.0, 20.0, 2.0};
      o.softcap = in_.byte() == 255 ? bounded(in_.real()) : in_.pick(kCaps);
      note() << "softcap " << o.softcap;
    }
    if (more & 4) {
      constexpr double kRates[] = {0.1, 0.5, 0.9, 0.999, 1.0 / 3, 0.01, 0.25, 0.75};
      const std::uint8_t kind = in_.byte();
      o.dropout_p = kind == 255   ? 1.0
                    : kind == 254 ? -0.125
                    : kind == 253 ? kNaN
                                  : in_.pick(kRates);
      o.seed = in_.bytes(8);
      o.offset = in_.bytes(8);
      note() << "dropout " << o.dropout_p << " seed " << o.seed << " offset " << o.offset;
    }
    if (more & 8) {
      c_.outputs =
          OutputLayouts{in_.byte(), in_.byte(), in_.byte(), in_.byte(), in_.byte(), in_.byte()};
      const OutputLayouts& l = *c_.outputs;
      note() << "outputs allocated by the caller, layouts out " << int{l.out} << " lse "
             << int{l.lse} << " dq " << int{l.dq} << " dk " << int{l.dk} << " dv " << int{l.dv}
             << " dbias " << int{l.dbias};
    }
    if ((more & 16) && in_.byte() >= 128) {
      c_.alias_output = true;
      note() << "an output overlapping an input";
    }
    if (more & 32) draw_flex();
  }

  // A flex_attention case: the mods replace the built-in masks, biases and scores, and the
  // outputs are the ones flex_attention returns.
  void draw_flex() {
    AttentionOptions flex;
    flex.scale = c_.options.scale;
    flex.dropout_p = c_.options.dropout_p;
    flex.seed = c_.options.seed;
    flex.offset = c_.options.offset;
    c_.options = flex;
    has_mask_ = has_bias_ = false;
    c_.outputs.reset();
    c_.alias_output = false;
    c_.mods = draw_mods(in_, B_, Hq_, Tq_, Tk_);
    note() << "flex_attention (of the options above only scale and dropout) with\n"
           << c_.mods->description;
  }

  // The special values come early in the input, so that short inputs have them too.
  void draw_specials() {
    specials_.resize(in_.range(0, 16));
    for (Special& s : specials_) s = {in_.range(0, 4), in_.bytes(3), in_.byte()};
  }

  // Normal values times the data's scale, then the special values.
  void draw_data() {
    constexpr double kScales[] = {1.0, 1.0, 0.25, 2.0, 4.0, 8.0, 1.0 / 64, 0.5};
    Generator generator(in_.bytes(8));
    const double scale = in_.pick(kScales);
    const double bias_scale = in_.pick(kScales);
    note() << "data scale " << scale << ", bias scale " << bias_scale;
    const auto normal = [&](const Shape& shape, double times) {
      std::vector<double> values(numel(shape));
      for (double& x : values) x = generator.next_normal() * times;
      return values;
    };
    const Shape dout_shape = {B_, Tq_, Hq_, Dv_};
    std::vector<double> q = normal(shapes_.q, scale), k = normal(shapes_.k, scale),
                        v = normal(shapes_.v, scale), dout = normal(dout_shape, scale);
    std::vector<double> bias = has_bias_ ? normal(bias_shape_, bias_scale) : std::vector<double>();
    std::vector<double>* targets[] = {&q, &k, &v, &dout, &bias};
    const char* names[] = {"q", "k", "v", "dout", "bias"};
    for (const Special& s : specials_) {
      std::vector<double>& values = *targets[s.target];
      if (values.empty()) continue;
      const std::size_t at = s.index % values.size();
      values[at] = special(s.kind, s.target == 4 ? bias_dtype_ : c_.dtype);
      note() << names[s.target] << "[" << at << "] = " << values[at];
    }
    c_.q = make_view(Tensor::from_values(shapes_.q, q, DType::f64), shapes_.q_dtype, layouts_[0]);
    c_.k = make_view(Tensor::from_values(shapes_.k, k, DType::f64), shapes_.k_dtype, layouts_[1]);
    c_.v = make_view(Tensor::from_values(shapes_.v, v, DType::f64), c_.dtype, layouts_[2]);
    c_.dout = make_view(Tensor::from_values(dout_shape, dout, DType::f64), c_.dtype, layouts_[3]);
    if (has_bias_) {
      c_.options.bias =
          make_view(Tensor::from_values(bias_shape_, bias, DType::f64), bias_dtype_, bias_layout_);
    }
    if (has_mask_) {
      std::vector<double> keep(numel(mask_shape_));
      for (double& x : keep) x = generator.next_uniform() < keep_probability_ ? 1.0 : 0.0;
      c_.options.mask =
          make_view(Tensor::from_values(mask_shape_, keep, DType::f64), mask_dtype_, mask_layout_);
    }
    note() << "q " << c_.q.describe() << " k " << c_.k.describe() << " v " << c_.v.describe()
           << " dout " << c_.dout.describe();
  }
};

}  // namespace

std::optional<AttentionCase> draw_case(ByteReader& in) { return CaseBuilder(in).build(); }

Tensor make_view(const Tensor& logical, DType dtype, std::uint8_t layout) {
  Tensor view = laid_out(logical.shape(), dtype, layout, dtype == DType::boolean ? 1.0 : kNaN);
  view.copy_from(logical);
  return view;
}

Tensor make_output(const Shape& shape, DType dtype, std::uint8_t layout) {
  return laid_out(shape, dtype, layout, kNaN);
}

}  // namespace qkv::fuzz
