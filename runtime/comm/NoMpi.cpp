// Without MPI (CMake found no MPI): one process runs every rank (the in-process communicator).
#include "bigc/Runtime/comm.h"

#include <cstdlib>

namespace bigc::rt {

bool mpiCompiled() { return false; }

std::pair<int, int> mpiWorld() {
  const char *a = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char *b = std::getenv("PMI_SIZE");
  if ((a && *a && std::atoi(a) > 1) || (b && *b && std::atoi(b) > 1))
    throw UserError("this bigc was built without MPI but runs under mpirun with several processes; rebuild with "
                    "OpenMPI installed (libopenmpi-dev), or run all ranks in one process without mpirun");
  return {1, 0};
}

void mpiStart(double) { (void)mpiWorld(); }

std::shared_ptr<Communicator> makeMpiCommunicator(int, int) {
  throw UserError("this bigc was built without MPI (install libopenmpi-dev and rebuild)");
}

std::vector<MeshRank> makeMpiMesh(int, int, int, double, std::vector<std::shared_ptr<Communicator>> *, int) {
  throw UserError("this bigc was built without MPI (install libopenmpi-dev and rebuild)");
}

double mpiSum(double x, const std::string &) { return x; }
void mpiBroadcast(void *, int64_t, const std::string &) {}
void mpiBroadcastFrom(int, void *, int64_t, const std::string &) {}
void mpiFinalize() {}

} // namespace bigc::rt
