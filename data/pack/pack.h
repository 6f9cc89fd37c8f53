// `ringtape pack`: an image folder (ImageNet's train or val split, or any ImageFolder tree)
// written as WebDataset tar shards, the format large training jobs read (data/datasets/webdataset.cc):
//
//   OUTPUT-000000.tar, OUTPUT-000001.tar, ...   samples "<key>.jpg" + "<key>.cls" + "<key>.json"
//   OUTPUT-000000.idx, ...                        Note [Shard index files] (data/formats/shard_index.h)
//   OUTPUT.json                                   summary: classes, shards, counts
//   OUTPUT.lock                                   Note [Pack output lock] (data/pack/pack_lock.h)
//
// Keys: Note [Pack keys]; what OUTPUT may be: Note [Pack output prefix] (data/pack/pack_paths.h).
// Before anything is created pack refuses a --data-path that is a dataset root (it holds
// train/ and val/) and an output folder inside --data-path. Class folders without images
// stay classes (with a warning), as the folder dataset keeps them, so labels agree.
//
// The samples are in a shuffled order (seeded), so that every shard holds every class in
// proportion and reading shards in any order needs only a small shuffle buffer.
//
// With max_side > 0 an image whose shorter side is longer is decoded (with libjpeg's DCT
// scaling by 1/2, 1/4 or 1/8 when the result stays at least max_side), resized (bilinear)
// so that its shorter side is max_side, as torchvision's Resize(max_side) sizes it, and
// re-encoded at `quality`; every other JPEG is copied byte for byte (and checked to decode
// whole). PNGs are always re-encoded as JPEG. Unreadable files are skipped, counted and
// named, as the folder reader skips them.
//
// Note [Resumable pack]
// A shard is written as X.tar.partial; once complete and synced, its X.idx is written and
// it is renamed X.tar, so X.tar with a matching X.idx is a finished shard. The .idx records
// which positions of the shuffled file list the shard covers, pack's options, the class
// names, and for every position the file read there: its relative path, size, mtime (ns),
// label and the crc32 of its bytes (computed by the worker over the bytes it read anyway).
// A pack that starts where finished shards exist keeps them only when they were written
// with the same options, the folder still has the same classes and file count, and every
// input they cover is unchanged: the same path at the same position with the same label,
// and the same size and mtime, or, where only the mtime differs (a `touch`, a copy that did
// not keep times), the same crc32 of its bytes read again. The checks stat every such file
// themselves, so they do not rest on the folder listing's cache (Note [index cache]). Any
// difference (content, size, a rename, a move to another class folder, a class folder
// added or removed, another order), and an .idx of version 1 that holds no inputs, makes
// pack refuse, naming the first few changes and the first shard affected, and printing the
// command that starts over: keeping those shards would write a dataset in which some
// images appear twice, others never, or with stale labels. Otherwise pack deletes what it
// left unfinished after them (X.tar.partial, an X.idx without its tar) and goes on from the
// first position they do not cover. A .tar it did not finish is never overwritten: pack
// stops and names it. Shards' contents depend only on the options and the files, so an
// interrupted and resumed pack writes the same bytes as one that ran through.
#pragma once

#include <cstdint>
#include <string>

namespace rt::data {

struct PackOptions {
  std::string data_path;  // the split folder (DIR/train; DIR/val as class folders or the flat layout)
  std::string output;     // shards' prefix: "shards/train" writes shards/train-000000.tar ...
  int max_side = 0;       // 0: keep every image's bytes
  int quality = 90;       // JPEG quality of re-encoded images
  int64_t shard_bytes = int64_t(1) << 30;  // a shard closes at the first sample that takes it past this
  int workers = 0;        // decoding threads; 0 = the machine's hardware threads
  uint64_t seed = 0;      // the samples' order
  bool progress = true;   // a progress line on stderr
  std::string cache_dir;  // the folder listing's cache (data/formats/image_folder.h)
  bool use_cache = true;
  int64_t max_image_pixels = 178956970;  // Note [Decoded-pixel limit] (data/datasets/imagenet_common.h); 0 = none
};

struct PackResult {
  std::string output;          // the prefix written (Note [Pack output prefix], data/pack/pack_paths.h)
  int64_t files = 0;           // images in the folder
  int64_t packed = 0;          // samples in the shards (also those of resumed shards)
  int64_t skipped = 0;         // unreadable files left out
  int64_t reencoded = 0;       // written this run
  int64_t shards = 0;          // in all
  int64_t resumed_shards = 0;  // finished by an earlier run and kept
  int64_t bytes_in = 0, bytes_out = 0;  // this run's image bytes read and shard bytes written
  double seconds = 0;
};

// Throws rt::Error naming the problem (a bad folder, an output written with other options or
// from other files, another pack holding the output, an I/O error) and how to fix it, and
// rt::UsageError for an option outside its range (a shard size under 64 KiB, a quality
// outside [1, 100], ...) and an --output that names a folder without a default prefix.
// Finished shards are never removed.
PackResult pack_image_folder(const PackOptions& opt);

}  // namespace rt::data
