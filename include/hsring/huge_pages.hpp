#pragma once
// Whether a shared-memory region lives on 2 MiB huge pages ([ring] huge_pages). Its own header so
// the shared-memory floor (src/shm, the ring, the ledger) needs nothing of the config.
namespace hsring {

enum class HugePages { Auto, Require, Off };

} // namespace hsring
