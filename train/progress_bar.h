// The progress bar `ringtape train` draws when stdout is a terminal: one line per epoch,
// redrawn in place,
//   epoch 3/90 [#######.......] 412/1251 | 1843 img/s | loss 2.314 | lr 0.1 | eta 7m12s (run 9h31m)
// format_bar() makes the line (a pure function, unit-tested); ProgressBar draws it, at most a
// few times a second. TrainLog (train/logging.h) feeds it and ends its line before it prints.
//
// Note [Bar without host sync]
// The bar is updated every step from host-side counts (steps, images, time). The loss it
// shows is the one the last --print-freq line read from the device
// (Note [Loss on the device], train/loss_meter.h); the bar never reads the device itself.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace rt::train {

struct BarState {
  int64_t epoch = 1, epochs = 1;  // the epoch in progress, 1-based
  int64_t step = 0, steps = 0;    // optimizer steps of the epoch done, of `steps`
  double img_per_s = NAN;         // NaN: not measured yet
  double loss = NAN;              // the last loss read; NaN: none yet
  double lr = NAN;
  double eta_epoch_s = NAN;       // NaN: unknown yet
  double eta_run_s = NAN;
};

// The bar's line for a terminal `columns` wide, without "\r" or a newline. It stays under
// `columns` (a character in the last column makes some terminals wrap): the bar shrinks to
// 10 characters, then the fields go, least useful first: the run's eta, lr, img/s, the bar
// itself (the count says as much), loss, the epoch's eta; what still does not fit is cut.
std::string format_bar(const BarState& s, int columns);

// "45s", "7m12s", "9h31m", "3d04h"; "?" for a NaN, infinite or negative time.
std::string format_duration(double seconds);

// The columns of the bar to draw on stdout: 0 (plain lines instead) unless `enabled`
// (--no-progress not given), stdout is a terminal and TERM is not "dumb"; else the
// terminal's width (80 when it does not say).
int bar_columns(bool enabled, int fd = 1);  // fd: where the bar goes (stdout)

// Draws format_bar() lines on `out` as "\r" + line + erase-to-end-of-line: at most once per
// `interval` unless forced (the end of an epoch). The width is asked of `out` at each draw
// (the terminal may be resized), `fallback_columns` when it does not answer (stdout can be a
// pipe to the data-parallel rank log, train/rank_log.h, that copies to the terminal).
class ProgressBar {
 public:
  ProgressBar(std::FILE* out, int fallback_columns,
              std::chrono::milliseconds interval = std::chrono::milliseconds(250));
  ~ProgressBar() { finish(); }  // an error unwinding through training prints on a line of its own
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Returns whether it drew.
  bool update(const BarState& s, bool force = false);
  // Ends the drawn line with a newline (the bar stays on screen), so whatever prints next
  // starts on a line of its own; a no-op when no bar is on the line.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  int columns() const;

  std::FILE* out_;
  int fallback_columns_;
  Clock::duration interval_;
  Clock::time_point last_draw_{};
  bool on_line_ = false;  // a bar is drawn and its line not ended
};

}  // namespace rt::train
