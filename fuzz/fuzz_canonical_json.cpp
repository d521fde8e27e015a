// libFuzzer target: canonical JSON and fingerprints (src/core/fingerprint.*).
// Input: JSON text, optionally followed by a NUL byte and exclude paths separated by '\n'.
// Checks: only core::Error escapes; the canonical form is a fixed point (canonicalising it
// again, with the same excludes, changes nothing); fingerprint_json == sha256(canonical).
#include "core/error.hpp"
#include "core/fingerprint.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using namespace idem::core;

static std::vector<std::string> split_paths(std::string_view rest) {
    std::vector<std::string> paths;
    while (!rest.empty() && paths.size() < 64) {
        const std::size_t nl = rest.find('\n');
        paths.emplace_back(rest.substr(0, nl));
        if (nl == std::string_view::npos) break;
        rest.remove_prefix(nl + 1);
    }
    return paths;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    const std::string_view input(reinterpret_cast<const char *>(data), size);
    const std::size_t nul = input.find('\0');
    const std::string_view json = input.substr(0, nul);
    std::vector<std::string> exclude;
    if (nul != std::string_view::npos) exclude = split_paths(input.substr(nul + 1));

    std::string canonical;
    try {
        canonical = canonical_json(json, exclude);
    } catch (const Error &) {
        return 0;  // malformed or over a limit: a clean, documented refusal
    }
    if (canonical_json(canonical, exclude) != canonical) std::abort();
    if (canonical_json(canonical) != canonical) std::abort();  // excludes already applied
    if (fingerprint_json(json, exclude) != sha256(canonical)) std::abort();
    return 0;
}
