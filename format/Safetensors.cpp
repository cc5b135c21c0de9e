// safetensors files: parse (whole or header only), serialize, atomic write
// (include/bigc/Format/safetensors.h). No MLIR here.
#include "bigc/Format/safetensors.h"
#include "bigc/Format/shape.h"
#include "bigc/Support/file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace bigc::format::safetensors {

using json = nlohmann::json;

namespace {
[[noreturn]] void fail(const std::string &path, const std::string &msg) { throw UserError(path + ": " + msg); }

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

Headers readHeaders(const std::string &given) {
  Headers h;
  std::string path = given;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    const std::string index = path + "/model.safetensors.index.json", single = path + "/model.safetensors";
    if (::access(index.c_str(), R_OK) == 0)
      path = index;
    else if (::access(single.c_str(), R_OK) == 0)
      path = single;
    else if (::access((path + "/pytorch_model.bin").c_str(), F_OK) == 0 ||
             ::access((path + "/pytorch_model.bin.index.json").c_str(), F_OK) == 0)
      fail(path, "a directory without model.safetensors.index.json or model.safetensors: its weights are "
                 "pytorch_model.bin (PyTorch's pickle, which bigc does not read): save them as safetensors, e.g. "
                 "model.save_pretrained(DIR) with transformers (safetensors is its default)");
    else
      fail(path, "a directory without model.safetensors.index.json or model.safetensors (a Hugging Face directory "
                 "without weights?)");
  }
  h.path = path;
  std::map<std::string, std::string> listed; // the index's tensor -> file
  h.isIndex = path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (h.isIndex) {
    std::ifstream f(path);
    if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
    json idx;
    try {
      idx = json::parse(f);
    } catch (const json::exception &e) {
      fail(path, std::string("not valid JSON: ") + e.what());
    }
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      fail(path, "not a safetensors index: no \"weight_map\" object (tensor name -> file)");
    const std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.find_last_of('/'));
    for (auto &[name, file] : idx["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().empty() ||
          file.get<std::string>().find('/') != std::string::npos)
        fail(path, "weight_map entry '" + name + "' must name a file beside the index");
      const std::string fp = dir + "/" + file.get<std::string>();
      listed[name] = fp;
      if (std::find(h.files.begin(), h.files.end(), fp) == h.files.end()) h.files.push_back(fp);
    }
    if (h.files.empty()) fail(path, "the index's weight_map is empty");
  } else {
    h.files.push_back(path);
  }
  for (const std::string &f : h.files) {
    if (h.isIndex && ::access(f.c_str(), F_OK) != 0)
      fail(path,
           "lists tensors in " + f.substr(f.find_last_of('/') + 1) + ", which is missing (a shard not downloaded?)");
    h.headers.push_back(readHeader(f)); // checked as parse() checks
  }
  if (h.isIndex) {
    for (size_t i = 0; i < h.headers.size(); ++i)
      for (const Tensor &t : h.headers[i].tensors) {
        auto it = listed.find(t.name);
        if (it == listed.end() || it->second != h.files[i])
          fail(h.files[i], "holds tensor '" + t.name + "', which " + path +
                               (it == listed.end() ? " does not list" : " lists in " + it->second));
      }
    for (const auto &[name, fp] : listed) {
      const File &f = h.headers[size_t(std::find(h.files.begin(), h.files.end(), fp) - h.files.begin())];
      if (!f.find(name)) fail(fp, "has no tensor '" + name + "', which " + path + " lists there");
    }
  }
  return h;
}

bool isSavedBuffer(const std::string &name) {
  for (const char *suffix : {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"}) {
    const size_t n = std::strlen(suffix);
    if (name.size() >= n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

std::vector<std::pair<const Tensor *, size_t>> Headers::tensors() const {
  std::vector<std::pair<const Tensor *, size_t>> out;
  for (size_t i = 0; i < headers.size(); ++i)
    for (const Tensor &t : headers[i].tensors) out.push_back({&t, i});
  return out;
}

int64_t Headers::bytes() const {
  int64_t n = 0;
  for (const std::string &f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) == 0) n += int64_t(st.st_size);
  }
  return n;
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

} // namespace bigc::format::safetensors
