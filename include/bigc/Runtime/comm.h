// Communicators: the collectives of a multi-rank program (docs/program-format.md, "Collectives")
// between the ranks of one run, and the point-to-point messages of pipeline stages. Every rank calls run() with the
// same collectives in the same order (the program's comm stream); a call returns when this rank's outputs are complete.
// No MLIR here.
//
// Implementations:
// - in-process (makeInProcessCommunicator): the ranks are threads of one process sharing memory; a
//   real ring (reduce-scatter: N-1 steps, each rank adding its predecessor's partial sums of one
//   chunk into its own, f32 accumulation in double-buffered scratch; all-gather: N-1 steps passing
//   chunks along the ring); no rank gathers everything;
// - MPI (makeMpiCommunicator, runtime/comm/MpiComm.cpp, when OpenMPI is found): the ranks of each
//   process meet in shared memory, and one thread per process runs the MPI collective between the
//   processes (nonblocking, polled against the timeout).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bigc/Runtime/program.h"

namespace bigc::rt {

// RingShift (context parallelism's ring): rank r gets rank r-1's tensors (mod size), sends its own
// to r+1. ToHeads / ToSequence (DeepSpeed-Ulysses' all-to-all): [B,T,N] of every rank's part of the
// sequence <-> [B,size*T,N/size] of every token of the rank's size-th of N (rank r: columns
// [r N/size, (r+1) N/size)), the tokens in rank order.
enum class CollectiveKind { AllReduce, ReduceScatter, AllGather, RingShift, ToHeads, ToSequence };

// One tensor of a collective (a bucket has several): `in` has inNumel elements, `out` outNumel,
// both of `dtype` (all-reduce, ring shift and all-to-all: equal; reduce-scatter: out = ceil(in /
// size); all-gather: in = ceil(out / size)). All-to-all: `rows` = B and `width` = N of the
// sequence side's [B,T,N].
struct CollectiveTensor {
  const void *in = nullptr;
  void *out = nullptr;
  DType dtype = DType::F32;
  int64_t inNumel = 0, outNumel = 0;
  int64_t rows = 0, width = 0;
};

// A collective that could not complete: it timed out waiting for a rank, or the run was stopped
// because a rank failed. The message names the rank, the collective and the step.
struct CommError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Communicator {
public:
  virtual ~Communicator() = default;
  // Ranks of the group (all the ranks of the run), and how many run in this process.
  virtual int size() const = 0;
  virtual int localSize() const = 0;
  // The global rank of local rank `local` (0 <= local < localSize()).
  virtual int globalRank(int local) const = 0;
  // One collective (a bucket) as local rank `local`. `what` names it for messages ("step 3:
  // instruction 41 (all_gather at model.mlir:12:5)"). Throws CommError.
  virtual void run(int local, CollectiveKind kind, Reduce reduce, const std::vector<CollectiveTensor> &tensors,
                   const std::string &what) = 0;
  // Make room for collectives moving up to `floats` f32 values per rank (called while loading, so
  // that no step allocates). Safe to call from several ranks.
  virtual void reserve(int64_t floats) = 0;
  // Stop every pending and later collective of every rank of this process with `why`.
  virtual void abort(const std::string &why) = 0;
  virtual bool aborted() const = 0;
  // The longest a rank waits for the others in one collective (default 300 s), or for a message.
  virtual void setTimeout(double seconds) = 0;
  virtual std::string name() const = 0; // "in-process", "mpi"

  // Point-to-point messages (pipeline parallelism: the values the stages pass each other), between
  // global ranks of this communicator. send copies `bytes` bytes at `data` into the message from
  // local rank `local` to global rank `peer` with `tag` and returns (it never waits for the
  // receiver). recv waits until the message from global rank `peer` to local rank `local` with
  // `tag` has come and copies its bytes to `data` (it must have `bytes` bytes); messages of one
  // (sender, receiver, tag) arrive in the order they were sent. Both throw CommError when the
  // communicator was aborted (the run stopped), and recv when the message does not come within the
  // timeout (naming the peer and the tag; the communicator is then aborted) or has another size.
  // `what` names the instruction for messages. The in-process and the MPI world communicators
  // (makeMpiCommunicator: MPI_Isend / MPI_Improbe + MPI_Mrecv between processes, the in-process
  // mailbox inside one) have them; others throw.
  virtual void send(int local, int peer, int64_t tag, const void *data, int64_t bytes, const std::string &what);
  virtual void recv(int local, int peer, int64_t tag, void *data, int64_t bytes, const std::string &what);
  // Waits until the messages sent from local rank `local` to global rank `peer` with `tag` have
  // been received: a send that waits for its recv, as NCCL's does (the CPU backend's NCCL order,
  // BIGC_P2P_NCCL_ORDER). Throws CommError as recv does; the in-process communicator has it, others
  // throw.
  virtual void waitDelivered(int local, int peer, int64_t tag, const std::string &what);
  // From now on a recv from a rank must be for the message that rank sent this one in the same
  // place of their order (NCCL's rule, which has no tags); else it fails naming both tags
  // (BIGC_P2P_NCCL_ORDER). The in-process communicator has it, others throw.
  virtual void pairInIssueOrder();
};

std::shared_ptr<Communicator> makeInProcessCommunicator(int ranks);
// A group of the ranks `globalIds` of this process (a data- or tensor-parallel group of the mesh):
// local rank l of the group is global rank globalIds[l] (in messages).
std::shared_ptr<Communicator> makeInProcessCommunicator(const std::vector<int> &globalIds);

// MPI: this process runs `localRanks` consecutive ranks (global rank = process rank x localRanks
// + local); the world must have ranks / localRanks processes. mpiCompiled(): this build has it.
bool mpiCompiled();
// Initialises MPI when the process runs under mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set) and
// returns the world size and this process's rank; {1, 0} otherwise.
std::pair<int, int> mpiWorld();
// Under mpirun, MPI's start-up with a time limit: every process waits at most `timeout` seconds in
// MPI's initialisation for the others (which would otherwise wait forever for a process that was
// stopped or crashed before it got there). On a time-out this process prints which processes never
// arrived (found through a file per process in a directory of the job, when every process runs on
// this machine) and exits 1, and mpirun ends the job. Nothing without mpirun; call it before the
// first mpiWorld().
void mpiStart(double timeout);
std::shared_ptr<Communicator> makeMpiCommunicator(int ranks, int localRanks);
// Tensor parallelism and pipeline stages under mpirun: the mesh pp x dp x tp (rank
// g = (s * dp + d) * tp + t; this process holds ranks [p * L, p * L + L)). Per local rank, its
// data-parallel group's communicator (the ranks of its s and t), its tensor-parallel group's (of
// its s and d) and, with pp > 1, its pipeline group's (of its d and t: the stages' all-reduces),
// with its index in each: a group inside this process is in-process, one across processes an MPI
// communicator split from the world's (every process calls this with the same arguments). `all`
// receives every communicator made. The layout needs tp to divide L or L to divide tp, and with
// pp > 1 a stage's ranks (dp x tp) to divide L or L to divide them (UserError otherwise).
struct MeshRank {
  std::shared_ptr<Communicator> dp, tp, pp;
  int dpLocal = 0, tpLocal = 0, ppLocal = 0;
};
std::vector<MeshRank> makeMpiMesh(int dp, int tp, int localRanks, double timeout,
                                  std::vector<std::shared_ptr<Communicator>> *all, int pp = 1);
// A host scalar reduced over the processes (sum, the same bits on every process); identity without
// MPI. `what` names the place ("step 12: the loss's sum over the processes"): a process that does
// not get there within mpiStart's --comm-timeout is named in the CommError every other one throws
// (no blocking collective that would wait for it forever).
double mpiSum(double x, const std::string &what);
// Process 0's `bytes` bytes at `data` to every process (NCCL's bootstrap); nothing without MPI.
void mpiBroadcast(void *data, int64_t bytes, const std::string &what);
// Process `root`'s bytes to every process (a pipeline stage's tensors to the process writing a
// checkpoint), in pieces of at most 1 GiB; nothing without MPI. Both within --comm-timeout, as
// mpiSum.
void mpiBroadcastFrom(int root, void *data, int64_t bytes, const std::string &what);
void mpiFinalize();

} // namespace bigc::rt
