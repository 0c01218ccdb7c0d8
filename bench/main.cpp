// hsring-bench MODE ARGS...: runs hsring-bench-MODE (ring | target | drafter | gang). Separate programs
// keep LibTorch out of the ring benchmark's processes.
#include "hsring/error.hpp"
#include "hsring/programs.hpp"

#include <fmt/format.h>

#include <string>

int main(int argc, char** argv) {
    if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
        fmt::print(stderr,
                   "usage: hsring-bench MODE [ARGS...]\n"
                   "modes:\n"
                   "  ring     --writers P --readers C --slot-mib S --slots N --seconds T [--cuda]\n"
                   "  target   packed forward tokens/s of a target preset vs PyTorch eager\n"
                   "  drafter  DFlash (--type eagle3: EAGLE-3) training step time vs PyTorch eager\n"
                   "  gemv     the decode step's projections at 1 and 16 rows: GEMV kernels vs cuBLAS vs copy bandwidth\n"
                   "  gang     1 vs N data-parallel drafter ranks (c10d): scaling, all-reduce hidden by backward\n"
                   "each mode prints its own --help\n");
        return 2;
    }
    try {
        hsring::exec_program(std::string("hsring-bench-") + argv[1], argc - 1, argv + 1);
    } catch (const hsring::Error& e) {
        fmt::print(stderr, "hsring-bench: {}\n", e.what());
        return 2;
    }
}
