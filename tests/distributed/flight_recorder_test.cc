// The flight recorder (Note [Flight recorder] in distributed/flight_recorder.h) and its analysis
// (Note [Where ranks diverge] in distributed/flight_analysis.h), in one process:
//   - records in a mapped ring another process can read: the last `capacity` collectives in
//     order, their states and times, the step; the JSON a rank writes, read back; a damaged
//     file named;
//   - the analysis of records made up for each case: a rank that never entered a collective,
//     ranks that issued different ones, a rank that skipped one, a call some ranks did not
//     complete, ranks that agree, a rank without records, rings that forgot their oldest;
//   - RINGTAPE_FAULT's forms.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "distributed/fault.h"
#include "distributed/flight_analysis.h"
#include "distributed/flight_recorder.h"

namespace rt::dist::flight {
namespace {

namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const fs::path p = fs::path(base ? base : "/tmp") / ("flight_recorder_test_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("the recorder keeps the last collectives in a mapped ring, writes them as JSON and reads them back") {
  const fs::path dir = fresh("ring");
  REQUIRE(setenv("RINGTAPE_FLIGHT_DIR", dir.c_str(), 1) == 0);
  CHECK_FALSE(enabled());
  CHECK(queued("main", "control", 0, "barrier", 0, 0, "", "", "barrier #0") == 0);  // off: nothing recorded
  configure(3, 4, 4);
  REQUIRE(enabled());
  CHECK_THROWS_WITH_AS(configure(3, 4, -1), doctest::Contains("--trace-buffer must be >= 0"), Error);
  set_step(7);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) {
    const Purpose p("gradients", i);
    ids.push_back(queued("main", "control", uint64_t(10 + i), "all_reduce", 100 + i, 4 * (100 + i), "f32", "ring",
                         "all_reduce #" + std::to_string(10 + i)));
  }
  ids.push_back(queued("sync_bn", "sync_bn", 0, "all_gather", 8, 32, "f32", "", "all_gather #0"));  // no Purpose
  CHECK(ids == std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7});
  started(ids[4]);
  ended(ids[4], true);
  started(ids[5]);
  started(ids[0]);  // overwritten by a newer record: ignored
  ended(ids[0], true);

  const RankRecords r = read_mapped((dir / mapped_name(3)).string());
  CHECK(r.rank == 3);
  CHECK(r.world == 4);
  CHECK(r.step == 7);
  CHECK(r.recorded == 7);
  CHECK(r.capacity == 4);
  REQUIRE(r.records.size() == 4);  // the last 4 of 7, oldest first
  CHECK(r.records[0].id == 4);
  CHECK(r.records[0].seq == 13);
  CHECK(r.records[0].purpose == "gradients");
  CHECK(r.records[0].bucket == 3);
  CHECK(r.records[0].state == CallState::queued);
  CHECK(r.records[1].state == CallState::completed);
  CHECK(r.records[1].ended >= r.records[1].started);
  CHECK(r.records[1].started >= r.records[1].queued);
  CHECK(r.records[1].queued > 1.7e9);  // Unix seconds
  CHECK(r.records[2].state == CallState::started);
  CHECK(r.records[2].ended == 0);
  CHECK(r.records[3].comm == "sync_bn");
  CHECK(r.records[3].purpose == "sync_bn");
  CHECK(r.records[3].bucket == -1);
  CHECK(r.records[3].op == "all_gather");
  CHECK(r.records[3].bytes == 32);
  CHECK(r.records[3].step == 7);

  // Without the run's directory dump() writes nothing; with it, logs/flight-rank-3.json.
  CHECK(dump("test").empty());
  const fs::path run = fresh("run");
  set_run_dir(3, run.string());
  std::ifstream pointer(dir / run_dir_name(3));
  std::string where;
  std::getline(pointer, where);
  CHECK(where == fs::absolute(run).string());
  const std::string path = dump("test");
  CHECK(path == (run / "logs" / "flight-rank-3.json").string());
  std::vector<std::string> problems;
  const std::vector<RankRecords> back = read_run_dir(run.string(), problems);
  CHECK(problems.empty());
  REQUIRE(back.size() == 1);
  CHECK(back[0].reason == "test");
  REQUIRE(back[0].records.size() == 4);
  CHECK(back[0].records[2].what == "all_reduce #15");
  CHECK(back[0].records[2].algo == "ring");
  CHECK(to_json(from_json(to_json(back[0]), "again")) == to_json(back[0]));  // every field survives the round trip
  CHECK(snapshot("now").records.size() == 4);

  // A failed collective writes the file by itself.
  const uint64_t failing = queued("main", "control", 99, "broadcast", 4, 16, "f32", "", "broadcast #99");
  fs::remove(path);
  ended(failing, false);
  REQUIRE(fs::exists(path));
  std::ifstream f(path);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(has(text, "\"reason\":\"collective failed: broadcast #99\""));
  CHECK(has(text, "\"state\":\"failed\""));

  // Damaged files are named.
  std::ofstream(run / "logs" / "flight-rank-9.json") << "{\"format\": \"something else\"}";
  problems.clear();
  CHECK(read_run_dir(run.string(), problems).size() == 1);
  REQUIRE(problems.size() == 1);
  CHECK(has(problems[0], "flight-rank-9.json: not a flight record"));
  std::ofstream(dir / "junk.flight") << "junk";
  CHECK_THROWS_WITH_AS(read_mapped((dir / "junk.flight").string()), doctest::Contains("is not a flight ring"), Error);
  CHECK_THROWS_WITH_AS(read_run_dir((run / "nowhere").string(), problems), doctest::Contains("has no logs/ directory"),
                       Error);
  unsetenv("RINGTAPE_FLIGHT_DIR");
}

// ---- the analysis, on records made up for each case ----

Record call(uint64_t seq, const std::string& op, int64_t numel, CallState st, const std::string& purpose = "gradients",
            int bucket = 0, int64_t step = 5) {
  Record r;
  r.id = seq + 1;
  r.comm = "main";
  r.seq = seq;
  r.op = op;
  r.purpose = purpose;
  r.bucket = bucket;
  r.step = step;
  r.numel = numel;
  r.bytes = 4 * numel;
  r.dtype = "f32";
  r.state = st;
  r.queued = 1.75e9 + double(seq);
  r.started = st == CallState::queued ? 0 : r.queued + 0.1;
  r.ended = st == CallState::completed || st == CallState::failed ? r.started + 0.1 : 0;
  return r;
}

RankRecords rank(int r, int world, std::vector<Record> recs, const std::string& fate = "") {
  RankRecords out;
  out.rank = r;
  out.world = world;
  out.step = 5;
  out.capacity = 100;
  out.recorded = recs.size();
  out.fate = fate;
  out.records = std::move(recs);
  return out;
}

constexpr auto done = CallState::completed;
constexpr auto waiting = CallState::started;

TEST_CASE("the analysis names a rank that never entered a collective, and where the others wait") {
  std::vector<RankRecords> rs;
  for (int r = 0; r < 3; ++r)
    rs.push_back(rank(r, 4, {call(0, "all_reduce", 10, done), call(1, "all_reduce", 20, waiting, "gradients", 7)}));
  rs.push_back(rank(3, 4, {call(0, "all_reduce", 10, done)}, "stopped (SIGSTOP, or a debugger), still alive"));
  const std::string a = analyze(rs, 4);
  INFO(a);
  CHECK(has(a, "rank 3 never entered all_reduce #1 (gradients, bucket 7, step 5, f32 x 20, 80 B) on main"));
  CHECK(has(a, "ranks 0-2 have waited in it since "));
  CHECK(has(a, "rank 3's last completed collective on main is all_reduce #0 (gradients, bucket 0"));
  CHECK(has(a, "rank 3 was at step 5"));
  CHECK(has(a, "rank 3: stopped (SIGSTOP"));
}

TEST_CASE("the analysis names ranks that issued different collectives, and a skipped one") {
  std::vector<RankRecords> rs;
  rs.push_back(rank(0, 3,
                    {call(0, "all_reduce", 10, done), call(1, "all_reduce", 20, waiting, "gradients", 1),
                     call(2, "all_reduce", 30, CallState::queued, "gradients", 2)}));
  rs.push_back(rank(1, 3, {call(0, "all_reduce", 10, done), call(1, "all_gather", 2, waiting, "sync_bn", -1)}));
  rs.push_back(rank(2, 3, {call(0, "all_reduce", 10, done), call(1, "all_reduce", 20, waiting, "gradients", 1)}));
  std::string a = analyze(rs, 3);
  INFO(a);
  CHECK(has(a,
            "ranks disagree on collective #1 on main: rank 1 issued all_gather (sync_bn, step 5, f32 x 2, 8 B); "
            "ranks 0, 2 issued all_reduce (gradients, bucket 1, step 5, f32 x 20, 80 B)"));
  CHECK_FALSE(has(a, "skipped"));

  // Rank 1's #1 is the others' #2: it skipped #1.
  rs[1].records[1] = call(1, "all_reduce", 30, waiting, "gradients", 2);
  a = analyze(rs, 3);
  CHECK(has(a, "rank 1 skipped all_reduce #1 (gradients, bucket 1, step 5, f32 x 20, 80 B): its #1 is the others' #2"));

  // The others have not issued #2 yet (they stopped first): a later bucket of the same step.
  for (RankRecords* r : {&rs[0], &rs[2]}) r->records.resize(2);
  a = analyze(rs, 3);
  CHECK(has(a, "rank 1 skipped all_reduce #1 (gradients, bucket 1, step 5, f32 x 20, 80 B): its #1 is bucket 2's of "
               "the same step"));
}

TEST_CASE("the analysis names a call some ranks did not complete, then the next divergence") {
  std::vector<RankRecords> rs;
  rs.push_back(
      rank(0, 2, {call(0, "broadcast", 4, done, "evaluation", -1), call(1, "broadcast", 4, waiting, "evaluation", -1)},
           "exit status 1"));
  rs.push_back(rank(1, 2, {call(0, "broadcast", 4, waiting, "evaluation", -1)},
                    "stopped (SIGSTOP, or a debugger), still alive"));
  const std::string a = analyze(rs, 2);
  INFO(a);
  CHECK(has(a,
            "every rank entered broadcast #0 (evaluation, step 5, f32 x 4, 16 B) on main; rank 1 did not complete it"));
  CHECK(has(a, "rank 0 completed it"));
  CHECK(has(a, "rank 1 never entered broadcast #1"));
  CHECK(has(a, "rank 1's last completed collective on main is none, and it waits in broadcast #0"));
}

TEST_CASE("the analysis says when the ranks agree, names ranks without records, and skips what a ring forgot") {
  std::vector<RankRecords> rs;
  rs.push_back(rank(0, 3, {call(0, "all_reduce", 10, done), call(1, "all_reduce", 20, done)}));
  rs.push_back(rank(2, 3, {call(0, "all_reduce", 10, done), call(1, "all_reduce", 20, done)}));
  std::string a = analyze(rs, 3);
  INFO(a);
  CHECK(has(a, "no flight records from rank 1"));
  CHECK(has(a, "on main the ranks agree: every rank issued and completed collectives up to #1"));

  // Rank 2's ring holds #5.. only (it recorded more than its capacity): #0-#4 of rank 0 are not
  // compared, and rank 2 has not issued #7, which rank 0 waits in.
  rs.clear();
  std::vector<Record> a0, a2;
  for (uint64_t s = 0; s < 8; ++s) a0.push_back(call(s, "all_reduce", s == 3 ? 99 : 10, s < 7 ? done : waiting));
  for (uint64_t s = 5; s < 7; ++s) a2.push_back(call(s, "all_reduce", 10, done));
  rs.push_back(rank(0, 2, a0));
  rs.push_back(rank(1, 2, a2));
  rs[1].capacity = 2;
  rs[1].recorded = 7;
  a = analyze(rs, 2);
  CHECK_FALSE(has(a, "disagree"));  // #3 differs from nothing rank 1 still holds
  CHECK(has(a, "rank 1 never entered all_reduce #7"));
  CHECK(rank_list({5, 0, 2, 1, 7, 6}) == "0-2, 5-7");
}

TEST_CASE("an earlier run's records in the same directory are left out, and named") {
  // This run: ranks 0 and 1 of 2, written 10 s apart; an earlier 2-rank run's rank 0 (700 s
  // before) and a 4-rank run's rank 3.
  std::vector<RankRecords> rs = {rank(0, 2, {}), rank(1, 2, {}), rank(3, 4, {}), rank(0, 2, {})};
  rs[0].written = 900.0;
  rs[1].written = 1590.0;
  rs[2].written = 1000.0;
  rs[3].written = 1600.0;
  std::vector<std::string> problems;
  keep_one_run(rs, problems);
  REQUIRE(rs.size() == 2);
  CHECK(rs[0].rank == 1);
  CHECK(rs[1].rank == 0);
  CHECK(rs[1].written == 1600.0);
  REQUIRE(problems.size() == 2);
  CHECK(has(problems[0], "rank 0's records: written 700 s before the newest"));
  CHECK(has(problems[1], "rank 3's records: a world of 4, the newest records' is 2"));
}

TEST_CASE("RINGTAPE_FAULT's forms, and the malformed ones named") {
  CHECK(parse_fault("").kind == Fault::Kind::none);
  const Fault f = parse_fault("skip-bucket:1:3:0");
  CHECK(f.kind == Fault::Kind::skip_bucket);
  CHECK(f.rank == 1);
  CHECK(f.step == 3);
  CHECK(f.bucket == 0);
  CHECK(parse_fault("barrier-for-bucket:0:2:4").kind == Fault::Kind::barrier_for_bucket);
  CHECK_THROWS_WITH_AS(parse_fault("skip-bucket:1:3"), doctest::Contains("expected skip-bucket:RANK:STEP:BUCKET"),
                       Error);
  CHECK_THROWS_WITH_AS(parse_fault("drop:1:3:0"), doctest::Contains("unknown fault 'drop'"), Error);
  CHECK_THROWS_WITH_AS(parse_fault("skip-bucket:x:3:0"), doctest::Contains("RANK must be an integer >= 0, got 'x'"),
                       Error);
}

}  // namespace
}  // namespace rt::dist::flight
