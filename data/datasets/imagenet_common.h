// What the ImageNet datasets share, the folders (data/datasets/image_folder_dataset.cc) and the shards
// (data/datasets/webdataset.cc), with `ringtape pack` (data/pack/pack.cc): the image pipeline of one
// example, the decoded-pixel limit, the split's file index.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data/datasets/dataset.h"
#include "data/formats/image_folder.h"

namespace rt::data {

// The training or evaluation transform of example i (index in the dataset) in `epoch`, on its
// encoded bytes (JPEG or PNG): training flips, crops (RandomResizedCrop) and applies the
// policy, drawn from (opt.seed, epoch, i); evaluation resizes and centre-crops. Writes
// crop * crop * 3 bytes; undecodable bytes throw BadExample(source).
void imagenet_example(std::span<const uint8_t> bytes, const std::string& source, bool train,
                      const ImageFolderOptions& opt, int64_t i, int64_t epoch, uint8_t* out);
// Note [Decoded-pixel limit]
// A JPEG or PNG header can claim any size: 631 bytes whose header says 16000 x 16000 make a
// decoder allocate 768 MB and spend seconds on it (a "decompression bomb", or a corrupt
// header). As PIL refuses images above Image.MAX_IMAGE_PIXELS (its DecompressionBombError at
// 178,956,970 pixels), the ImageNet datasets and `ringtape pack` read the header first and
// refuse an image that claims more than ImageFolderOptions::max_image_pixels
// (--max-image-pixels, 0 = no limit) before decoding anything; the file is then skipped as
// unreadable and named, like any other bad file. The decoders' own hard limit (2^28 pixels,
// data/codecs/jpeg_decode.h) stays.
//
// Throws rt::Error naming `source`, its size, the limit and the flag that raises it when
// width * height > limit (limit 0: never).
void check_image_pixels(int64_t width, int64_t height, int64_t limit, const std::string& source);
// The width and height a JPEG's or PNG's header claims, read without decoding. Throws
// rt::Error (starting with `source`) for bytes that are neither, or a truncated header.
std::pair<int64_t, int64_t> encoded_image_size(std::span<const uint8_t> bytes, const std::string& source);

// The warning for class folders without images (kept as classes, as torchvision's
// ImageFolder keeps them), on stderr starting with `who`; nothing when there are none.
void report_empty_classes(const ImageFolderIndex& idx, const char* who);
// Throws rt::Error, starting with `dataset`, on crop and resize sizes that cannot work.
void check_imagenet_sizes(const ImageFolderOptions& opt, const char* dataset);
// The files and labels of ImageNet's split "train" (root/train) or "test" (root/val, as class
// folders or the flat layout with LOC_val_solution.csv), labelled with the train split's
// class indices; `classes` gets the class names (wnids) the labels index.
ImageFolderIndex imagenet_split_index(const std::string& root, const std::string& split, const IndexOptions& io,
                                      std::vector<std::string>* classes);

}  // namespace rt::data
