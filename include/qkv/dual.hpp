#pragma once

// Dual numbers for score mods. A score_mod written generically, [](auto s, b, h, i, j) { ... },
// is evaluated by the forward on plain numbers and by the backward on Dual{s, 1}, which yields
// s' and ds'/ds from the one definition. Arithmetic with plain numbers of any type, comparisons
// (by value) and the functions below work on both; call them qualified (qkv::tanh(s)), so that a
// float stays a float.

#include <cmath>
#include <type_traits>

namespace qkv {

// v + d·ε with ε² = 0.
template <class T>
struct Dual {
  T v;
  T d;
};

template <class C>
concept Scalar = std::is_arithmetic_v<C>;

template <class T>
constexpr Dual<T> operator-(Dual<T> a) noexcept {
  return {-a.v, -a.d};
}
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
template <class T, Scalar C>
constexpr Dual<T> operator+(Dual<T> a, C c) noexcept {
  return {a.v + static_cast<T>(c), a.d};
}
template <class T, Scalar C>
constexpr Dual<T> operator+(C c, Dual<T> a) noexcept {
  return {static_cast<T>(c) + a.v, a.d};
}
template <class T, Scalar C>
constexpr Dual<T> operator-(Dual<T> a, C c) noexcept {
  return {a.v - static_cast<T>(c), a.d};
}
template <class T, Scalar C>
constexpr Dual<T> operator-(C c, Dual<T> a) noexcept {
  return {static_cast<T>(c) - a.v, -a.d};
}
template <class T, Scalar C>
constexpr Dual<T> operator*(Dual<T> a, C c) noexcept {
  return {a.v * static_cast<T>(c), a.d * static_cast<T>(c)};
}
template <class T, Scalar C>
constexpr Dual<T> operator*(C c, Dual<T> a) noexcept {
  return {static_cast<T>(c) * a.v, static_cast<T>(c) * a.d};
}
template <class T, Scalar C>
constexpr Dual<T> operator/(Dual<T> a, C c) noexcept {
  return {a.v / static_cast<T>(c), a.d / static_cast<T>(c)};
}
template <class T, Scalar C>
constexpr Dual<T> operator/(C c, Dual<T> a) noexcept {
  return {static_cast<T>(c) / a.v, -static_cast<T>(c) * a.d / (a.v * a.v)};
}

// Comparisons look at the value only (a mod that branches on s is piecewise).
template <class T>
constexpr bool operator<(Dual<T> a, Dual<T> b) noexcept {
  return a.v < b.v;
}
template <class T>
constexpr bool operator>(Dual<T> a, Dual<T> b) noexcept {
  return a.v > b.v;
}
template <class T, Scalar C>
constexpr bool operator<(Dual<T> a, C c) noexcept {
  return a.v < static_cast<T>(c);
}
template <class T, Scalar C>
constexpr bool operator>(Dual<T> a, C c) noexcept {
  return a.v > static_cast<T>(c);
}

// The value of s, plain or dual.
template <class T>
constexpr T value_of(Dual<T> a) noexcept {
  return a.v;
}
template <Scalar T>
constexpr T value_of(T a) noexcept {
  return a;
}

template <class T>
Dual<T> tanh(Dual<T> a) noexcept {
  const T t = std::tanh(a.v);
  return {t, a.d * ((T(1) - t) * (T(1) + t))};
}
template <class T>
Dual<T> exp(Dual<T> a) noexcept {
  const T e = std::exp(a.v);
  return {e, a.d * e};
}
template <class T>
Dual<T> log(Dual<T> a) noexcept {
  return {std::log(a.v), a.d / a.v};
}
template <class T>
Dual<T> sqrt(Dual<T> a) noexcept {
  const T r = std::sqrt(a.v);
  return {r, a.d / (T(2) * r)};
}
template <class T>
Dual<T> abs(Dual<T> a) noexcept {
  return a.v < T(0) ? -a : a;
}
inline float tanh(float x) noexcept { return std::tanh(x); }
inline double tanh(double x) noexcept { return std::tanh(x); }
inline float exp(float x) noexcept { return std::exp(x); }
inline double exp(double x) noexcept { return std::exp(x); }
inline float log(float x) noexcept { return std::log(x); }
inline double log(double x) noexcept { return std::log(x); }
inline float sqrt(float x) noexcept { return std::sqrt(x); }
inline double sqrt(double x) noexcept { return std::sqrt(x); }
inline float abs(float x) noexcept { return std::abs(x); }
inline double abs(double x) noexcept { return std::abs(x); }

}  // namespace qkv
