//===- StepSimulation.cpp - the scheduled step on a hardware profile ------===//
#include "bigc/Analysis/StepSimulation.h"
#include "bigc/Analysis/CostModel.h"
#include "bigc/Dialect/BigcAttrNames.h"
#include "bigc/Dialect/BigcCollective.h"
#include "bigc/Dialect/BigcOps.h"
#include "bigc/Dialect/BigcTransfer.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <algorithm>
#include <map>

using namespace mlir;
using namespace mlir::bigc;

namespace {
/// The module's bigc.param ops by name, looked up once (a symbol lookup scans the module: with
/// 100,000 instructions and as many parameters, the scans took half of a 1T plan's compile).
struct Params {
  llvm::StringMap<ParamOp> byName;
  explicit Params(ModuleOp m) {
    for (ParamOp p : m.getOps<ParamOp>()) byName[p.getSymName()] = p;
  }
  ParamOp get(FlatSymbolRefAttr ref) const {
    auto it = byName.find(ref.getValue());
    return it == byName.end() ? ParamOp() : it->second;
  }
};

/// The space of the bigc.param `ref` names ("device" when there is none).
StringRef symbolSpace(const Params &ps, FlatSymbolRefAttr ref) {
  auto p = ps.get(ref);
  return p ? paramSpace(p) : StringRef(kDeviceSpace);
}

int64_t symbolBytes(const Params &ps, FlatSymbolRefAttr ref) {
  auto p = ps.get(ref);
  return p ? typeBytes(p.getType()) : 0;
}

/// The bytes a bigc.param_copy moves: its range's (a chunk), else its destination's.
int64_t copyBytes(const Params &ps, ParamCopyOp pc) {
  auto p = ps.get(pc.getToAttr());
  if (std::optional<int64_t> count = pc.getCount(); count && p)
    return *count * int64_t(std::max<unsigned>(1, p.getTensorType().getElementTypeBitWidth() / 8));
  return symbolBytes(ps, pc.getToAttr());
}
} // namespace

/// The CPU backend computes an op on 16-bit tensors in fp32: each 16-bit operand is converted into
/// fp32 staging (2 bytes read, 4 written per element) and each 16-bit result back (4 read, 2
/// written), at the profile's memory bandwidth. Ops that read and write their dtypes themselves
/// (casts, copies, embeddings, the optimizer's and the collectives) convert nothing.
static double cpuStagingSeconds(Operation *op, const ::bigc::HardwareProfile &hw) {
  if (hw.deviceBytesPerS <= 0 || isCollective(op) ||
      isa<CastOp, ReshapeOp, EmbeddingOp, AdamWOp, ParamCopyOp, WaitOp, GlobalNormOp>(op))
    return 0;
  auto halfElements = [](Type t) -> double {
    auto rt = dyn_cast<RankedTensorType>(t);
    if (!rt || !rt.getElementType().isa<FloatType>() || rt.getElementType().getIntOrFloatBitWidth() != 16) return 0;
    return double(rt.getNumElements());
  };
  double n = 0;
  for (Value v : op->getOperands()) n += halfElements(v.getType());
  for (Value v : op->getResults()) n += halfElements(v.getType());
  return n * 6.0 / hw.deviceBytesPerS;
}

StepEstimate mlir::bigc::simulateStep(ModuleOp module, const ::bigc::HardwareProfile &hw, const MessageTimes *arrivals,
                                      MessageTimes *sent, std::vector<OpSpan> *trace) {
  StepEstimate est;
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func || func.isExternal()) return est;
  const Params params(module);
  const int64_t stage = pipelineStage(module);
  // A measured CPU profile (bigc calibrate: `threads`): the CPU backend's ranks are threads on its
  // cores, so with more ranks than devices each rank's compute and host work gets its share.
  const double share =
      hw.threads > 0 ? std::max(1.0, double(meshRanks(module)) / double(std::max<int64_t>(1, hw.devices))) : 1.0;
  // On such a profile the offloaded optimizer (stream host) and the copies between the arenas
  // (h2d, d2h: memcpy) run on the same cores as the compute stream: they take their turn on its
  // timeline instead of running beside it.
  auto timelineOf = [&](const std::string &stream) {
    return hw.threads > 0 && (stream == kHostStream || stream == kH2DStream || stream == kD2HStream)
               ? std::string(kComputeStream)
               : stream;
  };
  int64_t stagesReduce = 0; // all-reduces over the stages, in order
  auto arrival = [&](const MessageKey &k) {
    if (!arrivals) return 0.0;
    auto it = arrivals->find(k);
    return it == arrivals->end() ? 0.0 : it->second;
  };
  Block &block = func.front();
  llvm::DenseMap<Operation *, double> endOf;
  llvm::DenseMap<int64_t, Operation *> eventOp;
  llvm::StringMap<Operation *> lastWriter; // persistent tensor -> the op that last wrote it
  std::map<std::string, double> streamFree;
  double lastComputeEnd = 0;
  std::vector<std::pair<double, double>> busy; // compute intervals, in order
  struct Coll {
    std::string op;
    double start, end, queued;
  };
  std::vector<Coll> colls;
  std::map<std::pair<std::string, std::string>, OpTime> byOp;

  for (Operation &op : block.without_terminator()) {
    if (isa<GetParamOp>(op)) continue;
    if (int64_t e = opEvent(&op); e >= 0) eventOp[e] = &op;
    const std::string stream = opStream(&op).str();
    // `start` first gathers when the op could start (what it waits for); its stream's queue after.
    double start = 0;
    if (stream != kComputeStream) start = lastComputeEnd; // issued when the compute stream reaches it
    for (Value v : op.getOperands())
      if (Operation *d = v.getDefiningOp()) {
        if (auto gp = dyn_cast<GetParamOp>(d)) {
          if (Operation *w = lastWriter.lookup(gp.getParam())) start = std::max(start, endOf.lookup(w));
        } else {
          start = std::max(start, endOf.lookup(d));
        }
      }
    auto readsSym = [&](FlatSymbolRefAttr r) {
      if (Operation *w = lastWriter.lookup(r.getValue())) start = std::max(start, endOf.lookup(w));
    };
    if (auto w = dyn_cast<WaitOp>(op))
      for (int64_t e : w.getEvents())
        if (Operation *x = eventOp.lookup(e)) start = std::max(start, endOf.lookup(x));
    if (auto pc = dyn_cast<ParamCopyOp>(op)) readsSym(pc.getFromAttr());
    if (auto a = dyn_cast<AdamWOp>(op)) // its staged state (nvme offload)
      for (FlatSymbolRefAttr r : {a.getParamAttr(), a.getExpAvgAttr(), a.getExpAvgSqAttr()}) readsSym(r);
    if (auto pg = dyn_cast<ParamAllGatherOp>(op)) readsSym(pg.getFromAttr());

    const double ready = start;
    const std::string timeline = timelineOf(stream);
    start = std::max(start, streamFree[timeline]);
    double dur = 0;
    // (the compute and host ops' time, and every op's counts; symbols from the map)
    const OpCost cost = opCost(&op, [&](FlatSymbolRefAttr r) -> Operation * { return params.get(r).getOperation(); });
    auto g = op.getAttrOfType<StringAttr>("group");
    if (isCollective(&op) && g && g.getValue() == kPpAxis) {
      // Every stage's part of it: it starts when the last stage reaches it.
      MessageKey k{-1, -1, stagesReduce++};
      if (sent) {
        auto [it, fresh] = sent->try_emplace(k, start);
        if (!fresh) it->second = std::max(it->second, start);
      }
      start = std::max(start, arrival(k));
    }
    if (auto snd = dyn_cast<SendOp>(op)) {
      const double bytes = double(typeBytes(snd.getInput().getType()));
      dur = hw.interconnectBytesPerS > 0 ? bytes / hw.interconnectBytesPerS : 0;
      if (sent) (*sent)[MessageKey{stage, snd.getPeer(), snd.getTag()}] = start + dur;
    } else if (auto rcv = dyn_cast<RecvOp>(op)) {
      // Its bytes are there when the send ended.
      dur = std::max(0.0, arrival(MessageKey{rcv.getPeer(), stage, rcv.getTag()}) - start);
    } else if (isCollective(&op)) {
      double bytes = 0;
      if (auto pg = dyn_cast<ParamAllGatherOp>(op)) {
        bytes = double(symbolBytes(params, pg.getToAttr()));
      } else {
        // A sum or mean of a 16-bit tensor is reduced in f32 (the CPU backend's rings; f32 copies
        // on NCCL): 4 bytes an element.
        StringRef red = op.hasAttr("reduce") ? op.getAttrOfType<StringAttr>("reduce").getValue() : StringRef();
        const bool wide = isa<AllReduceOp, ReduceScatterOp>(op) && (red == kReduceSum || red == kReduceMean);
        // (a tile's gather reads a piece of its input: the tile is what moves)
        const bool tile = isa<AllGatherOp>(op) && cast<AllGatherOp>(op).getTile().has_value();
        for (unsigned k = 0; k < op.getNumOperands() && k < op.getNumResults(); ++k) {
          double b =
              tile ? double(typeBytes(op.getResult(k).getType()))
                   : double(std::max(typeBytes(op.getOperand(k).getType()), typeBytes(op.getResult(k).getType())));
          auto t = dyn_cast<ShapedType>(op.getOperand(k).getType());
          if (wide && t && t.getElementType().getIntOrFloatBitWidth() == 16) b *= 2.0;
          bytes += b;
        }
      }
      // Ring collectives over the op's mesh axis (data- or tensor-parallel group).
      const double n = double(meshAxisSize(module, g ? g.getValue() : StringRef(kDpAxis)));
      // A ring shift sends each rank's tensors whole to the next rank (and takes its neighbour's).
      double factor = n <= 1                 ? 0.0
                      : isa<AllReduceOp>(op) ? 2.0 * (n - 1) / n
                      : isa<RingShiftOp>(op) ? 1.0
                                             : (n - 1) / n;
      dur = hw.interconnectBytesPerS > 0 ? bytes * factor / hw.interconnectBytesPerS : 0;
      if (n > 1) dur += hw.collectiveLatencyS; // (a measured profile's fixed cost)
    } else if (isa<WaitOp>(op)) {
      dur = 0;
    } else if (stream == kH2DStream || stream == kD2HStream) {
      double bytes = 0;
      if (auto pc = dyn_cast<ParamCopyOp>(op))
        bytes = double(copyBytes(params, pc));
      else
        for (Value r : op.getResults()) bytes += double(typeBytes(r.getType()));
      double bw = stream == kH2DStream ? hw.h2dBytesPerS : hw.d2hBytesPerS;
      dur = bw > 0 ? bytes / bw : 0;
    } else if (stream == kNvmeStream) {
      // The machine's drives, shared by its ranks (each moves its own tensors at once).
      auto pc = dyn_cast<ParamCopyOp>(op);
      const double bytes = pc ? double(copyBytes(params, pc)) : 0.0;
      const bool write = pc && symbolSpace(params, pc.getToAttr()) == kNvmeSpace;
      const double bw =
          (write ? hw.nvmeWriteBytesPerS : hw.nvmeReadBytesPerS) / double(std::max<int64_t>(1, hw.devices));
      dur = bw > 0 ? bytes / bw : 0;
    } else if (stream == kHostStream) {
      dur = hw.hostFlops > 0 ? double(cost.flops) / hw.hostFlops * share : 0;
    } else {
      const double flops =
          hw.opFlops.empty() ? hw.deviceFlops : hw.flopsOf(op.getName().getStringRef().drop_front(5).str()); // "bigc."
      dur = rooflineSeconds(cost, flops, hw.deviceBytesPerS) * share;
      if (hw.threads > 0) dur += cpuStagingSeconds(&op, hw) * share;
      if (dur > 0) dur += hw.opOverheadS; // (a measured profile's fixed cost per instruction)
    }
    const double end = start + dur;
    if (trace) trace->push_back({&op, stream, start, end});
    endOf[&op] = end;
    streamFree[timeline] = end;
    est.stepSeconds = std::max(est.stepSeconds, end);
    if (stream == kComputeStream) {
      lastComputeEnd = end;
      if (dur > 0) {
        busy.push_back({start, end});
        est.computeSeconds += dur;
      }
    }
    if (!isCollective(&op) && !isa<WaitOp>(op)) {
      const std::string name = op.getName().getStringRef().drop_front(5).str(); // "bigc."
      OpTime &t = byOp[{name, stream}];
      t.op = name, t.stream = stream;
      t.count += 1;
      t.seconds += dur;
      t.flops += double(cost.flops);
      t.bytes += double(cost.bytes());
    }
    if (isCollective(&op)) {
      // Tensor-axis collectives apart ("tp_all_reduce", ...): they are on the critical path.
      std::string name = isa<ParamAllGatherOp>(op) ? std::string("all_gather") : op.getName().stripDialect().str();
      colls.push_back({(g && g.getValue() == kTpAxis ? "tp_" : "") + name, start, end, start - ready});
    }
    // Persistent tensors written.
    if (auto a = dyn_cast<AdamWOp>(op)) {
      lastWriter[a.getParam()] = &op;
      lastWriter[a.getExpAvg()] = &op;
      lastWriter[a.getExpAvgSq()] = &op;
      if (auto h = a.getHalf()) lastWriter[*h] = &op;
    } else if (auto pc = dyn_cast<ParamCopyOp>(op)) {
      lastWriter[pc.getTo()] = &op;
    } else if (auto pg = dyn_cast<ParamAllGatherOp>(op)) {
      lastWriter[pg.getTo()] = &op;
    }
  }
  // Hidden: the part of each collective during which the compute stream is busy.
  std::map<std::string, CollectiveTime> by;
  for (const Coll &c : colls) {
    CollectiveTime &t = by[c.op];
    t.op = c.op;
    t.count += 1;
    t.seconds += c.end - c.start;
    t.queuedSeconds += c.queued;
    auto it = std::lower_bound(busy.begin(), busy.end(), std::make_pair(c.start, c.start),
                               [](const auto &a, const auto &b) { return a.second < b.first; });
    for (; it != busy.end() && it->first < c.end; ++it)
      t.hiddenSeconds += std::max(0.0, std::min(c.end, it->second) - std::max(c.start, it->first));
  }
  for (auto &[k, v] : by) est.collectives.push_back(v);
  for (auto &[k, v] : byOp) est.ops.push_back(v);
  std::stable_sort(est.ops.begin(), est.ops.end(),
                   [](const OpTime &a, const OpTime &b) { return a.seconds > b.seconds; });
  return est;
}

PipelineEstimate mlir::bigc::simulatePipeline(ArrayRef<ModuleOp> stages, const ::bigc::HardwareProfile &hw) {
  PipelineEstimate pe;
  const size_t P = stages.size();
  std::vector<std::vector<OpSpan>> traces(P);
  MessageTimes arrivals;
  // Each round plays every stage with the previous round's arrival times; they only grow, and a
  // chain of messages settles one link per round, so the rounds are bounded by the messages.
  for (size_t round = 0;; ++round) {
    MessageTimes sent;
    pe.stages.clear();
    for (size_t s = 0; s < P; ++s) {
      traces[s].clear();
      pe.stages.push_back(simulateStep(stages[s], hw, &arrivals, &sent, &traces[s]));
    }
    pe.rounds = int(round + 1);
    if (sent == arrivals || round > 2 * sent.size() + 8) break;
    arrivals = std::move(sent);
  }
  for (size_t s = 0; s < P; ++s) {
    pe.stepSeconds = std::max(pe.stepSeconds, pe.stages[s].stepSeconds);
    pe.busySeconds.push_back(pe.stages[s].computeSeconds);
  }
  for (StepEstimate &e : pe.stages) e.stepSeconds = pe.stepSeconds;
  double idle = 0;
  for (double b : pe.busySeconds) idle += b > 0 ? (pe.stepSeconds - b) / b : 0;
  pe.bubble = P ? idle / double(P) : 0;
  // The compute streams' stretches by micro-batch and kind; a gap (waiting for a message) ends one.
  for (size_t s = 0; s < P; ++s) {
    for (const OpSpan &sp : traces[s]) {
      if (sp.stream != kComputeStream || sp.end <= sp.start) continue;
      StringRef ph = phaseOf(sp.op);
      // Ops of no operand (a fill: an accumulator's start, the zero loss of a stage other than the
      // last) are not a micro-batch's work.
      std::string kind = sp.op->getNumOperands() == 0                  ? "optimizer"
                         : ph == kForwardPhase && !isRecomputed(sp.op) ? "forward"
                         : ph == kBackwardPhase && isWeightGrad(sp.op) ? "weight"
                         : ph == kForwardPhase || ph == kBackwardPhase ? "backward"
                                                                       : "optimizer";
      int64_t mb = kind == "optimizer" ? -1 : microBatchOf(sp.op).value_or(0);
      if (!pe.blocks.empty()) {
        PipelineBlock &last = pe.blocks.back();
        if (last.stage == int64_t(s) && last.kind == kind && last.microBatch == mb &&
            sp.start - last.end <= 1e-9 * std::max(pe.stepSeconds, 1e-12)) {
          last.end = sp.end;
          continue;
        }
      }
      pe.blocks.push_back({int64_t(s), mb, kind, sp.start, sp.end});
    }
  }
  return pe;
}
