// hsring-model dump-hidden end to end: the real program writes layer.K for a packed batch, equal
// to TargetModel's captured layers; bad input is one clear line and a non-zero exit.
#include "model/safetensors.hpp"
#include "model/target.hpp"
#include "model_test_util.hpp"

#include <cstdlib>
#include <fstream>
#include <sys/wait.h>

using namespace hsring;
using namespace hsring::model;

namespace {

int run(const std::string& args, const std::filesystem::path& log) {
    const std::string exe = test::env_or("HSRING_BUILD_ROOT", ".") + "/src/model/hsring-model";
    int rc = std::system(("'" + exe + "' " + args + " 2>'" + log.string() + "'").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string slurp(const std::filesystem::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), {}};
}

} // namespace

TEST_SUITE("cli") {

TEST_CASE("dump-hidden writes layer.K [total_tokens, hidden] fp32 equal to the target's captured layers") {
    test::TempDir dir;
    std::ofstream(dir.path() / "tokens.json") << "[[1, 2, 3, 4, 5], [9, 8], [100, 200, 300]]";
    const auto out = dir.path() / "hs.safetensors";
    REQUIRE(run("dump-hidden preset:tiny --layers 1,3,7 --tokens '" + (dir.path() / "tokens.json").string() +
                    "' --out '" + out.string() + "' --seed 9 --logits",
                dir.path() / "log") == 0);
    auto st = read_safetensors(out);
    CHECK(st.metadata.at("layers") == "1,3,7");
    CHECK(st.metadata.at("cu_seqlens") == "0,5,7,10");

    auto model = TargetModel::load(preset_shape("tiny"), at::kCPU, at::kFloat, 9);
    at::Tensor tokens = at::tensor(std::vector<std::int64_t>{1, 2, 3, 4, 5, 9, 8, 100, 200, 300}, at::kLong);
    std::vector<int> ids{1, 3, 7};
    at::Tensor logits = model.forward(tokens, {0, 5, 7, 10}, ids, [&](std::size_t i, const at::Tensor& h) {
        const auto& got = st.tensors.at("layer." + std::to_string(ids[i]));
        CHECK(got.sizes() == at::IntArrayRef({10, 64}));
        CHECK(hsring::test::dt(got.scalar_type()) == "Float");
        CHECK(at::equal(got, h));
    }, true);
    CHECK(at::equal(st.tensors.at("logits"), logits));
}

TEST_CASE("dump-hidden reports bad input on one line and fails") {
    test::TempDir dir;
    const auto log = dir.path() / "log";
    std::ofstream(dir.path() / "bad.json") << "[[1, 2], [\"x\"]]";
    CHECK(run("dump-hidden preset:tiny --layers 1 --tokens '" + (dir.path() / "bad.json").string() + "' --out '" +
                  (dir.path() / "o").string() + "'",
              log) == 1);
    CHECK(slurp(log).find("sequence 1 item 0") != std::string::npos);
    std::ofstream(dir.path() / "ok.json") << "[[1, 2]]";
    CHECK(run("dump-hidden preset:tiny --layers 1,99 --tokens '" + (dir.path() / "ok.json").string() + "' --out '" +
                  (dir.path() / "o").string() + "'",
              log) == 1);
    CHECK(slurp(log).find("layer id 99") != std::string::npos);
    CHECK(run("dump-hidden preset:nope --layers 1 --tokens x --out y", log) == 1);
    CHECK(slurp(log).find("unknown model preset") != std::string::npos);
    CHECK(run("dump-hidden", log) == 1);
}

} // TEST_SUITE
