#include "model/gguf_checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>

namespace kvfork {
namespace {

// gguf-split writes at most this many parts (its names have five digits).
constexpr uint64_t kMaxSplits = 99999;

std::string SupportedTypes() {
  std::string s;
  for (DType t : {DType::kF32, DType::kF16, DType::kBf16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K})
    s += (s.empty() ? "" : ", ") + std::string(DTypeName(t));
  return s;
}

}  // namespace

std::string GgufSplitPath(const std::string& prefix, int index, int count) {
  char suffix[64];
  std::snprintf(suffix, sizeof(suffix), "-%05d-of-%05d.gguf", index + 1, count);
  return prefix + suffix;
}

GgufCheckpoint::~GgufCheckpoint() {
  for (const Mapping& m : mappings_) munmap(m.addr, m.size);
}

StatusOr<GgufReader> GgufCheckpoint::AddFile(const std::string& file, int64_t split_no,
                                             int64_t split_count) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError(file + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return InternalError(file + ": fstat failed");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return DataLossError(file + ": truncated GGUF file (" + std::to_string(size) + " bytes)");
  }
  void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (addr == MAP_FAILED) return InternalError(file + ": mmap failed: " + std::strerror(errno));
  // As for safetensors: 2 MB pages save TLB walks on every decode sweep.
  madvise(addr, size, MADV_HUGEPAGE);
  mappings_.push_back({addr, size});
  file_paths_.push_back(file);
  const uint8_t* base = static_cast<const uint8_t*>(addr);

  KVFORK_ASSIGN_OR_RETURN(GgufReader r, GgufReader::Parse(base, size, file));
  if (split_no >= 0) {
    // A part must be the one its name says before its tensors are counted.
    KVFORK_ASSIGN_OR_RETURN(uint64_t no, r.GetUInt("split.no"));
    KVFORK_ASSIGN_OR_RETURN(uint64_t n, r.GetUInt("split.count"));
    if (no != static_cast<uint64_t>(split_no) || n != static_cast<uint64_t>(split_count))
      return DataLossError(file + ": keys split.no / split.count are " + std::to_string(no) +
                           " / " + std::to_string(n) + ", the file name says " +
                           std::to_string(split_no) + " / " + std::to_string(split_count));
  }
  if (r.data_start() > size && !r.tensors().empty())
    return DataLossError(file + ": truncated: the tensor data section starts at byte " +
                         std::to_string(r.data_start()) + ", past the end of the file (" +
                         std::to_string(size) + " bytes)");
  for (const GgufTensorInfo& g : r.tensors()) {
    const std::string where = file + ": tensor \"" + g.name + "\"";
    const DTypeTraits* traits = TraitsForGgmlType(g.ggml_type);
    if (traits == nullptr)
      return UnimplementedError(where + " has ggml type " + std::to_string(g.ggml_type) +
                                ", which kvfork does not support (" + SupportedTypes() + ")");
    TensorInfo t;
    t.name = g.name;
    t.dtype = traits->dtype;
    t.file = file;
    t.shape.assign(g.ne.rbegin(), g.ne.rend());
    for (int64_t d : g.ne)
      if (d < 1)
        return DataLossError(where + " has shape " + t.ShapeString() + ": a dimension below 1");
    if (!RowFits(t.dtype, g.ne[0]))
      return DataLossError(where + ": a row of " + std::to_string(g.ne[0]) +
                           " values is not a whole number of " + traits->name + " blocks of " +
                           std::to_string(traits->block_elems));
    // rows x row bytes, each step checked against the file so no product wraps.
    uint64_t num_bytes = RowBytes(t.dtype, g.ne[0]);
    for (size_t d = 1; d < g.ne.size(); ++d) {
      const uint64_t dim = static_cast<uint64_t>(g.ne[d]);
      if (num_bytes > size / dim)
        return DataLossError(where + " of shape " + t.ShapeString() + " (" + traits->name +
                             ") is larger than the file (" + std::to_string(size) + " bytes)");
      num_bytes *= dim;
    }
    if (g.offset % r.alignment() != 0)
      return DataLossError(where + ": offset " + std::to_string(g.offset) +
                           " is not a multiple of the alignment " + std::to_string(r.alignment()));
    if (g.offset > size || r.data_start() + g.offset > size ||
        num_bytes > size - (r.data_start() + g.offset))
      return DataLossError(where + " (offset " + std::to_string(g.offset) + ", " +
                           std::to_string(num_bytes) + " bytes) ends past the end of the file (" +
                           std::to_string(size) + " bytes): truncated or corrupt");
    t.data = base + r.data_start() + g.offset;
    t.num_bytes = static_cast<size_t>(num_bytes);
    auto [it, inserted] = tensors_.emplace(t.name, t);
    if (!inserted) return DataLossError(where + " appears twice (also in " + it->second.file + ")");
  }
  // The reader keeps a per-name index; a repeated name within one file
  // leaves fewer index entries than tensors.
  for (const GgufTensorInfo& g : r.tensors())
    if (r.FindTensor(g.name) != &g)
      return DataLossError(file + ": tensor \"" + g.name + "\" appears twice");
  return r;
}

StatusOr<std::unique_ptr<GgufCheckpoint>> GgufCheckpoint::Open(const std::string& path) {
  std::unique_ptr<GgufCheckpoint> ck(new GgufCheckpoint());
  ck->path_ = path;
  KVFORK_ASSIGN_OR_RETURN(GgufReader first, ck->AddFile(path));
  if (first.Find("split.count") == nullptr) {
    ck->metadata_ = std::move(first);
    return ck;
  }
  KVFORK_ASSIGN_OR_RETURN(uint64_t count, first.GetUInt("split.count"));
  if (count == 0 || count > kMaxSplits)
    return DataLossError(path + ": key split.count is " + std::to_string(count) + ", outside [1, " +
                         std::to_string(kMaxSplits) + "]");
  if (count == 1) {
    ck->metadata_ = std::move(first);
    return ck;
  }
  // A split model: find the prefix from this file's name and map every part
  // in order (the caller may have named any of them).
  static const std::regex kSplitName(R"((.*)-([0-9]{5})-of-([0-9]{5})\.gguf)");
  std::smatch m;
  if (!std::regex_match(path, m, kSplitName) || std::stoull(m[3].str()) != count)
    return InvalidArgumentError(path + ": key split.count is " + std::to_string(count) +
                                " but the file name is not PREFIX-NNNNN-of-" +
                                std::string(GgufSplitPath("", 0, static_cast<int>(count)), 10) +
                                " as llama.cpp's gguf-split names the parts");
  const std::string prefix = m[1].str();
  std::unique_ptr<GgufCheckpoint> split(new GgufCheckpoint());
  split->path_ = path;
  ck.reset();  // unmap the probe before mapping the parts
  uint64_t total_tensors = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string part = GgufSplitPath(prefix, static_cast<int>(i), static_cast<int>(count));
    StatusOr<GgufReader> opened =
        split->AddFile(part, static_cast<int64_t>(i), static_cast<int64_t>(count));
    if (!opened.ok())
      return opened.status().WithContext("split " + std::to_string(i + 1) + " of " +
                                         std::to_string(count));
    GgufReader r = std::move(opened).value();
    total_tensors += r.tensors().size();
    if (i == 0) split->metadata_ = std::move(r);
  }
  if (split->metadata_.Find("split.tensors.count") != nullptr) {
    KVFORK_ASSIGN_OR_RETURN(uint64_t want, split->metadata_.GetUInt("split.tensors.count"));
    if (want != total_tensors)
      return DataLossError(GgufSplitPath(prefix, 0, static_cast<int>(count)) +
                           ": key split.tensors.count is " + std::to_string(want) + " but the " +
                           std::to_string(count) + " files hold " + std::to_string(total_tensors) +
                           " tensors");
  }
  return split;
}

const TensorInfo* GgufCheckpoint::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace kvfork
