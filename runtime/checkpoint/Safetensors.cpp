// safetensors reader/writer and weight load/save for the executor.
#include "bigc/Runtime/safetensors.h"
#include "bigc/Runtime/engine.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <unistd.h>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace bigc::rt::safetensors {

using json = nlohmann::json;

namespace {
[[noreturn]] void fail(const std::string &path, const std::string &msg) { throw UserError(path + ": " + msg); }

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) mant <<= 1, --exp;
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
} // namespace

const char *dtypeTag(DType d) {
  switch (d) {
  case DType::F32: return "F32";
  case DType::BF16: return "BF16";
  case DType::F16: return "F16";
  case DType::I32: return "I32";
  }
  return "?";
}

bool parseDTypeTag(const std::string &tag, DType &out) {
  if (tag == "F32")
    out = DType::F32;
  else if (tag == "BF16")
    out = DType::BF16;
  else if (tag == "F16")
    out = DType::F16;
  else if (tag == "I32")
    out = DType::I32;
  else
    return false;
  return true;
}

std::vector<float> Tensor::toF32() const {
  size_t n = size_t(numel());
  std::vector<float> out(n);
  const uint8_t *p = data.data();
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
    case DType::F32: std::memcpy(&out[i], p + 4 * i, 4); break;
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = float(v);
      break;
    }
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      uint32_t bits = uint32_t(h) << 16;
      std::memcpy(&out[i], &bits, 4);
      break;
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = halfToFloat(h);
      break;
    }
    }
  }
  return out;
}

Tensor Tensor::fromF32(const std::string &name, const std::vector<int64_t> &shape, const float *values) {
  Tensor t;
  t.name = name;
  t.dtype = DType::F32;
  t.shape = shape;
  t.data.resize(size_t(t.numel()) * 4);
  if (!t.data.empty()) std::memcpy(t.data.data(), values, t.data.size());
  return t;
}

const Tensor *File::find(const std::string &name) const {
  for (const auto &t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {
// The header (and, with `data`, the tensors' bytes) of a file of `fileSize` bytes whose first
// `avail` bytes are at `head`.
File parseImpl(const char *head, uint64_t avail, uint64_t fileSize, const std::string &path, bool data) {
  if (fileSize < 8 || avail < 8)
    fail(path, "not a safetensors file: " + std::to_string(fileSize) + " bytes, less than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[size_t(i)]);
  if (n > fileSize - 8)
    fail(path, "not a safetensors file or truncated: header length " + std::to_string(n) + " exceeds the " +
                   std::to_string(fileSize - 8) + " bytes that follow it");
  if (n > (uint64_t(100) << 20))
    fail(path, "safetensors header of " + std::to_string(n) + " bytes is too large (max 100 MB)");
  json header;
  try {
    if (avail < 8 + n) fail(path, "internal error: header not read");
    header = json::parse(head + 8, head + 8 + n);
  } catch (const json::exception &e) {
    fail(path, std::string("safetensors header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "safetensors header must be a JSON object");
  const uint64_t dataStart = 8 + n, dataSize = fileSize - dataStart;

  File file;
  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string &name = it.key();
    const json &v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(path, "__metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(path, "__metadata__ value of '" + m.key() + "' must be a string");
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    std::string where = "tensor '" + name + "'";
    if (!v.is_object()) fail(path, where + ": entry must be an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail(path, where + ": 'dtype' (a string) is missing");
    if (!v.contains("shape") || !v["shape"].is_array()) fail(path, where + ": 'shape' (a list) is missing");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      fail(path, where + ": 'data_offsets' ([begin, end]) is missing");
    Tensor t;
    t.name = name;
    std::string tag = v["dtype"].get<std::string>();
    if (!parseDTypeTag(tag, t.dtype))
      fail(path, where + ": dtype '" + tag + "' is not one bigc reads (F32, BF16, F16, I32)");
    uint64_t numel = 1;
    for (const auto &d : v["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        fail(path, where + ": shape must be a list of non-negative integers");
      uint64_t x = d.get<uint64_t>();
      if (x != 0 && numel > (uint64_t(1) << 60) / x) fail(path, where + ": shape is too large");
      numel *= x;
      t.shape.push_back(int64_t(x));
    }
    const json &off = v["data_offsets"];
    for (const auto &o : off)
      if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0))
        fail(path, where + ": data_offsets must be non-negative integers");
    uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (e < b)
      fail(path, where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + ") end before they begin");
    if (e > dataSize)
      fail(path, where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + ") run past the " +
                     std::to_string(dataSize) + " data bytes (truncated file?)");
    uint64_t want = numel * uint64_t(dtypeSize(t.dtype));
    if (e - b != want)
      fail(path, where + ": data_offsets span " + std::to_string(e - b) + " bytes, but shape " + shapeStr(t.shape) +
                     " of " + tag + " needs " + std::to_string(want));
    t.fileOffset = dataStart + b;
    if (data) t.data.assign(head + dataStart + b, head + dataStart + e);
    spans.push_back({b, e, file.tensors.size()});
    file.tensors.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span &a, const Span &b) { return a.begin < b.begin; });
  const Span *prev = nullptr; // the non-empty span reaching furthest so far
  for (const auto &s : spans) {
    if (s.end == s.begin) continue;
    if (prev && s.begin < prev->end)
      fail(path, "tensors '" + file.tensors[prev->index].name + "' and '" + file.tensors[s.index].name +
                     "' overlap in the data section");
    if (!prev || s.end > prev->end) prev = &s;
  }
  std::vector<Tensor> ordered;
  ordered.reserve(file.tensors.size());
  for (const auto &s : spans) ordered.push_back(std::move(file.tensors[s.index]));
  file.tensors = std::move(ordered);
  return file;
}
} // namespace

File parse(const std::string &bytes, const std::string &path) {
  return parseImpl(bytes.data(), bytes.size(), bytes.size(), path, true);
}

File readHeader(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  f.seekg(0, std::ios::end);
  const uint64_t size = uint64_t(f.tellg());
  f.seekg(0);
  std::string head(size_t(std::min<uint64_t>(size, 8)), '\0');
  f.read(head.data(), std::streamsize(head.size()));
  if (size >= 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[size_t(i)]);
    if (n <= size - 8 && n <= (uint64_t(100) << 20)) {
      head.resize(size_t(8 + n));
      f.read(head.data() + 8, std::streamsize(n));
      if (!f) fail(path, "read error");
    }
  }
  return parseImpl(head.data(), head.size(), size, path, false);
}

File read(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail(path, "read error");
  return parse(ss.str(), path);
}

std::string serialize(const File &file) {
  json header = json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const auto &t : file.tensors) {
    if (!seen.insert(t.name).second) throw UserError("safetensors: tensor name '" + t.name + "' appears twice");
    if (t.data.size() != uint64_t(t.numel()) * uint64_t(dtypeSize(t.dtype)))
      throw UserError("safetensors: tensor '" + t.name + "' has " + std::to_string(t.data.size()) +
                      " bytes of data for shape " + shapeStr(t.shape));
    header[t.name] = {
        {"dtype", dtypeTag(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  std::string out;
  out.reserve(8 + h.size() + offset);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  out += h;
  for (const auto &t : file.tensors) out.append(reinterpret_cast<const char *>(t.data.data()), t.data.size());
  return out;
}

void write(const std::string &path, const File &file) { writeFileAtomic(path, serialize(file)); }

std::pair<int64_t, uint64_t> writeStreaming(const std::string &path, const std::map<std::string, std::string> &metadata,
                                            const std::vector<OutTensor> &ts,
                                            const std::function<void(size_t, std::vector<uint8_t> &)> &fill) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const OutTensor &t : ts) {
    header[t.name] = {
        {"dtype", dtypeTag(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + uint64_t(t.bytes)}}};
    off += uint64_t(t.bytes);
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[size_t(i)] = char((uint64_t(h.size()) >> (8 * i)) & 0xff);
  head += h;
  const std::string tmp = path + ".tmp";
  FILE *f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(tmp, std::string("cannot write: ") + std::strerror(errno));
  uint64_t fnv = fnv1a64(head.data(), head.size());
  int64_t size = int64_t(head.size());
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < ts.size() && ok; ++i) {
    buf.resize(size_t(ts[i].bytes));
    fill(i, buf);
    ok = std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
    fnv = fnv1a64(buf.data(), buf.size(), fnv);
    size += int64_t(buf.size());
  }
  ok = ok && std::fflush(f) == 0 && (::fsync(fileno(f)) == 0 || errno == EINVAL || errno == EROFS);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    fail(path, std::string("write failed: ") + std::strerror(e));
  }
  return {size, fnv};
}

std::pair<int64_t, uint64_t> writeWeights(const std::string &path, const Engine &ex,
                                          const std::map<std::string, std::string> &metadata) {
  std::vector<const Buffer *> ws = ex.weights();
  std::vector<OutTensor> ts;
  for (const Buffer *b : ws) ts.push_back({b->name, DType::F32, b->shape, b->numel() * 4});
  std::map<std::string, std::string> md = {{"format", "pt"}, {"producer", "bigc"}};
  for (const auto &[k, v] : metadata) md[k] = v;
  return writeStreaming(path, md, ts, [&](size_t i, std::vector<uint8_t> &buf) {
    std::vector<float> v = ex.readF32(ws[i]->id);
    std::memcpy(buf.data(), v.data(), buf.size());
  });
}

File weightsOf(const Engine &ex) {
  File f;
  f.metadata["format"] = "pt";
  f.metadata["producer"] = "bigc";
  for (const Buffer *b : ex.weights()) // masters when there are, as f32
    f.tensors.push_back(Tensor::fromF32(b->name, b->shape, ex.readF32(b->id).data()));
  return f;
}

File gradsOf(const Engine &ex) {
  File f;
  f.metadata["format"] = "pt";
  f.metadata["producer"] = "bigc";
  f.metadata["content"] = "gradients";
  const auto &grads = ex.capturedGrads();
  for (const Buffer *b : ex.weights()) {
    auto it = grads.find(b->name);
    if (it == grads.end()) continue;
    f.tensors.push_back(Tensor::fromF32(b->name, b->shape, it->second.data()));
  }
  return f;
}

void loadWeights(Engine &ex, const File &file, const std::string &path) {
  auto endsWith = [](const std::string &s, const std::string &suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
  };
  const std::vector<const Buffer *> weights = ex.weights(); // masters when there are
  std::set<std::string> params;
  for (const Buffer *b : weights) params.insert(b->name);
  // A tensor named exactly as a parameter is that parameter. Otherwise a Hugging Face GPT-2
  // checkpoint's names are read as bigc gen gpt's: without `transformer.`, and its causal-mask
  // buffers skipped (an imported model keeps its own names, `transformer.` included).
  std::map<std::string, const Tensor *> byName;
  for (const auto &t : file.tensors) {
    std::string name = t.name;
    if (!params.count(name)) {
      if (name.rfind("transformer.", 0) == 0 && params.count(name.substr(12)))
        name = name.substr(12);
      else if (endsWith(name, ".attn.bias") || endsWith(name, ".attn.masked_bias"))
        continue;
    }
    if (!byName.emplace(name, &t).second) fail(path, "tensor '" + name + "' appears twice");
  }
  for (const Buffer *b : weights) {
    auto it = byName.find(b->name);
    if (it == byName.end())
      fail(path, "parameter '" + b->name + "' " + shapeStr(b->shape) + " is missing from the weights file");
    if (it->second->shape != b->shape)
      fail(path, "parameter '" + b->name + "': expected shape " + shapeStr(b->shape) + ", found " +
                     shapeStr(it->second->shape));
  }
  for (const auto &[name, t] : byName)
    if (!params.count(name))
      fail(path, "tensor '" + t->name + "' " + shapeStr(t->shape) + " is not a parameter of this model");
  for (const Buffer *b : weights) {
    const Tensor *t = byName.at(b->name);
    std::vector<float> v = t->toF32();
    ex.writeF32(b->id, v.data());
  }
  ex.refreshCopies(); // compute copies (init kind copy) follow the loaded masters
}

} // namespace bigc::rt::safetensors
