// Checkpoints of a training run (bigc run --checkpoint-dir DIR [--checkpoint-every N] [--resume]).
//
// DIR/step-00000120/ holds
//   model.safetensors  the weights of record (fp32 masters, else the params) as f32: with the
//                      program's Hugging Face config, in save_pretrained's layout (its names, a
//                      tied weight once) beside config.json, so from_pretrained opens the
//                      directory; else under the program's names;
//   config.json        (a program with a Hugging Face config) the model's config;
//   state.safetensors  every persistent buffer as stored (weights, compute copies, AdamW moments,
//                      the fp16 loss scale and its counter), under the program's buffer names;
//   manifest.json      step, optimizer updates, the program's checksum, the data source's
//                      position (file offset, or the synthetic stream's generator state), the seed,
//                      the last loss, each file's size and XXH64 checksum (version 2; version 1's
//                      FNV-1a 64 is still read), and when its files were written.
// A checkpoint is written into a hidden temporary directory (every file and the directory fsync'd)
// and renamed into place; until then the previous checkpoints stay whole, so a process killed at
// any moment leaves at least one complete checkpoint. The newest `keep` are kept. A resumed run
// continues bit for bit as if it had not stopped (same program, same backend). Sharded (ZeRO)
// tensors are stored whole, so another program with the same training state (stateSignature: the
// same model, precision and optimizer; another rank count, ZeRO stage, recomputation or offload)
// resumes a checkpoint too, each rank taking its shards (equal to rounding, not bit for bit: the
// reductions run in another order). No MLIR here.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bigc/Runtime/data.h"
#include "bigc/Runtime/engine.h"

namespace bigc::rt::checkpoint {

struct Info {
  std::string path; // the checkpoint's directory
  int64_t step = 0; // steps completed
  int64_t updates = 0;
  double loss = 0.0; // the loss of its last step
};

using Clock = std::chrono::steady_clock;

// Writes the checkpoint of `step` into dir (created if missing) now, from the engine's memory.
// Throws UserError on I/O failure (naming the path), leaving the previous checkpoints as they were.
// `origin`: the run's start (the manifest's timings are seconds since it).
Info save(const std::string &dir, const Engine &ex, const data::TokenSource &source, uint64_t seed, double loss,
          int keep, Clock::time_point origin = Clock::now());

struct WriteStats {
  int64_t bytes = 0;             // the files' bytes
  double beganS = 0, endedS = 0; // seconds since the run began
};

// Checkpoints that do not stop training: save() copies the training state into a snapshot in host
// memory (Program::stateBytes, allocated once and reused: one checkpoint in flight at a time; a save()
// while the previous one is still being written waits for it) and returns; a thread writes the
// checkpoint from the snapshot while the next steps run, as save() above writes it (temporary
// directory, fsync, rename: killed at any moment, the previous checkpoints stay whole). The
// destructor finishes the checkpoint in flight.
class Writer {
public:
  Writer(std::string dir, int keep, Clock::time_point origin);
  ~Writer();
  void save(const Engine &ex, const data::TokenSource &source, uint64_t seed, double loss);
  // A checkpoint is being written and has finished (wait() then returns at once).
  bool finished() const;
  // Waits for the checkpoint being written: its Info (empty path when none was in flight); throws
  // its UserError when it failed.
  Info wait(WriteStats *stats = nullptr);
  bool busy() const { return thread_.joinable(); }
  double lastSnapshotSeconds() const { return lastSnapshotSeconds_; }

private:
  std::string dir_;
  int keep_;
  Clock::time_point origin_;
  char *arena_ = nullptr;
  int64_t arenaBytes_ = 0;
  bool populated_ = false;
  std::thread thread_;
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::exception_ptr error_;
  Info info_;
  WriteStats stats_;
  double lastSnapshotSeconds_ = 0;
};

// Under mpirun, the processes other than the leader (process 0, which writes): the same reads of
// the engine's tensors, in the same order, as the leader's --save-weights (Weights: the weights of
// record), save() (Checkpoint: the weights, then every persistent buffer) or Writer::save()
// (Snapshot: every persistent buffer), writing nothing: sharded tensors are gathered by all
// processes together.
enum class Follow { Weights, Checkpoint, Snapshot };
void follow(const Engine &ex, Follow what);

// The newest complete checkpoint in dir: its manifest parses, belongs to a bigc checkpoint, and its
// files have the sizes and checksums it records. Incomplete or damaged ones are skipped, each with
// a line in `skipped`. Returns an empty path when there is none. With `quarantine`, each damaged
// checkpoint newer than the one returned is moved aside (step-N.damaged, never counted among the
// checkpoints kept nor pruned; `skipped` says where). A whole checkpoint a same-step replacement
// had renamed aside (.old-step-N.PID) when that replacement never arrived counts as step N's where
// there is no step-N. An incomplete one (a temporary directory of a run stopped while writing it) is no
// checkpoint: it is listed in `incomplete` (in `skipped` when that is null) and left to the next
// write, which removes it.
Info latest(const std::string &dir, std::vector<std::string> *skipped, bool quarantine = false,
            std::vector<std::string> *incomplete = nullptr);

// The lock of a checkpoint directory: one run at a time writes and resumes there. Taking it creates
// the directory if needed and holds DIR/.lock (flock, released when the process ends however it
// ends) with this process's pid in it; a second run on the directory is refused with a UserError
// naming the holder's pid.
class DirLock {
public:
  explicit DirLock(const std::string &dir);
  ~DirLock();
  DirLock(const DirLock &) = delete;
  DirLock &operator=(const DirLock &) = delete;

private:
  int fd_ = -1;
};

// What a checkpoint's training state is, independent of ranks, ZeRO and schedule: a hash of every
// persistent tensor that is not a compute copy (name, dtype, whole shape), the precision and the
// optimizer's settings.
std::string stateSignature(const Program &p);

// Loads a checkpoint into the engine (every persistent buffer, the step and update counters) and
// the data source (its position). Throws UserError when it was written for another program
// (checksum), a buffer is missing or of another dtype or shape, or a file is damaged.
Info load(const std::string &path, Engine &ex, data::TokenSource &source);

} // namespace bigc::rt::checkpoint
