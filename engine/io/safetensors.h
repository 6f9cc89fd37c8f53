// safetensors checkpoints: the format PyTorch/Hugging Face tools read and write.
//
// Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON header
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}            (metadata optional, strings only)
// then the data buffer; offsets are relative to the buffer's start, tensors are stored
// row-major (logical NCHW order) and little-endian, and together they cover the buffer
// exactly, with no holes and no overlaps.
//
// Loading treats the file as untrusted: the whole header is validated against the file's
// real size before a single tensor is allocated, so a truncated or hostile file produces
// an rt::Error naming the file, the tensor and the problem, never a crash or a huge
// allocation.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tensor.h"

namespace rt {

// Header fields beyond this are refused (the reference implementation's limit too).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// More dims than this is not a real tensor; refusing it bounds the work per entry.
inline constexpr size_t kSafetensorsMaxRank = 64;
// JSON values in a header: a real one has ~10 per tensor, so this allows ~400k tensors
// while a hostile 100 MB header of "[0,0,0,..." cannot make the parser allocate GBs.
inline constexpr size_t kSafetensorsMaxHeaderValues = size_t(1) << 22;

// "F32" <-> DType. Names the engine has no dtype for (BOOL, I8, F8_E4M3, ...) throw.
const char* safetensors_dtype_name(DType t);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte range within the data buffer
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // sorted by begin offset (file order)
  std::map<std::string, std::string> metadata;
};

// Parses and validates a header (the N JSON bytes) against the size of the data buffer
// that follows it. `path` only labels error messages.
SafetensorsHeader parse_safetensors_header(std::string_view header_json, uint64_t buffer_bytes,
                                           const std::string& path);

// Reads every tensor of the file as a contiguous CPU tensor. `metadata`, when given,
// receives the "__metadata__" map (empty when the file has none).
std::map<std::string, Tensor> load_safetensors(const std::string& path,
                                               std::map<std::string, std::string>* metadata = nullptr);

// Writes `tensors` (any device, dtype or memory format; stored contiguous) with the keys
// in sorted order and the header padded with spaces to a multiple of 8 bytes.
// Atomic: the bytes go to "<path>.tmp.<pid>", are flushed and fsync'ed, then renamed over
// `path` and the directory fsync'ed. On failure the temporary file is removed, the file
// previously at `path` (if any) is untouched, and an rt::Error names the path and the
// system's reason.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The temporary file save_safetensors(path, ...) writes in this process: "<path>.tmp.<pid>"
// (a signal handler removes it; a later run removes those of dead processes).
std::string save_temp_path(const std::string& path);
inline constexpr const char* kSaveTempMark = ".tmp.";

}  // namespace rt
