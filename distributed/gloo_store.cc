#include "distributed/gloo_store.h"

namespace rt::dist {

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(prefix_ + key, Bytes(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  const Bytes b = store_.get(prefix_ + key, timeout_);
  return std::vector<char>(b.begin(), b.end());
}

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& k : keys) full.push_back(prefix_ + k);
  store_.wait(full, timeout);
}

}  // namespace rt::dist
