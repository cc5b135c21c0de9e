// The op registry (include/bigc/Format/ops.h): the families of format/ops/ gathered into one table
// indexed by OpKind, each op checked to be declared exactly once. No MLIR here.
#include "Checks.h"
#include "bigc/Format/ops.h"
#include "ops/Rules.h"

#include <cstdio>
#include <cstdlib>

namespace bigc::format {

namespace {
[[noreturn]] void internal(const std::string &msg) {
  std::fprintf(stderr, "bigc: internal error in the op registry: %s\n", msg.c_str());
  std::abort();
}
} // namespace

const std::vector<OpDef> &opDefs() {
  static const std::vector<OpDef> table = [] {
    std::vector<OpDef> byKind(kOpKinds);
    std::vector<char> seen(kOpKinds, 0);
    for (auto family : {ops::denseOps, ops::elementwiseOps, ops::normOps, ops::attentionOps, ops::layoutOps,
                        ops::lossOps, ops::optimizerOps, ops::communicationOps, ops::moeOps})
      for (OpDef &d : family()) {
        const size_t k = size_t(d.kind);
        if (k >= kOpKinds || seen[k]) internal(std::string("op '") + d.name + "' declared twice or out of range");
        seen[k] = 1;
        byKind[k] = std::move(d);
      }
    for (size_t k = 0; k < kOpKinds; ++k)
      if (!seen[k]) internal("OpKind " + std::to_string(k) + " has no declaration in format/ops/");
    return byKind;
  }();
  return table;
}

const OpDef &opDef(OpKind k) { return opDefs()[size_t(k)]; }

const OpDef *findOp(const std::string &name) {
  for (const auto &d : opDefs())
    if (name == d.name) return &d;
  return nullptr;
}

const AttrSpec *OpDef::attr(const std::string &n) const {
  for (const AttrSpec &a : attrs)
    if (n == a.name) return &a;
  return nullptr;
}

OperandType OpDef::operandType(bool isIn, size_t j) const {
  const std::vector<OperandType> &t = isIn ? inTypes : outTypes;
  if (t.empty()) return OperandType::Float;
  return j < t.size() ? t[j] : t.back();
}

bool mayAlias(const OpDef &def, size_t out, size_t in) {
  if (!def.inPlace) return false;
  if (def.aliases.empty()) return true;
  for (auto [o, i] : def.aliases)
    if (size_t(o) == out && size_t(i) == in) return true;
  return false;
}

OpDims decodeOp(const Program &p, const Instruction &ins, OpKind kind) {
  static const std::string path;
  detail::InstructionCheck c{p, path, 0, &ins};
  c.kind = kind;
  OpDims d;
  if (const auto dims = opDef(kind).dims) dims(c, d);
  return d;
}

} // namespace bigc::format
