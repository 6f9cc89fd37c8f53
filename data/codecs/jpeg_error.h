// libjpeg's error handling for the decoder (jpeg_decode.cc) and the encoder (jpeg_encode.cc):
// fatal errors become a longjmp back to `guarded`, whose caller throws rt::Error.
#pragma once

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first

#include <jpeglib.h>
#include <jerror.h>

namespace rt::data::jpeg_detail {

// libjpeg reports fatal errors through error_exit, which must not return. We longjmp back
// to a setjmp taken in `guarded`, whose only job is to run one libjpeg call: no C++ object
// with a destructor lives in the frames that the jump skips (libjpeg's C frames and the
// small lambda), so no destructor is bypassed. The C++ side then throws rt::Error.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] inline void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (msg_level -1) are tolerated (real datasets hold files with a few extraneous
// bytes that every decoder accepts), except running out of data: libjpeg would pad the
// image with grey, and a truncated file should be reported, not silently trained on.
inline void on_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error_exit(cinfo);
  if (msg_level == -1) cinfo->err->num_warnings++;
}

template <typename F>
[[gnu::noinline]] inline bool guarded(ErrorManager* err, const F& f) {
  if (setjmp(err->jump)) return false;
  f();
  return true;
}

}  // namespace rt::data::jpeg_detail
