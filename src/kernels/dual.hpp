#pragma once

#include <cmath>

namespace qkv::kernels {

// A dual number v + d·ε (ε² = 0): evaluating a score_mod on Dual{s, 1} yields s' and ds'/ds,
// which the backward needs, from the one generic definition of the mod.
template <class T>
struct Dual {
  T v;
  T d;
};

template <class T>
constexpr Dual<T> operator+(Dual<T> a, Dual<T> b) noexcept {
  return {a.v + b.v, a.d + b.d};
}
template <class T>
constexpr Dual<T> operator-(Dual<T> a, Dual<T> b) noexcept {
  return {a.v - b.v, a.d - b.d};
}
template <class T>
constexpr Dual<T> operator*(Dual<T> a, Dual<T> b) noexcept {
  return {a.v * b.v, a.d * b.v + a.v * b.d};
}
template <class T>
constexpr Dual<T> operator/(Dual<T> a, Dual<T> b) noexcept {
  return {a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v)};
}
template <class T>
constexpr Dual<T> operator+(Dual<T> a, T c) noexcept {
  return {a.v + c, a.d};
}
template <class T>
constexpr Dual<T> operator-(Dual<T> a, T c) noexcept {
  return {a.v - c, a.d};
}
template <class T>
constexpr Dual<T> operator*(Dual<T> a, T c) noexcept {
  return {a.v * c, a.d * c};
}
template <class T>
constexpr Dual<T> operator*(T c, Dual<T> a) noexcept {
  return {a.v * c, a.d * c};
}
template <class T>
constexpr Dual<T> operator/(Dual<T> a, T c) noexcept {
  return {a.v / c, a.d / c};
}

template <class T>
Dual<T> tanh(Dual<T> a) noexcept {
  const T t = std::tanh(a.v);
  return {t, a.d * (T(1) - t * t)};
}
template <class T>
Dual<T> exp(Dual<T> a) noexcept {
  const T e = std::exp(a.v);
  return {e, a.d * e};
}

}  // namespace qkv::kernels
