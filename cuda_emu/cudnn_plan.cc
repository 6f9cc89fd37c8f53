// cudnnBackendFinalize for heuristics, engines, engine configs, execution plans and variant
// packs (cudnn_finalize.h): heuristics offer the fake engines (cudnn_engines.h) that
// implement the graph's operation and data type, best first; whether an engine supports the
// shape is decided when its engine config or plan is finalized (Note [Support at finalize]).
//
// Note [Support at finalize]
// As with real cuDNN, heuristics may offer configs that do not fit (a channel count, a
// layout, an alignment): finalizing a config built by the caller, or any plan, runs the
// engine's support check (Note [Fake engine support] in cudnn_engines.cc) and fails with the
// NOT_SUPPORTED status it gives. The configs heuristics return are finalized without it, as
// real heuristics results are.
#include <algorithm>

#include "cuda_emu/cudnn_attrs.h"
#include "cuda_emu/cudnn_finalize.h"
#include "cuda_emu/cudnn_status.h"

namespace rt::emu::cudnn {

const GraphInfo& EngineInfo::graph_info() const { return graph->as<GraphInfo>(); }
const EngineSpec& EngineInfo::spec() const { return graph_info().list->engines[size_t(index)]; }
const EngineInfo& PlanInfo::engine() const { return cfg->as<CfgInfo>().engine->as<EngineInfo>(); }
const GraphInfo& PlanInfo::graph() const { return engine().graph_info(); }

NodePtr make_engine(const NodePtr& graph, int64_t index) {
  auto n = std::make_shared<Node>();
  n->type = CUDNN_BACKEND_ENGINE_DESCRIPTOR;
  EngineInfo e{graph, index};
  const EngineSpec& spec = e.spec();
  n->attrs[int(CUDNN_ATTR_ENGINE_OPERATION_GRAPH)] = Value::of_descs({graph});
  n->attrs[int(CUDNN_ATTR_ENGINE_GLOBAL_INDEX)] = Value::of(CUDNN_TYPE_INT64, std::vector<int64_t>{index});
  n->attrs[int(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE)] = Value::of(CUDNN_TYPE_NUMERICAL_NOTE, spec.numerical);
  n->attrs[int(CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE)] = Value::of(CUDNN_TYPE_BEHAVIOR_NOTE, spec.behavior);
  n->info = e;
  return n;
}

NodePtr make_engine_config(const NodePtr& engine) {
  auto n = std::make_shared<Node>();
  n->type = CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
  const EngineInfo& e = engine->as<EngineInfo>();
  CfgInfo c{engine, workspace_bytes(e.spec(), e.graph_info().conv)};
  n->attrs[int(CUDNN_ATTR_ENGINECFG_ENGINE)] = Value::of_descs({engine});
  n->attrs[int(CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE)] = Value::of(CUDNN_TYPE_INT64, std::vector<int64_t>{c.workspace});
  // The fake's engines use no shared memory (they run on the host).
  n->attrs[int(CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED)] = Value::of(CUDNN_TYPE_INT64, std::vector<int64_t>{0});
  n->info = c;
  return n;
}

cudnnStatus_t finalize_heuristics(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const char* what = "engine heuristics (the operation graph and a mode)";
  const Value* g = required(d.attrs, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, what, &st);
  const Value* m = g ? required(d.attrs, CUDNN_ATTR_ENGINEHEUR_MODE, what, &st) : nullptr;
  if (st) return st;
  if (const std::string e = engine_list_error(); !e.empty()) return fail(CUDNN_STATUS_BAD_PARAM, kFinalize, e);
  const NodePtr& graph = g->descs[0];
  const auto mode = m->at<cudnnBackendHeurMode_t>(0);
  const GraphInfo& gi = graph->as<GraphInfo>();
  std::vector<NodePtr> results;
  for (size_t i = 0; i < gi.list->engines.size(); ++i)
    if (offered(gi.list->engines[i], gi.conv, mode)) results.push_back(make_engine_config(make_engine(graph, int64_t(i))));
  auto n = new_node(d);
  n->attrs[int(CUDNN_ATTR_ENGINEHEUR_RESULTS)] = Value::of_descs(std::move(results));
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_engine(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const char* what = "an engine (the operation graph and a global index)";
  const Value* g = required(d.attrs, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, what, &st);
  const Value* i = g ? required(d.attrs, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, what, &st) : nullptr;
  if (st) return st;
  const int64_t index = i->i64(), count = int64_t(g->descs[0]->as<GraphInfo>().list->engines.size());
  if (index < 0 || index >= count)  // cuDNN 9.19 answers NOT_SUPPORTED for an index past its engines
    return fail(CUDNN_STATUS_NOT_SUPPORTED, kFinalize,
                "engine global index " + std::to_string(index) + " is not one of the fake's " + std::to_string(count) +
                    " engines (0 to " + std::to_string(count - 1) +
                    "; CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT gives the count)");
  NodePtr e = make_engine(g->descs[0], index);
  auto n = std::make_shared<Node>(*e);
  for (const auto& [k, v] : d.attrs) n->attrs[k] = v;  // settable hints as set (SM count)
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_engine_config(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const Value* e = required(d.attrs, CUDNN_ATTR_ENGINECFG_ENGINE, "an engine config", &st);
  if (st) return st;
  const EngineInfo& ei = e->descs[0]->as<EngineInfo>();
  if (const Support s = supports(ei.spec(), ei.graph_info().conv); s.status)  // Note [Support at finalize]
    return fail(s.status, kFinalize, s.why + " (" + ei.graph_info().conv.p.str() + ")");
  d.node = make_engine_config(e->descs[0]);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_plan(Descriptor& d) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  const char* what = "an execution plan (an engine config and a handle)";
  const Value* c = required(d.attrs, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, what, &st);
  const Value* h = c ? required(d.attrs, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, what, &st) : nullptr;
  if (st) return st;
  HandleInfo hi;
  if (!handle_info(h->at<cudnnHandle_t>(0), &hi))
    return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                "the plan's handle was destroyed after it was set; keep the handle alive while its plans exist");
  PlanInfo p;
  p.cfg = c->descs[0];
  p.device = hi.device;
  p.workspace = p.cfg->as<CfgInfo>().workspace;
  const EngineInfo& ei = p.engine();
  if (const Support s = supports(ei.spec(), ei.graph_info().conv); s.status)  // Note [Support at finalize]
    return fail(s.status, kFinalize, s.why + " (" + ei.graph_info().conv.p.str() + ")");
  auto n = new_node(d);
  n->attrs[int(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)] =
      Value::of(CUDNN_TYPE_INT64, std::vector<int64_t>{p.workspace});
  n->info = std::move(p);
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_variant_pack(Descriptor& d) {
  PackInfo p;
  if (const Value* v = find_attr(d.attrs, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)) p.uids = v->i64s();
  if (const Value* v = find_attr(d.attrs, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS))
    for (int64_t i = 0; i < v->count; ++i) p.ptrs.push_back(v->at<void*>(i));
  if (const Value* v = find_attr(d.attrs, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)) p.workspace = v->at<void*>(0);
  if (p.uids.size() != p.ptrs.size())
    return fail(CUDNN_STATUS_BAD_PARAM, kFinalize,
                "the variant pack has " + std::to_string(p.uids.size()) + " unique ids but " +
                    std::to_string(p.ptrs.size()) + " data pointers; give one pointer per id");
  for (size_t i = 0; i < p.uids.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (p.uids[i] == p.uids[j])
        return fail(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES, kFinalize,
                    "unique id " + std::to_string(p.uids[i]) + " appears twice in the variant pack");
  auto n = new_node(d);
  n->attrs.try_emplace(int(CUDNN_ATTR_VARIANT_PACK_WORKSPACE),
                       Value::of(CUDNN_TYPE_VOID_PTR, std::vector<void*>{nullptr}));
  n->info = std::move(p);
  d.node = std::move(n);
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace rt::emu::cudnn
