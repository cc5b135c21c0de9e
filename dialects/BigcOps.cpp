//===- BigcOps.cpp - bigc ops: verifiers and gradients --------------------===//
//
// Verifiers implement the shape rules of the runtime instruction table
// (docs/program-format.md); every error is reported at the op's location.
// buildGradient implements DifferentiableOpInterface for the forward ops:
// each gradient is built from bigc ops only, at the op's location.
//
//===----------------------------------------------------------------------===//

#include "bigc/Dialect/BigcAttrNames.h"
#include "bigc/Dialect/BigcOps.h"

#include "mlir/IR/Builders.h"
#include <cmath>
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::bigc;

#include "dialects/BigcInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }
static ArrayRef<int64_t> shapeOf(Value v) { return tensorOf(v).getShape(); }
static Type eltOf(Value v) { return tensorOf(v).getElementType(); }

/// "[4,64,64]"
static std::string str(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << '[';
  llvm::interleave(shape, os, ",");
  os << ']';
  return s;
}

static SmallVector<int64_t> concatShape(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  SmallVector<int64_t> r(a.begin(), a.end());
  r.append(b.begin(), b.end());
  return r;
}

static bool isSuffixOf(ArrayRef<int64_t> suffix, ArrayRef<int64_t> full) {
  return suffix.size() <= full.size() && full.take_back(suffix.size()) == suffix;
}

/// Checks that the element types of `values` are all equal.
static LogicalResult sameElementTypes(Operation *op, ValueRange values) {
  Type first;
  for (Value v : values) {
    Type t = eltOf(v);
    if (!first)
      first = t;
    else if (t != first)
      return op->emitOpError("requires the same element type for its "
                             "floating-point operands and results, got ")
             << first << " and " << t;
  }
  return success();
}

static LogicalResult expectShape(Operation *op, StringRef what, Value v, ArrayRef<int64_t> expected) {
  if (shapeOf(v) != expected)
    return op->emitOpError() << what << " must have shape " << str(expected) << ", got " << str(shapeOf(v));
  return success();
}

/// Statistics (layernorm mean/rstd, attention lse) are always f32, whatever
/// the precision of the data.
static LogicalResult expectF32(Operation *op, StringRef what, Value v) {
  if (!eltOf(v).isF32())
    return op->emitOpError() << what << " must be f32 (statistics are kept in fp32 in every "
                             << "precision), got " << eltOf(v);
  return success();
}

static Value zerosLike(OpBuilder &b, Location loc, Type type) {
  return b.create<FillOp>(loc, type, b.getF64FloatAttr(0.0));
}

static Value makeMatmul(OpBuilder &b, Location loc, Type type, Value x, Value y, bool ta, bool tb) {
  return b.create<MatmulOp>(loc, type, x, y, ta ? b.getUnitAttr() : UnitAttr(), tb ? b.getUnitAttr() : UnitAttr());
}

//===----------------------------------------------------------------------===//
// bigc.param / bigc.get_param / bigc.adamw
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  StringRef init = getInit();
  if (!isKnownInit(init))
    return emitOpError("init must be \"normal\", \"zeros\", \"ones\", "
                       "\"fill\" or \"copy\", got \"")
           << init << "\"";
  if (std::optional<APFloat> s = getStd()) {
    if (init != kInitNormal) return emitOpError("std is only allowed with init = \"normal\"");
    if (!(s->convertToDouble() > 0.0)) return emitOpError("std must be positive");
  }
  if (init == kInitFill && !getValue()) return emitOpError("init = \"fill\" requires a value attribute");
  if (init != kInitFill && getValue()) return emitOpError("value is only allowed with init = \"fill\"");
  if (init == kInitCopy && (!getSource() || getSource()->empty()))
    return emitOpError("init = \"copy\" requires a source attribute naming "
                       "the persistent tensor it is a cast of");
  if (init != kInitCopy && getSource()) return emitOpError("source is only allowed with init = \"copy\"");
  StringRef role = getRole();
  if (!isKnownRole(role)) // transfer: a host staging tensor of bigc-offload
    return emitOpError("role must be \"param\", \"master\", "
                       "\"optimizer\" or \"transfer\", got \"")
           << role << "\"";
  // (AdamW moments may be bf16: --optimizer-states bf16; the adamw op checks its moments.)
  Type et = getTensorType().getElementType();
  if ((role == kMasterRole && !et.isF32()) || (role == kOptimizerRole && !et.isF32() && !et.isBF16()))
    return emitOpError("a parameter of role \"") << role << "\" must be f32 (fp32 master weights and optimizer "
                                                 << "states; AdamW moments may be bf16), got " << et;
  return success();
}

static FailureOr<ParamOp> lookupParam(Operation *op, SymbolTableCollection &symbols, FlatSymbolRefAttr ref,
                                      StringRef what) {
  auto param = symbols.lookupNearestSymbolFrom<ParamOp>(op, ref);
  if (!param) return op->emitOpError() << what << " " << ref << " does not name a bigc.param";
  return param;
}

// A copy's source (through the module's symbol table, built once for the verifier's walk: a
// lookup per copy by walking the module made verifying a large model quadratic).
LogicalResult ParamOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (getInit() != kInitCopy || !getSource()) return success();
  Operation *module = (*this)->getParentOp();
  auto srcParam =
      module ? dyn_cast_or_null<ParamOp>(symbols.lookupSymbolIn(module, StringAttr::get(getContext(), *getSource())))
             : ParamOp();
  if (!srcParam) return emitOpError("source \"") << *getSource() << "\" does not name a bigc.param";
  // The logical shapes (bigc.full_shape of a shard, bigc-shard) must
  // match: a copy of a sharded master may be whole, or a shard.
  auto logical = [](ParamOp p) {
    if (auto f = p->getAttrOfType<DenseI64ArrayAttr>(kFullShapeAttrName)) return SmallVector<int64_t>(f.asArrayRef());
    return SmallVector<int64_t>(p.getTensorType().getShape());
  };
  if (logical(srcParam) != logical(*this))
    return emitOpError("source \"") << *getSource() << "\" has shape " << str(srcParam.getTensorType().getShape())
                                    << ", this copy has shape " << str(getTensorType().getShape());
  return success();
}

LogicalResult GetParamOp::verifySymbolUses(SymbolTableCollection &symbols) {
  FailureOr<ParamOp> param = lookupParam(getOperation(), symbols, getParamAttr(), "symbol");
  if (failed(param)) return failure();
  if (param->getType() != getType())
    return emitOpError("result type ") << getType() << " does not match the type " << param->getType() << " of "
                                       << getParamAttr();
  return success();
}

LogicalResult AdamWOp::verify() {
  auto check = [&](StringRef name, double v, bool ok, StringRef rule) -> LogicalResult {
    if (!ok) return emitOpError() << name << " must be " << rule << ", got " << v;
    return success();
  };
  double lr = getLr().convertToDouble(), b1 = getBeta1().convertToDouble(), b2 = getBeta2().convertToDouble(),
         eps = getEps().convertToDouble(), wd = getWeightDecay().convertToDouble(), mn = getMaxNorm().convertToDouble();
  if (failed(check("lr", lr, lr >= 0.0, ">= 0")) || failed(check("beta1", b1, b1 >= 0.0 && b1 < 1.0, "in [0, 1)")) ||
      failed(check("beta2", b2, b2 >= 0.0 && b2 < 1.0, "in [0, 1)")) || failed(check("eps", eps, eps > 0.0, "> 0")) ||
      failed(check("weight_decay", wd, wd >= 0.0, ">= 0")) || failed(check("max_norm", mn, mn >= 0.0, ">= 0")))
    return failure();
  if (getNorm() && !(mn > 0.0)) return emitOpError("a norm operand requires max_norm > 0");
  if (!getNorm() && mn > 0.0)
    return emitOpError("max_norm > 0 requires the norm operand (global_norm "
                       "of all gradients)");
  return success();
}

/// Looks up a bigc.param that must be an f32 scalar (loss scale, counters).
static LogicalResult checkScalarF32Param(Operation *op, SymbolTableCollection &symbols, FlatSymbolRefAttr ref,
                                         StringRef what) {
  auto param = symbols.lookupNearestSymbolFrom<ParamOp>(op, ref);
  if (!param) return op->emitOpError() << what << " " << ref << " does not name a bigc.param";
  RankedTensorType t = param.getTensorType();
  if (t.getRank() != 0 || !t.getElementType().isF32())
    return op->emitOpError() << what << " " << ref << " must be an f32 scalar (tensor<f32>), got " << t;
  return success();
}

LogicalResult AdamWOp::verifySymbolUses(SymbolTableCollection &symbols) {
  std::pair<FlatSymbolRefAttr, StringRef> refs[] = {
      {getParamAttr(), "param"}, {getExpAvgAttr(), "exp_avg"}, {getExpAvgSqAttr(), "exp_avg_sq"}};
  Type momentType;
  const int64_t gradNumel = cast<RankedTensorType>(getGrad().getType()).getNumElements();
  const std::optional<int64_t> count = getCount();
  if (count.has_value() != getOffset().has_value()) return emitOpError("offset and count go together");
  if (count && (*count <= 0 || *getOffset() < 0 || *getOffset() + *count > gradNumel))
    return emitOpError("elements [") << *getOffset() << ", " << *getOffset() + *count << ") of a gradient of "
                                     << gradNumel << ": out of range";
  if (FlatSymbolRefAttr w = getWeightAttr())
    if (failed(lookupParam(getOperation(), symbols, w, "weight"))) return failure();
  for (auto [ref, what] : refs) {
    FailureOr<ParamOp> p = lookupParam(getOperation(), symbols, ref, what);
    if (failed(p)) return failure();
    if (count ? p->getTensorType().getNumElements() < *count : p->getTensorType().getShape() != shapeOf(getGrad()))
      return emitOpError() << what << " " << ref << " has shape " << str(p->getTensorType().getShape())
                           << " but the gradient has shape " << str(shapeOf(getGrad()))
                           << (count ? " and the update " + std::to_string(*count) + " elements" : std::string());
    Type et = p->getTensorType().getElementType();
    if (what != "param" && !et.isF32() && !et.isBF16())
      return emitOpError() << what << " " << ref << " must be f32 or bf16 (--optimizer-states), got " << et;
    if (what != "param" && momentType && et != momentType)
      return emitOpError() << "exp_avg and exp_avg_sq must have one type, got " << momentType << " and " << et;
    if (what != "param") momentType = et;
  }
  if (FlatSymbolRefAttr half = getHalfAttr()) {
    FailureOr<ParamOp> h = lookupParam(getOperation(), symbols, half, "half");
    if (failed(h)) return failure();
    const int64_t hn = h->getTensorType().getNumElements();
    if (count ? hn != gradNumel && hn < *count : h->getTensorType().getShape() != shapeOf(getGrad()))
      return emitOpError() << "half " << half << " has shape " << str(h->getTensorType().getShape())
                           << " but the gradient has shape " << str(shapeOf(getGrad()));
    auto master = symbols.lookupNearestSymbolFrom<ParamOp>(getOperation(), getParamAttr());
    if (!master.getTensorType().getElementType().isF32())
      return emitOpError() << "with half = " << half << ", param " << getParamAttr() << " must be the f32 master, got "
                           << master.getTensorType().getElementType();
    if (half == getParamAttr()) return emitOpError("half must name another parameter than param");
  }
  return success();
}

//===----------------------------------------------------------------------===//
// bigc.check_finite / bigc.loss_scale_update / bigc.cast
//===----------------------------------------------------------------------===//

LogicalResult CheckFiniteOp::verify() {
  if (getInputs().empty()) return emitOpError("requires at least one input");
  return success();
}

LogicalResult LossScaleUpdateOp::verify() {
  if (getGrowthInterval() < 1) return emitOpError("growth_interval must be >= 1, got ") << getGrowthInterval();
  double backoff = getBackoff().convertToDouble(), growth = getGrowth().convertToDouble();
  if (!(backoff > 0.0 && backoff < 1.0)) return emitOpError("backoff must be in (0, 1), got ") << backoff;
  if (!(growth > 1.0)) return emitOpError("growth must be > 1, got ") << growth;
  return success();
}

LogicalResult LossScaleUpdateOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (failed(checkScalarF32Param(*this, symbols, getScaleAttr(), "scale")) ||
      failed(checkScalarF32Param(*this, symbols, getGoodAttr(), "good")))
    return failure();
  if (getScaleAttr() == getGoodAttr()) return emitOpError("scale and good must be two different parameters");
  return success();
}

LogicalResult CastOp::verify() {
  if (shapeOf(getX()) != shapeOf(getY()))
    return emitOpError("result shape ") << str(shapeOf(getY())) << " must equal the input shape "
                                        << str(shapeOf(getX()));
  return success();
}

//===----------------------------------------------------------------------===//
// Verifiers of the compute ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  auto table = shapeOf(getTable());
  if (table.size() != 2) return emitOpError("table must have rank 2 [V,C], got ") << str(table);
  if (failed(sameElementTypes(*this, {getTable(), getY()}))) return failure();
  return expectShape(*this, "result", getY(), concatShape(shapeOf(getIds()), {table[1]}));
}

LogicalResult EmbeddingGradOp::verify() {
  auto dtable = shapeOf(getDtable());
  if (dtable.size() != 2) return emitOpError("result must have rank 2 [V,C], got ") << str(dtable);
  if (failed(sameElementTypes(*this, {getDy(), getDtable()}))) return failure();
  return expectShape(*this, "dy", getDy(), concatShape(shapeOf(getIds()), {dtable[1]}));
}

LogicalResult MatmulOp::verify() {
  if (failed(sameElementTypes(*this, {getA(), getB(), getC()}))) return failure();
  auto a = shapeOf(getA()), b = shapeOf(getB());
  bool ta = getTransposeA(), tb = getTransposeB();
  size_t ra = a.size(), rb = b.size();
  ArrayRef<int64_t> batch;
  if (ra == 2 && rb == 2) {
    // Form 1.
  } else if (ra > 2 && rb == 2) {
    // Form 2: a linear layer over the leading dims of a.
    if (ta)
      return emitOpError("transpose_a is not allowed when a has rank > 2 and "
                         "b has rank 2");
    batch = a.drop_back(2);
  } else if (ra == rb && ra > 2) {
    // Form 3: batched.
    if (a.drop_back(2) != b.drop_back(2))
      return emitOpError("batched matmul requires equal leading dimensions, "
                         "got ")
             << str(a) << " and " << str(b);
    batch = a.drop_back(2);
  } else {
    return emitOpError("operand ranks ") << ra << " and " << rb
                                         << " match no matmul form (2 and 2; > 2 and 2; equal ranks > 2)";
  }
  int64_t m = ta ? a[ra - 1] : a[ra - 2], k = ta ? a[ra - 2] : a[ra - 1];
  int64_t k2 = tb ? b[rb - 1] : b[rb - 2], n = tb ? b[rb - 2] : b[rb - 1];
  if (k != k2)
    return emitOpError("contraction dimensions differ: op(a) is ") << str({m, k}) << " and op(b) is " << str({k2, n});
  return expectShape(*this, "result", getC(), concatShape(batch, {m, n}));
}

LogicalResult AddOp::verify() { return success(); }
LogicalResult MulOp::verify() { return success(); }
LogicalResult ScaleOp::verify() { return success(); }
static LogicalResult verifyApproximate(Operation *op, StringRef a) {
  if (a != "tanh" && a != "none")
    return op->emitOpError("approximate must be \"tanh\" or \"none\", got \"") << a << "\"";
  return success();
}
LogicalResult GeluOp::verify() { return verifyApproximate(*this, getApproximate()); }
LogicalResult GeluGradOp::verify() { return verifyApproximate(*this, getApproximate()); }
LogicalResult SiluOp::verify() { return success(); }
// moe(_grad): x [...,C], router [E,C], gate_up [E,2F,C], down [E,C,F], 1 <= top_k <= E.
static LogicalResult verifyMoe(Operation *op, Value x, Value router, Value gateUp, Value down, int64_t k) {
  auto xs = shapeOf(x), rs = shapeOf(router), gs = shapeOf(gateUp);
  if (xs.empty()) return op->emitOpError("x must have a last dimension (the width C)");
  const int64_t C = xs.back();
  if (rs.size() != 2 || rs[1] != C) return op->emitOpError("router must be [E, ") << C << "], got " << str(rs);
  const int64_t E = rs[0];
  if (gs.size() != 3 || gs[0] != E || gs[1] % 2 != 0 || gs[2] != C)
    return op->emitOpError("gate_up must be [") << E << ", 2F, " << C << "], got " << str(gs);
  const int64_t F = gs[1] / 2;
  if (failed(expectShape(op, "down", down, {E, C, F}))) return failure();
  if (k < 1 || k > E) return op->emitOpError("top_k must be in [1, ") << E << "] (the experts), got " << k;
  return success();
}
LogicalResult MoeOp::verify() {
  if (failed(verifyMoe(*this, getX(), getRouter(), getGateUp(), getDown(), getTopK()))) return failure();
  return expectShape(*this, "result y", getY(), shapeOf(getX()));
}
LogicalResult MoeGradOp::verify() {
  if (failed(verifyMoe(*this, getX(), getRouter(), getGateUp(), getDown(), getTopK()))) return failure();
  if (failed(expectShape(*this, "dy", getDy(), shapeOf(getX()))) ||
      failed(expectShape(*this, "result dx", getDx(), shapeOf(getX()))) ||
      failed(expectShape(*this, "result drouter", getDrouter(), shapeOf(getRouter()))) ||
      failed(expectShape(*this, "result dgate_up", getDgateUp(), shapeOf(getGateUp()))) ||
      failed(expectShape(*this, "result ddown", getDdown(), shapeOf(getDown()))))
    return failure();
  return success();
}

static LogicalResult verifyCap(Operation *op, double cap) {
  if (!(cap > 0.0) || !std::isfinite(cap)) return op->emitOpError("cap must be a finite number > 0, got ") << cap;
  return success();
}
LogicalResult SoftcapOp::verify() { return verifyCap(*this, getCap().convertToDouble()); }
LogicalResult SoftcapGradOp::verify() { return verifyCap(*this, getCap().convertToDouble()); }
LogicalResult SiluGradOp::verify() { return success(); }
LogicalResult SwigluOp::verify() { return success(); }
LogicalResult SwigluGradOp::verify() { return success(); }
LogicalResult GegluOp::verify() { return verifyApproximate(*this, getApproximate()); }
LogicalResult GegluGradOp::verify() { return verifyApproximate(*this, getApproximate()); }

/// The rules every normalisation op shares, plain, gradient or fused (bigc-fuse): `x` of rank >= 1
/// ([..., C]); `same` of one element type; `full` of x's shape; `channel` of shape [C]; `rows` f32
/// statistics of shape [...] (x without its last dimension); eps, where the op has one, positive.
namespace {
using Named = std::pair<StringRef, Value>;
}
static LogicalResult verifyNorm(Operation *op, Value x, ValueRange same, ArrayRef<Named> full, ArrayRef<Named> channel,
                                ArrayRef<Named> rows, std::optional<double> eps) {
  auto xs = shapeOf(x);
  if (xs.empty()) return op->emitOpError("input must have rank >= 1");
  if (failed(sameElementTypes(op, same))) return failure();
  for (const Named &r : rows)
    if (failed(expectF32(op, r.first, r.second))) return failure();
  for (const Named &v : full)
    if (failed(expectShape(op, v.first, v.second, xs))) return failure();
  for (const Named &v : channel)
    if (failed(expectShape(op, v.first, v.second, {xs.back()}))) return failure();
  for (const Named &r : rows)
    if (failed(expectShape(op, r.first, r.second, xs.drop_back()))) return failure();
  if (eps && !(*eps > 0.0)) return op->emitOpError("eps must be positive");
  return success();
}

LogicalResult RmsNormOp::verify() {
  return verifyNorm(*this, getX(), {getX(), getW(), getY()}, {{"result y", getY()}}, {{"weight", getW()}},
                    {{"result rstd", getRstd()}}, getEps().convertToDouble());
}

LogicalResult RmsNormGradOp::verify() {
  return verifyNorm(*this, getX(), {getDy(), getX(), getW(), getDx(), getDw()},
                    {{"dy", getDy()}, {"result dx", getDx()}}, {{"weight", getW()}, {"result dw", getDw()}},
                    {{"rstd", getRstd()}}, std::nullopt);
}

LogicalResult RopeOp::verify() {
  auto x = shapeOf(getX());
  const int64_t d = getHeadDim();
  if (x.size() != 3) return emitOpError("input must have rank 3 [B,T,H*D], got ") << str(x);
  if (d <= 0 || d % 2 != 0 || d > 1024)
    return emitOpError("head_dim must be positive, even and at most 1024, got ") << d;
  if (x[2] % d != 0) return emitOpError("the last dimension (") << x[2] << ") must be a multiple of head_dim = " << d;
  if (getInvFreq().empty() || (int64_t)getInvFreq().size() > d / 2)
    return emitOpError("inv_freq must have 1 to head_dim / 2 = ")
           << d / 2 << " values (the rotated pairs), got " << getInvFreq().size();
  for (double f : getInvFreq())
    if (!std::isfinite(f)) return emitOpError("inv_freq must be finite");
  if (!std::isfinite(getAttentionScaling().convertToDouble())) return emitOpError("attention_scaling must be finite");
  if (getCp() && (*getCp() < 1 || x[1] % 2 != 0))
    return emitOpError("cp must be >= 1 over an even number of tokens (two chunks), got cp = ")
           << *getCp() << " over " << x[1];
  return success();
}

/// q [B,T,H*D], k and v [B,T,Hkv*D]: checks the shapes and heads; returns D.
static FailureOr<int64_t> verifyGqa(Operation *op, Value q, Value k, Value v, int64_t heads, int64_t kvHeads,
                                    int64_t window, double scale, bool tpHeads, std::optional<APFloat> softcap) {
  auto qs = shapeOf(q), ks = shapeOf(k), vs = shapeOf(v);
  if (qs.size() != 3) return op->emitOpError("q must have rank 3 [B,T,H*D], got ") << str(qs);
  if (heads <= 0 || kvHeads <= 0)
    return op->emitOpError("heads and kv_heads must be positive, got ") << heads << " and " << kvHeads;
  if (!tpHeads && heads % kvHeads != 0)
    return op->emitOpError("kv_heads = ") << kvHeads << " must divide heads = " << heads;
  if (qs[2] % heads != 0)
    return op->emitOpError("the last dimension of q (") << qs[2] << ") must be divisible by heads = " << heads;
  const int64_t d = qs[2] / heads;
  if (failed(expectShape(op, "k", k, {qs[0], qs[1], kvHeads * d})) ||
      failed(expectShape(op, "v", v, {qs[0], qs[1], kvHeads * d})))
    return failure();
  if (window < 0) return op->emitOpError("window must be >= 0 (0: none), got ") << window;
  if (!(scale >= 0.0) || !std::isfinite(scale))
    return op->emitOpError("scale must be >= 0 (0: 1/sqrt(head dim)), got ") << scale;
  if (softcap && (!(softcap->convertToDouble() >= 0.0) || !std::isfinite(softcap->convertToDouble())))
    return op->emitOpError("softcap must be >= 0 (0: none), got ") << softcap->convertToDouble();
  (void)vs;
  return d;
}

/// The context-parallel size of an attention op: >= 1, the token count even (two chunks).
static LogicalResult verifyCp(Operation *op, std::optional<int64_t> cp, Value q) {
  if (cp && (*cp < 1 || shapeOf(q)[1] % 2 != 0))
    return op->emitOpError("cp must be >= 1 over an even number of tokens (two chunks), got cp = ")
           << *cp << " over " << shapeOf(q)[1];
  return success();
}

LogicalResult GqaAttentionOp::verify() {
  FailureOr<int64_t> d = verifyGqa(*this, getQ(), getK(), getV(), getHeads(), getKvHeads(), getWindow(),
                                   getScale().convertToDouble(), getTpHeads(), getSoftcap());
  if (failed(d) || failed(verifyCp(*this, getCp(), getQ()))) return failure();
  auto qs = shapeOf(getQ());
  if (failed(sameElementTypes(*this, {getQ(), getK(), getV(), getOut()})) ||
      failed(expectF32(*this, "result lse", getLse())) || failed(expectShape(*this, "result out", getOut(), qs)) ||
      failed(expectShape(*this, "result lse", getLse(), {qs[0], (int64_t)getHeads(), qs[1]})))
    return failure();
  return success();
}

LogicalResult GqaAttentionGradOp::verify() {
  FailureOr<int64_t> d = verifyGqa(*this, getQ(), getK(), getV(), getHeads(), getKvHeads(), getWindow(),
                                   getScale().convertToDouble(), getTpHeads(), getSoftcap());
  if (failed(d) || failed(verifyCp(*this, getCp(), getQ()))) return failure();
  auto qs = shapeOf(getQ());
  if (failed(sameElementTypes(*this, {getDout(), getQ(), getK(), getV(), getOut(), getDq(), getDk(), getDv()})) ||
      failed(expectF32(*this, "lse", getLse())) || failed(expectShape(*this, "dout", getDout(), qs)) ||
      failed(expectShape(*this, "out", getOut(), qs)) ||
      failed(expectShape(*this, "lse", getLse(), {qs[0], (int64_t)getHeads(), qs[1]})) ||
      failed(expectShape(*this, "result dq", getDq(), qs)) ||
      failed(expectShape(*this, "result dk", getDk(), shapeOf(getK()))) ||
      failed(expectShape(*this, "result dv", getDv(), shapeOf(getV()))))
    return failure();
  return success();
}
/// ring_attention(_grad)'s own attributes: cp >= 2, step in [0, cp), 0 with a2a.
static LogicalResult verifyRing(Operation *op, int64_t cp, int64_t step, bool a2a, Value q) {
  if (cp < 2) return op->emitOpError("cp must be at least 2, got ") << cp;
  if (step < 0 || step >= cp || (a2a && step != 0))
    return op->emitOpError("step must be in [0, cp) (0 with a2a), got ") << step;
  if (shapeOf(q)[1] % (a2a ? 2 * cp : 2) != 0)
    return op->emitOpError("the ") << shapeOf(q)[1] << " tokens must split in " << (a2a ? 2 * cp : 2) << " chunks";
  return success();
}

LogicalResult RingAttentionOp::verify() {
  FailureOr<int64_t> d = verifyGqa(*this, getQ(), getK(), getV(), getHeads(), getKvHeads(), getWindow(),
                                   getScale().convertToDouble(), getTpHeads(), getSoftcap());
  if (failed(d) || failed(verifyRing(*this, getCp(), getStep(), getA2a(), getQ()))) return failure();
  auto qs = shapeOf(getQ());
  SmallVector<int64_t> ls{qs[0], (int64_t)getHeads(), qs[1]};
  if (failed(sameElementTypes(*this, {getQ(), getK(), getV()})) || failed(expectF32(*this, "result lse", getLse())) ||
      failed(expectShape(*this, "result out", getOut(), qs)) || failed(expectShape(*this, "result lse", getLse(), ls)))
    return failure();
  if (!getAcc().empty()) {
    if (getAcc().size() != 2) return emitOpError("acc must be (out, lse) of the earlier blocks, or nothing");
    if (failed(expectShape(*this, "acc out", getAcc()[0], qs)) ||
        failed(expectShape(*this, "acc lse", getAcc()[1], ls)) || failed(expectF32(*this, "acc lse", getAcc()[1])))
      return failure();
  }
  return success();
}

LogicalResult RingAttentionGradOp::verify() {
  FailureOr<int64_t> d = verifyGqa(*this, getQ(), getK(), getV(), getHeads(), getKvHeads(), getWindow(),
                                   getScale().convertToDouble(), getTpHeads(), getSoftcap());
  if (failed(d) || failed(verifyRing(*this, getCp(), getStep(), getA2a(), getQ()))) return failure();
  auto qs = shapeOf(getQ());
  if (failed(expectF32(*this, "lse", getLse())) || failed(expectShape(*this, "dout", getDout(), qs)) ||
      failed(expectShape(*this, "out", getOut(), qs)) ||
      failed(expectShape(*this, "lse", getLse(), {qs[0], (int64_t)getHeads(), qs[1]})) ||
      failed(expectShape(*this, "result dq", getDq(), qs)) ||
      failed(expectShape(*this, "result dk", getDk(), shapeOf(getK()))) ||
      failed(expectShape(*this, "result dv", getDv(), shapeOf(getV()))))
    return failure();
  if (!getAcc().empty()) {
    if (getAcc().size() != 3 && getAcc().size() != 1)
      return emitOpError("acc must be (dq, dk, dv) so far, dq alone, or nothing");
    if (failed(expectShape(*this, "acc dq", getAcc()[0], qs)) ||
        (getAcc().size() == 3 && (failed(expectShape(*this, "acc dk", getAcc()[1], shapeOf(getK()))) ||
                                  failed(expectShape(*this, "acc dv", getAcc()[2], shapeOf(getV()))))))
      return failure();
  }
  return success();
}

LogicalResult FillOp::verify() { return success(); }

LogicalResult BiasAddOp::verify() {
  if (failed(sameElementTypes(*this, {getX(), getB(), getY()}))) return failure();
  auto x = shapeOf(getX()), b = shapeOf(getB());
  if (b.empty() || !isSuffixOf(b, x))
    return emitOpError("bias shape ") << str(b) << " must be a non-empty suffix of the input shape " << str(x);
  return expectShape(*this, "result", getY(), x);
}

LogicalResult ReduceSumOp::verify() {
  if (failed(sameElementTypes(*this, {getX(), getY()}))) return failure();
  auto x = shapeOf(getX()), y = shapeOf(getY());
  if (!isSuffixOf(y, x))
    return emitOpError("result shape ") << str(y) << " must be a suffix of the input shape " << str(x);
  return success();
}

LogicalResult LayerNormOp::verify() {
  return verifyNorm(*this, getX(), {getX(), getW(), getB(), getY()}, {{"result y", getY()}},
                    {{"weight", getW()}, {"bias", getB()}}, {{"result mean", getMean()}, {"result rstd", getRstd()}},
                    getEps().convertToDouble());
}

LogicalResult LayerNormGradOp::verify() {
  return verifyNorm(*this, getX(), {getDy(), getX(), getW(), getDx(), getDw(), getDb()},
                    {{"dy", getDy()}, {"result dx", getDx()}},
                    {{"weight", getW()}, {"result dw", getDw()}, {"result db", getDb()}},
                    {{"mean", getMean()}, {"rstd", getRstd()}}, std::nullopt);
}

// ---- fused ops (BigcFusedOps.td): the rules of the pair each replaces --------------------------

LogicalResult AddLayerNormOp::verify() {
  return verifyNorm(*this, getA(), {getA(), getR(), getW(), getB(), getS(), getY()},
                    {{"r", getR()}, {"result s", getS()}, {"result y", getY()}}, {{"weight", getW()}, {"bias", getB()}},
                    {{"result mean", getMean()}, {"result rstd", getRstd()}}, getEps().convertToDouble());
}

LogicalResult AddRmsNormOp::verify() {
  return verifyNorm(*this, getA(), {getA(), getR(), getW(), getS(), getY()},
                    {{"r", getR()}, {"result s", getS()}, {"result y", getY()}}, {{"weight", getW()}},
                    {{"result rstd", getRstd()}}, getEps().convertToDouble());
}

LogicalResult LayerNormGradAddOp::verify() {
  return verifyNorm(*this, getX(), {getDy(), getX(), getW(), getR(), getDx(), getDw(), getDb()},
                    {{"dy", getDy()}, {"r", getR()}, {"result dx", getDx()}},
                    {{"weight", getW()}, {"result dw", getDw()}, {"result db", getDb()}},
                    {{"mean", getMean()}, {"rstd", getRstd()}}, std::nullopt);
}

LogicalResult RmsNormGradAddOp::verify() {
  return verifyNorm(*this, getX(), {getDy(), getX(), getW(), getR(), getDx(), getDw()},
                    {{"dy", getDy()}, {"r", getR()}, {"result dx", getDx()}},
                    {{"weight", getW()}, {"result dw", getDw()}}, {{"rstd", getRstd()}}, std::nullopt);
}

LogicalResult BiasGeluOp::verify() {
  if (failed(verifyApproximate(*this, getApproximate()))) return failure();
  if (failed(sameElementTypes(*this, {getX(), getB(), getPre(), getY()}))) return failure();
  auto x = shapeOf(getX()), b = shapeOf(getB());
  if (b.empty() || !isSuffixOf(b, x))
    return emitOpError("bias shape ") << str(b) << " must be a non-empty suffix of the input shape " << str(x);
  if (failed(expectShape(*this, "result pre", getPre(), x)) || failed(expectShape(*this, "result y", getY(), x)))
    return failure();
  return success();
}

LogicalResult GeluGradBiasOp::verify() {
  if (failed(verifyApproximate(*this, getApproximate()))) return failure();
  if (failed(sameElementTypes(*this, {getX(), getDy(), getDx(), getDb()}))) return failure();
  auto x = shapeOf(getX()), db = shapeOf(getDb());
  if (failed(expectShape(*this, "dy", getDy(), x)) || failed(expectShape(*this, "result dx", getDx(), x)))
    return failure();
  if (db.empty() || !isSuffixOf(db, x))
    return emitOpError("result db shape ") << str(db) << " must be a non-empty suffix of the input shape " << str(x);
  return success();
}

/// Checks qkv [B,T,3C] and `heads`; returns C.
static FailureOr<int64_t> verifyQkv(Operation *op, Value qkv, int64_t heads) {
  auto s = shapeOf(qkv);
  if (s.size() != 3) return op->emitOpError("qkv must have rank 3 [B,T,3C], got ") << str(s);
  if (s[2] % 3 != 0) return op->emitOpError("the last dimension of qkv (") << s[2] << ") must be 3C, a multiple of 3";
  if (heads <= 0) return op->emitOpError("heads must be positive, got ") << heads;
  int64_t c = s[2] / 3;
  if (c % heads != 0) return op->emitOpError("C = ") << c << " must be divisible by heads = " << heads;
  return c;
}

LogicalResult AttentionOp::verify() {
  FailureOr<int64_t> c = verifyQkv(*this, getQkv(), getHeads());
  if (failed(c)) return failure();
  if (failed(sameElementTypes(*this, {getQkv(), getOut()})) || failed(expectF32(*this, "result lse", getLse())))
    return failure();
  auto s = shapeOf(getQkv());
  if (failed(expectShape(*this, "result out", getOut(), {s[0], s[1], *c})) ||
      failed(expectShape(*this, "result lse", getLse(), {s[0], (int64_t)getHeads(), s[1]})))
    return failure();
  return success();
}

LogicalResult AttentionGradOp::verify() {
  FailureOr<int64_t> c = verifyQkv(*this, getQkv(), getHeads());
  if (failed(c)) return failure();
  if (failed(sameElementTypes(*this, {getDout(), getQkv(), getOut(), getDqkv()})) ||
      failed(expectF32(*this, "lse", getLse())))
    return failure();
  auto s = shapeOf(getQkv());
  if (failed(expectShape(*this, "dout", getDout(), {s[0], s[1], *c})) ||
      failed(expectShape(*this, "out", getOut(), {s[0], s[1], *c})) ||
      failed(expectShape(*this, "lse", getLse(), {s[0], (int64_t)getHeads(), s[1]})) ||
      failed(expectShape(*this, "result dqkv", getDqkv(), s)))
    return failure();
  return success();
}

LogicalResult TransposeOp::verify() {
  if (eltOf(getX()) != eltOf(getY())) return emitOpError("result element type must equal the input's");
  auto x = shapeOf(getX());
  ArrayRef<int64_t> perm = getPerm();
  if (perm.size() != x.size())
    return emitOpError("perm has ") << perm.size() << " entries but the input has rank " << x.size();
  SmallVector<bool> seen(x.size(), false);
  SmallVector<int64_t> expected;
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)x.size() || seen[p])
      return emitOpError("perm ") << str(perm) << " is not a permutation of [0, " << x.size() << ")";
    seen[p] = true;
    expected.push_back(x[p]);
  }
  return expectShape(*this, "result", getY(), expected);
}

LogicalResult ReshapeOp::verify() {
  if (eltOf(getX()) != eltOf(getY())) return emitOpError("result element type must equal the input's");
  if (tensorOf(getX()).getNumElements() != tensorOf(getY()).getNumElements())
    return emitOpError("cannot reshape ")
           << str(shapeOf(getX())) << " (" << tensorOf(getX()).getNumElements() << " elements) to "
           << str(shapeOf(getY())) << " (" << tensorOf(getY()).getNumElements() << " elements)";
  return success();
}

static LogicalResult verifyAxis(Operation *op, int64_t axis, size_t rank) {
  if (axis < 0 || axis >= (int64_t)rank)
    return op->emitOpError("axis ") << axis << " is out of range for rank " << rank;
  return success();
}

LogicalResult SplitOp::verify() {
  auto x = shapeOf(getX());
  int64_t axis = getAxis();
  if (failed(verifyAxis(*this, axis, x.size()))) return failure();
  size_t n = getResults().size();
  if (n == 0) return emitOpError("requires at least one result");
  if (x[axis] % (int64_t)n != 0)
    return emitOpError("dimension ") << axis << " of size " << x[axis] << " cannot be split into " << n
                                     << " equal parts";
  SmallVector<int64_t> part(x.begin(), x.end());
  part[axis] /= n;
  for (Value r : getResults()) {
    if (eltOf(r) != eltOf(getX())) return emitOpError("result element types must equal the input's");
    if (failed(expectShape(*this, "every result", r, part))) return failure();
  }
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty()) return emitOpError("requires at least one input");
  auto first = shapeOf(getInputs().front());
  int64_t axis = getAxis();
  if (failed(verifyAxis(*this, axis, first.size()))) return failure();
  SmallVector<Value> all(getInputs().begin(), getInputs().end());
  all.push_back(getY());
  if (failed(sameElementTypes(*this, all))) return failure();
  SmallVector<int64_t> expected(first.begin(), first.end());
  expected[axis] = 0;
  for (Value in : getInputs()) {
    auto s = shapeOf(in);
    if (s.size() != first.size()) return emitOpError("all inputs must have the same rank");
    for (size_t i = 0; i < s.size(); ++i)
      if ((int64_t)i != axis && s[i] != first[i])
        return emitOpError("inputs ") << str(first) << " and " << str(s) << " differ outside the concatenation axis "
                                      << axis;
    expected[axis] += s[axis];
  }
  return expectShape(*this, "result", getY(), expected);
}

static LogicalResult verifyLogitsTargets(Operation *op, Value logits, Value targets) {
  auto l = shapeOf(logits);
  if (l.empty()) return op->emitOpError("logits must have rank >= 1 [...,V]");
  return expectShape(op, "targets", targets, l.drop_back());
}

LogicalResult CrossEntropyOp::verify() { return verifyLogitsTargets(*this, getLogits(), getTargets()); }

LogicalResult CrossEntropyGradOp::verify() {
  if (failed(verifyLogitsTargets(*this, getLogits(), getTargets()))) return failure();
  if (getDlogits().getType() != getLogits().getType())
    return emitOpError("result type ") << getDlogits().getType() << " must equal the logits type "
                                       << getLogits().getType();
  return success();
}

/// linear_ce_stats(_grad): h [...,C], w [C,V] or [V,C] (transpose_b), targets [...]: the shape
/// rules; `c`, `v`, `n` get C, V and the positions.
static LogicalResult verifyLinearCe(Operation *op, Value h, Value w, Value targets, bool tb, int64_t chunk, int64_t &c,
                                    int64_t &v, int64_t &n) {
  auto hs = shapeOf(h), ws = shapeOf(w);
  if (hs.size() < 2) return op->emitOpError("h must have rank >= 2 [...,C], got ") << str(hs);
  if (ws.size() != 2) return op->emitOpError("w must have rank 2, got ") << str(ws);
  c = hs.back();
  if ((tb ? ws[1] : ws[0]) != c)
    return op->emitOpError("w ") << str(ws) << " must be " << (tb ? "[V,C]" : "[C,V]") << " for h's C = " << c;
  v = tb ? ws[0] : ws[1];
  if (c < 1 || v < 1) return op->emitOpError("needs C >= 1 and V >= 1, got C = ") << c << ", V = " << v;
  n = tensorOf(h).getNumElements() / std::max<int64_t>(1, c);
  if (eltOf(h) != eltOf(w)) return op->emitOpError("h and w must have the same element type");
  if (chunk < 1) return op->emitOpError("chunk must be at least 1 column, got ") << chunk;
  return expectShape(op, "targets", targets, hs.drop_back());
}

static LogicalResult expectWorkspace(Operation *op, Value ws, int64_t elements) {
  if (!eltOf(ws).isF32() || shapeOf(ws) != ArrayRef<int64_t>{elements})
    return op->emitOpError("workspace must be tensor<") << elements << "xf32>, got " << ws.getType();
  return success();
}

LogicalResult LinearCeStatsOp::verify() {
  int64_t c, v, n;
  if (failed(verifyLinearCe(*this, getH(), getW(), getTargets(), getTransposeB(), int64_t(getChunk()), c, v, n)))
    return failure();
  SmallVector<int64_t> st(shapeOf(getTargets()));
  st.push_back(2);
  if (failed(expectShape(*this, "stats", getStats(), st)) || failed(expectF32(*this, "stats", getStats())))
    return failure();
  return expectWorkspace(*this, getWorkspace(), n * std::min<int64_t>(int64_t(getChunk()), v) + 2 * n);
}

LogicalResult LinearCeStatsGradOp::verify() {
  int64_t c, v, n;
  if (failed(verifyLinearCe(*this, getH(), getW(), getTargets(), getTransposeB(), int64_t(getChunk()), c, v, n)))
    return failure();
  if (getDh().getType() != getH().getType()) return emitOpError("dh must have h's type");
  if (getDw().getType() != getW().getType()) return emitOpError("dw must have w's type");
  if (getDstats().getType() != getStats().getType()) return emitOpError("dstats must have the stats' type");
  SmallVector<int64_t> st(shapeOf(getTargets()));
  st.push_back(2);
  if (failed(expectShape(*this, "stats", getStats(), st)) || failed(expectF32(*this, "stats", getStats())))
    return failure();
  return expectWorkspace(*this, getWorkspace(), n * std::min<int64_t>(int64_t(getChunk()), v) + n * c);
}

LogicalResult GlobalNormOp::verify() {
  if (getInputs().empty()) return emitOpError("requires at least one input");
  return success();
}

//===----------------------------------------------------------------------===//
// Gradients (DifferentiableOpInterface)
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  auto grad = b.create<EmbeddingGradOp>(getLoc(), getTable().getType(), resultGrads[0], getIds());
  if (Attribute g = (*this)->getAttr(kVocabGroupAttrName)) // vocabulary-parallel
    grad->setAttr(kVocabGroupAttrName, g);
  if (Attribute c = (*this)->getAttr(kClassesAttrName)) // a padded vocabulary
    grad->setAttr(kClassesAttrName, c);
  Value dtable = grad;
  operandGrads.assign({dtable, Value()});
  return success();
}

LogicalResult MatmulOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  Location loc = getLoc();
  Value a = getA(), bm = getB(), dc = resultGrads[0];
  Type aT = a.getType(), bT = bm.getType();
  bool ta = getTransposeA(), tb = getTransposeB();
  size_t ra = shapeOf(a).size(), rb = shapeOf(bm).size();
  Value da, db;
  if (ra > 2 && rb == 2) {
    // Form 2: c[...,M,N] = a[...,M,K] @ op(b).
    da = makeMatmul(b, loc, aT, dc, bm, false, !tb);
    // Flatten the leading dims: a2 [P,K], dc2 [P,N].
    auto as = shapeOf(a), cs = shapeOf(dc);
    int64_t p = tensorOf(a).getNumElements() / as.back();
    auto a2T = RankedTensorType::get({p, as.back()}, eltOf(a));
    auto c2T = RankedTensorType::get({p, cs.back()}, eltOf(dc));
    Value a2 = b.create<ReshapeOp>(loc, a2T, a);
    Value dc2 = b.create<ReshapeOp>(loc, c2T, dc);
    db = tb ? makeMatmul(b, loc, bT, dc2, a2, true, false)  // [N,K] = dc2ᵀ a2
            : makeMatmul(b, loc, bT, a2, dc2, true, false); // [K,N] = a2ᵀ dc2
  } else if (!ta && !tb) {
    // c = a b: da = dc bᵀ, db = aᵀ dc.
    da = makeMatmul(b, loc, aT, dc, bm, false, true);
    db = makeMatmul(b, loc, bT, a, dc, true, false);
  } else if (!ta && tb) {
    // c = a bᵀ: da = dc b, db = dcᵀ a.
    da = makeMatmul(b, loc, aT, dc, bm, false, false);
    db = makeMatmul(b, loc, bT, dc, a, true, false);
  } else if (ta && !tb) {
    // c = aᵀ b: da = b dcᵀ, db = a dc.
    da = makeMatmul(b, loc, aT, bm, dc, false, true);
    db = makeMatmul(b, loc, bT, a, dc, false, false);
  } else {
    // c = aᵀ bᵀ: da = bᵀ dcᵀ, db = dcᵀ aᵀ.
    da = makeMatmul(b, loc, aT, bm, dc, true, true);
    db = makeMatmul(b, loc, bT, dc, a, true, true);
  }
  operandGrads.assign({da, db});
  return success();
}

LogicalResult AddOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign({resultGrads[0], resultGrads[0]});
  return success();
}

LogicalResult BiasAddOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  Value db = b.create<ReduceSumOp>(getLoc(), getB().getType(), dy);
  operandGrads.assign({dy, db});
  return success();
}

LogicalResult MulOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  Value dc = resultGrads[0];
  Value da = b.create<MulOp>(getLoc(), getA().getType(), dc, getB());
  Value db = b.create<MulOp>(getLoc(), getB().getType(), dc, getA());
  operandGrads.assign({da, db});
  return success();
}

LogicalResult ScaleOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  Value dx = b.create<ScaleOp>(getLoc(), getX().getType(), resultGrads[0], getFactorAttr());
  operandGrads.assign({dx});
  return success();
}

LogicalResult ReduceSumOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  // Broadcast dy back over the leading dims: 0 + dy.
  Value zeros = zerosLike(b, getLoc(), getX().getType());
  Value dx = b.create<BiasAddOp>(getLoc(), getX().getType(), zeros, resultGrads[0]);
  operandGrads.assign({dx});
  return success();
}

LogicalResult FillOp::buildGradient(OpBuilder &, ArrayRef<Value>, SmallVectorImpl<Value> &operandGrads) {
  operandGrads.clear();
  return success();
}

LogicalResult LayerNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (resultGrads[1] || resultGrads[2])
    return emitOpError("the mean and rstd results of layernorm have no "
                       "gradient; only y may be used by differentiable ops");
  auto g = b.create<LayerNormGradOp>(getLoc(), TypeRange{getX().getType(), getW().getType(), getB().getType()},
                                     resultGrads[0], getX(), getW(), getMean(), getRstd());
  operandGrads.assign({g.getDx(), g.getDw(), g.getDb()});
  return success();
}

LogicalResult GeluOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  Value dx = b.create<GeluGradOp>(getLoc(), getX().getType(), getX(), resultGrads[0], getApproximateAttr());
  operandGrads.assign({dx});
  return success();
}

LogicalResult SiluOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  Value dx = b.create<SiluGradOp>(getLoc(), getX().getType(), getX(), resultGrads[0]);
  operandGrads.assign({dx});
  return success();
}

LogicalResult MoeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  // Everything of the forward is recomputed from its inputs (the routing and the experts'
  // activations): nothing but x and the weights is kept for the backward.
  auto g = b.create<MoeGradOp>(
      getLoc(), TypeRange{getX().getType(), getRouter().getType(), getGateUp().getType(), getDown().getType()},
      resultGrads[0], getX(), getRouter(), getGateUp(), getDown(), getTopKAttr(), getNormalizeAttr());
  operandGrads.assign({g.getDx(), g.getDrouter(), g.getDgateUp(), g.getDdown()});
  return success();
}

LogicalResult SoftcapOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  Value dx = b.create<SoftcapGradOp>(getLoc(), getX().getType(), getY(), resultGrads[0], getCapAttr());
  operandGrads.assign({dx});
  return success();
}

LogicalResult SwigluOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  auto g = b.create<SwigluGradOp>(getLoc(), TypeRange{getGate().getType(), getUp().getType()}, getGate(), getUp(),
                                  resultGrads[0]);
  operandGrads.assign({g.getDgate(), g.getDup()});
  return success();
}

LogicalResult GegluOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  auto g = b.create<GegluGradOp>(getLoc(), TypeRange{getGate().getType(), getUp().getType()}, getGate(), getUp(),
                                 resultGrads[0], getApproximateAttr());
  operandGrads.assign({g.getDgate(), g.getDup()});
  return success();
}

LogicalResult RmsNormOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  if (resultGrads[1])
    return emitOpError("the rstd result of rmsnorm has no gradient; only y may be used by differentiable ops");
  auto g = b.create<RmsNormGradOp>(getLoc(), TypeRange{getX().getType(), getW().getType()}, resultGrads[0], getX(),
                                   getW(), getRstd());
  operandGrads.assign({g.getDx(), g.getDw()});
  return success();
}

LogicalResult RopeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  // y = s R(a) x per pair: dx = s R(-a) dy.
  auto r = b.create<RopeOp>(getLoc(), getX().getType(), resultGrads[0], getHeadDimAttr(), getInvFreqAttr(),
                            getAttentionScalingAttr(), getInverse() ? UnitAttr() : b.getUnitAttr(),
                            getInterleavedAttr(), getCpAttr());
  operandGrads.assign({r.getY()});
  return success();
}

LogicalResult GqaAttentionOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                            SmallVectorImpl<Value> &operandGrads) {
  if (resultGrads[1])
    return emitOpError("the lse result of gqa_attention has no gradient; only out may be used by differentiable ops");
  auto g = b.create<GqaAttentionGradOp>(getLoc(), TypeRange{getQ().getType(), getK().getType(), getV().getType()},
                                        resultGrads[0], getQ(), getK(), getV(), getOut(), getLse(), getHeadsAttr(),
                                        getKvHeadsAttr(), getWindowAttr(), getScaleAttr(), getTpHeadsAttr(),
                                        getSoftcapAttr(), getCpAttr());
  operandGrads.assign({g.getDq(), g.getDk(), g.getDv()});
  return success();
}

LogicalResult AttentionOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  if (resultGrads[1])
    return emitOpError("the lse result of attention has no gradient; only "
                       "out may be used by differentiable ops");
  Value dqkv = b.create<AttentionGradOp>(getLoc(), getQkv().getType(), resultGrads[0], getQkv(), getOut(), getLse(),
                                         getHeadsAttr());
  operandGrads.assign({dqkv});
  return success();
}

LogicalResult TransposeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  ArrayRef<int64_t> perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm)) inverse[p] = i;
  Value dx = b.create<TransposeOp>(getLoc(), getX().getType(), resultGrads[0], b.getDenseI64ArrayAttr(inverse));
  operandGrads.assign({dx});
  return success();
}

LogicalResult ReshapeOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  Value dx = b.create<ReshapeOp>(getLoc(), getX().getType(), resultGrads[0]);
  operandGrads.assign({dx});
  return success();
}

LogicalResult SplitOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  SmallVector<Value> parts;
  for (auto [r, g] : llvm::zip(getResults(), resultGrads)) parts.push_back(g ? g : zerosLike(b, getLoc(), r.getType()));
  Value dx = b.create<ConcatOp>(getLoc(), getX().getType(), parts, getAxisAttr());
  operandGrads.assign({dx});
  return success();
}

LogicalResult ConcatOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  for (Value in : getInputs())
    if (in.getType() != getInputs().front().getType())
      return emitOpError("has no gradient: its inputs are of unequal sizes "
                         "and bigc.split makes equal parts");
  auto split = b.create<SplitOp>(getLoc(), getInputs().getTypes(), resultGrads[0], getAxisAttr());
  operandGrads.assign(split.getResults().begin(), split.getResults().end());
  return success();
}

LogicalResult CrossEntropyOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                            SmallVectorImpl<Value> &operandGrads) {
  auto dlogits =
      b.create<CrossEntropyGradOp>(getLoc(), getLogits().getType(), getLogits(), getTargets(), resultGrads[0]);
  if (Attribute c = (*this)->getAttr(kClassesAttrName)) dlogits->setAttr(kClassesAttrName, c); // a padded vocabulary
  operandGrads.assign({Value(dlogits), Value()});
  return success();
}

LogicalResult LinearCeStatsOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads,
                                             SmallVectorImpl<Value> &operandGrads) {
  if (!resultGrads[0]) return emitOpError("has no gradient of its stats");
  const int64_t c = shapeOf(getH()).back(), n = tensorOf(getH()).getNumElements() / std::max<int64_t>(1, c),
                v = getTransposeB() ? shapeOf(getW())[0] : shapeOf(getW())[1];
  auto wsT = RankedTensorType::get({n * std::min<int64_t>(int64_t(getChunk()), v) + n * c}, b.getF32Type());
  auto g = b.create<LinearCeStatsGradOp>(getLoc(), TypeRange{getH().getType(), getW().getType(), wsT}, resultGrads[0],
                                         getH(), getW(), getTargets(), getStats(), getChunkAttr(), getTransposeBAttr());
  for (NamedAttribute a : (*this)->getDiscardableAttrs())
    if (a.getName() == kVocabGroupAttrName || a.getName() == kClassesAttrName) g->setAttr(a.getName(), a.getValue());
  operandGrads.assign({Value(g.getDh()), Value(g.getDw()), Value()});
  return success();
}

LogicalResult CastOp::buildGradient(OpBuilder &b, ArrayRef<Value> resultGrads, SmallVectorImpl<Value> &operandGrads) {
  Value dx = b.create<CastOp>(getLoc(), getX().getType(), resultGrads[0]);
  operandGrads.assign({dx});
  return success();
}

#define GET_OP_CLASSES
#include "dialects/BigcOps.cpp.inc"
