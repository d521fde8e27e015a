// The library's entry: module magic and start-up registration.

#include "pg/storage/key_store.hpp"
#include "pg/fault_points.hpp"
#include "pg/keys/pending_claims.hpp"
#include "pg/settings.hpp"
#include "pg/streams/streams.hpp"

extern "C" {
PG_MODULE_MAGIC;

void _PG_init(void);
}

namespace {

// What _PG_init does; noexcept like every function PostgreSQL calls (guard.hpp).
void register_library() noexcept {
#if defined(IDEM_OWN_FAULT_POINTS)
    idem::pg::define_fault_points_setting();
#endif
    idem::pg::register_pending_claim_callbacks();
    idem::pg::define_key_store_settings();
    idem::pg::register_storage_maintenance();
    idem::pg::register_streams();
}

}  // namespace

void _PG_init(void) {
    register_library();
}
