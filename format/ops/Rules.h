// What the op declarations of format/ops/ share (format/ only; not installed): the builder that
// declares an op in one statement, the dtype shorthands, and helpers of the shape, dims and cost
// rules. One file per family declares its ops (the registry: include/bigc/Format/ops.h).
#pragma once

#include "../Checks.h"
#include "bigc/Format/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace bigc::format::ops {

using Ctx = detail::InstructionCheck;
using detail::isSuffix;
using detail::prod;

constexpr OperandType I32 = OperandType::I32, F32 = OperandType::F32, Fl = OperandType::Float, Any = OperandType::Any;
constexpr AttrType Int = AttrType::Int, Real = AttrType::Real, Flag = AttrType::Flag, Ints = AttrType::Ints,
                   Reals = AttrType::Reals;

// Declares one op: Def("matmul", OpKind::Matmul).in(2).out(1).attrs({...}).shape(..)...
struct Def {
  OpDef d;
  Def(const char *name, OpKind kind) { d.name = name, d.kind = kind; }
  Def &in(int n) { return in(n, n); }
  Def &in(int lo, int hi) { return d.minIn = lo, d.maxIn = hi, *this; } // hi -1: any number
  Def &out(int n) { return out(n, n); }
  Def &out(int lo, int hi) { return d.minOut = lo, d.maxOut = hi, *this; }
  Def &types(std::vector<OperandType> in, std::vector<OperandType> out) {
    return d.inTypes = std::move(in), d.outTypes = std::move(out), *this;
  }
  Def &inPlace(std::vector<std::pair<int, int>> pairs = {}) {
    return d.inPlace = true, d.aliases = std::move(pairs), *this;
  }
  Def &ownDtypes() { return d.ownDtypes = true, *this; }
  Def &attrs(std::vector<AttrSpec> a) { return d.attrs = std::move(a), *this; }
  Def &shape(void (*f)(const Ctx &)) { return d.shape = f, *this; }
  Def &dims(void (*f)(const Ctx &, OpDims &)) { return d.dims = f, *this; }
  Def &flops(int64_t (*f)(const OpView &)) { return d.flops = f, *this; }
  Def &bytes(CostBytes b) { return d.bytes = b, *this; }
  operator OpDef() const { return d; }
};

// Cost rules' shorthands: elements of result 0, of input k, of every input.
inline int64_t n0(const OpView &v) { return v.numOut() ? v.outElements(0) : 0; }
inline int64_t inN(const OpView &v, size_t k) { return k < v.numIn() ? v.inElements(k) : 0; }
inline int64_t allInN(const OpView &v) {
  int64_t n = 0;
  for (size_t k = 0; k < v.numIn(); ++k) n += v.inElements(k);
  return n;
}
inline int64_t zeroFlops(const OpView &) { return 0; }
// F FLOPs per element of the result, or of input K.
template <int F> int64_t perResult(const OpView &v) { return F * n0(v); }
template <int F, size_t K> int64_t perInput(const OpView &v) { return F * inN(v, K); }

// The families (one file each).
std::vector<OpDef> denseOps();
std::vector<OpDef> elementwiseOps();
std::vector<OpDef> normOps();
std::vector<OpDef> attentionOps();
std::vector<OpDef> moeOps();
std::vector<OpDef> layoutOps();
std::vector<OpDef> lossOps();
std::vector<OpDef> optimizerOps();
std::vector<OpDef> communicationOps();

} // namespace bigc::format::ops
