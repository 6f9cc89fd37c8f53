#include "distributed/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "distributed/stack_dump.h"
#include "engine/io/json.h"

namespace rt::dist::flight {
namespace {

namespace fs = std::filesystem;

// ---- the ring's layout (Note [Flight recorder]): a header, then `capacity` slots ----
constexpr char kMagic[8] = {'R', 'T', 'F', 'L', 'I', 'G', 'H', 'T'};
constexpr uint32_t kLayout = 1;

struct Slot {
  std::atomic<uint32_t> version;  // even: stable; odd: being written
  uint8_t state;
  int32_t bucket;
  uint64_t id, seq;
  int64_t step, numel, bytes;
  double queued, started, ended;
  char comm[16], purpose[16], op[16], dtype[8], algo[8], what[112];
};
struct Header {
  char magic[8];
  uint32_t layout, slot_size;
  int64_t capacity;
  int32_t rank, world;
  int64_t pid;
  std::atomic<uint64_t> next;  // records made: ids 1..next
  std::atomic<int64_t> step;
  char host[64];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "the ring is shared with other processes: its atomics must not hide a lock");

size_t ring_bytes(int64_t capacity) { return sizeof(Header) + size_t(capacity) * sizeof(Slot); }

template <size_t N>
void put(char (&dst)[N], const std::string& s) {
  const size_t n = std::min(N - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}
template <size_t N>
std::string get(const char (&src)[N]) {
  return std::string(src, strnlen(src, N));
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Writes under the slot's sequence lock.
template <typename Fn>
void write_slot(Slot& s, Fn&& fn) {
  const uint32_t v = s.version.load(std::memory_order_relaxed);
  s.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  fn(s);
  s.version.store(v + 2, std::memory_order_release);
}

// A stable copy of the slot, or false when it is being written (or was, during the copy).
bool read_slot(const Slot& s, Record& r) {
  const uint32_t v1 = s.version.load(std::memory_order_acquire);
  if (v1 & 1u) return false;
  Record out;
  out.id = s.id;
  out.seq = s.seq;
  out.state = CallState(std::min<uint8_t>(s.state, uint8_t(CallState::failed)));
  out.bucket = s.bucket;
  out.step = s.step;
  out.numel = s.numel;
  out.bytes = s.bytes;
  out.queued = s.queued;
  out.started = s.started;
  out.ended = s.ended;
  out.comm = get(s.comm);
  out.purpose = get(s.purpose);
  out.op = get(s.op);
  out.dtype = get(s.dtype);
  out.algo = get(s.algo);
  out.what = get(s.what);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.version.load(std::memory_order_relaxed) != v1) return false;
  r = std::move(out);
  return true;
}

RankRecords read_ring(const Header& h, const Slot* slots) {
  RankRecords r;
  r.rank = h.rank;
  r.world = h.world;
  r.pid = h.pid;
  r.host = get(h.host);
  r.capacity = h.capacity;
  r.recorded = h.next.load(std::memory_order_acquire);
  r.step = h.step.load(std::memory_order_relaxed);
  for (int64_t i = 0; i < h.capacity; ++i) {
    Record rec;
    if (read_slot(slots[i], rec) && rec.id > 0) r.records.push_back(std::move(rec));
  }
  std::sort(r.records.begin(), r.records.end(), [](const Record& a, const Record& b) { return a.id < b.id; });
  return r;
}

// The process's recorder.
struct Recorder {
  std::mutex mu;  // writers (the caller's thread, the communication threads, NCCL's watchdog)
  Header* header = nullptr;
  Slot* slots = nullptr;
  size_t mapped = 0;
  std::string dump_path;  // under mu
  bool failure_dumped = false;
};
Recorder g_rec;

thread_local const char* t_purpose = nullptr;
thread_local int t_bucket = -1;

Slot* slot_of(uint64_t id) {
  if (id == 0 || !g_rec.header) return nullptr;
  Slot& s = g_rec.slots[(id - 1) % uint64_t(g_rec.header->capacity)];
  return s.id == id ? &s : nullptr;  // else overwritten by a newer record
}

// ---- dumps on signals: a thread writes, woken through a pipe (a handler cannot allocate) ----
int g_wake[2] = {-1, -1};
std::atomic<int> g_fatal_dumps{0};
constexpr int kFatal[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
struct sigaction g_previous[sizeof kFatal / sizeof kFatal[0]];

void on_usr1(int) {
  const int saved = errno;
  const char c = 'u';
  [[maybe_unused]] const ssize_t k = ::write(g_wake[1], &c, 1);
  errno = saved;
}

// Wakes the dumping thread, waits for it at most two seconds (it may be blocked on a lock the
// crashing thread holds), then lets the signal do what it did before (Note [Whole rank logs]
// in train/rank_log.h: draining the rank's log, then the default action).
void on_fatal(int sig) {
  const int before = g_fatal_dumps.load();
  const char c = 'f';
  [[maybe_unused]] const ssize_t k = ::write(g_wake[1], &c, 1);
  for (int i = 0; i < 200 && g_fatal_dumps.load() == before; ++i) {
    const timespec ten_ms{0, 10'000'000};
    nanosleep(&ten_ms, nullptr);
  }
  for (size_t i = 0; i < sizeof kFatal / sizeof kFatal[0]; ++i)
    if (kFatal[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  ::raise(sig);
}

void install_signal_dumps() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  RT_CHECK(::pipe2(g_wake, O_CLOEXEC) == 0, "flight recorder: pipe: ", std::strerror(errno));
  std::thread([] {
    for (;;) {
      char c;
      const ssize_t k = ::read(g_wake[0], &c, 1);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return;
      if (c == 'u') {
        const std::string path = dump("SIGUSR1");
        if (!path.empty())
          std::fprintf(stderr, "flight recorder: SIGUSR1: wrote %s\n", path.c_str());
        else if (!enabled())
          std::fprintf(stderr, "flight recorder: SIGUSR1: off (--trace-buffer 0), nothing written\n");
      } else {
        dump("fatal signal");
        g_fatal_dumps.fetch_add(1);
      }
    }
  }).detach();
  struct sigaction sa = {};
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR1, &sa, nullptr);
  sa.sa_handler = on_fatal;
  sa.sa_flags = 0;
  for (size_t i = 0; i < sizeof kFatal / sizeof kFatal[0]; ++i) ::sigaction(kFatal[i], &sa, &g_previous[i]);
}

json::Value record_json(const Record& r) {
  json::Value v = json::Value::object();
  v.set("id", r.id);
  v.set("comm", r.comm);
  v.set("seq", r.seq);
  v.set("op", r.op);
  v.set("purpose", r.purpose);
  v.set("bucket", r.bucket);
  v.set("step", r.step);
  v.set("numel", r.numel);
  v.set("bytes", r.bytes);
  v.set("dtype", r.dtype);
  v.set("algo", r.algo);
  v.set("what", r.what);
  v.set("state", state_name(r.state));
  v.set("queued", r.queued);
  v.set("started", r.started);
  v.set("ended", r.ended);
  return v;
}

}  // namespace

const char* state_name(CallState s) {
  switch (s) {
    case CallState::queued:
      return "queued";
    case CallState::started:
      return "started";
    case CallState::completed:
      return "completed";
    case CallState::failed:
      return "failed";
  }
  return "?";
}

std::string mapped_name(int rank) { return "rank-" + std::to_string(rank) + ".flight"; }

std::string to_json(const RankRecords& r) {
  json::Value v = json::Value::object();
  v.set("format", "ringtape flight recorder 1");
  v.set("rank", r.rank);
  v.set("world", r.world);
  v.set("pid", r.pid);
  v.set("host", r.host);
  v.set("reason", r.reason);
  v.set("written", r.written);
  v.set("step", r.step);
  v.set("recorded", r.recorded);
  v.set("capacity", r.capacity);
  v.set("fate", r.fate);
  v.set("main_thread", r.main_thread);
  json::Value recs = json::Value::array();
  for (const Record& rec : r.records) recs.push_back(record_json(rec));
  v.set("collectives", std::move(recs));
  return json::dump(v) + "\n";
}

RankRecords from_json(const std::string& text, const std::string& origin) {
  try {
    const json::Value v = json::parse(text);
    const json::Value* f = v.find("format");
    RT_CHECK(f && f->is_string() && f->as_string() == "ringtape flight recorder 1",
             "not a flight record (no \"format\": \"ringtape flight recorder 1\")");
    auto need = [](const json::Value& o, const char* key) -> const json::Value& {
      const json::Value* m = o.find(key);
      RT_CHECK(m != nullptr, "missing \"", key, "\"");
      return *m;
    };
    RankRecords r;
    r.rank = int(need(v, "rank").as_int());
    r.world = int(need(v, "world").as_int());
    r.pid = need(v, "pid").as_int();
    r.host = need(v, "host").as_string();
    r.reason = need(v, "reason").as_string();
    r.written = need(v, "written").as_double();
    r.step = need(v, "step").as_int();
    r.recorded = uint64_t(need(v, "recorded").as_int());
    r.capacity = need(v, "capacity").as_int();
    r.fate = need(v, "fate").as_string();
    r.main_thread = need(v, "main_thread").as_string();
    for (const json::Value& c : need(v, "collectives").as_array()) {
      Record rec;
      rec.id = uint64_t(need(c, "id").as_int());
      rec.comm = need(c, "comm").as_string();
      rec.seq = uint64_t(need(c, "seq").as_int());
      rec.op = need(c, "op").as_string();
      rec.purpose = need(c, "purpose").as_string();
      rec.bucket = int(need(c, "bucket").as_int());
      rec.step = need(c, "step").as_int();
      rec.numel = need(c, "numel").as_int();
      rec.bytes = need(c, "bytes").as_int();
      rec.dtype = need(c, "dtype").as_string();
      rec.algo = need(c, "algo").as_string();
      rec.what = need(c, "what").as_string();
      const std::string st = need(c, "state").as_string();
      bool known = false;
      for (CallState s : {CallState::queued, CallState::started, CallState::completed, CallState::failed})
        if (st == state_name(s)) {
          rec.state = s;
          known = true;
        }
      RT_CHECK(known, "unknown state \"", st, "\"");
      rec.queued = need(c, "queued").as_double();
      rec.started = need(c, "started").as_double();
      rec.ended = need(c, "ended").as_double();
      r.records.push_back(std::move(rec));
    }
    return r;
  } catch (const Error& e) {
    RT_FAIL(origin, ": ", e.what());
  }
}

RankRecords read_mapped(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  RT_CHECK(fd >= 0, "cannot open the flight ring ", path, ": ", std::strerror(errno));
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < off_t(sizeof(Header))) {
    ::close(fd);
    RT_FAIL(path, " is not a flight ring (", size, " bytes)");
  }
  void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  RT_CHECK(p != MAP_FAILED, "cannot map the flight ring ", path, ": ", std::strerror(errno));
  const auto* h = static_cast<const Header*>(p);
  const bool ok = std::memcmp(h->magic, kMagic, sizeof kMagic) == 0 && h->layout == kLayout &&
                  h->slot_size == sizeof(Slot) && h->capacity > 0 && ring_bytes(h->capacity) <= size_t(size);
  RankRecords r;
  if (ok) r = read_ring(*h, reinterpret_cast<const Slot*>(h + 1));
  ::munmap(p, size_t(size));
  RT_CHECK(ok, path, " is not a flight ring of this ringtape (another layout or a truncated file)");
  return r;
}

Purpose::Purpose(const char* purpose, int bucket) : prev_purpose_(t_purpose), prev_bucket_(t_bucket) {
  t_purpose = purpose;
  t_bucket = bucket;
}

Purpose::~Purpose() {
  t_purpose = prev_purpose_;
  t_bucket = prev_bucket_;
}

void configure(int rank, int world, int64_t capacity) {
  std::lock_guard<std::mutex> lock(g_rec.mu);
  RT_CHECK(capacity >= 0, "--trace-buffer must be >= 0 (0: off), got ", capacity);
  if (g_rec.header != nullptr) return;
  if (capacity == 0) {
    install_signal_dumps();  // SIGUSR1 says the recorder is off instead of ending the rank
    return;
  }
  const size_t bytes = ring_bytes(capacity);
  void* p = MAP_FAILED;
  const char* dir = std::getenv("RINGTAPE_FLIGHT_DIR");
  if (dir && *dir) {
    const std::string path = (fs::path(dir) / mapped_name(rank)).string();
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    RT_CHECK(fd >= 0, "flight recorder: cannot create ", path, ": ", std::strerror(errno));
    if (::ftruncate(fd, off_t(bytes)) == 0) p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    RT_CHECK(p != MAP_FAILED, "flight recorder: cannot map ", path, " (", bytes, " bytes): ", std::strerror(err));
  } else {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    RT_CHECK(p != MAP_FAILED, "flight recorder: cannot allocate ", bytes, " bytes: ", std::strerror(errno));
  }
  // Zero pages: every slot's id is 0 (never written) and its version even.
  auto* h = static_cast<Header*>(p);
  h->layout = kLayout;
  h->slot_size = sizeof(Slot);
  h->capacity = capacity;
  h->rank = rank;
  h->world = world;
  h->pid = ::getpid();
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  std::memcpy(h->host, host, sizeof host);
  h->step.store(-1);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(h->magic, kMagic, sizeof kMagic);  // last: a reader meets a whole header or none
  g_rec.header = h;
  g_rec.slots = reinterpret_cast<Slot*>(h + 1);
  g_rec.mapped = bytes;
  install_signal_dumps();
}

bool enabled() { return g_rec.header != nullptr; }

uint64_t queued(const std::string& comm, const std::string& default_purpose, uint64_t seq, const char* op,
                int64_t numel, int64_t bytes, const char* dtype, const char* algo, const std::string& what) {
  if (!g_rec.header) return 0;
  const double now = unix_now();
  std::lock_guard<std::mutex> lock(g_rec.mu);
  Header& h = *g_rec.header;
  const uint64_t id = h.next.load(std::memory_order_relaxed) + 1;
  write_slot(g_rec.slots[(id - 1) % uint64_t(h.capacity)], [&](Slot& s) {
    s.id = id;
    s.seq = seq;
    s.state = uint8_t(CallState::queued);
    s.bucket = t_bucket;
    s.step = h.step.load(std::memory_order_relaxed);
    s.numel = numel;
    s.bytes = bytes;
    s.queued = now;
    s.started = s.ended = 0;
    put(s.comm, comm);
    put(s.purpose, t_purpose ? std::string(t_purpose) : default_purpose);
    put(s.op, op);
    put(s.dtype, dtype);
    put(s.algo, algo);
    put(s.what, what);
  });
  h.next.store(id, std::memory_order_release);
  return id;
}

void started(uint64_t id) {
  if (id == 0) return;
  const double now = unix_now();
  std::lock_guard<std::mutex> lock(g_rec.mu);
  if (Slot* s = slot_of(id))
    write_slot(*s, [&](Slot& w) {
      w.state = uint8_t(CallState::started);
      w.started = now;
    });
}

void ended(uint64_t id, bool ok) {
  if (id == 0) return;
  const double now = unix_now();
  bool first_failure = false;
  std::string what;
  {
    std::lock_guard<std::mutex> lock(g_rec.mu);
    if (Slot* s = slot_of(id)) {
      write_slot(*s, [&](Slot& w) {
        w.state = uint8_t(ok ? CallState::completed : CallState::failed);
        if (w.started == 0) w.started = now;
        w.ended = now;
      });
      what = get(s->what);
    }
    if (!ok && !g_rec.failure_dumped) first_failure = g_rec.failure_dumped = true;
  }
  if (first_failure) {
    const std::string path = dump("collective failed: " + what);
    if (!path.empty()) std::fprintf(stderr, "flight recorder: wrote %s\n", path.c_str());
  }
}

std::atomic<int64_t> g_step{-1};

void set_step(int64_t step) {
  g_step.store(step, std::memory_order_relaxed);
  if (g_rec.header) g_rec.header->step.store(step, std::memory_order_relaxed);
}

int64_t current_step() { return g_step.load(std::memory_order_relaxed); }

std::string run_dir_name(int rank) { return "rank-" + std::to_string(rank) + ".run_dir"; }
std::string dump_name(int rank) { return "flight-rank-" + std::to_string(rank) + ".json"; }

void set_run_dir(int rank, const std::string& run_dir) {
  if (g_rec.header) {
    std::lock_guard<std::mutex> lock(g_rec.mu);
    g_rec.dump_path = (fs::path(run_dir) / "logs" / dump_name(rank)).string();
  }
  // Also with the recorder off: the launcher restarts a run in its directory
  // (Note [Elastic restarts] in distributed/local_launcher.cc).
  const char* dir = std::getenv("RINGTAPE_FLIGHT_DIR");
  if (!dir || !*dir) return;
  std::ofstream f(fs::path(dir) / run_dir_name(rank), std::ios::trunc);
  f << fs::absolute(run_dir).string();
}

RankRecords snapshot(const std::string& reason) {
  RankRecords r;
  {
    std::lock_guard<std::mutex> lock(g_rec.mu);
    if (g_rec.header) r = read_ring(*g_rec.header, g_rec.slots);
  }
  r.reason = reason;
  r.written = unix_now();
  return r;
}

std::string dump(const std::string& reason, const std::string& main_thread) noexcept {
  try {
    std::string path;
    {
      std::lock_guard<std::mutex> lock(g_rec.mu);
      path = g_rec.dump_path;
    }
    if (!g_rec.header || path.empty()) return "";
    RankRecords r = snapshot(reason);
    r.main_thread = main_thread;
    const std::string text = to_json(r);
    fs::create_directories(fs::path(path).parent_path());
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f << text;
      f.close();
      if (!f) throw Error("cannot write " + tmp);
    }
    fs::rename(tmp, path);
    return path;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flight recorder: cannot write its records: %s\n", e.what());
    return "";
  }
}

void answer_stacks_request(int from) noexcept {
  static std::atomic<bool> answered{false};
  const char* launcher = std::getenv("RINGTAPE_FLIGHT_DIR");
  if ((launcher && *launcher) || answered.exchange(true)) return;
  try {
    const std::string why = "when rank " + std::to_string(from) + "'s collective timed out";
    const OwnStacks s = read_own_stacks(fs::read_symlink("/proc/self/exe").string());
    const int rank = g_rec.header ? int(g_rec.header->rank) : -1;
    std::fprintf(stderr, "\n---- rank %d's threads (pid %d), read %s ----\n%s----\n", rank, int(::getpid()),
                 why.c_str(), s.error.empty() ? s.text.c_str() : ("not read: " + s.error + "\n").c_str());
    std::fflush(stderr);
    const std::string path = dump("asked " + why, s.main_thread);
    if (!path.empty()) std::fprintf(stderr, "flight recorder: wrote %s\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flight recorder: cannot answer rank %d's request for stacks: %s\n", from, e.what());
  }
}

}  // namespace rt::dist::flight
