#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/dtype.hpp"
#include "qkv/philox.hpp"

namespace qkv {

using Shape = std::vector<std::int64_t>;

// An n-dimensional array: a dtype, a shape, strides in elements (any sign, 0 for broadcast)
// and a pointer into storage that is either owned (shared between views, 64-byte aligned) or
// borrowed from the caller (from_blob). Views (permute, slice, reshape when it can, expand)
// share storage; contiguous(), to() and clone() copy.
class Tensor {
 public:
  Tensor() = default;  // undefined: no storage, defined() is false

  static Tensor empty(Shape shape, DType dtype = DType::f32);
  static Tensor zeros(Shape shape, DType dtype = DType::f32);
  static Tensor full(Shape shape, double value, DType dtype = DType::f32);
  // Values in row-major order, converted to dtype; values.size() must equal the element count.
  static Tensor from_values(Shape shape, const std::vector<double>& values,
                            DType dtype = DType::f32);
  // Standard normal entries, drawn in row-major order from the generator.
  static Tensor randn(Shape shape, Generator& generator, DType dtype = DType::f32);
  // Uniform entries in [low, high), drawn in row-major order from the generator.
  static Tensor uniform(Shape shape, double low, double high, Generator& generator,
                        DType dtype = DType::f32);
  // A view of memory the caller owns and keeps alive; strides in elements.
  static Tensor from_blob(void* data, Shape shape, Shape strides, DType dtype);
  // The same over row-major memory (contiguous strides).
  static Tensor from_blob(void* data, Shape shape, DType dtype);

  bool defined() const noexcept { return defined_; }
  DType dtype() const noexcept { return dtype_; }
  std::int64_t dim() const noexcept { return static_cast<std::int64_t>(shape_.size()); }
  const Shape& shape() const noexcept { return shape_; }
  const Shape& strides() const noexcept { return strides_; }
  std::int64_t size(std::int64_t d) const;    // negative d counts from the end
  std::int64_t stride(std::int64_t d) const;  // negative d counts from the end
  std::int64_t numel() const noexcept { return numel_; }
  bool is_contiguous() const noexcept;  // row-major with no gaps

  void* data() const noexcept { return data_; }
  // Typed pointer; throws qkv::Error when T does not match the dtype.
  template <class T>
  T* data_as() const;

  // One element by index (any dtype, as double); index.size() must equal dim().
  double at(std::initializer_list<std::int64_t> index) const;
  double at(const Shape& index) const;
  void set(std::initializer_list<std::int64_t> index, double value);
  void set(const Shape& index, double value);
  // Every element in row-major order, as double.
  std::vector<double> to_vector() const;

  Tensor contiguous() const;     // *this when already contiguous, else a contiguous copy
  Tensor clone() const;          // always a contiguous copy
  Tensor to(DType dtype) const;  // *this when the dtype matches, else a converted contiguous copy

  Tensor permute(const Shape& dims) const;
  Tensor transpose(std::int64_t a, std::int64_t b) const;
  // Elements start, start + step, ... below end along dim; step > 0; bounds are clamped as in
  // Python, negative ones count from the end.
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  // A view when the strides allow it, else a copy; one size may be -1 (inferred).
  Tensor reshape(Shape shape) const;
  // Always a view; throws qkv::Error when the strides do not allow it.
  Tensor view(Shape shape) const;
  // Broadcasts size-1 dimensions (stride 0); new leading dimensions may be added.
  Tensor expand(const Shape& shape) const;
  Tensor unsqueeze(std::int64_t d) const;

  // Copies src (same shape, any dtype and strides) into this tensor's elements. Overlapping
  // memory is handled. Throws qkv::Error on a shape mismatch, writing nothing.
  void copy_from(const Tensor& src);
  void fill(double value);

  // "f32[2, 3, 4]" (and "(strided)" when not contiguous).
  std::string describe() const;

  // Whether the memory spans of the two tensors intersect (a conservative aliasing test).
  bool overlaps(const Tensor& other) const noexcept;

 private:
  std::shared_ptr<std::byte> storage_;
  std::byte* data_ = nullptr;
  DType dtype_ = DType::f32;
  bool defined_ = false;
  Shape shape_;
  Shape strides_;
  std::int64_t numel_ = 0;

  std::int64_t offset_of(const std::int64_t* index, std::size_t n) const;
  std::pair<const std::byte*, const std::byte*> byte_range() const noexcept;
};

std::string shape_string(const Shape& shape);  // "[2, 3, 4]"

}  // namespace qkv
