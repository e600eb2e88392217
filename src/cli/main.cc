// The pagoda command line.
#include "cli/command_line.h"

int main(int argc, char** argv) {
  return pagoda::run_command_line(argc, argv);
}
