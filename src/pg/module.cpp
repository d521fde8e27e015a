// The library's entry: module magic and start-up registration.

#include "pg/storage/key_store.hpp"
#include "pg/keys/pending_claims.hpp"
#include "pg/settings.hpp"
#include "pg/streams/streams.hpp"

extern "C" {
PG_MODULE_MAGIC;

void _PG_init(void);
}

void _PG_init(void) {
    idem::pg::register_pending_claim_callbacks();
    idem::pg::define_key_store_settings();
    idem::pg::register_storage_maintenance();
    idem::pg::register_streams();
}
