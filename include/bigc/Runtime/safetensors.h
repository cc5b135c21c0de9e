// safetensors in the runtime: the streaming writer, weights loaded into and saved from an Engine,
// Hugging Face directories. The file format itself (Tensor, File, parse, serialize):
// include/bigc/Format/safetensors.h. No MLIR here.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <string>
#include <functional>
#include <vector>

#include "bigc/Format/safetensors.h"
#include "bigc/Runtime/format.h"
#include "bigc/Runtime/program.h"
#include "bigc/Runtime/xxh64.h"

namespace bigc::rt {
class Engine;
}

namespace bigc::rt::safetensors {

// A file written tensor by tensor in serialize()'s layout, so that no copy of everything is held in
// memory: fill(i, buf) returns where tensor i's bytes are (in memory that stays valid until the next
// call, or in buf, filled and sized by it). Written to path + ".tmp" with large writes, fsync'd,
// renamed; returns the file's size and XXH64. Throws UserError.
struct OutTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int64_t bytes;
};
// A file written at disk speed: appended bytes are copied into four aligned buffers of 16 MiB that
// an I/O thread writes in order with O_DIRECT (buffered where the file system refuses it) while the
// next ones fill; checksummed (XXH64) on the way. finish() truncates the padded tail, fsyncs and
// closes; throws UserError naming the file. The caller renames the file into place.
class DirectFileWriter {
public:
  explicit DirectFileWriter(const std::string &path);
  ~DirectFileWriter();
  void append(const void *data, int64_t n);
  // As append(), but bytes that stay valid and unchanged until finish() are written from where
  // they lie (no copy, only the checksum reads them) when the file is at a 4096-byte boundary and
  // `data` is 4096-aligned; the tail short of a multiple of 4096 bytes is appended as above.
  void appendInPlace(const void *data, int64_t n);
  void finish();
  int64_t size() const { return size_; }
  uint64_t digest() const { return sum_.digest(); }

private:
  static constexpr int64_t kBuffer = int64_t(16) << 20, kAlign = 4096, kBuffers = 4;
  struct Buf {
    char *data = nullptr;
    const char *src = nullptr; // the bytes to write when they are the caller's (appendInPlace)
    int64_t bytes = 0, offset = 0;
    bool full = false;
  };
  void ioLoop();
  void flushBuffer();
  void queue(); // hands the buffer being filled to the I/O thread; waits for the next to be free
  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  Buf bufs_[kBuffers];
  int64_t size_ = 0, filling_ = 0, next_ = 0;
  int err_ = 0;
  bool stop_ = false;
  Xxh64 sum_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread io_;
};

using FillFn = std::function<const uint8_t *(size_t, std::vector<uint8_t> &)>;
std::pair<int64_t, uint64_t> writeStreaming(const std::string &path, const std::map<std::string, std::string> &metadata,
                                            const std::vector<OutTensor> &tensors, const FillFn &fill);
// The same file from an image of its data section: the tensors' bytes back to back, in the order
// given, at `image` (4096-aligned, unchanged until the call returns). The header is padded with
// spaces to a multiple of 4096 bytes, so the data is written from the image itself (O_DIRECT, no
// copy): a checkpoint's snapshot goes to disk as it lies in memory.
std::pair<int64_t, uint64_t> writeImage(const std::string &path, const std::map<std::string, std::string> &metadata,
                                        const std::vector<OutTensor> &tensors, const char *image);
// The names the weights of record are written under:
//   Program      the program's names, each weight once (a checkpoint of a model without a
//                Hugging Face config);
//   Module       every name of the model's state_dict: a tied weight under each of its names (the
//                program's aliases), so that PyTorch's load_state_dict(strict=True) takes the file
//                (--save-weights);
//   HuggingFace  what save_pretrained writes: a tied weight once, under the input embedding's name
//                (not lm_head's), with the program's Hugging Face prefix (bigc gen gpt's
//                "transformer."): --save-hf and a checkpoint's model.safetensors.
enum class WeightNames { Program, Module, HuggingFace };
struct NamedWeight {
  std::string name;
  const Buffer *buffer = nullptr;
  bool again = false; // the same weight as the one before (a tied weight's other name)
};
std::vector<NamedWeight> weightNames(const Engine &ex, WeightNames how);
// The engine's weights of record (masters when there are, as f32), streamed, under those names.
std::pair<int64_t, uint64_t> writeWeights(const std::string &path, const Engine &ex,
                                          const std::map<std::string, std::string> &metadata = {},
                                          WeightNames how = WeightNames::Module);
std::pair<int64_t, uint64_t> writeWeights(const std::string &path, const Engine &ex,
                                          const std::vector<NamedWeight> &weights,
                                          const std::map<std::string, std::string> &metadata);
// A directory `from_pretrained` opens as it is (bigc run --save-hf): config.json (the program's
// Hugging Face config) and the weights in save_pretrained's layout: model.safetensors, or shards of
// at most `maxShardBytes` (Hugging Face's 5 GB) named model-00001-of-0000N.safetensors with
// model.safetensors.index.json. Every file written atomically, the directory created if needed;
// UserError when the program has no Hugging Face config (naming what to do).
void writeHfDirectory(const std::string &dir, const Engine &ex, int64_t maxShardBytes = 5000000000);

// The engine's weights of record (Engine::weights(): the master of each weight when there is
// one, else the param) under their names, as f32.
File weightsOf(const Engine &ex);
// The engine's captured gradients (Engine::enableGradCapture), f32, under the weights' names.
File gradsOf(const Engine &ex);
// Copy weights into the engine's weights of record (masters, else params), converting to their
// dtype, then refresh the compute copies (init kind copy). Every weight must be present with the
// same shape (UserError naming the first missing or mismatched one, expected vs found shape); a
// tensor that is not a weight is an error too (except Hugging Face GPT-2's non-parameter buffers
// `*.attn.bias` and `*.attn.masked_bias`; a `transformer.` prefix is stripped). bf16/f16 files are
// converted.
void loadWeights(Engine &ex, const File &file, const std::string &path);
// The same from files, at disk speed (--load-weights): a safetensors file, a Hugging Face index
// of several (model.safetensors.index.json: "weight_map" {tensor: file beside it}), or a
// directory holding either. Every header is checked and every weight matched before anything is
// read; then the tensors are read with large reads in parallel straight into the engine's
// buffers (Engine::hostPieces: each rank only its shard), converting bf16/f16/f32 on the way.
void loadWeightsFrom(Engine &ex, const std::string &path);

// Reads tensors of open files into engine buffers of the same shape (the file's dtype converted to
// the buffer's): into the buffers' host pieces in parallel, else through writeBytes. Throws
// UserError naming the file and tensor on a read error.
struct TensorRead {
  const Buffer *buffer;
  const Tensor *tensor;
  int fd;
  const std::string *path;
};
void readTensors(Engine &ex, const std::vector<TensorRead> &items);

} // namespace bigc::rt::safetensors
