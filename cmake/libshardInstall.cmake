# Installs a relocatable CMake package: find_package(libshard CONFIG) gives libshard::libshard.
include(CMakePackageConfigHelpers)
install(TARGETS libshard EXPORT libshardTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/libshard/include/libshard
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT libshardTargets NAMESPACE libshard::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/libshard)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/libshardConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/libshardConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/libshard)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/libshardConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/libshardConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/libshardConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/libshardDependencies.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/libshard)
