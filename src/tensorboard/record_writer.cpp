// TFRecord framing (see record_writer.hpp). CRC-32C from Boost.CRC (header-only, reflected
// Castagnoli polynomial) rather than a hand-written table.
#include "tensorboard/record_writer.hpp"

#include "hsring/error.hpp"
#include "hsring/safe_file.hpp"

#include <boost/crc.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

namespace hsring::tensorboard {
namespace {

void put_le(std::string& out, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

} // namespace

std::uint32_t crc32c(std::string_view data) {
    boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
    crc.process_bytes(data.data(), data.size());
    return crc.checksum();
}

std::uint32_t masked_crc32c(std::string_view data) {
    const std::uint32_t c = crc32c(data);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(std::string_view data) {
    std::string out;
    out.reserve(data.size() + 16);
    put_le(out, data.size(), 8);
    put_le(out, masked_crc32c(std::string_view(out.data(), 8)), 4);
    out.append(data);
    put_le(out, masked_crc32c(data), 4);
    return out;
}

RecordWriter::RecordWriter(const std::filesystem::path& file) : path_(file) {
    fd_ = safe::open_file(file, O_WRONLY | O_CREAT | O_APPEND).release();
}

RecordWriter::~RecordWriter() {
    if (fd_ >= 0) ::close(fd_);
}

void RecordWriter::write(std::string_view data) {
    const std::string rec = frame_record(data);
    if (::write(fd_, rec.data(), rec.size()) != static_cast<ssize_t>(rec.size()))
        fail("cannot append to the TensorBoard event file {}: {}", path_.string(), errno_text(errno));
}

} // namespace hsring::tensorboard
