// Portable wheels only (LIBSHARD_PYTHON_PORTABLE, bindings/CMakeLists.txt; scripts/build_wheels.sh).
//
// GCC 12's headers bind std::condition_variable::wait(unique_lock&) to a new symbol version,
// GLIBCXX_3.4.30, the only libstdc++ symbol libshard._core needs beyond GLIBCXX_3.4.29; it alone
// would make auditwheel tag the wheel manylinux_2_35 and keep it off glibc 2.34 systems such as
// RHEL/Rocky/Alma 9, whose libstdc++ is GCC 11's. The extension is linked with
// -Wl,--wrap=<that symbol>, so its calls land here and go to the GLIBCXX_3.4.11 version, which
// every libstdc++ since GCC 4.4 has. The two differ only in how they treat pthread_cancel of a
// waiting thread (GCC 12 lets the cancellation unwind); libshard never cancels threads.
#include <condition_variable>
#include <mutex>

#if !defined(__GLIBCXX__) || !defined(__x86_64__)
#error "LIBSHARD_PYTHON_PORTABLE is for GCC's libstdc++ on x86-64"
#endif

// A reference to the old version under a local name (compiled without LTO, bindings/CMakeLists.txt,
// so the assembler sees the .symver next to the call).
extern "C" {
void libshard_cv_wait_3_4_11(std::condition_variable* cv, std::unique_lock<std::mutex>* lock);
__asm__(".symver libshard_cv_wait_3_4_11,"
        "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE@GLIBCXX_3.4.11");

void __wrap__ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE(
    std::condition_variable* cv, std::unique_lock<std::mutex>* lock) {
  libshard_cv_wait_3_4_11(cv, lock);
}
}
