# Third-party dependencies, found through imported targets or pkg-config; never hard-coded paths.
# Used both by the build and (via libshardConfig.cmake) by consumers of the installed package.
# A missing library stops the configure with its name and the package that provides it on
# Debian/Ubuntu and on RHEL-likes (the portable wheels of `make wheel` carry them instead).

# libshard_missing_dependency(WHAT DEBIAN_PACKAGE RHEL_PACKAGE [DETAIL]): the configure error.
function(libshard_missing_dependency what debian rhel)
  message(FATAL_ERROR
    "libshard needs ${what}${ARGN}.\n"
    "Install it:\n"
    "  Debian/Ubuntu:             apt-get install ${debian}\n"
    "  RHEL/Rocky/Alma/Fedora:    dnf install ${rhel}\n"
    "Installed somewhere else: add its lib/pkgconfig directory to PKG_CONFIG_PATH (or its prefix "
    "to CMAKE_PREFIX_PATH). Or install a prebuilt wheel (pip install libshard-*manylinux*.whl), "
    "which carries the libraries.")
endfunction()

# libshard_pkg(VAR MODULE MIN_VERSION WHAT DEBIAN_PACKAGE RHEL_PACKAGE): PkgConfig::VAR.
function(libshard_pkg var module min_version what debian rhel)
  pkg_check_modules(${var} QUIET IMPORTED_TARGET GLOBAL "${module}>=${min_version}")
  if(NOT ${var}_FOUND)
    pkg_check_modules(_libshard_any_${var} QUIET "${module}")
    if(_libshard_any_${var}_FOUND)
      libshard_missing_dependency("${what} >= ${min_version}" ${debian} ${rhel}
        " (pkg-config module '${module}' found version ${_libshard_any_${var}_VERSION}, too old)")
    else()
      libshard_missing_dependency("${what} >= ${min_version}" ${debian} ${rhel}
        " (pkg-config module '${module}' not found)")
    endif()
  endif()
endfunction()

find_package(PkgConfig QUIET)
if(NOT PKG_CONFIG_FOUND)
  libshard_missing_dependency("pkg-config (to find liburing, zstd and xxHash)" pkg-config pkgconf-pkg-config)
endif()
libshard_pkg(LIBSHARD_URING liburing 2.0 "liburing (io_uring)" liburing-dev liburing-devel)
libshard_pkg(LIBSHARD_ZSTD libzstd 1.4 "zstd (libzstd)" libzstd-dev libzstd-devel)
libshard_pkg(LIBSHARD_XXHASH libxxhash 0.8 "xxHash (libxxhash)" libxxhash-dev xxhash-devel)
# s3:// datasets (io/s3_client.cc): CURLOPT_AWS_SIGV4 needs 7.75.
libshard_pkg(LIBSHARD_CURL libcurl 7.75 "libcurl (s3:// datasets)" libcurl4-openssl-dev libcurl-devel)
# The MD5 of s3:// uploads (remote/md5.cc): OpenSSL's libcrypto, which libcurl links for TLS.
libshard_pkg(LIBSHARD_CRYPTO libcrypto 1.1 "OpenSSL libcrypto (s3:// uploads)" libssl-dev openssl-devel)
find_package(Threads REQUIRED)
