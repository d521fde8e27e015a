#include "pg/shared_memory.hpp"

#include "pg/guard.hpp"

extern "C" {
#include "storage/ipc.h"
#include "storage/lwlock.h"
}

namespace idem::pg {

namespace {

constexpr int kMaxParts = 8;
struct Part {
    void (*request)() noexcept;  // nullptr (with startup): a plain struct, below
    void (*startup)() noexcept;
    const char *name;
    Size size;
    void **where;
    void (*init)(bool found) noexcept;
};
Part parts[kMaxParts];
int n_parts = 0;

shmem_request_hook_type prev_request = nullptr;
shmem_startup_hook_type prev_startup = nullptr;

void request_all() noexcept {
    if (prev_request) prev_request();
    for (int i = 0; i < n_parts; i++) {
        if (parts[i].request != nullptr)
            parts[i].request();
        else
            RequestAddinShmemSpace(MAXALIGN(parts[i].size));
    }
}

void startup_all() noexcept {
    if (prev_startup) prev_startup();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    for (int i = 0; i < n_parts; i++) {
        Part &part = parts[i];
        if (part.startup != nullptr) {
            part.startup();
            continue;
        }
        bool found;
        *part.where = ShmemInitStruct(part.name, part.size, &found);
        part.init(found);
    }
    LWLockRelease(AddinShmemInitLock);
}

void add_part(const Part &part) noexcept {
    if (!process_shared_preload_libraries_in_progress) return;
    if (n_parts == kMaxParts) elog(ERROR, "idempotency: too many shared memory parts");
    if (n_parts == 0) {
        prev_request = shmem_request_hook;
        shmem_request_hook = pg_callback(request_all);
        prev_startup = shmem_startup_hook;
        shmem_startup_hook = pg_callback(startup_all);
    }
    parts[n_parts++] = part;
}

}  // namespace

void add_shared_memory(void (*request)() noexcept, void (*startup)() noexcept) noexcept {
    add_part(Part{request, startup, nullptr, 0, nullptr, nullptr});
}

void add_shared_struct(const char *name, Size size, void **where,
                       void (*init)(bool found) noexcept) noexcept {
    add_part(Part{nullptr, nullptr, name, size, where, init});
}

}  // namespace idem::pg
