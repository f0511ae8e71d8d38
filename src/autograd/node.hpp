#pragma once

#include <atomic>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "qkv/autograd/var.hpp"
#include "qkv/tensor.hpp"

namespace qkv::autograd::detail {

// dL/d(output) -> dL/d(input) for each input, in the input's shape and dtype; an undefined
// tensor where the gradient is zero or the input does not require grad.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& dout)>;

struct Node {
  Tensor value;
  Tensor grad;  // leaves: accumulated over backward calls
  // Leaves after zero_grad: the gradient is zeros, made when grad() is read; the next backward
  // pass writes its first contribution as the gradient instead of adding it to zeros. Atomic, so
  // that threads reading grad() of one leaf at once make the zeros once (engine.cpp).
  std::atomic<bool> grad_zeroed = false;
  Tensor pending;  // during a backward pass: the contributions received so far
  bool requires_grad = false;
  std::vector<std::shared_ptr<Node>> inputs;  // empty for leaves
  BackwardFn backward;                        // empty for leaves

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Releases a long chain of inputs without recursing once per node.
  ~Node();
};

// The op's result: a node that records `backward` over `inputs` when grad is enabled and one of
// them requires grad, else a leaf. Backward closures must capture tensors, never Vars, so that
// nodes are owned only through `inputs`.
Var record(Tensor value, std::initializer_list<const Var*> inputs, BackwardFn backward);
Var record(Tensor value, const std::vector<Var>& inputs, BackwardFn backward);
// Whether record would keep a backward over these inputs: an op may skip what only its backward
// needs where it would not (undefined inputs allowed).
bool recording(std::initializer_list<const Var*> inputs);

}  // namespace qkv::autograd::detail
