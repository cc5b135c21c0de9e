// The ops that move data without arithmetic: transpose, reshape, split, concat, copy (a range
// copy too: bigc-offload-nvme's chunks), wait, and tensor parallelism's slice (docs/program-format.md,
// "Instructions").
#include "Rules.h"

namespace bigc::format::ops {

namespace {

// Transpose
void shapeTranspose(const Ctx &op) {
  const Buffer &x = op.in(0), &y = op.out(0);
  std::vector<int64_t> perm = op.ins->ints("perm");
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(x.shape.size());
  std::iota(iota.begin(), iota.end(), 0);
  if (sorted != iota)
    op.bad("attribute 'perm' " + shapeStr(perm) + " is not a permutation of the " + std::to_string(x.shape.size()) +
           " dimensions of " + op.desc(x));
  std::vector<int64_t> want;
  for (int64_t d : perm) want.push_back(x.shape[size_t(d)]);
  op.wantShape(y, want, "output");
}

// Reshape
void shapeReshape(const Ctx &op) {
  if (op.in(0).numel() != op.out(0).numel())
    op.bad("reshape changes the element count: " + op.desc(op.in(0)) + " -> " + op.desc(op.out(0)));
  if (op.in(0).dtype != op.out(0).dtype)
    op.bad(std::string("reshape keeps the dtype: ") + dtypeName(op.in(0).dtype) + " -> " + dtypeName(op.out(0).dtype));
}

// Split, Concat
void shapeSplit(const Ctx &op) {
  bool split = op.kind == OpKind::Split;
  const Buffer &whole = split ? op.in(0) : op.out(0);
  size_t parts = split ? op.ins->out.size() : op.ins->in.size();
  op.minRank(whole, 1, split ? "x" : "y");
  int64_t ax = op.axisAttr(whole.shape.size());
  if (whole.shape[size_t(ax)] % int64_t(parts) != 0)
    op.bad("dimension " + std::to_string(ax) + " of " + op.desc(whole) + " does not split into " +
           std::to_string(parts) + " equal parts");
  auto part = whole.shape;
  part[size_t(ax)] /= int64_t(parts);
  for (size_t k = 0; k < parts; ++k)
    op.wantShape(split ? op.out(k) : op.in(k), part, (split ? "output " : "input ") + std::to_string(k));
}

// Copy
void shapeCopy(const Ctx &op) {
  if (op.ins->attrs.count("count")) { // a range: out[out_offset, +count) = in[in_offset, +count)
    const double c = op.ins->num("count", 0), io = op.ins->num("in_offset", 0), oo = op.ins->num("out_offset", 0);
    for (auto [name, x] : {std::pair<const char *, double>{"count", c}, {"in_offset", io}, {"out_offset", oo}})
      if (x != std::floor(x) || x < (std::string(name) == "count" ? 1 : 0))
        op.bad(std::string("attribute '") + name +
               "' must be an integer >= " + (std::string(name) == "count" ? "1" : "0"));
    if (io + c > double(op.in(0).numel()) || oo + c > double(op.out(0).numel()))
      op.bad("elements [" + std::to_string(int64_t(io)) + ", " + std::to_string(int64_t(io + c)) + ") of an input of " +
             std::to_string(op.in(0).numel()) + " to [" + std::to_string(int64_t(oo)) + ", " +
             std::to_string(int64_t(oo + c)) + ") of an output of " + std::to_string(op.out(0).numel()) +
             ": out of range");
  } else {
    if (op.ins->attrs.count("in_offset") || op.ins->attrs.count("out_offset"))
      op.bad("attributes 'in_offset' and 'out_offset' need 'count'");
    op.sameShape(op.in(0), op.out(0), "output");
  }
  if (op.in(0).dtype != op.out(0).dtype)
    op.bad(std::string("copy keeps the dtype: ") + dtypeName(op.in(0).dtype) + " -> " + dtypeName(op.out(0).dtype) +
           " (use cast)");
  if (op.ins->in[0] == op.ins->out[0]) op.bad("copy onto itself");
}

// TpSlice
void shapeTpSlice(const Ctx &op) {
  const int64_t T = op.p.tp;
  const Buffer &x = op.in(0);
  const double dd = op.ins->num("dim", -1);
  if (dd != std::floor(dd) || dd < 0 || dd >= double(x.shape.size()))
    op.bad("attribute 'dim' must be a dimension of " + op.desc(x));
  const int64_t d = int64_t(dd);
  if (x.shape[size_t(d)] % T != 0)
    op.bad("dimension " + std::to_string(d) + " of " + op.desc(x) + " does not divide into " + std::to_string(T) +
           " tensor ranks");
  auto want = x.shape;
  want[size_t(d)] /= T;
  op.wantShape(op.out(0), want, "output");
  if (op.out(0).dtype != x.dtype)
    op.bad("output dtype " + std::string(dtypeName(op.out(0).dtype)) + " differs from the input's " +
           dtypeName(x.dtype) + " (a slice copies bytes)");
}

// Transpose
void dimsTranspose(const Ctx &op, OpDims &d) {
  d.shape = op.in(0).shape;
  d.perm = op.ins->ints("perm");
}

// Reshape
void dimsReshape(const Ctx &op, OpDims &d) { d.n = op.in(0).bytes; }

// Copy
void dimsCopy(const Ctx &op, OpDims &d) {
  d.n = op.in(0).bytes;
  if (op.ins->attrs.count("count")) { // a range (bigc-offload-nvme's chunks), in bytes here
    const int64_t size = int64_t(dtypeSize(op.in(0).dtype));
    d.n = int64_t(op.ins->num("count", 0)) * size;
    d.inOffset = int64_t(op.ins->num("in_offset", 0)) * size;
    d.outOffset = int64_t(op.ins->num("out_offset", 0)) * size;
  }
}

// Split, Concat
void dimsSplit(const Ctx &op, OpDims &d) {
  bool split = op.kind == OpKind::Split;
  const Buffer &whole = split ? op.in(0) : op.out(0);
  int64_t parts = int64_t(split ? op.ins->out.size() : op.ins->in.size());
  int64_t ax = int64_t(op.ins->num("axis", 0));
  if (ax < 0) ax += int64_t(whole.shape.size());
  d.rows = prod(whole.shape, 0, size_t(ax));
  d.cols = whole.shape[size_t(ax)] / parts * prod(whole.shape, size_t(ax) + 1, whole.shape.size());
  d.n = parts;
}

// TpSlice
void dimsTpSlice(const Ctx &op, OpDims &d) {
  const auto &x = op.in(0).shape;
  const int64_t dim = int64_t(op.ins->num("dim", 0));
  d.sliceRun = int64_t(dtypeSize(op.in(0).dtype));
  for (int64_t k = 0; k < int64_t(x.size()); ++k)
    if (k < dim)
      d.slicePre *= x[size_t(k)];
    else if (k > dim)
      d.sliceRun *= x[size_t(k)];
  d.rows = x[size_t(dim)] / std::max<int64_t>(1, op.p.tp); // rows of the chunk
  d.cols = x[size_t(dim)];
}

} // namespace

std::vector<OpDef> layoutOps() {
  return {
      Def("transpose", OpKind::Transpose)
          .in(1)
          .out(1)
          .attrs({{"perm", Ints}})
          .shape(shapeTranspose)
          .dims(dimsTranspose)
          .flops(zeroFlops),
      // the same bytes under another shape (in place: an alias of its operand)
      Def("reshape", OpKind::Reshape)
          .in(1)
          .out(1)
          .types({Any}, {Any})
          .inPlace()
          .ownDtypes()
          .shape(shapeReshape)
          .dims(dimsReshape)
          .flops(zeroFlops)
          .bytes(CostBytes::None),
      Def("split", OpKind::Split)
          .in(1)
          .out(1, -1)
          .attrs({{"axis", Int}})
          .shape(shapeSplit)
          .dims(dimsSplit)
          .flops(zeroFlops),
      Def("concat", OpKind::Concat)
          .in(1, -1)
          .out(1)
          .attrs({{"axis", Int}})
          .shape(shapeSplit)
          .dims(dimsSplit)
          .flops(zeroFlops),
      // a whole buffer, or elements [in_offset, +count) to [out_offset, +count)
      Def("copy", OpKind::Copy)
          .in(1)
          .out(1)
          .types({Any}, {Any})
          .ownDtypes()
          .attrs({{"in_offset", Int}, {"out_offset", Int}, {"count", Int}})
          .shape(shapeCopy)
          .dims(dimsCopy)
          .flops(zeroFlops),
      // waits for the instructions of its wait list (no operands)
      Def("wait", OpKind::Wait).in(0).out(0).ownDtypes().flops(zeroFlops).bytes(CostBytes::None),
      // tensor rank t's chunk of dimension `dim` (axis: the mesh axis whose rank picks it)
      Def("tp_slice", OpKind::TpSlice)
          .in(1)
          .out(1)
          .attrs({{"axis", Int}, {"dim", Int}})
          .shape(shapeTpSlice)
          .dims(dimsTpSlice)
          .flops(zeroFlops),
  };
}

} // namespace bigc::format::ops
