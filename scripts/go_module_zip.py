#!/usr/bin/env python3
"""Writes a Go module version into a GOPROXY file tree (the module proxy protocol's layout):

    python3 scripts/go_module_zip.py PROXY-DIR MODULE-PATH VERSION SOURCE-DIR

PROXY-DIR/<module>/@v/ gets list, VERSION.info, VERSION.mod and VERSION.zip (the files of
SOURCE-DIR that git knows, under "<module>@<version>/", nested modules and vendor folders left
out). `GOPROXY=file://PROXY-DIR GOFLAGS=-mod=mod GONOSUMDB=<module>` then resolves the module
offline, as a user's go command would from the published tag.
"""
import json
import os
import subprocess
import sys
import zipfile


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    proxy, module, version, source = sys.argv[1:]
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z", "."], cwd=source,
                           check=True, capture_output=True).stdout.decode().split("\0")
    nested = {os.path.dirname(f) for f in files if f.endswith("/go.mod")}
    chosen = sorted(
        f for f in files
        if f and os.path.isfile(os.path.join(source, f)) and "vendor/" not in f
        and not any(f == d or f.startswith(d + "/") for d in nested))
    out = os.path.join(proxy, module.lower(), "@v")
    os.makedirs(out, exist_ok=True)
    with zipfile.ZipFile(os.path.join(out, version + ".zip"), "w", zipfile.ZIP_DEFLATED) as z:
        for f in chosen:
            z.write(os.path.join(source, f), f"{module}@{version}/{f}")
    with open(os.path.join(source, "go.mod"), "rb") as src, \
            open(os.path.join(out, version + ".mod"), "wb") as dst:
        dst.write(src.read())
    with open(os.path.join(out, version + ".info"), "w", encoding="utf-8") as f:
        json.dump({"Version": version}, f)
    with open(os.path.join(out, "list"), "a", encoding="utf-8") as f:
        f.write(version + "\n")


if __name__ == "__main__":
    main()
