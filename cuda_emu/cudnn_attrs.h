// The typed attribute store of the cuDNN fake: per descriptor type, the attributes it takes
// (type, element count, settable or computed), and cudnnBackendSetAttribute /
// cudnnBackendGetAttribute's checks with the statuses cuDNN gives (Note [Attribute statuses]
// in cudnn_attrs.cc).
#pragma once

#include <cudnn.h>

#include <string>

#include "cuda_emu/cudnn_desc.h"

namespace rt::emu::cudnn {

// Descriptor types the fake creates (the convolution graph path); others are NOT_SUPPORTED.
bool emulated_type(cudnnBackendDescriptorType_t t);
const char* desc_type_name(cudnnBackendDescriptorType_t t);  // "CUDNN_BACKEND_TENSOR_DESCRIPTOR"
const char* attr_type_name(cudnnBackendAttributeType_t t);   // "CUDNN_TYPE_INT64"
std::string attr_name(cudnnBackendAttributeName_t a);       // "CUDNN_ATTR_TENSOR_DIMENSIONS"

cudnnStatus_t set_attribute(Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t count, const void* array);
cudnnStatus_t get_attribute(const Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t requested, int64_t* count, void* array);

}  // namespace rt::emu::cudnn
