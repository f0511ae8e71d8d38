#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "qkv/dtype.hpp"
#include "qkv/tensor.hpp"

namespace qkv::autograd {

namespace detail {
struct Node;
}  // namespace detail

// A cheap shared handle on a node of the graph: a value (f32 or f64, never written after the op
// that made it; bf16 or f16 only as made by cast() and the ops that take it, see ops.hpp) and, for
// a leaf that requires grad, the gradient that backward() accumulates. Copies share the node. Like
// PyTorch, only leaves keep their gradient; intermediate values receive theirs during a backward
// pass and pass it on.
class Var {
 public:
  Var() = default;  // undefined: defined() is false
  // A leaf. The Var shares the tensor's storage: do not write the tensor while the Var is in a
  // graph that may still run backward.
  explicit Var(Tensor value, bool requires_grad = false);

  bool defined() const noexcept { return node_ != nullptr; }
  const Tensor& value() const;
  // The accumulated gradient of a leaf (the value's shape and dtype); undefined until a backward
  // reaches it.
  const Tensor& grad() const;
  bool requires_grad() const;
  bool is_leaf() const;  // made by the constructor, not by an op

  const Shape& shape() const { return value().shape(); }
  DType dtype() const { return value().dtype(); }
  std::int64_t dim() const { return value().dim(); }
  std::int64_t size(std::int64_t d) const { return value().size(d); }
  std::int64_t numel() const { return value().numel(); }

  // Sets a leaf's accumulated gradient to zeros (it stays defined when it was).
  void zero_grad();

  // dL/dx for every leaf x that requires grad and that this Var depends on, added to x.grad().
  // backward() seeds with 1 and needs a one-element Var; backward(seed) takes dL/d(this), of this
  // Var's shape and dtype. Walks the graph in reverse topological order, iteratively (graphs may
  // be deep); the graph is kept, so a second call accumulates again.
  void backward() const;
  void backward(const Tensor& seed) const;

  // A leaf sharing the value, outside the graph.
  Var detach() const;

  // For op implementations: wraps a node made by the engine.
  explicit Var(std::shared_ptr<detail::Node> node) noexcept : node_(std::move(node)) {}
  const std::shared_ptr<detail::Node>& node() const noexcept { return node_; }

 private:
  std::shared_ptr<detail::Node> node_;
};

// While one is alive (per thread), ops record nothing: their results are leaves that do not
// require grad, and no backward state is kept. For inference.
class NoGrad {
 public:
  NoGrad() noexcept;
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

// Whether ops record their backward on this thread (false inside a NoGrad scope).
bool grad_enabled() noexcept;

// Mixed precision, PyTorch's autocast: while one is alive (per thread), matmul and attention given
// f32 Vars compute in `dtype` (bf16 or f16): each f32 input is rounded to dtype by a cast node, the
// op runs on the half values (f32 accumulation, an f32 softmax) and its result, rounded to dtype,
// comes back to f32 through another cast. Everything else (layer norm, softmax, cross-entropy,
// the optimizer's master weights) stays f32. The backward mirrors it: the gradient reaching a
// cast to f32 is rounded to dtype, so the ops' backward runs in dtype as their forward did.
// Nested scopes restore the outer one's dtype. dtype other than bf16 or f16 throws qkv::Error.
class Autocast {
 public:
  explicit Autocast(DType dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<DType> previous_;
};

// The dtype of the innermost Autocast alive on this thread; none outside one.
std::optional<DType> autocast_dtype() noexcept;

}  // namespace qkv::autograd
