// HSRING_FAULT (hsring/fault.hpp, src/worker/CONTRACT.md): what is accepted, what is refused at
// start with a message that lists what is valid, and when point() and poison() fire.
#include "hsring/error.hpp"
#include "hsring/fault.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

using namespace hsring;

namespace {

const fault::Topology kTwoOne{2, 1};  // target.0, target.1, drafter.0

std::string refusal(const std::string& spec, const fault::Topology& t = kTwoOne) {
    try {
        fault::validate(spec, t);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// This process as `name` with HSRING_FAULT = spec.
void become(const std::string& name, const char* spec) {
    ::setenv("HSRING_FAULT", spec, 1);
    fault::configure(name, kTwoOne);
}

} // namespace

TEST_CASE("HSRING_FAULT: the documented forms are accepted, for every worker, pattern and point") {
    for (const char* spec : {"", "target.0:write:3", "target.1:write:3:hold,drafter.*:stage:8:kill",
                             "supervisor:rebuild:3:int", "*:train:2", "*:rebuild:1", "target.*:hidden:2:nan",
                             "drafter.0:grad:1:nan", "target.0:hidden:1:throw", "drafter.0:restore:1:kill",
                             "drafter.0:checkpoint:1:hold,drafter.0:commit:2"})
        CHECK_MESSAGE(refusal(spec).empty(), spec);
}

TEST_CASE("HSRING_FAULT: a misspelled point is refused with what is valid") {
    const std::string e = refusal("target.0:wirte:3");
    CHECK(e.find("'target.0:wirte:3': 'target.0' never passes a point 'wirte'") != std::string::npos);
    CHECK(e.find("<who> target.0, target.1, drafter.0, target.*, drafter.*, * or supervisor") != std::string::npos);
    CHECK(e.find("for targets write, hidden, for drafters restore, stage, train, grad, checkpoint, commit, done, for the "
                 "supervisor rebuild") != std::string::npos);
    CHECK(e.find("nan (only at hidden and grad)") != std::string::npos);
    CHECK(e.find("src/worker/CONTRACT.md") != std::string::npos);
    // A point of another role: drafters never write, the supervisor never trains, nobody passes "wirte".
    CHECK(refusal("drafter.0:write:1").find("'drafter.0' never passes a point 'write'") != std::string::npos);
    CHECK(refusal("drafter.*:hidden:1:nan").find("never passes a point 'hidden'") != std::string::npos);
    CHECK(refusal("supervisor:train:1").find("'supervisor' never passes a point 'train'") != std::string::npos);
    CHECK(refusal("*:wirte:1").find("'*' never passes a point 'wirte'") != std::string::npos);
}

TEST_CASE("HSRING_FAULT: a worker that is not in the topology is refused") {
    CHECK(refusal("targte.0:write:3").find("'targte.0' is no worker of this run (targets: 2, drafters: 1)") !=
          std::string::npos);
    CHECK(refusal("target.2:write:3").find("'target.2' is no worker") != std::string::npos);
    CHECK(refusal("drafter.1:train:3").find("'drafter.1' is no worker") != std::string::npos);
    CHECK(refusal("target.01:write:3").find("is no worker") != std::string::npos);
    CHECK(refusal("target:write:3").find("is no worker") != std::string::npos);
    CHECK(refusal("drafter.0:train:1", {4, 0}).find("<who> target.0..target.3, (no drafters)") != std::string::npos);
    // Every item is checked, also those of other processes: one bad item refuses the whole spec.
    CHECK(refusal("target.0:write:3,drafter.0:stag:2").find("'drafter.0:stag:2'") != std::string::npos);
}

TEST_CASE("HSRING_FAULT: nan only at hidden and grad; unknown actions and bad syntax are refused") {
    CHECK(refusal("target.0:write:1:nan").find("nan poisons numbers only at hidden (targets) and grad (drafters), "
                                               "not at 'write'") != std::string::npos);
    CHECK(refusal("drafter.0:train:1:nan").find("not at 'train'") != std::string::npos);
    CHECK(refusal("target.0:write:1:boom").find("unknown action 'boom'") != std::string::npos);
    for (const char* bad : {"target.0:write", "target.0:write:0", "target.0:write:x", "target.0:write:-1",
                            "target.0:write:1:kill:extra", ":write:1", "target.0::1", "target.0:write:3,"})
        CHECK_MESSAGE(refusal(bad).find("is not <who>:<point>:<n>[:<action>] with n >= 1") != std::string::npos, bad);
}

TEST_CASE("configure refuses a bad HSRING_FAULT at start; a good one fires on the n-th pass of this process only") {
    ::setenv("HSRING_FAULT", "target.0:writ:3", 1);
    CHECK_THROWS_WITH_AS(fault::configure("target.0", kTwoOne), doctest::Contains("never passes a point 'writ'"), Error);

    become("target.0", "target.0:write:3,target.1:write:1");
    fault::point("write");
    fault::point("write");
    CHECK_THROWS_AS(fault::point("write"), fault::Injected);
    fault::point("write");  // fires once

    become("target.1", "target.0:write:1");
    for (int i = 0; i < 5; ++i) fault::point("write");  // another worker's fault

    // A restarted worker: the supervisor hands it an empty HSRING_FAULT.
    become("target.0", "");
    for (int i = 0; i < 5; ++i) fault::point("write");
    ::unsetenv("HSRING_FAULT");
    fault::configure("drafter.0", kTwoOne);
    CHECK_FALSE(fault::poison("grad"));
}

TEST_CASE("poison() counts passes like point(): true on the pass of a nan fault, other actions as in point()") {
    become("target.1", "target.*:hidden:3:nan,target.1:write:2");
    CHECK_FALSE(fault::poison("hidden"));
    CHECK_FALSE(fault::poison("hidden"));
    CHECK(fault::poison("hidden"));
    CHECK_FALSE(fault::poison("hidden"));
    fault::point("write");
    CHECK_THROWS_AS(fault::point("write"), fault::Injected);

    become("drafter.0", "drafter.0:grad:2,drafter.0:grad:4:nan");
    CHECK_FALSE(fault::poison("grad"));
    CHECK_THROWS_AS(fault::poison("grad"), fault::Injected);  // pass 2: throw
    CHECK_FALSE(fault::poison("grad"));
    CHECK(fault::poison("grad"));                             // pass 4: nan

    become("drafter.0", "");
    ::unsetenv("HSRING_FAULT");
}

TEST_CASE("without a topology (set_process_name) the spec is still checked, at the first point") {
    ::setenv("HSRING_FAULT", "target.7:write:1", 1);  // any rank: the topology is unknown
    fault::set_process_name("target.7");
    CHECK_THROWS_AS(fault::point("write"), fault::Injected);
    ::setenv("HSRING_FAULT", "target.0:wrte:1", 1);
    fault::set_process_name("target.0");
    CHECK_THROWS_WITH_AS(fault::point("write"), doctest::Contains("<who> target.N, drafter.N"), Error);
    ::unsetenv("HSRING_FAULT");
    fault::set_process_name("target.0");
    fault::point("write");
}
