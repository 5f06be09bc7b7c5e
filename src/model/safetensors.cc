// Safetensors format: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [...], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {...}}, then the data; offsets are relative to the data.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvfork {
namespace {

using nlohmann::json;

// A header larger than this is corrupt (real ones are well under 10 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

StatusOr<DType> ParseDType(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "BF16") return DType::kBf16;
  if (s == "F16") return DType::kF16;
  return UnimplementedError("dtype \"" + s + "\" is not supported (F32, BF16, F16)");
}

const char* DTypeTag(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBf16: return "BF16";
    case DType::kF16: return "F16";
    default: break;  // safetensors has no block formats
  }
  return "?";
}

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return InternalError(path + ": fstat failed");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return DataLossError(path + ": truncated: " + std::to_string(size) +
                         " bytes, less than the 8-byte header length");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return InternalError(path + ": mmap failed: " + std::strerror(errno));
  // Every decode step reads all the weights: mapped in 2 MB pages they cost
  // the TLB one walk per 2 MB instead of per 4 KB (a decode-like GEMV sweep:
  // 49 -> 46 ms). With this advice, page-cache misses are read in as PMD-sized
  // folios, which the kernel maps as huge pages; pages already cached keep
  // their size. Advice only: where THP is off it changes nothing.
  madvise(map, size, MADV_HUGEPAGE);
  f->map_ = map;
  f->map_size_ = size;
  const uint8_t* base = static_cast<const uint8_t*>(map);

  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(base[i]) << (8 * i);
  if (header_len > kMaxHeaderBytes)
    return DataLossError(path + ": corrupt header: length " + std::to_string(header_len) +
                         " is implausible");
  if (header_len > size - 8)
    return DataLossError(path + ": truncated: header says " + std::to_string(header_len) +
                         " bytes of JSON but the file has " + std::to_string(size - 8));
  const char* hdr = reinterpret_cast<const char*>(base + 8);
  json root = json::parse(hdr, hdr + header_len, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    return DataLossError(path + ": corrupt header: not a JSON object");
  const uint8_t* data = base + 8 + header_len;
  const size_t data_size = size - 8 - header_len;

  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    const json& e = it.value();
    auto bad = [&](const std::string& what) {
      return DataLossError(path + ": tensor \"" + name + "\": " + what);
    };
    if (!e.is_object()) return bad("header entry is not an object");
    if (!e.contains("dtype") || !e["dtype"].is_string()) return bad("missing dtype");
    auto dtype = ParseDType(e["dtype"].get<std::string>());
    if (!dtype.ok()) return UnimplementedError(path + ": tensor \"" + name + "\": " +
                                               dtype.status().message());
    TensorInfo t;
    t.name = name;
    t.dtype = *dtype;
    t.file = path;
    if (!e.contains("shape") || !e["shape"].is_array()) return bad("missing shape");
    for (const json& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("bad shape " + e["shape"].dump());
      t.shape.push_back(d.get<int64_t>());
    }
    if (!e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2 || !e["data_offsets"][0].is_number_unsigned() ||
        !e["data_offsets"][1].is_number_unsigned())
      return bad("missing or malformed data_offsets");
    uint64_t begin = e["data_offsets"][0].get<uint64_t>();
    uint64_t end = e["data_offsets"][1].get<uint64_t>();
    if (begin > end || end > data_size)
      return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] out of range of the " + std::to_string(data_size) + " data bytes (truncated?)");
    KVFORK_ASSIGN_OR_RETURN(const int64_t num_elements, t.NumElements());
    // Elements * bytes per element may not fit 64 bits either.
    const uint64_t span = end - begin;
    uint64_t expect = 0;
    const bool too_big = __builtin_mul_overflow(static_cast<uint64_t>(num_elements),
                                                static_cast<uint64_t>(DTypeSize(t.dtype)), &expect);
    if (too_big || span != expect)
      return bad("data_offsets span " + std::to_string(span) + " bytes but shape " +
                 t.ShapeString() + " of " + DTypeTag(t.dtype) + " needs " +
                 (too_big ? std::string("more than 2^64") : std::to_string(expect)));
    t.data = data + begin;
    t.num_bytes = end - begin;
    f->tensors_.push_back(std::move(t));
  }
  return f;
}

StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& dir) {
  namespace fs = std::filesystem;
  std::unique_ptr<SafetensorsCheckpoint> ck(new SafetensorsCheckpoint());
  ck->dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    std::ifstream in(index_path);
    std::stringstream ss;
    ss << in.rdbuf();
    json root = json::parse(ss.str(), nullptr, false);
    if (root.is_discarded() || !root.is_object() || !root.contains("weight_map") ||
        !root["weight_map"].is_object())
      return InvalidArgumentError(index_path + ": not valid JSON with a \"weight_map\" object");
    std::map<std::string, std::string> weight_map;
    std::map<std::string, size_t> shard_index;
    for (auto it = root["weight_map"].begin(); it != root["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return InvalidArgumentError(index_path + ": weight_map[\"" + it.key() +
                                    "\"] must be a file name");
      std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
        return InvalidArgumentError(index_path + ": shard name \"" + shard + "\" is not a plain file name");
      weight_map[it.key()] = shard;
      if (!shard_index.count(shard)) {
        const std::string shard_path = dir + "/" + shard;
        if (!fs::exists(shard_path, ec))
          return NotFoundError(index_path + ": shard \"" + shard + "\" (for tensor \"" +
                               it.key() + "\") is missing");
        KVFORK_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(shard_path));
        shard_index[shard] = ck->files_.size();
        ck->files_.push_back(std::move(file));
      }
    }
    for (const auto& file : ck->files_) {
      for (const TensorInfo& t : file->tensors()) {
        std::string shard = fs::path(file->path()).filename().string();
        auto wm = weight_map.find(t.name);
        if (wm == weight_map.end() || wm->second != shard)
          return InvalidArgumentError(file->path() + ": tensor \"" + t.name +
                                      "\" is not mapped to this shard by " + index_path);
        ck->tensors_[t.name] = t;
      }
    }
    for (const auto& [name, shard] : weight_map)
      if (!ck->tensors_.count(name))
        return NotFoundError(dir + "/" + shard + ": tensor \"" + name +
                             "\" listed in the index is not in the shard");
  } else if (fs::exists(single_path, ec)) {
    KVFORK_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single_path));
    for (const TensorInfo& t : file->tensors()) ck->tensors_[t.name] = t;
    ck->files_.push_back(std::move(file));
  } else {
    return NotFoundError(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  return ck;
}

const TensorInfo* SafetensorsCheckpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

size_t SafetensorsCheckpoint::TotalBytes() const {
  size_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.num_bytes;
  return n;
}

StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, const std::vector<TensorHeader>& headers) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  json root = json::object();
  uint64_t offset = 0;
  for (const TensorHeader& h : headers) {
    uint64_t n = DTypeSize(h.dtype);
    for (int64_t d : h.shape) n *= static_cast<uint64_t>(d);
    root[h.name] = {{"dtype", DTypeTag(h.dtype)}, {"shape", h.shape},
                    {"data_offsets", {offset, offset + n}}};
    w->sizes_.push_back(n);
    offset += n;
  }
  root["__metadata__"] = {{"format", "pt"}};
  std::string header = root.dump();
  // Pad with spaces (valid JSON) so the data starts 64-byte (cache line)
  // aligned; the writer emits tensors in header order, so each tensor whose
  // predecessors' sizes are multiples of 64 bytes (every matrix of the
  // shapes we make) starts on a cache line too. The AMX kernels load 64-byte
  // rows of W: a misaligned row spans two lines and the decode GEMV loses ~4%.
  while ((header.size() + 8) % 64 != 0) header.push_back(' ');
  w->file_ = std::fopen(path.c_str(), "wb");
  if (w->file_ == nullptr) return InternalError(path + ": cannot create: " + std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  if (std::fwrite(len, 1, 8, w->file_) != 8 ||
      std::fwrite(header.data(), 1, header.size(), w->file_) != header.size())
    return InternalError(path + ": write failed");
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

Status SafetensorsWriter::Write(const void* data, size_t num_bytes) {
  if (next_ >= sizes_.size()) return FailedPreconditionError(path_ + ": more tensors than headers");
  if (num_bytes != sizes_[next_])
    return InvalidArgumentError(path_ + ": tensor " + std::to_string(next_) + " has " +
                                std::to_string(num_bytes) + " bytes, header says " +
                                std::to_string(sizes_[next_]));
  if (std::fwrite(data, 1, num_bytes, file_) != num_bytes)
    return InternalError(path_ + ": write failed: " + std::strerror(errno));
  ++next_;
  return OkStatus();
}

Status SafetensorsWriter::Close() {
  if (next_ != sizes_.size())
    return FailedPreconditionError(path_ + ": closed after " + std::to_string(next_) + " of " +
                                   std::to_string(sizes_.size()) + " tensors");
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return InternalError(path_ + ": close failed");
  return OkStatus();
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  std::vector<const TensorToWrite*> sorted;
  for (const TensorToWrite& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorToWrite* a, const TensorToWrite* b) { return a->name < b->name; });
  std::vector<TensorHeader> headers;
  for (const TensorToWrite* t : sorted) headers.push_back({t->name, t->dtype, t->shape});
  KVFORK_ASSIGN_OR_RETURN(auto w, SafetensorsWriter::Create(path, headers));
  for (const TensorToWrite* t : sorted) KVFORK_RETURN_IF_ERROR(w->Write(t->bytes.data(), t->bytes.size()));
  return w->Close();
}

}  // namespace kvfork
