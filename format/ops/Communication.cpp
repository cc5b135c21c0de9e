// The collectives over an axis of the device mesh (stream comm or comm_tp) and the pipeline's
// point-to-point messages (stream p2p) (docs/program-format.md, "Instructions"). The cost model
// leaves their time to the communication model (no FLOPs rule).
#include "Rules.h"

namespace bigc::format::ops {

namespace {

// AllReduce, ReduceScatter, AllGather
void shapeAllReduce(const Ctx &op) {
  if (op.ins->in.size() != op.ins->out.size())
    op.bad("a collective has one output per input, has " + std::to_string(op.ins->in.size()) + " inputs and " +
           std::to_string(op.ins->out.size()) + " outputs");
  double axis = op.ins->num("axis", 0);
  if (axis == 2 && op.p.pp <= 1) op.bad("attribute 'axis' 2 (pp) names the pipeline axis, but this program has pp 1");
  if (axis != 0 && axis != 1 && axis != 2) op.bad("attribute 'axis' must be 0 (dp), 1 (tp) or 2 (pp)");
  const int64_t n = op.p.axisSize(int64_t(axis));
  if (op.kind != OpKind::AllGather) {
    double r = op.ins->num("reduce", -1);
    if (r != 0 && r != 1 && r != 2 && r != 3)
      op.bad("attribute 'reduce' must be 0 (sum), 1 (mean), 2 (max) or 3 (norm)");
    if (op.kind == OpKind::ReduceScatter && r > 1) op.bad("reduce_scatter reduces by sum (0) or mean (1)");
    if (r == 3)
      for (size_t k = 0; k < op.ins->in.size(); ++k)
        if (op.in(k).dtype != DType::F32)
          op.bad("reduce 3 (norm) combines f32 norms; input " + std::to_string(k) + " is " + dtypeName(op.in(k).dtype));
  }
  for (size_t k = 0; k < op.ins->in.size(); ++k) {
    const Buffer &a = op.in(k), &b = op.out(k);
    if (a.dtype != b.dtype)
      op.bad("input " + std::to_string(k) + " and output " + std::to_string(k) + " must have one dtype, are " +
             dtypeName(a.dtype) + " and " + dtypeName(b.dtype));
    if (op.kind == OpKind::AllReduce) {
      op.sameShape(a, b, "output");
      continue;
    }
    const Buffer &whole = op.kind == OpKind::ReduceScatter ? a : b, &part = op.kind == OpKind::ReduceScatter ? b : a;
    const int64_t s = (whole.numel() + n - 1) / n;
    if (op.kind == OpKind::AllGather && op.ins->attrs.count("tile")) {
      // Tile t of k of a tile-interleaved shard (bigc-tile): the input holds k pieces of s elements.
      const std::vector<int64_t> tile = op.ins->ints("tile");
      if (tile.size() != 2 || tile[1] < 1 || tile[0] < 0 || tile[0] >= tile[1])
        op.bad("attribute 'tile' must be [t, k] with 0 <= t < k");
      if (part.shape.size() != 1 || part.shape[0] != tile[1] * s)
        op.bad("a tile of " + std::to_string(whole.numel()) + " elements over " + std::to_string(n) +
               " ranks has pieces of " + std::to_string(s) + ", so a shard of " + std::to_string(tile[1]) +
               " tiles has [" + std::to_string(tile[1] * s) + "], '" + part.name + "' is " + shapeStr(part.shape));
      continue;
    }
    if (part.shape.size() != 1 || part.shape[0] != s)
      op.bad("the shard of '" + whole.name + "' " + shapeStr(whole.shape) + " over " + std::to_string(n) +
             " ranks is [" + std::to_string(s) + "], '" + part.name + "' is " + shapeStr(part.shape));
  }
}

// RingShift, CpAllToAll: over the context axis (3) of a program with cp > 1.
void shapeCp(const Ctx &op) {
  if (op.ins->num("axis", -1) != 3 || op.p.cp <= 1)
    op.bad("attribute 'axis' must be 3 (cp), the context axis, in a program with cp > 1 (this one has cp " +
           std::to_string(op.p.cp) + ")");
  if (op.ins->in.size() != op.ins->out.size())
    op.bad("has one output per input, has " + std::to_string(op.ins->in.size()) + " inputs and " +
           std::to_string(op.ins->out.size()) + " outputs");
  const int64_t C = op.p.cp;
  for (size_t k = 0; k < op.ins->in.size(); ++k) {
    const Buffer &a = op.in(k), &b = op.out(k);
    if (a.dtype != b.dtype)
      op.bad("input " + std::to_string(k) + " and output " + std::to_string(k) + " must have one dtype");
    if (op.kind == OpKind::RingShift) {
      op.sameShape(a, b, "output");
      continue;
    }
    const bool toHeads = op.ins->flag("to_heads");
    const Buffer &seq = toHeads ? a : b, &heads = toHeads ? b : a;
    if (seq.shape.size() != 3 || seq.shape[2] % C != 0)
      op.bad("'" + seq.name + "' " + shapeStr(seq.shape) + " must be [B,T,N] with N divisible by cp " +
             std::to_string(C));
    op.wantShape(heads, {seq.shape[0], seq.shape[1] * C, seq.shape[2] / C}, toHeads ? "output" : "input");
  }
}

void dimsCp(const Ctx &op, OpDims &d) { d.toHeads = op.ins->flag("to_heads"); }

// Send, Recv
void dimsSend(const Ctx &op, OpDims &d) {
  d.n = op.kind == OpKind::Send ? op.in(0).bytes : op.out(0).bytes;
  d.peer = int64_t(op.ins->num("peer", -1)), d.tag = int64_t(op.ins->num("tag", -1));
}

} // namespace

std::vector<OpDef> communicationOps() {
  return {
      Def("all_reduce", OpKind::AllReduce)
          .in(1, -1)
          .out(1, -1)
          .ownDtypes()
          .attrs({{"axis", Int}, {"reduce", Int}})
          .shape(shapeAllReduce),
      Def("reduce_scatter", OpKind::ReduceScatter)
          .in(1, -1)
          .out(1, -1)
          .ownDtypes()
          .attrs({{"axis", Int}, {"reduce", Int}})
          .shape(shapeAllReduce),
      Def("all_gather", OpKind::AllGather)
          .in(1, -1)
          .out(1, -1)
          .ownDtypes()
          .attrs({{"axis", Int}, {"tile", Ints}})
          .shape(shapeAllReduce),
      Def("ring_shift", OpKind::RingShift).in(1, -1).out(1, -1).ownDtypes().attrs({{"axis", Int}}).shape(shapeCp),
      Def("cp_all_to_all", OpKind::CpAllToAll)
          .in(1, -1)
          .out(1, -1)
          .ownDtypes()
          .attrs({{"axis", Int}, {"to_heads", Flag}})
          .shape(shapeCp)
          .dims(dimsCp),
      Def("send", OpKind::Send)
          .in(1)
          .out(0)
          .types({Any}, {Any})
          .ownDtypes()
          .attrs({{"peer", Int}, {"tag", Int}})
          .dims(dimsSend),
      Def("recv", OpKind::Recv)
          .in(0)
          .out(1)
          .types({Any}, {Any})
          .ownDtypes()
          .attrs({{"peer", Int}, {"tag", Int}})
          .dims(dimsSend),
  };
}

} // namespace bigc::format::ops
