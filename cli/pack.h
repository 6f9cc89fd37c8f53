// `ringtape pack`: an image folder to WebDataset tar shards (data/pack/pack.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rt::cli {

int pack_command(const std::vector<std::string>& args);

// "1GB", "500MB", "64MiB", "1048576": bytes (KB/MB/GB are powers of 1000, KiB/MiB/GiB of
// 1024, case-insensitive); nullopt for anything else or a value past 2^62.
std::optional<int64_t> parse_byte_size(const std::string& text);

}  // namespace rt::cli
