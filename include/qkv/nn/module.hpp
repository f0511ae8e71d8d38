#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "qkv/autograd/var.hpp"
#include "qkv/dtype.hpp"
#include "qkv/safetensors.hpp"

namespace qkv::nn {

using autograd::Var;

// A parameter and its name in PyTorch's state_dict convention ("self_attn.in_proj_weight").
using NamedParameter = std::pair<std::string, Var>;

// The base of every module: named parameters (leaf Vars that require grad), child modules and
// the train/eval mode. Children are members of the module that registers them, so a module is
// neither copied nor moved (the registered pointers would dangle).
class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Every parameter of this module and its children, depth first in registration order, named
  // as PyTorch names them. The Vars share the module's values: writing a value in place (as the
  // optimizers and load_state_dict do) updates the module.
  std::vector<NamedParameter> named_parameters() const;
  std::vector<Var> parameters() const;

  // Training mode turns dropout on; eval mode off. Applies to the children too.
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const noexcept { return training_; }

  void zero_grad();  // every parameter's gradient to zero

 protected:
  // name "" puts the child's parameters at this module's level (FeedForward's linear1 inside a
  // TransformerEncoderLayer is "linear1", as in PyTorch).
  void register_parameter(std::string name, const Var& parameter);
  void register_module(std::string name, Module& child);

 private:
  void collect(const std::string& prefix, std::vector<NamedParameter>& out) const;

  std::vector<NamedParameter> parameters_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

// A parameter leaf (requires grad) of the given shape and dtype, drawn uniform in [-bound, bound)
// from the generator, or filled with a constant.
Var uniform_parameter(const Shape& shape, double bound, Generator& generator, DType dtype);
Var constant_parameter(const Shape& shape, double value, DType dtype);
// A 64-bit dropout seed drawn from the generator.
std::uint64_t draw_seed(Generator& generator);

// --- io.cpp ---------------------------------------------------------------------------------
// The module's named parameters as tensors (sharing the values).
NamedTensors state_dict(const Module& module);
// Copies tensors[name] into each named parameter (converted to its dtype). Every parameter must
// be present with its shape; with strict, a name the module does not have is an error too.
// Everything is checked before anything is written: on error the module is unchanged.
void load_state_dict(Module& module, const NamedTensors& tensors, bool strict = true);
// The same through a safetensors file (Python's safetensors and PyTorch read it).
void save_module(const Module& module, const std::filesystem::path& path);
void load_module(Module& module, const std::filesystem::path& path, bool strict = true);

}  // namespace qkv::nn
