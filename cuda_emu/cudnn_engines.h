// The fake engines of the cuDNN fake: what each offers (operations, data types, layouts,
// channel multiples, alignment), its numerical and behaviour notes, its workspace and how it
// computes; the list heuristics rank them in (default, or RINGTAPE_EMU_CUDNN_ENGINES, or a
// test's own through set_engines). The list's syntax: cudnn_engines.cc, Note [Engine list].
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda_emu/cudnn_conv.h"

namespace rt::emu::cudnn {

// A tensor's layout as its strides describe it: `any` when both readings hold (one channel),
// `other` for orders neither NCHW nor NHWC (e.g. N, H, C, W).
enum class Layout : uint8_t { any, nchw, nhwc, other };

// The fusions a graph needs and an engine runs (bits; Note [Fused graphs the fake runs] in
// cudnn_finalize.cc): the scale-bias(-relu) prologue on the convolution's input, and genstats
// on its output.
inline constexpr uint8_t kFuseScaleBiasRelu = 1, kFuseGenstats = 2;
std::string fusion_names(uint8_t fusions);  // "scale_bias_relu+genstats", "" for none

struct EngineSpec {
  std::string name;
  uint8_t ops = 7;      // bit (1 << ConvOp)
  uint8_t dtypes = 15;  // bits: f32 1, f64 2, bf16 4, f16 8
  std::vector<cudnnBackendNumericalNote_t> numerical;
  std::vector<cudnnBackendBehaviorNote_t> behavior;
  Layout layout = Layout::any;
  int64_t channels = 1;  // channels-last tensors: C/groups and O/groups multiples of this
  bool grouped = true;   // groups > 1 supported
  int64_t align = 0;     // the least byte alignment of every tensor (0: the element size)
  uint8_t modes = 1;     // bits: heuristics mode A (and B, INSTANT) 1, FALLBACK 2
  int64_t ws_fixed = 0, ws_per_weight = 0;
  uint8_t fusions = 0;  // kFuse* bits: the fused graphs it runs (default none)

  bool has(cudnnBackendNumericalNote_t n) const;
  bool has(cudnnBackendBehaviorNote_t n) const;
};

struct EngineList {
  std::vector<EngineSpec> engines;  // global index = position; mode A ranks them in this order
};

// Parses a list (Note [Engine list]); false and *error (naming the bad part and the fix).
bool parse_engines(const std::string& text, EngineList* out, std::string* error);
// The list in use: RINGTAPE_EMU_CUDNN_ENGINES (read once, at the first use) or the default.
// A bad value is reported by cudnnCreate (engine_list_error) and leaves the list empty.
std::shared_ptr<const EngineList> engines();
std::string engine_list_error();  // "" when the list in use parsed
const char* default_engine_list();

// ---- for tests -------------------------------------------------------------------------------
// Replaces the list in use for plans built from now on (Note [Plans keep their engine] in
// cudnn_desc.h; "" on success, else why not; the list in use is then unchanged).
// reset_engines() goes back to the environment's or default.
std::string set_engines(const std::string& text);
void reset_engines();
// The name of the engine of the plan most recently executed (cudnnBackendExecute), "" if none.
std::string last_engine_executed();
void note_engine_executed(const std::string& name);

// ---- support, workspace, numerics ---------------------------------------------------------------
// A convolution as the engines see it (from the operation graph, cudnn_finalize.cc).
struct ConvCase {
  ConvProblem p;
  int spatial_dims = 2;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  std::array<cudnnDataType_t, 3> dtypes{};  // x, w, y
  std::array<Layout, 3> layouts{};          // x, w, y
  int64_t alignment = 16;                   // the least byte alignment of x, w, y
  uint8_t fusions = 0;                      // kFuse* bits the graph needs (0: a single convolution)
};
const char* layout_name(Layout l);
// The layout of a 4-D tensor (dims of extent 1 do not count).
Layout layout_of(const int64_t* dims, const int64_t* strides);

struct Support {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::string why;  // names the engine, the unsupported property and what would fit
};
Support supports(const EngineSpec& e, const ConvCase& c);
// Whether heuristics offer `e` for `c` at all (operation and data type): engines offered
// may still not support the shape (Support), as real heuristics do.
bool offered(const EngineSpec& e, const ConvCase& c, cudnnBackendHeurMode_t mode);
int64_t workspace_bytes(const EngineSpec& e, const ConvCase& c);
// Note [Fake engine numerics]; `rotation` varies the order of a non-deterministic engine.
Numerics numerics_of(const EngineSpec& e, const ConvCase& c, uint64_t rotation);

}  // namespace rt::emu::cudnn
