// The attribute tables and cudnnBackendSetAttribute / cudnnBackendGetAttribute's checks
// (cudnn_attrs.h).
//
// Note [Attribute statuses]
// What cuDNN 9.19 returns, checked by calling the real library on the CPU (descriptor calls
// need no GPU), with the categorised codes where one names the problem exactly:
//   set on a finalized descriptor               BAD_PARAM (the docs say NOT_INITIALIZED; the
//                                               library answers BAD_PARAM)
//   an attribute the descriptor type lacks      BAD_PARAM
//   one of its attributes the fake lacks        NOT_SUPPORTED (cuDNN has it, the fake does not
//                                               emulate it)
//   a computed (read-only) attribute            BAD_PARAM
//   the wrong attribute type                    BAD_PARAM_ATTRIBUTE_TYPE
//   an element count out of range               BAD_PARAM
//   a null array for elements                   BAD_PARAM_NULL_POINTER
//   a value not of its enum, a dead handle      BAD_PARAM
//   a descriptor element: null or not live      BAD_PARAM
//     of another descriptor type                BAD_PARAM_DESCRIPTOR_TYPE
//     not finalized                             BAD_PARAM_NOT_FINALIZED (cuDNN copies it when
//                                               set: Note [Descriptors are copied])
//   get from a descriptor not finalized         NOT_INITIALIZED
//   get with requestedElementCount < 0          BAD_PARAM; > 1 for a one-element attribute too
// Get writes min(requested, count) elements and reports that number; with requested == 0 or
// a null array it writes nothing and reports the attribute's count (cuDNN's behaviour).
#include "cuda_emu/cudnn_attrs.h"

#include <algorithm>
#include <cstring>

#include "cuda_emu/cudnn_status.h"

namespace rt::emu::cudnn {
namespace {

constexpr int kAnyOp = -2;  // desc: an operation type a graph takes (convolution, pointwise, genstats)
constexpr int kNoDesc = -1;

struct AttrSpec {
  cudnnBackendAttributeName_t name;
  const char* label;
  cudnnBackendAttributeType_t type, alt;  // alt: a second accepted type (alpha/beta), else == type
  int64_t min_count, max_count;
  bool settable;
  int desc = kNoDesc;  // for CUDNN_TYPE_BACKEND_DESCRIPTOR: the elements' descriptor type
};

#define RT_A(n) CUDNN_ATTR_##n, "CUDNN_ATTR_" #n
constexpr int64_t kMaxDims = CUDNN_DIM_MAX;
constexpr int64_t kMany = 1 << 20;

const AttrSpec kTensor[] = {
    {RT_A(TENSOR_BYTE_ALIGNMENT), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
    {RT_A(TENSOR_DATA_TYPE), CUDNN_TYPE_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, true},
    {RT_A(TENSOR_DIMENSIONS), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, kMaxDims, true},
    {RT_A(TENSOR_STRIDES), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, kMaxDims, true},
    {RT_A(TENSOR_VECTOR_COUNT), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
    {RT_A(TENSOR_VECTORIZED_DIMENSION), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
    {RT_A(TENSOR_UNIQUE_ID), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
    {RT_A(TENSOR_IS_VIRTUAL), CUDNN_TYPE_BOOLEAN, CUDNN_TYPE_BOOLEAN, 1, 1, true},
    {RT_A(TENSOR_IS_BY_VALUE), CUDNN_TYPE_BOOLEAN, CUDNN_TYPE_BOOLEAN, 1, 1, true},
    {RT_A(TENSOR_REORDERING_MODE), CUDNN_TYPE_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, 1, true},
};
const AttrSpec kConv[] = {
    {RT_A(CONVOLUTION_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, true},
    {RT_A(CONVOLUTION_CONV_MODE), CUDNN_TYPE_CONVOLUTION_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, 1, true},
    {RT_A(CONVOLUTION_DILATIONS), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, kMaxDims - 2, true},
    {RT_A(CONVOLUTION_FILTER_STRIDES), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, kMaxDims - 2, true},
    {RT_A(CONVOLUTION_POST_PADDINGS), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, kMaxDims - 2, true},
    {RT_A(CONVOLUTION_PRE_PADDINGS), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, kMaxDims - 2, true},
    {RT_A(CONVOLUTION_SPATIAL_DIMS), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
};
// A convolution operation's attributes: alpha, beta, the convolution, and its three tensors.
#define RT_OP_ATTRS(PRE, W, X, Y)                                                                            \
  {RT_A(PRE##_ALPHA), CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true},                                      \
  {RT_A(PRE##_BETA), CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true},                                       \
  {RT_A(PRE##_CONV_DESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,           \
   CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR},                                                                     \
  {RT_A(PRE##_##W), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,                 \
   CUDNN_BACKEND_TENSOR_DESCRIPTOR},                                                                          \
  {RT_A(PRE##_##X), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,                 \
   CUDNN_BACKEND_TENSOR_DESCRIPTOR},                                                                          \
  {RT_A(PRE##_##Y), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,                 \
   CUDNN_BACKEND_TENSOR_DESCRIPTOR}
const AttrSpec kOpForward[] = {RT_OP_ATTRS(OPERATION_CONVOLUTION_FORWARD, W, X, Y)};
const AttrSpec kOpBackwardData[] = {RT_OP_ATTRS(OPERATION_CONVOLUTION_BWD_DATA, W, DX, DY)};
const AttrSpec kOpBackwardFilter[] = {RT_OP_ATTRS(OPERATION_CONVOLUTION_BWD_FILTER, DW, X, DY)};
#undef RT_OP_ATTRS
// Pointwise descriptors and operations, genstats: the fused graphs of
// Note [Fused graphs the fake runs] in cudnn_finalize.cc. The ELU, softplus, swish and axis parameters are left out:
// setting them answers NOT_SUPPORTED, as the modes they belong to are not emulated.
const AttrSpec kPointwise[] = {
    {RT_A(POINTWISE_MODE), CUDNN_TYPE_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, 1, true},
    {RT_A(POINTWISE_MATH_PREC), CUDNN_TYPE_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, true},
    {RT_A(POINTWISE_NAN_PROPAGATION), CUDNN_TYPE_NAN_PROPOGATION, CUDNN_TYPE_NAN_PROPOGATION, 1, 1, true},
    {RT_A(POINTWISE_RELU_LOWER_CLIP), CUDNN_TYPE_DOUBLE, CUDNN_TYPE_FLOAT, 1, 1, true},
    {RT_A(POINTWISE_RELU_UPPER_CLIP), CUDNN_TYPE_DOUBLE, CUDNN_TYPE_FLOAT, 1, 1, true},
    {RT_A(POINTWISE_RELU_LOWER_CLIP_SLOPE), CUDNN_TYPE_DOUBLE, CUDNN_TYPE_FLOAT, 1, 1, true},
};
#define RT_TENSOR_ATTR(n) \
  {RT_A(n), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR}
const AttrSpec kOpPointwise[] = {
    {RT_A(OPERATION_POINTWISE_PW_DESCRIPTOR), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,
     CUDNN_BACKEND_POINTWISE_DESCRIPTOR},
    RT_TENSOR_ATTR(OPERATION_POINTWISE_XDESC),
    RT_TENSOR_ATTR(OPERATION_POINTWISE_BDESC),
    RT_TENSOR_ATTR(OPERATION_POINTWISE_YDESC),
    {RT_A(OPERATION_POINTWISE_ALPHA1), CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true},
    {RT_A(OPERATION_POINTWISE_ALPHA2), CUDNN_TYPE_FLOAT, CUDNN_TYPE_DOUBLE, 1, 1, true},
    RT_TENSOR_ATTR(OPERATION_POINTWISE_DXDESC),
    RT_TENSOR_ATTR(OPERATION_POINTWISE_DYDESC),
    RT_TENSOR_ATTR(OPERATION_POINTWISE_TDESC),
};
const AttrSpec kGenStats[] = {
    {RT_A(OPERATION_GENSTATS_MODE), CUDNN_TYPE_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, 1, true},
    {RT_A(OPERATION_GENSTATS_MATH_PREC), CUDNN_TYPE_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, 1, true},
    RT_TENSOR_ATTR(OPERATION_GENSTATS_XDESC),
    RT_TENSOR_ATTR(OPERATION_GENSTATS_SUMDESC),
    RT_TENSOR_ATTR(OPERATION_GENSTATS_SQSUMDESC),
};
#undef RT_TENSOR_ATTR
const AttrSpec kGraph[] = {
    {RT_A(OPERATIONGRAPH_HANDLE), CUDNN_TYPE_HANDLE, CUDNN_TYPE_HANDLE, 1, 1, true},
    {RT_A(OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 64, true, kAnyOp},
    {RT_A(OPERATIONGRAPH_ENGINE_GLOBAL_COUNT), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, false},
    {RT_A(OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED), CUDNN_TYPE_BOOLEAN, CUDNN_TYPE_BOOLEAN, 1, 1, true},
};
const AttrSpec kHeur[] = {
    {RT_A(ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, 1, true},
    {RT_A(ENGINEHEUR_OPERATION_GRAPH), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,
     CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
    {RT_A(ENGINEHEUR_RESULTS), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, kMany, false,
     CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
    {RT_A(ENGINEHEUR_SM_COUNT_TARGET), CUDNN_TYPE_INT32, CUDNN_TYPE_INT32, 1, 1, true},
};
const AttrSpec kEngine[] = {
    {RT_A(ENGINE_OPERATION_GRAPH), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,
     CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR},
    {RT_A(ENGINE_GLOBAL_INDEX), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, true},
    {RT_A(ENGINE_NUMERICAL_NOTE), CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 0, kMany, false},
    {RT_A(ENGINE_BEHAVIOR_NOTE), CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 0, kMany, false},
    {RT_A(ENGINE_SM_COUNT_TARGET), CUDNN_TYPE_INT32, CUDNN_TYPE_INT32, 1, 1, true},
};
const AttrSpec kCfg[] = {
    {RT_A(ENGINECFG_ENGINE), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,
     CUDNN_BACKEND_ENGINE_DESCRIPTOR},
    {RT_A(ENGINECFG_WORKSPACE_SIZE), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, false},
    {RT_A(ENGINECFG_SHARED_MEMORY_USED), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, false},
};
const AttrSpec kPlan[] = {
    {RT_A(EXECUTION_PLAN_HANDLE), CUDNN_TYPE_HANDLE, CUDNN_TYPE_HANDLE, 1, 1, true},
    {RT_A(EXECUTION_PLAN_ENGINE_CONFIG), CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,
     CUDNN_BACKEND_ENGINECFG_DESCRIPTOR},
    {RT_A(EXECUTION_PLAN_WORKSPACE_SIZE), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 1, 1, false},
};
const AttrSpec kPack[] = {
    {RT_A(VARIANT_PACK_UNIQUE_IDS), CUDNN_TYPE_INT64, CUDNN_TYPE_INT64, 0, kMany, true},
    {RT_A(VARIANT_PACK_DATA_POINTERS), CUDNN_TYPE_VOID_PTR, CUDNN_TYPE_VOID_PTR, 0, kMany, true},
    {RT_A(VARIANT_PACK_WORKSPACE), CUDNN_TYPE_VOID_PTR, CUDNN_TYPE_VOID_PTR, 1, 1, true},
};
#undef RT_A

struct TypeTable {
  cudnnBackendDescriptorType_t type;
  const char* name;
  const AttrSpec* specs;
  size_t n;
  int family_lo, family_hi;  // cuDNN's attribute numbers for this descriptor type
};

#define RT_T(t, table, lo, hi) \
  { CUDNN_BACKEND_##t, "CUDNN_BACKEND_" #t, table, std::size(table), lo, hi }
const TypeTable kTypes[] = {
    RT_T(TENSOR_DESCRIPTOR, kTensor, 900, 999),
    RT_T(CONVOLUTION_DESCRIPTOR, kConv, 100, 199),
    RT_T(OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, kOpForward, 700, 705),
    RT_T(OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, kOpBackwardData, 706, 711),
    RT_T(OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, kOpBackwardFilter, 712, 717),
    RT_T(POINTWISE_DESCRIPTOR, kPointwise, 0, 99),
    RT_T(OPERATION_POINTWISE_DESCRIPTOR, kOpPointwise, 750, 758),
    RT_T(OPERATION_GEN_STATS_DESCRIPTOR, kGenStats, 770, 774),
    RT_T(OPERATIONGRAPH_DESCRIPTOR, kGraph, 800, 899),
    RT_T(ENGINEHEUR_DESCRIPTOR, kHeur, 200, 299),
    RT_T(ENGINE_DESCRIPTOR, kEngine, 1300, 1399),
    RT_T(ENGINECFG_DESCRIPTOR, kCfg, 300, 399),
    RT_T(EXECUTION_PLAN_DESCRIPTOR, kPlan, 400, 499),
    RT_T(VARIANT_PACK_DESCRIPTOR, kPack, 1000, 1099),
};
#undef RT_T

const TypeTable* table_of(cudnnBackendDescriptorType_t t) {
  for (const TypeTable& tt : kTypes)
    if (tt.type == t) return &tt;
  return nullptr;
}

const AttrSpec* spec_of(const TypeTable& tt, cudnnBackendAttributeName_t a) {
  for (size_t i = 0; i < tt.n; ++i)
    if (tt.specs[i].name == a) return &tt.specs[i];
  return nullptr;
}

size_t element_size(cudnnBackendAttributeType_t t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
      return sizeof(void*);
    case CUDNN_TYPE_BOOLEAN:
      return sizeof(bool);
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE:
      return 8;
    case CUDNN_TYPE_CHAR:
      return 1;
    case CUDNN_TYPE_FRACTION:
      return sizeof(cudnnFraction_t);
    default:
      return 4;  // FLOAT, INT32 and the enums
  }
}
static_assert(sizeof(cudnnDataType_t) == 4 && sizeof(cudnnBackendHeurMode_t) == 4);

// The values an enum-typed element may take (inclusive), or false for non-enum types.
bool enum_range(cudnnBackendAttributeType_t t, int* lo, int* hi) {
  *lo = 0;
  switch (t) {
    case CUDNN_TYPE_DATA_TYPE:
      *hi = CUDNN_DATA_COMPLEX_FP64;
      return true;
    case CUDNN_TYPE_CONVOLUTION_MODE:
      *hi = CUDNN_CROSS_CORRELATION;
      return true;
    case CUDNN_TYPE_HEUR_MODE:
      *hi = CUDNN_HEUR_MODES_COUNT - 1;
      return true;
    case CUDNN_TYPE_TENSOR_REORDERING_MODE:
      *hi = CUDNN_TENSOR_REORDERING_F8_128x4;
      return true;
    case CUDNN_TYPE_POINTWISE_MODE:  // sparse values: a gap passes here and is refused at finalize
      *hi = CUDNN_POINTWISE_BINARY_SELECT;
      return true;
    case CUDNN_TYPE_NAN_PROPOGATION:
      *hi = CUDNN_PROPAGATE_NAN;
      return true;
    case CUDNN_TYPE_GENSTATS_MODE:
      *hi = CUDNN_GENSTATS_SUM_SQSUM;
      return true;
    default:
      return false;
  }
}

// The spec of `a` for `d`'s type, or the status (and message) of its absence.
cudnnStatus_t lookup(const char* where, cudnnBackendDescriptorType_t type, cudnnBackendAttributeName_t a,
                     const AttrSpec** out) {
  const TypeTable& tt = *table_of(type);
  *out = spec_of(tt, a);
  if (*out) return CUDNN_STATUS_SUCCESS;
  if (int(a) >= tt.family_lo && int(a) <= tt.family_hi)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, where,
                attr_name(a) + " is an attribute of " + tt.name + " that the fake does not emulate");
  return fail(CUDNN_STATUS_BAD_PARAM, where, attr_name(a) + " is not an attribute of " + tt.name);
}

bool type_ok(const AttrSpec& s, cudnnBackendAttributeType_t t) { return t == s.type || t == s.alt; }

std::string types_of(const AttrSpec& s) {
  return s.alt == s.type ? attr_type_name(s.type) : std::string(attr_type_name(s.type)) + " or " + attr_type_name(s.alt);
}

bool desc_type_ok(int want, cudnnBackendDescriptorType_t got) {
  if (want == kAnyOp)
    return got == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
           got == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
           got == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR ||
           got == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR || got == CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR;
  return int(got) == want;
}

std::string desc_want(int want) {
  return want == kAnyOp ? "an operation descriptor the fake emulates (convolution, pointwise or genstats)"
                            : desc_type_name(cudnnBackendDescriptorType_t(want));
}

}  // namespace

bool emulated_type(cudnnBackendDescriptorType_t t) { return table_of(t) != nullptr; }

const char* desc_type_name(cudnnBackendDescriptorType_t t) {
  const TypeTable* tt = table_of(t);
  return tt ? tt->name : "a descriptor type the fake does not emulate";
}

const char* attr_type_name(cudnnBackendAttributeType_t t) {
  switch (t) {
#define RT_N(x) \
  case CUDNN_TYPE_##x:  \
    return "CUDNN_TYPE_" #x;
    RT_N(HANDLE) RT_N(DATA_TYPE) RT_N(BOOLEAN) RT_N(INT64) RT_N(FLOAT) RT_N(DOUBLE) RT_N(VOID_PTR)
    RT_N(CONVOLUTION_MODE) RT_N(HEUR_MODE) RT_N(KNOB_TYPE) RT_N(NAN_PROPOGATION) RT_N(NUMERICAL_NOTE)
    RT_N(LAYOUT_TYPE) RT_N(ATTRIB_NAME) RT_N(POINTWISE_MODE) RT_N(BACKEND_DESCRIPTOR) RT_N(GENSTATS_MODE)
    RT_N(BN_FINALIZE_STATS_MODE) RT_N(REDUCTION_OPERATOR_TYPE) RT_N(BEHAVIOR_NOTE) RT_N(TENSOR_REORDERING_MODE)
    RT_N(RESAMPLE_MODE) RT_N(PADDING_MODE) RT_N(INT32) RT_N(CHAR) RT_N(SIGNAL_MODE) RT_N(FRACTION) RT_N(NORM_MODE)
    RT_N(NORM_FWD_PHASE) RT_N(RNG_DISTRIBUTION) RT_N(MOE_GROUPED_MATMUL_MODE)
#undef RT_N
  }
  return "an unknown attribute type";
}

std::string attr_name(cudnnBackendAttributeName_t a) {
  for (const TypeTable& tt : kTypes)
    if (const AttrSpec* s = spec_of(tt, a)) return s->label;
  return "attribute " + std::to_string(int(a));
}

cudnnStatus_t set_attribute(Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t count, const void* array) {
  const char* where = "cudnnBackendSetAttribute";
  if (d.node)
    return fail(CUDNN_STATUS_BAD_PARAM, where,
                std::string("the ") + desc_type_name(d.type) + " is finalized and cannot change (setting " +
                    attr_name(name) + "); set every attribute before cudnnBackendFinalize, or create a new one");
  const AttrSpec* s = nullptr;
  if (const cudnnStatus_t st = lookup(where, d.type, name, &s)) return st;
  if (!s->settable)
    return fail(CUDNN_STATUS_BAD_PARAM, where,
                std::string(s->label) + " is computed by cuDNN when the descriptor is finalized: read it with "
                "cudnnBackendGetAttribute, it cannot be set");
  if (!type_ok(*s, type))
    return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, where,
                std::string(s->label) + " takes " + types_of(*s) + ", got " + attr_type_name(type));
  if (count < s->min_count || count > s->max_count)
    return fail(CUDNN_STATUS_BAD_PARAM, where,
                std::string(s->label) + " takes " +
                    (s->min_count == s->max_count ? std::to_string(s->min_count)
                                                  : std::to_string(s->min_count) + " to " + std::to_string(s->max_count)) +
                    " element" + (s->max_count == 1 ? "" : "s") + ", got elementCount " + std::to_string(count));
  if (count > 0 && !array)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, where,
                std::string(s->label) + ": arrayOfElements is null for " + std::to_string(count) + " element(s)");
  Value v;
  v.type = type;
  v.count = count;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    const auto* elems = static_cast<const cudnnBackendDescriptor_t*>(array);
    for (int64_t i = 0; i < count; ++i) {
      const std::string which = std::string(s->label) + (count > 1 ? " element " + std::to_string(i) : "");
      if (!elems[i]) return fail(CUDNN_STATUS_BAD_PARAM, where, which + " is a null descriptor");
      const Descriptor* o = find_descriptor(elems[i]);
      if (!o)
        return fail(CUDNN_STATUS_BAD_PARAM, where,
                    which + " is not a live descriptor (destroyed, or not from cudnnBackendCreateDescriptor)");
      if (!desc_type_ok(s->desc, o->type))
        return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, where,
                    which + " must be " + desc_want(s->desc) + ", got a " + desc_type_name(o->type));
      if (!o->node)
        return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, where,
                    which + ": the " + desc_type_name(o->type) +
                        " is not finalized; cuDNN copies it when it is set (Note [Descriptors are copied]), so "
                        "finalize it first");
      v.descs.push_back(o->node);
    }
  } else {
    v.bytes.resize(size_t(count) * element_size(type));
    if (count > 0) std::memcpy(v.bytes.data(), array, v.bytes.size());
    int lo = 0, hi = 0;
    if (enum_range(type, &lo, &hi))
      for (int64_t i = 0; i < count; ++i)
        if (const int e = v.at<int>(i); e < lo || e > hi)
          return fail(CUDNN_STATUS_BAD_PARAM, where,
                      std::string(s->label) + ": " + std::to_string(e) + " is not a value of " + attr_type_name(type));
    if (type == CUDNN_TYPE_HANDLE) {
      HandleInfo h;
      if (!handle_info(v.at<cudnnHandle_t>(0), &h))
        return fail(CUDNN_STATUS_BAD_PARAM, where,
                    std::string(s->label) + ": not a live cuDNN handle (destroyed, or not from cudnnCreate)");
    }
  }
  d.attrs[int(name)] = std::move(v);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t get_attribute(const Descriptor& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t requested, int64_t* count, void* array) {
  const char* where = "cudnnBackendGetAttribute";
  if (!d.node)
    return fail(CUDNN_STATUS_NOT_INITIALIZED, where,
                std::string("the ") + desc_type_name(d.type) + " is not finalized (reading " + attr_name(name) +
                    "): call cudnnBackendFinalize first");
  const AttrSpec* s = nullptr;
  if (const cudnnStatus_t st = lookup(where, d.type, name, &s)) return st;
  const auto it = d.node->attrs.find(int(name));
  const Value* v = it == d.node->attrs.end() ? nullptr : &it->second;
  const cudnnBackendAttributeType_t held = v ? v->type : s->type;
  if (type != held)
    return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, where,
                std::string(s->label) + " holds " + attr_type_name(held) + ", asked for " + attr_type_name(type));
  if (requested < 0)
    return fail(CUDNN_STATUS_BAD_PARAM, where,
                std::string(s->label) + ": requestedElementCount is " + std::to_string(requested));
  if (s->max_count == 1 && requested > 1)
    return fail(CUDNN_STATUS_BAD_PARAM, where,
                std::string(s->label) + " has one element; requestedElementCount must be 0 or 1, got " +
                    std::to_string(requested));
  const int64_t have = v ? v->count : 0;
  const int64_t n = array ? std::min(requested, have) : 0;
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    // The caller's descriptors receive (a share of) the nodes: check them all first.
    auto* out = static_cast<cudnnBackendDescriptor_t*>(array);
    std::vector<Descriptor*> targets;
    for (int64_t i = 0; i < n; ++i) {
      Descriptor* o = out[i] ? find_descriptor(out[i]) : nullptr;
      if (!o)
        return fail(CUDNN_STATUS_BAD_PARAM, where,
                    std::string(s->label) + ": element " + std::to_string(i) +
                        " of arrayOfElements is not a live descriptor; create each with cudnnBackendCreateDescriptor");
      if (o->type != v->descs[size_t(i)]->type)
        return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, where,
                    std::string(s->label) + ": element " + std::to_string(i) + " of arrayOfElements is a " +
                        desc_type_name(o->type) + ", the attribute holds " + desc_type_name(v->descs[size_t(i)]->type));
      targets.push_back(o);
    }
    for (int64_t i = 0; i < n; ++i) {
      targets[size_t(i)]->node = v->descs[size_t(i)];
      targets[size_t(i)]->attrs = v->descs[size_t(i)]->attrs;
    }
  } else if (n > 0) {
    std::memcpy(array, v->bytes.data(), size_t(n) * element_size(type));
  }
  if (count) *count = array && requested > 0 ? n : have;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace rt::emu::cudnn
