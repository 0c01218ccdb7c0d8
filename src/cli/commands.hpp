#pragma once
// `hsring SUBCOMMAND ...`: each subcommand is a function taking its own argv (argv[0] = its name)
// and returning the process exit code. hsring::Error escaping a command prints "hsring: MESSAGE"
// and exits 2.
#include <span>
#include <string_view>

namespace hsring::cli {

using Args = std::span<char*>;

int config_check(Args args);
int run(Args args);               // run.cpp
int status(Args args);            // control.cpp
int restart_or_kill(Args args);   // control.cpp
int stop(Args args);              // control.cpp
int ring(Args args);              // ring_rm.cpp
int ledger(Args args);            // ledger_verify.cpp
int model(Args args);
int data(Args args);              // data.cpp: `data generate` (hsring-model data-generate)
int plan(Args args);              // plan.cpp: predicted memory, fit, GPU split (src/plan)
int drill(Args args);             // drill.cpp: faults against a real run, then verified (src/drill)

} // namespace hsring::cli
