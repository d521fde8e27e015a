#!/usr/bin/env python3
"""Runs the code blocks of the documentation against a running cluster (the `docs` suite).

    run_snippets.py --python VENV/bin/python --node-app DIR FILE.md...

Every fenced block whose language is sql, python, js / javascript / mjs (```js commonjs: a
CommonJS file), sh / bash runs (```python file=~/shop/app.py: saved there too, as the page
tells the reader to, for a later shell block that starts it as a server),
unless it is marked as a fragment: the info string says so (```sql fragment) or the line
before the fence is an HTML comment starting with "fragment" (<!-- fragment: why -->).
Blocks of another language (ini, text, none: configuration, logs, output) are not code.

Hidden blocks in HTML comments make a page's examples runnable without showing the scaffold:
    <!-- setup LANG        runs on its own where it stands (never a table or role the examples
                          use: a reader needs those, so a page shows them; such a setup fails)
    <!-- prelude LANG      is put before the next visible block of LANG (psql variables)
    <!-- check LANG        is put after the previous visible block of LANG (calls what it
    ...                    defined, asserts what it printed)
    -->
A page that documents the managed edition asks for a server that cannot load the library:
    <!-- server: managed database=app owner=admin -->
anywhere in the page. Its blocks then run on the managed suite's copy of the server (pg_tle
built in, no file of the extension: test/docs/managed_server.sh, started on the first such
page), in database `database`, owned by `owner` (a login role with CREATEROLE, not a
superuser) that installed the edition with psql -1 -f; each block as `owner`, or as the role a
line <!-- as ROLE --> right before its fence names. The roles the page creates are dropped
after it, with its database.

Each page gets a fresh database with the extension (PGDATABASE for every block); blocks run
in page order, each in its own process: sql through psql (ON_ERROR_STOP), python with
--python, js as an ES module inside --node-app (so its imports resolve), sh with bash -e in
the repository root with HOME in a scratch folder (and the demo cluster's address and port
3000 replaced with the test cluster's and --port). PORT is --port for every block. IDEM_DOCS_RESTART, passed on to every block,
is the command that restarts the cluster (test/docs/restart.sh fast|immediate): checks use it
to see a server example keep serving through a restart. Prints one line per block; exits 1
when any block failed, naming FILE:LINE.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

LANGS = {"sql": "sql", "python": "python", "py": "python", "js": "js", "javascript": "js",
         "mjs": "js", "sh": "sh", "bash": "sh", "shell": "sh"}
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^`]*)$")
HIDDEN = re.compile(r"^<!--\s*(setup|prelude|check)\s+(\w+)\s*$")
FRAGMENT = re.compile(r"^<!--\s*fragment\b.*-->\s*$")
AS_ROLE = re.compile(r"^<!--\s*as\s+([a-z_][a-z0-9_]*)\s*-->\s*$")
MANAGED = re.compile(r"^<!--\s*server:\s*managed\s+database=([a-z_][a-z0-9_]*)"
                     r"\s+owner=([a-z_][a-z0-9_]*)\s*-->\s*$")
DEMO_PORT = 54329  # scripts/demo.sh's cluster
BLOCK_TIMEOUT = int(os.environ.get("IDEM_DOCS_BLOCK_TIMEOUT", "120"))


@dataclass
class Block:
    path: str
    line: int  # of the opening fence (or of the hidden block's comment)
    lang: str  # sql, python, js, sh; '' when not code
    code: str
    fragment: bool = False
    commonjs: bool = False  # ```js commonjs: run as a CommonJS file
    file: str = ""  # ```python file=~/shop/app.py: saved there (~: the blocks' HOME) too
    hidden: str = ""  # setup / prelude / check
    role: str = ""  # <!-- as ROLE -->: PGUSER for the block (a managed page's)
    before: list = field(default_factory=list)
    after: list = field(default_factory=list)


def parse(path):
    """The blocks of one Markdown file, hidden preludes and checks attached to their block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, i, prev = [], 0, ""
    while i < len(lines):
        line = lines[i]
        hidden = HIDDEN.match(line.strip())
        fence = FENCE.match(line)
        if hidden:
            end = i + 1
            while end < len(lines) and lines[end].strip() != "-->":
                end += 1
            if end == len(lines):
                sys.exit(f"{path}:{i + 1}: hidden block without its closing -->")
            lang = LANGS.get(hidden.group(2))
            if not lang:
                sys.exit(f"{path}:{i + 1}: hidden block of unknown language {hidden.group(2)}")
            blocks.append(Block(path, i + 1, lang, "\n".join(lines[i + 1:end]) + "\n",
                                hidden=hidden.group(1)))
            i = end + 1
            continue
        if fence:
            indent, marker, info = fence.groups()
            words = info.split()
            end = i + 1
            while end < len(lines) and not lines[end].strip().startswith(marker):
                end += 1
            body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip()
                    for ln in lines[i + 1:end]]
            lang = LANGS.get(words[0].lower(), "") if words else ""
            fragment = "fragment" in words[1:] or bool(FRAGMENT.match(prev.strip()))
            file = next((w[5:] for w in words[1:] if w.startswith("file=")), "")
            role = AS_ROLE.match(prev.strip())
            blocks.append(Block(path, i + 1, lang, "\n".join(body) + "\n", fragment=fragment,
                                commonjs="commonjs" in words[1:], file=file,
                                role=role.group(1) if role else ""))
            i = end + 1
            prev = ""
            continue
        if line.strip():
            prev = line
        i += 1
    # Attach preludes to the next visible block of their language, checks to the previous one.
    result = []
    for n, b in enumerate(blocks):
        if b.hidden == "prelude":
            nxt = next((x for x in blocks[n + 1:] if not x.hidden and x.lang == b.lang), None)
            if nxt is None or nxt.fragment:
                sys.exit(f"{path}:{b.line}: prelude {b.lang} without a runnable block after it")
            nxt.before.append(b.code)
        elif b.hidden == "check":
            last = next((x for x in reversed(result) if not x.hidden and x.lang == b.lang), None)
            if last is None or last.fragment:
                sys.exit(f"{path}:{b.line}: check {b.lang} without a runnable block before it")
            last.after.append(b.code)
        else:
            result.append(b)
    return result


def page_server(path):
    """(database, owner) of a page that asks for the managed server, else None."""
    for line in open(path, encoding="utf-8"):
        m = MANAGED.match(line.strip())
        if m:
            return m.group(1), m.group(2)
    return None


def psql(*args, db="postgres", env=None):
    return subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db, *args],
                          capture_output=True, text=True, env=env)


class ManagedServer:
    """test/docs/managed_server.sh's cluster: started on first use, stopped at the end."""

    def __init__(self, root):
        self.script = os.path.join(root, "test/docs/managed_server.sh")
        self.env = None

    def start(self):
        if self.env is None:
            r = subprocess.run(["bash", self.script, "start"], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"the managed server did not start: {r.stderr.strip()}")
            sock, port, _ = r.stdout.split("\n")[-2].split()
            self.env = dict(os.environ, PGHOST=sock, PGPORT=port, PGUSER="postgres")
        return self.env

    def stop(self):
        if self.env is not None:
            subprocess.run(["bash", self.script, "stop"], capture_output=True, text=True)


def managed_database(root, env, db, owner):
    """db on the managed server, owned by owner, with the edition installed by owner with
    psql -f; the roles that exist before it (those the page creates are dropped after it)."""
    r = psql("-At", "-c", "SELECT count(*) FROM pg_available_extensions WHERE name = 'idempotency'",
             env=env)
    if r.returncode != 0 or r.stdout.strip() != "0":
        raise RuntimeError(f"the managed server offers the extension: {r.stdout}{r.stderr}")
    before = set(psql("-At", "-c", "SELECT rolname FROM pg_roles", env=env).stdout.split())
    version = re.search(r"^default_version = '(.*)'$",
                        open(os.path.join(root, "idempotency.control")).read(), re.M).group(1)
    r = psql("-c", "SET client_min_messages = warning",
             "-c", f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)',
             "-c", f'CREATE ROLE "{owner}" LOGIN CREATEROLE NOSUPERUSER',
             "-c", f'CREATE DATABASE "{db}" OWNER "{owner}"', env=env)
    if r.returncode == 0:
        r = psql("-U", owner, "-1", "-f",
                 os.path.join(root, f"editions/managed/idempotency--{version}.sql"), db=db, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"no database {db} with the managed edition: {r.stderr.strip()}")
    return before


def drop_roles_since(env, before):
    """Drops the roles made since `before` (the page's), the members first; errors, if any."""
    now = psql("-At", "-c", "SELECT rolname FROM pg_roles ORDER BY oid DESC", env=env).stdout.split()
    errors = ""
    for role in (r for r in now if r not in before):
        errors += psql("-c", f'DROP ROLE "{role}"', env=env).stderr
    return errors.strip()


def fresh_database(db):
    r = psql("-c", "SET client_min_messages = warning",
             "-c", f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)', "-c", f'CREATE DATABASE "{db}"')
    if r.returncode == 0:
        r = psql("-c", "CREATE EXTENSION idempotency", db=db)
    if r.returncode != 0:
        sys.exit(f"could not create database {db}: {r.stderr}")


# Shell that changes the machine (packages, the system's PostgreSQL, the demo cluster) never
# runs here: such a block must be marked as a fragment.
SYSTEM_CHANGE = re.compile(r"\b(sudo|apt-get|apt|make( [^\n]*)? install|scripts/demo\.sh)\b")


# What a reader must see to run the examples: a hidden setup that makes a table or a role is
# hidden setup the reader does not have.
READER_NEEDS = re.compile(r"\bCREATE\s+(?:(?:UNLOGGED|TEMP|TEMPORARY|GLOBAL|LOCAL)\s+)*"
                          r"(TABLE|ROLE|USER)\b", re.I)


def run_block(b, db, args, scratch, n, server=None, owner=None):
    code = "".join(b.before) + b.code + "".join(b.after)
    if b.hidden == "setup" and READER_NEEDS.search(code):
        return "refused", (f"a hidden setup makes a {READER_NEEDS.search(code).group(1).upper()}"
                           " the examples need: show it in the page")
    if b.lang == "sh" and SYSTEM_CHANGE.search(code):
        return "refused", (f"it changes the machine ({SYSTEM_CHANGE.search(code).group(0)}):"
                           " mark it as a fragment")
    # HOME is a scratch folder (blocks write ~/venvs/app, ~/my-app), npm's cache stays the
    # user's own: lock-file installs come from it.
    env = dict(server or os.environ, PGDATABASE=db, HOME=os.path.join(scratch, "home"),
               PORT=str(args.port), PIP_NO_INDEX="1")
    if owner:
        env["PGUSER"] = b.role or owner
    env.setdefault("npm_config_cache", os.path.join(os.path.expanduser("~"), ".npm"))
    if b.file:
        saved = os.path.join(env["HOME"], b.file[2:]) if b.file.startswith("~/") else \
            os.path.join(scratch, b.file)
        os.makedirs(os.path.dirname(saved), exist_ok=True)
        with open(saved, "w", encoding="utf-8") as f:
            f.write(b.code)
    if b.lang == "sql":
        file = os.path.join(scratch, f"block{n}.sql")
        cmd, cwd = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", file], scratch
    elif b.lang == "python":
        file = os.path.join(scratch, f"block{n}.py")
        cmd, cwd = [args.python, file], scratch
    elif b.lang == "js":
        # Inside the app folder, so that imports of pg, express and the client resolve; an ES
        # module unless the info string says commonjs.
        ext = "cjs" if b.commonjs else "mjs"
        file = os.path.join(args.node_app, f".snippet-{os.getpid()}-{n}.{ext}")
        cmd, cwd = ["node", file], args.node_app
    else:
        # Shell blocks talk to the demo cluster of scripts/demo.sh and serve on port 3000:
        # here the test cluster and a port of this run's range stand in for them.
        for demo, here in ((f"/tmp/idempotency-{DEMO_PORT}", env["PGHOST"]),
                           (str(DEMO_PORT), env["PGPORT"]), ("3000", str(args.port)),
                           ("PGDATABASE=postgres", f"PGDATABASE={db}")):
            code = re.sub(r"(?<![\w/.-])" + re.escape(demo) + r"(?!\w)", here, code)
        file = os.path.join(scratch, f"block{n}.sh")
        cmd, cwd = ["bash", "-e", "-o", "pipefail", file], args.root
    with open(file, "w", encoding="utf-8") as f:
        f.write(code)
    # Its own process group: a server a shell block left in the background ends with it. The
    # output goes to a file, so such a server cannot hold the block open.
    log = os.path.join(scratch, f"block{n}.out")
    with open(log, "w+", encoding="utf-8") as out_file:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out_file,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = "timeout"
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        out_file.seek(0)
        out = out_file.read()
    if rc == "timeout":
        out += f"\n(no end after {BLOCK_TIMEOUT} s)"
    if b.lang == "js":
        os.unlink(file)
    return rc, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True)
    ap.add_argument("--node-app", required=True)
    ap.add_argument("--root", default=os.getcwd())
    ap.add_argument("--port", type=int,  # PORT for the servers the examples start
                    default=20000 + int(os.environ.get("IDEM_PORT_OFFSET", "0")) + 80)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    args.node_app = os.path.abspath(args.node_app)
    passed = failed = fragments = 0
    managed = ManagedServer(args.root)
    try:
        for path in args.files:
            p, f, n = run_page(path, args, managed)
            passed, failed, fragments = passed + p, failed + f, fragments + n
    finally:
        managed.stop()
    print(f"docs snippets: {passed} passed, {failed} failed, {fragments} fragments not run")
    sys.exit(1 if failed else 0)


def run_page(path, args, managed):
    """Runs one page's blocks: (passed, failed, fragments)."""
    passed = failed = 0
    blocks = [b for b in parse(path) if b.lang]
    runnable = [b for b in blocks if not b.fragment]
    fragments = len(blocks) - len(runnable)
    if not runnable:
        return 0, 0, fragments
    server = owner = roles_before = None
    if page_server(path):
        db, owner = page_server(path)
        try:
            server = managed.start()
            roles_before = managed_database(args.root, server, db, owner)
        except RuntimeError as e:
            print(f"FAILED {path}: {e}")
            return 0, 1, fragments
    else:
        slug = re.sub(r"[^a-z0-9]+", "_", os.path.relpath(path, args.root).lower()).strip("_")
        db = "docs_" + slug
        fresh_database(db)
    scratch = tempfile.mkdtemp(prefix="idem-docs-")
    os.mkdir(os.path.join(scratch, "home"))
    try:
        for n, b in enumerate(runnable):
            rc, out = run_block(b, db, args, scratch, n, server, owner)
            where = f"{path}:{b.line}"
            what = f"{b.hidden + ' ' if b.hidden else ''}{b.lang}"
            if rc == 0:
                passed += 1
                print(f"ok     {where} ({what})")
            else:
                failed += 1
                print(f"FAILED {where} ({what}, exit {rc}):")
                print("    " + out.rstrip().replace("\n", "\n    "))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    # A page that leaves something behind (a replication slot) fails here.
    r = psql("-c", f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)', env=server)
    if r.returncode != 0:
        failed += 1
        print(f"FAILED {path}: its database {db} could not be dropped:\n    {r.stderr.strip()}")
    elif server:
        errors = drop_roles_since(server, roles_before)
        if errors:
            failed += 1
            print(f"FAILED {path}: the roles it made could not be dropped:\n    {errors}")
    return passed, failed, fragments


if __name__ == "__main__":
    main()
