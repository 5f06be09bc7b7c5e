#include "kv/model_files_fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <vector>

#include "kv/block_hash.h"
#include "kv/disk_block_file.h"

namespace kvfork {
namespace {

constexpr uint64_t kHeadBytes = 1 << 20;
constexpr uint64_t kSampleBytes = 4096;
constexpr int kSamples = 16;

uint64_t MixBytes(uint64_t h, const void* p, size_t n) {
  return BlockHashMix(h ^ DiskChecksum(static_cast<const uint8_t*>(p), n));
}

Status HashFile(const std::filesystem::path& path, uint64_t* h) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return FailedPreconditionError("model fingerprint: cannot stat " + path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) return FailedPreconditionError("model fingerprint: cannot open " + path.string());
  const std::string name = path.filename().string();
  *h = MixBytes(*h, name.data(), name.size());
  *h = BlockHashMix(*h ^ size);
  std::vector<char> buf(std::min(size, kHeadBytes));
  in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
  *h = MixBytes(*h, buf.data(), static_cast<size_t>(in.gcount()));
  if (size > kHeadBytes) {
    buf.resize(kSampleBytes);
    const uint64_t rest = size - kHeadBytes;
    for (int i = 0; i < kSamples; ++i) {
      uint64_t at = kHeadBytes + rest / kSamples * i;
      in.clear();
      in.seekg(static_cast<std::streamoff>(at));
      in.read(buf.data(), static_cast<std::streamsize>(std::min(kSampleBytes, size - at)));
      *h = MixBytes(*h, buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<uint64_t> ModelFilesFingerprint(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(model_path, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(model_path, ec))
      if (e.is_regular_file()) files.push_back(e.path());
  } else if (fs::is_regular_file(model_path, ec)) {
    fs::path p(model_path);
    static const std::regex kSplit("(.*)-[0-9]{5}-of-([0-9]{5})\\.gguf");
    std::smatch m;
    const std::string name = p.filename().string();
    if (std::regex_match(name, m, kSplit)) {
      // The other parts: same stem and count, another index.
      const std::string stem = m[1].str() + "-";
      const std::string tail = "-of-" + m[2].str() + ".gguf";
      fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
      for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
        std::string n = e.path().filename().string();
        if (e.is_regular_file() && n.size() == name.size() && n.starts_with(stem) &&
            n.ends_with(tail))
          files.push_back(e.path());
      }
    } else {
      files.push_back(p);
    }
  } else {
    return NotFoundError("model fingerprint: " + model_path + " is not a file or directory");
  }
  if (files.empty()) return NotFoundError("model fingerprint: no files in " + model_path);
  std::sort(files.begin(), files.end());
  uint64_t h = BlockHashMix(0x30de1);
  for (const fs::path& f : files) KVFORK_RETURN_IF_ERROR(HashFile(f, &h));
  return h == 0 ? 1 : h;
}

}  // namespace kvfork
