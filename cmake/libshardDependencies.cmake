# Third-party dependencies, found through imported targets or pkg-config; never hard-coded paths.
# Used both by the build and (via libshardConfig.cmake) by consumers of the installed package.
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBSHARD_URING REQUIRED IMPORTED_TARGET GLOBAL liburing>=2.0)
pkg_check_modules(LIBSHARD_ZSTD REQUIRED IMPORTED_TARGET GLOBAL libzstd>=1.4)
pkg_check_modules(LIBSHARD_XXHASH REQUIRED IMPORTED_TARGET GLOBAL libxxhash>=0.8)
find_package(Threads REQUIRED)
