//===- Emitter.cpp - planned MLIR module -> bigc program ------------------===//
//
// A straight translation: one buffer per parameter symbol, argument and op
// result; one instruction per op (bigc.get_param excepted). Offsets and arena
// sizes are read from the attributes bigc-memory-plan wrote.
//
//===----------------------------------------------------------------------===//

#include "bigc/Emit/Emitter.h"

#include "bigc/Dialect/BigcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>

using namespace mlir;
namespace bigcd = mlir::bigc;

namespace bigc::emit {

namespace {

[[noreturn]] void fail(const std::string &msg) { throw EmitError("emit: " + msg); }

std::string str(Location loc) {
  std::string s = locString(loc);
  return s.empty() ? std::string("unknown location") : s;
}

rt::DType dtypeOf(Type t, Location loc) {
  if (t.isF32()) return rt::DType::F32;
  if (t.isBF16()) return rt::DType::BF16;
  if (t.isF16()) return rt::DType::F16;
  if (t.isInteger(32)) return rt::DType::I32;
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  fail(str(loc) + ": element type " + os.str() + " has no program dtype");
}

struct TensorInfo {
  rt::DType dtype;
  std::vector<int64_t> shape;
  int64_t bytes;
};

TensorInfo tensorInfo(Type type, Location loc) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape()) fail(str(loc) + ": not a static tensor type");
  TensorInfo info;
  info.dtype = dtypeOf(t.getElementType(), loc);
  info.shape.assign(t.getShape().begin(), t.getShape().end());
  info.bytes = t.getNumElements() * rt::dtypeSize(info.dtype);
  return info;
}

bool isInPlaceOp(Operation *op) {
  return isa<bigcd::AddOp, bigcd::BiasAddOp, bigcd::MulOp, bigcd::ScaleOp, bigcd::GeluOp,
             bigcd::GeluGradOp, bigcd::ReshapeOp>(op);
}

// Inherent attributes of an op as instruction attributes (numbers, flags, integer lists).
std::map<std::string, rt::Attr> instructionAttrs(Operation *op) {
  std::map<std::string, rt::Attr> out;
  for (NamedAttribute na : op->getAttrDictionary()) {
    llvm::StringRef name = na.getName().getValue();
    if (name.starts_with("bigc.")) continue; // discardable: phase, offsets
    Attribute a = na.getValue();
    rt::Attr v;
    if (auto f = dyn_cast<FloatAttr>(a)) {
      v.num = f.getValueAsDouble();
    } else if (auto b = dyn_cast<BoolAttr>(a)) {
      v.num = b.getValue() ? 1.0 : 0.0;
    } else if (auto i = dyn_cast<IntegerAttr>(a)) {
      v.num = double(i.getValue().getSExtValue());
    } else if (isa<UnitAttr>(a)) {
      v.num = 1.0;
    } else if (auto arr = dyn_cast<DenseI64ArrayAttr>(a)) {
      v.isList = true;
      v.list.assign(arr.asArrayRef().begin(), arr.asArrayRef().end());
    } else {
      continue; // symbol references, strings: not instruction attributes
    }
    out[name.str()] = v;
  }
  return out;
}

int64_t i64Attr(Operation *op, llvm::StringRef name) {
  auto a = op->getAttrOfType<IntegerAttr>(name);
  if (!a) fail(str(op->getLoc()) + ": '" + op->getName().getStringRef().str() + "' has no " + name.str() +
               " attribute (run bigc-memory-plan before emitting)");
  return a.getInt();
}

} // namespace

std::string locString(Location loc) {
  if (auto f = dyn_cast<FileLineColLoc>(loc))
    return f.getFilename().str() + ":" + std::to_string(f.getLine()) + ":" + std::to_string(f.getColumn());
  if (auto n = dyn_cast<NameLoc>(loc)) return locString(n.getChildLoc());
  if (auto c = dyn_cast<CallSiteLoc>(loc)) return locString(c.getCallee());
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location l : fused.getLocations()) {
      std::string s = locString(l);
      if (!s.empty()) return s;
    }
  return "";
}

rt::Program buildProgram(ModuleOp module, const EmitOptions &options) {
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func) fail("the module has no func.func @train_step (run bigc-autodiff first)");
  if (func.isExternal() || !func.getBody().hasOneBlock()) fail("@train_step must have one block");
  Block &block = func.front();

  rt::Program p;
  p.producer = options.producer;
  p.source = options.source;
  p.optimizer = options.optimizer;
  p.hardwareName = options.hardwareName.empty() ? "none" : options.hardwareName;
  p.deviceCapacityBytes = options.deviceCapacityBytes;
  p.hostCapacityBytes = options.hostCapacityBytes;

  // Instruction indices (get_param is not an instruction).
  llvm::DenseMap<Operation *, int64_t> index;
  int64_t n = 0;
  for (Operation &op : block.without_terminator())
    if (!isa<bigcd::GetParamOp>(op)) index[&op] = n++;
  const int64_t end = std::max<int64_t>(n - 1, 0);

  llvm::DenseMap<Value, int64_t> bufferOf;
  llvm::StringMap<int64_t> paramBuffer;
  auto addBuffer = [&](rt::Buffer b) {
    b.id = int64_t(p.buffers.size());
    p.buffers.push_back(std::move(b));
    return p.buffers.back().id;
  };

  // Persistent buffers.
  for (bigcd::ParamOp param : module.getOps<bigcd::ParamOp>()) {
    TensorInfo info = tensorInfo(param.getType(), param.getLoc());
    rt::Buffer b;
    b.name = param.getSymName().str();
    b.space = "device";
    b.offset = i64Attr(param, "bigc.offset");
    b.bytes = info.bytes;
    b.dtype = info.dtype;
    b.shape = info.shape;
    b.role = param.getRole().str();
    b.liveFirst = 0;
    b.liveLast = end;
    b.init.kind = param.getInit().str();
    if (b.init.kind == "normal") b.init.std = param.getStd() ? param.getStd()->convertToDouble() : 0.02;
    paramBuffer[b.name] = addBuffer(b);
  }

  // Arguments: tokens, targets.
  auto argOffsets = func->getAttrOfType<DenseI64ArrayAttr>("bigc.arg_offsets");
  if (!argOffsets || int64_t(argOffsets.size()) != int64_t(block.getNumArguments()))
    fail("@train_step has no bigc.arg_offsets for its arguments (run bigc-memory-plan before emitting)");
  if (block.getNumArguments() != 2) fail("@train_step must take (tokens, targets)");
  static const char *argNames[] = {"tokens", "targets"};
  for (BlockArgument a : block.getArguments()) {
    TensorInfo info = tensorInfo(a.getType(), func.getLoc());
    rt::Buffer b;
    b.name = argNames[a.getArgNumber()];
    b.space = "device";
    b.offset = argOffsets[a.getArgNumber()];
    b.bytes = info.bytes;
    b.dtype = info.dtype;
    b.shape = info.shape;
    b.role = "input";
    b.liveFirst = 0;
    b.liveLast = 0;
    bufferOf[a] = addBuffer(b);
  }
  p.tokens = bufferOf[block.getArgument(0)];
  p.targets = bufferOf[block.getArgument(1)];

  // Results.
  for (Operation &op : block.without_terminator()) {
    if (auto gp = dyn_cast<bigcd::GetParamOp>(op)) {
      auto it = paramBuffer.find(gp.getParam());
      if (it == paramBuffer.end()) fail(str(op.getLoc()) + ": unknown parameter @" + gp.getParam().str());
      bufferOf[gp.getResult()] = it->second;
      continue;
    }
    if (op.getNumResults() == 0) continue;
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>("bigc.offsets");
    if (!offsets || offsets.size() != int64_t(op.getNumResults()))
      fail(str(op.getLoc()) + ": '" + op.getName().getStringRef().str() +
           "' has no bigc.offsets for its results (run bigc-memory-plan before emitting)");
    auto phase = op.getAttrOfType<StringAttr>(bigcd::kPhaseAttrName);
    bool forward = phase && phase.getValue() == "forward";
    std::string opName = op.getName().stripDialect().str();
    for (OpResult r : op.getResults()) {
      TensorInfo info = tensorInfo(r.getType(), op.getLoc());
      rt::Buffer b;
      b.name = opName + "." + std::to_string(index[&op]);
      if (op.getNumResults() > 1) b.name += ":" + std::to_string(r.getResultNumber());
      b.space = "device";
      b.offset = offsets[r.getResultNumber()];
      b.bytes = info.bytes;
      b.dtype = info.dtype;
      b.shape = info.shape;
      b.role = forward ? "activation" : "activation_grad";
      b.liveFirst = b.liveLast = index[&op];
      bufferOf[r] = addBuffer(b);
    }
  }

  // Live intervals: to the last use; the returned loss to the end.
  for (Operation &op : block.without_terminator()) {
    if (isa<bigcd::GetParamOp>(op)) continue;
    for (Value v : op.getOperands()) {
      auto it = bufferOf.find(v);
      if (it == bufferOf.end()) fail(str(op.getLoc()) + ": operand defined outside @train_step");
      rt::Buffer &b = p.buffers[size_t(it->second)];
      if (!b.persistent()) b.liveLast = std::max(b.liveLast, index[&op]);
    }
  }
  Operation *ret = block.getTerminator();
  if (ret->getNumOperands() != 1) fail("@train_step must return the loss");
  p.loss = bufferOf[ret->getOperand(0)];
  p.buffers[size_t(p.loss)].liveLast = end;

  // Gradients: adamw's grad operands and what is aliased into them (reshape operands, in-place
  // operands at the same place), found walking backwards.
  llvm::DenseSet<Value> grads;
  for (Operation &op : block.without_terminator())
    if (auto a = dyn_cast<bigcd::AdamWOp>(op)) grads.insert(a.getGrad());
  for (Operation &op : llvm::reverse(block.without_terminator())) {
    if (!isInPlaceOp(&op) || op.getNumResults() != 1 || !grads.count(op.getResult(0))) continue;
    const rt::Buffer &y = p.buffers[size_t(bufferOf[op.getResult(0)])];
    for (Value x : op.getOperands()) {
      const rt::Buffer &xb = p.buffers[size_t(bufferOf[x])];
      if (!xb.persistent() && xb.role != "input" && xb.offset == y.offset && xb.bytes == y.bytes)
        grads.insert(x);
    }
  }
  for (Value v : grads) {
    rt::Buffer &b = p.buffers[size_t(bufferOf[v])];
    if (!b.persistent() && b.role != "input") b.role = "grad";
  }

  // Instructions.
  for (Operation &op : block.without_terminator()) {
    if (isa<bigcd::GetParamOp>(op)) continue;
    if (!isa<bigcd::BigcDialect>(op.getDialect()))
      fail(str(op.getLoc()) + ": '" + op.getName().getStringRef().str() + "' is not a bigc runtime instruction");
    rt::Instruction ins;
    ins.op = op.getName().stripDialect().str();
    ins.loc = locString(op.getLoc());
    ins.attrs = instructionAttrs(&op);
    if (auto a = dyn_cast<bigcd::AdamWOp>(op)) {
      auto lookup = [&](llvm::StringRef name) {
        auto it = paramBuffer.find(name);
        if (it == paramBuffer.end()) fail(str(op.getLoc()) + ": adamw names unknown symbol @" + name.str());
        return it->second;
      };
      int64_t param = lookup(a.getParam()), m = lookup(a.getExpAvg()), v = lookup(a.getExpAvgSq());
      ins.in = {param, bufferOf[a.getGrad()], m, v};
      if (a.getNorm()) ins.in.push_back(bufferOf[a.getNorm()]);
      ins.out = {param, m, v};
    } else {
      for (Value v : op.getOperands()) ins.in.push_back(bufferOf[v]);
      for (Value r : op.getResults()) ins.out.push_back(bufferOf[r]);
    }
    p.instructions.push_back(std::move(ins));
  }

  // Config: B, T from the tokens, V from the embedding table (else the logits).
  const rt::Buffer &tok = p.buffers[size_t(p.tokens)];
  if (tok.shape.size() != 2) fail("tokens must be [B, T]");
  p.batch = tok.shape[0];
  p.seq = tok.shape[1];
  for (Operation &op : block.without_terminator()) {
    if (auto e = dyn_cast<bigcd::EmbeddingOp>(op)) {
      p.vocab = cast<RankedTensorType>(e.getTable().getType()).getDimSize(0);
      break;
    }
    if (auto ce = dyn_cast<bigcd::CrossEntropyOp>(op); ce && p.vocab == 0) {
      auto t = cast<RankedTensorType>(ce.getLogits().getType());
      p.vocab = t.getDimSize(t.getRank() - 1);
    }
  }
  p.precision = "fp32";
  p.microBatches = 1;
  p.ranks = 1;

  rt::Space device;
  device.name = "device";
  device.arenaBytes = i64Attr(func, "bigc.arena_bytes");
  device.lowerBoundBytes = i64Attr(func, "bigc.lower_bound_bytes");
  device.capacityBytes = options.deviceCapacityBytes;
  p.spaces.push_back(device);
  return p;
}

} // namespace bigc::emit
