// Config parsing: valid examples parse; every class of bad input names file, line, key and fix.
#include "hsring/config.hpp"
#include "hsring/dataset_options.hpp"
#include "hsring/drafter_kind.hpp"
#include "hsring/error.hpp"
#include "hsring/run_identity.hpp"
#include "hsring/units.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

using namespace hsring;

namespace {

std::filesystem::path source_root() {
    const char* r = std::getenv("HSRING_SOURCE_ROOT");
    REQUIRE_MESSAGE(r, "HSRING_SOURCE_ROOT is set by meson test");
    return r;
}

const char* kMinimal = R"(
[topology]
targets = ["cpu", "cpu"]
drafters = ["cpu"]
[ring]
slots = 4
slot_tokens = 512
[target]
model = "preset:tiny"
[drafter]
num_layers = 1
[data]
path = "data/demo.jsonl"
)";

// The message of the hsring::Error thrown by parsing (and deriving) `text`.
std::string error_of(const std::string& text) {
    try {
        Config c = parse_config(text, "t.toml");
        derive(c, resolve_model_shape(c.target.model));
    } catch (const Error& e) {
        return e.what();
    }
    FAIL("expected an error for:\n" << text);
    return {};
}

std::string with(const std::string& extra_before_data) {
    std::string s = kMinimal;
    return s.insert(s.find("[data]"), extra_before_data);
}

} // namespace

TEST_CASE("the shipped example configs parse and derive") {
    for (const char* name : {"reference.toml", "demo.toml"}) {
        CAPTURE(name);
        auto path = source_root() / "config" / name;
        Config c = load_config(path);
        Derived d = derive(c);
        CHECK(d.slots >= 2);
        CHECK(d.slot_stride % (2 * MiB) == 0);
        CHECK(!describe(c, d).empty());
    }
}

TEST_CASE("defaults and derived sizes are computed in one place") {
    Config c = parse_config(kMinimal, "t.toml");
    CHECK(c.run.name == "hsring");
    CHECK(c.topology.targets.size() == 2);
    CHECK(c.topology.targets[0].is_cpu());
    CHECK(c.drafter.inflight_slots == 2);
    Derived d = derive(c, preset_shape("tiny"));
    CHECK(d.layer_ids == std::vector<int>{4});  // one draft layer: N/2 of 8
    CHECK(d.bytes_per_token == 1 * 64 * 2);
    CHECK(d.slot_payload_bytes == 512 * 64 * 2);
    CHECK(d.slot_stride == 2 * MiB);
    CHECK(d.slots == 4);
    CHECK(d.ring_name == "hsring-hsring");
    CHECK(d.mask_token_id == 511);
}

TEST_CASE("Qwen3-8B DFlash layer spread and slot size match the recipe's") {
    CHECK(dflash_layer_ids(36, 5) == std::vector<int>{1, 9, 17, 25, 33});
    Config c = parse_config(R"(
[topology]
targets = [0, 1, 2]
drafters = [3]
[ring]
size = "64GiB"
slot_tokens = 65536
[target]
model = "preset:qwen3-8b"
[data]
path = "x.jsonl"
)", "q.toml");
    Derived d = derive(c, preset_shape("qwen3-8b"));
    CHECK(d.bytes_per_token == 40 * KiB);
    CHECK(d.slot_payload_bytes == 2560ull * MiB);  // 2.5 GiB
    CHECK(d.slots == 25);
    CHECK(d.mask_token_id == 151669);
}

TEST_CASE("sizes parse like people write them") {
    CHECK(parse_bytes("64GiB") == 64 * GiB);
    CHECK(parse_bytes("1.5 GiB") == 3 * GiB / 2);
    CHECK(parse_bytes("2MB") == 2000000u);
    CHECK(parse_bytes("17") == 17u);
    CHECK(!parse_bytes("-3GiB"));
    CHECK(!parse_bytes("lots"));
    CHECK(!parse_bytes("12 parsecs"));
}

TEST_CASE("an unknown key names file, line, key and the allowed keys") {
    std::string e = error_of(with("[ring]\n"));  // duplicate table is a TOML error
    CHECK(e.find("t.toml:") != std::string::npos);
    e = error_of(std::string(kMinimal) + "[train]\nlearning_rate = 3\n");
    CHECK(e.find("t.toml:15:1") != std::string::npos);
    CHECK(e.find("unknown key [train] learning_rate") != std::string::npos);
    CHECK(e.find("lr") != std::string::npos);
    e = error_of(std::string(kMinimal) + "[trian]\nlr = 3\n");
    CHECK(e.find("unknown table or key 'trian'") != std::string::npos);
}

TEST_CASE("a wrong type names the key and what was expected") {
    std::string e = error_of(std::string(kMinimal) + "[train]\nnum_anchors = \"many\"\n");
    CHECK(e.find("t.toml:15:15: [train] num_anchors: expected an integer") != std::string::npos);
    CHECK(e.find("got a string") != std::string::npos);
    e = error_of(std::string(kMinimal) + "[supervisor]\nrestart = \"sometimes\"\n");
    CHECK(e.find("[supervisor] restart: \"sometimes\" is not allowed: use one of \"on-failure\"") != std::string::npos);
    e = error_of(std::string(kMinimal) + "[train]\n[train.sub]\n");
    CHECK(e.find("unknown key [train] sub") != std::string::npos);
}

TEST_CASE("[distributed] backend must fit the drafters' devices") {
    std::string e = error_of(std::string(kMinimal) + "[distributed]\nbackend = \"nccl\"\n");
    CHECK(e.find("[distributed] backend = \"nccl\" needs GPU drafters") != std::string::npos);
    std::string s = kMinimal;
    s.replace(s.find("drafters = [\"cpu\"]"), 18, "drafters = [0]");
    e = error_of(s + "[distributed]\nbackend = \"gloo\"\n");
    CHECK(e.find("[distributed] backend = \"gloo\" is for CPU drafters") != std::string::npos);
}

TEST_CASE("negative and out-of-range values say what is allowed") {
    std::string s = kMinimal;
    s.replace(s.find("slot_tokens = 512"), 17, "slot_tokens = -5");
    std::string e = error_of(s);
    CHECK(e.find("[ring] slot_tokens: -5 is out of range: allowed 16..") != std::string::npos);
    e = error_of(std::string(kMinimal) + "[train]\nlr = -1.0\n");
    CHECK(e.find("[train] lr: -1 is out of range") != std::string::npos);
    s = kMinimal;
    s.replace(s.find("slots = 4"), 9, "size = \"-2GiB\"");
    e = error_of(s);
    CHECK(e.find("[ring] size") != std::string::npos);
}

TEST_CASE("a slot larger than the ring is refused with both sizes") {
    std::string s = kMinimal;
    s.replace(s.find("slots = 4"), 9, "size = \"1MiB\"");
    std::string e = error_of(s);
    CHECK(e.find("one slot is 2.00 MiB") != std::string::npos);
    CHECK(e.find("larger than the ring") != std::string::npos);
    s = kMinimal;
    s.replace(s.find("slots = 4"), 9, "slots = 4\nsize = \"4MiB\"");
    e = error_of(s);
    CHECK(e.find("4 slots of") != std::string::npos);
}

TEST_CASE("a missing required key says what to write") {
    std::string s = kMinimal;
    s.erase(s.find("[data]"));
    std::string e = error_of(s);
    CHECK(e.find("[data] path is required") != std::string::npos);
    s = kMinimal;
    s.replace(s.find("model = \"preset:tiny\""), 21, "");
    e = error_of(s);
    CHECK(e.find("[target] model is required") != std::string::npos);
}

TEST_CASE("bad topologies are refused") {
    auto topo = [](const char* t) {
        std::string s = kMinimal;
        auto b = s.find("[topology]");
        auto end = s.find("[ring]");
        return s.replace(b, end - b, t);
    };
    CHECK(error_of(topo("[topology]\ntargets = [0, 0]\ndrafters = [1]\n")).find("GPU 0 is used twice (target.0 and target.1)") != std::string::npos);
    CHECK(error_of(topo("[topology]\ntargets = [0]\ndrafters = []\n")).find("[topology] drafters: must name at least one") != std::string::npos);
    CHECK(error_of(topo("[topology]\ntargets = [0]\ndrafters = [0]\n")).find("GPU 0 is used twice (target.0 and drafter.0)") != std::string::npos);
    // Two drafter ranks on one GPU: NCCL refuses them, so allow_shared_gpus is not the fix to offer.
    std::string e = error_of(topo("[topology]\ntargets = [0]\ndrafters = [1, 2, 1]\n"));
    CHECK(e.find("[topology] drafters: GPU 1 holds two drafter ranks (drafter.0 and drafter.2)") != std::string::npos);
    CHECK(e.find("allow_shared_gpus = true to share it") == std::string::npos);
    CHECK(error_of(topo("[topology]\ntargets = [\"gpu\"]\ndrafters = [1]\n")).find("GPU indices or \"cpu\"") != std::string::npos);
    CHECK(error_of(topo("[topology]\ntargets = [0]\ndrafters = [1, \"cpu\"]\n")).find("mixes GPUs and \"cpu\"") != std::string::npos);
    // Sharing is allowed when asked for: targets with targets, and a target with a drafter.
    Config c = parse_config(topo("[topology]\ntargets = [0, 0]\ndrafters = [1]\nallow_shared_gpus = true\n"), "t.toml");
    CHECK(c.topology.targets.size() == 2);
    c = parse_config(topo("[topology]\ntargets = [0]\ndrafters = [0, 1]\nallow_shared_gpus = true\n"), "t.toml");
    CHECK(c.topology.drafters.size() == 2);
    c = parse_config(topo("[topology]\ntargets = [0, 0]\ndrafters = [0]\nallow_shared_gpus = true\n"), "t.toml");
    CHECK(c.topology.targets.size() == 2);
    c = parse_config(topo("[topology]\ntargets = [\"cpu\"]\ndrafters = [\"cpu\", \"cpu\"]\n"), "t.toml");
    CHECK(c.topology.drafters.size() == 2);  // CPU drafter ranks (Gloo) may repeat
    // ... but never two drafter ranks on one GPU: the gang (NCCL) could never form.
    e = error_of(topo("[topology]\ntargets = [1]\ndrafters = [0, 0]\nallow_shared_gpus = true\n"));
    CHECK(e.find("t.toml:4:") != std::string::npos);
    CHECK(e.find("[topology] drafters: GPU 0 holds two drafter ranks (drafter.0 and drafter.1): NCCL") != std::string::npos);
    CHECK(e.find("give each drafter rank its own GPU") != std::string::npos);
}

TEST_CASE("data-parallel drafters: a step is whole slots shared out between every rank of every machine") {
    auto steps = [](const char* drafters, const char* extra) {
        std::string s = kMinimal;
        s.replace(s.find("drafters = [\"cpu\"]"), std::string("drafters = [\"cpu\"]").size(), drafters);
        s.insert(s.find("[data]"), extra);
        Config c = parse_config(s, "t.toml");
        return derive(c, preset_shape("tiny"));
    };
    Derived d = steps("drafters = [\"cpu\"]", "");
    CHECK(d.world == 1);
    CHECK(d.slots_per_rank == 1);  // tokens_per_step = 0: one slot per rank
    d = steps("drafters = [\"cpu\", \"cpu\"]", "");
    CHECK(d.world == 2);
    CHECK(d.slots_per_step == 2);
    // 512-token slots: 1,000 tokens round to 2 slots; 1,300 to 3, which 2 ranks share as 2 each.
    d = steps("drafters = [\"cpu\"]", "[train]\ntokens_per_step = 1000\n");
    CHECK(d.slots_per_rank == 2);
    d = steps("drafters = [\"cpu\", \"cpu\"]", "[train]\ntokens_per_step = 1300\n");
    CHECK(d.slots_per_rank == 2);
    CHECK(d.slots_per_step == 4);
    d = steps("drafters = [\"cpu\", \"cpu\"]", "[train]\ntokens_per_step = 512\n[distributed]\nnnodes = 2\n");
    CHECK(d.world == 4);
    CHECK(d.slots_per_rank == 1);  // fewer slots than ranks: one each
    CHECK(d.slots_per_step == 4);
}

TEST_CASE("[distributed]: node_rank below nnodes; the launcher's variables and --node-rank win, naming themselves") {
    std::string s = kMinimal;
    s += "[distributed]\nnnodes = 2\nnode_rank = 2\n";
    CHECK(error_of(s).find("[distributed] node_rank: 2 is not below nnodes = 2") != std::string::npos);
    std::string ok = kMinimal;
    ok += "[distributed]\nnnodes = 2\nnode_rank = 1\nmaster_addr = \"10.0.0.1\"\n";
    Config c = parse_config(ok, "t.toml");
    ::setenv("NODE_RANK", "0", 1);
    ::setenv("MASTER_PORT", "4242", 1);
    apply_launcher_overrides(c);
    CHECK(c.distributed.node_rank == 0);
    CHECK(c.distributed.master_port == 4242);
    CHECK(c.distributed.master_addr == "10.0.0.1");
    ::setenv("NNODES", "3", 1);
    apply_launcher_overrides(c, "2");
    CHECK(c.distributed.nnodes == 3);
    CHECK(c.distributed.node_rank == 2);
    std::string msg;
    try {
        apply_launcher_overrides(c, "5");
    } catch (const Error& e) {
        msg = e.what();
    }
    CHECK(msg.find("node rank 5 (from --node-rank) is not below the number of machines 3 (from NNODES)") != std::string::npos);
    ::setenv("NODE_RANK", "x", 1);
    msg.clear();
    try {
        apply_launcher_overrides(c);
    } catch (const Error& e) {
        msg = e.what();
    }
    CHECK(msg.find("NODE_RANK=x: expected a whole number") != std::string::npos);
    ::unsetenv("NODE_RANK");
    ::unsetenv("MASTER_PORT");
    ::unsetenv("NNODES");
}

TEST_CASE("[train] recompute: none by default, \"layers\" checkpoints the drafter's layers, shown by config check") {
    Config c = parse_config(kMinimal, "t.toml");
    CHECK(c.train.recompute == Recompute::None);
    CHECK(describe(c, derive(c, preset_shape("tiny"))).find("recompute none") != std::string::npos);
    c = parse_config(std::string(kMinimal) + "[train]\nrecompute = \"layers\"\n", "t.toml");
    CHECK(c.train.recompute == Recompute::Layers);
    CHECK(describe(c, derive(c, preset_shape("tiny"))).find("recompute layers") != std::string::npos);
    const std::string e = error_of(std::string(kMinimal) + "[train]\nrecompute = \"all\"\n");
    CHECK(e.find("t.toml:15") != std::string::npos);
    CHECK(e.find("[train] recompute: \"all\" is not allowed: use one of \"none\", \"layers\"") != std::string::npos);
}

TEST_CASE("drafter types come from the kinds' table: [drafter] type, the mask token, the keys each type checks") {
    const std::string dflash_drafter = "[drafter]\nnum_layers = 1\n";
    auto with_drafter = [&](const std::string& drafter) {
        std::string text = kMinimal;
        text.replace(text.find(dflash_drafter), dflash_drafter.size(), drafter);
        return text;
    };
    auto error_of = [&](const std::string& text) {
        try {
            const Config c = parse_config(text, "t.toml");
            derive(c, preset_shape("tiny"));
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    // Every kind of the table is a [drafter] type the reader takes; another one is refused naming them.
    REQUIRE(drafter_kinds().size() >= 2);
    for (const DrafterKind* k : drafter_kinds()) {
        CAPTURE(k->type);
        const Config c = parse_config(with_drafter(fmt::format("[drafter]\ntype = \"{}\"\nnum_layers = 1\n", k->type)), "t.toml");
        CHECK(&drafter_kind(c.drafter.type) == k);
        const Derived d = derive(c, preset_shape("tiny"));
        // The data set may not hold the mask token of a type that drafts with one; of another it may.
        CHECK(data::dataset_options(c, d).reserved_token == (k->drafts_with_mask_token ? d.mask_token_id : -1));
    }
    const std::string unknown = error_of(with_drafter("[drafter]\ntype = \"medusa\"\n"));
    CHECK(unknown.find("\"dflash\"") != std::string::npos);
    CHECK(unknown.find("\"eagle3\"") != std::string::npos);
    // Each type checks its own keys (EAGLE-3: one layer, a draft vocabulary within the target's).
    CHECK(error_of(with_drafter("[drafter]\ntype = \"eagle3\"\nnum_layers = 2\n"))
              .find("[drafter] num_layers = 2: an EAGLE-3 drafter has one decoder layer") != std::string::npos);
    CHECK(error_of(with_drafter("[drafter]\ntype = \"eagle3\"\nnum_layers = 1\ndraft_vocab = 100000\n"))
              .find("[drafter] draft_vocab 100000 exceeds the target's vocabulary (512)") != std::string::npos);
    CHECK(error_of(with_drafter("[drafter]\nnum_layers = 2\n")).empty());  // DFlash: any depth
    CHECK(drafter_kind("dflash").has_recompute_and_loss_chunk);
    CHECK_FALSE(drafter_kind("eagle3").has_recompute_and_loss_chunk);
    CHECK(drafter_kind("eagle3").has_draft_vocab);
}

TEST_CASE("config check says what an EAGLE-3 drafter captures and trains, not DFlash's blocks") {
    std::string text = kMinimal;
    const std::string dflash_drafter = "[drafter]\nnum_layers = 1\n";
    REQUIRE(text.find(dflash_drafter) != std::string::npos);
    const Config dflash = parse_config(text, "t.toml");
    const std::string dflash_text = describe(dflash, derive(dflash, preset_shape("tiny")));
    CHECK(dflash_text.find("drafter       DFlash (type dflash): 1 layers, block 16, mask token 511") != std::string::npos);
    CHECK(dflash_text.find("anchors per sequence") != std::string::npos);

    text.replace(text.find(dflash_drafter), dflash_drafter.size(),
                 "[drafter]\ntype = \"eagle3\"\nnum_layers = 1\nttt_steps = 3\ndraft_vocab = 256\n");
    const Config c = parse_config(text, "t.toml");
    const Derived d = derive(c, preset_shape("tiny"));
    const std::string e = describe(c, d);
    // preset:tiny has 8 layers: 1, n/2 - 1, n - 4 fused, and the last; 4 x 64 hidden x 2 B per token.
    CHECK(e.find("captured      layers [1, 3, 4, 7] = 3 fused [1, 3, 4] + the last (7) -> 512 B per token (bf16)") !=
          std::string::npos);
    CHECK(e.find("drafter       EAGLE-3 (type eagle3): 1 Llama layer over the 3 fused layers, 3 training-time-test "
                 "steps, draft vocabulary 256 of 512 tokens (the most frequent in [data] path), 2 in-flight slots") !=
          std::string::npos);
    CHECK(e.find("ttt_decay^k = 0.8^k") != std::string::npos);
    for (const char* dflash_only : {"block", "mask token", "anchors", "recompute", "matmul", "LM head", "DFlash"}) {
        CAPTURE(dflash_only);
        CHECK(e.find(dflash_only) == std::string::npos);
    }
    // Layer ids: the last layer is captured by itself, so listing it is refused as such (it was
    // "listed twice"); a target of fewer than 4 layers cannot feed an EAGLE-3 drafter at all.
    auto error_with = [&](const std::string& body, const ModelShape& shape) {
        try {
            const Config x = parse_config(body, "t.toml");
            derive(x, shape);
        } catch (const Error& err) {
            return std::string(err.what());
        }
        return std::string();
    };
    std::string listed = text;
    listed.replace(listed.find("model = \"preset:tiny\"\n"), 22, "model = \"preset:tiny\"\nlayer_ids = [1, 3, 7]\n");
    const std::string last = error_with(listed, preset_shape("tiny"));
    CHECK(last.find("layer 7 is preset:tiny's last layer, which an EAGLE-3 drafter captures by itself") !=
          std::string::npos);
    CHECK(last.find("pick 3 distinct layers of 0..6") != std::string::npos);
    ModelShape two = preset_shape("tiny");
    two.num_layers = 2;
    CHECK(error_with(text, two).find("has 2 layers: an EAGLE-3 drafter fuses 3 distinct layers below the target's "
                                     "last one, so the target needs at least 4") != std::string::npos);
    ModelShape four = preset_shape("tiny");
    four.num_layers = 4;
    CHECK(error_with(text, four).find("give [target] layer_ids = [a, b, c], 3 distinct layers of 0..2 (the last, 3, "
                                      "is captured by itself)") != std::string::npos);
    // draft_vocab = 0: the target's whole vocabulary.
    text.replace(text.find("draft_vocab = 256"), 17, "draft_vocab = 0");
    const Config all = parse_config(text, "t.toml");
    CHECK(describe(all, derive(all, preset_shape("tiny"))).find("draft vocabulary 512 of 512 tokens, 2 in-flight") !=
          std::string::npos);
}

TEST_CASE("[generate]: greedy defaults; stop_token_ids absent, [] and a list are told apart; bad values name the key") {
    Config c = parse_config(kMinimal, "t.toml");
    CHECK(c.generate.temperature == 0.0);
    CHECK(c.generate.max_new_tokens == 128);
    CHECK_FALSE(c.generate.stop_token_ids_set);
    c = parse_config(std::string(kMinimal) + "[generate]\nstop_token_ids = []\n", "t.toml");
    CHECK(c.generate.stop_token_ids_set);
    CHECK(c.generate.stop_token_ids.empty());
    c = parse_config(std::string(kMinimal) + "[generate]\nstop_token_ids = [2, 151645]\ntemperature = 0.7\n", "t.toml");
    CHECK(c.generate.stop_token_ids == std::vector<int>{2, 151645});
    CHECK(c.generate.temperature == doctest::Approx(0.7));
    CHECK(error_of(std::string(kMinimal) + "[generate]\ntop_p = 0.0\n").find("[generate] top_p: 0 is out of range") !=
          std::string::npos);
    CHECK(error_of(std::string(kMinimal) + "[generate]\nmax_new_tokens = 0\n").find("[generate] max_new_tokens") !=
          std::string::npos);
    CHECK(error_of(std::string(kMinimal) + "[generate]\nstop_token_ids = [-1]\n").find("[generate] stop_token_ids") !=
          std::string::npos);
    CHECK(error_of(std::string(kMinimal) + "[generate]\ntemprature = 1.0\n").find("temprature") != std::string::npos);
}

TEST_CASE("[data] responses: \"dataset\" by default; \"target\" needs stop tokens, room for a prompt and a model") {
    Config c = parse_config(kMinimal, "t.toml");
    CHECK(c.data.responses == Responses::Dataset);
    CHECK(derive(c, preset_shape("tiny")).stop_tokens.empty());
    const std::string target = std::string(kMinimal) + "responses = \"target\"\n";
    // A preset declares no eos id: the config must name what ends an answer.
    const std::string e = error_of(target);
    CHECK(e.find("t.toml: [generate] stop_token_ids is not set") != std::string::npos);
    CHECK(e.find("stop_token_ids = []") != std::string::npos);
    c = parse_config(target + "[generate]\nstop_token_ids = [3]\nmax_new_tokens = 64\n", "t.toml");
    CHECK(c.data.responses == Responses::Target);
    const Derived d = derive(c, preset_shape("tiny"));
    CHECK(d.stop_tokens == std::vector<std::int64_t>{3});
    // Part of what the machines of a run compare.
    CHECK(run_identity(c, d, 1, 2)["[data] responses"].get<std::string>().find("max_new_tokens 64") != std::string::npos);
    CHECK(error_of(target + "[generate]\nstop_token_ids = [512]\n").find("outside the vocabulary") != std::string::npos);
    CHECK(error_of(target + "[generate]\nstop_token_ids = []\nmax_new_tokens = 512\n").find("leaves no room for a prompt") !=
          std::string::npos);
    CHECK(error_of(std::string(kMinimal) + "responses = \"model\"\n").find("[data] responses") != std::string::npos);
    std::string synth = target + "[generate]\nstop_token_ids = []\n";
    synth.insert(0, "[run]\nmode = \"synthetic\"\n");
    CHECK(error_of(synth).find("[run] mode = \"synthetic\" runs no model") != std::string::npos);
}

TEST_CASE("[train] matmul: bf16 by default, \"fp8\" opts in, shown by config check, part of the run identity") {
    Config c = parse_config(kMinimal, "t.toml");
    CHECK(c.train.matmul == Matmul::BF16);
    const Derived d = derive(c, preset_shape("tiny"));
    CHECK(describe(c, d).find("matmul bf16") != std::string::npos);
    const nlohmann::json bf16 = run_identity(c, d, 1, 2);
    c = parse_config(std::string(kMinimal) + "[train]\nmatmul = \"fp8\"\n", "t.toml");
    CHECK(c.train.matmul == Matmul::FP8);
    CHECK(describe(c, derive(c, preset_shape("tiny"))).find("matmul fp8") != std::string::npos);
    // FP8 changes what is trained: machines that disagree are named at rendezvous.
    const nlohmann::json fp8 = run_identity(c, derive(c, preset_shape("tiny")), 1, 2);
    CHECK(identity_differences(fp8, bf16, 1) == "[train] matmul is \"fp8\" on machine 1, \"bf16\" on machine 0 (the master)");
    const std::string e = error_of(std::string(kMinimal) + "[train]\nmatmul = \"fp16\"\n");
    CHECK(e.find("t.toml:15") != std::string::npos);
    CHECK(e.find("[train] matmul: \"fp16\" is not allowed: use one of \"bf16\", \"fp8\"") != std::string::npos);
}

TEST_CASE("[train] lm_head: bf16 by default, \"fp8\" opts in, shown by config check, part of the run identity") {
    Config c = parse_config(kMinimal, "t.toml");
    CHECK(c.train.lm_head == Matmul::BF16);
    const Derived d = derive(c, preset_shape("tiny"));
    CHECK(describe(c, d).find("LM head bf16") != std::string::npos);
    const nlohmann::json bf16 = run_identity(c, d, 1, 2);
    c = parse_config(std::string(kMinimal) + "[train]\nlm_head = \"fp8\"\n", "t.toml");
    CHECK(c.train.lm_head == Matmul::FP8);
    CHECK(c.train.matmul == Matmul::BF16);  // the layers' matmuls are a key of their own
    CHECK(describe(c, derive(c, preset_shape("tiny"))).find("LM head fp8") != std::string::npos);
    const nlohmann::json fp8 = run_identity(c, derive(c, preset_shape("tiny")), 1, 2);
    CHECK(identity_differences(fp8, bf16, 1) == "[train] lm_head is \"fp8\" on machine 1, \"bf16\" on machine 0 (the master)");
    const std::string e = error_of(std::string(kMinimal) + "[train]\nlm_head = \"int8\"\n");
    CHECK(e.find("t.toml:15") != std::string::npos);
    CHECK(e.find("[train] lm_head: \"int8\" is not allowed: use one of \"bf16\", \"fp8\"") != std::string::npos);
}

TEST_CASE("[target] weights: bf16 by default, \"fp8\" opts in, shown by config check, part of the run identity") {
    Config c = parse_config(kMinimal, "t.toml");
    CHECK(c.target.weights == TargetWeights::BF16);
    const Derived d = derive(c, preset_shape("tiny"));
    CHECK(describe(c, d).find("vocab 512; bf16 linear weights)") != std::string::npos);
    const nlohmann::json bf16 = run_identity(c, d, 1, 2);
    std::string text = kMinimal;
    text.insert(text.find("[drafter]"), "weights = \"fp8\"\n");
    c = parse_config(text, "t.toml");
    CHECK(c.target.weights == TargetWeights::FP8);
    CHECK(describe(c, derive(c, preset_shape("tiny"))).find("fp8 linear weights") != std::string::npos);
    // FP8 hidden states are other data: machines that disagree are named at rendezvous.
    const nlohmann::json fp8 = run_identity(c, derive(c, preset_shape("tiny")), 1, 2);
    CHECK(identity_differences(fp8, bf16, 1) == "[target] weights is \"fp8\" on machine 1, \"bf16\" on machine 0 (the master)");
    text = kMinimal;
    text.insert(text.find("[drafter]"), "weights = \"int4\"\n");
    const std::string e = error_of(text);
    CHECK(e.find("t.toml:10") != std::string::npos);
    CHECK(e.find("[target] weights: \"int4\" is not allowed: use one of \"bf16\", \"fp8\"") != std::string::npos);
}

TEST_CASE("[transport] kind: host by default; the peer kinds need GPUs everywhere and are shown by config check") {
    Config c = parse_config(kMinimal, "t.toml");
    CHECK(c.transport.kind == TransportKind::Host);
    CHECK(c.transport.peer_buffers == 2);
    CHECK(describe(c, derive(c, preset_shape("tiny"))).find("transport     host: targets -> host ring -> drafters") !=
          std::string::npos);
    const std::string gpus = "[topology]\ntargets = [0, 1]\ndrafters = [2]\n";
    std::string text = std::string(kMinimal);
    text.replace(text.find("[topology]"), text.find("[ring]") - text.find("[topology]"), gpus);
    c = parse_config(text + "[transport]\nkind = \"peer+host\"\npeer_buffers = 3\n", "t.toml");
    CHECK(c.transport.kind == TransportKind::PeerAndHost);
    CHECK(c.transport.peer_buffers == 3);
    const std::string d = describe(c, derive(c, preset_shape("tiny")));
    CHECK(d.find("transport     peer+host: 3 device buffers of 64.00 KiB per target (192.00 KiB on its GPU)") != std::string::npos);
    CHECK(d.find("the host ring keeps a copy too") != std::string::npos);
    CHECK(parse_config(text + "[transport]\nkind = \"peer\"\n", "t.toml").transport.kind == TransportKind::Peer);

    std::string e = error_of(std::string(kMinimal) + "[transport]\nkind = \"peer\"\n");
    CHECK(e.find("t.toml:15") != std::string::npos);
    CHECK(e.find("[transport] kind: \"peer\" copies hidden states between GPUs: every [topology] target and drafter must "
                 "be on a GPU") != std::string::npos);
    e = error_of(std::string(kMinimal) + "[transport]\nkind = \"nvlink\"\n");
    CHECK(e.find("[transport] kind: \"nvlink\" is not allowed: use one of \"host\", \"peer\", \"peer+host\"") !=
          std::string::npos);
    e = error_of(text + "[transport]\nkind = \"peer\"\npeer_buffers = 0\n");
    CHECK(e.find("[transport] peer_buffers") != std::string::npos);
}

TEST_CASE("held-out evaluation needs its data") {
    std::string s = kMinimal;
    s += "[train]\neval_every = 10\n";
    CHECK(error_of(s).find("[train] eval_every = 10 needs held-out data: set [data] eval_path") != std::string::npos);
}

TEST_CASE("model-dependent checks name the key") {
    CHECK(error_of(with("[target]\n")).find("t.toml") != std::string::npos);  // duplicate [target]
    std::string s = kMinimal;
    s.replace(s.find("model = \"preset:tiny\""), 21, "model = \"preset:tiny\"\nlayer_ids = [1, 9]");
    CHECK(error_of(s).find("[target] layer_ids: layer 9 does not exist") != std::string::npos);
    s = kMinimal;
    s.replace(s.find("model = \"preset:tiny\""), 21, "model = \"preset:huge\"");
    CHECK(error_of(s).find("unknown model preset 'huge'") != std::string::npos);
    s = kMinimal;
    s.replace(s.find("num_layers = 1"), 14, "num_layers = 1\ninflight_slots = 9");
    CHECK(error_of(s).find("inflight_slots 9 exceeds the ring's 4 slots") != std::string::npos);
    s = kMinimal;
    s.replace(s.find("num_layers = 1"), 14, "num_layers = 1\nmask_token_id = 600");
    CHECK(error_of(s).find("mask_token_id 600 is not a row") != std::string::npos);
}

TEST_CASE("the data files must exist and hold something; each message names its key and the resolved path") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("hsring-config-data-" + std::to_string(::getpid()));
    fs::create_directories(dir / "sub");
    const std::string file = (dir / "run.toml").string();
    const std::string sample = "{\"input_ids\": [1, 2, 3]}\n";
    std::ofstream(dir / "train.jsonl") << sample;
    std::ofstream(dir / "empty.jsonl");
    std::ofstream(dir / "blank.jsonl") << "\n  \n";
    auto error_for = [&](const std::string& path, const std::string& eval) -> std::string {
        std::string s = kMinimal;
        s.replace(s.find("data/demo.jsonl"), 15, path);
        if (!eval.empty()) s += "eval_path = \"" + eval + "\"\n";
        const Config c = parse_config(s, file);
        try {
            check_data_files(c);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    };
    CHECK(error_for("train.jsonl", "") == "");
    CHECK(error_for((dir / "train.jsonl").string(), "sub/../train.jsonl") == "");
    // Relative to the config file's directory, and the message says so.
    std::string e = error_for("absent.jsonl", "");
    CHECK(e.find(file + ": [data] path = \"absent.jsonl\": cannot read " + (dir / "absent.jsonl").string() + ": no such file "
                 "(a relative path is resolved against the config file's directory): give a pre-tokenized JSONL "
                 "file") != std::string::npos);
    e = error_for("sub", "");
    CHECK(e.find("[data] path = \"sub\": " + (dir / "sub").string()) != std::string::npos);
    CHECK(e.find("is a directory, not a file") != std::string::npos);
    // The held-out set is named as such, missing, empty or blank.
    for (const char* eval : {"absent.jsonl", "empty.jsonl", "blank.jsonl"}) {
        e = error_for("train.jsonl", eval);
        CHECK_MESSAGE(e.find("[data] eval_path = \"" + std::string(eval) + "\"") != std::string::npos, e);
        CHECK_MESSAGE(e.find("[data] path") == std::string::npos, e);
    }
    CHECK(error_for("train.jsonl", "empty.jsonl").find("is empty (no sample)") != std::string::npos);
    CHECK(error_for("blank.jsonl", "").find("[data] path = \"blank.jsonl\"") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("a config path that is a directory or missing is refused, not read as an empty config") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("hsring-config-dir-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    auto error_of_load = [](const fs::path& p) -> std::string {
        try {
            load_config(p);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    };
    std::string e = error_of_load(dir);
    CHECK(e.find(dir.string() + " is a directory, not a config file") != std::string::npos);
    CHECK(e.find("[topology]") == std::string::npos);  // not "missing [topology]": it was never read
    std::ofstream(dir / "b.toml") << kMinimal;
    std::ofstream(dir / "a.toml") << kMinimal;
    CHECK(error_of_load(dir).find("e.g. " + (dir / "a.toml").string() + ", " + (dir / "b.toml").string()) !=
          std::string::npos);
    e = error_of_load(dir / "nope.toml");
    CHECK(e.find((dir / "nope.toml").string() + ": no such config file") != std::string::npos);
    fs::remove_all(dir);
}

TEST_CASE("invalid TOML reports line and column") {
    std::string e = error_of("[run]\nname = \"x\nseed = 1\n");
    CHECK(e.find("t.toml:2:") != std::string::npos);
    CHECK(e.find("not valid TOML") != std::string::npos);
}
