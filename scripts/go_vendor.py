#!/usr/bin/env python3
"""Writes MODULE/vendor for an offline build in module mode (go build -mod=vendor).

    python3 scripts/go_vendor.py MODULE-DIR [GOCODE-DIR]

Every package of every module MODULE-DIR/go.mod requires gets a folder in MODULE-DIR/vendor of
links to its files: from its replace directive's folder when it has one, else from its source in
GOCODE-DIR (/usr/share/gocode/src,
where Debian's golang-*-dev packages put them). vendor/modules.txt lists each module with the
version go.mod requires, as `go mod vendor` writes it, so the go command checks the folder
against go.mod and loads every package from it: no module proxy, no module cache, no go.sum.
A module that is neither replaced nor in GOCODE-DIR is an error naming the Debian package to
install.
"""
import os
import re
import shutil
import sys


def parse_go_mod(path):
    """(requires, replaces): [(module, version)], {module: target}."""
    requires, replaces = [], {}
    block = None
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("//", 1)[0].strip()
            if not line:
                continue
            if block:
                if line == ")":
                    block = None
                    continue
                words = [block] + line.split()
            else:
                m = re.match(r"^(require|replace)\s*\($", line)
                if m:
                    block = m.group(1)
                    continue
                words = line.split()
            if words[0] == "require":
                requires.append((words[1], words[2]))
            elif words[0] == "replace":
                arrow = words.index("=>")
                replaces[words[1]] = words[arrow + 1]
    return requires, replaces


def go_version(module_dir):
    try:
        with open(os.path.join(module_dir, "go.mod"), encoding="utf-8") as f:
            for line in f:
                m = re.match(r"^go\s+(\S+)", line)
                if m:
                    return m.group(1)
    except FileNotFoundError:
        pass
    return None


def source_of(gocode, module):
    """The folder of module's sources in gocode, or None. A major version's module
    (github.com/labstack/echo/v4) may be packaged without its /vN folder; its go.mod names it."""
    source = os.path.join(gocode, module)
    if os.path.isdir(source):
        return source
    m = re.match(r"^(.+)/v[0-9]+$", module)
    if m:
        bare = os.path.join(gocode, m.group(1))
        try:
            with open(os.path.join(bare, "go.mod"), encoding="utf-8") as f:
                if re.search(r"^module\s+" + re.escape(module) + r"\s*$", f.read(), re.M):
                    return bare
        except FileNotFoundError:
            pass
    return None


def packages(module, root):
    """The module's importable packages: folders with non-test .go files, nested modules,
    testdata and hidden folders left out."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(
            d for d in dirnames
            if d not in ("testdata", "vendor") and not d.startswith((".", "_"))
            and not os.path.exists(os.path.join(dirpath, d, "go.mod")))
        if any(n.endswith(".go") and not n.endswith("_test.go") for n in filenames):
            found.append(module if rel == "." else module + "/" + rel.replace(os.sep, "/"))
    return sorted(found)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    module_dir = os.path.abspath(sys.argv[1])
    gocode = sys.argv[2] if len(sys.argv) == 3 else "/usr/share/gocode/src"
    requires, replaces = parse_go_mod(os.path.join(module_dir, "go.mod"))
    vendor = os.path.join(module_dir, "vendor")
    shutil.rmtree(vendor, ignore_errors=True)
    lines = []
    for module, version in requires:
        target = replaces.get(module)
        if target is not None:
            source = os.path.normpath(os.path.join(module_dir, target))
            lines.append(f"# {module} {version} => {target}")
        else:
            source = source_of(gocode, module)
            if source is None:
                sys.exit(f"go_vendor: {module} is not in {gocode} (install its Debian package, "
                         f"golang-{module.split('/', 1)[-1].replace('/', '-').lower()}-dev or similar)")
            lines.append(f"# {module} {version}")
        gv = go_version(source)
        lines.append("## explicit" + (f"; go {gv}" if gv else ""))
        pkgs = packages(module, source)
        lines.extend(pkgs)
        # Each package's folder holds links to its files (a module's nested modules, such as
        # the client's pgxv4 adapter, and this very folder stay out).
        for pkg in pkgs:
            src_dir = os.path.join(source, pkg[len(module):].lstrip("/"))
            dst_dir = os.path.join(vendor, pkg)
            os.makedirs(dst_dir, exist_ok=True)
            for name in os.listdir(src_dir):
                if os.path.isfile(os.path.join(src_dir, name)) and not name.endswith("_test.go"):
                    os.symlink(os.path.join(src_dir, name), os.path.join(dst_dir, name))
    for module, target in replaces.items():
        lines.append(f"# {module} => {target}")
    with open(os.path.join(vendor, "modules.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
