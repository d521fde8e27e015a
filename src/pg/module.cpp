// The library's entry: module magic and start-up registration.

#include "pg/pending_claims.hpp"

extern "C" {
PG_MODULE_MAGIC;

void _PG_init(void);
}

void _PG_init(void) { idem::pg::register_pending_claim_callbacks(); }
