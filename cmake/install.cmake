# `cmake --install build --prefix P` puts volt where another project's find_package(volt) finds it:
#   P/include/volt/<layer>/*.h   headers, reached as in this tree: #include "trainer/volt.h"
#   P/lib/libvolt.a              the library
#   P/bin/volt-ckpt              the checkpoint tool (docs/checkpoints.md#volt-ckpt)
#   P/bin/volt-lighthouse        where fault-tolerant replicas meet (docs/fault_tolerance.md)
#   P/lib/cmake/volt/            voltConfig.cmake (finds volt's dependencies), the volt::volt target
include(CMakePackageConfigHelpers)
include(GNUInstallDirs)

set(VOLT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/volt)

foreach(layer trainer fabric callbacks loggers run strategies precision checkpoint distributed data nn core)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/volt/${layer}
          FILES_MATCHING PATTERN "*.h")
endforeach()

install(TARGETS volt EXPORT voltTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(VOLT_BUILD_TOOLS)
  install(TARGETS volt-ckpt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})  # P/bin/volt-ckpt
  install(TARGETS volt-lighthouse RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})  # P/bin/volt-lighthouse
endif()
install(EXPORT voltTargets NAMESPACE volt:: DESTINATION ${VOLT_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/voltConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/voltConfig.cmake
                              INSTALL_DESTINATION ${VOLT_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/voltConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/voltConfig.cmake ${PROJECT_BINARY_DIR}/voltConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/volt_find_gloo.cmake ${CMAKE_CURRENT_LIST_DIR}/volt_find_torch.cmake
        DESTINATION ${VOLT_INSTALL_CMAKEDIR})
