// Included last by every src/core .cpp file: the core must build without PostgreSQL.
#pragma once

#if defined(PG_VERSION_NUM) || defined(POSTGRES_H)
#error "src/core must not include PostgreSQL headers"
#endif
