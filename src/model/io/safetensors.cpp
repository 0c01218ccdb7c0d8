#include "model/io/safetensors.hpp"

#include "hsring/error.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>

namespace hsring::model {
namespace fs = std::filesystem;

namespace {

// Refuse absurd headers before allocating for them (the reference implementation's limit).
constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;

struct DTypeName {
    const char* name;
    at::ScalarType type;
};
constexpr DTypeName kDTypes[] = {
    {"BF16", at::kBFloat16}, {"F16", at::kHalf},  {"F32", at::kFloat}, {"F64", at::kDouble},
    {"I64", at::kLong},      {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
    {"U8", at::kByte},       {"BOOL", at::kBool}, {"F8_E4M3", at::kFloat8_e4m3fn},
};

// A read-only view of a whole file; unmapped when the last tensor aliasing it goes away.
class Mapping {
public:
    explicit Mapping(const fs::path& file) {
        int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail("{}: cannot open: {}", file.string(), errno_text(errno));
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
            int e = errno;
            ::close(fd);
            fail("{}: cannot stat: {}", file.string(), errno_text(e));
        }
        size_ = static_cast<std::size_t>(st.st_size);
        if (size_ > 0) {
            // Private + writable: an in-place write to a loaded tensor copies the page instead
            // of faulting or changing the file.
            void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                int e = errno;
                ::close(fd);
                fail("{}: cannot map {} bytes: {}", file.string(), size_, errno_text(e));
            }
            data_ = static_cast<char*>(p);
        }
        ::close(fd);
    }
    ~Mapping() {
        if (data_) ::munmap(data_, size_);
    }
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;

    char* data() const { return data_; }
    std::size_t size() const { return size_; }

private:
    char* data_ = nullptr;
    std::size_t size_ = 0;
};

struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t begin, end;
};

std::uint64_t read_u64_le(const char* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
}

Entry parse_entry(const std::string& file, const std::string& name, const nlohmann::json& e) {
    const std::string where = file + ": tensor " + name;
    if (!e.is_object()) fail("{}: header entry is not an object (corrupt file?)", where);
    for (const char* key : {"dtype", "shape", "data_offsets"})
        if (!e.contains(key)) fail("{}: header entry has no \"{}\" (corrupt file?)", where, key);
    if (!e["dtype"].is_string()) fail("{}: \"dtype\" is not a string (corrupt file?)", where);
    Entry out{name, safetensors_dtype(e["dtype"].get<std::string>(), where), {}, 0, 0};
    const auto& shape = e["shape"];
    if (!shape.is_array()) fail("{}: \"shape\" is not a list (corrupt file?)", where);
    for (const auto& d : shape) {
        if (!d.is_number_unsigned()) fail("{}: shape {} holds a non-size entry (corrupt file?)", where, shape.dump());
        out.shape.push_back(d.get<std::int64_t>());
    }
    const auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        fail("{}: \"data_offsets\" must be [BEGIN, END] (corrupt file?)", where);
    out.begin = off[0].get<std::uint64_t>();
    out.end = off[1].get<std::uint64_t>();
    if (out.end < out.begin) fail("{}: data_offsets [{}, {}] end before they begin (corrupt file?)", where, out.begin, out.end);
    std::uint64_t numel = 1;
    for (auto d : out.shape) numel *= static_cast<std::uint64_t>(d);
    const std::uint64_t want = numel * at::elementSize(out.dtype);
    if (out.end - out.begin != want)
        fail("{}: {} {} needs {} bytes but data_offsets [{}, {}] hold {} (corrupt file?)", where,
             e["dtype"].get<std::string>(), shape_str(out.shape), want, out.begin, out.end, out.end - out.begin);
    return out;
}

} // namespace

std::string shape_str(at::IntArrayRef shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

at::ScalarType safetensors_dtype(const std::string& name, const std::string& where) {
    for (const auto& d : kDTypes)
        if (name == d.name) return d.type;
    std::string known;
    for (const auto& d : kDTypes) known += (known.empty() ? "" : ", ") + std::string(d.name);
    fail("{}: dtype \"{}\" is not supported (supported: {}); convert the checkpoint to bf16/fp16/fp32",
         where, name, known);
}

std::string safetensors_dtype_name(at::ScalarType t) {
    for (const auto& d : kDTypes)
        if (d.type == t) return d.name;
    fail("cannot write dtype {} to safetensors (supported: bf16, fp16, fp32, fp64, int and bool types)",
         c10::toString(t));
}

SafetensorsFile read_safetensors(const fs::path& file) {
    const std::string f = file.string();
    auto map = std::make_shared<Mapping>(file);
    if (map->size() < 8)
        fail("{}: {} bytes is too short for a safetensors file (truncated?)", f, map->size());
    const std::uint64_t header_len = read_u64_le(map->data());
    if (header_len > kMaxHeaderBytes || header_len > map->size() - 8)
        fail("{}: header length {} does not fit in the file's {} bytes (truncated, or not a safetensors file)",
             f, header_len, map->size());
    const char* hp = map->data() + 8;
    if (header_len == 0 || hp[0] != '{') fail("{}: the header is not a JSON object (not a safetensors file?)", f);
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(hp, hp + header_len);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: the header is not valid JSON (corrupt or truncated file): {}", f, e.what());
    }
    if (!header.is_object()) fail("{}: the header is not a JSON object (corrupt file?)", f);

    SafetensorsFile out;
    std::vector<Entry> entries;
    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it->is_object()) fail("{}: __metadata__ is not an object (corrupt file?)", f);
            for (auto m = it->begin(); m != it->end(); ++m) {
                if (!m->is_string()) fail("{}: __metadata__ value \"{}\" is not a string", f, m.key());
                out.metadata[m.key()] = m->get<std::string>();
            }
            continue;
        }
        entries.push_back(parse_entry(f, it.key(), *it));
    }

    char* data = map->data() + 8 + header_len;
    const std::uint64_t data_len = map->size() - 8 - header_len;
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
    std::uint64_t prev_end = 0;
    std::string prev_name;
    for (const auto& e : entries) {
        if (e.end > data_len)
            fail("{}: tensor {} needs data bytes [{}, {}) but the file holds only {} data bytes (truncated file)",
                 f, e.name, e.begin, e.end, data_len);
        if (e.begin < prev_end)
            fail("{}: tensors {} and {} overlap in the data section (corrupt file?)", f, prev_name, e.name);
        prev_end = e.end;
        prev_name = e.name;

        auto opts = at::TensorOptions().dtype(e.dtype);
        char* p = data + e.begin;
        at::Tensor t;
        if (e.begin == e.end) {
            t = at::empty(e.shape, opts);
        } else if (reinterpret_cast<std::uintptr_t>(p) % at::elementSize(e.dtype) == 0) {
            t = at::from_blob(p, e.shape, [keep = map](void*) {}, opts);
        } else {
            // Misaligned for its element type (odd header padding): copy out of the mapping.
            t = at::empty(e.shape, opts);
            std::memcpy(t.data_ptr(), p, e.end - e.begin);
        }
        out.tensors.emplace(e.name, std::move(t));
    }
    return out;
}

void save_safetensors(const fs::path& file, const TensorMap& tensors, const Metadata& metadata) {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata.empty()) {
        nlohmann::json m = nlohmann::json::object();
        for (const auto& [k, v] : metadata) m[k] = v;
        header["__metadata__"] = m;
    }
    std::vector<at::Tensor> host;
    std::uint64_t offset = 0;
    for (const auto& [name, t] : tensors) {
        if (!t.defined()) fail("{}: tensor {} is undefined", file.string(), name);
        if (name == "__metadata__") fail("{}: \"__metadata__\" cannot name a tensor", file.string());
        at::Tensor c = t.detach().to(at::kCPU).contiguous();
        const std::uint64_t bytes = c.numel() * c.element_size();
        header[name] = {{"dtype", safetensors_dtype_name(c.scalar_type())},
                        {"shape", c.sizes().vec()},
                        {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
        host.push_back(std::move(c));
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');  // keep the data 8-byte aligned

    fs::path tmp = file;
    tmp += ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) fail("{}: cannot create: {}", tmp.string(), errno_text(errno));
        char len[8];
        std::uint64_t n = h.size();
        for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
        out.write(len, 8);
        out.write(h.data(), static_cast<std::streamsize>(h.size()));
        for (const auto& c : host)
            out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
        out.flush();
        if (!out) fail("{}: write failed: {}", tmp.string(), errno_text(errno));
    }
    std::error_code ec;
    fs::rename(tmp, file, ec);
    if (ec) fail("{}: cannot rename {} over it: {}", file.string(), tmp.string(), ec.message());
}

TensorArchive TensorArchive::open(const fs::path& path) {
    TensorArchive a;
    a.where_ = path;
    auto add_file = [&](const fs::path& file) {
        auto st = read_safetensors(file);
        for (auto& [name, t] : st.tensors) {
            if (a.tensors_.count(name))
                fail("{}: tensor {} is also in {}", file.string(), name, a.files_[name].string());
            a.files_[name] = file;
            a.tensors_[name] = std::move(t);
        }
    };
    if (!fs::is_directory(path)) {
        if (!fs::exists(path)) fail("{}: no such file or directory", path.string());
        add_file(path);
        return a;
    }
    const fs::path index = path / "model.safetensors.index.json";
    if (fs::exists(index)) {
        std::ifstream in(index);
        if (!in) fail("{}: cannot open: {}", index.string(), errno_text(errno));
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception& e) {
            fail("{}: not valid JSON: {}", index.string(), e.what());
        }
        if (!j.contains("weight_map") || !j["weight_map"].is_object())
            fail("{}: no \"weight_map\" object (is this a safetensors index?)", index.string());
        std::map<std::string, std::string> wanted;
        std::vector<std::string> shards;
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it->is_string()) fail("{}: weight_map[\"{}\"] is not a file name", index.string(), it.key());
            wanted[it.key()] = it->get<std::string>();
            if (std::find(shards.begin(), shards.end(), it->get<std::string>()) == shards.end())
                shards.push_back(it->get<std::string>());
        }
        for (const auto& s : shards) {
            if (!fs::exists(path / s)) fail("{}: lists shard {} but {} does not exist", index.string(), s, (path / s).string());
            add_file(path / s);
        }
        for (const auto& [name, shard] : wanted)
            if (!a.tensors_.count(name) || a.files_[name] != path / shard)
                fail("{}: says tensor {} is in {}, but that file has no such tensor", index.string(), name, shard);
        a.where_ = index;  // a missing tensor is missing from the index: errors name it
        return a;
    }
    const fs::path single = path / "model.safetensors";
    if (!fs::exists(single))
        fail("{}: neither model.safetensors nor model.safetensors.index.json is there (is it a HF model directory?)",
             path.string());
    add_file(single);
    a.where_ = single;
    return a;
}

const at::Tensor& TensorArchive::get(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end())
        fail("{}: no tensor {} (is this checkpoint for the model its config.json describes?)", where_.string(), name);
    return it->second;
}

const at::Tensor& TensorArchive::get(const std::string& name, at::IntArrayRef expected_shape) const {
    const at::Tensor& t = get(name);
    if (t.sizes() != expected_shape)
        fail("{}: tensor {} has shape {}, but config.json implies {}", file_of(name).string(), name,
             shape_str(t.sizes()), shape_str(expected_shape));
    return t;
}

const fs::path& TensorArchive::file_of(const std::string& name) const {
    auto it = files_.find(name);
    return it == files_.end() ? where_ : it->second;
}

TensorMap load_safetensors(const fs::path& file_or_dir) { return TensorArchive::open(file_or_dir).tensors(); }

} // namespace hsring::model
