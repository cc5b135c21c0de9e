//===- Emitter.cpp - planned MLIR module -> bigc program ------------------===//
//
// A straight translation: one buffer per parameter symbol, argument and op
// result; one instruction per op (bigc.get_param excepted). Offsets and arena
// sizes are read from the attributes bigc-memory-plan wrote.
//
//===----------------------------------------------------------------------===//

#include "bigc/Emit/Emitter.h"

#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"
#include "bigc/Dialect/BigcCollective.h"

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

format::DType dtypeOf(Type t, Location loc) {
  if (t.isF32()) return format::DType::F32;
  if (t.isBF16()) return format::DType::BF16;
  if (t.isF16()) return format::DType::F16;
  if (t.isInteger(32)) return format::DType::I32;
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  fail(str(loc) + ": element type " + os.str() + " has no program dtype");
}

struct TensorInfo {
  format::DType dtype;
  std::vector<int64_t> shape;
  int64_t bytes;
};

TensorInfo tensorInfo(Type type, Location loc) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape()) fail(str(loc) + ": not a static tensor type");
  TensorInfo info;
  info.dtype = dtypeOf(t.getElementType(), loc);
  info.shape.assign(t.getShape().begin(), t.getShape().end());
  info.bytes = t.getNumElements() * format::dtypeSize(info.dtype);
  return info;
}

bool isInPlaceOp(Operation *op) {
  return isa<bigcd::AddOp, bigcd::BiasAddOp, bigcd::MulOp, bigcd::ScaleOp, bigcd::GeluOp, bigcd::GeluGradOp,
             bigcd::ReshapeOp>(op);
}

// Inherent attributes of an op as instruction attributes (numbers, flags, integer lists). A
// discardable attribute (bigc.phase, the planner's offsets, or anything else a model file carries)
// is no instruction attribute: the program format's registry refuses attributes an op does not take.
std::map<std::string, format::Attr> instructionAttrs(Operation *op) {
  std::map<std::string, format::Attr> out;
  for (NamedAttribute na : op->getAttrDictionary()) {
    llvm::StringRef name = na.getName().getValue();
    if (name.starts_with("bigc.") || op->getDiscardableAttr(na.getName())) continue;
    Attribute a = na.getValue();
    format::Attr v;
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
    } else if (auto arr = dyn_cast<DenseF64ArrayAttr>(a)) {
      v.isReals = true;
      v.reals.assign(arr.asArrayRef().begin(), arr.asArrayRef().end());
    } else if (auto s = dyn_cast<StringAttr>(a); s && name == "approximate") {
      if (s.getValue() == "none") out["exact"].num = 1.0; // gelu: the erf form (absent: tanh)
      continue;
    } else {
      continue; // symbol references, strings: not instruction attributes
    }
    out[name.str()] = v;
  }
  return out;
}

int64_t i64Attr(Operation *op, llvm::StringRef name) {
  auto a = op->getAttrOfType<IntegerAttr>(name);
  if (!a)
    fail(str(op->getLoc()) + ": '" + op->getName().getStringRef().str() + "' has no " + name.str() +
         " attribute (run bigc-memory-plan before emitting)");
  return a.getInt();
}

// Streams, waits and the lives of what asynchronous instructions touch (format version 2):
// - a `wait` instruction (bigc.wait) waits for the instructions carrying its events;
// - every instruction also waits for the latest instruction of each other stream it conflicts
//   with on a buffer (it reads what that one wrote, or writes what that one read or wrote), and
//   a side-stream instruction for the compute instruction before it (it is issued when the
//   compute stream reaches it); the compute stream skips what an earlier wait already joined;
// - a buffer an asynchronous instruction touches is live until the first compute instruction
//   that waits for it (or the end of the step), as bigc-memory-plan planned it.
void finishStreams(format::Program &p, Block &block, const llvm::DenseMap<Operation *, int64_t> &index,
                   func::FuncOp func) {
  const int64_t n = int64_t(p.instructions.size());
  const int64_t end = std::max<int64_t>(n - 1, 0);
  std::map<int64_t, int64_t> eventInstr;
  for (Operation &op : block.without_terminator()) {
    auto it = index.find(&op);
    int64_t e = bigcd::opEvent(&op);
    if (it == index.end() || e < 0) continue;
    if (!bigcd::isSideStream(&op))
      fail(str(op.getLoc()) + ": '" + op.getName().getStringRef().str() + "' has bigc.event " + std::to_string(e) +
           " but runs on the compute stream");
    if (!eventInstr.emplace(e, it->second).second)
      fail(str(op.getLoc()) + ": bigc.event " + std::to_string(e) + " is carried by two ops");
  }
  for (Operation &op : block.without_terminator()) {
    auto w = dyn_cast<bigcd::WaitOp>(op);
    if (!w) continue;
    int64_t self = index.lookup(&op);
    for (int64_t e : w.getEvents()) {
      auto it = eventInstr.find(e);
      if (it == eventInstr.end())
        fail(str(op.getLoc()) + ": bigc.wait names event " + std::to_string(e) + ", which no op carries");
      if (it->second >= self)
        fail(str(op.getLoc()) + ": bigc.wait names event " + std::to_string(e) + " of a later op");
      p.instructions[size_t(self)].wait.push_back(it->second);
    }
  }
  if (eventInstr.empty()) {
    for (auto &ins : p.instructions)
      if (ins.stream != bigcd::kComputeStream)
        fail("instruction '" + ins.op + "' on stream " + ins.stream + " has no bigc.event (run bigc-schedule)");
  }

  // Hazards between streams, per buffer: the latest reader and writer on each stream.
  const size_t nb = p.buffers.size();
  std::vector<std::map<std::string, int64_t>> readBy(nb), writtenBy(nb);
  std::map<std::string, int64_t> joined;                 // compute: latest instruction of each side stream known done
  std::map<std::string, std::vector<int64_t>> sideOrder; // side stream -> its instructions in order
  std::vector<int64_t> joinAt(size_t(n), -1);
  std::map<std::string, size_t> joinedPos; // per side stream: how many of sideOrder have joinAt
  int64_t lastCompute = -1;
  for (int64_t i = 0; i < n; ++i) {
    format::Instruction &ins = p.instructions[size_t(i)];
    const std::string &s = ins.stream;
    std::map<std::string, int64_t> need;
    auto want = [&](const std::string &st, int64_t j) {
      if (st == s || j < 0) return;
      auto [it, fresh] = need.emplace(st, j);
      if (!fresh) it->second = std::max(it->second, j);
    };
    for (int64_t b : ins.in)
      for (auto &[st, j] : writtenBy[size_t(b)]) want(st, j);
    for (int64_t b : ins.out) {
      for (auto &[st, j] : writtenBy[size_t(b)]) want(st, j);
      for (auto &[st, j] : readBy[size_t(b)]) want(st, j);
    }
    if (s != bigcd::kComputeStream) {
      want(bigcd::kComputeStream.str(), lastCompute);
      for (auto &[st, j] : need) ins.wait.push_back(j);
    } else {
      for (int64_t j : ins.wait) {
        int64_t &x = joined.try_emplace(p.instructions[size_t(j)].stream, -1).first->second;
        x = std::max(x, j);
      }
      for (auto &[st, j] : need) {
        int64_t &x = joined.try_emplace(st, -1).first->second;
        if (x < j) ins.wait.push_back(j), x = j;
      }
      // Side instructions this one joins (directly or as earlier ones of a joined stream).
      for (auto &[st, x] : joined) {
        auto &order = sideOrder[st];
        size_t &pos = joinedPos[st];
        while (pos < order.size() && order[pos] <= x) joinAt[size_t(order[pos++])] = i;
      }
      lastCompute = i;
    }
    std::sort(ins.wait.begin(), ins.wait.end());
    ins.wait.erase(std::unique(ins.wait.begin(), ins.wait.end()), ins.wait.end());
    if (s != bigcd::kComputeStream) sideOrder[s].push_back(i);
    for (int64_t b : ins.in) readBy[size_t(b)][s] = i;
    for (int64_t b : ins.out) writtenBy[size_t(b)][s] = i;
  }

  // Lives: every touch of a non-persistent buffer, and a side instruction's buffers until it is
  // joined.
  std::vector<bool> touched(nb, false);
  for (int64_t i = 0; i < n; ++i) {
    const format::Instruction &ins = p.instructions[size_t(i)];
    int64_t until = ins.stream == bigcd::kComputeStream ? i : (joinAt[size_t(i)] >= 0 ? joinAt[size_t(i)] : end);
    for (const auto *list : {&ins.in, &ins.out})
      for (int64_t b : *list) {
        format::Buffer &buf = p.buffers[size_t(b)];
        if (buf.persistent()) continue;
        if (!touched[size_t(b)] && buf.role == "transfer" && buf.liveFirst > buf.liveLast) buf.liveFirst = i;
        touched[size_t(b)] = true;
        buf.liveFirst = std::min(buf.liveFirst, i);
        buf.liveLast = std::max(buf.liveLast, until);
      }
  }
  for (format::Buffer &b : p.buffers)
    if (b.liveFirst > b.liveLast) b.liveFirst = b.liveLast = 0; // a staging tensor nothing touches

  // The host space (bigc-offload) and the nvme space (bigc-offload-nvme, a file-backed arena per
  // rank): each its own arena, when a buffer is there.
  auto addSpace = [&](const char *name, llvm::StringRef arenaAttr, llvm::StringRef lowerBoundAttr, int64_t capacity) {
    if (std::none_of(p.buffers.begin(), p.buffers.end(), [&](const format::Buffer &b) { return b.space == name; }))
      return;
    format::Space s;
    s.name = name;
    s.arenaBytes = i64Attr(func, arenaAttr);
    s.lowerBoundBytes = i64Attr(func, lowerBoundAttr);
    s.capacityBytes = capacity;
    p.spaces.push_back(s);
  };
  addSpace(bigcd::kHostSpace.data(), bigcd::kHostArenaBytesAttrName, bigcd::kHostLowerBoundBytesAttrName,
           p.hostCapacityBytes);
  addSpace(bigcd::kNvmeSpace.data(), bigcd::kNvmeArenaBytesAttrName, bigcd::kNvmeLowerBoundBytesAttrName,
           p.nvmeCapacityBytes);
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

format::Program buildProgram(ModuleOp module, format::Program header) {
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func) fail("the module has no func.func @train_step (run bigc-autodiff first)");
  if (func.isExternal() || !func.getBody().hasOneBlock()) fail("@train_step must have one block");
  Block &block = func.front();

  format::Program p = std::move(header);
  if (p.hardwareName.empty()) p.hardwareName = "none";

  // Instruction indices (get_param is not an instruction).
  llvm::DenseMap<Operation *, int64_t> index;
  int64_t n = 0;
  for (Operation &op : block.without_terminator())
    if (!isa<bigcd::GetParamOp>(op)) index[&op] = n++;
  const int64_t end = std::max<int64_t>(n - 1, 0);

  llvm::DenseMap<Value, int64_t> bufferOf;
  llvm::StringMap<int64_t> paramBuffer;
  auto addBuffer = [&](format::Buffer b) {
    b.id = int64_t(p.buffers.size());
    p.buffers.push_back(std::move(b));
    return p.buffers.back().id;
  };

  // Persistent buffers.
  for (bigcd::ParamOp param : module.getOps<bigcd::ParamOp>()) {
    TensorInfo info = tensorInfo(param.getType(), param.getLoc());
    format::Buffer b;
    b.name = param.getSymName().str();
    b.space = bigcd::paramSpace(param).str();
    b.offset = i64Attr(param, bigcd::kOffsetAttrName);
    b.bytes = info.bytes;
    b.dtype = info.dtype;
    b.shape = info.shape;
    b.role = param.getRole().str();
    b.liveFirst = 0;
    b.liveLast = end;
    if (b.role == "transfer") b.liveFirst = end + 1, b.liveLast = -1; // a staging tensor: set from its touches
    b.init.kind = param.getInit().str();
    if (b.init.kind == "normal") b.init.std = param.getStd() ? param.getStd()->convertToDouble() : 0.02;
    if (b.init.kind == "copy") b.init.source = param.getSource() ? param.getSource()->str() : std::string();
    if (b.init.kind == "fill") b.init.value = param.getValue() ? param.getValue()->convertToDouble() : 0.0;
    if (b.role == "transfer") b.init = format::Init(); // staging tensors are written before they are read
    if (auto full = param->getAttrOfType<DenseI64ArrayAttr>(bigcd::kFullShapeAttrName)) { // bigc-shard
      b.shard = true;
      b.fullShape.assign(full.asArrayRef().begin(), full.asArrayRef().end());
      if (auto tiles = param->getAttrOfType<IntegerAttr>(bigcd::kTilesAttrName)) b.tiles = tiles.getInt(); // bigc-tile
    }
    if (auto split = param->getAttrOfType<DenseI64ArrayAttr>(bigcd::kTpSplitAttrName); split && b.persistent()) {
      auto whole = param->getAttrOfType<DenseI64ArrayAttr>(bigcd::kTpFullShapeAttrName); // bigc-tensor-parallel
      if (!whole || split.size() != 2)
        fail(str(param.getLoc()) + ": bigc.tp_split needs [dim, segments] and bigc.tp_full_shape");
      b.tpDim = split[0];
      b.tpSegments = split[1];
      b.tpFullShape.assign(whole.asArrayRef().begin(), whole.asArrayRef().end());
    }
    if (auto rows = param->getAttrOfType<IntegerAttr>(bigcd::kVocabRowsAttrName); rows && b.persistent())
      b.vocabRows = rows.getInt(); // bigc-pad-vocab: the model's rows of the whole tensor
    paramBuffer[b.name] = addBuffer(b);
  }

  // Arguments: tokens, targets.
  auto argOffsets = func->getAttrOfType<DenseI64ArrayAttr>(bigcd::kArgOffsetsAttrName);
  if (!argOffsets || int64_t(argOffsets.size()) != int64_t(block.getNumArguments()))
    fail("@train_step has no bigc.arg_offsets for its arguments (run bigc-memory-plan before emitting)");
  // (tokens, targets) per micro-batch (bigc-grad-accum: 2K arguments).
  if (block.getNumArguments() < 2 || block.getNumArguments() % 2 != 0)
    fail("@train_step must take (tokens, targets) for each micro-batch");
  const int64_t microBatches = int64_t(block.getNumArguments() / 2);
  for (BlockArgument a : block.getArguments()) {
    TensorInfo info = tensorInfo(a.getType(), func.getLoc());
    format::Buffer b;
    b.name = a.getArgNumber() % 2 == 0 ? "tokens" : "targets";
    if (microBatches > 1) b.name += "." + std::to_string(a.getArgNumber() / 2);
    b.space = bigcd::kDeviceSpace.str();
    b.offset = argOffsets[a.getArgNumber()];
    b.bytes = info.bytes;
    b.dtype = info.dtype;
    b.shape = info.shape;
    b.role = "input";
    b.liveFirst = 0;
    b.liveLast = 0;
    bufferOf[a] = addBuffer(b);
  }
  p.tokenInputs.clear();
  p.targetInputs.clear();
  for (int64_t k = 0; k < microBatches; ++k) {
    p.tokenInputs.push_back(bufferOf[block.getArgument(unsigned(2 * k))]);
    p.targetInputs.push_back(bufferOf[block.getArgument(unsigned(2 * k + 1))]);
  }

  // Results.
  for (Operation &op : block.without_terminator()) {
    if (auto gp = dyn_cast<bigcd::GetParamOp>(op)) {
      auto it = paramBuffer.find(gp.getParam());
      if (it == paramBuffer.end()) fail(str(op.getLoc()) + ": unknown parameter @" + gp.getParam().str());
      bufferOf[gp.getResult()] = it->second;
      continue;
    }
    if (op.getNumResults() == 0) continue;
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(bigcd::kOffsetsAttrName);
    if (!offsets || offsets.size() != int64_t(op.getNumResults()))
      fail(str(op.getLoc()) + ": '" + op.getName().getStringRef().str() +
           "' has no bigc.offsets for its results (run bigc-memory-plan before emitting)");
    auto phase = op.getAttrOfType<StringAttr>(bigcd::kPhaseAttrName);
    bool forward = phase && phase.getValue() == bigcd::kForwardPhase;
    forward |= bigcd::isRecomputed(&op); // bigc-recompute's clones: activations made again in the backward
    std::string opName = op.getName().stripDialect().str();
    for (OpResult r : op.getResults()) {
      TensorInfo info = tensorInfo(r.getType(), op.getLoc());
      format::Buffer b;
      b.name = opName + "." + std::to_string(index[&op]);
      if (op.getNumResults() > 1) b.name += ":" + std::to_string(r.getResultNumber());
      b.space = bigcd::opSpace(&op).str();
      b.offset = offsets[r.getResultNumber()];
      b.bytes = info.bytes;
      b.dtype = info.dtype;
      b.shape = info.shape;
      b.role = forward ? "activation" : "activation_grad";
      if (isa<bigcd::CopyOp>(op)) b.role = "transfer"; // a gradient's host copy becomes "grad" below
      if ((isa<bigcd::LinearCeStatsOp>(op) && r.getResultNumber() == 1) ||
          (isa<bigcd::LinearCeStatsGradOp>(op) && r.getResultNumber() == 2))
        b.role = "workspace"; // the fused loss's chunk of logits (and accumulators): live in its op only
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
      format::Buffer &b = p.buffers[size_t(it->second)];
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
    if (auto c = dyn_cast<bigcd::CopyOp>(op); c && grads.count(c.getY())) grads.insert(c.getX()); // offload
    if (isa<bigcd::AllReduceOp, bigcd::ReduceScatterOp>(op)) // bigc-shard: what a gradient was reduced from
      for (unsigned k = 0; k < op.getNumResults() && k < op.getNumOperands(); ++k)
        if (grads.count(op.getResult(k))) grads.insert(op.getOperand(k));
    if (auto add = dyn_cast<bigcd::AddOp>(op); add && bigcd::isGradAccum(&op) && grads.count(add.getC()))
      grads.insert(add.getA()), grads.insert(add.getB()); // accumulated gradient shards
    if (auto c = dyn_cast<bigcd::CastOp>(op); c && bigcd::isGradAccum(&op) && grads.count(c.getY()))
      grads.insert(c.getX());
    if (!isInPlaceOp(&op) || op.getNumResults() != 1 || !grads.count(op.getResult(0))) continue;
    const format::Buffer &y = p.buffers[size_t(bufferOf[op.getResult(0)])];
    for (Value x : op.getOperands()) {
      const format::Buffer &xb = p.buffers[size_t(bufferOf[x])];
      if (!xb.persistent() && xb.role != "input" && xb.offset == y.offset && xb.bytes == y.bytes) grads.insert(x);
    }
  }
  for (Value v : grads) {
    format::Buffer &b = p.buffers[size_t(bufferOf[v])];
    if (!b.persistent() && b.role != "input") b.role = "grad";
  }

  // Instructions.
  for (Operation &op : block.without_terminator()) {
    if (isa<bigcd::GetParamOp>(op)) continue;
    if (!isa<bigcd::BigcDialect>(op.getDialect()))
      fail(str(op.getLoc()) + ": '" + op.getName().getStringRef().str() + "' is not a bigc runtime instruction");
    format::Instruction ins;
    ins.op = op.getName().stripDialect().str();
    ins.loc = locString(op.getLoc());
    ins.attrs = instructionAttrs(&op);
    ins.recompute = bigcd::isRecomputed(&op);
    if (std::optional<int64_t> mb = bigcd::microBatchOf(&op)) ins.microBatch = *mb;
    ins.weightGrad = bigcd::isWeightGrad(&op);
    ins.stream = bigcd::opStream(&op).str();
    if (auto ph = op.getAttrOfType<StringAttr>(bigcd::kPhaseAttrName)) ins.phase = ph.getValue().str();
    if (auto a = dyn_cast<bigcd::AdamWOp>(op)) {
      auto lookup = [&](llvm::StringRef name) {
        auto it = paramBuffer.find(name);
        if (it == paramBuffer.end()) fail(str(op.getLoc()) + ": adamw names unknown symbol @" + name.str());
        return it->second;
      };
      int64_t param = lookup(a.getParam()), m = lookup(a.getExpAvg()), v = lookup(a.getExpAvgSq());
      ins.in = {param, bufferOf[a.getGrad()], m, v};
      if (a.getNorm()) ins.in.push_back(bufferOf[a.getNorm()]);
      if (a.getNorm()) ins.attrs["clip"].num = 1.0; // format v2: the norm operand is there when clip is set
      ins.out = {param, m, v};
      // Format v2 order: [.., norm] [, loss_scale] [, found_inf]; out [.., half].
      if (a.getLossScale()) {
        ins.in.push_back(bufferOf[a.getLossScale()]);
        ins.attrs["unscale"].num = 1.0;
      }
      if (a.getFoundInf()) {
        ins.in.push_back(bufferOf[a.getFoundInf()]);
        ins.attrs["skip_on_overflow"].num = 1.0;
        // A pipeline stage without the scale's update: the flag its updates skip on (the runtime
        // reads it after the step); the update's own, where there is one, is the same flag.
        if (p.foundInf < 0) p.foundInf = bufferOf[a.getFoundInf()];
      }
      if (auto half = a.getHalf()) {
        ins.out.push_back(lookup(*half));
        ins.attrs["write_half"].num = 1.0;
      }
      if (std::optional<int64_t> count = a.getCount()) { // a chunk of the update (bigc-offload-nvme)
        ins.attrs["offset"].num = double(*a.getOffset());
        ins.attrs["count"].num = double(*count);
      }
      if (auto w = a.getWeight()) ins.attrs["weight"].num = double(lookup(*w));
    } else if (auto u = dyn_cast<bigcd::LossScaleUpdateOp>(op)) {
      auto lookup = [&](llvm::StringRef name) {
        auto it = paramBuffer.find(name);
        if (it == paramBuffer.end()) fail(str(op.getLoc()) + ": loss_scale_update names unknown symbol @" + name.str());
        return it->second;
      };
      int64_t scale = lookup(u.getScale()), good = lookup(u.getGood());
      ins.in = {bufferOf[u.getFoundInf()], scale, good};
      ins.out = {scale, good};
      ins.attrs["growth_interval"].num = double(u.getGrowthInterval());
      ins.attrs["backoff"].num = u.getBackoff().convertToDouble();
      ins.attrs["growth"].num = u.getGrowth().convertToDouble();
      p.lossScale = scale;
      p.foundInf = bufferOf[u.getFoundInf()];
    } else {
      for (Value v : op.getOperands()) ins.in.push_back(bufferOf[v]);
      for (Value r : op.getResults()) ins.out.push_back(bufferOf[r]);
    }
    if (auto pc = dyn_cast<bigcd::ParamCopyOp>(op)) { // persistent -> persistent: a `copy`
      for (llvm::StringRef sym : {pc.getFrom(), pc.getTo()})
        if (!paramBuffer.count(sym)) fail(str(op.getLoc()) + ": param_copy names unknown symbol @" + sym.str());
      ins.op = "copy";
      ins.in = {paramBuffer[pc.getFrom()]};
      ins.out = {paramBuffer[pc.getTo()]};
      ins.attrs.erase("from_offset"); // (the dialect's names: the copy's are in_offset, out_offset)
      ins.attrs.erase("to_offset");
      if (std::optional<int64_t> count = pc.getCount()) { // a range (bigc-offload-nvme's chunks)
        ins.attrs["in_offset"].num = double(pc.getFromOffset().value_or(0));
        ins.attrs["out_offset"].num = double(pc.getToOffset().value_or(0));
        ins.attrs["count"].num = double(*count);
      }
    }
    if (auto pg = dyn_cast<bigcd::ParamAllGatherOp>(op)) { // persistent -> persistent: an `all_gather`
      for (llvm::StringRef sym : {pg.getFrom(), pg.getTo()})
        if (!paramBuffer.count(sym)) fail(str(op.getLoc()) + ": param_all_gather names unknown symbol @" + sym.str());
      ins.op = "all_gather";
      ins.in = {paramBuffer[pg.getFrom()]};
      ins.out = {paramBuffer[pg.getTo()]};
    }
    if (bigcd::isCollective(&op)) { // the mesh axis and the reduction as numbers
      // The format's numbers (docs/program-format.md: axis 0 dp, 1 tp, 2 pp; reduce 0 sum, 1 mean,
      // 2 max, 3 norm); the ops' verifiers admit no other value, and an unknown one is an error
      // here too rather than a silent default.
      auto group = op.getAttrOfType<StringAttr>("group");
      llvm::StringRef g = group ? group.getValue() : llvm::StringRef(bigcd::kDpAxis);
      auto indexOf = [&](llvm::ArrayRef<llvm::StringLiteral> names, llvm::StringRef v, const char *what) {
        for (size_t i = 0; i < names.size(); ++i)
          if (names[i] == v) return double(i);
        fail(str(op.getLoc()) + ": " + op.getName().getStringRef().str() + " has " + what + " \"" + v.str() +
             "\", which the program format has no number for");
      };
      ins.attrs["axis"].num = indexOf(bigcd::kMeshAxes, g, "group");
      if (auto r = op.getAttrOfType<StringAttr>("reduce"))
        ins.attrs["reduce"].num = indexOf(bigcd::kReductions, r.getValue(), "reduce");
    }
    if (isa<bigcd::TpSliceOp, bigcd::VocabCeStatsOp, bigcd::VocabCeStatsGradOp>(op))
      ins.attrs["axis"].num = 1.0; // the mesh axis whose rank picks the chunk
    if (op.hasAttr(bigcd::kVocabGroupAttrName)) ins.attrs["vocab_axis"].num = 1.0; // ids of other ranks: zeros
    if (auto classes = op.getAttrOfType<IntegerAttr>(bigcd::kClassesAttrName))     // bigc-pad-vocab: columns from
      ins.attrs["classes"].num = double(classes.getInt());                         // here on are padding
    if (isa<bigcd::WaitOp>(op)) ins.attrs.clear(); // its events become the instruction's wait list
    p.instructions.push_back(std::move(ins));
  }

  // Config: B, T from the tokens, V from the embedding table (else the logits); a padded
  // vocabulary (bigc-pad-vocab) is the model's: the classes of its loss.
  const format::Buffer &tok = p.buffers[size_t(p.tokenInputs.at(0))];
  if (tok.shape.size() != 2) fail("tokens must be [B, T]");
  p.batch = tok.shape[0];
  p.seq = tok.shape[1];
  for (Operation &op : block.without_terminator()) {
    if (auto e = dyn_cast<bigcd::EmbeddingOp>(op)) {
      p.vocab = cast<RankedTensorType>(e.getTable().getType()).getDimSize(0);
      if (e->hasAttr(bigcd::kVocabGroupAttrName))
        p.vocab *= bigcd::meshAxisSize(module, bigcd::kTpAxis); // a chunk of it
      break;
    }
    if (auto ce = dyn_cast<bigcd::CrossEntropyOp>(op); ce && p.vocab == 0) {
      auto t = cast<RankedTensorType>(ce.getLogits().getType());
      p.vocab = t.getDimSize(t.getRank() - 1);
    }
    if (auto fl = dyn_cast<bigcd::LinearCeStatsOp>(op); fl && p.vocab == 0) { // the fused head's columns
      auto w = cast<RankedTensorType>(fl.getW().getType());
      p.vocab = fl.getTransposeB() ? w.getDimSize(0) : w.getDimSize(1);
      if (fl->hasAttr(bigcd::kVocabGroupAttrName)) p.vocab *= bigcd::meshAxisSize(module, bigcd::kTpAxis);
    }
  }
  for (const format::Buffer &b : p.buffers) // a padded table's or head's rows are Vp: the model's V
    if (b.vocabRows > 0 && b.wholeShape()[0] == p.vocab) p.vocab = b.vocabRows;
  // bigc-mixed-precision / bigc-grad-accum record what they did on the module.
  p.version = format::writtenVersion(p); // 4 with a padded vocabulary (bigc-pad-vocab)
  p.precision = "fp32";
  if (auto prec = module->getAttrOfType<StringAttr>(bigcd::kPrecisionAttrName)) p.precision = prec.getValue().str();
  p.microBatches = microBatches;
  if (auto k = module->getAttrOfType<IntegerAttr>(bigcd::kMicroBatchesAttrName))
    if (k.getInt() != microBatches)
      fail("bigc.micro_batches = " + std::to_string(k.getInt()) + " but @train_step takes " +
           std::to_string(microBatches) + " (tokens, targets) pairs");
  // The runtime reads found_inf after the step (bigc-memory-plan keeps it live to the end).
  if (p.foundInf >= 0) p.buffers[size_t(p.foundInf)].liveLast = end;
  // bigc-shard: the mesh and the ZeRO stage (absent: one rank).
  p.dp = bigcd::meshAxisSize(module, bigcd::kDpAxis);
  p.tp = bigcd::meshAxisSize(module, bigcd::kTpAxis);
  p.pp = bigcd::meshAxisSize(module, bigcd::kPpAxis);
  p.cp = bigcd::meshAxisSize(module, bigcd::kCpAxis);
  p.ranks = p.dp * p.tp * p.pp;
  // bigc-pipeline: which stage this module is (the driver bundles the stages' programs).
  if (auto pipe = module->getAttrOfType<DictionaryAttr>(bigcd::kPipelineAttrName)) {
    if (auto st = pipe.getAs<IntegerAttr>("stage")) p.stage = st.getInt();
    if (auto sc = pipe.getAs<StringAttr>("schedule")) p.ppSchedule = sc.getValue().str();
    if (auto v = pipe.getAs<IntegerAttr>("virtual_stages")) p.virtualStages = v.getInt();
    if (auto sp = pipe.getAs<DenseI64ArrayAttr>("split"))
      p.ppSplit.assign(sp.asArrayRef().begin(), sp.asArrayRef().end());
  }
  if (auto z = module->getAttrOfType<IntegerAttr>(bigcd::kZeroAttrName)) p.zero = z.getInt();
  p.sequenceParallel = module->hasAttr(bigcd::kSequenceParallelAttrName);
  if (auto notes = module->getAttrOfType<ArrayAttr>(bigcd::kTpReplicatedAttrName))
    for (Attribute a : notes)
      if (auto sa = dyn_cast<StringAttr>(a)) p.tpReplicated.push_back(sa.getValue().str());

  // What bigc-recompute decided (module attribute bigc.recompute; absent: nothing recomputed).
  if (auto rc = module->getAttrOfType<DictionaryAttr>(bigcd::kRecomputeAttrName)) {
    if (auto s = rc.getAs<StringAttr>("policy")) p.recompute.policy = s.getValue().str();
    auto num = [&](llvm::StringRef key) {
      auto a = rc.getAs<IntegerAttr>(key);
      return a ? a.getInt() : int64_t(0);
    };
    p.recompute.savedBytes = num("saved_bytes");
    p.recompute.flopsAdded = num("flops_added");
    p.recompute.forwardFlops = num("forward_flops");
  }

  format::Space device;
  device.name = bigcd::kDeviceSpace.str();
  device.arenaBytes = i64Attr(func, bigcd::kArenaBytesAttrName);
  device.lowerBoundBytes = i64Attr(func, bigcd::kLowerBoundBytesAttrName);
  device.capacityBytes = p.deviceCapacityBytes;
  p.spaces.push_back(device);
  finishStreams(p, block, index, func); // streams, waits, host space (bigc-offload)
  return p;
}

} // namespace bigc::emit
