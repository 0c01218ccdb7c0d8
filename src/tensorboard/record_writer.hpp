#pragma once
// TFRecord framing, the container of TensorBoard's event files: per record
//
//   uint64 length (little endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
//
// masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 with crc the CRC-32C (Castagnoli)
// of x. TensorBoard's reader checks both CRCs and stops at a record that fails them, so a record
// half-written by a killed process ends the readable file there and costs nothing else.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace hsring::tensorboard {

// CRC-32C of `data`, and its masked form as TFRecord stores it.
std::uint32_t crc32c(std::string_view data);
std::uint32_t masked_crc32c(std::string_view data);

// `data` framed as one record.
std::string frame_record(std::string_view data);

// Appends records to one file, created (never through a link) if missing. Each record is one
// write(2): a reader never sees half a record unless the writer died inside that call.
class RecordWriter {
public:
    explicit RecordWriter(const std::filesystem::path& file);
    ~RecordWriter();
    RecordWriter(const RecordWriter&) = delete;
    RecordWriter& operator=(const RecordWriter&) = delete;

    void write(std::string_view data);
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
    int fd_ = -1;
};

} // namespace hsring::tensorboard
