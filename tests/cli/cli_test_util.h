// Running the pagoda binary from tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace pagoda::testing {

struct CliRun {
  int exit_code;
  std::string out;
  std::string err;
};

inline std::string read_file(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Runs `pagoda <args>` (a shell-quoted string) with no standard input and captures its output.
inline CliRun run_pagoda(const std::string& args) {
  // Unique per process: ctest runs tests in parallel processes.
  static int calls = 0;
  const std::string stem = ::testing::TempDir() + "pagoda_cli_" + std::to_string(::getpid()) + "_" +
                           std::to_string(calls++);
  const std::string out = stem + ".out";
  const std::string err = stem + ".err";
  const std::string command =
      std::string(PAGODA_BINARY) + " " + args + " >" + out + " 2>" + err + " </dev/null";
  const int status = std::system(command.c_str());
  CliRun run{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
  std::remove(out.c_str());
  std::remove(err.c_str());
  return run;
}

}  // namespace pagoda::testing
