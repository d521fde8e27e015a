#include "pg/spi.hpp"

namespace idem::pg {

void spi_connect() noexcept {
    int rc = SPI_connect();
    if (rc != SPI_OK_CONNECT)
        elog(ERROR, "idempotency: SPI_connect failed: %s", SPI_result_code_string(rc));
}

void spi_check(int rc, int expected, const char *what) noexcept {
    if (rc != expected) elog(ERROR, "idempotency: %s failed: %s", what, SPI_result_code_string(rc));
}

}  // namespace idem::pg
