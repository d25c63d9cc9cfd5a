# Installs a relocatable package; every path in it is relative to the install prefix, so the
# prefix can be moved or copied (cmake --install build --prefix ANYWHERE):
#   find_package(libshard CONFIG)      -> libshard::libshard (core, static)
#                                         libshard::torch    (when built and LibTorch is found)
#   pkg-config libshard                -> the core library for non-CMake builds
include(CMakePackageConfigHelpers)
set(LIBSHARD_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/libshard)

install(TARGETS libshard EXPORT libshardTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/libshard/include/libshard
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/libshard/include/libshard/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/libshard)
install(EXPORT libshardTargets NAMESPACE libshard::
        DESTINATION ${LIBSHARD_INSTALL_CMAKEDIR})

# The LibTorch adapter has its own export set, so the core package never requires LibTorch.
if(TARGET libshard_torch)
  install(TARGETS libshard_torch EXPORT libshardTorchTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/libshard/torch/include/libshard
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT libshardTorchTargets NAMESPACE libshard::
          DESTINATION ${LIBSHARD_INSTALL_CMAKEDIR})
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/libshardConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/libshardConfig.cmake
  INSTALL_DESTINATION ${LIBSHARD_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/libshardConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/libshardConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/libshardConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/libshardDependencies.cmake
        DESTINATION ${LIBSHARD_INSTALL_CMAKEDIR})

# pkg-config: the prefix is derived from the .pc file's own location (${pcfiledir}), so the file
# stays right wherever the prefix is moved.
set(LIBSHARD_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH LIBSHARD_PC_TO_PREFIX /${LIBSHARD_PC_DIR} /)
string(REGEX REPLACE "/$" "" LIBSHARD_PC_TO_PREFIX "${LIBSHARD_PC_TO_PREFIX}")
set(LIBSHARD_PC_DL "")
foreach(lib ${CMAKE_DL_LIBS})
  string(APPEND LIBSHARD_PC_DL " -l${lib}")
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/libshard.pc.in
               ${CMAKE_CURRENT_BINARY_DIR}/libshard.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/libshard.pc DESTINATION ${LIBSHARD_PC_DIR})
