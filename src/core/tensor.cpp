#include "qkv/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "core/block_cache.hpp"
#include "core/convert.hpp"
#include "core/dims.hpp"
#include "core/element.hpp"
#include "qkv/error.hpp"

namespace qkv {
namespace {

using core::wrap_dim;

// The number of elements of shape; refuses negative sizes and products past 2^60 elements (which
// no memory holds; 2^60 elements of 8 bytes still count in 64 bits).
std::int64_t checked_numel(const Shape& shape, const char* argument) {
  for (const std::int64_t s : shape) {
    if (s < 0) throw Error(argument, "non-negative sizes", shape_string(shape));
  }
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 60;
  std::int64_t n = 1;
  for (const std::int64_t s : shape) {
    if (n > kMaxElements / s) {
      throw Error(argument, "at most 2^60 elements", shape_string(shape));
    }
    n *= s;
  }
  return n;
}

// Row-major strides. The product of the sizes other than 0 may pass 2^63 only for a shape with no
// elements (checked_numel bounds the others), whose strides address nothing: they saturate.
Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t running = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = running;
    if (__builtin_mul_overflow(running, std::max<std::int64_t>(shape[d], 1), &running)) {
      running = std::numeric_limits<std::int64_t>::max();
    }
  }
  return strides;
}

// Visits every index of shape in row-major order, calling fn(offset_a, offset_b) with the
// element offsets under two stride vectors.
template <class Fn>
void for_each_pair(const Shape& shape, const Shape& strides_a, const Shape& strides_b, Fn&& fn) {
  const std::size_t rank = shape.size();
  for (const std::int64_t s : shape) {
    if (s == 0) return;
  }
  if (rank == 0) {
    fn(std::int64_t{0}, std::int64_t{0});
    return;
  }
  std::vector<std::int64_t> index(rank, 0);
  std::int64_t a = 0;
  std::int64_t b = 0;
  const std::size_t last = rank - 1;
  while (true) {
    for (std::int64_t i = 0; i < shape[last]; ++i) {
      fn(a + i * strides_a[last], b + i * strides_b[last]);
    }
    std::size_t d = last;
    while (true) {
      if (d == 0) return;
      --d;
      ++index[d];
      a += strides_a[d];
      b += strides_b[d];
      if (index[d] < shape[d]) break;
      a -= strides_a[d] * shape[d];
      b -= strides_b[d] * shape[d];
      index[d] = 0;
    }
  }
}

// PyTorch's rule for viewing strided memory under a new shape: each run of dimensions that is
// contiguous in memory may be split or merged; returns nothing when the view is impossible.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides,
                                  const Shape& new_shape) {
  Shape new_strides(new_shape.size());
  if (old_shape.empty()) {
    std::fill(new_strides.begin(), new_strides.end(), 1);
    return new_strides;
  }
  std::int64_t numel = 1;
  for (const std::int64_t s : old_shape) numel *= s;
  if (numel == 0) return contiguous_strides(new_shape);
  std::int64_t view_d = static_cast<std::int64_t>(new_shape.size()) - 1;
  std::int64_t chunk_base_stride = old_strides.back();
  std::int64_t tensor_numel = 1;
  std::int64_t view_numel = 1;
  for (std::int64_t tensor_d = static_cast<std::int64_t>(old_shape.size()) - 1; tensor_d >= 0;
       --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Shape infer_shape(Shape shape, std::int64_t numel) {
  std::int64_t known = 1;
  std::int64_t inferred = -1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      if (inferred >= 0) throw Error("shape", "at most one -1", shape_string(shape));
      inferred = static_cast<std::int64_t>(d);
    } else if (shape[d] < 0) {
      throw Error("shape", "sizes >= 0 or a single -1", shape_string(shape));
    } else {
      known *= shape[d];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0) {
      throw Error("shape", "a shape with " + std::to_string(numel) + " elements",
                  shape_string(shape));
    }
    shape[inferred] = numel / known;
  } else if (known != numel) {
    throw Error("shape", "a shape with " + std::to_string(numel) + " elements",
                shape_string(shape));
  }
  return shape;
}

// The neighbour of value (a value of dtype) one step toward target.
double step_toward(DType dtype, double value, double target) {
  switch (dtype) {
    case DType::f64:
      return std::nextafter(value, target);
    case DType::f32:
      return std::nextafter(static_cast<float>(value), static_cast<float>(target));
    case DType::bf16:
    case DType::f16: {
      const bool is_bf16 = dtype == DType::bf16;
      const auto x = static_cast<float>(value);
      auto bits = is_bf16 ? f32_to_bf16_bits(x) : f32_to_f16_bits(x);
      // Sign and magnitude: moving away from zero is one more in the magnitude bits.
      if ((bits & 0x7fffu) == 0) {
        bits = target > value ? 0x0001u : 0x8001u;
      } else if ((target > value) == ((bits & 0x8000u) == 0)) {
        ++bits;
      } else {
        --bits;
      }
      return is_bf16 ? bf16_bits_to_f32(bits) : f16_bits_to_f32(bits);
    }
    case DType::boolean:
      return value;
  }
  return value;
}

// Element access and views of an undefined tensor (null storage) are errors, never reads.
void require_defined(bool defined, const char* operation) {
  if (!defined) {
    throw Error("tensor", std::string("a defined tensor for ") + operation, "an undefined tensor");
  }
}

}  // namespace

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

Tensor Tensor::empty(Shape shape, DType dtype) {
  Tensor t;
  t.numel_ = checked_numel(shape, "shape");
  std::size_t capacity = 0;
  void* memory =
      detail::take_block(static_cast<std::size_t>(t.numel_) * dtype_size(dtype), &capacity);
  t.storage_ =
      std::shared_ptr<std::byte>(static_cast<std::byte*>(memory),
                                 [capacity](std::byte* p) { detail::give_block(p, capacity); });
  t.data_ = t.storage_.get();
  t.dtype_ = dtype;
  t.defined_ = true;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  std::memset(t.data_, 0, static_cast<std::size_t>(t.numel_) * dtype_size(dtype));
  return t;
}

Tensor Tensor::full(Shape shape, double value, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::from_values(Shape shape, const std::vector<double>& values, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  if (static_cast<std::int64_t>(values.size()) != t.numel_) {
    throw Error("values", std::to_string(t.numel_) + " values for shape " + shape_string(t.shape_),
                std::to_string(values.size()));
  }
  const std::size_t size = dtype_size(dtype);
  for (std::int64_t i = 0; i < t.numel_; ++i) {
    detail::store_element(dtype, t.data_ + i * size, values[i]);
  }
  return t;
}

Tensor Tensor::randn(Shape shape, Generator& generator, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  const std::size_t size = dtype_size(dtype);
  for (std::int64_t i = 0; i < t.numel_; ++i) {
    detail::store_element(dtype, t.data_ + i * size, generator.next_normal());
  }
  return t;
}

Tensor Tensor::uniform(Shape shape, double low, double high, Generator& generator, DType dtype) {
  if (!(low < high)) {
    throw Error("high", "a bound above low = " + std::to_string(low), std::to_string(high));
  }
  Tensor t = empty(std::move(shape), dtype);
  const std::size_t size = dtype_size(dtype);
  for (std::int64_t i = 0; i < t.numel_; ++i) {
    std::byte* element = t.data_ + i * size;
    detail::store_element(dtype, element, low + (high - low) * generator.next_uniform());
    // Rounding to the dtype (or low + (high - low) * u itself, in f64) can reach high, and a
    // low the dtype cannot represent can round below it: the neighbour inward is then inside.
    const double stored = detail::load_element(dtype, element);
    if (stored >= high || stored < low) {
      detail::store_element(dtype, element,
                            step_toward(dtype, stored, stored >= high ? low : high));
    }
  }
  return t;
}

Tensor Tensor::from_blob(void* data, Shape shape, DType dtype) {
  Shape strides = contiguous_strides(shape);
  return from_blob(data, std::move(shape), std::move(strides), dtype);
}

Tensor Tensor::from_blob(void* data, Shape shape, Shape strides, DType dtype) {
  if (shape.size() != strides.size()) {
    throw Error("strides", std::to_string(shape.size()) + " strides (one per dimension)",
                std::to_string(strides.size()));
  }
  Tensor t;
  t.numel_ = checked_numel(shape, "shape");
  if (data == nullptr && t.numel_ > 0) throw Error("data", "a non-null pointer", "null");
  t.data_ = static_cast<std::byte*>(data);
  t.dtype_ = dtype;
  t.defined_ = true;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  return t;
}

std::int64_t Tensor::size(std::int64_t d) const { return shape_[wrap_dim(d, dim(), "dim")]; }

std::int64_t Tensor::stride(std::int64_t d) const { return strides_[wrap_dim(d, dim(), "dim")]; }

bool Tensor::is_contiguous() const noexcept {
  std::int64_t expected = 1;
  for (std::size_t d = shape_.size(); d-- > 0;) {
    if (shape_[d] == 1) continue;
    if (strides_[d] != expected) return numel_ == 0;
    expected *= shape_[d];
  }
  return true;
}

template <class T>
T* Tensor::data_as() const {
  constexpr DType kWanted = std::is_same_v<T, double>  ? DType::f64
                            : std::is_same_v<T, float> ? DType::f32
                            : std::is_same_v<T, bf16>  ? DType::bf16
                            : std::is_same_v<T, f16>   ? DType::f16
                                                       : DType::boolean;
  if (dtype_ != kWanted) {
    throw Error("tensor", "dtype " + std::string(dtype_name(kWanted)),
                std::string(dtype_name(dtype_)));
  }
  return reinterpret_cast<T*>(data_);
}

template double* Tensor::data_as<double>() const;
template float* Tensor::data_as<float>() const;
template bf16* Tensor::data_as<bf16>() const;
template f16* Tensor::data_as<f16>() const;
template std::uint8_t* Tensor::data_as<std::uint8_t>() const;

std::int64_t Tensor::offset_of(const std::int64_t* index, std::size_t n) const {
  if (!defined_) throw Error("tensor", "a defined tensor", "an undefined tensor");
  if (n != shape_.size()) {
    throw Error("index", std::to_string(shape_.size()) + " coordinates", std::to_string(n));
  }
  std::int64_t offset = 0;
  for (std::size_t d = 0; d < n; ++d) {
    if (index[d] < 0 || index[d] >= shape_[d]) {
      throw Error("index",
                  "coordinate " + std::to_string(d) + " in [0, " + std::to_string(shape_[d]) + ")",
                  std::to_string(index[d]));
    }
    offset += index[d] * strides_[d];
  }
  return offset;
}

double Tensor::at(std::initializer_list<std::int64_t> index) const {
  return detail::load_element(dtype_,
                              data_ + offset_of(index.begin(), index.size()) * dtype_size(dtype_));
}

double Tensor::at(const Shape& index) const {
  return detail::load_element(dtype_,
                              data_ + offset_of(index.data(), index.size()) * dtype_size(dtype_));
}

void Tensor::set(std::initializer_list<std::int64_t> index, double value) {
  detail::store_element(dtype_, data_ + offset_of(index.begin(), index.size()) * dtype_size(dtype_),
                        value);
}

void Tensor::set(const Shape& index, double value) {
  detail::store_element(dtype_, data_ + offset_of(index.data(), index.size()) * dtype_size(dtype_),
                        value);
}

std::vector<double> Tensor::to_vector() const {
  require_defined(defined_, "to_vector");
  std::vector<double> values;
  values.reserve(static_cast<std::size_t>(numel_));
  const std::size_t size = dtype_size(dtype_);
  for_each_pair(shape_, strides_, strides_, [&](std::int64_t offset, std::int64_t) {
    values.push_back(detail::load_element(dtype_, data_ + offset * size));
  });
  return values;
}

Tensor Tensor::contiguous() const {
  require_defined(defined_, "contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  require_defined(defined_, "clone");
  Tensor copy = empty(shape_, dtype_);
  copy.copy_from(*this);
  return copy;
}

Tensor Tensor::to(DType dtype) const {
  require_defined(defined_, "to");
  if (dtype == dtype_) return *this;
  Tensor copy = empty(shape_, dtype);
  copy.copy_from(*this);
  return copy;
}

Tensor Tensor::permute(const Shape& dims) const {
  require_defined(defined_, "permute");
  if (dims.size() != shape_.size()) {
    throw Error("dims", std::to_string(shape_.size()) + " dimensions", shape_string(dims));
  }
  std::vector<bool> seen(dims.size(), false);
  Tensor t = *this;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    const std::int64_t source = wrap_dim(dims[d], dim(), "dims");
    if (seen[source]) throw Error("dims", "a permutation", shape_string(dims));
    seen[source] = true;
    t.shape_[d] = shape_[source];
    t.strides_[d] = strides_[source];
  }
  return t;
}

Tensor Tensor::transpose(std::int64_t a, std::int64_t b) const {
  require_defined(defined_, "transpose");
  a = wrap_dim(a, dim(), "a");
  b = wrap_dim(b, dim(), "b");
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::slice(std::int64_t d, std::int64_t start, std::int64_t end,
                     std::int64_t step) const {
  require_defined(defined_, "slice");
  d = wrap_dim(d, dim(), "dim");
  if (step <= 0) throw Error("step", "a positive step", std::to_string(step));
  const std::int64_t n = shape_[d];
  auto clamp = [n](std::int64_t x) {
    if (x < 0) x += n;
    return std::clamp<std::int64_t>(x, 0, n);
  };
  start = clamp(start);
  end = std::max(clamp(end), start);
  Tensor t = *this;
  t.shape_[d] = (end - start + step - 1) / step;
  t.strides_[d] = strides_[d] * step;
  t.numel_ = checked_numel(t.shape_, "shape");
  if (t.numel_ > 0)
    t.data_ = data_ + start * strides_[d] * static_cast<std::int64_t>(dtype_size(dtype_));
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  require_defined(defined_, "reshape");
  shape = infer_shape(std::move(shape), numel_);
  if (auto strides = view_strides(shape_, strides_, shape)) {
    Tensor t = *this;
    t.shape_ = std::move(shape);
    t.strides_ = std::move(*strides);
    return t;
  }
  return clone().view(std::move(shape));
}

Tensor Tensor::view(Shape shape) const {
  require_defined(defined_, "view");
  shape = infer_shape(std::move(shape), numel_);
  auto strides = view_strides(shape_, strides_, shape);
  if (!strides) {
    throw Error("shape",
                "a shape whose view fits the strides " + shape_string(strides_) + " of " +
                    shape_string(shape_) + " (use reshape to copy)",
                shape_string(shape));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(*strides);
  return t;
}

Tensor Tensor::expand(const Shape& shape) const {
  require_defined(defined_, "expand");
  if (shape.size() < shape_.size()) {
    throw Error("shape", "at least " + std::to_string(shape_.size()) + " dimensions",
                shape_string(shape));
  }
  const std::size_t lead = shape.size() - shape_.size();
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_.assign(shape.size(), 0);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d < lead) {
      if (shape[d] < 0) throw Error("shape", "non-negative sizes", shape_string(shape));
      continue;
    }
    const std::int64_t have = shape_[d - lead];
    if (have == shape[d]) {
      t.strides_[d] = strides_[d - lead];
    } else if (have != 1) {
      throw Error("shape", "a shape that " + shape_string(shape_) + " broadcasts to",
                  shape_string(shape));
    }
  }
  t.numel_ = checked_numel(t.shape_, "shape");
  return t;
}

Tensor Tensor::unsqueeze(std::int64_t d) const {
  require_defined(defined_, "unsqueeze");
  d = wrap_dim(d, dim() + 1, "dim");
  Tensor t = *this;
  const std::int64_t stride = d < dim() ? strides_[d] * shape_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, stride);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (!src.defined_ || !defined_) {
    throw Error("src", "defined tensors",
                !src.defined_ ? "an undefined source" : "an undefined destination");
  }
  if (src.shape_ != shape_) {
    throw Error("src", "shape " + shape_string(shape_), shape_string(src.shape_));
  }
  if (numel_ == 0) return;
  // A source that shares storage with this tensor is copied out first, so overlapping views
  // read the values they had before the copy.
  if (overlaps(src)) {
    const Tensor staged = src.clone();
    copy_from(staged);
    return;
  }
  const std::size_t dst_size = dtype_size(dtype_);
  const std::size_t src_size = dtype_size(src.dtype_);
  if (is_contiguous() && src.is_contiguous()) {
    if (dtype_ == src.dtype_) {
      std::memmove(data_, src.data_, static_cast<std::size_t>(numel_) * dst_size);
      return;
    }
    if (detail::convert_run(dtype_, data_, src.dtype_, src.data_, numel_)) return;
  }
  // Rows whose last dimension is contiguous on both sides (a permuted view, say) go a row at a
  // time, as one copy or one typed conversion run (the pairs convert_run takes: floating dtypes):
  // element by element, writing a bf16 attention output of 1M elements into a [B, H, T, D] view
  // took 3 ms, as long as the kernel itself (T 1024, D 128, 2 threads of an Intel Xeon).
  const std::int64_t row = shape_.size() > 1 ? shape_.back() : 0;  // a 0-d tensor has no back()
  const bool typed = dtype_ == src.dtype_ || (is_floating(dtype_) && is_floating(src.dtype_));
  if (typed && row > 1 && strides_.back() == 1 && src.strides_.back() == 1) {
    const Shape outer(shape_.begin(), shape_.end() - 1);
    const Shape dst_outer(strides_.begin(), strides_.end() - 1);
    const Shape src_outer(src.strides_.begin(), src.strides_.end() - 1);
    for_each_pair(outer, dst_outer, src_outer, [&](std::int64_t dst, std::int64_t from) {
      std::byte* to = data_ + dst * dst_size;
      const std::byte* in = src.data_ + from * src_size;
      if (dtype_ == src.dtype_) {
        std::memcpy(to, in, static_cast<std::size_t>(row) * dst_size);
      } else {
        detail::convert_run(dtype_, to, src.dtype_, in, row);
      }
    });
    return;
  }
  for_each_pair(shape_, strides_, src.strides_, [&](std::int64_t dst, std::int64_t from) {
    if (dtype_ == src.dtype_) {
      std::memcpy(data_ + dst * dst_size, src.data_ + from * src_size, dst_size);
    } else {
      detail::store_element(dtype_, data_ + dst * dst_size,
                            detail::load_element(src.dtype_, src.data_ + from * src_size));
    }
  });
}

void Tensor::fill(double value) {
  require_defined(defined_, "fill");
  if (numel_ == 0) return;
  const std::size_t size = dtype_size(dtype_);
  std::byte pattern[8] = {};
  detail::store_element(dtype_, pattern, value);
  // Zeros of a contiguous tensor, the common case (padding, fresh buffers), as one memset: a
  // [T, H, D] pad element by element cost more than the rows it pads.
  if (is_contiguous() &&
      std::all_of(pattern, pattern + size, [](std::byte b) { return b == std::byte{0}; })) {
    std::memset(data_, 0, static_cast<std::size_t>(numel_) * size);
    return;
  }
  for_each_pair(shape_, strides_, strides_, [&](std::int64_t offset, std::int64_t) {
    std::memcpy(data_ + offset * size, pattern, size);
  });
}

std::pair<const std::byte*, const std::byte*> Tensor::byte_range() const noexcept {
  const std::byte* low = data_;
  const std::byte* high = data_;
  const auto size = static_cast<std::int64_t>(dtype_size(dtype_));
  for (std::size_t d = 0; d < shape_.size(); ++d) {
    const std::int64_t extent = (shape_[d] - 1) * strides_[d] * size;
    (extent < 0 ? low : high) += extent;
  }
  return {low, high + size};
}

bool Tensor::overlaps(const Tensor& other) const noexcept {
  if (numel_ == 0 || other.numel_ == 0) return false;
  const auto [a_low, a_high] = byte_range();
  const auto [b_low, b_high] = other.byte_range();
  return a_low < b_high && b_low < a_high;
}

std::string Tensor::describe() const {
  if (!defined_) return "undefined";
  std::string s = std::string(dtype_name(dtype_)) + shape_string(shape_);
  if (!is_contiguous()) s += " (strided " + shape_string(strides_) + ")";
  return s;
}

}  // namespace qkv
