// Writing a program file: the JSON payload, one buffer or instruction per line, behind the container
// line (docs/program-format.md). No MLIR here.
#include "bigc/Format/writer.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace bigc::format {

using json = nlohmann::json;

nlohmann::ordered_json hardwareJson(const Program &p) {
  nlohmann::ordered_json h = {{"name", p.hardwareName},
                              {"device_capacity_bytes", p.deviceCapacityBytes},
                              {"host_capacity_bytes", p.hostCapacityBytes},
                              {"device_reserve_bytes", p.deviceReserveBytes},
                              {"host_reserve_bytes", p.hostReserveBytes}};
  if (p.nvmeCapacityBytes > 0) h["nvme_capacity_bytes"] = p.nvmeCapacityBytes;
  if (!p.deviceReserveParts.empty()) {
    nlohmann::ordered_json parts = nlohmann::ordered_json::object();
    for (const auto &[name, b] : p.deviceReserveParts) parts[name] = b;
    h["device_reserve"] = parts;
  }
  return h;
}

namespace {

// The payload object of one program (one stage of a pipelined program, without its "stages").
json payloadJson(const Program &p) {
  json root = json::object();
  root["version"] = writtenVersion(p);
  root["producer"] = p.producer;
  root["source"] = p.source;
  root["config"] = {{"batch", p.batch},
                    {"seq", p.seq},
                    {"vocab", p.vocab},
                    {"precision", p.precision},
                    {"micro_batches", p.microBatches},
                    {"ranks", p.ranks},
                    {"zero", p.zero},
                    {"mesh", {{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}}}};
  if (p.cp > 1) root["config"]["mesh"]["cp"] = p.cp;
  if (p.tp > 1)
    root["config"]["tensor_parallel"] = {{"sequence_parallel", p.sequenceParallel ? 1 : 0},
                                         {"replicated", p.tpReplicated}};
  root["optimizer"] = {{"kind", p.optimizer.kind},         {"lr", p.optimizer.lr},
                       {"beta1", p.optimizer.beta1},       {"beta2", p.optimizer.beta2},
                       {"eps", p.optimizer.eps},           {"weight_decay", p.optimizer.weightDecay},
                       {"grad_clip", p.optimizer.gradClip}};
  if (p.optimizer.schedule.present()) {
    const LrSchedule &s = p.optimizer.schedule;
    root["optimizer"]["schedule"] = {{"kind", s.kind},
                                     {"warmup_steps", s.warmupSteps},
                                     {"decay_steps", s.decaySteps},
                                     {"wsd_decay_steps", s.wsdDecaySteps},
                                     {"min_lr", s.minLr}};
  }
  root["hardware"] = json(hardwareJson(p));
  if (!p.initialWeights.empty()) {
    root["initial_weights"] = {{"path", p.initialWeights}, {"bytes", p.initialWeightsBytes}};
    if (!p.initialNames.empty()) root["initial_weights"]["names"] = p.initialNames;
    if (!p.initialBuffers.empty()) root["initial_weights"]["buffers"] = p.initialBuffers;
  }
  if (!p.aliases.empty()) root["aliases"] = p.aliases;
  if (!p.hfConfig.empty()) root["hf"] = {{"config", json::parse(p.hfConfig)}, {"prefix", p.hfPrefix}};
  if (!p.nvmePath.empty()) root["nvme"] = {{"path", p.nvmePath}};
  json spaces = json::array();
  for (const auto &s : p.spaces)
    spaces.push_back({{"name", s.name},
                      {"arena_bytes", s.arenaBytes},
                      {"lower_bound_bytes", s.lowerBoundBytes},
                      {"capacity_bytes", s.capacityBytes}});
  root["spaces"] = spaces;
  json bufs = json::array();
  for (const auto &b : p.buffers) {
    json jb = {{"id", b.id},         {"name", b.name},   {"space", b.space},
               {"offset", b.offset}, {"bytes", b.bytes}, {"dtype", dtypeName(b.dtype)},
               {"shape", b.shape},   {"role", b.role},   {"live", {b.liveFirst, b.liveLast}}};
    if (!b.init.kind.empty()) {
      json ji = {{"kind", b.init.kind}};
      if (b.init.kind == "normal") ji["std"] = b.init.std;
      if (b.init.kind == "copy") ji["source"] = b.init.source;
      if (b.init.kind == "fill") ji["value"] = b.init.value;
      jb["init"] = ji;
    }
    if (b.shard) jb["shard"] = {{"axis", "dp"}, {"full_shape", b.fullShape}};
    if (b.shard && b.tiles > 1) jb["shard"]["tiles"] = b.tiles;
    if (b.tpDim >= 0) jb["tp"] = {{"dim", b.tpDim}, {"segments", b.tpSegments}, {"full_shape", b.tpFullShape}};
    if (b.vocabRows > 0) jb["vocab_rows"] = b.vocabRows;
    bufs.push_back(std::move(jb));
  }
  root["buffers"] = std::move(bufs);
  root["inputs"] = {{"tokens", p.tokenInputs}, {"targets", p.targetInputs}};
  if (!p.evalInstructions.empty()) {
    root["eval"] = {{"instructions", p.evalInstructions}};
    if (p.evalPlan.present())
      root["eval"]["plan"] = {
          {"arenas", p.evalPlan.arenas}, {"buffers", p.evalPlan.buffers}, {"offsets", p.evalPlan.offsets}};
  }
  root["loss"] = p.loss;
  if (p.lossScale >= 0 || p.foundInf >= 0) root["loss_scaling"] = {{"scale", p.lossScale}, {"found_inf", p.foundInf}};
  root["recompute"] = {{"policy", p.recompute.policy},
                       {"saved_bytes", p.recompute.savedBytes},
                       {"flops_added", p.recompute.flopsAdded},
                       {"forward_flops", p.recompute.forwardFlops}};
  if (p.estimate.present) {
    json cs = json::array();
    for (const auto &c : p.estimate.collectives)
      cs.push_back({{"op", c.op},
                    {"count", c.count},
                    {"seconds", c.seconds},
                    {"hidden_seconds", c.hiddenSeconds},
                    {"queued_seconds", c.queuedSeconds}});
    json ops = json::array();
    for (const auto &o : p.estimate.ops)
      ops.push_back({{"op", o.op},
                     {"stream", o.stream},
                     {"count", o.count},
                     {"seconds", o.seconds},
                     {"flops", o.flops},
                     {"bytes", o.bytes}});
    root["estimate"] = {{"step_seconds", p.estimate.stepSeconds},
                        {"compute_seconds", p.estimate.computeSeconds},
                        {"collectives", cs},
                        {"ops", ops}};
  }
  json insts = json::array();
  for (const auto &ins : p.instructions) {
    json attrs = json::object();
    for (const auto &[k, a] : ins.attrs) {
      if (a.isList)
        attrs[k] = a.list;
      else if (a.isReals) {
        json r = json::array();
        for (double x : a.reals) r.push_back(x); // doubles: written with a fraction or exponent, read back as reals
        attrs[k] = r;
      } else if (k == "transpose_a" || k == "transpose_b" || k == "clip" || k == "unscale" || k == "skip_on_overflow" ||
                 k == "write_half")
        attrs[k] = a.num != 0.0;
      else if (a.num == std::floor(a.num) && std::fabs(a.num) < 9007199254740992.0)
        attrs[k] = int64_t(a.num);
      else
        attrs[k] = a.num;
    }
    json ji = {{"op", ins.op}, {"in", ins.in}, {"out", ins.out}, {"attrs", attrs}, {"loc", ins.loc}};
    if (ins.stream != "compute") ji["stream"] = ins.stream;
    if (!ins.wait.empty()) ji["wait"] = ins.wait;
    if (!ins.phase.empty()) ji["phase"] = ins.phase;
    if (ins.recompute) ji["recompute"] = true;
    if (ins.microBatch >= 0) ji["micro_batch"] = ins.microBatch;
    if (ins.weightGrad) ji["weight_grad"] = true;
    insts.push_back(std::move(ji));
  }
  root["instructions"] = std::move(insts);
  if (p.pp > 1)
    root["pipeline"] = {{"stages", p.pp},
                        {"stage", p.stage},
                        {"schedule", p.ppSchedule},
                        {"virtual_stages", p.virtualStages},
                        {"micro_batches", p.microBatches}};
  if (p.pp > 1 && !p.ppSplit.empty()) root["pipeline"]["split"] = p.ppSplit;
  if (p.pp > 1 && p.pipelineEstimate.present) {
    const PipelineEstimate &pe = p.pipelineEstimate;
    json blocks = json::array();
    for (const PipelineBlock &b : pe.blocks) blocks.push_back({b.stage, b.microBatch, b.kind, b.start, b.end});
    root["pipeline"]["estimate"] = {{"hardware", pe.hardware},
                                    {"step_seconds", pe.stepSeconds},
                                    {"bubble", pe.bubble},
                                    {"busy_seconds", pe.busySeconds},
                                    {"blocks", std::move(blocks)}};
  }
  return root;
}

// One buffer / instruction per line: compact, yet readable and diffable. A pipelined program's
// "stages" are payloads laid out the same way, one after the other.
void layout(const json &root, const std::vector<const Program *> &stages, std::string &out) {
  out += "{";
  bool first = true;
  auto key = [&](const std::string &k) {
    out += first ? "\n" : ",\n";
    first = false;
    out += json(k).dump() + ": ";
  };
  for (auto it = root.begin(); it != root.end(); ++it) {
    key(it.key());
    if (it.value().is_array() && !it.value().empty() && it.value()[0].is_object()) {
      out += "[";
      for (size_t i = 0; i < it.value().size(); ++i) out += (i ? ",\n  " : "\n  ") + it.value()[i].dump();
      out += "\n]";
    } else {
      out += it.value().dump();
    }
  }
  if (!stages.empty()) {
    key("stages");
    out += "[";
    for (size_t i = 0; i < stages.size(); ++i) {
      out += i ? ",\n" : "\n";
      layout(payloadJson(*stages[i]), {}, out);
    }
    out += "\n]";
  }
  out += "\n}";
}

} // namespace

std::string serializeProgram(const Program &p) {
  std::vector<const Program *> stages;
  for (const Program &s : p.stages) stages.push_back(&s);
  std::string payload;
  layout(payloadJson(p), stages, payload);
  payload += "\n";
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a64(payload.data(), payload.size()));
  return "BIGC-PROGRAM " + std::to_string(writtenVersion(p)) + " " + std::to_string(payload.size()) + " " + hash +
         "\n" + payload;
}

} // namespace bigc::format
