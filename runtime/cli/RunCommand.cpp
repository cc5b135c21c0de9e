// `bigc run` / `bigc-run`: load a program, train for N steps, log, save weights.
#include "bigc/Runtime/run_command.h"
#include "bigc/Format/evaluation.h"
#include "bigc/Inspect/Inspect.h"
#include "bigc/Runtime/checkpoint.h"
#include "bigc/Runtime/data.h"
#include "bigc/Runtime/executor.h"
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/rank_group.h"
#include "bigc/Runtime/safetensors.h"
#include "bigc/Runtime/verifier.h"
#include "bigc/Support/cli.h"
#include "bigc/Support/file.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <map>
#include <cmath>
#include <cstdio>
#include <sys/stat.h>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <omp.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

extern "C" void openblas_set_num_threads(int);
extern "C" char *openblas_get_corename(void) __attribute__((weak));

namespace bigc::rt {

namespace {
// Debian's OpenBLAS (0.3.21) does not know some newer x86 CPUs and takes its Prescott kernels
// there: every matmul about 5 times slower (docs/performance.md, bench/cpu). It reads
// OPENBLAS_CORETYPE only as it loads, so on such a CPU with AVX-512 or AVX2 the run starts itself
// again once, the same command with the CPU's kernels named (set OPENBLAS_CORETYPE to choose).
void pickBlasKernels(char **argv) {
  if (std::getenv("OPENBLAS_CORETYPE") || !openblas_get_corename) return;
  const char *core = openblas_get_corename();
  if (!core || std::strcmp(core, "Prescott") != 0) return;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const char *want = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
                         ? "SkylakeX"
                     : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell"
                                                                                       : nullptr;
  if (!want) return;
  ::setenv("OPENBLAS_CORETYPE", want, 1);
  ::execv("/proc/self/exe", argv); // returns only on failure: go on with the Prescott kernels
  ::unsetenv("OPENBLAS_CORETYPE");
#else
  (void)argv;
#endif
}

// The options of `bigc run` and `bigc eval`, each declared once: its name, its value's metavariable
// (nullptr: a switch), its help, and which command takes it. The usage text and the parser's sets
// come from here; what a value must be is checked where it is used (most checks involve several).
enum : unsigned { kRun = 1, kEval = 2, kBoth = 3 };
struct RunFlag {
  const char *name, *metavar;
  unsigned commands;
  const char *help;
};
const RunFlag kRunFlags[] = {
    {"--backend", "B", kBoth,
     "cpu or cuda (default: cuda when this build has the CUDA backend and a GPU\n"
     "is visible, else cpu)"},
    {"--steps", "N", kRun, "training steps (default 10; 0 with --save-weights writes the initial weights)"},
    {"--data", "FILE", kBoth,
     "token file: llm.c's (16-bit ids, magic 20240520; 32-bit, magic 20240801, as\n"
     "`bigc data encode --tokenizer` writes them) or raw ids without a header\n"
     "(nanoGPT's uint16); run: default synthetic data; eval: the held-out file"},
    {"--data-dtype", "u16|u32", kBoth,
     "the width of a headerless file's ids (needed when the model's vocabulary\n"
     "exceeds 65,536: such a file is refused rather than misread)"},
    {"--synthetic", nullptr, kRun, "synthetic data: a random Markov chain over the vocabulary, from the seed"},
    {"--seed", "S", kBoth, "initialisation and synthetic-data seed (default 1337)"},
    {"--val-data", "FILE", kRun,
     "held-out token file: its loss (the program's forward alone, in the training\n"
     "plan's memory) after every --eval-every N steps and after the last, on the\n"
     "progress line and as val_loss in the log"},
    {"--eval-every", "N", kRun, "with --val-data: steps between evaluations (default: after the last only)"},
    {"--eval-batches", "K", kBoth,
     "the held-out file's first K batches each time (default: as many as it\n"
     "holds, up to 20; each the step's micro-batches x ranks x batch x seq)"},
    {"--log", "FILE.jsonl", kRun,
     "one JSON object per step, written as the step ends: step, loss, lr,\n"
     "val_loss, tokens_per_s, elapsed_s, peak_bytes (measured per memory space:\n"
     "the arena bytes the process touched, or the GPU memory in use),\n"
     "planned_bytes (the arenas), rss_peak_bytes, and loss_scale, skipped with\n"
     "fp16 loss scaling; --resume keeps the lines up to its step and continues\n"
     "the file; an error ends it with {\"error\": ...}"},
    {"--save-weights", "FILE", kRun,
     "safetensors of every weight (fp32 masters when there are) after the last\n"
     "step, under every name of the model's state_dict (a tied weight under\n"
     "each), as PyTorch's load_state_dict(strict=True) takes it"},
    {"--save-hf", "DIR", kRun,
     "after the last step, a directory Hugging Face's from_pretrained opens as\n"
     "it is: config.json and the weights as save_pretrained writes them (a tied\n"
     "weight once; a model from bigc import hf or bigc gen)"},
    {"--hf-shard-size", "SIZE", kRun, "--save-hf: the largest weights file (default 5 GB; shards with an index)"},
    {"--load-weights", "FILE", kBoth,
     "start from these weights (safetensors, the model's Hugging Face names; an\n"
     "imported model starts from its own weights without it); a Hugging Face\n"
     "index of several files, or a directory holding either; a tied weight under\n"
     "any of its names; 16-bit floats widen exactly, integers are refused"},
    {"--checkpoint", "PATH", kEval,
     "the weights of a checkpoint (a step directory, or a checkpoint directory's newest)"},
    {"--dump-grads", "FILE", kRun, "the last step's parameter gradients (f32, unscaled) as safetensors"},
    {"--threads", "N", kBoth, "CPU threads (default: all)"},
    {"--check-numerics", nullptr, kBoth,
     "stop at the first inf or nan an instruction produces, naming the step, the\n"
     "instruction and its place in model.mlir (slower: every output is checked)"},
    {"--no-verify", nullptr, kBoth, "skip the plan verifier (bigc verify) the loader runs on the program"},
    {"--checkpoint-dir", "DIR", kRun,
     "write checkpoints there (weights, optimizer state, step, data position):\n"
     "after every --checkpoint-every N steps, at the end, and on SIGINT/SIGTERM;\n"
     "each from a snapshot of the training state in host memory, written in the\n"
     "background while the next steps run (finished before the run exits); one\n"
     "run at a time (DIR/.lock)"},
    {"--checkpoint-sync", nullptr, kRun, "write checkpoints between steps instead (training waits; no snapshot)"},
    {"--checkpoint-every", "N", kRun, "steps between checkpoints (default: only at the end and on a signal)"},
    {"--keep-checkpoints", "K", kRun,
     "keep the newest K complete checkpoints (default 2; a damaged one is moved\n"
     "aside as step-N.damaged and not counted)"},
    {"--resume", nullptr, kRun,
     "continue from the newest complete checkpoint in --checkpoint-dir up to\n"
     "step --steps (bit for bit as if the run had not stopped)"},
    {"--profile", nullptr, kRun,
     "time every instruction (GPU time per stream on cuda) and print, per op and\n"
     "for the slowest instructions, the time per step (steps after the first);\n"
     "beside each op the cost model's time where the program was compiled with\n"
     "--hardware (several ranks: rank 0's, measured and estimated)"},
    {"--timeline", "FILE.svg", kRun,
     "a pipelined program (--pp): draw the last step's pipeline as measured (each\n"
     "stage's compute instructions by micro-batch, the bubbles hatched) above the\n"
     "cost model's; turns on --profile; needs 2 steps or more, one process"},
    {"--virtual-ranks", nullptr, kBoth,
     "a multi-rank program on the CUDA backend: every rank on this one GPU, each\n"
     "with its own arenas and streams, the collectives through host memory in\n"
     "the CPU backend's order (to check a sharded program on one GPU; slower)"},
    {"--comm-timeout", "S", kBoth,
     "multi-rank programs: the longest a rank waits for the others in one\n"
     "collective, and under mpirun a process for the others at start-up, before\n"
     "every rank stops with an error naming the missing ones (default 300)"},
    {"--nvme-path", "DIR", kBoth,
     "a program compiled with --offload nvme: the directory of its nvme space\n"
     "(one preallocated O_DIRECT scratch file per rank, gone when the run ends),\n"
     "instead of the one compiled in"},
    {"--quiet", nullptr, kBoth, "no progress lines"},
    {"--help", nullptr, kBoth, nullptr},
};

std::string usageOf(unsigned command) {
  std::string u = command == kRun
                      ? "usage: bigc run model.bigc [options]   (bigc-run model.bigc [options])\n"
                        "Trains the program: a step per batch of --data (or synthetic data).\n"
                      : "usage: bigc eval model.bigc --data FILE [--load-weights W | --checkpoint DIR] [options]\n"
                        "The held-out loss of the weights (--load-weights or --checkpoint; else an imported model's\n"
                        "own weights, or the program's initial values) on the first batches of FILE: the program's\n"
                        "evaluation program (its forward) in its own memory plan (bigc inspect shows it; a pipelined\n"
                        "or nvme program's runs in the training plan's memory). Prints `bigc eval: loss L on\n"
                        "K batches (N tokens) of FILE in S s` on stdout.\n";
  u += "options:\n";
  const size_t column = 22;
  for (const RunFlag &f : kRunFlags) {
    if (!(f.commands & command) || !f.help) continue;
    const std::string usage = f.metavar ? std::string(f.name) + " " + f.metavar : std::string(f.name);
    std::string lines = f.help;
    size_t start = 0;
    if (usage.size() + 1 > column) u += "  " + usage + "\n";
    for (bool first = usage.size() + 1 <= column;; first = false) {
      const size_t nl = lines.find('\n', start);
      u += "  " + (first ? usage + std::string(column - usage.size(), ' ') : std::string(column, ' ')) +
           lines.substr(start, nl == std::string::npos ? std::string::npos : nl - start) + "\n";
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  }
  if (command == kRun)
    u += "A program compiled for several ranks (--ranks, --zero) runs them all: a thread per rank in this\n"
         "process, or under `mpirun -np P` P processes of ranks/P ranks each (MPI between them). The\n"
         "global batch of a step is ranks x micro-batches x batch sequences.\n";
  return u;
}

std::string dirOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Fail before training when an output file could not be written later.
void checkWritable(const std::string &path, const char *option) {
  if (path.empty()) throw UserError(std::string(option) + " needs a file name");
  std::string dir = dirOf(path);
  if (::access(dir.c_str(), W_OK) != 0)
    throw UserError(std::string(option) + " " + path + ": cannot write into directory '" + dir +
                    "': " + std::strerror(errno));
}

// The training log (--log): one JSON object per line, written and flushed as each step ends, under
// its own name from the first step on, so that whatever stops the run (kill -9 included) leaves
// every step logged so far. A fresh run starts the file; a resumed run keeps the lines up to the
// step it resumed from (rewritten atomically, a torn last line dropped) and appends after them; an
// error exit appends the error as a last line {"error": ..., "step": ..., "exit_status": ...}.
class LogFile {
public:
  // resumedStep < 0: a fresh log.
  LogFile(const std::string &path, int64_t resumedStep) : path_(path) {
    std::string kept;
    if (resumedStep >= 0) {
      std::ifstream in(path, std::ios::binary);
      if (in) {
        std::string line;
        while (std::getline(in, line)) {
          if (in.eof()) break; // no newline after it: a line torn by a kill
          nlohmann::json j;
          try {
            j = nlohmann::json::parse(line);
          } catch (const nlohmann::json::exception &) {
            continue;
          }
          if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
              j["step"].get<int64_t>() <= resumedStep)
            kept += line + "\n";
        }
      }
      if (!kept.empty()) writeFileAtomic(path, kept);
    }
    f_ = std::fopen(path.c_str(), kept.empty() ? "w" : "a");
    if (!f_) throw UserError(path + ": cannot write: " + std::strerror(errno));
  }
  ~LogFile() {
    if (f_) std::fclose(f_);
  }
  void line(const std::string &s) {
    if (std::fputs(s.c_str(), f_) < 0 || std::fputc('\n', f_) < 0 || std::fflush(f_) != 0)
      throw UserError(path_ + ": write failed: " + std::strerror(errno));
  }
  // The last line of a run that stops with an error (best effort: the disk may be what failed).
  void error(const std::string &what, int64_t step, int status) {
    nlohmann::ordered_json j;
    j["step"] = step;
    j["error"] = what;
    j["exit_status"] = status;
    const std::string s = j.dump() + "\n";
    (void)std::fputs(s.c_str(), f_);
    (void)std::fflush(f_);
    (void)::fsync(fileno(f_));
  }
  void commit() {
    bool ok = std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0;
    ok = (std::fclose(f_) == 0) && ok;
    f_ = nullptr;
    if (!ok) throw UserError(path_ + ": write failed: " + std::strerror(errno));
  }

private:
  std::string path_;
  FILE *f_ = nullptr;
};

double roundTrip(float x) {
  if (!std::isfinite(x)) return x;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", double(x));
  return std::strtod(buf, nullptr);
}

std::string humanBytes(int64_t b) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = double(b);
  int u = 0;
  while (x >= 1024 && u < 4) x /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", x, units[u]);
  return buf;
}

std::string fmtMs(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", ms);
  return buf;
}

// --profile: time per step by op, and the slowest instructions.
void printProfile(const Engine &ex, double wall) {
  const int64_t n = ex.profiledSteps();
  if (n <= 0) {
    std::fprintf(stderr, "profile: run at least 2 steps (the first is not profiled)\n");
    return;
  }
  const Program &p = ex.program();
  const std::vector<double> sec = ex.instructionSeconds();
  std::map<std::string, std::pair<int64_t, double>> byOp;
  double total = 0;
  for (size_t i = 0; i < sec.size(); ++i) {
    const Instruction &ins = p.instructions[i];
    std::string key = ins.op + (ins.stream == "compute" ? "" : " [" + ins.stream + "]");
    byOp[key].first += 1;
    byOp[key].second += sec[i];
    total += sec[i];
  }
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(byOp.begin(), byOp.end());
  std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.second.second > b.second.second; });
  std::fprintf(stderr,
               "\nprofile (%s backend): %lld steps after the first; wall %.2f ms per step; instructions %.2f ms "
               "per step (summed over streams)\n",
               ex.backend(), (long long)n, 1e3 * wall / double(n), 1e3 * total / double(n));
  // The cost model's time of each op (compiled with --hardware) beside the measured one, both rank
  // 0's; the collectives, apart in the estimate, get none.
  std::map<std::string, double> est;
  const bool withEst = p.estimate.present && !p.estimate.ops.empty();
  if (withEst) {
    for (const OpEstimate &o : p.estimate.ops)
      est[o.op + (o.stream == "compute" ? "" : " [" + o.stream + "]")] += o.seconds;
    std::fprintf(stderr, "  %-28s %12s %12s %8s %14s %9s\n", "op [stream]", "instructions", "ms/step", "share",
                 ("est. " + p.hardwareName).c_str(), "measured/est.");
  } else
    std::fprintf(stderr, "  %-28s %12s %12s %8s\n", "op [stream]", "instructions", "ms/step", "share");
  for (const auto &[op, v] : rows) {
    std::fprintf(stderr, "  %-28s %12lld %12.3f %7.1f%%", op.c_str(), (long long)v.first, 1e3 * v.second / double(n),
                 total > 0 ? 100.0 * v.second / total : 0.0);
    if (withEst) {
      auto it = est.find(op);
      if (it != est.end() && it->second >= 1e-6) // (below a microsecond the ratio says nothing)
        std::fprintf(stderr, " %14.3f %9.2f", 1e3 * it->second, v.second / double(n) / it->second);
      else
        std::fprintf(stderr, " %14s %9s", it != est.end() ? fmtMs(1e3 * it->second).c_str() : "-", "-");
    }
    std::fprintf(stderr, "\n");
  }
  if (withEst)
    std::fprintf(stderr, "  cost model on %s: %.2f ms per step, compute %.2f ms (measured/est. of the step: %.2f)\n",
                 p.hardwareName.c_str(), 1e3 * p.estimate.stepSeconds, 1e3 * p.estimate.computeSeconds,
                 p.estimate.stepSeconds > 0 ? wall / double(n) / p.estimate.stepSeconds : 0.0);
  // Pipeline stages: each stage's compute stream against the step's wall time, as the cost model's
  // estimate has it (bigc inspect). Meaningful with a core per rank (threads per rank >= 1).
  const std::vector<double> busy = ex.stageBusySeconds();
  if (!busy.empty() && wall > 0) {
    double idle = 0;
    std::string per;
    for (double b : busy) {
      idle += b > 0 ? (wall - b) / b : 0;
      per += (per.empty() ? "" : ", ") + fmtMs(1e3 * b / double(n));
    }
    const double bubble = idle / double(busy.size());
    std::fprintf(stderr,
                 "  pipeline (measured): %zu stages, compute busy %s ms per step of %.2f ms: bubble %.3f of the "
                 "busy time",
                 busy.size(), per.c_str(), 1e3 * wall / double(n), bubble);
    if (p.pipelineEstimate.present)
      std::fprintf(stderr, " (cost model on %s: %.3f)", p.pipelineEstimate.hardware.c_str(), p.pipelineEstimate.bubble);
    std::fprintf(stderr, "\n");
  }
  std::vector<size_t> idx(sec.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return sec[a] > sec[b]; });
  std::fprintf(stderr, "  slowest instructions:\n");
  for (size_t k = 0; k < std::min<size_t>(12, idx.size()); ++k) {
    const Instruction &ins = p.instructions[idx[k]];
    std::string shapes;
    for (int64_t id : ins.in) {
      const Buffer &b = p.buffers[size_t(id)];
      std::string sh;
      for (int64_t d : b.shape) sh += (sh.empty() ? "" : "x") + std::to_string(d);
      shapes += (shapes.empty() ? "" : ", ") + sh + " " + dtypeName(b.dtype);
    }
    std::fprintf(stderr, "  %6zu %-20s %9.3f ms  (%s)%s%s\n", idx[k], ins.op.c_str(), 1e3 * sec[idx[k]] / double(n),
                 shapes.c_str(), ins.loc.empty() ? "" : " at ", ins.loc.c_str());
  }
}

// SIGINT/SIGTERM during training: the step under way ends, a checkpoint is written (with
// --checkpoint-dir), and the run exits 0. A second signal acts as usual (the handler resets).
std::atomic<int> stopSignal{0};
struct sigaction oldInt, oldTerm;
extern "C" void onStop(int sig) { stopSignal.store(sig); }
void installStopHandlers() {
  stopSignal.store(0);
  struct sigaction sa {};
  sa.sa_handler = onStop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &sa, &oldInt);
  sigaction(SIGTERM, &sa, &oldTerm);
}
void restoreStopHandlers() {
  sigaction(SIGINT, &oldInt, nullptr);
  sigaction(SIGTERM, &oldTerm, nullptr);
}

int runBody(int argc, char **argv, int first, bool evalCmd) {
  std::set<std::string> valued, switches;
  for (const RunFlag &f : kRunFlags)
    if (f.commands & (evalCmd ? kEval : kRun)) (f.metavar ? valued : switches).insert(f.name);
  cli::Args args = cli::parse(argc, argv, first, valued, switches, evalCmd ? "bigc eval" : "bigc run");
  if (args.has("--help")) {
    std::cout << usageOf(evalCmd ? kEval : kRun);
    return 0;
  }
  if (evalCmd && !args.has("--data"))
    throw UserError("--data FILE: the held-out token file to evaluate on is missing\n" + usageOf(kEval));
  if (evalCmd && args.has("--load-weights") && args.has("--checkpoint"))
    throw UserError("--load-weights and --checkpoint exclude each other (a checkpoint holds the weights)");
  // Validation during training: --val-data (held-out tokens), --eval-every N, --eval-batches K.
  if (!evalCmd && (args.has("--eval-every") || args.has("--eval-batches")) && !args.has("--val-data"))
    throw UserError(std::string(args.has("--eval-every") ? "--eval-every" : "--eval-batches") +
                    " needs --val-data FILE (the held-out token file to evaluate on)");
  if (args.has("--hf-shard-size") && !args.has("--save-hf"))
    throw UserError("--hf-shard-size: the largest file of --save-hf DIR; give it with --save-hf");
  const int64_t hfShard = args.has("--hf-shard-size") ? args.size("--hf-shard-size", 0) : int64_t(5000000000);
  if (hfShard < 1) throw UserError("--hf-shard-size must be positive");
  const int64_t evalEvery = args.integer("--eval-every", 0);
  if (args.has("--eval-every") && evalEvery < 1)
    throw UserError("--eval-every must be >= 1, got " + std::to_string(evalEvery));
  const int64_t evalBatchesAsked = args.integer("--eval-batches", 0);
  if (args.has("--eval-batches") && evalBatchesAsked < 1)
    throw UserError("--eval-batches must be >= 1, got " + std::to_string(evalBatchesAsked));
  const std::string ckptDir = args.str("--checkpoint-dir", "");
  if (args.has("--checkpoint-dir") && ckptDir.empty()) throw UserError("--checkpoint-dir needs a directory");
  for (const char *opt : {"--checkpoint-every", "--resume", "--keep-checkpoints", "--checkpoint-sync"})
    if (args.has(opt) && ckptDir.empty())
      throw UserError(std::string(opt) + " needs --checkpoint-dir DIR (where checkpoints are written and read)");
  const int64_t every = args.integer("--checkpoint-every", 0);
  if (args.has("--checkpoint-every") && every < 1)
    throw UserError("--checkpoint-every must be >= 1, got " + std::to_string(every));
  const int64_t keep = args.integer("--keep-checkpoints", 2);
  if (keep < 1) throw UserError("--keep-checkpoints must be >= 1, got " + std::to_string(keep));
  const bool resume = args.has("--resume");
  if (resume && args.has("--load-weights"))
    throw UserError("--resume and --load-weights exclude each other (a checkpoint holds the weights)");
  if (args.positional.empty()) throw UserError("missing the program file\n" + usageOf(evalCmd ? kEval : kRun));
  if (args.positional.size() > 1)
    throw UserError("one program file expected, got " + std::to_string(args.positional.size()) + ": '" +
                    args.positional[0] + "', '" + args.positional[1] + "'...");
  const std::string programPath = args.positional[0];

  // Default: cuda when this build has it and a GPU is visible, else cpu.
  std::string backend = args.str("--backend", "");
  if (!backend.empty() && backend != "cpu" && backend != "cuda")
    throw UserError("--backend: unknown backend '" + backend + "' (cpu or cuda)");
  if (backend == "cuda") {
    std::string why;
    if (!cudaBackendCompiled())
      throw UserError("--backend cuda: this build has no CUDA backend (no CUDA toolkit was found when it was "
                      "built); rebuild where nvcc is on PATH, or use --backend cpu");
    if (!cudaDeviceVisible(&why)) throw UserError("--backend cuda: " + why + "; use --backend cpu");
  }

  int64_t steps = args.integer("--steps", 10);
  if (steps < 0) throw UserError("--steps must be >= 0, got " + std::to_string(steps));
  if (args.has("--data") && args.has("--synthetic"))
    throw UserError("--data and --synthetic exclude each other; pick one");
  std::optional<data::TokenWidth> rawWidth;
  if (args.has("--data-dtype")) {
    const std::string w = args.str("--data-dtype");
    if (w != "u16" && w != "u32") throw UserError("--data-dtype: expected u16 or u32, got '" + w + "'");
    if (!args.has("--data") && !args.has("--val-data"))
      throw UserError("--data-dtype: the width of a token file's ids; give it with --data FILE (or --val-data FILE)");
    rawWidth = w == "u16" ? data::TokenWidth::U16 : data::TokenWidth::U32;
  }
  uint64_t seed = uint64_t(args.integer("--seed", 1337));
  int64_t threads = args.integer("--threads", 0);
  if (args.has("--threads") && threads < 1) throw UserError("--threads must be >= 1, got " + std::to_string(threads));
  if (args.has("--dump-grads") && steps < 1) throw UserError("--dump-grads needs at least one step (--steps >= 1)");
  bool quiet = args.has("--quiet");
  for (const char *opt : {"--log", "--save-weights", "--dump-grads", "--timeline", "--save-hf"})
    if (args.has(opt)) checkWritable(args.str(opt), opt);
  if (threads > 0) {
    omp_set_num_threads(int(threads));
    openblas_set_num_threads(int(threads));
  }

  // SIGINT/SIGTERM from here on end the run after a step (with a checkpoint): one that comes while
  // the program loads or a checkpoint is resumed stops the run after its first step.
  installStopHandlers();
  const double commTimeout = args.has("--comm-timeout") ? args.number("--comm-timeout", 300.0) : 300.0;
  if (!(commTimeout > 0)) throw UserError("--comm-timeout must be a positive number of seconds");
  // Under mpirun: MPI's start-up first (before the program is loaded, so that the processes meet
  // at once), within --comm-timeout: a process that never arrives is named, and every one stops.
  mpiStart(commTimeout);

  using clock = std::chrono::steady_clock;
  const auto runBegan = clock::now();
  auto secondsSince = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  Program prog = loadProgram(programPath);
  // The nvme space's directory: the one compiled in, or --nvme-path.
  bool nvme = false;
  for (int64_t st = 0; st < prog.pp; ++st) nvme |= prog.stageProgram(st).space("nvme") != nullptr;
  if (args.has("--nvme-path")) {
    if (!nvme)
      throw UserError("--nvme-path: " + programPath +
                      " keeps nothing in the nvme space (compile with --offload nvme --nvme-path DIR)");
    for (int64_t st = 0; st < prog.pp; ++st) prog.stageProgram(st).nvmePath = args.str("--nvme-path");
  }
  // Pipeline stages run on the CPU backend (the default backend for them), on one GPU with
  // --virtual-ranks, or with --backend cuda on one GPU per rank over NCCL (not yet run on GPUs).
  const bool virtualRanks = args.has("--virtual-ranks");
  if (backend.empty())
    backend = (prog.pp == 1 || virtualRanks) && cudaBackendCompiled() && cudaDeviceVisible(nullptr) ? "cuda" : "cpu";
  if (args.has("--timeline") && prog.pp == 1)
    throw UserError("--timeline draws the measured pipeline diagram of a pipelined program (compiled with --pp); " +
                    programPath + " has one stage: `bigc inspect --timeline FILE.svg` draws its memory over the step");
  if (args.has("--timeline") && virtualRanks)
    throw UserError("--timeline draws the CPU backend's measured pipeline; run it with --backend cpu (not with "
                    "--virtual-ranks)");
  if (args.has("--timeline") && mpiWorld().first > 1)
    throw UserError("--timeline: not under mpirun (the stages' clocks are compared in one process); run all ranks in "
                    "one process");
  if (!args.has("--no-verify")) verifyProgram(prog, programPath, /*validated=*/true); // bigc verify's proof
  // `bigc eval`: the evaluation program with its own memory plan (no gradients, no optimizer
  // state, its activations packed on their own), where the program has one; else the evaluation
  // runs in the training plan's arenas.
  std::string evalMemory;
  if (evalCmd && hasEvaluationPlan(prog)) {
    for (const auto &[space, bytes] : prog.evalPlan.arenas) {
      const Space *s = prog.space(space);
      evalMemory += std::string(evalMemory.empty() ? "" : ", ") + space + " " + humanBytes(bytes) + " (the step's " +
                    humanBytes(s ? s->arenaBytes : 0) + ")";
    }
    evalMemory = "its own memory plan: " + evalMemory;
    prog = evaluationProgram(prog);
  } else if (evalCmd) {
    evalMemory = std::string("the training plan's memory (") +
                 (prog.pp > 1 ? "a pipelined program"
                  : nvme      ? "a program with an nvme space"
                              : "compiled by an older bigc") +
                 " has no evaluation plan of its own)";
  }
  const Program stages = args.has("--timeline") ? prog : Program(); // the engine takes `prog`
  const double programSeconds = secondsSince(runBegan);
  // Context parallelism: the program's seq is one rank's part of sequences of cp x seq tokens, and
  // the cp ranks of a data group read one slice together.
  const int64_t B = prog.batch, T = prog.seq * prog.cp, vocab = prog.vocab, R = prog.ranks, tpSize = prog.tp;
  if (virtualRanks && (backend != "cuda" || R == 1))
    throw UserError("--virtual-ranks runs the ranks of a multi-rank program on one GPU (the CUDA backend); " +
                    programPath +
                    (R == 1 ? " has one rank" : " runs on the " + backend + " backend here (--backend cuda)"));
  const int64_t dpSize = prog.dp / prog.cp, ppSize = prog.pp, cpSize = prog.cp;
  // Under mpirun: this process runs ranks/world of the ranks; only process 0 writes and prints.
  const auto [world, proc] = mpiWorld();
  if (world > 1 && R == 1)
    throw UserError(programPath + " is a program of one rank, but mpirun started " + std::to_string(world) +
                    " processes; compile with --ranks " + std::to_string(world) +
                    " (or a multiple) or run without mpirun");
  if (world > 1 && args.has("--dump-grads"))
    throw UserError(
        "--dump-grads: not under mpirun (the gradients are in every process); run all ranks in one process");
  const bool leader = proc == 0;
  if (args.has("--dump-grads") && R > 1 && prog.zero >= 1)
    throw UserError("--dump-grads: the gradients of this program are sharded over its " + std::to_string(R) +
                    " ranks (ZeRO " + std::to_string(prog.zero) + "); dump them from a --zero 0 program (or one rank)");
  if (args.has("--dump-grads") && prog.tp > 1)
    throw UserError("--dump-grads: the gradients of this program are split over its " + std::to_string(prog.tp) +
                    " tensor ranks (--tp " + std::to_string(prog.tp) +
                    "); dump them from a program without --tp (or one rank)");

  // Held-out data: `bigc eval`'s --data, or `bigc run --val-data`. Its batches are the training
  // step's shape (K micro-batches per data-parallel rank); every evaluation reads the first
  // --eval-batches of them (default: as many as the file holds, up to 20), as llm.c does.
  std::unique_ptr<data::FileTokenSource> valSource;
  int64_t evalBatches = 0;
  const int64_t evalMicro = prog.microBatches * dpSize; // micro-batches of one evaluation batch
  const int64_t evalTokens = evalMicro * B * T;         // tokens of one evaluation batch
  if (evalCmd || args.has("--val-data")) {
    const std::string vpath = args.str(evalCmd ? "--data" : "--val-data");
    valSource = std::make_unique<data::FileTokenSource>(vpath, B, T, vocab, rawWidth);
    const int64_t fits = (valSource->file().size() - 1) / evalTokens;
    if (fits < 1)
      throw UserError("data file " + vpath + " has " + std::to_string(valSource->file().size()) +
                      " tokens, fewer than one evaluation batch (" + std::to_string(evalMicro) + " x " +
                      std::to_string(B) + " x " + std::to_string(T) + " = " + std::to_string(evalTokens) +
                      " tokens, and one more for the last target)");
    if (evalBatchesAsked > fits)
      throw UserError("--eval-batches " + std::to_string(evalBatchesAsked) + ": " + vpath + " holds " +
                      std::to_string(fits) + " evaluation batch(es) of " + std::to_string(evalTokens) + " tokens");
    evalBatches = evalBatchesAsked > 0 ? evalBatchesAsked : std::min<int64_t>(fits, 20);
  }
  std::unique_ptr<data::TokenSource> source;
  if (args.has("--data") && !evalCmd)
    source = std::make_unique<data::FileTokenSource>(args.str("--data"), B, T, vocab, rawWidth);
  else
    source = std::make_unique<data::SyntheticTokenSource>(B, T, vocab, seed);

  if (!leader) quiet = true;
  // Background checkpoints hold a snapshot of the training state in host memory: it must fit
  // beside the arenas this process holds in RAM.
  const bool background = !ckptDir.empty() && !args.has("--checkpoint-sync");
  const bool asyncCheckpoints = background && leader;
  const int64_t snapshot = asyncCheckpoints ? prog.stateBytes() : 0;
  if (asyncCheckpoints) {
    int64_t resident = 0;
    const int64_t localRanks = world > 1 ? R / world : R / prog.pp; // of each pipeline stage
    for (int64_t st = 0; st < prog.pp; ++st)
      for (const auto &sp : prog.stageProgram(st).spaces)
        if (sp.name != "nvme" && (backend == "cpu" || sp.name != "device")) resident += sp.arenaBytes * localRanks;
    const long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
    const int64_t physical = pages > 0 && pageSize > 0 ? int64_t(pages) * int64_t(pageSize) : 0;
    if (physical > 0 && resident + snapshot > physical)
      throw UserError("--checkpoint-dir: checkpoints are written in the background from a snapshot of the "
                      "training state (" +
                      humanBytes(snapshot) + "), which does not fit in this machine's " + humanBytes(physical) +
                      " of memory beside the arenas (" + humanBytes(resident) +
                      "); add --checkpoint-sync to write them between steps without a snapshot");
  }
  const auto engineBegan = clock::now();
  std::unique_ptr<Engine> engine;
  // Weights about to be loaded whole are not given initial values first.
  std::optional<Engine::LoadingWeights> loading;
  // `bigc eval --checkpoint PATH`: a checkpoint's weights (a step directory, or a checkpoint
  // directory's newest complete one).
  std::string weightsPath = args.str("--load-weights", "");
  if (args.has("--checkpoint")) {
    const std::string c = args.str("--checkpoint");
    if (::access((c + "/manifest.json").c_str(), F_OK) == 0) {
      weightsPath = c + "/model.safetensors";
    } else {
      std::vector<std::string> skipped;
      checkpoint::Info n = checkpoint::latest(c, &skipped);
      for (const auto &sk : skipped) std::fprintf(stderr, "bigc eval: skipping %s\n", sk.c_str());
      if (n.path.empty()) throw UserError("--checkpoint " + c + ": no complete checkpoint there");
      weightsPath = n.path + "/model.safetensors";
    }
  }
  if (!weightsPath.empty() || !prog.initialWeights.empty()) loading.emplace();
  if (backend == "cuda" && R > 1)
    engine = makeCudaRankGroup(std::move(prog), seed, commTimeout, virtualRanks);
  else if (backend == "cuda")
    engine = makeCudaEngine(std::move(prog), seed);
  else if (R > 1)
    engine = makeCpuRankGroup(std::move(prog), seed, commTimeout);
  else
    engine = std::make_unique<Executor>(std::move(prog), seed);
  Engine &ex = *engine;
  loading.reset();
  const double initSeconds = secondsSince(engineBegan); // arenas, binding, initial values
  const auto loadBegan = clock::now();
  double loadSeconds = 0;
  if (!weightsPath.empty()) {
    safetensors::loadWeightsFrom(ex, weightsPath);
    loadSeconds = secondsSince(loadBegan);
  } else if (!ex.program().initialWeights.empty()) {
    // An imported model starts from the module's own weights (bigc import wrote them).
    const std::string &path = ex.program().initialWeights;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      throw UserError("the program starts from the imported model's weights " + path +
                      ", which are not there (copy them there, or start from other weights with --load-weights FILE)");
    safetensors::loadWeightsFrom(ex, path);
    loadSeconds = secondsSince(loadBegan);
    if (!quiet) std::fprintf(stderr, "bigc run: initial weights: %s (the imported model's)\n", path.c_str());
  }
  if (args.has("--dump-grads")) ex.enableGradCapture();
  if (args.has("--check-numerics")) ex.enableNumericsCheck();
  // The held-out loss: the evaluation program on the first `evalBatches` batches of the held-out
  // file, each K micro-batches per data-parallel rank (the training step's layout), their mean.
  struct HeldOut {
    double loss = 0, seconds = 0;
    int64_t tokens = 0;
  };
  std::vector<int32_t> evalIn, evalTg;
  auto evaluateHeldOut = [&]() -> HeldOut {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t bt = B * T, n = evalMicro;
    evalIn.resize(size_t(n * bt)), evalTg.resize(size_t(n * bt));
    valSource->rewind();
    double sum = 0;
    for (int64_t j = 0; j < evalBatches; ++j) {
      for (int64_t k = 0; k < n; ++k) valSource->next(evalIn.data() + k * bt, evalTg.data() + k * bt);
      sum += double(ex.evaluate(evalIn.data(), evalTg.data()));
    }
    return HeldOut{sum / double(evalBatches),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                   evalBatches * evalTokens};
  };
  if (evalCmd) {
    if (!quiet) std::fprintf(stderr, "bigc eval: the evaluation program in %s\n", evalMemory.c_str());
    const HeldOut h = evaluateHeldOut();
    if (leader)
      std::printf("bigc eval: loss %.6f on %lld batches (%lld tokens) of %s in %.2f s\n", h.loss,
                  (long long)evalBatches, (long long)h.tokens, args.str("--data").c_str(), h.seconds);
    engine.reset();
    mpiFinalize();
    return 0;
  }
  int64_t start = 0; // the step a resumed run continues from
  // One run at a time on a checkpoint directory (process 0 writes under mpirun).
  std::unique_ptr<checkpoint::DirLock> ckptLock;
  if (!ckptDir.empty() && leader) ckptLock = std::make_unique<checkpoint::DirLock>(ckptDir);
  if (!ckptDir.empty() && !resume) {
    // A fresh run must not mix its checkpoints with another run's (pruning by step would keep the
    // other run's newer ones, and --resume would pick them up).
    std::vector<std::string> ignored;
    checkpoint::Info other = checkpoint::latest(ckptDir, &ignored);
    if (!other.path.empty())
      throw UserError("--checkpoint-dir " + ckptDir + " holds checkpoints of a run (newest: " + other.path +
                      "); continue it with --resume, or give this run another directory");
  }
  if (resume) {
    std::vector<std::string> skipped, incomplete;
    // Damaged checkpoints newer than the one resumed are moved aside (by process 0), so that they are
    // never resumed, kept or counted again. An incomplete one (a run stopped while writing it) held
    // nothing whole: it is passed over (the next checkpoint removes it), and without a complete
    // checkpoint the run starts at step 0.
    checkpoint::Info latest = checkpoint::latest(ckptDir, &skipped, /*quarantine=*/leader, &incomplete);
    for (const auto &s : incomplete)
      if (leader) std::fprintf(stderr, "bigc run: passing over %s\n", s.c_str());
    for (const auto &s : skipped)
      if (leader) std::fprintf(stderr, "bigc run: skipping %s\n", s.c_str());
    if (latest.path.empty() && !skipped.empty())
      throw UserError("--resume: no complete checkpoint in " + ckptDir + " (" + std::to_string(skipped.size()) +
                      " skipped, above); remove them to start over");
    if (latest.path.empty()) {
      if (!quiet) std::fprintf(stderr, "bigc run: no checkpoint in %s: starting at step 0\n", ckptDir.c_str());
    } else {
      const auto resumeBegan = clock::now();
      checkpoint::Info info = checkpoint::load(latest.path, ex, *source);
      loadSeconds = secondsSince(resumeBegan);
      start = info.step;
      if (!quiet)
        std::fprintf(stderr, "bigc run: resumed from %s (step %lld, loss %.4f)\n", info.path.c_str(),
                     (long long)info.step, info.loss);
    }
    if (start >= steps && !quiet)
      std::fprintf(stderr, "bigc run: the checkpoint is at step %lld, --steps is %lld: no steps to run%s\n",
                   (long long)start, (long long)steps,
                   args.has("--save-weights") ? " (its weights are written to --save-weights)" : "");
  }
  const bool nothingToDo = start >= steps;
  if (nothingToDo && valSource) {
    const HeldOut h = evaluateHeldOut();
    if (leader)
      std::fprintf(stderr, "bigc run: val loss %.6f at step %lld (%lld tokens, %.2f s)\n", h.loss, (long long)start,
                   (long long)h.tokens, h.seconds);
  }
  const bool profile = args.has("--profile") || args.has("--timeline");
  if (args.has("--timeline") && !nothingToDo && steps - start < 2)
    throw UserError("--timeline needs 2 steps or more (--steps; the first warms up, the last is drawn)");
  if (profile) ex.enableProfiling();

  std::unique_ptr<LogFile> log;
  if (args.has("--log") && leader) log = std::make_unique<LogFile>(args.str("--log"), resume ? start : -1);
  int64_t current = start; // the step under way (the error line of the log names it)
  try {

    const auto arenas = ex.arenaBytes();
    const int64_t K = ex.program().microBatches;
    if (!quiet) {
      std::string spaces;
      for (const auto &[name, bytes] : arenas) spaces += (spaces.empty() ? "" : ", ") + name + " " + humanBytes(bytes);
      std::string streams;
      for (const auto &s : ex.streams()) streams += (streams.empty() ? "" : ", ") + s;
      std::fprintf(
          stderr,
          "bigc run: %s: %s backend, %lld parameters, %s, batch %s%lld x %lldx%lld, arenas: %s%s; streams: %s; "
          "data: %s; %lld steps\n",
          programPath.c_str(), ex.backend(), (long long)ex.program().parameterCount(), ex.program().precision.c_str(),
          R > 1 ? (std::to_string(R) + " ranks" +
                   (tpSize > 1 || ppSize > 1 || cpSize > 1
                        ? " (dp " + std::to_string(dpSize) + (cpSize > 1 ? " x cp " + std::to_string(cpSize) : "") +
                              " x tp " + std::to_string(tpSize) +
                              (ppSize > 1 ? " x pp " + std::to_string(ppSize) : "") + ")"
                        : "") +
                   " x ")
                      .c_str()
                : "",
          (long long)K, (long long)B, (long long)T, spaces.c_str(), R > 1 ? " per rank" : "", streams.c_str(),
          source->describe().c_str(), (long long)steps);
      if (!ex.deviceInfo().empty()) std::fprintf(stderr, "bigc run: %s\n", ex.deviceInfo().c_str());
      const Engine::InitTimes &it = ex.initTimes();
      std::fprintf(stderr,
                   "bigc run: ready in %.2f s: program loaded and verified %.2f s, engine %.2f s (initial values %s in "
                   "%.2f s, %.2f GB/s; zero-initialised buffers %s in %.2f s; compute copies %.2f s)",
                   secondsSince(runBegan), programSeconds, initSeconds, humanBytes(it.valueBytes).c_str(),
                   it.valuesSeconds, it.valuesSeconds > 0 ? double(it.valueBytes) / it.valuesSeconds / 1e9 : 0.0,
                   humanBytes(it.zeroBytes).c_str(), it.zerosSeconds, it.copiesSeconds);
      if (loadSeconds > 0)
        std::fprintf(stderr, ", %s %.2f s", resume ? "checkpoint loaded" : "weights loaded", loadSeconds);
      std::fprintf(stderr, "\n");
      if (asyncCheckpoints)
        std::fprintf(stderr, "bigc run: checkpoints written in the background from a snapshot of %s of host memory\n",
                     humanBytes(snapshot).c_str());
    }

    // K micro-batches per step, in data order: micro-batch k of step s is batch s·K + k.
    const int64_t bt = B * T;
    // The global batch: micro-batch k of data-parallel rank r is chunk k*DP + r (the data order of `bigc run --data`;
    // the tensor-parallel ranks of a group read the same chunk).
    const int64_t DP = dpSize;
    std::vector<int32_t> tokens(size_t(K * DP * bt)), targets(size_t(K * DP * bt));
    nlohmann::ordered_json planned = nlohmann::ordered_json::object();
    for (const auto &[name, bytes] : arenas) planned[name] = bytes;
    const auto began = clock::now(); // the clock of the log's elapsed_s and of the checkpoints' timings
    float loss = 0.f;
    double profiledWall = 0.0;
    int64_t lastSaved = -1;
    std::unique_ptr<checkpoint::Writer> writer;
    if (asyncCheckpoints) writer = std::make_unique<checkpoint::Writer>(ckptDir, int(keep), began);
    auto reportWritten = [&](const checkpoint::Info &info, const checkpoint::WriteStats &st) {
      if (quiet || info.path.empty()) return;
      const double sec = st.endedS - st.beganS;
      std::fprintf(stderr, "bigc run: checkpoint %s (%s in %.2f s, %.2f GB/s, written in the background)\n",
                   info.path.c_str(), humanBytes(st.bytes).c_str(), sec, sec > 0 ? double(st.bytes) / sec / 1e9 : 0.0);
    };
    // A checkpoint that could not be written: the error, and what there is to continue from.
    auto newestComplete = [&]() -> std::string {
      checkpoint::Info n = checkpoint::latest(ckptDir, nullptr);
      if (n.path.empty()) return "there is no complete checkpoint in " + ckptDir + " to continue from";
      return "the newest complete checkpoint is " + n.path + " (step " + std::to_string(n.step) +
             "): continue from it with the same command and --resume";
    };
    auto checkpointFailed = [&](const std::string &what, const UserError &e) {
      return UserError(what + ": " + e.what() + "; " + newestComplete());
    };
    auto waitWriter = [&] {
      checkpoint::WriteStats st;
      try {
        checkpoint::Info done = writer->wait(&st);
        reportWritten(done, st);
      } catch (const UserError &e) {
        throw checkpointFailed("a checkpoint could not be written", e);
      }
    };
    auto saveCheckpoint = [&](double l) {
      if (!leader) { // under mpirun: process 0 writes; the others take part in gathering the shards
        checkpoint::follow(ex, background ? checkpoint::Follow::Snapshot : checkpoint::Follow::Checkpoint);
        lastSaved = ex.stepCount();
        return;
      }
      if (writer) {
        waitWriter(); // one in flight at a time
        writer->save(ex, *source, seed, l);
        lastSaved = ex.stepCount();
        if (!quiet)
          std::fprintf(stderr,
                       "bigc run: checkpoint of step %lld: snapshot taken in %.2f s, writing it in the background\n",
                       (long long)lastSaved, writer->lastSnapshotSeconds());
        return;
      }
      checkpoint::Info info;
      try {
        info = checkpoint::save(ckptDir, ex, *source, seed, l, int(keep), began);
      } catch (const UserError &e) {
        throw checkpointFailed("the checkpoint of step " + std::to_string(ex.stepCount()) + " could not be written", e);
      }
      lastSaved = info.step;
      if (!quiet) std::fprintf(stderr, "bigc run: checkpoint %s\n", info.path.c_str());
    };
    for (int64_t s = start + 1; s <= steps; ++s) {
      current = s;
      const auto t0 = clock::now();
      for (int64_t k = 0; k < K * DP; ++k) source->next(tokens.data() + k * bt, targets.data() + k * bt);
      loss = ex.step(tokens.data(), targets.data());
      const auto t1 = clock::now();
      if (profile && s == start + 1) ex.resetProfile(); // the first step warms up (allocations of libraries, caches)
      if (profile && s > start + 1) profiledWall += std::chrono::duration<double>(t1 - t0).count();
      double dt = std::chrono::duration<double>(t1 - t0).count();
      double elapsed = std::chrono::duration<double>(t1 - began).count();
      double tps = dt > 0 ? double(K * DP * bt) / dt : 0.0;
      std::optional<HeldOut> val; // every --eval-every steps and after the last
      if (valSource && ((evalEvery > 0 && s % evalEvery == 0) || s == steps)) val = evaluateHeldOut();
      const bool scaling = ex.hasLossScaling();
      if (!quiet) {
        std::string extra;
        if (scaling) {
          char buf[96];
          std::snprintf(buf, sizeof buf, " | loss scale %g%s", double(ex.lastLossScale()),
                        ex.lastSkipped() ? " | skipped (overflow)" : "");
          extra = buf;
        }
        std::string mem;
        for (const auto &[name, bytes] : ex.measuredBytes())
          mem += (mem.empty() ? " | " : ", ") + name + " " + humanBytes(bytes);
        if (val) {
          char buf[96];
          std::snprintf(buf, sizeof buf, " | val loss %.4f (%.2f s)", val->loss, val->seconds);
          extra += buf;
        }
        std::fprintf(stderr, "step %lld/%lld | loss %.4f | lr %.3g%s | %.1f ms | %.0f tok/s%s\n", (long long)s,
                     (long long)steps, double(loss), double(ex.lastLearningRate()), extra.c_str(), dt * 1e3, tps,
                     mem.c_str());
      }
      if (log) {
        nlohmann::ordered_json j;
        j["step"] = s;
        j["loss"] = roundTrip(loss);
        j["lr"] = roundTrip(ex.lastLearningRate()); // the rate this step's update used
        if (val) {                                  // the held-out loss with the weights after this step
          j["val_loss"] = val->loss;
          j["val_tokens"] = val->tokens;
          j["val_s"] = std::round(val->seconds * 1e6) / 1e6;
        }
        j["tokens_per_s"] = std::round(tps * 10) / 10;
        j["elapsed_s"] = std::round(elapsed * 1e6) / 1e6;
        // Measured next to the plan: per space what the process touched of its arena (CPU) or the
        // GPU memory in use (CUDA), the largest over the ranks; and the process's peak resident set.
        nlohmann::ordered_json peak = nlohmann::ordered_json::object();
        for (const auto &[name, bytes] : ex.measuredBytes()) peak[name] = bytes;
        j["peak_bytes"] = peak;
        j["planned_bytes"] = planned;
        j["rss_peak_bytes"] = processPeakResidentBytes();
        if (const Engine::NvmeStats nv = ex.nvmeStats(); nv.files > 0) // since the start, all ranks
          j["nvme"] = {{"read_bytes", nv.readBytes},
                       {"write_bytes", nv.writeBytes},
                       {"read_s", std::round(nv.readSeconds * 1e6) / 1e6},
                       {"write_s", std::round(nv.writeSeconds * 1e6) / 1e6},
                       {"engine", nv.engine}};
        if (scaling) {
          j["loss_scale"] = roundTrip(ex.lastLossScale());
          j["skipped"] = ex.lastSkipped();
        }
        if (s == start + 1) { // what came before the first step, in seconds
          nlohmann::ordered_json st;
          st["program_s"] = programSeconds;
          st["engine_init_s"] = initSeconds;
          const Engine::InitTimes &it = ex.initTimes();
          st["init_values_s"] = it.valuesSeconds;
          st["init_values_bytes"] = it.valueBytes;
          st["init_zeros_s"] = it.zerosSeconds;
          st["init_zeros_bytes"] = it.zeroBytes;
          st["init_copies_s"] = it.copiesSeconds;
          st[resume ? "resume_s" : "load_weights_s"] = loadSeconds;
          st["first_step_s"] = dt;
          if (openblas_get_corename && openblas_get_corename()) st["blas_kernels"] = openblas_get_corename();
          j["startup"] = st;
        }
        log->line(j.dump());
      }
      if (writer && writer->finished()) waitWriter();
      if (!ckptDir.empty() && every > 0 && s % every == 0) saveCheckpoint(loss);
      int sig = stopSignal.load();
      if (world > 1) // every process stops after the same step (mpirun forwards the signal to each)
        sig =
            mpiSum(sig ? 1.0 : 0.0, "after step " + std::to_string(s) + ": whether a process was signalled to stop") > 0
                ? (sig ? sig : SIGTERM)
                : 0;
      if (sig) {
        const std::string stopped =
            std::string("stopped by ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " after step " + std::to_string(s);
        try {
          if (!ckptDir.empty() && lastSaved != s) saveCheckpoint(loss);
          if (writer && writer->busy()) waitWriter(); // the message below says it is there: it must be
        } catch (const UserError &e) {
          throw UserError(stopped + ", but " + e.what());
        }
        if (leader)
          std::fprintf(stderr, "bigc run: stopped by %s after step %lld%s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                       (long long)s,
                       ckptDir.empty() ? " (no --checkpoint-dir: nothing saved)"
                                       : "; continue with the same command and --resume");
        steps = s;
        break;
      }
    }
    restoreStopHandlers();
    if (!ckptDir.empty() && lastSaved != ex.stepCount() && ex.stepCount() > start) saveCheckpoint(loss);

    if (args.has("--profile")) printProfile(ex, profiledWall);
    if (args.has("--timeline")) {
      double stepS = 0, bubble = 0;
      const std::vector<PipelineBlock> blocks =
          inspect::measuredPipelineBlocks(stages, ex.stageInstructionSpans(), &stepS, &bubble);
      writeFileAtomic(args.str("--timeline"), inspect::measuredPipelineSvg(stages, programPath, blocks, stepS, bubble));
      if (!quiet)
        std::fprintf(stderr,
                     "bigc run: the pipeline of the last step (measured: step %.2f ms, bubble %.3f) drawn in %s\n",
                     1e3 * stepS, bubble, args.str("--timeline").c_str());
    }
    if (args.has("--save-weights")) {
      if (leader)
        safetensors::writeWeights(args.str("--save-weights"), ex);
      else
        checkpoint::follow(ex, checkpoint::Follow::Weights);
    }
    if (args.has("--save-hf")) {
      if (leader) {
        safetensors::writeHfDirectory(args.str("--save-hf"), ex, hfShard);
        if (!quiet)
          std::fprintf(stderr, "bigc run: %s: config.json and the weights as save_pretrained writes them\n",
                       args.str("--save-hf").c_str());
      } else {
        checkpoint::follow(ex, checkpoint::Follow::Weights);
      }
    }
    if (args.has("--dump-grads")) safetensors::write(args.str("--dump-grads"), safetensors::gradsOf(ex));
    if (writer && writer->busy()) { // a checkpoint still being written is finished before exit
      if (!quiet) std::fprintf(stderr, "bigc run: finishing the checkpoint being written\n");
      waitWriter();
    }
    if (log) log->commit();
    if (!quiet && steps > start) {
      double total = std::chrono::duration<double>(clock::now() - began).count();
      std::fprintf(stderr, "bigc run: %lld steps in %.2f s, final loss %.4f\n", (long long)(steps - start), total,
                   double(loss));
    }
  } catch (const UserError &e) {
    if (log) log->error(e.what(), current, 1);
    throw;
  } catch (const std::bad_alloc &) {
    if (log) log->error("internal error: out of memory", current, 2);
    throw;
  } catch (const std::exception &e) {
    if (log) log->error(std::string("internal error: ") + e.what(), current, 2);
    throw;
  }
  engine.reset();
  mpiFinalize();
  return 0;
}

void report(const char *prefix, const std::string &msg) {
  // cli::parse already names the command. Under mpirun every process may report: all but the
  // first name their process, and each message is one write (lines of processes do not mix).
  std::string who = prefix;
  const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank && *rank && std::string(rank) != "0") who += std::string(" (process ") + rank + ")";
  std::string line = msg.rfind(prefix, 0) == 0 ? who + msg.substr(std::strlen(prefix)) : who + ": " + msg;
  line += "\n";
  std::fputs(line.c_str(), stderr);
}

} // namespace

int evalMain(int argc, char **argv, int first) {
  pickBlasKernels(argv);
  try {
    return runBody(argc, argv, first, /*evalCmd=*/true);
  } catch (const UserError &e) {
    report("bigc eval", e.what());
    return 1;
  } catch (const std::bad_alloc &) {
    report("bigc eval", "internal error: out of memory");
    return 2;
  } catch (const std::exception &e) {
    report("bigc eval", std::string("internal error: ") + e.what());
    return 2;
  }
}

int runMain(int argc, char **argv, int first) {
  pickBlasKernels(argv);
  try {
    return runBody(argc, argv, first, /*evalCmd=*/false);
  } catch (const UserError &e) {
    report("bigc run", e.what());
    return 1;
  } catch (const std::bad_alloc &) {
    report("bigc run", "internal error: out of memory");
    return 2;
  } catch (const std::exception &e) {
    report("bigc run", std::string("internal error: ") + e.what());
    return 2;
  } catch (...) {
    report("bigc run", "internal error");
    return 2;
  }
}

} // namespace bigc::rt
