// StragglerMonitor (Note [Stragglers] in train/straggler.h) on made-up phase times: a rank
// busier than the other ranks' median by more than the threshold in kStragglerWindows consecutive windows
// is named with the phase that differs most; a rank that only waits longer (comm) is not; a
// slow window now and then is not; the table's means.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "train/straggler.h"

namespace rt::train {
namespace {

// A window of `steps` steps: per step 3 ms data, 10 forward, 20 backward, `comm` ms waiting, 5 optimizer.
PhaseTimes window(int64_t steps, double comm_ms = 2, double extra_ms = 0, Phase slow = Phase::data) {
  PhaseTimes t;
  t.steps = steps;
  t[Phase::data] = 3e-3 * double(steps);
  t[Phase::forward] = 10e-3 * double(steps);
  t[Phase::backward] = 20e-3 * double(steps);
  t[Phase::comm] = comm_ms * 1e-3 * double(steps);
  t[Phase::optimizer] = 5e-3 * double(steps);
  t[slow] += extra_ms * 1e-3 * double(steps);
  return t;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST_CASE("median: odd, even, empty") {
  CHECK(median({3, 1, 2}) == 2);
  CHECK(median({4, 1, 3, 2}) == 2.5);
  CHECK(median({}) == 0);
}

TEST_CASE("a rank slow in one phase for three windows is named with that phase, then when it recovers") {
  StragglerMonitor m(4, 0.2);
  std::vector<std::string> lines;
  for (int w = 0; w < 2; ++w) {
    // Rank 2 spends 38 ms more in data loading; the others wait for it in comm.
    lines = m.observe({window(10, 40), window(10, 40), window(10, 2, 38, Phase::data), window(10, 40)});
    CHECK(lines.empty());  // not yet kStragglerWindows windows
  }
  lines = m.observe({window(10, 40), window(10, 40), window(10, 2, 38, Phase::data), window(10, 40)});
  REQUIRE(lines.size() == 1);
  INFO(lines[0]);
  CHECK(has(
      lines[0],
      "rank 2 is 100% slower than the other ranks' median over the last 30 steps: data 41.0 ms vs 3.0 ms per step"));
  // Two more slow windows: nothing; the sixth names it again.
  CHECK(m.observe({window(10, 40), window(10, 40), window(10, 2, 38), window(10, 40)}).empty());
  CHECK(m.observe({window(10, 40), window(10, 40), window(10, 2, 38), window(10, 40)}).empty());
  lines = m.observe({window(10, 40), window(10, 40), window(10, 2, 38), window(10, 40)});
  REQUIRE(lines.size() == 1);
  CHECK(has(lines[0], "over the last 60 steps"));
  lines = m.observe({window(10), window(10), window(10), window(10)});
  REQUIRE(lines.size() == 1);
  CHECK(
      has(lines[0], "rank 2 is no longer slower than the other ranks' median by more than 20% (it was for 60 steps)"));
  const std::string t = m.table();
  INFO(t);
  CHECK(has(t, "per-rank step time (ms per step over 70 steps):"));
  CHECK(has(t, "      busy  vs others"));
  CHECK(m.totals()[2].steps == 70);
}

TEST_CASE("the slow phase is the one farthest from its median: backward") {
  StragglerMonitor m(3, 0.2);
  std::vector<std::string> lines;
  for (int w = 0; w < kStragglerWindows; ++w)
    lines = m.observe({window(5, 30), window(5, 2, 28, Phase::backward), window(5, 30)});
  REQUIRE(lines.size() == 1);
  CHECK(has(lines[0],
            "rank 1 is 74% slower than the other ranks' median over the last 15 steps: backward 48.0 ms vs 20.0 ms"));
}

TEST_CASE("two ranks: the slow one is compared with the other, which is never named") {
  StragglerMonitor m(2, 0.2);
  std::vector<std::string> lines;
  for (int w = 0; w < kStragglerWindows; ++w) lines = m.observe({window(10, 40), window(10, 2, 38)});
  REQUIRE(lines.size() == 1);
  CHECK(has(lines[0],
            "rank 1 is 100% slower than the other ranks' median over the last 30 steps: data 41.0 ms vs "
            "3.0 ms per step"));
  CHECK(has(m.table(), "   +100%\n"));
}

TEST_CASE("not named: waiting longer, an interrupted streak, a rank within the threshold, one process") {
  StragglerMonitor m(3, 0.2);
  for (int w = 0; w < 6; ++w) {
    // Rank 0 waits 50 ms in comm: it is the fast one. Rank 1 is 15% busier (under 20%).
    CHECK(m.observe({window(10, 50), window(10, 2, 5.7, Phase::forward), window(10)}).empty());
  }
  StragglerMonitor n(2, 0.2);
  for (int w = 0; w < 4; ++w) {
    const bool slow = w % 2 == 0;  // slow, fast, slow, fast: never three in a row
    CHECK(n.observe({window(10), window(10, 2, slow ? 30 : 0)}).empty());
  }
  StragglerMonitor one(1, 0.2);
  for (int w = 0; w < 4; ++w) CHECK(one.observe({window(10)}).empty());
  CHECK(has(one.table(), "per-rank step time"));
}

TEST_CASE("with_device_clock: the host's data wait, the device's phases scaled to the host's steps") {
  PhaseTimes host = window(4, 1);  // 3 ms data per step
  PhaseTimes device;
  device.steps = 2;                    // timelines come late: two of the window's four steps
  device[Phase::forward] = 2 * 13e-3;  // the device between gradient waits: 3 ms idle for data + 10 ms
  device[Phase::backward] = 2 * 25e-3;
  device[Phase::comm] = 2 * 4e-3;
  const PhaseTimes t = with_device_clock(host, device);
  CHECK(t.steps == 4);
  CHECK(t[Phase::data] == doctest::Approx(12e-3));
  CHECK(t[Phase::forward] == doctest::Approx(4 * 10e-3));
  CHECK(t[Phase::backward] == doctest::Approx(4 * 25e-3));
  CHECK(t[Phase::comm] == doctest::Approx(4 * 4e-3));
  CHECK(t[Phase::optimizer] == 0);
  CHECK(t[Phase::other] == 0);
  // No device timeline (CPU processes, replayed graphs): the host's times as they are.
  const PhaseTimes same = with_device_clock(host, PhaseTimes{});
  for (int k = 0; k < kPhases; ++k) CHECK(same[Phase(k)] == host[Phase(k)]);
}

TEST_CASE("packing for the all-gather round-trips; a threshold of 0 is refused") {
  const PhaseTimes t = window(7, 3, 1, Phase::optimizer);
  double packed[PhaseTimes::kPacked];
  t.pack(packed);
  const PhaseTimes u = PhaseTimes::unpack(packed);
  CHECK(u.steps == 7);
  for (int k = 0; k < kPhases; ++k) CHECK(u[Phase(k)] == t[Phase(k)]);
  CHECK_THROWS_WITH(StragglerMonitor(2, 0), doctest::Contains("--straggler-threshold must be > 0"));
}

}  // namespace
}  // namespace rt::train
