// Module bookkeeping (named parameters, mode) and weights to and from safetensors.
#include "qkv/nn/module.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qkv/error.hpp"
#include "qkv/safetensors.hpp"

namespace qkv::nn {

void Module::register_parameter(std::string name, const Var& parameter) {
  parameters_.emplace_back(std::move(name), parameter);
}

void Module::register_module(std::string name, Module& child) {
  children_.emplace_back(std::move(name), &child);
}

void Module::collect(const std::string& prefix, std::vector<NamedParameter>& out) const {
  for (const auto& [name, parameter] : parameters_) out.emplace_back(prefix + name, parameter);
  for (const auto& [name, child] : children_) {
    child->collect(name.empty() ? prefix : prefix + name + ".", out);
  }
}

std::vector<NamedParameter> Module::named_parameters() const {
  std::vector<NamedParameter> out;
  collect("", out);
  return out;
}

std::vector<Var> Module::parameters() const {
  std::vector<Var> out;
  for (auto& [name, parameter] : named_parameters()) out.push_back(parameter);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& [name, parameter] : named_parameters()) parameter.zero_grad();
}

Var uniform_parameter(const Shape& shape, double bound, Generator& generator, DType dtype) {
  return Var(Tensor::uniform(shape, -bound, bound, generator, dtype), true);
}

Var constant_parameter(const Shape& shape, double value, DType dtype) {
  return Var(Tensor::full(shape, value, dtype), true);
}

std::uint64_t draw_seed(Generator& generator) {
  const std::uint64_t high = generator.next_u32();
  return high << 32 | generator.next_u32();
}

NamedTensors state_dict(const Module& module) {
  NamedTensors out;
  for (const auto& [name, parameter] : module.named_parameters()) out[name] = parameter.value();
  return out;
}

void load_state_dict(Module& module, const NamedTensors& tensors, bool strict) {
  const std::vector<NamedParameter> parameters = module.named_parameters();
  // Every check first, so that an error leaves the module as it was.
  for (const auto& [name, parameter] : parameters) {
    const auto it = tensors.find(name);
    if (it == tensors.end()) {
      throw Error(name, "a tensor of shape " + shape_string(parameter.shape()), "none");
    }
    if (it->second.shape() != parameter.shape()) {
      throw Error(name, "shape " + shape_string(parameter.shape()),
                  shape_string(it->second.shape()));
    }
    if (it->second.dtype() == DType::boolean) {
      throw Error(name, "a floating tensor", "a boolean one");
    }
  }
  if (strict) {
    for (const auto& [name, tensor] : tensors) {
      bool known = false;
      for (const auto& p : parameters) known = known || p.first == name;
      if (!known) throw Error(name, "a parameter of the module", "an unexpected tensor");
    }
  }
  for (const auto& [name, parameter] : parameters) {
    Tensor value = parameter.value();  // shares the parameter's storage
    value.copy_from(tensors.at(name));
  }
}

void save_module(const Module& module, const std::filesystem::path& path) {
  save_safetensors(path, state_dict(module));
}

void load_module(Module& module, const std::filesystem::path& path, bool strict) {
  load_state_dict(module, load_safetensors(path).tensors, strict);
}

}  // namespace qkv::nn
