// `bigc inspect model.bigc [--memory] [--json] [--timeline FILE.svg] [--rank R]`: what lives
// where, when, and why, read from a program file (docs/program-format.md). No MLIR here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bigc/Format/program.h"

#include "bigc/Support/format.h"

namespace bigc::inspect {

using bigc::humanBytes; // include/bigc/Support/format.h

// Bytes live at each instruction in one memory space, per role (from each buffer's `live`
// interval, inclusive). `roles` is sorted by the canonical order (param, optimizer, grad,
// input, activation, activation_grad, workspace, transfer, then others by name);
// `live[i][r]` is the bytes of role `roles[r]` live at instruction i.
struct SpaceTimeline {
  std::string space;
  std::vector<std::string> roles;
  std::vector<std::vector<int64_t>> live;
  int64_t peakBytes = 0;       // max over i of the sum over roles
  int64_t peakInstruction = 0; // first instruction where the peak is reached
  // Per instruction: bytes (of the total) held past their buffer's last touch because an
  // instruction of another stream touched them and the compute stream has not joined it yet.
  std::vector<int64_t> held;
};
SpaceTimeline computeTimeline(const format::Program &p, const std::string &space);

// Capacity the plan is checked against: the space's capacity_bytes, else the hardware's
// device/host capacity for spaces named so; 0 = unknown.
int64_t spaceCapacity(const format::Program &p, const format::Space &s);

// The report `bigc inspect` prints (text) and its JSON form.
std::string textReport(const format::Program &p, const std::string &path, int64_t rank, bool memory);
std::string jsonReport(const format::Program &p, const std::string &path, int64_t rank);
// Memory over the step as an SVG document (one panel per memory space); `top`, when the program
// is a stage of a pipelined one, adds the pipeline diagram above (its cost-model estimate).
std::string timelineSvg(const format::Program &p, const std::string &path, int64_t rank,
                        const format::Program *top = nullptr);
// The pipeline diagram as an SVG group at height `y` (1140 wide): a row per stage, a stretch per
// block (forward, backward, weight gradients, optimizer; the micro-batch written in it), the
// idle time hatched as bubbles, a time axis and a legend; `*height` gets its height.
std::string pipelineDiagram(const std::vector<format::PipelineBlock> &blocks, int64_t stages, int64_t microBatches,
                            const std::string &title, const std::string &subtitle, double y, double *height);

// The pipeline measured by `bigc run --profile --timeline`: `spans` holds, per stage, its (first
// rank's) instructions' start and end in the last step (steady clock seconds, NaN where not run
// on the host). The compute stream's instructions become blocks by micro-batch and kind as the
// cost model's (a gap of more than 50 us, or 0.1% of the step, waiting for a message ends one),
// times from the earliest start; `*stepSeconds` and `*bubble` (the mean over the stages of idle
// over busy time, the estimate's definition) are set.
std::vector<format::PipelineBlock>
measuredPipelineBlocks(const format::Program &p, const std::vector<std::vector<std::pair<double, double>>> &spans,
                       double *stepSeconds, double *bubble);
// The measured diagram, and below it the cost model's when the program has one, as an SVG document.
std::string measuredPipelineSvg(const format::Program &p, const std::string &path,
                                const std::vector<format::PipelineBlock> &blocks, double stepSeconds, double bubble);

// Entry point for `bigc inspect`; argv[first] is the first argument after `inspect`.
// Returns the exit status; throws format::UserError on bad input.
int inspectMain(int argc, char **argv, int first);
const char *inspectHelp();

} // namespace bigc::inspect
