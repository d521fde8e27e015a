#include "core/block_allocator.hpp"

#include "core/error.hpp"

#include <string>

#include "core/no_postgres.hpp"

namespace idem::core {

void check_block_size(std::int64_t size) {
    if (size < 1 || size > kMaxBlockSize)
        throw Error(ErrorKind::InvalidParameter, "block must be between 1 and " +
                                                     std::to_string(kMaxBlockSize) + ", not " +
                                                     std::to_string(size));
}

Block next_block(std::int64_t reserved, std::int64_t size) {
    check_block_size(size);
    if (reserved < 0) throw Error(ErrorKind::InvalidParameter, "reserved bound is negative");
    if (reserved == kMaxStreamValue)
        throw Error(ErrorKind::LimitExceeded, "stream has handed out its largest value");
    std::int64_t last = kMaxStreamValue - reserved < size ? kMaxStreamValue : reserved + size;
    return Block{reserved + 1, last};
}

}  // namespace idem::core
