// Errors raised by the pure C++ core. The glue maps each kind to a SQLSTATE.
#pragma once

#include <stdexcept>
#include <string>

namespace idem::core {

enum class ErrorKind {
    InvalidParameter,  // a value outside its allowed range or form
    InvalidText,       // input text that does not parse (JSON, key, LSN)
    LimitExceeded,     // input too large or too deeply nested
};

class Error : public std::runtime_error {
  public:
    Error(ErrorKind kind, const std::string &message) : std::runtime_error(message), kind_(kind) {}
    ErrorKind kind() const noexcept { return kind_; }

  private:
    ErrorKind kind_;
};

}  // namespace idem::core
