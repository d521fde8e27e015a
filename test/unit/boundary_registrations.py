#!/usr/bin/env python3
"""Every function the glue hands to PostgreSQL to call is noexcept (src/pg/guard.hpp, rule 5).

pg_callback() makes that a compile-time check, but only where it is used. This test reads
every registration in src/pg (the statements that pass a function to PostgreSQL: Register*Callback,
CacheRegister*Callback, *_hook =, an output plugin's cb->*_cb =, on_shmem_exit and friends,
pqsignal) and fails for any whose function is not wrapped in pg_callback(), unless it is one of
PostgreSQL's own functions (listed below). Background worker entry points, named by string
in bgw_function_name, must be declared noexcept.

  boundary_registrations.py SRC_PG_DIR     check the tree (what ctest runs)
  boundary_registrations.py --self-test    check the checker against known good and bad code
"""
import pathlib
import re
import sys

# Statements that register a function for PostgreSQL to call.
REGISTRATION = re.compile(
    r"\b(?:Cache)?Register\w*Callback\s*\("
    r"|\b\w+_hook\s*=(?!=)"
    r"|->\s*\w+_cb\s*=(?!=)"
    r"|\b(?:on_proc_exit|before_shmem_exit|on_shmem_exit|pqsignal)\s*\("
)
# PostgreSQL's own functions (and signal dispositions): C code, which never throws.
POSTGRES_FUNCTIONS = {
    "SignalHandlerForConfigReload",
    "SignalHandlerForShutdownRequest",
    "SignalHandlerForCrashExit",
    "StatementCancelHandler",
    "procsignal_sigusr1_handler",
    "die",
    "SIG_IGN",
    "SIG_DFL",
}
WORKER_ENTRY = re.compile(r'bgw_function_name\s*,\s*"(\w+)"')


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def statements(text):
    """(line number, statement) for each statement (up to its ';') that registers a function."""
    for match in REGISTRATION.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find(";", match.end())
        yield text.count("\n", 0, match.start()) + 1, " ".join(text[start:end + 1].split())


def is_wrapped(statement):
    if "pg_callback(" in statement:
        return True
    if re.search(r"\b\w+_hook\s*=(?!=)", statement):
        # Putting back the hook that was there before (saved earlier) registers nothing new.
        value = statement.split("=", 1)[1].strip(" ;")
        if re.fullmatch(r"prev_\w+|\w+_prev|nullptr|NULL", value):
            return True
    names = set(re.findall(r"\b\w+\b", statement))
    return bool(names & POSTGRES_FUNCTIONS)


def check(files):
    """Returns (problems, number of registrations seen)."""
    problems, seen = [], 0
    sources = {path: strip_comments(text) for path, text in files.items()}
    everything = "\n".join(sources.values())
    for path, text in sorted(sources.items()):
        for line, statement in statements(text):
            seen += 1
            if not is_wrapped(statement):
                problems.append(f"{path}:{line}: registered without pg_callback(): {statement}")
        for match in WORKER_ENTRY.finditer(text):
            seen += 1
            name = match.group(1)
            if not re.search(r"\b" + name + r"\s*\([^)]*\)\s*noexcept\b", everything):
                line = text.count("\n", 0, match.start()) + 1
                problems.append(f"{path}:{line}: background worker entry {name} is not "
                                "declared noexcept")
    return problems, seen


def self_test():
    good = {
        "a.cpp": """
            void f(Datum, int, uint32) noexcept {}
            CacheRegisterSyscacheCallback(PROCOID, pg_callback(f), (Datum)0);
            RegisterXactCallback(pg_callback(g),
                                 nullptr);
            prev = shmem_startup_hook;
            shmem_startup_hook = pg_callback(startup_all);
            if (shmem_startup_hook == nullptr) {}
            cb->change_cb = idem::pg::pg_callback(on_change);
            pqsignal(SIGHUP, SignalHandlerForConfigReload);
            on_shmem_exit(pg_callback(save), (Datum)0);
            // CacheRegisterSyscacheCallback(PROCOID, forgotten, 0);  a comment
            strlcpy(w.bgw_function_name, "idem_main", BGW_MAXLEN);
            void idem_main(Datum) noexcept;
        """,
    }
    bad = [
        "CacheRegisterSyscacheCallback(PROCOID, forget_shard_function, (Datum)0);",
        "CacheRegisterRelcacheCallback(\n    forget, (Datum)0);",
        "RegisterSubXactCallback(on_sub, nullptr);",
        "shmem_startup_hook = startup_all;",
        "cb->commit_cb = on_commit;",
        "before_shmem_exit(cleanup, 0);",
        "pqsignal(SIGTERM, my_handler);",
        'strlcpy(w.bgw_function_name, "idem_main", BGW_MAXLEN);\nvoid idem_main(Datum) {}',
    ]
    failures = []
    problems, seen = check(good)
    if problems or seen != 7:
        failures.append(f"good code: {seen} registrations (7 expected), problems {problems}")
    for snippet in bad:
        problems, _ = check({"b.cpp": snippet})
        if len(problems) != 1:
            failures.append(f"not flagged exactly once: {snippet!r} -> {problems}")
    return failures


def main(argv):
    if argv[1:] == ["--self-test"]:
        failures = self_test()
        for f in failures:
            print("FAIL", f)
        print("self-test:", "failed" if failures else "ok")
        return 1 if failures else 0
    if len(argv) != 2:
        print(__doc__)
        return 2
    root = pathlib.Path(argv[1])
    files = {str(p.relative_to(root.parent)): p.read_text()
             for p in sorted(root.rglob("*")) if p.suffix in (".cpp", ".hpp")}
    problems, seen = check(files)
    for p in problems:
        print(p)
    if seen == 0:
        print(f"no registration found under {root}: the pattern or the path is wrong")
        return 1
    print(f"{seen} registrations checked, {len(problems)} without pg_callback()/noexcept")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
