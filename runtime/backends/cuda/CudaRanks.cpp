// The CUDA backend's ranks: one GPU and NCCL communicator per rank of this process (bootstrapped
// over MPI under mpirun), the data-, tensor- and pipeline-parallel groups split from them, the
// host-side mesh, and the RankGroup that runs them together and aborts NCCL when a rank fails or
// stalls.
#include "bigc/Runtime/comm.h"
#include "bigc/Runtime/rank_group.h"
#include "bigc/Runtime/verifier.h"
#include "cuda_engine.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <vector>

namespace bigc::rt {

namespace {
// Every rank on the current GPU; the device collectives through the in-process communicators (the
// CPU backend's), each rank's engine staging its buckets in pinned memory (hostCollective).
std::unique_ptr<RankGroup> virtualRankGroup(Program program, uint64_t seed, double commTimeout) {
  if (mpiWorld().first > 1)
    throw UserError("--virtual-ranks runs every rank of the program in one process on one GPU: start it without "
                    "mpirun");
  int device = 0;
  BIGC_CK(cudaGetDevice(&device));
  const int ranks = int(program.ranks), tp = int(program.tp), dp = int(program.dp), pp = int(program.pp),
            cp = int(program.cp);
  std::shared_ptr<Communicator> world = makeInProcessCommunicator(ranks);
  world->setTimeout(commTimeout);
  // The mesh as on the CPU backend (pipeline stages too: their messages over `world`; the cp groups'
  // ring shifts and all-to-alls through the host).
  auto mesh = tp > 1 || pp > 1 || cp > 1 ? std::make_shared<InProcessMesh>(dp, tp, commTimeout, pp, cp) : nullptr;
  // A stream waiting for a collective (issued when it has finished, here) waits longer than the
  // collective itself may: the communicator's timeout names the rank that did not come.
  const double streamWait = std::max(300.0, 2.0 * commTimeout);
  auto group = std::make_unique<RankGroup>(
      std::move(program), seed, world,
      [world, mesh, seed, device, tp, streamWait](const Program &p, int local) {
        CudaRank r;
        r.device = device, r.initialize = false, r.tpRank = local % tp, r.globalRank = local;
        r.host = std::make_shared<RankContext>(inProcessRankContext(mesh.get(), world, tp, local));
        r.cpRank = r.host->cpLocal;
        auto e = std::make_unique<CudaEngine>(p, seed, r);
        e->setWaitTimeoutForTesting(streamWait);
        return std::unique_ptr<Engine>(std::move(e));
      },
      /*deviceInHostMemory=*/false,
      [&](RankGroup &g) {
        if (mesh) mesh->install(g);
      });
  group->setStragglerTimeout(commTimeout);
  return group;
}
} // namespace

std::unique_ptr<RankGroup> makeCudaRankGroup(Program program, uint64_t seed, double commTimeout, bool virtualRanks) {
  if (virtualRanks) return virtualRankGroup(std::move(program), seed, commTimeout);
#if !BIGC_HAVE_NCCL
  (void)program, (void)seed, (void)commTimeout;
  throw UserError("this build's CUDA toolkit has no NCCL: programs of several ranks run on the CPU backend "
                  "(--backend cpu), or all on one GPU with --virtual-ranks");
#else
  const auto [world, proc] = mpiWorld();
  const int ranks = int(program.ranks);
  if (world > 1 && ranks % world != 0)
    throw UserError("the program has " + std::to_string(ranks) + " ranks but mpirun started " + std::to_string(world) +
                    " processes, which do not divide them");
  const int local = world > 1 ? ranks / world : ranks;
  // Pipeline stages over NCCL: a send waits for its recv and the messages of two ranks pair in the
  // order they are issued; the stages' orders must hold under those rules (proven here, as by
  // `bigc verify`, before any GPU work).
  if (program.pp > 1)
    if (std::string why = ncclPipelineProblem(program); !why.empty())
      throw UserError("this pipelined program cannot run over NCCL (one GPU per rank): " + why + ". " +
                      (program.ppSchedule == "interleaved"
                           ? "Compile it with --pp-schedule 1f1b, zero-bubble or gpipe (the interleaved order sends "
                             "both ways at once when the micro-batches outnumber the stages), or run"
                           : "Run") +
                      " it with --backend cpu or on one GPU with --virtual-ranks (`bigc verify` shows the same)");
  int devices = 0;
  BIGC_CK(cudaGetDeviceCount(&devices));
  if (devices < local)
    throw UserError("the program runs " + std::to_string(local) + " ranks in this process, one GPU each, but " +
                    std::to_string(devices) + " GPU(s) are visible; start them across machines with mpirun (" +
                    std::to_string(local) + " GPUs per process), compile for --ranks " + std::to_string(devices) +
                    ", run them all on one GPU with --virtual-ranks (to check the sharded program; slower), or "
                    "run with --backend cpu");
  // One NCCL communicator per local rank, bootstrapped from process 0's id (over MPI under mpirun).
  ncclUniqueId id{};
  if (proc == 0) BIGC_NCCL(ncclGetUniqueId(&id));
  if (world > 1) mpiBroadcast(&id, int64_t(sizeof id), "NCCL's start-up (process 0's id to every process)");
  // The processes of one machine take consecutive GPUs: local rank l of the machine's process p
  // (OpenMPI's node-local rank) uses GPU p*local + l.
  int firstDevice = 0;
  if (const char *lr = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"); lr && *lr && world > 1)
    firstDevice = std::atoi(lr) * local;
  if (firstDevice + local > devices)
    throw UserError("this process runs ranks on GPUs " + std::to_string(firstDevice) + ".." +
                    std::to_string(firstDevice + local - 1) + " of this machine, which has " + std::to_string(devices) +
                    "; start fewer processes per machine (mpirun --npernode) or compile for fewer ranks");
  struct Comms {
    std::vector<ncclComm_t> c; // per local rank: the world's, then the mesh groups' (dp, tp, pp)
    std::atomic<bool> aborted{false};
  };
  auto comms = std::shared_ptr<Comms>(new Comms, [](Comms *v) {
    if (!v->aborted.load())
      for (ncclComm_t c : v->c)
        if (c) ncclCommDestroy(c);
    delete v;
  });
  comms->c.assign(size_t(local), nullptr);
  // The collectives use ncclBfloat16 and ncclAvg (NCCL 2.10): the library loaded at run time may be
  // older than the headers this was built with.
  int ncclVersion = 0;
  BIGC_NCCL(ncclGetVersion(&ncclVersion));
  // NCCL (2.22 on) connects its communicators, and allocates their buffers, at their first
  // collective: a plan that fills the GPU to its reserve would then fail at step 1. Connected at
  // initialisation instead (unless the environment says otherwise), the engines' check of the free
  // memory, which follows, sees what the communicators took.
  ::setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  if (ncclVersion < 21000)
    throw UserError("the CUDA backend's collectives need NCCL 2.10 or newer (bf16 sums, average reductions); the "
                    "NCCL library loaded reports version code " +
                    std::to_string(ncclVersion) + " (install a newer NCCL, or run with --backend cpu)");
  BIGC_NCCL(ncclGroupStart());
  for (int l = 0; l < local; ++l) {
    BIGC_CK(cudaSetDevice(firstDevice + l));
    BIGC_NCCL(ncclCommInitRank(&comms->c[size_t(l)], ranks, id, proc * local + l));
  }
  BIGC_NCCL(ncclGroupEnd());
  // Tensor parallelism or pipeline stages (mesh pp x dp x tp, rank g = (s * dp + d) * tp + t): each
  // rank's data-parallel group (the ranks of its s and t), tensor-parallel group (of its s and d)
  // and pipeline group (of its d and t: the stages' messages and the collectives over the stages),
  // split from the world's.
  const int tp = int(program.tp), dp = int(program.dp), pp = int(program.pp), cp = int(program.cp);
  if (cp > 1 && world > 1)
    throw UserError("this program has context parallelism (cp " + std::to_string(cp) +
                    "), whose groups run in one process for now: run it without mpirun");
  std::vector<ncclComm_t> dpComm(size_t(local), nullptr), tpComm(size_t(local), nullptr),
      ppComm(size_t(local), nullptr), ppColl(size_t(local), nullptr), cpComm(size_t(local), nullptr);
  if (tp > 1 || pp > 1 || cp > 1) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    // color and key of global rank g in each group
    auto split = [&](std::vector<ncclComm_t> &out, const std::function<std::pair<int, int>(int)> &colorKey) {
      BIGC_NCCL(ncclGroupStart());
      for (int l = 0; l < local; ++l) {
        const auto [color, key] = colorKey(proc * local + l);
        BIGC_CK(cudaSetDevice(firstDevice + l));
        BIGC_NCCL(ncclCommSplit(comms->c[size_t(l)], color, key, &out[size_t(l)], nullptr));
      }
      BIGC_NCCL(ncclGroupEnd());
      for (ncclComm_t c : out) comms->c.push_back(c); // destroyed and aborted with the others
    };
    const int stageRanks = dp * tp;
    split(dpComm, [&](int g) { return std::pair{(g / stageRanks) * tp + g % tp, (g / tp) % dp}; });
    if (tp > 1) split(tpComm, [&](int g) { return std::pair{g / tp, g % tp}; });
    // Two of the pipeline group: one for the stages' messages (the p2p stream's thread), one for
    // the collectives over the pipeline axis (the comm stream's): NCCL allows no communicator to be
    // used from two threads at once, nor promises two operations on one communicator progress
    // together.
    if (pp > 1) split(ppComm, [&](int g) { return std::pair{g % stageRanks, g / stageRanks}; });
    if (pp > 1) split(ppColl, [&](int g) { return std::pair{g % stageRanks, g / stageRanks}; });
    // The cp group of rank g: the cp consecutive data indices of its group d / cp, with its s and t.
    if (cp > 1)
      split(cpComm, [&](int g) {
        const int s = g / stageRanks, d = (g / tp) % dp, t = g % tp;
        return std::pair{(s * (dp / cp) + d / cp) * tp + t, d % cp};
      });
#else
    throw UserError(
        std::string("this program is ") +
        (tp > 1 ? "tensor-parallel (tp " + std::to_string(tp) + ")" : "pipelined (pp " + std::to_string(pp) + ")") +
        "; the CUDA backend needs NCCL 2.18 "
        "or newer (ncclCommSplit) for it, this build has " +
        std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + " (run with --backend cpu)");
#endif
  }
  std::shared_ptr<Communicator> host = world > 1 ? makeMpiCommunicator(ranks, local) : makeInProcessCommunicator(ranks);
  host->setTimeout(commTimeout);
  // Host-side collectives of the mesh (initialising a whole copy from ZeRO shards gathers over the
  // rank's data-parallel group only), as on the CPU backend.
  auto mesh = (tp > 1 || pp > 1 || cp > 1) && world == 1 ? std::make_shared<InProcessMesh>(dp, tp, commTimeout, pp, cp)
                                                         : nullptr;
  std::vector<MeshRank> mpiMesh; // under mpirun (makeMpiMesh: the same layout rules as the CPU backend's)
  std::vector<std::shared_ptr<Communicator>> mpiAll;
  if ((tp > 1 || pp > 1) && world > 1) mpiMesh = makeMpiMesh(dp, tp, local, commTimeout, &mpiAll, pp);
  auto group = std::make_unique<RankGroup>(
      std::move(program), seed, host,
      [comms, seed, firstDevice, tp, pp, cp, dp, local, proc, dpComm, tpComm, ppComm, ppColl, cpComm](const Program &p,
                                                                                                      int l) {
        const int g = proc * local + l;
        CudaRank r{firstDevice + l, comms->c[size_t(l)], false};
        if (tp > 1 || pp > 1 || cp > 1) r.nccl = dpComm[size_t(l)];
        if (cp > 1) r.ncclCp = cpComm[size_t(l)], r.cpRank = ((g / tp) % dp) % cp;
        if (tp > 1) r.ncclTp = tpComm[size_t(l)], r.tpRank = g % tp;
        if (pp > 1) r.ncclPp = ppComm[size_t(l)], r.ncclPpColl = ppColl[size_t(l)];
        r.globalRank = g;
        return makeCudaRankEngine(p, seed, r);
      },
      /*deviceInHostMemory=*/false,
      [&](RankGroup &g) {
        if (mesh) mesh->install(g);
        if (!mpiMesh.empty()) installMpiMesh(g, mpiMesh, mpiAll);
      });
  group->keepAlive(comms);
  // A failed or stuck rank: abort every NCCL communicator, so that kernels waiting for a peer
  // return (with an error) instead of spinning; aborted communicators are not destroyed again.
  group->onAbort([comms] {
    if (comms->aborted.exchange(true)) return;
    for (ncclComm_t c : comms->c)
      if (c) ncclCommAbort(c);
  });
  group->setStragglerTimeout(commTimeout);
  return group;
#endif
}

} // namespace bigc::rt
