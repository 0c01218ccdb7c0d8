// safetensors: round trips for every dtype, sharded directories, and a clear error (naming the
// file and the tensor) for every kind of damage.
#include "hsring/error.hpp"
#include "model/io/safetensors.hpp"
#include "model_test_util.hpp"

#include <nlohmann/json.hpp>

#include <fstream>

using namespace hsring::model;
using hsring::test::error_of;
using hsring::test::TempDir;
namespace fs = std::filesystem;

namespace {

// A file from a raw header and data section (to build damaged files).
void write_raw(const fs::path& p, const std::string& header, const std::string& data, std::int64_t len_override = -1) {
    std::ofstream out(p, std::ios::binary);
    std::uint64_t n = len_override >= 0 ? static_cast<std::uint64_t>(len_override) : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header << data;
}

std::string one_tensor_header(const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"w": {"dtype": ")" + dtype + R"(", "shape": )" + shape + R"(, "data_offsets": )" + offsets + "}}";
}

} // namespace

TEST_SUITE("safetensors") {

TEST_CASE("round-trips every supported dtype, scalars, empty tensors and metadata") {
    TempDir dir;
    TensorMap in;
    auto base = at::randn({3, 5});
    in["bf16"] = base.to(at::kBFloat16);
    in["f16"] = base.to(at::kHalf);
    in["f32"] = base;
    in["f64"] = base.to(at::kDouble);
    in["i64"] = at::arange(-7, 8, at::kLong).view({3, 5});
    in["i32"] = at::arange(-7, 8, at::kInt);
    in["i16"] = at::arange(-7, 8, at::kShort);
    in["i8"] = at::arange(-7, 8, at::kChar);
    in["u8"] = at::arange(0, 15, at::kByte);
    in["bool"] = at::arange(0, 15, at::kLong).remainder(2).to(at::kBool);
    in["scalar"] = at::scalar_tensor(3.5);
    in["empty"] = at::empty({0, 4});
    in["strided"] = base.t();  // non-contiguous input is written contiguously
    const fs::path f = dir.path() / "x.safetensors";
    save_safetensors(f, in, {{"format", "pt"}, {"note", "hello"}});

    auto out = read_safetensors(f);
    CHECK(out.metadata.at("note") == "hello");
    CHECK(out.metadata.at("format") == "pt");
    REQUIRE(out.tensors.size() == in.size());
    for (const auto& [name, t] : in) {
        INFO(name);
        const auto& r = out.tensors.at(name);
        CHECK(hsring::test::dt(r.scalar_type()) == hsring::test::dt(t.scalar_type()));
        CHECK(r.sizes() == t.sizes());
        CHECK(at::equal(r, t.contiguous()));
    }
    // The loader's view is the same data transformers/safetensors would see.
    CHECK(load_safetensors(f).size() == in.size());
}

TEST_CASE("loaded tensors are usable after the archive is gone and can be written in place") {
    TempDir dir;
    const fs::path f = dir.path() / "x.safetensors";
    save_safetensors(f, {{"a", at::ones({4, 4})}});
    at::Tensor a;
    {
        auto m = load_safetensors(f);
        a = m.at("a");
    }
    a.add_(1);  // copy-on-write mapping: changes the tensor, not the file
    CHECK(at::equal(a, at::full({4, 4}, 2.0)));
    CHECK(at::equal(load_safetensors(f).at("a"), at::ones({4, 4})));
}

TEST_CASE("reads a sharded directory through model.safetensors.index.json") {
    TempDir dir;
    save_safetensors(dir.path() / "model-00001-of-00002.safetensors", {{"a", at::ones({2})}});
    save_safetensors(dir.path() / "model-00002-of-00002.safetensors", {{"b", at::zeros({3})}});
    std::ofstream(dir.path() / "model.safetensors.index.json")
        << R"({"metadata": {"total_size": 20}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                              "b": "model-00002-of-00002.safetensors"}})";
    auto arch = TensorArchive::open(dir.path());
    CHECK(arch.tensors().size() == 2);
    CHECK(arch.get("b", {3}).sum().item<float>() == 0.0f);
    CHECK(arch.file_of("a").filename() == "model-00001-of-00002.safetensors");

    auto missing = error_of([&] { arch.get("c"); });
    CHECK(missing.find("no tensor c") != std::string::npos);
    CHECK(missing.find(dir.path().string()) != std::string::npos);
    auto mismatch = error_of([&] { arch.get("b", {4}); });
    CHECK(mismatch.find("model-00002-of-00002.safetensors") != std::string::npos);
    CHECK(mismatch.find("tensor b has shape [3]") != std::string::npos);
    CHECK(mismatch.find("[4]") != std::string::npos);

    // The index names a tensor its shard does not have.
    std::ofstream(dir.path() / "model.safetensors.index.json")
        << R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "z": "model-00002-of-00002.safetensors"}})";
    CHECK(error_of([&] { TensorArchive::open(dir.path()); }).find("tensor z") != std::string::npos);
    // ... or a shard that does not exist.
    std::ofstream(dir.path() / "model.safetensors.index.json") << R"({"weight_map": {"a": "nope.safetensors"}})";
    CHECK(error_of([&] { TensorArchive::open(dir.path()); }).find("nope.safetensors") != std::string::npos);
}

TEST_CASE("a directory without safetensors is a clear error") {
    TempDir dir;
    auto msg = error_of([&] { TensorArchive::open(dir.path()); });
    CHECK(msg.find("model.safetensors") != std::string::npos);
    CHECK(error_of([&] { TensorArchive::open(dir.path() / "missing.safetensors"); }).find("no such file") !=
          std::string::npos);
}

TEST_CASE("every kind of damage is an error naming the file and tensor") {
    TempDir dir;
    const fs::path f = dir.path() / "bad.safetensors";
    auto err = [&] { return error_of([&] { read_safetensors(f); }); };
    auto has = [](const std::string& msg, const std::string& what) {
        INFO(msg);
        CHECK(msg.find(what) != std::string::npos);
    };
    const std::string eight_floats(32, '\0');

    SUBCASE("shorter than the length prefix") {
        std::ofstream(f, std::ios::binary) << "abc";
        has(err(), "too short");
    }
    SUBCASE("header length beyond the end of the file") {
        write_raw(f, one_tensor_header("F32", "[8]", "[0, 32]"), eight_floats, 1 << 20);
        has(err(), "header length");
    }
    SUBCASE("header is not JSON") {
        write_raw(f, "{not json", "");
        has(err(), "not valid JSON");
    }
    SUBCASE("header is not an object") {
        write_raw(f, "[1, 2]", "");
        has(err(), "not a JSON object");
    }
    SUBCASE("entry without a dtype") {
        write_raw(f, R"({"w": {"shape": [8], "data_offsets": [0, 32]}})", eight_floats);
        has(err(), "tensor w");
        has(err(), "dtype");
    }
    SUBCASE("unsupported dtype") {
        write_raw(f, one_tensor_header("F8_E5M2", "[8]", "[0, 8]"), std::string(8, '\0'));
        has(err(), "F8_E5M2");
        has(err(), "not supported");
        has(err(), "tensor w");
    }
    SUBCASE("offsets disagree with dtype x shape") {
        write_raw(f, one_tensor_header("F32", "[8]", "[0, 16]"), eight_floats);
        has(err(), "needs 32 bytes");
    }
    SUBCASE("truncated data section") {
        write_raw(f, one_tensor_header("F32", "[8]", "[0, 32]"), std::string(20, '\0'));
        has(err(), "truncated");
        has(err(), "tensor w");
        has(err(), f.string());
    }
    SUBCASE("tensors overlap") {
        write_raw(f,
                  R"({"a": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},
                      "b": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}})",
                  eight_floats);
        has(err(), "overlap");
    }
    SUBCASE("a real file cut short") {
        save_safetensors(f, {{"big", at::ones({64})}, {"small", at::ones({2})}});
        fs::resize_file(f, fs::file_size(f) - 10);
        has(err(), "truncated");
    }
}

TEST_CASE("writing an unsupported dtype is an error") {
    TempDir dir;
    auto msg = error_of([&] { save_safetensors(dir.path() / "c.safetensors", {{"c", at::ones({2}, at::kComplexFloat)}}); });
    CHECK(msg.find("cannot write dtype") != std::string::npos);
}

} // TEST_SUITE
