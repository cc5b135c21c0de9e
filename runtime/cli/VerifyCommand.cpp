// `bigc verify model.bigc`: the plan verifier on a program file.
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/run_command.h"
#include "bigc/Runtime/verifier.h"
#include "bigc/Format/evaluation.h"
#include "bigc/Format/p2p_groups.h"
#include "bigc/Support/format.h"
#include "bigc/Support/cli.h"

#include <cstdio>
#include <iostream>
#include <set>

namespace bigc::rt {

namespace {
const char *kVerifyUsage =
    "usage: bigc verify model.bigc [--limit N]\n"
    "Checks a program as the runtime's loader does (container, checksum, every buffer and\n"
    "instruction) and proves its plan safe: every read follows a write, accesses of one buffer on\n"
    "different streams are ordered by waits, and buffers that share memory are never live at once.\n"
    "A pipelined program: the stages together cannot deadlock; and a second line says whether\n"
    "they also run under NCCL's send and recv (the CUDA backend on several GPUs), where a send\n"
    "waits for its recv and the messages between two ranks pair in the order they are issued.\n"
    "  --limit N   list at most N problems (default 20)\n"
    "exit status: 0 proven safe; 1 problems found, or the file is not a valid program\n";
}

int verifyMain(int argc, char **argv, int first) {
  try {
    cli::Args args = cli::parse(argc, argv, first, {"--limit"}, {"--help"}, "verify");
    if (args.has("--help")) {
      std::cout << kVerifyUsage;
      return 0;
    }
    if (args.positional.size() != 1)
      throw UserError("verify: one program file expected (usage: bigc verify model.bigc)");
    const std::string path = args.positional[0];
    const int64_t limit = args.integer("--limit", 20);
    if (limit < 1) throw UserError("verify: --limit must be at least 1");
    Program p = loadProgram(path);
    std::vector<std::string> issues = verifyPlan(p, size_t(limit));
    // The evaluation's own plan (bigc eval): its program on its own, valid and safe.
    std::string what = "the plan";
    std::string evalLine;
    if (issues.empty() && hasEvaluationPlan(p)) {
      const Program view = evaluationProgram(p);
      validateProgram(view, path + " (the evaluation program of eval.plan)");
      issues = verifyPlan(view, size_t(limit));
      what = "the evaluation's plan (eval.plan)";
      std::string arenas;
      for (const Space &s : view.spaces) {
        if (!p.evalPlan.arenas.count(s.name)) continue;
        const Space *t = p.space(s.name);
        arenas += std::string(arenas.empty() ? "" : ", ") + s.name + " " + humanBytes(s.arenaBytes) + " (the step's " +
                  humanBytes(t ? t->arenaBytes : 0) + ")";
      }
      evalLine = path +
                 ": the evaluation (bigc eval): verified in its own plan: " + std::to_string(view.instructions.size()) +
                 " instructions, " + std::to_string(view.buffers.size()) + " buffers, arenas " + arenas + "\n";
    }
    std::set<std::string> streams;
    for (const auto &ins : p.instructions) streams.insert(ins.stream);
    if (issues.empty()) {
      std::printf("%s: verified: %zu instructions on %zu stream%s, %zu buffers; every read follows a write, "
                  "cross-stream accesses are ordered, no two live buffers share memory\n",
                  path.c_str(), p.instructions.size(), streams.size(), streams.size() == 1 ? "" : "s",
                  p.buffers.size());
      std::fputs(evalLine.c_str(), stdout);
      if (p.cp > 1) {
        // The context axis: every rank of a cp group runs this program, so its k-th ring shift or
        // all-to-all meets the k-th of every other rank of the group, issued in the order of one
        // stream; a shift is one NCCL group of a send to the next rank and a receive from the
        // previous, an all-to-all one group of a send and a receive per peer, of the sizes the
        // program gives every rank alike: they pair in order and a group cannot wait on itself.
        size_t shifts = 0, a2a = 0;
        std::set<std::string> cpStreams;
        for (int64_t s = 0; s < p.pp; ++s)
          for (const auto &ins : p.stageProgram(s).instructions)
            if (ins.op == "ring_shift" || ins.op == "cp_all_to_all")
              shifts += ins.op == "ring_shift", a2a += ins.op == "cp_all_to_all", cpStreams.insert(ins.stream);
        if (cpStreams.size() > 1)
          throw UserError("verify: " + path + ": the context axis's collectives run on " +
                          std::to_string(cpStreams.size()) +
                          " streams; on one (comm_cp) their order is every rank's (internal error)");
        std::printf("%s: on NCCL (several GPUs): the context axis's %zu ring shifts and %zu all-to-alls per step, on "
                    "one stream in the same order on each of the %lld ranks of a cp group, pair in order and cannot "
                    "deadlock\n",
                    path.c_str(), shifts, a2a, static_cast<long long>(p.cp));
      }
      if (p.pp > 1) {
        const std::string nccl = ncclPipelineProblem(p);
        if (nccl.empty()) {
          size_t groups = 0, messages = 0;
          for (int64_t s = 0; s < p.pp; ++s)
            for (const auto &g : p2pGroups(p.stageProgram(s))) ++groups, messages += g.size();
          std::printf("%s: on NCCL (several GPUs): the %lld stages' %zu sends and recvs, issued in %zu groups, pair "
                      "in order and cannot deadlock\n",
                      path.c_str(), static_cast<long long>(p.pp), messages, groups);
        } else {
          std::printf("%s: not on NCCL (several GPUs): %s\n", path.c_str(), nccl.c_str());
        }
      }
      return 0;
    }
    std::fprintf(stderr, "bigc verify: %s: %s is unsafe (%zu problem%s%s):\n", path.c_str(), what.c_str(),
                 issues.size(), issues.size() == 1 ? "" : "s",
                 issues.size() >= size_t(limit) ? " listed, more may follow" : "");
    for (const auto &s : issues) std::fprintf(stderr, "  %s\n", s.c_str());
    return 1;
  } catch (const UserError &e) {
    std::string m = e.what();
    std::fprintf(stderr, "%s%s\n", m.rfind("verify", 0) == 0 ? "bigc " : "bigc verify: ", m.c_str());
    return 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "bigc verify: internal error: %s\n", e.what());
    return 2;
  }
}

} // namespace bigc::rt
