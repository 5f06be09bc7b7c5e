// The model-weights part of the disk tier's fingerprint (disk_block_file.h):
// a 64-bit hash of a model's files, cheap enough to take at every start.
//
// For each file of the model (a Hugging Face directory's regular files, or
// a .gguf file and, for a split NAME-0000K-of-0000N.gguf, every part), in
// name order: its name, its size, its first 1 MiB (the safetensors JSON
// header or the GGUF metadata and tensor table: names, shapes, dtypes,
// offsets) and 16 evenly spaced 4 KiB samples of the rest. Headers and sizes
// alone would miss two checkpoints of one architecture (same shapes, other
// weights, e.g. two fine-tunes or two random seeds); the samples catch
// those unless they differ only in bytes no sample touches, which the docs
// state as the limit (hashing every byte costs ~1 s per GB).
//
// Reads ~1.1 MiB per file. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace kvfork {

// NotFound/FailedPrecondition naming the path when it cannot be read.
StatusOr<uint64_t> ModelFilesFingerprint(const std::string& model_path);

}  // namespace kvfork
