// SPI glue shared by every caller: the connect check and the failure report.
#pragma once

#include "pg/postgres_headers.hpp"

namespace idem::pg {

// SPI_connect, or an error.
void spi_connect() noexcept;

// Raises "idempotency: WHAT failed: <SPI result>" unless rc is `expected`.
void spi_check(int rc, int expected, const char *what) noexcept;

}  // namespace idem::pg
