// TensorBoard scalars (--tensorboard): an events file TensorBoard reads while training runs,
// written without a protobuf or TensorFlow dependency.
//
// Note [Events file format]
// The file is a TFRecord stream. Each record is
//   uint64 length | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// (little-endian), where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. Each record's data
// is a serialized tensorflow.Event, hand-encoded:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first event holds file_version "brain.Event:2"; then one event per scalar. A reader
// (TensorBoard, or tests/train/tensorboard_test.cc's own) checks both CRCs of every record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace rt::train {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses; `crc` continues
// an earlier call's result. crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's masked CRC, kept apart from a CRC of data that holds CRCs.
uint32_t masked_crc32c(const void* data, size_t n);

// One TFRecord: `data` framed with its length and both masked CRCs.
std::string tfrecord(const std::string& data);

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new events.out.tfevents.<unix-time>.<hostname> in
  // it (".1", ".2", ... appended when that name is taken: a resumed run in the same second
  // still gets a file of its own, which TensorBoard merges with the others of the directory).
  // Throws rt::Error naming the path when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // An event with one scalar, written and flushed (a running TensorBoard sees it at once).
  // Throws rt::Error naming the file when the write fails.
  void scalar(const std::string& tag, int64_t step, double value);
  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);

  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace rt::train
