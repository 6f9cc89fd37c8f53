// The constructors behind open_dataset, one per format (each in its own .cc file).
// Split and path are already checked to be non-empty and "train" or "test".
#pragma once

#include <memory>
#include <string>

#include "data/dataset.h"

namespace rt::data {

inline constexpr const char* kFashionMnistDefaultPath = "/usr/share/datasets/fashion-mnist";

// `augment` is DatasetOptions::augment for the train split, disabled for test.
std::unique_ptr<Dataset> open_fashion_mnist(const std::string& dir, const std::string& split,
                                            const AugmentOptions& augment);
std::unique_ptr<Dataset> open_cifar10(const std::string& dir, const std::string& split, const AugmentOptions& augment);
std::unique_ptr<Dataset> make_synthetic(const SyntheticOptions& opt, const std::string& split,
                                        const AugmentOptions& augment);
std::unique_ptr<Dataset> open_tensors(const std::string& path, const std::string& split, const DatasetOptions& opt);
// ImageNet in torchvision's ImageFolder layout (data/image_folder_dataset.cc).
std::unique_ptr<Dataset> open_image_folder(const std::string& root, const std::string& split,
                                           const ImageFolderOptions& opt);

}  // namespace rt::data
