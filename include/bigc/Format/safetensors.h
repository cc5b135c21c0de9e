// safetensors files (https://github.com/huggingface/safetensors): 8-byte little-endian header
// length N, N bytes of JSON header {name: {"dtype", "shape", "data_offsets": [begin, end)},
// "__metadata__": {str: str}}, then the data (offsets relative to the end of the header).
// The file format alone (parse, header, serialize, atomic write): the compiler reads a weights
// file's header through it without the runtime; the runtime's loading, saving and streaming
// writer build on it (include/bigc/Runtime/safetensors.h). No MLIR here.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bigc/Format/program.h"

namespace bigc::format::safetensors {

struct Tensor {
  std::string name;
  DType dtype = DType::F32; // "F32", "BF16", "F16", "I32" in the file
  std::vector<int64_t> shape;
  std::vector<uint8_t> data; // numel × dtypeSize bytes, little-endian
  uint64_t fileOffset = 0;   // where the data starts in the file (set by parse and readHeader)

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // The values as f32 (converting bf16/f16; i32 is converted by value).
  std::vector<float> toF32() const;
  static Tensor fromF32(const std::string &name, const std::vector<int64_t> &shape, const float *values);
};

struct File {
  std::vector<Tensor> tensors; // in file order (by data offset)
  std::map<std::string, std::string> metadata;

  const Tensor *find(const std::string &name) const;
};

// "F32" <-> DType::F32 etc. The reader knows no other dtype.
const char *dtypeTag(DType d);
bool parseDTypeTag(const std::string &tag, DType &out);

// Parse a whole file's bytes. Throws UserError("<path>: ...") when the header length is out of
// range, the JSON is bad, a dtype is unknown, or offsets are out of range, inconsistent with
// shape × dtype, or overlapping.
File parse(const std::string &bytes, const std::string &path);
File read(const std::string &path);
// The header alone, checked as parse() checks it (offsets within the file, sizes, no overlaps),
// without reading the data: tensors have empty `data` and their `fileOffset` (for large files).
File readHeader(const std::string &path);
// The headers of a set of weights as `--load-weights` takes them: one safetensors file, a Hugging
// Face index (model.safetensors.index.json: tensor -> file beside it) of several, or a directory
// holding either. Every file's header is read and checked (an index's files must hold exactly what
// it lists); no data is read.
struct Headers {
  std::string path; // the file or the index (a directory resolved)
  bool isIndex = false;
  std::vector<std::string> files;                                 // the safetensors files, in the index's order
  std::vector<File> headers;                                      // per file
  std::vector<std::pair<const Tensor *, size_t>> tensors() const; // every tensor with its file's index
  int64_t bytes() const;                                          // the files' sizes together
};
Headers readHeaders(const std::string &path);
// A tensor Hugging Face checkpoints may hold that is no parameter (buffers older versions saved:
// GPT-2's attention masks, rotary frequencies); loading weights passes over them.
bool isSavedBuffer(const std::string &name);
// Header (sorted by name, data in that order, header padded with spaces to a multiple of 8) + data.
std::string serialize(const File &file);
// Atomic write (tmp file, fsync, rename). Throws UserError.
void write(const std::string &path, const File &file);

} // namespace bigc::format::safetensors
