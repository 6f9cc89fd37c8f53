// The file lists of an ImageNet-style dataset, in torchvision's order:
//
//   index_image_folder(DIR/train): DIR/train/<class>/**/<image>, as
//     torchvision.datasets.ImageFolder: classes = the sorted class folder names, label =
//     position in that list, files walked recursively (os.walk with followlinks=True) with
//     the walked directories in sorted order and each directory's files sorted.
//   index_flat_val(DIR/val, LOC_val_solution.csv, classes): every image directly in the
//     folder, labelled by the first wnid of its row in the Kaggle solution csv.
//
// Listing ImageNet's 1.28M training files takes seconds on a warm page cache and minutes on
// a cold disk or a network file system, so index_image_folder keeps the listing in a cache
// file and re-lists only the class folders whose directories changed; see
// image_folder.cc, Note [index cache].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rt::data {

struct ImageFolderIndex {
  std::string root;                        // the split folder as given (e.g. DIR/train)
  std::vector<std::string> classes;        // class folder names, sorted by byte order
  std::vector<std::string> files;          // relative to root: "n01440764/n01440764_10026.JPEG"
  std::vector<int32_t> labels;             // class index of each file
  std::vector<std::string> empty_classes;  // classes without a single image (for a warning)
  bool from_cache = false;                 // the whole index came from the cache, nothing re-listed
  int64_t listed_classes = 0;              // class folders listed this time (0 when from_cache)
};

struct IndexOptions {
  // "" = $RINGTAPE_CACHE_DIR, else $XDG_CACHE_HOME/ringtape, else $HOME/.cache/ringtape. A
  // folder that cannot be created or written means no caching, never an error.
  std::string cache_dir;
  bool use_cache = true;
};

// Images are files whose name ends, case-insensitively, in one of torchvision's
// IMG_EXTENSIONS (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp); other files are
// ignored, and so is every file or folder whose name starts with '.' (torchvision keeps
// them, but macOS's ._x.JPEG are not images and .ipynb_checkpoints is not a class).
// Symlinks are followed (a symlink loop is an error). Class folders without images are
// listed in empty_classes and keep their label; it is an error when every class is empty.
ImageFolderIndex index_image_folder(const std::string& split_dir, const IndexOptions& opt = {});

// The flat validation layout: the images directly in val_dir (ILSVRC2012_val_00000001.JPEG
// ...), sorted by name, labelled from solution_csv (header "ImageId,PredictionString", rows
// "ILSVRC2012_val_00000001,n01751748 x y x y ..."): the label is the position of the row's
// first wnid in `classes` (the train split's classes). An image without a row, a row
// without an image, an unknown wnid or a malformed line is an error. empty_classes lists
// the classes no image belongs to.
ImageFolderIndex index_flat_val(const std::string& val_dir, const std::string& solution_csv,
                                const std::vector<std::string>& classes);

// True when `name` ends in one of the image extensions above (any case).
bool has_image_extension(const std::string& name);

}  // namespace rt::data
