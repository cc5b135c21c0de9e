// Hardware profiles (hardware/*.json): what a plan must fit. No MLIR here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bigc {

struct HardwareProfile {
  std::string name;
  std::string description;
  int64_t devices = 1;        // devices (ranks) per machine
  int64_t deviceMemBytes = 0; // per device: what the device offers (nvidia-smi's total)
  // Kept back from each device's memory for what is not in the plan (CUDA context and libraries,
  // cuBLASLt and kernel workspaces, NCCL buffers), by part; the plan must fit the rest.
  std::vector<std::pair<std::string, int64_t>> deviceReserveParts;
  int64_t deviceReserveBytes = 0;   // their sum
  int64_t hostReserveBytes = 0;     // kept back from the host memory (the OS, the process itself)
  int64_t hostMemBytes = 0;         // per machine, shared by its devices
  double deviceFlops = 0;           // peak dense FLOP/s per device for the training precision
  double hostFlops = 0;             // FLOP/s of the host (CPU Adam etc.)
  double h2dBytesPerS = 0;          // host -> device bandwidth per device
  double d2hBytesPerS = 0;          // device -> host
  double interconnectBytesPerS = 0; // device <-> device (NVLink/PCIe) per device
  double deviceBytesPerS = 0;       // device memory bandwidth (0: unknown; the cost model then counts FLOPs only)
  // NVMe drives of the machine (--offload nvme): their capacity together (0: none) and sequential
  // read and write bandwidth, shared by the machine's ranks.
  int64_t nvmeBytes = 0;
  double nvmeReadBytesPerS = 0, nvmeWriteBytesPerS = 0;
  // Measured profiles (bigc calibrate): the fixed cost of one collective and of one instruction
  // (0: none counted), and the CPU threads the rates were measured with (0: not said).
  double collectiveLatencyS = 0, opOverheadS = 0;
  int64_t threads = 0;
  // Measured profiles: the sustained FLOP/s of particular ops (in the cost model's FLOP counts),
  // used instead of device_flops for them ("attention", "gelu_grad", ...).
  std::vector<std::pair<std::string, double>> opFlops;
  double flopsOf(const std::string &op) const {
    for (const auto &[name, f] : opFlops)
      if (name == op) return f;
    return deviceFlops;
  }
  std::string path; // file it was read from
};

// `nameOrFile`: a profile name (looked up as <dir>/<name>.json, dir = $BIGC_HARDWARE_DIR or the
// source tree's hardware/) or a path to a .json file. Throws UserError naming the file and
// field, or listing the known profile names when the name is unknown.
HardwareProfile loadHardware(const std::string &nameOrFile);
// The reserve of a profile without `device_reserve`: CUDA context and libraries 512 MiB, workspaces
// 256 MiB, and with several devices NCCL's buffers 704 MiB (hardware/README.md gives the sources).
std::vector<std::pair<std::string, int64_t>> defaultDeviceReserve(int64_t devices);
// Without `host_reserve_bytes`: 4 GiB, at most an eighth of the host memory.
int64_t defaultHostReserve(int64_t hostMemBytes);
std::vector<std::string> knownHardwareNames();

} // namespace bigc
