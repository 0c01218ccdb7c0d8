// hsring-model end to end: dump-hidden writes layer.K for a packed batch, equal to TargetModel's
// captured layers; check-drafter evaluates an exported drafter on a target and data (numbers
// consistent with its --dump, the dump equal to the drafter's forward in this process); bad
// input is one clear line and a non-zero exit.
#include "hsring/acceptance.hpp"
#include "model/drafter/dflash/config.hpp"
#include "model/drafter/dflash/drafter.hpp"
#include "model/drafter/dflash/export.hpp"
#include "model/drafter/dflash/loss.hpp"
#include "model/drafter/registry/registry.hpp"
#include "model/io/safetensors.hpp"
#include "model/target/target.hpp"
#include "model/ops/tensor_init.hpp"
#include "model_test_util.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

using namespace hsring;
using namespace hsring::model;

namespace {

// Runs hsring-model with `args`: stderr to `log`, stdout to `out` (discarded when empty).
int run(const std::string& args, const std::filesystem::path& log, const std::filesystem::path& out = {}) {
    const std::string exe = test::env_or("HSRING_BUILD_ROOT", ".") + "/src/model/hsring-model";
    const std::string to = out.empty() ? std::string("/dev/null") : out.string();
    int rc = std::system(("'" + exe + "' " + args + " 2>'" + log.string() + "' >'" + to + "'").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string quoted(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

std::string read_text(const std::filesystem::path& p) {
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

TEST_CASE("dump-hidden on a Qwen3-MoE HF directory writes the target's captured layers and logits") {
    test::TempDir dir;
    const ModelShape s = preset_shape("tiny-moe");
    save_hf_model_dir(dir.path() / "model", s, random_target_weights(s, 3, at::kCPU, at::kFloat));
    std::ofstream(dir.path() / "tokens.json") << "[[1, 2, 3, 4, 5], [9, 8], [100, 200, 300]]";
    const auto out = dir.path() / "hs.safetensors";
    REQUIRE(run("dump-hidden " + quoted(dir.path() / "model") + " --layers 0,2,3 --tokens " + quoted(dir.path() / "tokens.json") +
                    " --out " + quoted(out) + " --logits",
                dir.path() / "log") == 0);
    auto st = read_safetensors(out);
    CHECK(st.metadata.at("layers") == "0,2,3");
    auto model = TargetModel::load(resolve_model_shape((dir.path() / "model").string()), at::kCPU, at::kFloat, 0);
    at::Tensor tokens = at::tensor(std::vector<std::int64_t>{1, 2, 3, 4, 5, 9, 8, 100, 200, 300}, at::kLong);
    std::vector<int> ids{0, 2, 3};
    at::Tensor logits = model.forward(tokens, {0, 5, 7, 10}, ids, [&](std::size_t i, const at::Tensor& h) {
        CHECK(at::equal(st.tensors.at("layer." + std::to_string(ids[i])), h));
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
    CHECK(read_text(log).find("sequence 1 item 0") != std::string::npos);
    std::ofstream(dir.path() / "ok.json") << "[[1, 2]]";
    CHECK(run("dump-hidden preset:tiny --layers 1,99 --tokens '" + (dir.path() / "ok.json").string() + "' --out '" +
                  (dir.path() / "o").string() + "'",
              log) == 1);
    CHECK(read_text(log).find("layer id 99") != std::string::npos);
    CHECK(run("dump-hidden preset:nope --layers 1 --tokens x --out y", log) == 1);
    CHECK(read_text(log).find("unknown model preset") != std::string::npos);
    CHECK(run("dump-hidden", log) == 1);
}

// A 1-layer drafter for the tiny preset (block 4, layers 1, 4, 6), away from its fresh init, and
// three samples: two with trained responses, one too short for a block.
struct CheckDrafterSetup {
    test::TempDir dir;
    ModelShape shape = preset_shape("tiny");
    DFlashConfig cfg = dflash_config_for(shape, 1, 4, -1, {1, 4, 6});
    std::filesystem::path drafter = dir.path() / "drafter", data = dir.path() / "data.jsonl";

    CheckDrafterSetup() {
        DFlashDrafter d(cfg, 3, at::kCPU);
        {
            at::NoGradGuard ng;
            at::Generator g = cpu_generator(8);
            for (auto& p : d->parameters()) p.add_(at::randn(p.sizes(), g) * 0.05);
        }
        export_dflash(drafter, d, cfg);
        std::ofstream out(data);
        at::Generator g = cpu_generator(2);
        for (auto [len, prompt] : std::vector<std::pair<int, int>>{{40, 10}, {3, 0}, {25, 6}}) {
            at::Tensor t = at::randint(500, {len}, g, at::kLong);
            nlohmann::json j;
            for (int i = 0; i < len; ++i) {
                j["input_ids"].push_back(t[i].item<std::int64_t>());
                j["loss_mask"].push_back(i < prompt ? 0 : 1);
            }
            out << j.dump() << "\n";
        }
    }
};

TEST_CASE("spec-decode refuses a huge --max-new-tokens, an unwritable --trace and a drafter with a NaN weight") {
    CheckDrafterSetup s;
    const auto log = s.dir.path() / "log";
    const std::string args = " --target preset:tiny --prompts " + quoted(s.data);
    CHECK(run("spec-decode " + quoted(s.drafter) + args + " --max-new-tokens 9223372036854775807", log) == 2);
    CHECK(read_text(log).find("--max-new-tokens must be in 1..1048576") != std::string::npos);
    CHECK(run("spec-decode " + quoted(s.drafter) + args + " --max-new-tokens 4 --trace /nonexistent/dir/t.json", log) == 1);
    CHECK(read_text(log).find("cannot write the trace /nonexistent/dir/t.json") != std::string::npos);
    // The same export with one NaN weight: refused before decoding (it used to report tau 1.000, lossless).
    TensorMap t;
    for (const auto& [name, tensor] : load_safetensors(s.drafter)) t[name] = tensor.clone();  // off the mapped file
    t["fc.weight"].view(-1)[3] = std::nan("");
    const auto bad = s.dir.path() / "nan-drafter";
    std::filesystem::create_directories(bad);
    std::filesystem::copy_file(s.drafter / "config.json", bad / "config.json");
    save_safetensors(bad / "model.safetensors", t);
    CHECK(run("spec-decode " + quoted(bad) + args + " --max-new-tokens 4", log) == 1);
    CHECK(read_text(log).find("fc.weight holds non-finite values") != std::string::npos);
    // random:L (timing) on a target with no known mask token: its last row is the mask, not an error.
    const auto target = std::filesystem::path(test::env_or("HSRING_SOURCE_ROOT", ".")) / "models" / "pycode-small";
    const auto prompts = target / "data" / "eval.jsonl";
    CHECK(run("spec-decode random:1 --target " + quoted(target) + " --prompts " + quoted(prompts) +
                  " --samples 1 --max-new-tokens 4 --json", log) == 0);
}

TEST_CASE("spec-decode of a preset run's export takes the run's [run] seed from run.json, and warns without one") {
    CheckDrafterSetup s;
    const auto log = s.dir.path() / "log";
    const std::string args = " --target preset:tiny --prompts " + quoted(s.data) + " --samples 1 --max-new-tokens 4 --json";
    // No run.json beside the export: seed 1234 with a warning that says how to pick another.
    CHECK(run("spec-decode " + quoted(s.drafter) + args, log) == 0);
    CHECK(read_text(log).find("no run.json beside") != std::string::npos);
    CHECK(read_text(log).find("pass --preset-seed N") != std::string::npos);
    // An export at RUN_DIR/drafter: the run's seed, said; the same tokens as --preset-seed with it.
    const auto run_dir = s.dir.path() / "run";
    std::filesystem::create_directories(run_dir);
    std::filesystem::copy(s.drafter, run_dir / "drafter");
    std::ofstream(run_dir / "run.json") << R"({"seed": 77})";
    const auto out_a = s.dir.path() / "a.json", out_b = s.dir.path() / "b.json";
    CHECK(run("spec-decode " + quoted(run_dir / "drafter") + args, log, out_a) == 0);
    CHECK(read_text(log).find("random weights from seed 77, the [run] seed of the run that trained this drafter") !=
          std::string::npos);
    CHECK(run("spec-decode " + quoted(run_dir / "drafter") + args + " --preset-seed 77", log, out_b) == 0);
    CHECK(read_text(log).find("random weights from seed") == std::string::npos);  // given: nothing to say
    const auto outputs = [](const std::filesystem::path& p) { return nlohmann::json::parse(read_text(p))["prompts"]; };
    CHECK(outputs(out_a) == outputs(out_b));
}

TEST_CASE("check-drafter: loss, accuracy and acceptance on a target and data, equal to its dump and to the forward here") {
    CheckDrafterSetup s;
    const auto log = s.dir.path() / "log", out = s.dir.path() / "out.json", dump = s.dir.path() / "dump.safetensors";
    const std::string common = "check-drafter " + quoted(s.drafter) + " --target preset:tiny --data " + quoted(s.data) +
                               " --num-anchors 6 --seed 9 --gamma 4";
    REQUIRE_MESSAGE(run(common + " --json --dump " + quoted(dump), log, out) == 0, read_text(log));
    const auto j = nlohmann::json::parse(read_text(out));
    CHECK(j["samples"] == 3);
    CHECK(j["samples_without_blocks"] == 1);  // the 3-token sample
    CHECK(j["blocks"] == 12);                 // 6 + 6: both long samples have more than 6 valid anchors
    CHECK(j["block_size"] == 4);
    const auto acc = j["acc"].get<std::vector<double>>();
    REQUIRE(acc.size() == 3);
    for (double a : acc) CHECK((a >= 0.0 && a <= 1.0));
    CHECK(j["accept_len"].get<double>() == doctest::Approx(hsring::expected_accept_length(acc.data(), acc.size())));
    CHECK(j["loss"].get<double>() > 0);

    // The dump: shapes, and the numbers again from its logits.
    auto st = read_safetensors(dump);
    const auto& t = st.tensors;
    const std::int64_t n = 12, b = 4, total = 40 + 3 + 25;
    CHECK(t.at("logits").sizes() == at::IntArrayRef({n, b, 512}));
    CHECK(test::dt(t.at("logits").scalar_type()) == "Float");
    for (const char* k : {"block_tokens", "block_positions", "labels", "weights"}) CHECK(t.at(k).sizes() == at::IntArrayRef({n, b}));
    CHECK(t.at("anchors").sizes() == at::IntArrayRef({n}));
    CHECK(t.at("block_sample_id").sizes() == at::IntArrayRef({n}));
    CHECK(t.at("sample_ids").sizes() == at::IntArrayRef({3}));
    CHECK(t.at("cu_seqlens").sizes() == at::IntArrayRef({4}));
    CHECK(t.at("input_ids").sizes() == at::IntArrayRef({total}));
    CHECK(t.at("loss_mask").sizes() == at::IntArrayRef({total}));
    CHECK(t.at("target_hidden").sizes() == at::IntArrayRef({total, 3 * 64}));
    CHECK(st.metadata.at("seed") == "9");
    const at::Tensor w = t.at("weights"), labels = t.at("labels"), logits = t.at("logits");
    CHECK(w.select(1, 1).gt(0).all().item<bool>());  // slot 1 of every block is trained
    at::Tensor ce = at::cross_entropy_loss(logits.reshape({n * b, -1}), labels.reshape({-1}), {}, at::Reduction::None);
    const double loss = (ce * w.reshape({-1})).sum().item<double>() / w.sum().item<double>();
    CHECK(j["loss"].get<double>() == doctest::Approx(loss).epsilon(1e-5));
    at::Tensor hit = (logits.argmax(2) == labels) & (w > 0);
    for (std::int64_t k = 1; k < b; ++k)
        CHECK(acc[static_cast<std::size_t>(k - 1)] ==
              doctest::Approx(hit.select(1, k).sum().item<double>() / (w.select(1, k) > 0).sum().item<double>()));

    // In this process: the target's layers, the evaluation anchors of each sample and the
    // drafter's forward give the dumped logits.
    auto target = TargetModel::load(s.shape, at::kCPU, at::kFloat, 9);
    auto [drafter, cfg] = import_dflash(s.drafter);
    const auto cu = t.at("cu_seqlens"), ids = t.at("input_ids");
    std::int64_t row = 0;
    for (std::int64_t i = 0; i < 3; ++i) {
        const std::int64_t begin = cu[i].item<std::int64_t>(), len = cu[i + 1].item<std::int64_t>() - begin;
        DFlashBatch batch{{}, ids.narrow(0, begin, len), t.at("loss_mask").narrow(0, begin, len), {0, len}};
        std::vector<at::Tensor> layers(3);
        target.forward(batch.tokens, batch.cu_seqlens, cfg.target_layer_ids,
                       [&](std::size_t l, const at::Tensor& h) { layers[l] = h; });
        batch.hidden = at::stack(layers);
        CHECK(at::equal(t.at("target_hidden").narrow(0, begin, len), batch.hidden.permute({1, 0, 2}).reshape({len, -1})));
        auto blocks = eval_dflash_blocks(batch.tokens, batch.loss_mask, batch.cu_seqlens, 4, 511, 6, 4.0, 9,
                                         {static_cast<std::uint64_t>(i)});
        const std::int64_t nb = blocks.num_blocks();
        CHECK(nb == (i == 1 ? 0 : 6));
        if (nb == 0) continue;
        CHECK(at::equal(t.at("anchors").narrow(0, row, nb), at::tensor(blocks.anchors, at::kLong)));
        CHECK(t.at("block_sample_id").narrow(0, row, nb).eq(i).all().item<bool>());
        CHECK(at::equal(t.at("block_tokens").narrow(0, row, nb), blocks.block_tokens.reshape({nb, b})));
        CHECK(at::equal(t.at("block_positions").narrow(0, row, nb), blocks.block_positions.reshape({nb, b})));
        at::NoGradGuard ng;
        at::Tensor here = at::matmul(dflash_hidden(drafter, target.head(), batch, blocks, {}), target.head().lm_head.t());
        at::Tensor dumped = logits.narrow(0, row, nb).reshape({nb * b, -1});
        INFO("sample " << i << " max diff " << (here - dumped).abs().max().item<double>());
        CHECK(at::allclose(here, dumped, 1e-5, 1e-5));
        row += nb;
    }
    CHECK(row == n);

    // The human-readable form says the same.
    REQUIRE(run(common, log, out) == 0);
    const std::string text = read_text(out);
    CHECK(text.find("accuracy at block positions 1..3") != std::string::npos);
    CHECK(text.find("acceptance length estimate") != std::string::npos);
    CHECK(text.find("12 blocks") != std::string::npos);
}

// An EAGLE-3 export of preset:tiny (seed 9's head), its weights moved from their init.
std::filesystem::path eagle3_export(const CheckDrafterSetup& s) {
    const TargetHead head = load_target_head(s.shape, at::kCPU, at::kFloat, 9);
    DrafterSpec spec;
    spec.type = "eagle3";
    spec.target = s.shape;
    spec.layer_ids = eagle3_layer_ids(static_cast<int>(s.shape.num_layers), {1, 3, 5});
    spec.head = &head;
    auto d = make_drafter(spec, 4, at::kCPU);
    {
        at::NoGradGuard ng;
        at::Generator g = cpu_generator(6);
        for (auto& p : d->module().parameters()) p.add_(at::randn(p.sizes(), g) * 0.05);
    }
    const auto dir = s.dir.path() / "eagle3";
    d->export_to(dir, at::kFloat);
    return dir;
}

TEST_CASE("check-drafter evaluates an EAGLE-3 export: its training-time test's loss and accuracy, equal to the evaluation here") {
    // It said "architectures must list DFlashDraftModel", then pointed at spec-decode.
    CheckDrafterSetup s;
    const auto eagle = eagle3_export(s);
    const auto log = s.dir.path() / "log", out = s.dir.path() / "out";
    const std::string common = "check-drafter " + quoted(eagle) + " --target preset:tiny --data " + quoted(s.data) +
                               " --seed 9 --ttt-steps 3 --ttt-decay 0.5";
    REQUIRE_MESSAGE(run(common + " --json", log, out) == 0, read_text(log));
    const auto j = nlohmann::json::parse(read_text(out));
    CHECK(j["type"] == "eagle3");
    CHECK(j["samples"] == 3);
    const auto acc = j["acc"].get<std::vector<double>>();
    REQUIRE(acc.size() == 3);
    for (double a : acc) CHECK((a >= 0.0 && a <= 1.0));
    CHECK(j["accept_len"].get<double>() == doctest::Approx(hsring::expected_accept_length(acc.data(), acc.size())));

    // Here: the target's layers 1, 3, 5 and its last, the export's own evaluation, sample by sample.
    auto target = TargetModel::load(s.shape, at::kCPU, at::kFloat, 9);
    auto d = load_drafter(eagle, at::kCPU);
    CHECK(d->captured_layers(s.shape) == std::vector<int>{1, 3, 5, 7});
    d->module().eval();
    DrafterTrainOptions o;
    o.ttt_steps = 3;
    o.ttt_decay = 0.5;
    DrafterEvalSums sums;
    std::ifstream in(s.data);
    std::uint64_t i = 0;
    for (std::string line; std::getline(in, line); ++i) {
        const auto sample = nlohmann::json::parse(line);
        const auto toks = sample["input_ids"].get<std::vector<std::int64_t>>();
        const auto mask = sample["loss_mask"].get<std::vector<float>>();
        const auto len = static_cast<std::int64_t>(toks.size());
        DrafterBatch b{{}, at::tensor(toks, at::kLong), at::tensor(mask, at::kFloat), {0, len}, {}};
        std::vector<at::Tensor> layers(4);
        target.forward(b.tokens, b.cu_seqlens, {1, 3, 5, 7}, [&](std::size_t l, const at::Tensor& h) { layers[l] = h; });
        b.hidden = at::stack(layers);
        sums.add(d->evaluate(target.head(), b, {i}, 9, o));
    }
    CHECK(j["loss"].get<double>() == doctest::Approx(sums.loss()).epsilon(1e-9));
    CHECK(j["counted"].get<std::vector<double>>() == sums.counted);
    for (std::size_t k = 0; k < 3; ++k) CHECK(acc[k] == doctest::Approx(sums.accuracy()[k]));

    // Text; the smoke check; a DFlash option, a target it does not fit.
    REQUIRE(run(common, log, out) == 0);
    CHECK(read_text(out).find("accuracy at draft positions 1..3") != std::string::npos);
    CHECK(read_text(out).find("target layers [1,3,5,7]") != std::string::npos);
    REQUIRE(run("check-drafter " + quoted(eagle), log, out) == 0);
    CHECK(read_text(out).find("EAGLE-3") != std::string::npos);
    CHECK(read_text(out).find("smoke check only (load: every weight finite)") != std::string::npos);
    CHECK(run(common + " --gamma 3", log) == 2);
    CHECK(read_text(log).find("--gamma is not an option for " + (eagle / "config.json").string() +
                              "'s drafter type eagle3") != std::string::npos);
    CHECK(run("check-drafter " + quoted(eagle) + " --target preset:qwen3-8b --data " + quoted(s.data), log) == 1);
    CHECK(read_text(log).find("pass the --target the drafter was trained for") != std::string::npos);
}

TEST_CASE("check-drafter without --target is a smoke check and says so") {
    CheckDrafterSetup s;
    const auto log = s.dir.path() / "log", out = s.dir.path() / "out";
    REQUIRE(run("check-drafter " + quoted(s.drafter), log, out) == 0);
    CHECK(read_text(out).find("smoke check only") != std::string::npos);
    REQUIRE(run("check-drafter " + quoted(s.drafter) + " --json", log, out) == 0);
    CHECK(nlohmann::json::parse(read_text(out))["check"] == "smoke");
}

TEST_CASE("check-drafter reports bad input on one line naming the file, exit 2 for a bad command line") {
    CheckDrafterSetup s;
    const auto log = s.dir.path() / "log";
    // The error is one line (the data set reader may log its summary before it).
    auto one_line = [&](const std::string& want) {
        const std::string text = read_text(log);
        INFO(text);
        std::vector<std::string> errors;
        std::istringstream lines(text);
        for (std::string l; std::getline(lines, l);)
            if (l.starts_with("hsring-model: ")) errors.push_back(l);
        REQUIRE(errors.size() == 1);
        CHECK(errors[0].find(want) != std::string::npos);
        CHECK(text.ends_with(errors[0] + "\n"));
    };
    const std::string drafter = "check-drafter " + quoted(s.drafter);
    const std::string data = " --data " + quoted(s.data);

    // Command line: exit 2.
    CHECK(run(drafter + " --frobnicate", log) == 2);
    one_line("unknown option --frobnicate");
    // An EAGLE-3 option for a DFlash export: exit 2, naming both.
    CHECK(run(drafter + " --target preset:tiny" + data + " --ttt-steps 3", log) == 2);
    one_line("--ttt-steps is not an option for " + (s.drafter / "config.json").string() + "'s drafter type dflash");
    CHECK(run(drafter + data, log) == 2);
    one_line("--data needs --target MODEL");
    CHECK(run(drafter + " --target preset:tiny", log) == 2);
    one_line("--target needs --data");
    CHECK(run("check-drafter", log) == 2);
    one_line("DRAFTER_DIR is missing");
    CHECK(run(drafter + " --target preset:tiny" + data + " --samples many", log) == 2);
    one_line("--samples 'many'");

    // A drafter for another target: hidden size, vocabulary, layer count, layer ids.
    CHECK(run(drafter + " --target preset:qwen3-8b" + data, log) == 1);
    one_line((s.drafter / "config.json").string() + ": the drafter's hidden_size 64 does not match");
    auto target_dir = [&](const char* name, auto&& edit) {
        ModelShape t = s.shape;
        edit(t);
        const auto d = s.dir.path() / name;
        save_hf_model_dir(d, t, random_target_weights(t, 1, at::kCPU, at::kFloat));
        return d;
    };
    const auto vocab = target_dir("vocab600", [](ModelShape& t) { t.vocab_size = 600; });
    CHECK(run(drafter + " --target " + quoted(vocab) + data, log) == 1);
    one_line("vocab_size 512 does not match");
    const auto short_target = target_dir("layers3", [](ModelShape& t) { t.num_layers = 3; });
    CHECK(run(drafter + " --target " + quoted(short_target) + data, log) == 1);
    one_line("trained on a 8-layer target (num_target_layers) but");
    {  // Without num_target_layers, the layer ids themselves are checked.
        auto j = nlohmann::json::parse(read_text(s.drafter / "config.json"));
        j.erase("num_target_layers");
        std::ofstream(s.drafter / "config.json") << j.dump();
    }
    CHECK(run(drafter + " --target " + quoted(short_target) + data, log) == 1);
    one_line("target layer id 4 (dflash_config.target_layer_ids) is out of range");

    // Data and model files.
    CHECK(run(drafter + " --target preset:tiny --data " + quoted(s.dir.path() / "nope.jsonl"), log) == 1);
    one_line((s.dir.path() / "nope.jsonl").string() + ": no such file");
    std::ofstream(s.dir.path() / "bad.jsonl") << "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [1, 999]}\n";
    CHECK(run(drafter + " --target preset:tiny --data " + quoted(s.dir.path() / "bad.jsonl"), log) == 1);
    one_line((s.dir.path() / "bad.jsonl").string() + ":2:");
    std::ofstream(s.dir.path() / "short.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";
    CHECK(run(drafter + " --target preset:tiny --data " + quoted(s.dir.path() / "short.jsonl"), log) == 1);
    one_line("none of the 1 evaluated samples has a valid anchor");
    CHECK(run(drafter + " --target " + quoted(s.dir.path() / "no-model") + data, log) == 1);
    one_line("no-model': no such directory");
    CHECK(run("check-drafter " + quoted(s.dir.path() / "no-drafter") + " --target preset:tiny" + data, log) == 1);
    one_line((s.dir.path() / "no-drafter" / "config.json").string() + ": cannot open");
}

} // TEST_SUITE
