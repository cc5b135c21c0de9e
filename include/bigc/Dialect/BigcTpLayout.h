//===- BigcTpLayout.h - tensor-parallel layouts of values -------*- C++ -*-===//
//
// How a value of the forward graph is laid out over the T tensor ranks
// (bigc-tensor-parallel), and the rule an op gives for it
// (TensorParallelOpInterface, BigcInterfaces.td).
//
//===----------------------------------------------------------------------===//

#ifndef BIGC_DIALECT_BIGCTPLAYOUT_H
#define BIGC_DIALECT_BIGCTPLAYOUT_H

#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <string>

namespace mlir {
namespace bigc {

struct TpLayout {
  enum Kind : uint8_t {
    Replicated, ///< every tensor rank holds the whole value
    Split,      ///< rank t holds chunk t of dimension `dim` (of each of `segments` equal parts)
    Partial,    ///< every rank holds a term; the value is their sum
  };
  Kind kind = Replicated;
  int64_t dim = -1;
  /// Split: the dimension is `segments` equal parts (QKV: 3), each split in
  /// T chunks; rank t holds chunk t of every part, in order.
  int64_t segments = 1;
  /// In a rule's operand list: a replicated value whose gradient, on each
  /// rank, is a partial sum (Megatron's f: the backward all-reduces it).
  bool gradPartial = false;
  /// In the operand list given to a rule: a weight whose layout is not
  /// decided yet (bigc.get_param): the rule may ask for any layout.
  bool freeParam = false;

  static TpLayout rep(bool gradPartial = false) {
    TpLayout l;
    l.gradPartial = gradPartial;
    return l;
  }
  static TpLayout split(int64_t dim, int64_t segments = 1) {
    TpLayout l;
    l.kind = Split, l.dim = dim, l.segments = segments;
    return l;
  }
  static TpLayout partial() {
    TpLayout l;
    l.kind = Partial;
    return l;
  }
  bool isRep() const { return kind == Replicated; }
  bool isSplit(int64_t d) const { return kind == Split && dim == d; }
  bool isPartial() const { return kind == Partial; }
  /// Same placement of the data (ignores gradPartial and freeParam).
  bool sameAs(const TpLayout &o) const {
    return kind == o.kind && (kind != Split || (dim == o.dim && segments == o.segments));
  }
  std::string str() const {
    if (kind == Replicated) return "replicated";
    if (kind == Partial) return "partial sums";
    return "split on dim " + std::to_string(dim) + (segments > 1 ? " (" + std::to_string(segments) + " segments)" : "");
  }
};

struct TpContext {
  int64_t tp = 1;                ///< tensor ranks
  bool sequenceParallel = false; ///< Megatron-SP: per-token regions split on the sequence
  /// Demanded segments of the op's first result (a consumer such as
  /// attention needs its input in 3 segments); 1 otherwise.
  int64_t resultSegments = 1;
};

/// What an op does under tensor parallelism, given its operands' layouts:
/// the layouts it needs its operands in (the pass converts), its results'
/// layouts, and attributes to change (heads per rank). `replicated` with a
/// note: the op has no rule for these layouts and runs replicated.
struct TpRule {
  llvm::SmallVector<TpLayout> operands;
  llvm::SmallVector<TpLayout> results;
  /// An operand in Split with other segments than the rule needs: ask the
  /// producer for `demandSegments` (index of the operand, or -1).
  int64_t demandOperand = -1;
  int64_t demandSegments = 1;
  /// The op computes with fewer heads per rank (attention): heads / T.
  bool divideHeads = false;
  /// A sharded-vocabulary op (embedding: ids of other ranks give zeros).
  bool vocabParallel = false;
  /// cross_entropy over vocabulary-split logits: rewritten as the
  /// vocabulary-parallel loss (vocab_ce_stats, tp_all_gather, vocab_ce_loss).
  bool vocabParallelLoss = false;
  std::string note; ///< why the op runs replicated (bigc inspect)
};

} // namespace bigc
} // namespace mlir

#endif // BIGC_DIALECT_BIGCTPLAYOUT_H
