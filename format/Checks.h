// What the reader, the validator and the shape rules share (format/ only; not installed): the error
// helper, shape printing, and the checks of one instruction. No MLIR here.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bigc/Format/ops.h"
#include "bigc/Format/program.h"
#include "bigc/Format/shape.h"

namespace bigc::format::detail {

[[noreturn]] inline void fail(const std::string &path, const std::string &msg) { throw UserError(path + ": " + msg); }

using format::shapeStr; // include/bigc/Format/shape.h

inline bool isSuffix(const std::vector<int64_t> &suffix, const std::vector<int64_t> &of) {
  if (suffix.size() > of.size()) return false;
  return std::equal(suffix.begin(), suffix.end(), of.end() - long(suffix.size()));
}

inline int64_t prod(const std::vector<int64_t> &s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

// One instruction of a program under validation: `bad` names it in the error.
struct InstructionCheck {
  const Program &p;
  const std::string &path;
  size_t idx = 0;
  const Instruction *ins = nullptr;
  OpKind kind = OpKind::Wait; // its op (the rules shared by a forward op and its gradient branch on it)

  [[noreturn]] void bad(const std::string &msg) const {
    std::string where = "instruction " + std::to_string(idx) + " (" + ins->op;
    if (!ins->loc.empty()) where += " at " + ins->loc;
    fail(path, where + "): " + msg);
  }
  const Buffer &in(size_t i) const { return p.buffers[size_t(ins->in[i])]; }
  const Buffer &out(size_t i) const { return p.buffers[size_t(ins->out[i])]; }
  std::string desc(const Buffer &b) const {
    return "buffer " + std::to_string(b.id) + " '" + b.name + "' " + shapeStr(b.shape);
  }
  void sameShape(const Buffer &a, const Buffer &b, const char *what) const {
    if (a.shape != b.shape) bad(std::string(what) + ": shapes differ: " + desc(a) + " vs " + desc(b));
  }
  // bigc-pad-vocab: attribute `classes` (optional) an integer in 1..vocab, the logits' whole
  // vocabulary (the columns from there on are padding).
  void classesWithin(int64_t vocab) const {
    if (!ins->attrs.count("classes")) return;
    if (p.version < 4) bad("attribute 'classes' (a padded vocabulary) needs program format version 4");
    const double c = ins->num("classes", 0);
    if (!(c >= 1) || c != std::floor(c) || c > double(vocab))
      bad("attribute 'classes' must be an integer in 1.." + std::to_string(vocab) + " (the vocabulary's columns)");
  }
  void wantShape(const Buffer &b, const std::vector<int64_t> &s, const std::string &what) const {
    if (b.shape != s) bad(what + " must have shape " + shapeStr(s) + ", " + desc(b) + " has not");
  }
  void minRank(const Buffer &b, size_t r, const std::string &what) const {
    if (b.shape.size() < r)
      bad(what + " must have rank >= " + std::to_string(r) + ", " + desc(b) + " has rank " +
          std::to_string(b.shape.size()));
  }
  std::vector<int64_t> lead(const Buffer &b) const { return std::vector<int64_t>(b.shape.begin(), b.shape.end() - 1); }
  int64_t axisAttr(size_t rank) const {
    auto it = ins->attrs.find("axis");
    if (it == ins->attrs.end() || it->second.isList) bad("attribute 'axis' (an integer) is required");
    double a = it->second.num;
    if (a != std::floor(a)) bad("attribute 'axis' must be an integer");
    int64_t ax = int64_t(a);
    if (ax < 0) ax += int64_t(rank);
    if (ax < 0 || ax >= int64_t(rank))
      bad("attribute 'axis' " + std::to_string(int64_t(a)) + " is out of range for rank " + std::to_string(rank));
    return ax;
  }

  // Inputs and outputs may not overlap in memory, except the exact in-place aliasing the format
  // allows, and a buffer updated in place (same id in `in` and `out`) (Validator.cpp).
  void overlaps(const OpDef &def) const;
};

} // namespace bigc::format::detail
